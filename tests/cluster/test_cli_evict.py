"""`evict` against the sandbox: the Eviction API, PodDisruptionBudgets (exit 4), and --to-node's pin-then-evict.

Uses gpu-h100-0's gpu-6 as the target card, which no other plugin test fills.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from kubectl_hami_place.core.hami_config import HamiConfig
from kubectl_hami_place.core.names import GROUP, PLURAL
from kubectl_hami_place.core.pin_check import workload_from_pod
from kubectl_hami_place.core.placement import PlacementSpec
from kubectl_hami_place.core.planner import DO_NOT_MOVE, Move
from kubectl_hami_place.core.refs import parse_card_ref
from kubectl_hami_place.core.selectors import selector_from_dict
from kubectl_hami_place.kube import evictions, moves
from kubectl_hami_place.kube.client import connect
from kubectl_hami_place.kube.errors import (
    KubeNotFound,
    KubeUnreachable,
    NoReplacement,
    PlacementTaken,
    PodProtected,
    PodReplaced,
)
from sandbox.cluster import AUDITED_USER, Sandbox, wait_for
from sandbox.webhook import Webhook, start
from tests.cluster.cli_harness import allocated_pod, apply, card_uuids, cut_off, declining, get, placements, plugin
from tests.cluster.test_defrag import READS_BUT_LIMITS, plugin_as

pytestmark = pytest.mark.cluster
H100 = "gpu-h100-0"


@pytest.fixture
def acknowledging(cluster: Sandbox, tmp_path: Path, webhooks: list[Webhook]) -> Webhook:
    """Our webhook running (not registered for admission): it acknowledges placements, which --to-node waits for."""
    webhook = start(cluster, tmp_path)
    webhooks.append(webhook)
    return webhook


def gone_or_terminating(cluster: Sandbox, namespace: str, name: str) -> bool:
    pod = get(cluster, "pod", name, "-n", namespace)
    return pod is None or pod["metadata"].get("deletionTimestamp") is not None


def running_and_ready(cluster: Sandbox, namespace: str, name: str) -> bool:
    pod = get(cluster, "pod", name, "-n", namespace) or {}
    conditions = (pod.get("status") or {}).get("conditions") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    return (pod.get("status") or {}).get("phase") == "Running" and ready


def guarded(cluster: Sandbox, namespace: str, pod_name: str, labels: dict[str, str]) -> None:
    """A PodDisruptionBudget that allows no disruption of the (running, ready) pod, once the controller counted it.

    A pod that is not yet Running may always be evicted, so the test waits for kwok to run it first.
    """
    wait_for(lambda: running_and_ready(cluster, namespace, pod_name), f"{pod_name} to run")
    budget: dict[str, Any] = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "keep-one", "namespace": namespace},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": labels}},
    }
    apply(cluster, budget)

    def observed() -> bool:
        pdb = get(cluster, "pdb", "keep-one", "-n", namespace) or {}
        status = pdb.get("status") or {}
        return (
            status.get("observedGeneration") == pdb["metadata"]["generation"]
            and status.get("currentHealthy") == 1
            and status.get("disruptionsAllowed") == 0
        )

    wait_for(observed, f"the disruption controller to count {pod_name} under keep-one")


def test_missing_pod_is_refused(cluster: Sandbox, namespace: str) -> None:
    run = plugin(cluster, "evict", "ghost", "-n", namespace, "--yes")
    assert run.code == 1, "not found exits 1, as the README says and as why does (issue 25 item 10)"
    assert run.error_lines == [
        f"error: pod ghost not found in namespace {namespace}; check the name (kubectl get pods -n {namespace})"
    ]
    elsewhere = plugin(cluster, "evict", "ghost", "-n", "nope-ns", "--yes")
    assert (elsewhere.code, elsewhere.error_lines) == (
        1,
        ["error: namespace nope-ns not found; check -n (kubectl get namespaces)"],
    )


def test_without_a_terminal_it_needs_yes(cluster: Sandbox, namespace: str) -> None:
    apply(cluster, allocated_pod("victim", namespace, H100, f"{card_uuids(H100)[6]},NVIDIA,1000,0:;"))
    run = plugin(cluster, "evict", "victim", "-n", namespace)
    assert run.code == 2
    assert run.error_lines == [
        f"error: refusing to evict pod {namespace}/victim without confirmation; pass --yes to confirm"
    ]
    assert get(cluster, "pod", "victim", "-n", namespace) is not None


def test_evictable_pod_is_evicted(cluster: Sandbox, namespace: str) -> None:
    apply(cluster, allocated_pod("victim", namespace, H100, f"{card_uuids(H100)[6]},NVIDIA,1000,0:;"))
    dry = plugin(cluster, "evict", "victim", "-n", namespace, "--dry-run=server", "-o", "json")
    assert dry.code == 0, dry.err
    assert dry.json() == {"namespace": namespace, "pod": "victim", "evicted": True, "dryRun": "server"}
    declined = declining(cluster, "evict", "victim", "-n", namespace)
    assert (declined.code, declined.error_lines) == (1, ["error: not confirmed; the pod was not evicted"])
    assert not gone_or_terminating(cluster, namespace, "victim")
    run = plugin(cluster, "evict", "victim", "-n", namespace, "--yes")
    assert run.code == 0, run.err
    assert run.out.strip() == f"pod {namespace}/victim evicted"
    wait_for(lambda: gone_or_terminating(cluster, namespace, "victim"), "the evicted pod to go")


def test_budget_that_allows_no_disruption_blocks_with_exit_4(cluster: Sandbox, namespace: str) -> None:
    apply(
        cluster,
        allocated_pod(
            "precious", namespace, H100, f"{card_uuids(H100)[6]},NVIDIA,1000,0:;", labels={"app": "precious"}
        ),
    )
    guarded(cluster, namespace, "precious", {"app": "precious"})
    run = plugin(cluster, "evict", "precious", "-n", namespace, "--yes")
    assert run.code == 4, run.out
    assert len(run.error_lines) == 1
    line = run.error_lines[0]
    assert line.startswith(f"error: eviction of pod {namespace}/precious blocked by PodDisruptionBudget keep-one (")
    assert line.endswith(f"retry once more replicas are ready, or relax the budget (kubectl get pdb -n {namespace})")
    pod = get(cluster, "pod", "precious", "-n", namespace)
    assert pod is not None and pod["metadata"].get("deletionTimestamp") is None


def test_a_budget_whose_selector_is_empty_blocks_and_is_named(cluster: Sandbox, namespace: str) -> None:
    """policy/v1 reads a `{}` selector as every pod of the namespace (Kubernetes 1.29 on): the refusal names that
    budget, as the server's answer does, not "a PodDisruptionBudget"."""
    apply(cluster, allocated_pod("precious", namespace, H100, f"{card_uuids(H100)[6]},NVIDIA,1000,0:;"))
    guarded(cluster, namespace, "precious", {})
    run = plugin(cluster, "evict", "precious", "-n", namespace, "--yes")
    assert (run.code, run.error_lines) == (
        4,
        [
            f"error: eviction of pod {namespace}/precious blocked by PodDisruptionBudget keep-one (1 healthy, 1 "
            "required, 0 disruption(s) allowed); retry once more replicas are ready, or relax the budget "
            f"(kubectl get pdb -n {namespace})"
        ],
    )


def test_to_node_pins_the_replacement_then_evicts(cluster: Sandbox, namespace: str, acknowledging: Webhook) -> None:
    uuid = card_uuids("gpu-a100-1")[1]
    apply(
        cluster,
        allocated_pod(
            "mover", namespace, "gpu-a100-1", f"{uuid},NVIDIA,3000,20:;", labels={"app": "mover", "tier": "gpu"}
        ),
    )
    server_dry = ("evict", "mover", "-n", namespace, "--to-node", H100, "--gpu", "gpu-6", "--dry-run=server")
    checked = plugin(cluster, *server_dry, "--req-id", "move-12345", "-o", "json")
    assert checked.code == 0, checked.err
    answered = checked.json()
    assert (answered["dryRun"], answered["evicted"]) == ("server", "mover")
    assert answered["placement"]["metadata"]["name"] == "pin-move-12345", "as the API server answered the creation"
    assert answered["placement"]["metadata"]["uid"], "as the API server answered the creation"
    assert placements(cluster, namespace) == [], "the API server checked the placement and stored nothing"
    assert not gone_or_terminating(cluster, namespace, "mover"), "nor evicted the pod"
    declined = declining(cluster, "evict", "mover", "-n", namespace, "--to-node", H100, "--gpu", "gpu-6")
    assert (declined.code, declined.error_lines) == (
        1,
        ["error: not confirmed; nothing was created and the pod was not evicted"],
    )
    assert placements(cluster, namespace) == [] and not gone_or_terminating(cluster, namespace, "mover")
    run = plugin(
        cluster,
        "evict",
        "mover",
        "-n",
        namespace,
        "--to-node",
        H100,
        "--gpu",
        "gpu-6",
        "--yes",
        "--req-id",
        "move-12345",
        "-o",
        "json",
    )
    assert run.code == 0, run.err
    assert [w for w in run.warning_lines if not w.startswith("warning: placement ")] == [
        "warning: pod mover has no controller: nothing recreates it; the placement waits for the next pod you "
        "create with its labels (app=mover,hami.io/webhook=ignore,tier=gpu)",
    ], "a move from another node frees the pod's cards there: no 'evicting it frees nothing' (issue 25 item 10)"
    result = run.json()
    assert result["evicted"] == "mover"
    assert [(c["ref"], c["memoryMiB"]) for c in result["cards"]] == [("gpu-6", 1000)]
    [stored] = placements(cluster, namespace)
    assert stored["spec"] == {
        "reqID": "move-12345",
        # allocated_pod labels it for HAMi's webhook to leave alone: a bare pod's replacement matches all its labels.
        "podSelector": {"matchLabels": {"app": "mover", "hami.io/webhook": "ignore", "tier": "gpu"}},
        "nodeName": H100,
        "gpuDevices": ["gpu-6"],
    }
    wait_for(lambda: gone_or_terminating(cluster, namespace, "mover"), "the evicted pod to go")


def test_to_node_uses_the_controller_selector(cluster: Sandbox, namespace: str, acknowledging: Webhook) -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": namespace},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "schedulerName": "hami-scheduler",
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.invalid/web:1",
                            "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "2000"}},
                        }
                    ],
                },
            },
        },
    }
    apply(cluster, deployment)
    pods = wait_for(
        lambda: [
            p
            for p in (get(cluster, "pods", "-n", namespace, "-l", "app=web") or {}).get("items", [])
            if p["spec"].get("nodeName")
        ],
        "the Deployment's pod to be scheduled",
    )
    pod = pods[0]
    hash_label = pod["metadata"]["labels"]["pod-template-hash"]
    run = plugin(
        cluster,
        "evict",
        pod["metadata"]["name"],
        "-n",
        namespace,
        "--to-node",
        H100,
        "--gpu",
        "gpu-6",
        "--yes",
        "-o",
        "json",
    )
    assert run.code == 0, run.err
    [stored] = placements(cluster, namespace)
    assert stored["spec"]["podSelector"] == {"matchLabels": {"app": "web", "pod-template-hash": hash_label}}
    owner = pod["metadata"]["ownerReferences"][0]
    # The replacement is made from the ReplicaSet's template, not from the evicted pod's (possibly mutated) spec.
    assert run.json()["request"] == f"ReplicaSet {owner['name']}"
    assert run.json()["cards"][0]["memoryMiB"] == 2000


def test_to_node_blocked_by_a_budget_leaves_no_placement(cluster: Sandbox, namespace: str) -> None:
    uuid = card_uuids("gpu-a100-1")[1]
    apply(cluster, allocated_pod("held", namespace, "gpu-a100-1", f"{uuid},NVIDIA,1000,0:;", labels={"app": "held"}))
    guarded(cluster, namespace, "held", {"app": "held"})
    run = plugin(cluster, "evict", "held", "-n", namespace, "--to-node", H100, "--gpu", "gpu-6", "--yes")
    assert run.code == 4
    assert len(run.error_lines) == 1 and "blocked by PodDisruptionBudget keep-one" in run.error_lines[0]
    assert placements(cluster, namespace) == []
    assert not gone_or_terminating(cluster, namespace, "held")


def test_to_node_where_kube_scheduler_keeps_the_replacement_off_is_refused_before_anything_is_written(
    cluster: Sandbox, namespace: str
) -> None:
    """The webhook does not pin a pod to a node its node selection excludes, so the replacement would land elsewhere
    once the pod is evicted: refused (exit 3), no placement written, nothing evicted."""
    uuid = card_uuids("gpu-a100-1")[1]
    kept = allocated_pod("kept", namespace, "gpu-a100-1", f"{uuid},NVIDIA,1000,0:;", labels={"app": "kept"})
    kept["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "gpu-a100-1"}
    apply(cluster, kept)
    run = plugin(cluster, "evict", "kept", "-n", namespace, "--to-node", H100, "--gpu", "gpu-6", "--yes")
    assert run.code == 3, run.err
    assert run.error_lines == [
        f"error: pod kept: the node selection excludes node {H100}, so the webhook would not pin its replacement "
        "there; move it to a node its tolerations and node selection allow, or change them"
    ]
    assert placements(cluster, namespace) == []
    assert not gone_or_terminating(cluster, namespace, "kept")


def test_to_node_without_the_cpu_the_replacement_asks_is_refused_before_anything_is_written(
    cluster: Sandbox, namespace: str
) -> None:
    """kube-scheduler refuses a node without the CPU a pod asks before HAMi sees its cards: the replacement pinned
    there would stay Pending once the pod is evicted, so the move is refused (exit 3), nothing written or evicted."""
    uuid = card_uuids("gpu-a100-1")[1]
    hungry = allocated_pod("hungry", namespace, "gpu-a100-1", f"{uuid},NVIDIA,1000,0:;", labels={"app": "hungry"})
    hungry["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "1000"}
    apply(cluster, hungry)
    run = plugin(cluster, "evict", "hungry", "-n", namespace, "--to-node", H100, "--gpu", "gpu-6", "--yes")
    assert run.code == 3, run.err
    [line] = run.error_lines
    assert line.startswith(f"error: pod hungry: node {H100}: kube-scheduler: Insufficient cpu (the node has "), line
    assert line.endswith(
        "the pod asks 1000000m, 0 MiB); pick a node with room (kubectl describe node), or lower the pod's requests"
    ), line
    # The flags stand for the cards' request alone: the node's room is still the pod's to fit.
    flags = ("--request-memory", "1000", "--request-cores", "10")
    run = plugin(cluster, "evict", "hungry", "-n", namespace, "--to-node", H100, "--gpu", "gpu-6", *flags, "--yes")
    assert run.code == 3, run.err
    [line] = run.error_lines
    prefix = "error: pod hungry (its request from --request-memory/--request-cores): node "
    assert line.startswith(f"{prefix}{H100}: kube-scheduler: Insufficient cpu (the node has "), line
    assert placements(cluster, namespace) == []
    assert not gone_or_terminating(cluster, namespace, "hungry")


def test_to_node_whose_attach_limit_its_volume_would_exceed_is_refused_before_anything_is_written(
    cluster: Sandbox, namespace: str
) -> None:
    """kube-scheduler's NodeVolumeLimits: the pod mounts a CSI volume and the target's CSINode allows its driver no
    more volume, so the replacement pinned there would stay Pending once the pod is evicted: refused (exit 3), nothing
    written or evicted; with the flags standing for its cards' request too. Allowed one, the move is checked fine; by a
    user who may not list CSINodes, it is checked without them and says so."""
    driver = f"{namespace}.attach.example.com"
    api = client.CoreV1Api(cluster.api_client())
    storage = client.StorageV1Api(cluster.api_client())
    source = {"driver": driver, "volumeHandle": namespace}
    volume_spec = {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "csi": source}
    api.create_persistent_volume({"metadata": {"name": namespace}, "spec": volume_spec})
    asks = {"accessModes": ["ReadWriteOnce"], "storageClassName": "", "resources": {"requests": {"storage": "1Gi"}}}
    api.create_namespaced_persistent_volume_claim(
        namespace, {"metadata": {"name": "data"}, "spec": {**asks, "volumeName": namespace}}
    )
    limited = {"name": driver, "nodeID": H100, "allocatable": {"count": 0}}
    storage.create_csi_node({"metadata": {"name": H100}, "spec": {"drivers": [limited]}})
    try:
        uuid = card_uuids("gpu-a100-1")[1]
        mounting = allocated_pod("mounting", namespace, "gpu-a100-1", f"{uuid},NVIDIA,1000,0:;", labels={"app": "m"})
        mounting["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]
        apply(cluster, mounting)
        flags = ("--request-memory", "1000", "--request-cores", "10")
        for extra, prefix in (
            ((), "pod mounting"),
            (flags, "pod mounting (its request from --request-memory/--request-cores)"),
        ):
            run = plugin(
                cluster, "evict", "mounting", "-n", namespace, "--to-node", H100, "--gpu", "gpu-6", *extra, "--yes"
            )
            assert run.code == 3, run.err
            [line] = run.error_lines
            assert line.startswith(
                f"error: {prefix}: node {H100}: kube-scheduler: node(s) exceed max volume count ("
            ), line
            assert f"; attachable-volumes-csi-{driver}: 0 left, 1 asked); pick a node with room" in line, line
        assert placements(cluster, namespace) == []
        assert not gone_or_terminating(cluster, namespace, "mounting")
        storage.delete_csi_node(H100)
        limited["allocatable"] = {"count": 1}
        storage.create_csi_node({"metadata": {"name": H100}, "spec": {"drivers": [limited]}})
        run = plugin(
            cluster, "evict", "mounting", "-n", namespace, "--to-node", H100, "--gpu", "gpu-6", "--dry-run=client"
        )
        assert run.code == 0 and "exceed max volume count" not in run.err, run.err
        user = f"evicter-{namespace}"
        placements_read = {"apiGroups": [GROUP], "resources": ["hamipodplacements"], "verbs": ["get", "list"]}
        args = ("evict", "mounting", "-n", namespace, "--to-node", H100, "--gpu", "gpu-6", "--dry-run=client")
        _, words = plugin_as(cluster, user, [*READS_BUT_LIMITS, placements_read], *args)
        assert (
            "warning: cannot read CSI nodes and volume attachments (forbidden: csinodes.storage.k8s.io is forbidden: "
            f'User "{user}" cannot list resource "csinodes" in API group "storage.k8s.io" at the cluster scope); the '
            "node's CSI attach limits are not checked for the pod's volumes"
        ) in words, words
    finally:
        storage.delete_csi_node(H100)
        api.delete_persistent_volume(namespace)
        rbac = client.RbacAuthorizationV1Api(cluster.api_client())
        for delete in (rbac.delete_cluster_role_binding, rbac.delete_cluster_role):
            with contextlib.suppress(client.ApiException):
                delete(f"evicter-{namespace}")


def test_to_node_without_a_webhook_to_acknowledge_the_placement_evicts_nothing(
    cluster: Sandbox, namespace: str
) -> None:
    uuid = card_uuids("gpu-a100-1")[1]
    apply(cluster, allocated_pod("alone", namespace, "gpu-a100-1", f"{uuid},NVIDIA,1000,0:;", labels={"app": "alone"}))
    run = plugin(
        cluster,
        "evict",
        "alone",
        "-n",
        namespace,
        "--to-node",
        H100,
        "--gpu",
        "gpu-6",
        "--yes",
        "--name",
        "pin-alone",
        "--ack-timeout",
        "2",
    )
    assert run.code == 1, run.err
    assert run.error_lines == [
        f"error: the hami-place webhook did not acknowledge placement {namespace}/pin-alone within 2s, so the pod "
        "was not evicted; check that it runs (kubectl get pods -A -l app.kubernetes.io/name=gpu-descheduler-webhook), "
        "then retry"
    ]
    assert f"placement {namespace}/pin-alone deleted again because the webhook did not acknowledge it" in run.err
    assert placements(cluster, namespace) == []
    assert not gone_or_terminating(cluster, namespace, "alone")


def test_pin_then_evict_never_evicts_a_pod_recreated_under_the_same_name(
    cluster: Sandbox, namespace: str, acknowledging: Webhook
) -> None:
    """The shared pin-then-evict (evict --to-node, apply, the controller) evicts by the UID it read, not by name."""
    uuid = card_uuids("gpu-a100-1")[1]
    body = allocated_pod("twin", namespace, "gpu-a100-1", f"{uuid},NVIDIA,1000,0:;", labels={"app": "twin"})
    apply(cluster, body)
    kube = connect(str(cluster.kubeconfig))
    stale = get(cluster, "pod", "twin", "-n", namespace)
    assert stale is not None
    cluster.kubectl("delete", "pod", "twin", "-n", namespace, "--grace-period=0", "--force", "--wait=true")
    apply(cluster, body)
    spec = PlacementSpec(
        req_id="twin-12345",
        pod_selector=selector_from_dict({"matchLabels": {"app": "twin"}}),
        node_name=H100,
        gpu_devices=(parse_card_ref("gpu-6"),),
    )
    checked = moves.check_pin(
        kube,
        namespace,
        spec,
        name="pin-twin",
        workload=workload_from_pod(stale, "pod twin", template=True),
        evicted_pod=stale,
        labels={},
    )
    with pytest.raises(PodReplaced):
        moves.pin_then_evict(kube, checked, stale, ack_timeout=5)
    assert placements(cluster, namespace) == []
    recreated = get(cluster, "pod", "twin", "-n", namespace)
    assert recreated is not None and recreated["metadata"]["uid"] != stale["metadata"]["uid"]
    assert not gone_or_terminating(cluster, namespace, "twin")


def test_an_eviction_by_uid_of_a_pod_gone_is_not_found_and_one_the_server_never_gets_says_why(
    cluster: Sandbox, namespace: str
) -> None:
    """`evict_pod` as the controller calls it for a given-up move's replacement, by name and UID: a pod gone meanwhile
    is not found (which the controller takes as nothing left to do), not a refusal; an API server it cannot reach is
    one error naming it."""
    kube = connect(str(cluster.kubeconfig))
    with pytest.raises(KubeNotFound) as gone:
        evictions.evict_pod(kube, namespace, "ghost", uid="uid-of-a-pod-gone")
    assert (str(gone.value), gone.value.status) == (f"pod ghost not found in namespace {namespace}", 404)
    with pytest.raises(KubeUnreachable) as unreachable:
        evictions.evict_pod(cut_off(kube), namespace, "ghost", uid="u")
    said = str(unreachable.value)
    assert said.startswith("cannot reach the API server at ") and said.endswith(": connection refused"), said


def planned_move(cluster: Sandbox, namespace: str, name: str) -> tuple[dict[str, Any], dict[str, Any], Move]:
    """A pod of a 1000 MiB share of gpu-a100-1's second card (as written, and as stored) and a plan's move of it to
    gpu-6 of the H100 node."""
    uuid = card_uuids("gpu-a100-1")[1]
    body = allocated_pod(name, namespace, "gpu-a100-1", f"{uuid},NVIDIA,1000,0:;", labels={"app": name})
    apply(cluster, body)
    stored = get(cluster, "pod", name, "-n", namespace)
    assert stored is not None
    move = Move(
        f"{namespace}/{name}", stored["metadata"]["uid"], "gpu-a100-1", (uuid,), H100, (card_uuids(H100)[6],), ""
    )
    return body, stored, move


@pytest.mark.parametrize("change", ["recreated", "protected"])
def test_make_move_evicts_only_the_planned_pod_as_the_plan_found_it(
    change: str, cluster: Sandbox, namespace: str, acknowledging: Webhook
) -> None:
    """A move's pod re-created under its name (a StatefulSet's), or annotated do-not-move since the plan, is refused
    before anything is written: the fresh read decided the eviction's UID, and the annotation was read only by plans."""
    body, _, move = planned_move(cluster, namespace, "mover")
    if change == "recreated":
        cluster.kubectl("delete", "pod", "mover", "-n", namespace, "--grace-period=0", "--force", "--wait=true")
        apply(cluster, body)
    else:
        cluster.kubectl("annotate", "pod", "mover", "-n", namespace, f"{DO_NOT_MOVE}=true")
    kube = connect(str(cluster.kubeconfig))
    with pytest.raises(PodReplaced if change == "recreated" else PodProtected):
        moves.make_move(kube, move, config=HamiConfig(), labels={}, ack_timeout=5)
    assert placements(cluster, namespace) == []
    assert not gone_or_terminating(cluster, namespace, "mover")


def test_a_move_whose_placement_an_earlier_attempt_left_expired_evicts_nothing(
    cluster: Sandbox, namespace: str, acknowledging: Webhook
) -> None:
    """The move's placement is there from an earlier attempt (a rollback that failed, a run resumed past its TTL),
    the same pin but Expired: admission pins with none but open placements, so evicting would let the replacement
    through unpinned. The move stops before the eviction and leaves the placement as it was."""
    _, pod, move = planned_move(cluster, namespace, "leftover")
    kube = connect(str(cluster.kubeconfig))
    earlier = moves.check_move(kube, move, pod, config=HamiConfig(), labels={}).obj
    apply(cluster, earlier)
    name = earlier["metadata"]["name"]

    def acknowledged() -> bool:
        stored = get(cluster, f"{PLURAL}.{GROUP}", name, "-n", namespace) or {}
        return (stored.get("status") or {}).get("observedGeneration") == 1

    wait_for(acknowledged, "the webhook to acknowledge the earlier attempt's placement")
    expired = '{"status": {"phase": "Expired", "message": "not claimed within 3600s"}}'
    cluster.kubectl(
        "patch", f"{PLURAL}.{GROUP}", name, "-n", namespace, "--subresource=status", "--type=merge", "-p", expired
    )
    with pytest.raises(
        PlacementTaken, match=f"placement {namespace}/{name} can no longer pin a pod \\(it is Expired\\)"
    ):
        moves.make_move(kube, move, config=HamiConfig(), labels={}, ack_timeout=5)
    assert [(p["metadata"]["name"], p["status"]["phase"]) for p in placements(cluster, namespace)] == [
        (name, "Expired")
    ]
    assert not gone_or_terminating(cluster, namespace, "leftover")


@pytest.mark.parametrize("owner", ["Made Up", "gone-replicaset"])
def test_a_move_of_a_pod_whose_controller_names_no_object_or_is_gone_writes_nothing(
    owner: str, cluster: Sandbox, namespace: str, acknowledging: Webhook
) -> None:
    """Of an owner reference's name the API server checks only that it is not empty, so the pod's writer can make one
    up. A name no object has reaches no API path (the audited identity asked for none), a controller that is gone
    leaves the pod's labels to match its replacement, marked uncontrolled (`evict --to-node` warns so), and a planned
    move of such a pod stops before anything is written: nothing would re-create it."""
    _, stored, move = planned_move(cluster, namespace, "orphan")
    reference = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": owner, "uid": "0" * 8, "controller": True}
    pod = {**stored, "metadata": {**stored["metadata"], "ownerReferences": [reference]}}
    since = len(cluster.audit_events())
    kube = connect(str(cluster.identity_kubeconfig(AUDITED_USER)))
    successor = moves.replacement(kube, namespace, pod)
    assert (successor.source, successor.selector.labels, successor.controlled) == (
        "pod orphan",
        stored["metadata"]["labels"],
        False,
    )
    with pytest.raises(NoReplacement, match="its controller is gone or names no object"):
        moves.check_move(kube, move, pod, config=HamiConfig(), labels={})
    asked = [
        (e.get("objectRef") or {}).get("name")
        for e in cluster.audit_events()[since:]
        if (e.get("objectRef") or {}).get("resource") == "replicasets"
    ]
    assert asked == ([] if owner == "Made Up" else [owner, owner]), asked
    assert placements(cluster, namespace) == []
    assert not gone_or_terminating(cluster, namespace, "orphan")
