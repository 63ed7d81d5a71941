"""The controller's work-queue keys: which key a pod or an Event wakes, in which order a batch is looked at, and
when each key is looked at again (pendingFor, the budgets' window, a rescue's follow-up)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from kubectl_hami_place.core.cards import Card
from kubectl_hami_place.core.defrag.budget import MoveRecord
from kubectl_hami_place.core.defrag.keys import (
    FOLLOW,
    KEEP_ROOM,
    LOOK_AGAIN_MAX,
    POLICY,
    RESUME,
    RETRY,
    ROOM_SETTLE,
    TERMINATION_WAIT_MAX_SECONDS,
    BackedOff,
    Followed,
    Look,
    OpenMove,
    PodKey,
    SettleClock,
    batch_order,
    budget_eases,
    event_key,
    follow,
    frees_room,
    look_again,
    look_sooner,
    moved_pods_gone,
    open_move,
    pending_wait,
    pod_key,
    rescue_unneeded,
    room_settled,
    send_back_again_after,
    settle_deadline,
    sooner_gap,
    terminating_until,
    termination_left,
)
from kubectl_hami_place.core.defrag.policy import Budgets, DefragPolicy, Rescue
from kubectl_hami_place.core.hami_config import HamiConfig
from kubectl_hami_place.core.lifecycle import ROOM_SETTLE_SECONDS
from kubectl_hami_place.core.names import (
    DEFRAG_POD_ANNOTATION,
    DEFRAG_POD_UID_ANNOTATION,
    DEFRAG_RUN_LABEL,
    PLACEMENT_ANNOTATION,
    USE_GPUUUID_ANNOTATION,
)
from kubectl_hami_place.core.planner.model import Move, PlanNode

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
FULL = "0/2 nodes are available: 2 2/2 CardInsufficientMemory."
TAINT = "0/2 nodes are available: 2 node(s) had untolerated taint {a: b}."


def pod(name: str = "big", *, seconds: float = 300, refused: str = FULL, **extra: Any) -> dict[str, Any]:
    """A Pending GPU pod of team-a, unschedulable since `seconds` before NOW, the scheduler's last word `refused`."""
    since = (NOW - timedelta(seconds=seconds)).isoformat()
    scheduled = {"type": "PodScheduled", "status": "False", "lastTransitionTime": since, "reason": "Unschedulable"}
    obj: dict[str, Any] = {
        "metadata": {"namespace": "team-a", "name": name, "uid": f"uid-{name}", "creationTimestamp": since},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
        "status": {"phase": "Pending", "conditions": [{**scheduled, "message": refused}]},
    }
    for key, value in extra.items():
        obj[key] = {**obj.get(key, {}), **value}
    return obj


def event(message: str = FULL, *, at: datetime = NOW, name: str = "big", **extra: Any) -> dict[str, Any]:
    """A core/v1 FailedScheduling Event for the pod, last seen `at`."""
    return {
        "metadata": {"namespace": "team-a", "name": f"{name}.1"},
        "reason": "FailedScheduling",
        "involvedObject": {"kind": "Pod", "namespace": "team-a", "name": name, "uid": f"uid-{name}"},
        "message": message,
        "lastTimestamp": at.isoformat(),
        **extra,
    }


def test_a_pod_has_a_key_only_while_it_waits_unscheduled() -> None:
    assert pod_key(pod()) == PodKey("team-a", "big")
    assert str(pod_key(pod())) == "team-a/big"
    assert pod_key(pod(status={"phase": "Running"})) is None
    assert pod_key(pod(spec={"nodeName": "gpu-0"})) is None
    assert pod_key(pod(metadata={"deletionTimestamp": NOW.isoformat()})) is None
    assert pod_key({"status": {"phase": "Pending"}}) is None
    assert pod_key(pod(metadata={"namespace": None})) is None
    assert pod_key(pod(metadata={"name": ""})) is None


def test_a_failed_scheduling_event_wakes_its_pod_in_either_events_api() -> None:
    assert event_key(event()) == PodKey("team-a", "big")
    regarding = {
        "metadata": {"namespace": "team-a"},
        "reason": "FailedScheduling",
        "regarding": {"kind": "Pod", "name": "big"},
        "note": FULL,
    }
    assert event_key(regarding) == PodKey("team-a", "big")
    assert event_key(event(reason="Scheduled")) is None
    assert event_key({**event(), "involvedObject": {"kind": "Node", "name": "gpu-0"}}) is None


def test_an_event_is_about_the_pod_its_object_names_a_pod_by_default() -> None:
    kindless = {**event(), "involvedObject": {"namespace": "team-a", "name": "big"}}
    assert event_key(kindless) == PodKey("team-a", "big")
    elsewhere = {**event(), "metadata": {"name": "big.1"}}
    assert event_key(elsewhere) == PodKey("team-a", "big"), "its object's namespace, the event's own not needed"
    assert event_key({**event(), "involvedObject": {"kind": "Pod", "namespace": "team-a"}}) is None, "no name"
    assert event_key({**event(), "involvedObject": {"kind": "Pod", "namespace": "team-a", "name": ""}}) is None
    assert event_key({**elsewhere, "involvedObject": {"kind": "Pod", "name": "big"}}) is None, "no namespace"
    forged = {**event(), "metadata": {"namespace": "evil", "name": "big.1"}, "eventTime": NOW.isoformat()}
    assert event_key(forged) is None, "a pod's Events live in its namespace"


def test_a_batch_looks_at_the_policy_then_resume_then_pods_by_priority_and_wait_then_keep_room() -> None:
    pods = {
        PodKey("team-a", "late"): pod("late", seconds=10),
        PodKey("team-a", "early"): pod("early", seconds=600),
        PodKey("team-a", "urgent"): pod("urgent", seconds=5, spec={"priority": 100}),
    }
    keys: list[PodKey | str] = [KEEP_ROOM, *pods, PodKey("team-a", "gone"), RESUME, POLICY]
    ordered = sorted(keys, key=lambda key: batch_order(key, pods.get(key) if isinstance(key, PodKey) else None))
    assert ordered == [
        POLICY,
        RESUME,
        PodKey("team-a", "urgent"),
        PodKey("team-a", "early"),
        PodKey("team-a", "late"),
        PodKey("team-a", "gone"),
        KEEP_ROOM,
    ]


def test_a_pod_without_a_priority_ranks_as_priority_zero_and_ties_go_by_key() -> None:
    unset, zero = pod("unset", seconds=10), pod("zero", seconds=600, spec={"priority": 0})
    pods = {PodKey("team-a", "unset"): unset, PodKey("team-a", "zero"): zero}
    keys = [PodKey("team-a", "unset"), PodKey("team-a", "zero"), PodKey("team-a", "gone-b"), PodKey("team-a", "gone-a")]
    assert sorted(keys, key=lambda key: batch_order(key, pods.get(key))) == [
        PodKey("team-a", "zero"),
        PodKey("team-a", "unset"),
        PodKey("team-a", "gone-a"),
        PodKey("team-a", "gone-b"),
    ]


def test_a_pod_refused_for_room_is_looked_at_again_when_its_pending_for_is_reached() -> None:
    policy = DefragPolicy(rescue=Rescue(pending_for=timedelta(seconds=60)))
    assert pending_wait(pod(seconds=20), [event()], NOW, policy) == timedelta(seconds=40)
    assert pending_wait(pod(seconds=60), [event()], NOW, policy) is None, "a candidate already"
    assert pending_wait(pod(seconds=20, refused=TAINT), [event(TAINT)], NOW, policy) is None, "waiting cures no taint"
    assert pending_wait(pod(seconds=20), [], NOW, policy) is None, "no refusal yet: its Event wakes it"
    running = pod(seconds=20, status={"phase": "Running"})
    assert pending_wait(running, [event()], NOW, policy) is None


def test_a_pod_asking_cards_by_hamis_own_resource_names_is_looked_at_again_too() -> None:
    config = HamiConfig(resource_count_name="example.com/gpu", resource_memory_name="example.com/gpumem")
    asking = pod(seconds=20, spec={"containers": [{"name": "c", "resources": {"limits": {"example.com/gpu": "1"}}}]})
    policy = DefragPolicy(rescue=Rescue(pending_for=timedelta(seconds=60)))
    assert pending_wait(asking, [event()], NOW, policy, config) == timedelta(seconds=40)


def record(minutes_ago: float, result: str = "Evicted") -> MoveRecord:
    return MoveRecord("run-1", "team-a/x", "team-a", "gpu-0", NOW - timedelta(minutes=minutes_ago), result)


def test_the_budgets_ease_when_a_spent_move_leaves_the_hour_or_its_cooldown_ends() -> None:
    budgets = Budgets(cooldown=timedelta(minutes=30))
    assert budget_eases(budgets, [record(50), record(10)], NOW) == NOW + timedelta(minutes=10)
    assert budget_eases(budgets, [record(20)], NOW) == NOW + timedelta(minutes=10), "its cooldown ends first"
    assert budget_eases(budgets, [record(50, "DryRun"), record(70)], NOW) is None, "dry runs spend nothing"
    assert budget_eases(budgets, [], NOW) is None
    assert budget_eases(budgets, [record(60)], NOW) is None, "a move just an hour old eases nothing more"


@pytest.mark.parametrize(
    ("look", "eases", "again"),
    [
        (Look.not_yet, None, None),
        (Look.moved, None, FOLLOW),
        (Look.failed, None, RETRY),
        (Look.budget, NOW + timedelta(minutes=7), timedelta(minutes=7)),
        (Look.budget, None, timedelta(seconds=10)),
        (Look.budget, NOW - timedelta(minutes=1), timedelta(seconds=10)),
        (Look.budget, NOW, timedelta(seconds=10)),
        (Look.no_plan, None, timedelta(seconds=10)),
        (Look.dry_run, None, timedelta(seconds=10)),
    ],
)
def test_when_a_pod_is_looked_at_again_after_each_kind_of_look(
    look: Look, eases: datetime | None, again: timedelta | None
) -> None:
    assert look_again(look, NOW, timedelta(seconds=10), eases) == again


@pytest.mark.parametrize("look", [Look.no_plan, Look.dry_run, Look.budget])
def test_a_pod_that_keeps_having_no_plan_or_a_dry_run_is_planned_for_ever_less_often(look: Look) -> None:
    """Each look plans: a backlog of pods without a plan, a dry run that keeps naming moves, or a rescue over a
    budget no time eases (the moves of one run) waits twice as long after each such look, up to kube-scheduler's own
    five minutes (an interval longer than that is kept); a budget that eases is waited for."""
    interval = timedelta(seconds=10)
    waits = [look_again(look, NOW, interval, None, repeats) for repeats in range(7)]
    assert waits == [timedelta(seconds=s) for s in (10, 20, 40, 80, 160, 300, 300)]
    assert look_again(look, NOW, interval, None, 10**6) == LOOK_AGAIN_MAX
    assert look_again(look, NOW, timedelta(minutes=9), None, 3) == timedelta(minutes=9)
    eases = NOW + timedelta(minutes=7)
    assert look_again(Look.budget, NOW, interval, eases, 3) == timedelta(minutes=7), "a budget that eases is its own"


def test_only_a_bound_pod_that_is_deleted_or_ends_frees_room() -> None:
    """What kube-scheduler retries its unplaceable pods on: a pod that held room leaving it. A Pending pod deleted, or
    a running one that changes, frees nothing; an ended pod counts as gone whatever the event."""
    running = {"spec": {"nodeName": "gpu-0"}, "status": {"phase": "Running"}}
    ended = {"spec": {"nodeName": "gpu-0"}, "status": {"phase": "Succeeded"}}
    failed = {"spec": {"nodeName": "gpu-0"}, "status": {"phase": "Failed"}}
    waiting = {"spec": {}, "status": {"phase": "Pending"}}
    assert frees_room("DELETED", running) and frees_room("MODIFIED", ended) and frees_room("MODIFIED", failed)
    assert not frees_room("MODIFIED", running) and not frees_room("ADDED", running)
    assert not frees_room("DELETED", waiting) and not frees_room(
        "MODIFIED", {"spec": {}, "status": {"phase": "Failed"}}
    )
    assert not frees_room("DELETED", {"spec": None, "status": None})


def test_room_freed_brings_one_pod_backed_off_forward_the_highest_priority_then_the_longest_since_its_look() -> None:
    """Room freed may make the plan a look did not find: one pod is looked at an interval after its last look (the
    pace before the backoff), never in the past; pods already due by then are left as they are."""
    interval = timedelta(seconds=10)
    a, b, c = PodKey("ns", "a"), PodKey("ns", "b"), PodKey("ns", "c")
    backed_off = {"a": BackedOff(a, 0, 3, 100.0), "b": BackedOff(b, 0, 5, 90.0), "c": BackedOff(c, 7, 1, 103.0)}
    due = {"a": 180.0, "b": 250.0, "c": 113.0}
    assert look_sooner(backed_off, due, 104.0, interval) == (b, "b", 104.0), "c is due at 113 anyway; b looked first"
    assert look_sooner(backed_off, {**due, "c": 300.0}, 104.0, interval) == (c, "c", 113.0), "the higher priority"
    assert look_sooner(backed_off, {**due, "b": 100.0}, 104.0, interval) == (a, "a", 110.0)
    assert look_sooner(backed_off, {"a": 109.0, "b": 104.0, "c": 113.0}, 104.0, interval) is None
    assert look_sooner(backed_off, {}, 104.0, interval) is None, "not backed off any more"


def test_looks_brought_forward_come_an_interval_apart_or_far_enough_apart_to_take_a_tenth_of_a_core() -> None:
    """Under a churn of pods leaving, each such look (a snapshot and a plan) would follow the last at once."""
    interval = timedelta(seconds=10)
    assert sooner_gap(interval, 0.05) == 10.0
    assert sooner_gap(interval, 3.2) == pytest.approx(32.0)


def test_a_run_makes_no_further_move_for_a_pod_deleted_replaced_or_scheduled_meanwhile() -> None:
    """Each move evicts someone's pod: once the pod the run rescues no longer waits, the moves left are for nothing."""
    assert rescue_unneeded(pod(), "uid-big") == ""
    assert rescue_unneeded(None, "uid-big") == "the pod it rescues is gone"
    assert rescue_unneeded(pod(), "uid-old") == "the pod it rescues is gone", "a new pod of that name"
    deleting = pod(metadata={"deletionTimestamp": NOW.isoformat()})
    assert rescue_unneeded(deleting, "uid-big") == "the pod it rescues is being deleted"
    scheduled = pod(spec={"nodeName": "gpu-a100-1"})
    assert rescue_unneeded(scheduled, "uid-big") == "the pod it rescues was scheduled on gpu-a100-1 meanwhile"


def test_a_moves_wait_counts_from_the_end_of_the_evicted_pods_grace_period() -> None:
    """A pod given ten minutes to checkpoint holds its card, as HAMi counts it, until it is gone (and a StatefulSet
    makes its replacement only then): a move given three minutes from the eviction would be given up meanwhile."""
    due = NOW + timedelta(minutes=10)
    evicted = pod("moved", metadata={"deletionTimestamp": due.isoformat()})
    assert terminating_until(evicted, "uid-moved") == due
    assert terminating_until(evicted, "uid-new") is None, "a new pod of that name"
    assert terminating_until(pod("moved"), "uid-moved") is None, "not evicted (yet)"
    assert terminating_until(None, "uid-moved") is None, "gone"
    assert termination_left(evicted, "uid-moved", NOW) == 600.0
    assert termination_left(evicted, "uid-moved", due + timedelta(seconds=5)) == 0.0, "late: kubelet kills it now"
    assert termination_left(None, "uid-moved", NOW) == 0.0
    timeout, cap = 180.0, TERMINATION_WAIT_MAX_SECONDS
    assert settle_deadline(1000.0, 1000.0, 0.0, timeout) == 1180.0, "not terminating: from the eviction"
    assert settle_deadline(1000.0, 1010.0, 290.0, timeout) == 1480.0, "from the grace period's end"
    assert settle_deadline(1000.0, 1010.0, 3590.0, timeout) == 1000.0 + cap + timeout, "an hour's grace: capped"
    assert settle_deadline(1000.0, 1300.0, 0.0, timeout) == 1180.0, "gone: the deadline seen while it went holds"


def test_a_pod_with_under_a_second_of_its_grace_period_left_still_counts_from_its_end() -> None:
    """Any time left is time HAMi still counts its cards: half a second is waited out, not counted from the eviction."""
    assert settle_deadline(1000.0, 1010.0, 0.5, 180.0) == 1190.5
    assert settle_deadline(1000.0, 1010.0, 1.0, 180.0) == 1191.0


def test_a_moves_clock_keeps_the_grace_period_it_saw_once_the_pod_is_gone() -> None:
    """Seen terminating with 40 s to go, then gone a second later, before a 3 s timeout: the move keeps its 43 s, as
    the controller (which sees its cache at each poll) gave it and `apply` (which read the pod only at the timeout,
    then found it gone) did not. Never seen terminating: the timeout counts from the eviction."""
    clock = SettleClock(100.0, 3.0)
    assert clock.deadline == 103.0
    clock.saw(100.5, 39.5)
    clock.saw(101.0, 0.0)
    clock.saw(104.0, 0.0)
    assert clock.deadline == 143.0
    unseen = SettleClock(100.0, 3.0)
    unseen.saw(101.0, 0.0)
    assert unseen.deadline == 103.0


def test_a_followed_rescue_ends_when_its_pod_runs_is_refused_after_the_moves_settled_or_goes() -> None:
    done = NOW - timedelta(minutes=2)
    assert follow(pod(spec={"nodeName": "gpu-0"}), "uid-big", [], done, NOW) is Followed.rescued
    assert follow(pod(), "uid-big", [event(at=NOW - timedelta(seconds=10))], done, NOW) is Followed.room_lost
    soon = event(at=done + timedelta(seconds=20))
    assert follow(pod(), "uid-big", [soon], done, NOW) is Followed.waiting, "a refusal while the moves settle"
    other = {**event(), "involvedObject": {"kind": "Pod", "namespace": "team-a", "name": "big", "uid": "uid-old"}}
    assert follow(pod(), "uid-big", [other], done, NOW) is Followed.waiting, "an earlier pod's refusal"
    series = event(at=done - timedelta(minutes=5), series={"lastObservedTime": NOW.isoformat()})
    assert follow(pod(), "uid-big", [series], done, NOW) is Followed.room_lost
    assert follow(None, "uid-big", [], done, NOW) is Followed.given_up
    assert follow(pod(), "uid-new", [], done, NOW) is Followed.given_up, "a new pod of that name"
    assert follow(pod(), "uid-big", [], NOW - FOLLOW - timedelta(seconds=1), NOW) is Followed.given_up
    assert follow(pod(), "uid-big", [], NOW - FOLLOW, NOW) is Followed.waiting, "given up only past FOLLOW"


def test_a_rescued_pod_is_sent_back_only_once_every_pod_its_moves_evicted_is_gone() -> None:
    """HAMi counts a stored pod's cards, terminating or not: sent back before, the pod is refused again. A pod of
    the same name stored since under another UID is the replacement, not the moved pod."""
    moves = tuple(
        Move(f"team-a/{name}", f"uid-{name}", "gpu-0", ("GPU-0",), "gpu-1", ("GPU-1",), "x") for name in ("a", "b")
    )
    assert moved_pods_gone(moves, {})
    assert moved_pods_gone(moves, {"team-a/a": "uid-a2", "team-b/b": "uid-b"}), "a new pod, another namespace"
    assert not moved_pods_gone(moves, {"team-a/b": "uid-b"}), "one of the two is still stored"
    assert moved_pods_gone((), {"team-a/a": "uid-a"}), "no moves, nothing to wait for"


def test_the_room_is_settled_once_the_moved_pods_have_stayed_gone_for_the_settle_time() -> None:
    """HAMi's scheduler learns of a deletion from its own watch: a pod sent back the instant the moved pods are gone
    may be refused again, and a moved pod seen again (a stale read) starts the wait over."""
    moves = (Move("team-a/a", "uid-a", "gpu-0", ("GPU-0",), "gpu-1", ("GPU-1",), "x"),)
    assert room_settled(moves, {"team-a/a": "uid-a"}, 5.0, 100.0) == (None, False), "still stored: the wait restarts"
    assert room_settled(moves, {}, None, 100.0) == (100.0, False), "first seen gone now"
    assert room_settled(moves, {}, 100.0, 100.0 + ROOM_SETTLE_SECONDS / 2) == (100.0, False)
    assert room_settled(moves, {}, 100.0, 100.0 + ROOM_SETTLE_SECONDS) == (100.0, True)


def test_a_pod_still_pending_is_sent_back_again_less_and_less_often() -> None:
    """A send-back HAMi refused (its watch behind) leaves the pod to kube-scheduler's 5-minute sweep before 1.29: it
    is sent back again, doubling from 10 s to at most 80 s, so a pod that does not fit is not written often."""
    assert [send_back_again_after(sends) for sends in range(1, 7)] == [10.0, 20.0, 40.0, 80.0, 80.0, 80.0]


def test_a_refusal_counts_by_any_of_its_times_among_other_pods_events_only_once_the_moves_settled() -> None:
    done = NOW - timedelta(minutes=2)
    other = {**event(), "involvedObject": {"kind": "Pod", "namespace": "team-a", "name": "big", "uid": "uid-old"}}
    assert follow(pod(), "uid-big", [other, event(at=NOW)], done, NOW) is Followed.room_lost
    untimed = event(at=done - timedelta(minutes=5), lastTimestamp=None, eventTime=NOW.isoformat())
    assert follow(pod(), "uid-big", [untimed], done, NOW) is Followed.room_lost
    assert follow(pod(), "uid-big", [event(at=done + ROOM_SETTLE)], done, NOW) is Followed.waiting
    forged = {**event(at=NOW), "metadata": {"namespace": "evil", "name": "big.1"}}
    assert follow(pod(), "uid-big", [forged], done, NOW) is Followed.waiting, "written in another namespace"


def run_placement(*, labels: dict[str, str] | None = None, **meta: Any) -> dict[str, Any]:
    """A move's placement a run made two minutes before NOW, moving team-a/small."""
    metadata = {
        "namespace": "team-a",
        "name": "move-small-1",
        "creationTimestamp": (NOW - timedelta(seconds=120)).isoformat(),
        "labels": {DEFRAG_RUN_LABEL: "r1"} if labels is None else labels,
        "annotations": {DEFRAG_POD_ANNOTATION: "team-a/small", DEFRAG_POD_UID_ANNOTATION: "uid-small"},
        **meta,
    }
    return {"metadata": metadata}


def test_a_replacement_a_runs_move_pinned_waits_out_the_move_then_the_move_is_given_up() -> None:
    pinned = pod("small-2", metadata={"annotations": {PLACEMENT_ANNOTATION: "move-small-1"}})
    opened = open_move(pinned, run_placement(), NOW, timedelta(seconds=185))
    assert opened is not None
    assert (opened.namespace, opened.placement, opened.evicted_uid) == ("team-a", "move-small-1", "uid-small")
    assert opened.wait == timedelta(seconds=65), "185 s after the placement was created, 120 s ago"
    late = open_move(pinned, run_placement(), NOW, timedelta(seconds=100))
    assert late is not None and late.wait <= timedelta(0), "due: given up now"


def test_an_open_moves_target_is_read_from_its_placement_on_its_node_never_from_the_pod() -> None:
    """The cards left out of plans after a give-up are those the placement names (the pod's own `use-gpuuuid`
    can be edited by anyone who may edit the pod); a reference that does not parse, or that its node has no card
    for, is left out."""
    pinned = pod(
        "small-2", metadata={"annotations": {PLACEMENT_ANNOTATION: "move-small-1", USE_GPUUUID_ANNOTATION: "GPU-other"}}
    )
    placement = {**run_placement(), "spec": {"nodeName": "gpu-0", "gpuDevices": ["junk", "gpu-1", "GPU-a0", "gpu-7"]}}
    opened = open_move(pinned, placement, NOW, timedelta(seconds=185))
    assert opened is not None and (opened.node, tuple(map(str, opened.cards))) == (
        "gpu-0",
        ("gpu-1", "GPU-a0", "gpu-7"),
    )
    nodes = [
        PlanNode("gpu-0", (Card("GPU-a0", index=0), Card("GPU-a1", index=1))),
        PlanNode("gpu-1", (Card("GPU-b0", index=0), Card("GPU-b1", index=1))),
    ]
    assert opened.target(nodes) == {"GPU-a1", "GPU-a0"}
    assert opened.target(nodes[1:]) == set(), "its node is gone"
    odd = {**run_placement(), "spec": {"nodeName": "gpu-0", "gpuDevices": "gpu-1"}}
    assert open_move(pinned, odd, NOW, timedelta(seconds=185)).cards == ()  # type: ignore[union-attr]


def test_an_open_move_whose_placement_names_no_evicted_pod_or_node_has_them_empty() -> None:
    pinned = pod("small-2", metadata={"annotations": {PLACEMENT_ANNOTATION: "move-small-1"}})
    bare = run_placement(annotations={DEFRAG_POD_ANNOTATION: "team-a/small"})
    assert open_move(pinned, bare, NOW, timedelta(seconds=185)) == OpenMove(
        namespace="team-a", placement="move-small-1", evicted_uid="", wait=timedelta(seconds=65), node="", cards=()
    )


def test_only_a_waiting_pod_a_runs_placement_pinned_is_an_open_move() -> None:
    pinned = pod("small-2", metadata={"annotations": {PLACEMENT_ANNOTATION: "move-small-1"}})
    after = timedelta(seconds=185)
    assert open_move(pinned, None, NOW, after) is None
    assert open_move(pinned, run_placement(labels={}), NOW, after) is None, "a person's pin (apply, pin) stays"
    assert open_move(pinned, run_placement(name="move-other-1"), NOW, after) is None, "another placement"
    assert open_move(pinned, run_placement(namespace="team-b"), NOW, after) is None, "another namespace's"
    assert open_move(pinned, run_placement(creationTimestamp="soon"), NOW, after) is None
    assert open_move(pod("small-2"), run_placement(), NOW, after) is None, "the pod names no placement"
    bound = pod("small-2", metadata={"annotations": {PLACEMENT_ANNOTATION: "move-small-1"}}, spec={"nodeName": "a"})
    assert open_move(bound, run_placement(), NOW, after) is None, "scheduled: the move settled"
