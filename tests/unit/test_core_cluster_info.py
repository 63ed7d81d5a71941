"""The cluster-info view (shape of `GET /api/v1/cluster-info`) and the fragmentation summary."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from core_strategies import json_values, outcome
from hypothesis import given
from hypothesis import strategies as st

from kubectl_hami_place.core.cards import Card, encode_register
from kubectl_hami_place.core.cluster_info import (
    CardInfo,
    ClusterInfo,
    NodeInfo,
    cluster_info_from_dict,
    fragmentation_of,
    kept_rooms,
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
from kubectl_hami_place.core.reservation import MAX_RESERVE, Reservation
from tests.cluster_views import build_cluster_info

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


def test_a_gpu_allocatable_past_int64_is_read_as_int64s_largest() -> None:
    """A device plugin's (or a writer of nodes/status') 1e30 is a quantity the API server stores; the webhook's JSON
    encoder takes integers up to 64 bits only, so cluster-info failed with a 500 for every reader."""
    info = build_cluster_info([node("huge", [a100("GPU-h0", 0)], allocatable="1e30")], [], NOW)
    assert [(n.name, n.gpu_allocatable) for n in info.nodes] == [("huge", 2**63 - 1)]


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


def test_an_unknown_node_or_card_is_none() -> None:
    """Names come from users and placements: one the view does not have must read as absent, not raise."""
    info = cluster()
    assert (info.node("cpu-0"), info.nodes[0].card("GPU-b0")) == (None, None)


def test_one_allocatable_card_serves_but_an_unreadable_count_or_no_conditions_does_not() -> None:
    """One card split once is allocatable 1 and takes pods; an unreadable count or a node not yet Ready takes none."""
    silent = node("no-conditions", [a100("GPU-n0", 0)])
    del silent["status"]["conditions"]
    nodes = [
        node("one-card", [a100("GPU-o0", 0)], allocatable="1"),
        node("junk", [a100("GPU-j0", 0)], allocatable="junk"),
        silent,
    ]
    info = build_cluster_info(nodes, [], NOW)
    assert [(n.name, n.ready, n.hami_usable, n.gpu_allocatable, n.usable) for n in info.nodes] == [
        ("junk", True, False, 0, False),
        ("no-conditions", False, True, 20, False),
        ("one-card", True, True, 1, True),
    ]


def test_register_errors_warnings_and_terminating_pods_read_back() -> None:
    """The plugin shows what the webhook saw: why a node has no cards, the pods not counted, the pods leaving."""
    leaving = pod("leaving", "gpu-a100-0", "GPU-a0,NVIDIA,1000,10:;")
    leaving["metadata"]["deletionTimestamp"] = "2026-11-29T16:59:00Z"
    nodes = [
        node("bad-register", None, annotations={"hami.io/node-nvidia-register": "junk"}),
        node("gpu-a100-0", [a100("GPU-a0", 0)]),
    ]
    info = build_cluster_info(nodes, [pod("broken", "gpu-a100-0", "GPU-a0,NVIDIA:;"), leaving], NOW)
    document = json.loads(json.dumps(info.to_dict()))
    assert [n["registerError"] for n in document["nodes"]] == [
        "node bad-register: card register is neither JSON nor the legacy 'UUID,count,...:' string (no ':')",
        None,
    ]
    assert document["warnings"] == [
        "pod team/broken: allocation container 0 device 'GPU-a0,NVIDIA' has 2 fields, expected UUID,VENDOR,MEM,CORES; "
        "HAMi cannot decode it either, so it is not counted"
    ]
    assert [(p["name"], p["terminating"]) for p in document["nodes"][1]["cards"][0]["pods"]] == [("leaving", True)]
    assert cluster_info_from_dict(document) == info


def test_absent_lists_read_as_empty() -> None:
    """A document without warnings, nodes or a card's pods (nothing to list) is complete, not malformed."""
    info = cluster()
    document = info.to_dict()
    del document["warnings"]
    for node_document in document["nodes"]:
        for card in node_document["cards"]:
            del card["pods"]
    no_pods = tuple(replace(n, cards=tuple(replace(c, pods=()) for c in n.cards)) for n in info.nodes)
    assert cluster_info_from_dict(document) == replace(info, nodes=no_pods, warnings=())
    assert cluster_info_from_dict({"generatedAt": "2026-11-29T17:00:00Z"}) == ClusterInfo(NOW, ())


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (
            "generatedAt",
            "noon",
            "cluster-info: generatedAt 'noon' is not an RFC 3339 time such as 2026-01-02T03:04:05Z",
        ),
        ("nodes", {}, "cluster-info nodes must be a list"),
        ("keptRooms", {}, "cluster-info keptRooms must be a list"),
        ("warnings", "x", "cluster-info warnings must be a list"),
        ("warnings", [1], "cluster-info warnings[] must be a string"),
        ("nodes[1]", 1, "cluster-info nodes[1] must be an object"),
        ("nodes[1].name", 1, "cluster-info nodes[1].name must be a string"),
        ("nodes[1].ready", "yes", "cluster-info nodes[1].ready must be true or false"),
        ("nodes[1].schedulable", 1, "cluster-info nodes[1].schedulable must be true or false"),
        ("nodes[1].hamiUsable", None, "cluster-info nodes[1].hamiUsable must be true or false"),
        ("nodes[1].gpuAllocatable", True, "cluster-info nodes[1].gpuAllocatable must be an integer"),
        ("nodes[1].registerError", 1, "cluster-info nodes[1].registerError must be a string or null"),
        ("nodes[1].cards", {}, "cluster-info nodes[1].cards must be a list"),
        ("nodes[1].cards[1]", [], "cluster-info nodes[1].cards[1] must be an object"),
        ("nodes[1].cards[1].uuid", 1, "cluster-info nodes[1].cards[1].uuid must be a string"),
        ("nodes[1].cards[1].index", "1", "cluster-info nodes[1].cards[1].index must be an integer"),
        ("nodes[1].cards[1].type", None, "cluster-info nodes[1].cards[1].type must be a string"),
        ("nodes[1].cards[1].numa", 0.5, "cluster-info nodes[1].cards[1].numa must be an integer"),
        ("nodes[1].cards[1].health", "true", "cluster-info nodes[1].cards[1].health must be true or false"),
        ("nodes[1].cards[1].mode", 1, "cluster-info nodes[1].cards[1].mode must be a string"),
        ("nodes[1].cards[1].nvidia", 1, "cluster-info nodes[1].cards[1].nvidia must be true or false"),
        ("nodes[1].cards[1].cordoned", "no", "cluster-info nodes[1].cards[1].cordoned must be true or false"),
        ("nodes[1].cards[1].memory", 1, "cluster-info nodes[1].cards[1].memory must be an object"),
        ("nodes[1].cards[1].cores", [], "cluster-info nodes[1].cards[1].cores must be an object"),
        ("nodes[1].cards[1].slots", "x", "cluster-info nodes[1].cards[1].slots must be an object"),
        ("nodes[1].cards[1].memory.total", "1", "cluster-info nodes[1].cards[1].memory.total must be an integer"),
        ("nodes[1].cards[1].memory.used", 1.0, "cluster-info nodes[1].cards[1].memory.used must be an integer"),
        ("nodes[1].cards[1].cores.total", True, "cluster-info nodes[1].cards[1].cores.total must be an integer"),
        ("nodes[1].cards[1].cores.used", None, "cluster-info nodes[1].cards[1].cores.used must be an integer"),
        ("nodes[1].cards[1].slots.total", "10", "cluster-info nodes[1].cards[1].slots.total must be an integer"),
        ("nodes[1].cards[1].slots.used", False, "cluster-info nodes[1].cards[1].slots.used must be an integer"),
        ("nodes[1].cards[1].pods", {}, "cluster-info nodes[1].cards[1].pods must be a list"),
        ("nodes[0].cards[0].pods[0]", "x", "cluster-info nodes[0].cards[0].pods[0] must be an object"),
        ("nodes[0].cards[0].pods[0].namespace", 1, "cluster-info nodes[0].cards[0].pods[0].namespace must be a string"),
        ("nodes[0].cards[0].pods[0].name", None, "cluster-info nodes[0].cards[0].pods[0].name must be a string"),
        ("nodes[0].cards[0].pods[0].uid", 2, "cluster-info nodes[0].cards[0].pods[0].uid must be a string"),
        ("nodes[0].cards[0].pods[0].phase", 3, "cluster-info nodes[0].cards[0].pods[0].phase must be a string"),
        ("nodes[0].cards[0].pods[0].memory", "1", "cluster-info nodes[0].cards[0].pods[0].memory must be an integer"),
        ("nodes[0].cards[0].pods[0].cores", 1.5, "cluster-info nodes[0].cards[0].pods[0].cores must be an integer"),
        ("nodes[0].cards[0].pods[0].slots", True, "cluster-info nodes[0].cards[0].pods[0].slots must be an integer"),
        (
            "nodes[0].cards[0].pods[0].terminating",
            "no",
            "cluster-info nodes[0].cards[0].pods[0].terminating must be true or false",
        ),
    ],
)
def test_a_malformed_field_is_named_by_its_path(path: str, value: object, message: str) -> None:
    """A webhook and plugin of different versions disagree on a field: the error must say exactly which one."""
    document = json.loads(json.dumps(cluster().to_dict()))
    *parents, last = [int(key) if key.isdigit() else key for key in re.findall(r"[^.\[\]]+", path)]
    target = document
    for key in parents:
        target = target[key]
    target[last] = value
    with pytest.raises(ClusterInfoError) as caught:
        cluster_info_from_dict(document)
    assert str(caught.value) == message


def test_a_card_is_open_with_its_last_slot_and_counts_full_memory_as_zero_free() -> None:
    """The summary counts what a new pod can still get: no slot left is closed, the last slot is open, cores HAMi
    does not count (0) are never exhausted, and a card with all its memory used has 0 MiB free, not 1."""

    idle = CardInfo("GPU-idle", 0, "NVIDIA-A100", 0, True, "hami-core", True, False, 40960, 0, 100, 0, 10, 0)
    cards = (
        replace(idle, uuid="GPU-full", memory_used=10000, slots_used=10),
        replace(idle, uuid="GPU-last", memory_used=39960, slots_used=9),
        replace(idle, uuid="GPU-uncounted", cores_total=0),
        replace(idle, uuid="GPU-no-memory", memory_used=40960, slots_used=1),
    )
    info = ClusterInfo(NOW, (NodeInfo("n", True, True, True, 40, None, cards),))
    share = NodeFragmentation("n", 3, 1, 1000 + 40960, 40960, 1000)
    assert summarize(info) == Fragmentation(3, 1, 1000 + 40960, 40960, 1000, (share,))


def test_a_document_that_is_not_an_object_is_refused_in_one_plain_line() -> None:
    """The error reaches the user as is: it names the document once, without repeating its own prefix."""
    with pytest.raises(ClusterInfoError) as caught:
        cluster_info_from_dict([])
    assert str(caught.value) == "cluster-info document must be an object"


KEPT = (
    Reservation("team/big", ("GPU-b0",), datetime(2026, 11, 29, 17, 1, tzinfo=UTC)),
    Reservation("team/duo", ("GPU-a0", "GPU-b1"), datetime(2026, 11, 29, 17, 2, tzinfo=UTC)),
)


def test_the_rooms_kept_read_back_and_narrow_with_the_nodes_their_cards_are_on() -> None:
    """`status NODE` shows the rooms kept on that node's cards only; a server before them sends none."""
    info = replace(cluster(), kept=KEPT)
    document = json.loads(json.dumps(info.to_dict()))
    assert document["keptRooms"] == [
        {"pod": "team/big", "cards": ["GPU-b0"], "until": "2026-11-29T17:01:00Z"},
        {"pod": "team/duo", "cards": ["GPU-a0", "GPU-b1"], "until": "2026-11-29T17:02:00Z"},
    ]
    assert cluster_info_from_dict(document) == info
    assert info.only({"gpu-a100-0"}).kept == KEPT[1:]
    assert info.only({"gpu-a100-1"}).kept == KEPT
    assert info.only({"cpu-0"}).kept == ()
    assert [node.name for node in info.only({"gpu-a100-1"}).nodes] == ["gpu-a100-1"]
    del document["keptRooms"]
    assert cluster_info_from_dict(document).kept == ()
    assert info.kept_view() == info.only({"gpu-a100-0", "gpu-a100-1"}), "the nodes whose cards are kept"
    assert replace(info, kept=KEPT[:1]).kept_view() == replace(info, kept=KEPT[:1]).only({"gpu-a100-1"})
    assert cluster().kept_view() == ClusterInfo(NOW, (), cluster().warnings), "no room kept, no node shown"


def test_only_the_rooms_still_kept_are_served_soonest_deadline_first() -> None:
    """A room past its deadline keeps nothing; one further ahead than any rescue keeps one is not believed."""
    rooms = [
        Reservation("team/later", ("GPU-a0",), NOW + timedelta(seconds=30)),
        Reservation("team/b", ("GPU-a1",), NOW + timedelta(seconds=10)),
        Reservation("team/a", ("GPU-b0",), NOW + timedelta(seconds=10)),
        Reservation("team/over", ("GPU-b1",), NOW),
        Reservation("team/far", ("GPU-b1",), NOW + MAX_RESERVE + timedelta(seconds=1)),
    ]
    assert [room.pod for room in kept_rooms(rooms, NOW)] == ["team/a", "team/b", "team/later"]


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("pod", 1, "cluster-info keptRooms[0].pod must be a string"),
        ("pod", "big", "cluster-info keptRooms[0].pod must be namespace/name"),
        ("pod", "team/Big", "cluster-info keptRooms[0].pod must be namespace/name"),
        ("cards", "GPU-a", "cluster-info keptRooms[0].cards must be a list"),
        ("cards", [], "cluster-info keptRooms[0].cards must be 1 to 16 card UUIDs"),
        ("cards", ["GPU-a,GPU-b"], "cluster-info keptRooms[0].cards must be 1 to 16 card UUIDs"),
        ("cards", ["GPU-a"] * 17, "cluster-info keptRooms[0].cards must be 1 to 16 card UUIDs"),
        (
            "until",
            "soon",
            "cluster-info: keptRooms[0].until 'soon' is not an RFC 3339 time such as 2026-01-02T03:04:05Z",
        ),
    ],
)
def test_a_malformed_kept_room_is_named_by_its_path(key: str, value: object, message: str) -> None:
    room = {"pod": "team/big", "cards": ["GPU-a"], "until": "2026-11-29T17:01:00Z", key: value}
    document = {"generatedAt": "2026-11-29T17:00:00Z", "keptRooms": [room]}
    with pytest.raises(ClusterInfoError) as caught:
        cluster_info_from_dict(document)
    assert str(caught.value) == message
    with pytest.raises(ClusterInfoError, match=r"^cluster-info keptRooms\[0\] must be an object$"):
        cluster_info_from_dict({"generatedAt": "2026-11-29T17:00:00Z", "keptRooms": [[]]})


def test_the_document_carries_the_summary_the_caller_already_has_rather_than_its_own() -> None:
    """The webhook's cache sums the summary from its per-node shares and hands it in: the document shows that one."""
    info = cluster()
    first_only = fragmentation_of([node_share(info.nodes[0])])
    assert info.to_dict(first_only)["fragmentation"] == {
        "openCards": 1,
        "wholeCardsFree": 0,
        "freeMiB": 30720,
        "largestRequestMiB": 30720,
        "strandedMiB": 30720,
        "nodes": [
            {
                "name": "gpu-a100-0",
                "openCards": 1,
                "wholeCardsFree": 0,
                "freeMiB": 30720,
                "largestRequestMiB": 30720,
                "strandedMiB": 30720,
            }
        ],
    }
    assert info.to_dict()["fragmentation"]["openCards"] == 2, "without one, the document sums the view itself"


def test_a_kept_room_of_sixteen_cards_reads_back() -> None:
    """Sixteen cards is the most a room keeps, and still a room: only a seventeenth is refused."""
    cards = [f"GPU-{index}" for index in range(16)]
    room = {"pod": "team/wide", "cards": cards, "until": "2026-11-29T17:01:00Z"}
    document = {"generatedAt": "2026-11-29T17:00:00Z", "keptRooms": [room]}
    assert cluster_info_from_dict(document).kept == (
        Reservation("team/wide", tuple(cards), datetime(2026, 11, 29, 17, 1, tzinfo=UTC)),
    )
