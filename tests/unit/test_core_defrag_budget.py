"""Budget accounting from the history of moves: per run, per rolling hour, per node, per namespace; cooldowns."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from kubectl_hami_place.core.defrag.budget import (
    MoveRecord,
    allowance,
    card_names_of,
    cooldown_reason,
    cooldowns,
    history_from_placements,
    history_shortfall,
    workload_cooldown_reason,
    workload_rest_until,
    workload_rests,
)
from kubectl_hami_place.core.defrag.policy import Budgets
from kubectl_hami_place.core.selectors import LabelSelector, selector_from_dict

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
BUDGETS = Budgets(moves_per_run=4, moves_per_hour=5, moves_per_node=2, moves_per_namespace=3)


def record(pod: str, minutes_ago: float, run: str = "r0", node: str = "n1", result: str = "Evicted") -> MoveRecord:
    """A move `minutes_ago` before NOW."""
    return MoveRecord(run, pod, pod.split("/", maxsplit=1)[0], node, NOW - timedelta(minutes=minutes_ago), result)


def test_nothing_moved_leaves_the_whole_budget() -> None:
    left = allowance(BUDGETS, [], NOW, "r1")
    assert (left.moves, left.run_left, left.hour_left, left.reason) == (4, 4, 5, "")
    assert left.for_node("n1") == 2 and left.for_namespace("a") == 3


def test_the_hour_rolls() -> None:
    history = [record(f"a/p{i}", 10 + i) for i in range(4)] + [record("a/old", 61)]
    left = allowance(BUDGETS, history, NOW, "r1")
    assert left.hour_left == 1 and left.moves == 1
    assert left.for_node("n1") == 0 and left.for_namespace("a") == 0 and left.for_namespace("b") == 3


def test_a_spent_hour_says_when_the_next_move_is_allowed() -> None:
    history = [record(f"b/p{i}", 50 - i, node=f"n{i}") for i in range(5)]
    left = allowance(BUDGETS, history, NOW, "r1")
    assert left.moves == 0
    assert left.reason == (
        "budget: 5 of 5 move(s) made in the last hour (budgets.movesPerHour); the next is allowed after 12:10:00 UTC"
    )


def test_a_budget_lowered_below_the_hours_moves_waits_until_enough_of_them_left_the_hour() -> None:
    """Five moves made 50 to 46 minutes ago and the budget lowered to 3: the third oldest must leave the hour, so
    that two remain, before a move is allowed."""
    history = [record(f"b/p{i}", 50 - i, node=f"n{i}") for i in range(5)]
    left = allowance(replace(BUDGETS, moves_per_hour=3), history, NOW, "r1")
    assert left.reason == (
        "budget: 5 of 3 move(s) made in the last hour (budgets.movesPerHour); the next is allowed after 12:12:00 UTC"
    )


def test_a_resumed_run_counts_its_own_moves() -> None:
    history = [record(f"c/p{i}", 1, run="r1", node=f"n{i}") for i in range(4)]
    left = allowance(BUDGETS, history, NOW, "r1")
    assert left.moves == 0 and left.reason.startswith("budget: this run made 4 of its 4 move(s)")
    assert allowance(BUDGETS, history, NOW, "r2").moves == 1


def test_dry_run_and_blocked_moves_spend_nothing() -> None:
    history = [record("a/p", 1, result="DryRun"), record("a/q", 1, result="Blocked")]
    assert allowance(BUDGETS, history, NOW, "r1").moves == 4
    assert cooldowns(BUDGETS, history, NOW).get("a/p") is None


def test_a_moved_pod_and_its_replacement_rest_for_the_cooldown() -> None:
    moved = MoveRecord("r0", "a/p", "a", "n1", NOW - timedelta(minutes=20), "Evicted", "n2", "a/p-2")
    assert cooldowns(BUDGETS, [moved], NOW).get("a/p") == NOW + timedelta(minutes=40)
    until = cooldowns(BUDGETS, [moved], NOW).get("a/p-2")
    assert until is not None
    assert cooldown_reason(until) == "was moved recently; its cooldown (budgets.cooldown) ends at 12:40:00 UTC"
    assert cooldowns(BUDGETS, [moved], NOW).get("a/other") is None
    assert cooldowns(BUDGETS, [moved], NOW + timedelta(minutes=41)).get("a/p") is None
    again = replace(moved, time=NOW - timedelta(minutes=5), replacement="")
    assert cooldowns(BUDGETS, [again, moved], NOW).get("a/p") == NOW + timedelta(minutes=55), "the latest move wins"


def test_the_pods_a_moved_pods_workload_makes_after_the_move_rest_with_it() -> None:
    """A given-up move's replacement is evicted and its controller makes another pod, which no move names: it rests
    with the workload until the move's cooldown ends; the workload's pods from before the move, another workload's,
    another namespace's and a pod whose creation is unknown do not."""
    workload = selector_from_dict({"matchLabels": {"app": "x", "pod-template-hash": "h1"}})
    then = NOW - timedelta(minutes=20)
    moved = MoveRecord("r0", "a/p", "a", "n1", then, "Evicted", "n2", "a/p-2", "move-p", workload)
    rests = workload_rests(BUDGETS, [moved], NOW)
    made_after = NOW - timedelta(minutes=5)
    labels = {"app": "x", "pod-template-hash": "h1", "extra": "y"}
    assert workload_rest_until(rests, "a", labels, made_after) == NOW + timedelta(minutes=40)
    assert workload_rest_until(rests, "a", labels, NOW - timedelta(minutes=30)) is None, "older than the move"
    assert workload_rest_until(rests, "a", labels, then) == NOW + timedelta(minutes=40), "made in the move's second"
    assert workload_rest_until(rests, "a", {"app": "x", "pod-template-hash": "h2"}, made_after) is None
    assert workload_rest_until(rests, "b", labels, made_after) is None
    assert workload_rest_until(rests, "a", labels, None) is None
    assert workload_rests(BUDGETS, [moved], NOW + timedelta(minutes=41)) == ()
    for idle in (replace(moved, result="DryRun"), replace(moved, result="Blocked"), replace(moved, workload=None)):
        assert workload_rests(BUDGETS, [idle], NOW) == ()
    assert workload_rests(BUDGETS, [replace(moved, workload=LabelSelector())], NOW) == (), "an empty one matches all"
    assert workload_cooldown_reason(NOW + timedelta(minutes=40)) == (
        "was made by a workload one of whose pods was moved recently; the cooldown (budgets.cooldown) ends at "
        "12:40:00 UTC"
    )


def placement(name: str, minutes_ago: float, run: str | None = "run-1", status: dict | None = None) -> dict:
    """A move's placement as the controller creates it."""
    labels = {"app": "x"} if run is None else {"scheduling.hami.placement.com/defrag-run": run}
    return {
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "creationTimestamp": (NOW - timedelta(minutes=minutes_ago)).isoformat(),
            "labels": labels,
            "annotations": {"scheduling.hami.placement.com/defrag-from-node": "gpu-a"},
        },
        "spec": {
            "reqID": "abcdef",
            "podSelector": {"matchLabels": {"app": "x"}},
            "nodeName": "gpu-b",
            "gpuDevices": ["gpu-0"],
            "evictPod": name.removeprefix("move-"),
        },
        "status": status or {},
    }


def test_history_from_placements_reads_the_controllers_moves_newest_first() -> None:
    evicted = {
        "phase": "Consumed",
        "consumedBy": {"name": "x-new", "uid": "u2"},
        "eviction": {"pod": "x-old", "result": "Evicted"},
    }
    history = history_from_placements(
        [
            placement("move-x-old", 30, status=evicted),
            placement("move-y", 10),
            placement("move-z", 20, status={"phase": "Expired"}),
            placement("pin-by-hand", 5, run=None),
        ]
    )
    assert [(r.placement, r.result) for r in history] == [
        ("move-y", "Pending"),
        ("move-z", "NotEvicted"),
        ("move-x-old", "Evicted"),
    ]
    moved = history[2]
    assert (moved.run_id, moved.pod, moved.from_node, moved.to_node) == ("run-1", "team-a/x-old", "gpu-a", "gpu-b")
    assert moved.replacement == "team-a/x-new"
    assert moved.workload == selector_from_dict({"matchLabels": {"app": "x"}}), "the placement's pod selector"
    left = allowance(BUDGETS, history, NOW, "run-2")
    assert left.hour_left == 3 and left.for_node("gpu-a") == 0, "the expired move evicted nothing"
    assert cooldowns(BUDGETS, history, NOW).get("team-a/x-new") == NOW + timedelta(minutes=30)


def test_a_move_stamped_by_an_api_server_clock_ahead_of_this_one_still_spends_the_hour() -> None:
    """A placement's creationTimestamp is the API server's clock: 30 s ahead of this replica's, the move just made
    is still counted."""
    ahead = replace(record("a/p", 0), time=NOW + timedelta(seconds=30))
    left = allowance(Budgets(moves_per_hour=1), [ahead], NOW, "r1")
    assert (left.hour_left, left.moves) == (0, 0)


def test_a_placement_whose_pod_annotation_names_no_pod_of_its_own_namespace_is_no_move() -> None:
    """Anyone who may create placements can label one with a run: naming another namespace's pod, or no pod name at
    all, it spends no budget and starts no cooldown there."""

    def named(name: str, pod: str) -> dict:
        obj = placement(name, 5)
        obj["metadata"]["annotations"]["scheduling.hami.placement.com/defrag-pod"] = pod
        return obj

    history = history_from_placements(
        [named("move-own", "team-a/x"), named("move-other", "team-b/y"), named("move-bad", "team-a/a/b")]
    )
    assert [(r.placement, r.pod) for r in history] == [("move-own", "team-a/x")]
    assert cooldowns(BUDGETS, history, NOW).get("team-b/y") is None


def test_a_finished_ttl_shorter_than_the_hour_or_the_cooldown_is_named_with_the_value_that_holds() -> None:
    """The budgets count moves from their placements: deleted sooner than an hour or the cooldown, they forget."""
    assert history_shortfall(Budgets(cooldown=timedelta(hours=1)), timedelta(hours=24)) == ""
    assert history_shortfall(Budgets(cooldown=timedelta(hours=48)), None) == "", "0 keeps them"
    long_rest = history_shortfall(Budgets(cooldown=timedelta(hours=48)), timedelta(hours=24))
    assert long_rest == (
        "finished placements are deleted after 24h (--finished-ttl), so a moved pod's budgets.cooldown (48h) ends "
        "after that; set the server's finishedTTL to 172800 (48h) or more, or 0 to keep them"
    )
    short = history_shortfall(Budgets(cooldown=timedelta(minutes=5)), timedelta(minutes=10))
    assert short.startswith("finished placements are deleted after 10m (--finished-ttl), so budgets.movesPerHour")
    assert "cooldown" not in short and "to 3600 (1h) or more" in short


def test_a_move_made_exactly_an_hour_ago_has_left_the_hour_and_its_cooldown() -> None:
    hour_ago = [record("a/p", 60)]
    assert allowance(BUDGETS, hour_ago, NOW, "r1").hour_left == 5
    assert cooldowns(Budgets(cooldown=timedelta(hours=1)), hour_ago, NOW).get("a/p") is None


def test_equal_run_and_hour_budgets_left_name_the_run_as_binding() -> None:
    assert allowance(Budgets(moves_per_run=3, moves_per_hour=3), [], NOW, "r1").binding() == "this run"
    assert allowance(Budgets(moves_per_run=3, moves_per_hour=2), [], NOW, "r1").binding() == "this hour"


@pytest.mark.parametrize("field", ["movesPerRun", "movesPerHour"])
def test_a_budget_of_zero_allows_no_move_and_says_which_to_raise(field: str) -> None:
    """Not "the next is allowed after" a time: none ever is."""
    budgets = replace(BUDGETS, **{"moves_per_run" if field == "movesPerRun" else "moves_per_hour": 0})
    left = allowance(budgets, [], NOW, "r1")
    assert left.moves == 0
    assert left.reason == f"budget: budgets.{field} is 0, so no pod is moved; raise it to let the controller move pods"


def test_a_finished_ttl_of_exactly_the_hour_or_the_cooldown_holds_that_budget() -> None:
    assert history_shortfall(Budgets(cooldown=timedelta(hours=1)), timedelta(hours=1)) == ""
    assert history_shortfall(Budgets(cooldown=timedelta(hours=2)), timedelta(hours=1)) == (
        "finished placements are deleted after 1h (--finished-ttl), so a moved pod's budgets.cooldown (2h) ends "
        "after that; set the server's finishedTTL to 7200 (2h) or more, or 0 to keep them"
    )
    assert history_shortfall(Budgets(cooldown=timedelta(minutes=30)), timedelta(minutes=30)) == (
        "finished placements are deleted after 30m (--finished-ttl), so budgets.movesPerHour counts only the moves "
        "of the last 30m; set the server's finishedTTL to 3600 (1h) or more, or 0 to keep them"
    )
    assert history_shortfall(Budgets(cooldown=timedelta(hours=2)), timedelta(minutes=30)) == (
        "finished placements are deleted after 30m (--finished-ttl), so budgets.movesPerHour counts only the moves "
        "of the last 30m and a moved pod's budgets.cooldown (2h) ends after that; set the server's finishedTTL to "
        "7200 (2h) or more, or 0 to keep them"
    )


def test_history_from_placements_skips_a_placement_that_is_no_move_and_reads_on() -> None:
    """A placement without a run, one that does not parse, one naming another namespace's pod and one naming no pod
    at all are each left out; the move after them is read."""
    unlabelled = placement("pin-by-hand", 5, run=None)
    broken = placement("move-broken", 5)
    broken["spec"] = "not a spec"
    elsewhere = placement("move-elsewhere", 5)
    elsewhere["metadata"]["annotations"]["scheduling.hami.placement.com/defrag-pod"] = "team-b/y"
    podless = placement("move-", 5)
    for skipped in (unlabelled, broken, elsewhere, podless):
        assert [r.placement for r in history_from_placements([skipped, placement("move-x", 10)])] == ["move-x"]


def test_a_move_without_its_from_node_annotation_is_from_no_node() -> None:
    bare = placement("move-x", 10)
    del bare["metadata"]["annotations"]["scheduling.hami.placement.com/defrag-from-node"]
    assert history_from_placements([bare]) == (
        MoveRecord(
            "run-1",
            "team-a/x",
            "team-a",
            "",
            NOW - timedelta(minutes=10),
            "Pending",
            "gpu-b",
            "",
            "move-x",
            selector_from_dict({"matchLabels": {"app": "x"}}),
        ),
    )


@pytest.mark.parametrize(
    ("value", "names"),
    [
        ("gpu-0", ("gpu-0",)),
        ("gpu-1,gpu-12,gpu-999999", ("gpu-1", "gpu-12", "gpu-999999")),
        (",".join(f"gpu-{index}" for index in range(16)), tuple(f"gpu-{index}" for index in range(16))),
        (",".join(f"gpu-{index}" for index in range(17)), ()),
        ("", ()),
        ("gpu-1,", ()),
        ("gpu-01", ()),
        ("gpu-1000000", ()),
        ("GPU-5b3b0c1e", ()),
        ("gpu-1 ,gpu-2", ()),
        ("gpu-1\n", ()),
        ("gpu-\u0661", ()),
        (["gpu-1"], ()),
        (None, ()),
    ],
)
def test_a_moves_cards_are_read_only_as_the_controller_writes_them(value: object, names: tuple[str, ...]) -> None:
    """The names reach `defrag history`'s table: anything but 1 to 16 plain `gpu-N` is no name at all."""
    assert card_names_of(value) == names
