"""The oldest Kubernetes the chart supports (Chart.yaml `kubeVersion: >=1.24.0-0`): an API server of v1.24.17, built
from Go modules as the sandbox's own (`sandbox/binaries.py`, `kube-apiserver-oldest`), with etcd and nothing else.

It takes every object the chart renders for it whole (a server-side apply refuses a field the API does not declare,
and the dry run's answer shows a field that a feature gate off there dropped), and it serves the webhook and the
plugin as the current release does: the plugin pins, the API server calls the webhook over TLS, the webhook mutates
the pod and records the claim.
No scheduler, controllers or HAMi run here, so the pin is checked where the webhook puts it, on the pod; that HAMi
then allocates those cards on 1.24 is test_oldest_kubernetes_hami's to prove.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from kubectl_hami_place.core.names import CLAIM_ANNOTATION, DEFRAG_LEASE, GROUP, PLURAL, USE_GPUUUID_ANNOTATION, VERSION
from sandbox import binaries, gpu_nodes
from sandbox.cluster import OLDEST, Sandbox, wait_for
from sandbox.webhook import Webhook, start
from tests.cluster.cli_harness import REPO, card_uuids, plugin
from tests.cluster.webhook_harness import gpu_pod, hostname_terms, register, status_of

pytestmark = pytest.mark.cluster
CHART = REPO / "chart"
NODE = "gpu-a100-0"


@pytest.fixture(scope="module")
def oldest() -> Iterator[Sandbox]:
    """etcd and kube-apiserver v1.24.17, for this module's tests."""
    sandbox = Sandbox.start_api(OLDEST)
    try:
        yield sandbox
    finally:
        sandbox.stop()


def install_crd(sandbox: Sandbox) -> None:
    """The CRD as an operator applies it on its own (the server does not start without it)."""
    sandbox.kubectl("apply", "-f", str(CHART / "templates" / "crd" / "hamipodplacement.yaml"))


def dropped(sent: Any, stored: Any, path: str = "") -> list[str]:
    """The paths of fields `sent` holds and `stored` lacks: what the API server dropped (defaults it adds are fine)."""
    if isinstance(sent, dict):
        if not isinstance(stored, dict):
            return [path or "."]
        return [
            lost
            for key, value in sent.items()
            for lost in ([f"{path}.{key}"] if key not in stored else dropped(value, stored[key], f"{path}.{key}"))
        ]
    if isinstance(sent, list):
        if not isinstance(stored, list) or len(stored) < len(sent):
            return [path]
        return [lost for i, value in enumerate(sent) for lost in dropped(value, stored[i], f"{path}[{i}]")]
    return []


def test_the_oldest_api_server_takes_every_object_the_chart_renders_for_it_whole(oldest: Sandbox) -> None:
    assert oldest.get("/version")["gitVersion"] == binaries.OLDEST_KUBERNETES_VERSION
    rendered = subprocess.run(
        [
            str(binaries.resolve("helm")),
            "template",
            "hami-place",
            str(CHART),
            "-n",
            "kube-system",
            "--kube-version",
            binaries.OLDEST_KUBERNETES_VERSION,
            "--set",
            "networkPolicy.enabled=true,networkPolicy.apiServerCIDRs={10.0.0.10/32}",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    objects = [obj for obj in yaml.safe_load_all(rendered) if obj]
    # The chart's own namespaces for real, first: a dry run cannot make the namespace of what follows.
    namespaces = [obj for obj in objects if obj["kind"] == "Namespace"]
    made = {stored["metadata"]["name"]: stored for stored in oldest.apply(*namespaces)}
    kinds, lost = set(), {}
    for obj in objects:
        is_namespace = obj["kind"] == "Namespace"
        [stored] = [made[obj["metadata"]["name"]]] if is_namespace else oldest.apply(obj, dry_run=True)
        kinds.add(obj["kind"])
        missing = dropped(obj, stored)
        if missing:
            lost[f"{obj['kind']}/{obj['metadata']['name']}"] = missing
    # 1.24 drops the CRD's CEL rules (CustomResourceValidationExpressions is alpha there, and off, until 1.25): the
    # plugin checks the same before it writes, and the server pins no pod by an empty selector (the next test).
    schema = ".spec.versions[0].schema.openAPIV3Schema.properties.spec.properties"
    cel = [
        f"{schema}.{field}.x-kubernetes-validations"
        for field in ("reqID", "podSelector.properties.matchExpressions.items", "podSelector")
    ]
    assert lost == {"CustomResourceDefinition/hamipodplacements.scheduling.hami.placement.com": cel}, lost
    deployments = client.AppsV1Api(oldest.api_client()).list_namespaced_deployment("kube-system").items
    assert deployments == [], "a dry run stores nothing"
    shipped = {"CustomResourceDefinition", "Deployment", "MutatingWebhookConfiguration", "PodDisruptionBudget", "Job"}
    assert shipped | {"NetworkPolicy", "ClusterRole", "Role", "ConfigMap", "Namespace"} <= kinds, "each kind was tried"


def test_the_plugin_pins_and_the_webhook_mutates_and_claims_on_the_oldest_api_server(
    oldest: Sandbox, tmp_path: Path
) -> None:
    """The CRD as applied on its own, a HAMi GPU node, the server registered for a namespace; `pin` checks the card
    and writes the placement, the webhook acknowledges it, pins the pod it admits and records the claim; `status`
    reads the cluster; `evict` evicts through the Eviction API."""
    install_crd(oldest)
    core = client.CoreV1Api(oldest.api_client())
    ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kwok is not here"}
    [entry] = [e for e in gpu_nodes.load() if e["name"] == NODE]
    gpu_nodes.write_nodes(oldest, [entry], conditions=(ready,))
    namespace = f"t-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": namespace, "labels": {"hami-place-test": namespace}}})
    # No controller manager makes a namespace's default ServiceAccount here; the API server wants it for a pod.
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "default"}})
    webhook: Webhook = start(oldest, tmp_path)
    try:
        register(oldest, [], namespace, [(webhook, {})])
        pinned = plugin(
            oldest,
            *("pin", "-l", "app=train", "--node", NODE, "--gpu", "gpu-1", "-n", namespace),
            *("--request-memory", "10240", "--request-cores", "30", "--name", "train", "--ack-timeout", "20"),
        )
        assert pinned.code == 0, pinned.err
        assert "no hami-place webhook acknowledged" not in pinned.err, "the webhook acknowledged the placement"
        made = core.create_namespaced_pod(namespace, gpu_pod("train-", {"app": "train"}))
        assert hostname_terms(made) == [[("kubernetes.io/hostname", "In", [NODE])]], made.spec.affinity
        assert made.metadata.annotations[USE_GPUUUID_ANNOTATION] == card_uuids(NODE)[1]
        claim = wait_for(lambda: status_of(oldest, namespace, "train").get("claim"), "the claim in the status")
        assert claim["token"] == made.metadata.annotations[CLAIM_ANNOTATION], claim

        def placement(name: str, selector: dict[str, Any]) -> dict[str, Any]:
            """A placement of a card on NODE, written as is (the plugin would refuse the selectors below)."""
            return {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "HamiPodPlacement",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"reqID": f"req-{name}", "podSelector": selector, "nodeName": NODE, "gpuDevices": ["gpu-0"]},
            }

        # Refused by the CRD's CEL rule from 1.25; 1.24 stores it, and the server fails it and pins no pod by it.
        custom = client.CustomObjectsApi(oldest.api_client())
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, placement("everyone", {}))
        failed = wait_for(lambda: status_of(oldest, namespace, "everyone").get("phase") == "Failed", "the refusal")
        assert failed and "podSelector is empty and would match every pod" in status_of(
            oldest, namespace, "everyone"
        ).get("message", "")
        other = core.create_namespaced_pod(namespace, gpu_pod("other-", {"app": "other"}))
        assert USE_GPUUUID_ANNOTATION not in (other.metadata.annotations or {}), "an empty selector pins no pod"

        # The CRD's two other CEL rules are gone on 1.24 too. NotIn may come with no values (it would match every
        # pod without the label): the server fails it. reqID may be edited: a consumed placement given a new one
        # pins no second pod, and an open one given the consumed reqID pins none (the claim's guard holds it).
        no_values = {"matchExpressions": [{"key": "app", "operator": "NotIn", "values": []}]}
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, placement("no-values", no_values))
        wait_for(lambda: status_of(oldest, namespace, "no-values").get("phase") == "Failed", "the refusal")
        assert "app NotIn needs at least one value" in status_of(oldest, namespace, "no-values").get("message", "")
        consumed = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "train")["spec"]["reqID"]
        custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "train", {"spec": {"reqID": "fresh"}})
        custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, placement("twin", {"matchLabels": {"app": "twin"}})
        )
        wait_for(lambda: status_of(oldest, namespace, "twin").get("observedGeneration") == 1, "the acknowledgement")
        custom.patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "twin", {"spec": {"reqID": consumed}})
        wait_for(lambda: status_of(oldest, namespace, "twin").get("observedGeneration") == 2, "the acknowledgement")
        for app in ("train", "twin"):
            again = core.create_namespaced_pod(namespace, gpu_pod(f"{app}-", {"app": app}))
            assert USE_GPUUUID_ANNOTATION not in (again.metadata.annotations or {}), f"{app}: {consumed} pins once"

        shown = plugin(oldest, "status", "-o", "json")
        assert shown.code == 0, shown.err
        assert NODE in json.dumps(shown.json()), shown.out[:500]
        evicted = plugin(oldest, "evict", made.metadata.name, "-n", namespace, "--yes")
        assert evicted.code == 0, evicted.err
        wait_for(
            lambda: made.metadata.name not in {p.metadata.name for p in core.list_namespaced_pod(namespace).items},
            "the evicted pod to go",
        )
    finally:
        webhook.stop()


def test_the_controller_leads_and_reads_its_policy_on_the_oldest_api_server(oldest: Sandbox, tmp_path: Path) -> None:
    """The leader Lease (coordination.k8s.io/v1), the policy's ConfigMap watch and its Event, on 1.24."""
    install_crd(oldest)
    home = f"ctl-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(oldest.api_client())
    core.create_namespace({"metadata": {"name": home}})
    policy = {"apiVersion": f"{GROUP}/v1alpha1", "kind": "DefragPolicy", "mode": "dry-run"}
    config_map = {"metadata": {"name": "defrag-policy"}, "data": {"policy.yaml": json.dumps(policy)}}
    core.create_namespaced_config_map(home, config_map)
    server = start(oldest, tmp_path, "--defrag-policy", f"{home}/defrag-policy", "--defrag-namespace", home)
    try:
        wait_for(lambda: server.metric("hami_place_defrag_leader") == 1, "the controller to lead")
        # The lease may be won before the policy's watch has listed (a loaded CI box saw it so): read, then valid.
        wait_for(lambda: server.metric("hami_place_defrag_policy_valid") == 1, "the policy to be read as valid")
        lease = client.CoordinationV1Api(oldest.api_client()).read_namespaced_lease(DEFRAG_LEASE, home)
        assert lease.spec is not None and lease.spec.holder_identity, lease.spec
        read = wait_for(
            lambda: [e.message for e in core.list_namespaced_event(home).items if e.reason == "DefragPolicyRead"],
            "the policy's Event",
        )
        assert read == ["policy read: mode dry-run"], read
    finally:
        server.stop()
