"""`status` as each -o format prints it: the fleet summary, when it is chosen, and the detailed view (one table per
node) it replaces."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone

import yaml
from test_core_fleet import NOW, fleet

from kubectl_hami_place.cli._present import PLACEMENT_WIDE, bar, placement_columns, placement_row
from kubectl_hami_place.cli._status import SUMMARY_ABOVE, Status, StatusSummary, shows_summary
from kubectl_hami_place.cli.output import Table, Text, formatter_for
from kubectl_hami_place.core.cluster_info import CardInfo, ClusterInfo, NodeInfo
from kubectl_hami_place.core.fleet import summarize_fleet
from kubectl_hami_place.core.fragmentation import Fragmentation, NodeFragmentation, summarize
from kubectl_hami_place.core.reservation import Reservation
from kubectl_hami_place.core.usage import PodOnCard

BERLIN = timezone(timedelta(hours=1))


def result() -> StatusSummary:
    return StatusSummary(summarize_fleet(fleet(), top=1), {"Consumed": 2}, NOW, "computed from the API server", False)


def test_the_summary_is_chosen_above_the_node_count_unless_nodes_are_named_or_the_flag_says() -> None:
    assert not shows_summary(None, False, SUMMARY_ABOVE)
    assert shows_summary(None, False, SUMMARY_ABOVE + 1)
    assert not shows_summary(None, True, SUMMARY_ABOVE + 1)
    assert shows_summary(True, True, 1)
    assert not shows_summary(False, False, 5000)


def test_table_has_a_row_per_card_type_a_total_and_the_most_fragmented_nodes() -> None:
    lines = formatter_for("table", color=False).render(result()).splitlines()
    assert lines[0] == "4 GPU nodes (3 usable), 7 cards (6 open, 3 whole free)"
    [h100] = [line for line in lines if line.startswith("NVIDIA-H100-80GB ")]
    assert h100.split()[1:4] == ["2", "3", "2"] and "121,856 MiB" in h100
    [total] = [line for line in lines if line.startswith("all ")]
    assert total.split()[1:3] == ["4", "7"]
    assert "Most fragmented nodes (1 of 2 with stranded memory)" in lines
    [worst] = [line for line in lines if line.startswith("h0 ")]
    assert "80,896 MiB" in worst
    assert "Placements: 2 Consumed (kubectl hami-place list -A)" in lines
    assert lines[-1] == "Source: computed from the API server"


def test_json_and_yaml_carry_the_same_document() -> None:
    document = json.loads(formatter_for("json", color=False).render(result()))
    assert yaml.safe_load(formatter_for("yaml", color=False).render(result())) == document
    assert document["generatedAt"] == "2026-12-01T12:00:00Z"
    assert document["summary"]["total"]["strandedMiB"] == 30720 + 121856
    assert [node["name"] for node in document["summary"]["mostFragmented"]] == ["h0"]
    assert document["placements"] == {"Consumed": 2}


CARD = CardInfo("GPU-0", 0, "NVIDIA-A100", 1, True, "hami-core", True, False, 40960, 10240, 100, 30, 10, 2)
ON_CARD = (
    PodOnCard("team-a", "train", "u1", "Running", 1, 8192, 20),
    PodOnCard("team-b", "old", "u2", "Running", 1, 2048, 10, deleting=True),
)
PLACEMENT = {"metadata": {"namespace": "team-a", "name": "pin-a"}, "spec": {"nodeName": "n1"}}


def detailed(nodes: tuple[NodeInfo, ...], fragmentation: Fragmentation) -> Status:
    return Status(ClusterInfo(NOW, nodes), fragmentation, (PLACEMENT,), "webhook hami/gd", True, True)


def test_the_detailed_view_has_a_table_per_node_with_each_cards_health_and_pods() -> None:
    """Per node, whether pods can land there at all; per card, why HAMi skips it and who holds its memory."""
    cards = (
        replace(CARD, pods=ON_CARD),
        replace(CARD, uuid="GPU-1", index=1, health=False, cordoned=True),
        replace(CARD, uuid="GPU-2", index=2, cordoned=True, nvidia=False),
        replace(CARD, uuid="GPU-3", index=3, nvidia=False),
    )
    ready = NodeInfo("n1", True, True, True, 4, None, cards)
    broken = NodeInfo("n2", False, False, False, 1, "register unreadable", (CARD,))
    empty = NodeInfo("n3", True, True, True, 1, None, ())
    top = NodeFragmentation("n1", 4, 0, 30720, 30720, 30720)
    fragmentation = Fragmentation(4, 0, 40960, 30720, 30720, (NodeFragmentation("n3", 0, 0, 0, 0, 0), top))
    used = bar(10240, 40960)

    def row(index: int, health: str, pods: str) -> tuple[str, ...]:
        memory = ("40960 MiB", "10240/40960 MiB")[1]
        return (
            f"gpu-{index}",
            "NVIDIA-A100",
            f"GPU-{index}",
            "1",
            health,
            memory,
            used,
            "30/100%",
            "2/10",
            "hami-core",
            pods,
        )

    assert detailed((ready, broken, empty), fragmentation).to_blocks() == [
        Table(
            title="Node n1: Ready, schedulable, nvidia.com/gpu 4, 4 cards",
            columns=("GPU", "Model", "UUID", "NUMA", "Health", "Memory", "Used", "Cores", "Slots", "Mode", "Pods"),
            rows=(
                row(0, "[green]healthy[/]", "team-a/train (8192 MiB, 20%), team-b/old (2048 MiB, 10%) terminating"),
                row(1, "[red]unhealthy[/]", "-"),
                row(2, "[yellow]cordoned[/]", "-"),
                row(3, "[yellow]not NVIDIA[/]", "-"),
            ),
            wide=frozenset({"Mode"}),
            styles={"Used": "markup", "Health": "markup"},
            empty="  no cards registered",
        ),
        Text(
            (
                "Node n2: NotReady, cordoned, nvidia.com/gpu 1 (HAMi will not use it), 1 card",
                "  register: register unreadable",
            ),
            "bold",
        ),
        Table(
            title="Node n3: Ready, schedulable, nvidia.com/gpu 1, 0 cards",
            columns=("GPU", "Model", "UUID", "NUMA", "Health", "Memory", "Used", "Cores", "Slots", "Mode", "Pods"),
            rows=(),
            wide=frozenset({"Mode"}),
            styles={"Used": "markup", "Health": "markup"},
            empty="  no cards registered",
        ),
        Table(
            title="Placements",
            columns=placement_columns(True),
            rows=(placement_row(PLACEMENT, True),),
            wide=PLACEMENT_WIDE,
            empty="none",
        ),
        Text(
            (
                "Fragmentation",
                "  whole cards free:            0 of 4 open cards",
                "  free memory:                 40960 MiB",
                "  largest one-card request:    30720 MiB (on n1)",
                "  stranded free memory:        30720 MiB (free on cards a pod already uses: no whole-card request "
                "can have it)",
            )
        ),
        Text(("Source: webhook hami/gd",), style="dim"),
    ]


def test_a_cluster_with_no_gpu_node_says_so_and_names_no_node_for_the_largest_request() -> None:
    """An empty view must say why it is empty (no node registers cards), not print an empty table."""

    def lines(open_cards: int) -> Text:
        return Text(
            (
                "Fragmentation",
                f"  whole cards free:            0 of {open_cards} open cards",
                "  free memory:                 0 MiB",
                "  largest one-card request:    0 MiB",
                "  stranded free memory:        0 MiB (free on cards a pod already uses: no whole-card request can "
                "have it)",
            )
        )

    blocks = detailed((), Fragmentation(0, 0, 0, 0, 0)).to_blocks()
    assert [blocks[0], blocks[2]] == [
        Text(("No HAMi GPU nodes (no node has hami.io/node-nvidia-register or nvidia.com/gpu).",)),
        lines(0),
    ]
    # A node whose cards are all full: the largest request is 0 MiB, on no node worth naming.
    full = Fragmentation(1, 0, 0, 0, 0, (NodeFragmentation("n1", 1, 0, 0, 0, 0),))
    assert detailed((), full).to_blocks()[2] == lines(1)


def test_the_detailed_json_is_the_cluster_info_document_with_its_source_and_placements() -> None:
    """A program reads the same document from the webhook's API and from `status -o json`, plus where it came from."""
    info = ClusterInfo(NOW, (NodeInfo("n1", True, True, True, 1, None, (CARD,)),))
    fragmentation = summarize(info)
    status = Status(info, fragmentation, (PLACEMENT,), "computed from the API server", False, False)
    assert status.to_data() == {
        "source": "computed from the API server",
        "fromWebhook": False,
        **info.to_dict(fragmentation),
        "placements": [PLACEMENT],
    }
    assert status.to_blocks()[1] == Table(
        title="Placements",
        columns=placement_columns(False),
        rows=(placement_row(PLACEMENT, False),),
        wide=PLACEMENT_WIDE,
        empty="none",
    )


def test_the_rooms_kept_for_rescued_pods_are_listed_by_node_and_card_before_the_fragmentation() -> None:
    """A free card that refuses new pods is explained: its room is kept for a rescued pod until a deadline, in UTC."""
    second = replace(CARD, uuid="GPU-1", index=1)
    info = ClusterInfo(
        NOW,
        (NodeInfo("n1", True, True, True, 2, None, (CARD, second)),),
        kept=(
            Reservation("team/big", ("GPU-1", "GPU-0"), datetime(2026, 12, 1, 13, 0, 5, tzinfo=BERLIN)),
            Reservation("team/gone", ("GPU-x",), datetime(2026, 12, 1, 12, 1, tzinfo=UTC)),
        ),
    )
    blocks = Status(info, summarize(info), (), "webhook hami/gd", True, False).to_blocks()
    assert blocks[2] == Table(
        title="Rooms kept for rescued pods (pods admitted meanwhile keep off these cards)",
        columns=("POD", "CARDS", "UNTIL"),
        rows=(
            ("team/big", "n1/gpu-1,gpu-0", "2026-12-01 12:00:05Z"),
            ("team/gone", "GPU-x", "2026-12-01 12:01:00Z"),
        ),
    ), "a card of a node not shown is named by its UUID"
    without = Status(replace(info, kept=()), summarize(info), (), "webhook hami/gd", True, False).to_blocks()
    assert [block for block in blocks if block != blocks[2]] == without


def test_the_summary_table_whole() -> None:
    """Every line of the summary as printed: the totals an operator sizes the fleet by, and where memory is stranded
    (a node of two card types names both)."""
    fleet_summary = summarize_fleet(fleet(), top=1)
    worst = replace(fleet_summary.most_fragmented[0], card_types=("NVIDIA-H100-80GB", "NVIDIA-A100-SXM4-40GB"))
    summary = StatusSummary(
        replace(fleet_summary, most_fragmented=(worst,)), {"Consumed": 2, "Pending": 1}, NOW, "webhook hami/gd", True
    )
    assert summary.to_blocks() == [
        Text(("4 GPU nodes (3 usable), 7 cards (6 open, 3 whole free)",), style="bold"),
        Table(
            title="Card types",
            columns=("Type", "Nodes", "Cards", "Open", "Whole free", "Free", "Stranded"),
            rows=(
                ("NVIDIA-A100-SXM4-40GB", "2", "4", "4", "3", "153,600 MiB", "30,720 MiB"),
                ("NVIDIA-H100-80GB", "2", "3", "2", "0", "121,856 MiB", "121,856 MiB"),
                ("all", "4", "7", "6", "3", "275,456 MiB", "152,576 MiB"),
            ),
            empty="  no cards registered",
        ),
        Table(
            title="Most fragmented nodes (1 of 2 with stranded memory)",
            columns=("Node", "Types", "Open", "Whole free", "Free", "Stranded", "Largest request"),
            rows=(
                (
                    "h0",
                    "NVIDIA-H100-80GB,NVIDIA-A100-SXM4-40GB",
                    "2",
                    "0",
                    "121,856 MiB",
                    "121,856 MiB",
                    "80,896 MiB",
                ),
            ),
            empty="  none: every open card in use is full or every free card is whole",
        ),
        Text(("Placements: 2 Consumed, 1 Pending (kubectl hami-place list -A)",)),
        Text(("Source: webhook hami/gd",), style="dim"),
    ]
    assert summary.to_data() == {
        "source": "webhook hami/gd",
        "fromWebhook": True,
        "generatedAt": "2026-12-01T12:00:00Z",
        "summary": summary.summary.to_dict(),
        "placements": {"Consumed": 2, "Pending": 1},
        "keptRooms": [],
    }
    none = StatusSummary(fleet_summary, {}, NOW, "webhook hami/gd", True)
    assert none.to_blocks()[3] == Text(("Placements: none (kubectl hami-place list -A)",))


def test_the_summary_of_a_large_fleet_lists_the_rooms_kept_too() -> None:
    """Above 20 nodes the summary is what `status` shows: a free card kept for a rescued pod is explained there as
    well, in the table the detailed view prints and as cluster-info's `keptRooms`."""
    until = datetime(2026, 12, 1, 12, 0, 30, tzinfo=UTC)
    kept = replace(fleet(), kept=(Reservation("team/big", ("H1",), until),)).kept_view()
    summary = StatusSummary(summarize_fleet(fleet(), top=1), {}, NOW, "webhook hami/gd", True, kept)
    blocks = summary.to_blocks()
    assert blocks[-2:] == [
        Table(
            title="Rooms kept for rescued pods (pods admitted meanwhile keep off these cards)",
            columns=("POD", "CARDS", "UNTIL"),
            rows=(("team/big", "h0/gpu-1", "2026-12-01 12:00:30Z"),),
        ),
        Text(("Source: webhook hami/gd",), style="dim"),
    ]
    assert summary.to_data()["keptRooms"] == [{"pod": "team/big", "cards": ["H1"], "until": "2026-12-01T12:00:30Z"}]
