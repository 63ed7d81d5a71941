"""What the webhook tests share: registering a webhook process with the API server, pods and placements to create."""

from __future__ import annotations

import uuid
from typing import Any

from kubernetes import client

from sandbox.cluster import Sandbox, wait_for
from sandbox.webhook import Webhook, configuration

GROUP, VERSION, PLURAL = "scheduling.hami.placement.com", "v1", "hamipodplacements"
A100_1 = "gpu-a100-1"


def sees_placement(webhook: Webhook, namespace: str, name: str) -> bool:
    """Whether the webhook's cache lists that placement yet."""
    status, body = webhook.get(f"/api/v1/placements?namespace={namespace}")
    return status == 200 and any(p["name"] == name for p in body["placements"])


def register(
    cluster: Sandbox, configurations: list[str], namespace: str, hooks: list[tuple[Webhook, dict[str, Any]]]
) -> None:
    """One MutatingWebhookConfiguration for the namespace; each webhook with its own objectSelector."""
    name = f"hami-place-test-{namespace}-{len(configurations)}"
    body = configuration(name, hooks, {"matchLabels": {"hami-place-test": namespace}})
    client.AdmissionregistrationV1Api(cluster.api_client()).create_mutating_webhook_configuration(body)
    configurations.append(name)
    core = client.CoreV1Api(cluster.api_client())
    for webhook, object_selector in hooks:
        labels = dict(object_selector.get("matchLabels") or {})

        def called(webhook: Webhook = webhook, labels: dict[str, str] = labels) -> bool:
            before = total_admissions(webhook)
            core.create_namespaced_pod(namespace, gpu_pod("probe-", {**labels, "probe": "yes"}), dry_run="All")
            return total_admissions(webhook) > before

        wait_for(called, "the API server to call the new webhook")


def total_admissions(webhook: Webhook) -> float:
    return sum(
        webhook.metric(f'hami_place_admissions_total{{result="{result}"}}')
        for result in ("ignored", "no_placement", "pinned", "reinvoked", "not_honoured", "dry_run", "error")
    )


def gpu_pod(generate_name: str, labels: dict[str, str], *, gpus: int = 1, name: str = "") -> dict[str, Any]:
    metadata: dict[str, Any] = {"labels": labels}
    if name:
        metadata["name"] = name
    else:
        metadata["generateName"] = generate_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "schedulerName": "hami-scheduler",
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {"name": "main", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
            ],
        },
    }


def create_placement(
    cluster: Sandbox,
    namespace: str,
    name: str,
    selector: dict[str, str],
    devices: list[str],
    *,
    node: str = A100_1,
    evict: str = "",
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "reqID": f"req-{name}-{uuid.uuid4().hex[:6]}",
        "podSelector": {"matchLabels": selector},
        "nodeName": node,
        "gpuDevices": devices,
    }
    if evict:
        spec["evictPod"] = evict
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "HamiPodPlacement",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
    created: dict[str, Any] = client.CustomObjectsApi(cluster.api_client()).create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, body
    )
    return created


def read_placement(cluster: Sandbox, namespace: str, name: str) -> dict[str, Any]:
    result: dict[str, Any] = client.CustomObjectsApi(cluster.api_client()).get_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, name
    )
    return result


def status_of(cluster: Sandbox, namespace: str, name: str) -> dict[str, Any]:
    return read_placement(cluster, namespace, name).get("status") or {}


def events_of(cluster: Sandbox, namespace: str, name: str) -> list[str]:
    listed = client.CoreV1Api(cluster.api_client()).list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={name},involvedObject.kind=HamiPodPlacement"
    )
    return [event.reason for event in listed.items]


def hostname_terms(pod: client.V1Pod) -> list[list[tuple[str, str, list[str]]]]:
    required = pod.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution
    return [
        [(e.key, e.operator, e.values) for e in term.match_expressions or []] for term in required.node_selector_terms
    ]
