"""The cluster-info view (shape of `GET /api/v1/cluster-info`) and the fragmentation summary."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from core_strategies import json_values, outcome
from hypothesis import given
from hypothesis import strategies as st

from kubectl_hami_place.core.cards import Card, encode_register
from kubectl_hami_place.core.cluster_info import (
    CardInfo,
    ClusterInfo,
    NodeInfo,
    build_cluster_info,
    cluster_info_from_dict,
    fragmentation_of,
    node_share,
)
from kubectl_hami_place.core.errors import ClusterInfoError
from kubectl_hami_place.core.fragmentation import (
    Fragmentation,
    NodeFragmentation,
    free_of,
    is_open,
    summarize,
)

NOW = datetime(2026, 11, 29, 17, 0, tzinfo=UTC)


def a100(uuid: str, index: int, healthy: bool = True) -> Card:
    """A 40 GiB A100 as the sandbox registers it."""
    return Card(uuid, index, 10, 40960, 100, "NVIDIA-A100-SXM4-40GB", 0, healthy, "hami-core")


def node(
    name: str,
    cards: list[Card] | None,
    *,
    allocatable: str | None = "20",
    ready: bool = True,
    unschedulable: bool = False,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A node object with a register."""
    notes = dict(annotations or {})
    if cards is not None:
        notes["hami.io/node-nvidia-register"] = encode_register(cards)
    status: dict[str, Any] = {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    if allocatable is not None:
        status["allocatable"] = {"cpu": "8", "nvidia.com/gpu": allocatable}
    return {
        "metadata": {"name": name, "annotations": notes},
        "spec": {"unschedulable": unschedulable},
        "status": status,
    }


def pod(name: str, node_name: str, allocated: str, phase: str = "Running") -> dict[str, Any]:
    """A pod HAMi placed."""
    return {
        "metadata": {
            "namespace": "team",
            "name": name,
            "uid": f"uid-{name}",
            "annotations": {"hami.io/vgpu-node": node_name, "hami.io/vgpu-devices-allocated": allocated},
        },
        "status": {"phase": phase},
    }


def cluster() -> ClusterInfo:
    """Two A100 nodes, one pod sharing gpu-0 of the first, one whole-card pod on its gpu-1, one finished pod."""
    nodes = [
        node("gpu-a100-0", [a100("GPU-a0", 0), a100("GPU-a1", 1)]),
        node("gpu-a100-1", [a100("GPU-b0", 0), a100("GPU-b1", 1, healthy=False)]),
        node("cpu-0", None, allocatable=None),
    ]
    pods = [
        pod("share", "gpu-a100-0", "GPU-a0,NVIDIA,10240,30:;"),
        pod("whole", "gpu-a100-0", "GPU-a1,NVIDIA,40960,100:;"),
        pod("done", "gpu-a100-1", "GPU-b0,NVIDIA,40960,100:;", phase="Succeeded"),
        pod("plain", "", ""),
    ]
    return build_cluster_info(nodes, pods, NOW)


def test_gpu_nodes_cards_usage_and_pods() -> None:
    info = cluster()
    assert [n.name for n in info.nodes] == ["gpu-a100-0", "gpu-a100-1"]
    first = info.node("gpu-a100-0")
    assert first is not None and first.usable
    card = first.card("GPU-a0")
    assert card is not None
    assert (card.memory_used, card.memory_free, card.cores_used, card.slots_used) == (10240, 30720, 30, 1)
    assert [(p.name, p.mem, p.cores) for p in card.pods] == [("share", 10240, 30)]
    second = info.node("gpu-a100-1")
    assert second is not None and second.card("GPU-b0").slots_used == 0  # type: ignore[union-attr]


def test_each_node_counts_only_the_pods_hami_puts_on_it_in_list_order() -> None:
    # Pods grouped by node once: a pod naming another node's card, an unknown node and an ended pod count
    # nowhere, and each card lists its pods in the order they were listed, interleaved across nodes.
    nodes = [node(f"n{i}", [a100(f"GPU-{i}a", 0), a100(f"GPU-{i}b", 1)]) for i in range(3)]
    pods = [
        pod("p0", "n0", "GPU-0a,NVIDIA,1000,10:;"),
        pod("p1", "n1", "GPU-1a,NVIDIA,2000,20:;"),
        pod("p2", "n0", "GPU-0a,NVIDIA,3000,0:;"),
        pod("stray", "n2", "GPU-0a,NVIDIA,5000,0:;"),
        pod("gone", "n9", "GPU-1b,NVIDIA,5000,0:;"),
        pod("ended", "n1", "GPU-1a,NVIDIA,5000,0:;", phase="Failed"),
        pod("p3", "n1", "GPU-1b,NVIDIA,4000,0:GPU-1a,NVIDIA,100,0:;"),
    ]
    info = build_cluster_info(nodes, pods, NOW)
    used = {
        (n.name, c.uuid): (c.memory_used, c.cores_used, c.slots_used, [p.name for p in c.pods])
        for n in info.nodes
        for c in n.cards
    }
    assert used == {
        ("n0", "GPU-0a"): (4000, 10, 2, ["p0", "p2"]),
        ("n0", "GPU-0b"): (0, 0, 0, []),
        ("n1", "GPU-1a"): (2100, 20, 2, ["p1", "p3"]),
        ("n1", "GPU-1b"): (4000, 0, 1, ["p3"]),
        ("n2", "GPU-2a"): (0, 0, 0, []),
        ("n2", "GPU-2b"): (0, 0, 0, []),
    }


def test_to_dict_is_the_documented_shape_and_reads_back() -> None:
    info = cluster()
    document = json.loads(json.dumps(info.to_dict()))
    assert document["generatedAt"] == "2026-11-29T17:00:00Z"
    card = document["nodes"][0]["cards"][0]
    assert set(card) == {
        "uuid", "index", "name", "type", "numa", "health", "mode", "nvidia", "cordoned",
        "memory", "cores", "slots", "pods",
    }  # fmt: skip
    assert card["memory"] == {"total": 40960, "used": 10240, "free": 30720}
    assert card["pods"][0] == {
        "namespace": "team", "name": "share", "uid": "uid-share", "phase": "Running",
        "memory": 10240, "cores": 30, "slots": 1, "terminating": False,
    }  # fmt: skip
    assert set(document["nodes"][0]) == {
        "name", "ready", "schedulable", "hamiUsable", "gpuAllocatable", "registerError", "cards",
    }  # fmt: skip
    assert document["fragmentation"]["wholeCardsFree"] == 1
    assert cluster_info_from_dict(document) == info


def test_node_state_register_errors_cordons_and_warnings() -> None:
    nodes = [
        node("bad-register", None, annotations={"hami.io/node-nvidia-register": "junk"}),
        node("drained", [a100("GPU-d0", 0)], allocatable="0", unschedulable=True, ready=False),
        node("cordoned", [a100("GPU-c0", 0), a100("GPU-c1", 1)], annotations={"hami.io/device-cordon": "GPU-c1"}),
    ]
    pods = [pod("broken", "cordoned", "GPU-c0,NVIDIA:;")]
    info = build_cluster_info(nodes, pods, NOW)
    bad = info.node("bad-register")
    assert bad is not None and bad.register_error is not None and "node bad-register" in bad.register_error
    drained = info.node("drained")
    assert drained is not None
    assert (drained.ready, drained.schedulable, drained.hami_usable, drained.usable) == (False, False, False, False)
    cordoned = info.node("cordoned")
    assert cordoned is not None and [c.cordoned for c in cordoned.cards] == [False, True]
    assert info.warnings == (
        "pod team/broken: allocation container 0 device 'GPU-c0,NVIDIA' has 2 fields, expected UUID,VENDOR,MEM,CORES; "
        "HAMi cannot decode it either, so it is not counted",
    )
    assert cordoned.card("GPU-c0").slots_used == 0  # type: ignore[union-attr]


def test_fragmentation_summary() -> None:
    summary = summarize(cluster())
    # open: GPU-a0 (30720 free), GPU-b0 (40960 free); GPU-a1 has its cores all taken, GPU-b1 is unhealthy.
    assert summary.open_cards == 2
    assert summary.whole_cards_free == 1
    assert summary.free_mib == 30720 + 40960
    assert summary.largest_request_mib == 40960
    assert summary.stranded_mib == 30720
    assert [(n.name, n.whole_cards_free, n.largest_request_mib, n.stranded_mib) for n in summary.nodes] == [
        ("gpu-a100-0", 0, 30720, 30720),
        ("gpu-a100-1", 1, 40960, 0),
    ]
    assert summarize(build_cluster_info([], [], NOW)).to_dict()["largestRequestMiB"] == 0


def test_an_idle_card_smaller_than_the_largest_is_whole_not_stranded() -> None:
    # Issue 25: an idle 40 GiB A100 beside 80 GiB H100s was counted as 40 GiB of stranded memory.
    h100 = Card("GPU-h0", 0, 10, 81920, 100, "NVIDIA-H100-80GB", 0, True, "hami-core")
    half = pod("half", "gpu-h100-0", "GPU-h0,NVIDIA,40960,0:;")
    info = build_cluster_info([node("gpu-a100-0", [a100("GPU-a0", 0)]), node("gpu-h100-0", [h100])], [half], NOW)
    summary = summarize(info)
    assert (summary.whole_cards_free, summary.free_mib, summary.stranded_mib) == (1, 40960 + 40960, 40960)
    assert [(n.name, n.stranded_mib) for n in summary.nodes] == [("gpu-a100-0", 0), ("gpu-h100-0", 40960)]


@given(json_values)
def test_document_garbage_raises_only_cluster_info_errors(data: object) -> None:
    result = outcome(lambda: cluster_info_from_dict(data), ClusterInfoError)
    assert isinstance(result, ClusterInfoError | ClusterInfo)


@given(st.sampled_from(["generatedAt", "nodes", "warnings"]), json_values)
def test_field_garbage_raises_only_cluster_info_errors(key: str, value: object) -> None:
    document = cluster().to_dict()
    document[key] = value
    result = outcome(lambda: cluster_info_from_dict(document), ClusterInfoError)
    assert isinstance(result, ClusterInfoError | ClusterInfo)


@given(st.sampled_from(["uuid", "index", "memory", "slots", "pods", "health"]), json_values)
def test_card_garbage_raises_only_cluster_info_errors(key: str, value: object) -> None:
    document = cluster().to_dict()
    document["nodes"][0]["cards"][0][key] = value
    result = outcome(lambda: cluster_info_from_dict(document), ClusterInfoError)
    assert isinstance(result, ClusterInfoError | ClusterInfo)


@given(st.lists(json_values, max_size=3), st.lists(json_values, max_size=3))
def test_building_from_garbage_objects_never_raises(nodes: list[Any], pods: list[Any]) -> None:
    """Listed objects are dicts, but any content in them only yields warnings or register errors."""
    info = build_cluster_info(
        [n if isinstance(n, dict) else {"metadata": n} for n in nodes],
        [p if isinstance(p, dict) else {"metadata": p} for p in pods],
        NOW,
    )
    assert isinstance(info, ClusterInfo)


_SMALL = st.integers(min_value=-3, max_value=3) | st.sampled_from([0, 10, 100, 40960, 81920, -40960])
_CARD_VIEWS = st.builds(
    CardInfo,
    uuid=st.sampled_from(["GPU-a", "GPU-b", "GPU-c"]),
    index=st.integers(min_value=0, max_value=3),
    type=st.sampled_from(["NVIDIA-H100", "Ascend"]),
    numa=st.just(0),
    health=st.booleans(),
    mode=st.just("hami-core"),
    nvidia=st.booleans(),
    cordoned=st.booleans(),
    memory_total=_SMALL,
    memory_used=_SMALL,
    cores_total=_SMALL,
    cores_used=_SMALL,
    slots_total=_SMALL,
    slots_used=_SMALL,
)
_NODE_VIEWS = st.builds(
    NodeInfo,
    name=st.text(max_size=3),
    ready=st.booleans(),
    schedulable=st.booleans(),
    hami_usable=st.booleans(),
    gpu_allocatable=st.integers(min_value=0, max_value=80),
    register_error=st.none() | st.just("bad"),
    cards=st.lists(_CARD_VIEWS, max_size=4).map(tuple),
)


def _summary_by_definition(info: ClusterInfo) -> Fragmentation:
    """The summary as the module docstring defines it, card by card."""
    per_node = []
    for node in info.nodes:
        free = [free_of(card) for card in node.cards if is_open(node, card)]
        whole = sum(1 for card in node.cards if is_open(node, card) and card.slots_used == 0)
        stranded = sum(free_of(card) for card in node.cards if is_open(node, card) and card.slots_used != 0)
        per_node.append(NodeFragmentation(node.name, len(free), whole, sum(free), max(free, default=0), stranded))
    return Fragmentation(
        open_cards=sum(n.open_cards for n in per_node),
        whole_cards_free=sum(n.whole_cards_free for n in per_node),
        free_mib=sum(n.free_mib for n in per_node),
        largest_request_mib=max((n.largest_request_mib for n in per_node), default=0),
        stranded_mib=sum(n.stranded_mib for n in per_node),
        nodes=tuple(per_node),
    )


@given(st.lists(_NODE_VIEWS, max_size=4).map(tuple))
def test_the_summary_is_its_definition_and_the_sum_of_the_node_shares(nodes: tuple[NodeInfo, ...]) -> None:
    # summarize reads each card once (status at 5,000 nodes); the webhook sums per-node shares instead.
    info = ClusterInfo(generated_at=NOW, nodes=nodes)
    assert summarize(info) == _summary_by_definition(info)
    assert summarize(info) == fragmentation_of([node_share(node) for node in nodes])
