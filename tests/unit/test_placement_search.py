"""The best placement found: scarce card models first, others kept off them, the planner's moves for what is left,
and the end placement checked from scratch."""

from __future__ import annotations

import pytest

from bench.placement_search import improve, problems, scarce_models, search, search_order
from bench.repack import balanced_choice, place_all, repack_order
from bench.trace_replay import SPREAD_BINPACK, Cluster, Task, TraceNode

T4 = TraceNode("t4", 64000, 262144, 1, "T4")
V100 = TraceNode("v100", 64000, 262144, 2, "V100M16")


def task(name: str, num_gpu: int, gpu_milli: int, *spec: str, cpu_milli: int = 1000) -> Task:
    """A task of the trace without times, bound to the models in `spec` (any model when none)."""
    return Task(name, cpu_milli, 1024, num_gpu, gpu_milli, spec)


def test_a_model_is_scarce_when_the_tasks_bound_to_it_alone_ask_more_than_its_cards() -> None:
    """Tasks that accept other models too can go elsewhere, so only those bound to one model alone count for it."""
    tasks = [
        task("a", 1, 700, "T4"),
        task("b", 1, 500, "T4"),
        task("c", 1, 1000, "T4", "V100M16"),
        task("d", 2, 1000, "V100M16"),
        task("e", 1, 1000),
    ]
    assert scarce_models([T4, V100], tasks) == frozenset({"T4"})
    assert scarce_models([T4, V100], tasks[1:]) == frozenset()


def test_the_search_order_puts_scarce_bound_tasks_first_their_wide_shares_last_and_node_sized_tasks_first() -> None:
    """Some tasks bound to a scarce model stay unplaced anyway: better the shares whose rest of a card few others
    fit. Among the others the tasks as large as a node go first (any share on a node would strand them); the
    repack's order within each group."""
    tasks = [
        task("any-share", 1, 300),
        task("t4-wide", 1, 810, "T4"),
        task("t4-share", 1, 470, "T4"),
        task("any-one", 1, 1000),
        task("any-two", 2, 1000),
        task("t4-whole", 1, 1000, "T4"),
        task("v100-one", 1, 1000, "V100M16"),
    ]
    order = search_order(tasks, frozenset({"T4"}), 2)
    assert [t.name for t in order] == [
        "t4-whole",
        "t4-share",
        "t4-wide",
        "any-two",
        "v100-one",
        "any-one",
        "any-share",
    ]


def test_the_planner_moves_a_share_to_make_a_whole_card_for_a_task_left() -> None:
    """Two half cards on two cards leave no whole card; one move puts both on one card and the task left is placed,
    and the placement passes the check."""
    cluster = Cluster([V100], SPREAD_BINPACK)
    cluster.put(task("half-a", 1, 500), 0, (0,))
    cluster.put(task("half-b", 1, 500), 0, (1,))
    whole = task("whole", 1, 1000)
    left, passes, moves = improve(cluster, [whole], 4, 100_000)
    assert (left, passes, moves) == ([], 1, 1)
    halves = {cluster.running["half-a"].cards, cluster.running["half-b"].cards}
    assert sorted([*halves, cluster.running["whole"].cards]) == [(0,), (1,)], "both halves share one card"
    assert problems([V100], cluster) == []


def test_a_pass_that_places_nothing_ends_the_search_with_the_task_still_left() -> None:
    """A whole card on each card leaves nothing to move for another: one pass, no move."""
    cluster = Cluster([V100], SPREAD_BINPACK)
    cluster.put(task("one", 1, 1000), 0, (0,))
    cluster.put(task("two", 1, 1000), 0, (1,))
    third = task("third", 1, 1000)
    assert improve(cluster, [third], 4, 100_000) == ([third], 1, 0)


def test_the_check_names_a_card_hami_refuses_and_a_node_short_of_cpu() -> None:
    """The placement is judged again from scratch, not by the search's own bookkeeping: two shares over a card's
    cores, and a task past its node's CPU, each named."""
    cluster = Cluster([V100, T4], SPREAD_BINPACK)
    cluster.put(task("sixty", 1, 600), 0, (0,))
    cluster.put(task("fifty", 1, 500), 0, (0,))
    cluster.put(task("hungry", 1, 300, cpu_milli=70000), 1, (0,))
    cluster.put(task("fine", 1, 400), 0, (1,))
    assert problems([V100, T4], cluster) == [
        "fifty: HAMi's fit refuses cards (0,) of v100",
        "hungry: t4 has not its CPU and memory",
    ]


def test_the_search_leaves_the_wide_share_of_a_scarce_model_where_the_repack_leaves_two_halves() -> None:
    """A T4 asked for 1.8 cards by tasks bound to it: the repack, largest first, puts the 0.8 share on the card and
    leaves both halves (1.0 unplaced); the search fills the card with the halves and leaves the 0.8 share."""
    tasks = [
        task("t4-wide", 1, 800, "T4"),
        task("t4-half-a", 1, 500, "T4"),
        task("t4-half-b", 1, 500, "T4"),
        task("v100-two", 2, 1000, "V100M16"),
    ]
    repacked = place_all([T4, V100], repack_order(tasks), SPREAD_BINPACK, resources=True, choose=balanced_choice)
    assert repacked["unplaced"] == pytest.approx(1.0 / 3.8)
    row = search([T4, V100], tasks, SPREAD_BINPACK)
    assert (row["scarce"], row["asked"]) == (["T4"], pytest.approx(3.8))
    assert (row["greedy"], row["unplaced"]) == (pytest.approx(0.8 / 3.8), pytest.approx(0.8 / 3.8))
    assert (row["tasks_unplaced"], row["passes"], row["moves"], row["problems"]) == (1, 1, 0, [])
    assert row["unplaced_by_models"] == {"T4": pytest.approx(0.8 / 3.8)}
