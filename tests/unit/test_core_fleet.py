"""The fleet summary `status` shows above a node count: per card type, in total, and the most fragmented nodes."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st
from test_core_cluster_info import _NODE_VIEWS, a100, node, pod

from kubectl_hami_place.core.cards import Card
from kubectl_hami_place.core.cluster_info import ClusterInfo, NodeInfo
from kubectl_hami_place.core.fleet import (
    CardTypeRoom,
    FleetSummary,
    FragmentedNode,
    placements_by_phase,
    summarize_fleet,
)
from kubectl_hami_place.core.fragmentation import summarize
from tests.cluster_views import build_cluster_info

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
H100 = "NVIDIA-H100-80GB"
A100 = "NVIDIA-A100-SXM4-40GB"


def h100(uuid: str, index: int) -> Card:
    return Card(uuid, index, 10, 81920, 100, H100, 0, True, "hami-core")


def fleet() -> ClusterInfo:
    """a0: both A100s idle; a1: one A100 a quarter used, one cordoned node's worth of nothing; h0, h1: H100s."""
    nodes = [
        node("a0", [a100("A0", 0), a100("A1", 1)]),
        node("a1", [a100("B0", 0), a100("B1", 1)]),
        node("h0", [h100("H0", 0), h100("H1", 1)]),
        node("h1", [h100("I0", 0)], unschedulable=True),
    ]
    pods = [
        pod("quarter", "a1", "B0,NVIDIA,10240,0:;"),
        pod("half", "h0", "H0,NVIDIA,40960,0:;"),
        pod("small", "h0", "H1,NVIDIA,1024,0:;"),
    ]
    return build_cluster_info(nodes, pods, NOW)


def test_rows_per_card_type_and_total() -> None:
    summary = summarize_fleet(fleet())
    assert (summary.nodes, summary.usable_nodes) == (4, 3)
    rows = {row.card_type: row for row in summary.types}
    a, h = rows["NVIDIA-A100-SXM4-40GB"], rows[H100]
    assert (a.nodes, a.cards, a.open_cards, a.whole_cards_free) == (2, 4, 4, 3)
    assert (a.free_mib, a.stranded_mib) == (3 * 40960 + 30720, 30720)
    # The cordoned node's H100 is counted as a card but is not open: no free or stranded memory there.
    assert (h.nodes, h.cards, h.open_cards, h.whole_cards_free) == (2, 3, 2, 0)
    assert (h.free_mib, h.stranded_mib) == (40960 + 80896, 40960 + 80896)
    total = summary.total
    assert (total.nodes, total.cards, total.whole_cards_free) == (4, 7, 3)
    assert (total.free_mib, total.stranded_mib) == (a.free_mib + h.free_mib, a.stranded_mib + h.stranded_mib)


def test_most_fragmented_nodes_by_stranded_memory_then_name() -> None:
    summary = summarize_fleet(fleet(), top=1)
    assert summary.fragmented_nodes == 2
    [worst] = summary.most_fragmented
    assert (worst.name, worst.card_types, worst.stranded_mib, worst.largest_request_mib) == (
        "h0",
        (H100,),
        121856,
        80896,
    )
    assert [n.name for n in summarize_fleet(fleet()).most_fragmented] == ["h0", "a1"]
    assert summarize_fleet(fleet(), top=0).most_fragmented == ()


@given(st.lists(_NODE_VIEWS, max_size=5).map(tuple))
def test_the_total_is_the_fragmentation_summary(nodes: tuple[NodeInfo, ...]) -> None:
    # The fleet view and the per-node view must never disagree on what is free, whole or stranded.
    info = ClusterInfo(generated_at=NOW, nodes=nodes)
    summary, fragmentation = summarize_fleet(info, top=len(nodes)), summarize(info)
    total = summary.total
    assert (total.open_cards, total.whole_cards_free, total.free_mib, total.stranded_mib) == (
        fragmentation.open_cards,
        fragmentation.whole_cards_free,
        fragmentation.free_mib,
        fragmentation.stranded_mib,
    )
    assert sum(row.cards for row in summary.types) == total.cards
    assert sorted((n.name, n.stranded_mib) for n in summary.most_fragmented) == sorted(
        (n.name, n.stranded_mib) for n in fragmentation.nodes if n.stranded_mib > 0
    )


def test_placements_by_phase() -> None:
    consumed = {"status": {"phase": "Consumed"}}
    items = [consumed, consumed, {}, {"status": None}, {"status": {"phase": ""}}]
    assert placements_by_phase(items) == {"Consumed": 2, "Pending": 3}


def test_the_summary_document_names_every_count() -> None:
    """`status --summary -o json` is read by scripts: each key and count is part of its contract."""
    assert summarize_fleet(fleet(), top=1).to_dict() == {
        "nodes": 4,
        "usableNodes": 3,
        "cardTypes": [
            {
                "type": A100, "nodes": 2, "cards": 4, "openCards": 4, "wholeCardsFree": 3,
                "freeMiB": 153600, "strandedMiB": 30720,
            },
            {
                "type": H100, "nodes": 2, "cards": 3, "openCards": 2, "wholeCardsFree": 0,
                "freeMiB": 121856, "strandedMiB": 121856,
            },
        ],
        "total": {
            "type": "all", "nodes": 4, "cards": 7, "openCards": 6, "wholeCardsFree": 3,
            "freeMiB": 275456, "strandedMiB": 152576,
        },
        "fragmentedNodes": 2,
        "mostFragmented": [
            {
                "name": "h0", "types": [H100], "openCards": 2, "wholeCardsFree": 0,
                "freeMiB": 121856, "strandedMiB": 121856, "largestRequestMiB": 80896,
            }
        ],
    }  # fmt: skip


def test_a_fragmented_node_counts_every_open_card_after_a_closed_one_and_a_single_stranded_mib() -> None:
    """A node's row must show all its room: an unhealthy first card hides none of it, and 1 stranded MiB is listed."""
    nodes = [
        node("mixed", [a100("X0", 0, healthy=False), a100("X1", 1), a100("X2", 2), a100("X3", 3)]),
        node("tight", [a100("T0", 0)]),
    ]
    pods = [pod("quarter", "mixed", "X3,NVIDIA,10240,0:;"), pod("nearly", "tight", "T0,NVIDIA,40959,0:;")]
    assert summarize_fleet(build_cluster_info(nodes, pods, NOW)) == FleetSummary(
        nodes=2,
        usable_nodes=2,
        types=(CardTypeRoom(A100, 2, 5, 4, 2, 2 * 40960 + 30720 + 1, 30720 + 1),),
        total=CardTypeRoom("all", 2, 5, 4, 2, 2 * 40960 + 30720 + 1, 30720 + 1),
        most_fragmented=(
            FragmentedNode("mixed", (A100,), 3, 2, 2 * 40960 + 30720, 30720, 40960),
            FragmentedNode("tight", (A100,), 1, 0, 1, 1, 1),
        ),
        fragmented_nodes=2,
    )
