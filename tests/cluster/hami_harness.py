"""Fresh HAMi GPU nodes for one test, and reading back what HAMi's own scheduler allocated to a pod."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import urllib3
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from kubectl_hami_place.core.allocations import ALLOCATED_ANNOTATION, parse_allocation
from sandbox import gpu_nodes
from sandbox.cluster import Sandbox, wait_for

A100_40GB = {"type": "NVIDIA-A100-SXM4-40GB", "count": 10, "devmem": 40960, "devcore": 100}


def card_entries(count: int, model: dict[str, Any] = A100_40GB) -> list[dict[str, Any]]:
    """`count` healthy cards of one model, each with a UUID of its own."""
    return [
        {**model, "index": i, "id": f"GPU-{uuid.uuid4()}", "numa": 0, "health": True, "mode": "hami-core"}
        for i in range(count)
    ]


@dataclass(frozen=True)
class GpuNode:
    """A kwok node that only one test uses, so what HAMi allocates on it depends on that test alone."""

    name: str
    cards: list[dict[str, Any]]

    def uuid(self, index: int) -> str:
        return str(next(c["id"] for c in self.cards if c["index"] == index))


def fresh_node(cluster: Sandbox, cards: list[dict[str, Any]]) -> GpuNode:
    """Creates a kwok-managed node with these cards, Ready, and waits until HAMi's scheduler has registered it."""
    name = f"gpu-e2e-{uuid.uuid4().hex[:6]}"
    gpu_nodes.create_nodes(cluster, [{"name": name, "cpu": "64", "memory": "512Gi", "pods": "110", "cards": cards}])
    return GpuNode(name, cards)


def delete_nodes(cluster: Sandbox, nodes: Iterator[GpuNode] | list[GpuNode]) -> None:
    api = client.CoreV1Api(cluster.api_client())
    for node in nodes:
        try:
            api.delete_node(node.name)
        except ApiException as error:
            if error.status != 404:
                raise


def pod(
    name: str,
    limits: dict[str, str] | list[dict[str, str]],
    *,
    node: str = "",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    scheduler: str = "",
) -> dict[str, Any]:
    """A GPU pod as users write it: no schedulerName unless given (HAMi's webhook sets it), one container a limit."""
    per_container = limits if isinstance(limits, list) else [limits]
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": 0,
        "containers": [
            {"name": f"c{i}", "image": "registry.invalid/cuda:12", "resources": {"limits": dict(lim)}}
            for i, lim in enumerate(per_container)
        ],
    }
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    if scheduler:
        spec["schedulerName"] = scheduler
    metadata: dict[str, Any] = {"name": name, "labels": labels or {"app": name}}
    if annotations:
        metadata["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def deployment(name: str, replicas: int, limits: dict[str, str], node: str = "") -> dict[str, Any]:
    """A Deployment of `pod(name, limits)` pods, labelled app=<name>."""
    template = {"metadata": {"labels": {"app": name}}, "spec": pod(name, limits, node=node)["spec"]}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}}, "template": template},
    }


def scale_up(cluster: Sandbox, namespace: str, name: str) -> str:
    """Scales the Deployment to one replica, as a user would, and returns the name of the pod it creates."""
    client.AppsV1Api(cluster.api_client()).patch_namespaced_deployment_scale(name, namespace, {"spec": {"replicas": 1}})
    api = client.CoreV1Api(cluster.api_client())

    def created() -> str:
        pods = api.list_namespaced_pod(namespace, label_selector=f"app={name}").items
        return str(pods[0].metadata.name) if pods else ""

    return wait_for(created, f"Deployment {name}'s pod")


@dataclass(frozen=True)
class Allocation:
    """What HAMi's scheduler wrote on a pod it placed, and what the device-plugin stand-in completed."""

    node: str
    containers: tuple[tuple[tuple[str, int, int], ...], ...]

    @property
    def uuids(self) -> list[str]:
        """Every card the pod got, in container order."""
        return [device[0] for container in self.containers for device in container]


def allocation(cluster: Sandbox, namespace: str, name: str, timeout: float = 60) -> Allocation:
    """Waits until HAMi has allocated the pod its cards, bound it and the bind completed; returns the allocation."""
    api = client.CoreV1Api(cluster.api_client())

    def allocated() -> client.V1Pod | None:
        stored = api.read_namespaced_pod(name, namespace)
        annotations = stored.metadata.annotations or {}
        done = stored.spec.node_name and annotations.get("hami.io/bind-phase") == "success"
        return stored if done and annotations.get(ALLOCATED_ANNOTATION) else None

    try:
        stored = wait_for(allocated, f"HAMi to allocate {namespace}/{name}", timeout)
    except TimeoutError as error:
        events = api.list_namespaced_event(namespace, field_selector=f"involvedObject.name={name}").items
        said = [f"{e.reason}: {e.message}" for e in events]
        pod = api.read_namespaced_pod(name, namespace)
        raise TimeoutError(
            f"{error}; node {pod.spec.node_name}, annotations {pod.metadata.annotations}, {said}"
        ) from None
    containers = tuple(
        tuple((d.uuid, d.usedmem, d.usedcores) for d in container)
        for container in parse_allocation(stored.metadata.annotations[ALLOCATED_ANNOTATION])
        if container
    )
    return Allocation(stored.spec.node_name, containers)


def scheduling_failures(cluster: Sandbox, namespace: str, name: str) -> list[str]:
    """The kube-scheduler's FailedScheduling messages for the pod (HAMi's reasons come through them)."""
    listed = client.CoreV1Api(cluster.api_client()).list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={name},reason=FailedScheduling"
    )
    return [event.message for event in listed.items]


HOLD = "test.hami-place/checkpoint"
"""A finalizer that keeps an evicted pod until the test lets it go, as a checkpoint would."""


def evicted_pod(cluster: Sandbox, namespace: str) -> client.V1Pod:
    """The namespace's one pod going away, once an eviction set its deletionTimestamp."""
    api = client.CoreV1Api(cluster.api_client())
    [going] = wait_for(
        lambda: [p for p in api.list_namespaced_pod(namespace).items if p.metadata.deletion_timestamp],
        "the move's eviction",
    )
    return going


def let_go(cluster: Sandbox, namespace: str, name: str = "") -> None:
    """Takes the finalizers off the pod `name`, or off each pod of the namespace that has some (a test's cleanup)."""
    api = client.CoreV1Api(cluster.api_client())
    names = (
        [name] if name else [p.metadata.name for p in api.list_namespaced_pod(namespace).items if p.metadata.finalizers]
    )
    for held in names:
        api.patch_namespaced_pod(held, namespace, {"metadata": {"finalizers": None}})


def create(cluster: Sandbox, namespace: str, *objects: dict[str, Any]) -> None:
    """Creates the objects as `kubectl create` would (every admission webhook sees them, unknown fields refused)."""
    for obj in objects:
        cluster.create(obj, namespace)


class Evictions:
    """Pods of the namespace deleted while it watches, with whether the Eviction API deleted them: the API server
    accepted an eviction of the pod (its audit log records every eviction; sandbox.cluster.AUDIT_POLICY). A plain
    delete records none, on every release (the pod's DisruptionTarget condition tells the two apart only from 1.26)."""

    def __init__(self, cluster: Sandbox, namespace: str) -> None:
        self._cluster, self._namespace = cluster, namespace
        self._gone: list[str] = []
        self._watch = watch.Watch()
        api = client.CoreV1Api(cluster.api_client())
        since = api.list_namespaced_pod(namespace).metadata.resource_version
        stream = self._watch.stream(api.list_namespaced_pod, namespace, resource_version=since, timeout_seconds=600)
        self._thread = threading.Thread(target=self._follow, args=(stream,), daemon=True)
        self._thread.start()

    def _follow(self, stream: Iterator[dict[str, Any]]) -> None:
        try:
            for event in stream:
                # The client yields None for a line it cannot decode (an empty one as the stream closes).
                if event and event["type"] == "DELETED":
                    self._gone.append(event["object"].metadata.name)
        except urllib3.exceptions.HTTPError:
            return

    @property
    def deleted(self) -> dict[str, bool]:
        """Each pod deleted so far -> whether an eviction of it was accepted (a dry run's answers too, and deletes
        nothing: it is left out)."""
        evicted = {
            ((e.get("objectRef") or {}).get("namespace"), (e.get("objectRef") or {}).get("name"))
            for e in self._cluster.audit_events()
            if (e.get("objectRef") or {}).get("subresource") == "eviction"
            and (e.get("responseStatus") or {}).get("code") in {200, 201}
            and "dryRun=" not in str(e.get("requestURI") or "")
        }
        return {name: (self._namespace, name) in evicted for name in self._gone}

    def stop(self) -> None:
        self._watch.stop()
