"""Extended resources (an RDMA device, an FPGA) counted as kube-scheduler's NodeResourcesFit counts them: no move lands
a pod on a node without what it asks, and a Pending pod's refusal for one is read."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from kubectl_hami_place.core.defrag.triggers import pending_pod
from kubectl_hami_place.core.hami_config import HAMI_DEFAULTS
from kubectl_hami_place.core.node_selection import node_marks
from kubectl_hami_place.core.planner import FitGoal, plan
from kubectl_hami_place.core.planner.model import DO_NOT_MOVE
from kubectl_hami_place.core.planner.objects import snapshot_from_objects
from kubectl_hami_place.core.planner.why import why
from tests.unit.test_core_planner import node_object, pod_object

RDMA = "rdma/hca"


def nodes_with_rdma(*having: str) -> list[dict[str, Any]]:
    """Nodes a, b and c of one 40 GiB card, 8 CPUs and 32 GiB each; those `having` advertise one RDMA device."""
    nodes = []
    for name in ("a", "b", "c"):
        node = node_object(name)
        node["status"]["allocatable"] |= {"cpu": "8", "memory": "32Gi", "pods": "110"}
        if name in having:
            node["status"]["allocatable"][RDMA] = "1"
        nodes.append(node)
    return nodes


def asking_rdma(pod: dict[str, Any]) -> dict[str, Any]:
    """The pod with its container asking one RDMA device (as the API server defaults requests from limits)."""
    pod["spec"]["containers"][0]["resources"]["requests"] = {RDMA: "1", "nvidia.com/gpu": "1"}
    return pod


def placed(*, rdma_on_a: bool) -> list[dict[str, Any]]:
    """An 8 GiB pod on each card; only small-a may move, and asks an RDMA device when `rdma_on_a`."""
    pods = []
    for name in ("a", "b", "c"):
        pod = pod_object(f"small-{name}", name, nodeName=name)
        if name != "a":
            pod["metadata"]["annotations"][DO_NOT_MOVE] = "true"
        elif rdma_on_a:
            asking_rdma(pod)
        pods.append(pod)
    return pods


def whole_card(message: str = "") -> dict[str, Any]:
    """A Pending pod asking a whole 40 GiB card, refused with `message`."""
    whole = [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "40960"}}}]
    pod = pod_object("big", None, containers=whole)
    if message:
        condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
        pod["status"]["conditions"] = [condition]
    return pod


def test_a_moved_pod_goes_only_to_a_node_with_the_extended_resource_it_asks() -> None:
    """small-a holds a's RDMA device: of b and c, only c has one, though b comes first when either will do; the
    pod's HAMi resources (nvidia.com/gpu, in its requests too) are the planner's own count, not the room's."""
    nodes = nodes_with_rdma("a", "c")
    for rdma_on_a, moved_to in ((True, "c"), (False, "b")):
        snapshot, _ = snapshot_from_objects(nodes, placed(rdma_on_a=rdma_on_a), [], datetime.now(UTC))
        assert snapshot.scalars == {RDMA}
        result = plan(snapshot, FitGoal(pending_pod(whole_card(), node_marks(nodes), HAMI_DEFAULTS, None).pod))
        assert [(m.pod, m.to_node) for m in result.moves] == [("ns/small-a", moved_to)], rdma_on_a


def test_a_pending_pods_refusal_for_an_extended_resource_is_read() -> None:
    """The big pod asks an RDMA device b lacks: kube-scheduler's refusal of b is read, the room is made on a (or c),
    and `why` says NodeResourcesFit with what b has left; not counted (no node advertises it), it stays unread."""
    nodes = nodes_with_rdma("a", "c")
    pods = placed(rdma_on_a=False)
    message = f"0/3 nodes are available: 1 Insufficient {RDMA}, 2 1/1 CardInsufficientMemory."
    big = asking_rdma(whole_card(message))
    snapshot, _ = snapshot_from_objects(nodes, pods, [], datetime.now(UTC))
    found = pending_pod(big, node_marks(nodes), HAMI_DEFAULTS, pods, snapshot)
    assert found.unread == ()
    result = plan(snapshot, FitGoal(found.pod))
    assert result.target is not None and result.target[0] == "a"
    verdict = {node.node: node for node in why(snapshot, found.pod)}["b"]
    assert (verdict.fits, verdict.reason) == (False, "NodeResourcesFit")
    assert verdict.message.startswith(f"kube-scheduler: Insufficient {RDMA} (the node has 8000m CPU")
    assert verdict.message.endswith(f"; {RDMA}: 0 left, 1 asked)")

    bare = nodes_with_rdma()
    snapshot, _ = snapshot_from_objects(bare, pods, [], datetime.now(UTC))
    unread = pending_pod(big, node_marks(bare), HAMI_DEFAULTS, pods, snapshot).unread
    assert unread == (f"1 Insufficient {RDMA}",)
