"""The full repack: inflation's tasks placed again hardest first, beside arrival order, on HAMi's fit and policy."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from bench.repack import balanced_choice, best_repack, drawn, place_all, repack_order, replay, report_figures, target
from bench.trace_replay import Task, TraceNode

NODE = TraceNode("node-0", 64000, 262144, 2, "V100M16")


def task(name: str, num_gpu: int, gpu_milli: int, cpu_milli: int = 1000) -> Task:
    """A task of the trace without times."""
    return Task(name, cpu_milli, 1024, num_gpu, gpu_milli)


def test_a_whole_card_placed_first_leaves_the_shares_one_card_where_arrival_order_split_them_over_both() -> None:
    """Two 0.6 shares arriving first take a card each, so the whole card that follows finds none; placed first,
    the whole card gets one and only one share is left out: what re-placing every task would win."""
    tasks = [task("a", 1, 600), task("b", 1, 600), task("whole", 1, 1000)]
    row = replay([NODE], tasks, "spread", resources=True)
    assert (row["tasks"], row["arrival"]["tasks_unplaced"], row["repack"]["tasks_unplaced"]) == (3, 1, 1)
    assert row["arrival"]["unplaced"] == pytest.approx(1.0 / 2.2)
    assert row["repack"]["unplaced"] == pytest.approx(0.6 / 2.2)


def test_the_repack_order_is_model_bound_then_gpus_then_cards_then_cpu_with_arrival_breaking_ties() -> None:
    """Hardest to place first: a task bound to a card model before any other (the others would take those cards),
    two cards before one whole card of the same GPUs asked, more CPU first among equals, and equal tasks keep their
    arrival order."""
    tasks = [
        task("share", 1, 500),
        replace(task("t4-share", 1, 200), gpu_spec=("T4",)),
        task("cpu", 0, 0, 8000),
        task("one", 1, 1000),
        task("two-halves", 2, 500),
        task("one-more-cpu", 1, 1000, 4000),
        task("one-again", 1, 1000),
    ]
    order = [t.name for t in repack_order(tasks)]
    assert order == ["t4-share", "two-halves", "one-more-cpu", "one", "one-again", "share", "cpu"]


def test_the_tasks_drawn_stop_at_the_capacity_and_leave_cpu_only_tasks_out_without_node_resources() -> None:
    """As the replay draws them: to the task that crosses 100% asked, the list again from the top when it ends."""
    tasks = [task("a", 1, 500), task("cpu", 0, 0), task("b", 1, 1000)]
    assert [t.name for t in drawn([NODE], tasks, resources=True)] == ["a", "cpu", "b", "a#1"]
    assert [t.name for t in drawn([NODE], tasks, resources=False)] == ["a", "b", "a#1"]


def test_the_target_is_a_quarter_of_the_best_policy_alone_with_node_resources_counted() -> None:
    """Issue 22's bar: the rows without CPU and memory and the repack do not set it."""
    rows = [
        {"resources": True, "arrival": {"unplaced": 0.12}, "repack": {"unplaced": 0.01}},
        {"resources": True, "arrival": {"unplaced": 0.08}, "repack": {"unplaced": 0.01}},
        {"resources": False, "arrival": {"unplaced": 0.02}, "repack": {"unplaced": 0.0}},
    ]
    assert target(rows) == pytest.approx(0.02)


def test_the_best_repack_is_either_orders_least_with_node_resources_counted() -> None:
    """The repack a defragmenter could reach beside the target: arrival order (HAMi alone) and the rows without CPU
    and memory do not count."""
    rows = [
        {
            "resources": True,
            "arrival": {"unplaced": 0.001},
            "repack": {"unplaced": 0.05},
            "balanced": {"unplaced": 0.02},
        },
        {"resources": True, "arrival": {"unplaced": 0.1}, "repack": {"unplaced": 0.03}, "balanced": {"unplaced": 0.06}},
        {
            "resources": False,
            "arrival": {"unplaced": 0.1},
            "repack": {"unplaced": 0.01},
            "balanced": {"unplaced": 0.01},
        },
    ]
    assert best_repack(rows) == 0.02


def test_the_report_gives_each_list_its_target_and_best_repack(tmp_path: Path) -> None:
    """The packing bound and the placement search print their figures beside these, read from the report."""
    row = {
        "resources": True,
        "arrival": {"unplaced": 0.12},
        "repack": {"unplaced": 0.05},
        "balanced": {"unplaced": 0.04},
    }
    report = tmp_path / "repack.json"
    report.write_text(json.dumps({"default": [row], "other": [{**row, "balanced": {"unplaced": 0.06}}]}))
    assert report_figures(report) == {"default": (0.03, 0.04), "other": (0.03, 0.05)}


def test_the_balanced_repack_keeps_the_cpu_rich_nodes_cards_for_the_tasks_that_need_its_cpu() -> None:
    """Two small tasks, then two that ask 30 cores: HAMi's spread puts a small one on each node, and the second
    large one finds the only node with its CPU out of cards. Balanced, both small ones go to the node whose CPU
    and memory run out with its cards, and every task is placed."""
    rich, poor = TraceNode("rich", 64000, 262144, 2, "V100M16"), TraceNode("poor", 8000, 32768, 2, "V100M16")
    small = [Task(f"small-{i}", 4000, 16384, 1, 1000) for i in range(2)]
    large = [Task(f"large-{i}", 30000, 65536, 1, 1000) for i in range(2)]
    spread = place_all([rich, poor], [*small, *large], "spread", resources=True)
    balanced = place_all([rich, poor], [*small, *large], "spread", resources=True, choose=balanced_choice)
    assert (spread["tasks_unplaced"], spread["unplaced"]) == (1, pytest.approx(0.25))
    assert (balanced["tasks_unplaced"], balanced["unplaced"]) == (0, 0.0)
