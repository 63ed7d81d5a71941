"""One run's decision: the planner's moves within the policy, budgets, cooldowns and priorities, or why none.

The properties build random clusters, histories and policies and check a decision never exceeds a budget, never
moves a pod in its cooldown, of a left-out namespace or of a higher priority than the rescued pod, and never
rescues halfway.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kubectl_hami_place.core.allocations import (
    ALLOCATED_ANNOTATION,
    NODE_ANNOTATION,
    ContainerDevice,
    encode_allocation,
)
from kubectl_hami_place.core.cards import REGISTER_ANNOTATION, Card, encode_register
from kubectl_hami_place.core.defrag.budget import MoveRecord, allowance, cooldowns
from kubectl_hami_place.core.defrag.policy import (
    Budgets,
    DefragPolicy,
    KeepRoom,
    Mode,
    Namespaces,
    Rescue,
    parse_policy,
    with_threshold,
)
from kubectl_hami_place.core.defrag.runs import (
    RescueTrigger,
    RoomTrigger,
    RunDecision,
    decide_run,
    fits_as_is,
    held_now,
    in_scope,
    keep_off,
    refuse,
    scheduled_where,
    still_allowed,
)
from kubectl_hami_place.core.defrag.triggers import room_of
from kubectl_hami_place.core.names import USE_GPUUUID_ANNOTATION
from kubectl_hami_place.core.planner import FitGoal, FreeCardsGoal, Move, PlanNode, PlanPod, Snapshot
from kubectl_hami_place.core.pod_affinity import CountedPods
from kubectl_hami_place.core.requests import card_request
from kubectl_hami_place.core.reservation import Reservation
from kubectl_hami_place.core.selectors import matches, parse_selector_string, selector_from_dict
from kubectl_hami_place.core.usage import PodAllocation

GIB = 1024
HEAD = "apiVersion: scheduling.hami.placement.com/v1alpha1\nkind: DefragPolicy\n"
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
ON = DefragPolicy(mode=Mode.on)


def node(name: str, cards: int = 2) -> PlanNode:
    """A node of 40 GiB cards `<name>0`, `<name>1`, ..."""
    return PlanNode(
        name,
        tuple(
            Card(uuid=f"{name}{i}", index=i, count=10, devmem=40 * GIB, devcore=100, type="NVIDIA-A100", health=True)
            for i in range(cards)
        ),
    )


def placed(name: str, uuid: str, gib: int, namespace: str = "team-a", priority: int = 0, *, owner: str = "") -> PlanPod:
    """A ReplicaSet's pod holding `gib` GiB of one card (the node is the card's name without its index); `owner` the
    ReplicaSet's UID."""
    devices = ((ContainerDevice(uuid, "NVIDIA", gib * GIB, 0),),)
    return PlanPod(
        namespace=namespace,
        name=name,
        uid=f"uid-{name}",
        requests=(card_request(1, memreq=gib * GIB),),
        allocation=PodAllocation(namespace, name, f"uid-{name}", uuid[:-1], "Running", devices),
        owner_kind="ReplicaSet",
        owner_uid=owner,
        priority=priority,
    )


def waiting(gib: int, priority: int = 0, namespace: str = "team-a") -> RescueTrigger:
    """A rescue of a Pending pod asking `gib` GiB of one card."""
    pod = PlanPod(namespace=namespace, name="waiting", requests=(card_request(1, memreq=gib * GIB),), priority=priority)
    return RescueTrigger(pod, "CardInsufficientMemory")


def one_move() -> Snapshot:
    """Node a: gpu-0 holds p (24 GiB), gpu-1 holds q (10 GiB); a 32 GiB pod fits once q joins p."""
    return Snapshot((node("a"),), (placed("p", "a0", 24), placed("q", "a1", 10)))


def two_moves() -> Snapshot:
    """A 40 GiB pod needs a0 emptied: p1 and p2 (8 GiB each) move, q (26 GiB) and b's pods (30 GiB) cannot."""
    return Snapshot(
        (node("a"), node("b")),
        (
            placed("p1", "a0", 8),
            placed("p2", "a0", 8),
            placed("q", "a1", 26),
            placed("r", "b0", 30),
            placed("s", "b1", 30),
        ),
    )


def spent(pod: str, node_name: str, minutes_ago: float, run: str = "r0") -> MoveRecord:
    """An earlier move that evicted."""
    namespace = pod.split("/", maxsplit=1)[0]
    return MoveRecord(run, pod, namespace, node_name, NOW - timedelta(minutes=minutes_ago), "Evicted")


def test_a_pod_fits_as_is_only_on_a_card_it_may_use_with_room_now_and_never_by_a_move() -> None:
    """A kept room's pod is sent back once it fits as the cards are: not while the room needs a move (32 GiB needs
    q to join p), and only on the cards its narrowed use-gpuuuid names (20 GiB fits a1 now, not a0)."""
    snapshot = one_move()

    def pending(gib: int, cards: str = "") -> PlanPod:
        annotations = {USE_GPUUUID_ANNOTATION: cards} if cards else {}
        return PlanPod("team-a", "kept", (card_request(1, memreq=gib * GIB),), annotations=annotations)

    assert [fits_as_is(snapshot, pending(gib)) for gib in (30, 31, 32)] == [True, False, False]
    assert [fits_as_is(snapshot, pending(gib, "a0")) for gib in (16, 17)] == [True, False]
    assert fits_as_is(snapshot, pending(20, "a1")) is True


def test_a_rescue_within_budget_moves_and_says_what() -> None:
    decision = decide_run(ON, one_move(), waiting(32), [], NOW, "r1")
    assert decision.acts and decision.reason == ""
    assert [(m.pod, m.to_cards) for m in decision.moves] == [("team-a/q", ("a0",))]
    assert (
        decision.message == "moving team-a/q from a/gpu-1 to a/gpu-0 to rescue team-a/waiting (CardInsufficientMemory)"
    )


def test_a_rescue_moves_nothing_when_kube_scheduler_kept_the_pod_off_nodes_for_reasons_the_plan_does_not_read() -> None:
    """The plan's room could be on a node the pod's anti-affinity (or volume, or spread) excludes: the pod would stay
    Pending after the evictions. The run says why and what a person can do; a pod that fits as is is still sent back."""
    trigger = replace(waiting(32), unread=("1 node(s) didn't match pod anti-affinity rules",))
    decision = decide_run(ON, one_move(), trigger, [], NOW, "r1")
    assert decision.moves == () and decision.plan is not None and decision.plan.moves
    assert decision.reason == (
        "no plan: kube-scheduler keeps the pod off nodes for reasons the plan does not read (1 node(s) didn't match "
        "pod anti-affinity rules), so the room its moves make could be where the pod may not go; run `kubectl "
        "hami-place plan --for waiting -n team-a` and apply it if its target suits the pod"
    )
    fits = decide_run(ON, one_move(), replace(waiting(8), unread=trigger.unread), [], NOW, "r1")
    assert fits.fits_now and fits.reason == "no move needed: team-a/waiting fits on a now"


def test_a_rescue_moves_the_pods_its_pod_counts_only_within_their_node() -> None:
    """One card per node: q (10 GiB) on a, p (25 GiB) on b; a 32 GiB pod fits once q joins p on b. When the pod's
    anti-affinity (or affinity, or spread) counts q, moving q to b could change where kube-scheduler lets the pod go:
    p moves to a instead, and with p counted too there is no plan."""
    snapshot = Snapshot(
        (node("a", cards=1), node("b", cards=1)),
        (replace(placed("q", "a0", 10), labels={"app": "q"}), replace(placed("p", "b0", 25), labels={"app": "p"})),
    )
    assert [(m.pod, m.to_node) for m in decide_run(ON, snapshot, waiting(32), [], NOW, "r1").moves] == [
        ("team-a/q", "b")
    ]
    q = CountedPods(frozenset({"team-a"}), selector_from_dict({"matchLabels": {"app": "q"}}))
    counting = replace(waiting(32), pod=replace(waiting(32).pod, counts=(q,)))
    counted = decide_run(ON, snapshot, counting, [], NOW, "r1")
    assert [(m.pod, m.to_node) for m in counted.moves] == [("team-a/p", "a")]
    both = replace(waiting(32), pod=replace(waiting(32).pod, counts=(q, CountedPods(None, None))))
    assert decide_run(ON, snapshot, both, [], NOW, "r1").moves == ()


def test_dry_run_names_the_moves_it_would_make_and_makes_none() -> None:
    decision = decide_run(DefragPolicy(), one_move(), waiting(32), [], NOW, "r1")
    assert decision.dry_run and not decision.acts and len(decision.moves) == 1
    assert decision.message.startswith("would move team-a/q from a/gpu-1 to a/gpu-0 (dry-run)")


def test_off_does_nothing() -> None:
    decision = decide_run(DefragPolicy(mode=Mode.off), one_move(), waiting(32), [], NOW, "r1")
    assert decision.moves == () and decision.reason == "the policy's mode is off"


def test_a_rescue_needing_more_than_the_budget_does_nothing_and_says_why() -> None:
    history = [spent(f"team-b/x{i}", f"n{i}", 30) for i in range(11)]
    decision = decide_run(ON, two_moves(), waiting(40), history, NOW, "r1")
    assert decision.moves == ()
    assert decision.reason == "budget: 1 move left this hour, the rescue needs 2"
    assert len(decide_run(ON, two_moves(), waiting(40), history[:10], NOW, "r1").moves) == 2


def test_a_node_budget_spent_this_hour_blocks_a_rescue_that_needs_that_node() -> None:
    history = [spent("team-b/x", "a", 30), spent("team-b/y", "a", 20)]
    decision = decide_run(ON, two_moves(), waiting(40), history, NOW, "r1")
    assert decision.moves == ()
    assert decision.reason == "budget: 0 moves left off node a this hour, the rescue needs 2"


def test_a_rescue_only_disruption_budgets_stop_is_blocked_and_names_them() -> None:
    snapshot = one_move()
    guarded = replace(
        snapshot,
        pods=tuple(replace(p, budgets=("team-a/hold",)) for p in snapshot.pods),
        budgets={"team-a/hold": 0},
    )
    decision = decide_run(ON, guarded, waiting(32), [], NOW, "r1")
    assert decision.moves == ()
    assert decision.reason == (
        "blocked: the rescue must evict team-a/q; PodDisruptionBudget team-a/hold allows 0 disruption(s), "
        "the rescue needs 1"
    )
    allowed = decide_run(ON, replace(guarded, budgets={"team-a/hold": 1}), waiting(32), [], NOW, "r1")
    assert [m.pod for m in allowed.moves] == ["team-a/q"]
    too_big = decide_run(ON, guarded, waiting(41), [], NOW, "r1")
    assert too_big.reason.startswith("no plan: "), "no plan at all is not a block"


def test_a_higher_priority_pod_is_never_moved_for_a_lower_one() -> None:
    snapshot = two_moves()
    high = ("p1", "q", "r", "s")
    snapshot = replace(snapshot, pods=tuple(replace(p, priority=10) if p.name in high else p for p in snapshot.pods))
    decision = decide_run(ON, snapshot, waiting(40, priority=5), [], NOW, "r1")
    assert decision.moves == () and decision.reason.startswith("no plan: ")
    assert "has priority 10, above the rescued pod's 5" in decision.reason
    assert decision.held == tuple(f"team-a/{name}: has priority 10, above the rescued pod's 5" for name in high)
    assert len(decide_run(ON, snapshot, waiting(40, priority=10), [], NOW, "r1").moves) == 2


def test_a_jobs_pod_stays_unless_the_policy_lets_job_pods_move() -> None:
    """Kubernetes counts an eviction toward a Job's backoffLimit (a Job with backoffLimit 0 fails at its first move)
    and the pod's work starts over: the controller moves a Job's pod only when the operator said so."""
    snapshot = one_move()
    jobs = replace(snapshot, pods=tuple(replace(p, owner_kind="Job") if p.name == "q" else p for p in snapshot.pods))
    kept = decide_run(ON, jobs, waiting(32), [], NOW, "r1")
    assert [m.pod for m in kept.moves] == ["team-a/p"], "the other pod moves instead"
    assert kept.held == ("team-a/q: is a Job's pod, which the policy keeps in place (moveJobPods: false)",)
    assert [m.pod for m in decide_run(ON, snapshot, waiting(32), [], NOW, "r1").moves] == ["team-a/q"]
    allowed = decide_run(replace(ON, move_job_pods=True), jobs, waiting(32), [], NOW, "r1")
    assert ([m.pod for m in allowed.moves], allowed.held) == (["team-a/q"], ())


def test_a_pod_at_or_above_the_priority_threshold_stays_whatever_the_trigger() -> None:
    """The operator's priorityThreshold (the descheduler's): a pod of that priority or more is never moved, neither
    by a rescue of a pod of a higher priority still nor by a keep-room run, which no rescued pod's priority bounds."""
    snapshot = one_move()
    ranked = replace(snapshot, pods=tuple(replace(p, priority=100 if p.name == "q" else 99) for p in snapshot.pods))
    threshold = replace(ON, priority_threshold=100)
    rescue = decide_run(threshold, ranked, waiting(32, priority=1000), [], NOW, "r1")
    assert [m.pod for m in rescue.moves] == ["team-a/p"], "the pod under the threshold moves instead"
    assert rescue.held == ("team-a/q: has priority 100, at or above the policy's priorityThreshold 100",)
    assert [m.pod for m in decide_run(ON, ranked, waiting(32, priority=1000), [], NOW, "r1").moves] == ["team-a/q"]
    room_policy = replace(threshold, keep_room=KeepRoom(enabled=True))
    both = replace(ranked, pods=tuple(replace(p, priority=100) for p in ranked.pods))
    room = decide_run(room_policy, both, RoomTrigger(FreeCardsGoal(1)), [], NOW, "r1")
    assert room.moves == () and room.reason.startswith("no plan"), room.reason
    assert "has priority 100, at or above the policy's priorityThreshold 100" in room.reason
    under = decide_run(replace(room_policy, priority_threshold=101), both, RoomTrigger(FreeCardsGoal(1)), [], NOW, "r1")
    assert (len(under.moves), under.held) == (1, ())


def test_a_priority_threshold_by_name_holds_every_pod_until_its_value_is_read() -> None:
    """`{name: CLASS}`: the server sets the class's value (`with_threshold`); a policy whose value was not read
    (a caller that forgot) moves nothing rather than every pod, and once read, the hold names the class."""
    snapshot = one_move()
    ranked = replace(snapshot, pods=tuple(replace(p, priority=100 if p.name == "q" else 99) for p in snapshot.pods))
    named = replace(ON, priority_class="high")
    unread = decide_run(named, ranked, waiting(32, priority=1000), [], NOW, "r1")
    assert unread.moves == () and unread.held == tuple(
        f"team-a/{name}: the policy's priorityThreshold names PriorityClass high, whose value is not read"
        for name in ("p", "q")
    )
    read = decide_run(with_threshold(named, 100), ranked, waiting(32, priority=1000), [], NOW, "r1")
    assert [m.pod for m in read.moves] == ["team-a/p"]
    assert read.held == (
        "team-a/q: has priority 100, at or above the policy's priorityThreshold 100 (PriorityClass high)",
    )


def test_a_pod_whose_controller_has_too_few_running_pods_stays() -> None:
    """The descheduler's minReplicas: moving the only running pod of a service stops it while its replacement starts.
    Each of p and q is its ReplicaSet's only running pod; then both are of one ReplicaSet, and then p is terminating."""
    snapshot = one_move()
    alone = replace(snapshot, pods=tuple(replace(p, owner_uid=f"rs-{p.name}") for p in snapshot.pods))
    policy = replace(ON, min_replicas=2)
    held = decide_run(policy, alone, waiting(32), [], NOW, "r1")
    assert held.moves == () and held.reason.startswith("no plan"), held.reason
    assert held.held == (
        "team-a/p: its ReplicaSet has 1 running pod(s), fewer than the policy's minReplicas 2",
        "team-a/q: its ReplicaSet has 1 running pod(s), fewer than the policy's minReplicas 2",
    )
    assert [m.pod for m in decide_run(ON, alone, waiting(32), [], NOW, "r1").moves] == ["team-a/q"], "0: no hold"
    pair = replace(snapshot, pods=tuple(replace(p, owner_uid="rs-1") for p in snapshot.pods))
    assert [m.pod for m in decide_run(policy, pair, waiting(32), [], NOW, "r1").moves] == ["team-a/q"]
    going = replace(
        pair,
        pods=tuple(
            replace(p, allocation=replace(p.allocation, deleting=True)) if p.name == "p" else p for p in pair.pods
        ),
    )
    stopping = decide_run(policy, going, waiting(32), [], NOW, "r1")
    assert (
        stopping.held[-1] == "team-a/q: its ReplicaSet has 1 running pod(s), fewer than the policy's minReplicas 2"
    ), "a terminating sibling serves nothing"
    three = decide_run(replace(ON, min_replicas=3), pair, waiting(32), [], NOW, "r1")
    assert three.held == tuple(
        f"team-a/{name}: its ReplicaSet has 2 running pod(s), fewer than the policy's minReplicas 3"
        for name in ("p", "q")
    )


def test_a_pod_placed_less_than_min_pod_age_ago_stays() -> None:
    """The descheduler's minPodAge: a pod that just started loses its warm-up at a move. q (the pod the plan would
    move) was bound 4m ago and p 20m ago, so p moves instead; with both young nothing moves. The age counts from the
    binding, else the creation, and a pod with neither stays."""
    snapshot = one_move()
    bound = {"p": NOW - timedelta(minutes=20), "q": NOW - timedelta(minutes=4, seconds=30)}
    aged = replace(snapshot, pods=tuple(replace(p, scheduled=bound[p.name]) for p in snapshot.pods))
    policy = replace(ON, min_pod_age=timedelta(minutes=10))
    assert [m.pod for m in decide_run(ON, aged, waiting(32), [], NOW, "r1").moves] == ["team-a/q"], "0s: no hold"
    older = decide_run(policy, aged, waiting(32), [], NOW, "r1")
    assert [m.pod for m in older.moves] == ["team-a/p"]
    assert older.held == ("team-a/q: was placed 4m30s ago, less than the policy's minPodAge 10m",)
    exactly = replace(aged, pods=tuple(replace(p, scheduled=NOW - timedelta(minutes=10)) for p in aged.pods))
    assert [m.pod for m in decide_run(policy, exactly, waiting(32), [], NOW, "r1").moves] == ["team-a/q"], "10m is old"
    young = decide_run(replace(ON, min_pod_age=timedelta(minutes=30)), aged, waiting(32), [], NOW, "r1")
    assert young.moves == () and young.reason.startswith("no plan"), young.reason
    assert young.held == (
        "team-a/p: was placed 20m ago, less than the policy's minPodAge 30m",
        "team-a/q: was placed 4m30s ago, less than the policy's minPodAge 30m",
    )
    created = replace(
        snapshot, pods=tuple(replace(p, created=bound[p.name] - timedelta(hours=2)) for p in snapshot.pods)
    )
    assert decide_run(policy, created, waiting(32), [], NOW, "r1").held == (), "created 2h ago, never bound: its age"
    both = replace(created, pods=tuple(replace(p, scheduled=bound[p.name]) for p in created.pods))
    assert [m.pod for m in decide_run(policy, both, waiting(32), [], NOW, "r1").moves] == ["team-a/p"], (
        "bound after a long Pending: the binding counts, not the creation"
    )
    unknown = decide_run(policy, snapshot, waiting(32), [], NOW, "r1")
    assert unknown.moves == () and unknown.held == tuple(
        f"team-a/{name}: has no time it was placed, so its age is unknown against the policy's minPodAge 10m"
        for name in ("p", "q")
    )
    future = replace(aged, pods=tuple(replace(p, scheduled=NOW + timedelta(minutes=1)) for p in aged.pods))
    assert decide_run(policy, future, waiting(32), [], NOW, "r1").held[0] == (
        "team-a/p: was placed 0s ago, less than the policy's minPodAge 10m"
    ), "a clock ahead of ours reads as just placed"


def pools() -> Snapshot:
    """Node a (pool=inference): a0 holds p (24 GiB), a1 q (10 GiB); node b (pool=training): b0 r (30 GiB), b1 s
    (12 GiB). A 32 GiB pod fits nowhere as is."""
    return Snapshot(
        (replace(node("a"), labels={"pool": "inference"}), replace(node("b"), labels={"pool": "training"})),
        (placed("p", "a0", 24), placed("q", "a1", 10), placed("r", "b0", 30), placed("s", "b1", 12)),
    )


def test_the_node_selector_keeps_the_runs_off_and_onto_the_nodes_it_does_not_select() -> None:
    """The descheduler's nodeSelector: one GPU pool of several is defragmented. Selecting pool=inference, b's pods
    stay and no pod moves onto b; selecting pool=training, no plan within b exists; and keep-room counts no room on
    the nodes left out."""
    inference = parse_policy(HEAD + "mode: on\nnodeSelector: pool=inference")
    decision = decide_run(inference, pools(), waiting(32), [], NOW, "r1")
    assert [(m.pod, m.from_node, m.to_node) for m in decision.moves] == [("team-a/q", "a", "a")]
    assert decision.held == (
        "team-a/r: is on node b, which the policy's nodeSelector does not select",
        "team-a/s: is on node b, which the policy's nodeSelector does not select",
    )
    assert decision.plan is not None and decision.plan.target is not None and decision.plan.target[0] == "a"
    training = decide_run(
        parse_policy(HEAD + "mode: on\nnodeSelector: pool=training"), pools(), waiting(32), [], NOW, "r1"
    )
    assert training.moves == () and training.reason.startswith("no plan"), training.reason
    assert [h.split(":")[0] for h in training.held] == ["team-a/p", "team-a/q"]
    free_b = Snapshot(pools().nodes, pools().pods[:3])
    assert room_of(in_scope(free_b, ON)).whole_free == {"NVIDIA-A100": 1}, "no selector: every node"
    assert room_of(in_scope(free_b, inference)).whole_free == {}, "b1 is free, but b is left out"
    assert in_scope(free_b, ON) is free_b


def test_with_ignore_pods_without_pdb_only_the_pods_a_disruption_budget_covers_move() -> None:
    """The descheduler's ignorePodsWithoutPDB: an operator moves only the workloads that said how much disruption
    they take. q (the pod the plan would move) has no PodDisruptionBudget, so p, which has one, moves instead."""
    snapshot = one_move()
    covered = replace(
        snapshot,
        pods=tuple(replace(p, budgets=("team-a/pdb",)) if p.name == "p" else p for p in snapshot.pods),
        budgets={"team-a/pdb": 1},
    )
    policy = parse_policy(HEAD + "mode: on\nignorePodsWithoutPDB: true")
    decision = decide_run(policy, covered, waiting(32), [], NOW, "r1")
    assert [m.pod for m in decision.moves] == ["team-a/p"]
    assert decision.held == (
        "team-a/q: is covered by no PodDisruptionBudget, and the policy moves only pods one covers "
        "(ignorePodsWithoutPDB)",
    )
    assert [m.pod for m in decide_run(ON, covered, waiting(32), [], NOW, "r1").moves] == ["team-a/q"], "false: q"


@pytest.mark.parametrize(
    ("field", "volume", "held"),
    [
        (
            "evictLocalStoragePods: false",
            {"local_storage": "emptyDir"},
            "team-a/q: mounts local storage (emptyDir), and the policy keeps such pods in place "
            "(evictLocalStoragePods: false)",
        ),
        (
            "ignorePvcPods: true",
            {"mounts_claim": True},
            "team-a/q: mounts a PersistentVolumeClaim, and the policy keeps such pods in place (ignorePvcPods: true)",
        ),
    ],
)
def test_the_policy_keeps_pods_with_local_storage_or_a_claim_when_it_says_so(
    field: str, volume: dict[str, object], held: str
) -> None:
    """The descheduler's evictLocalStoragePods and ignorePvcPods: what a pod wrote on its node, or to a volume it
    claims, stays where the operator wants it. q (the pod the plan would move) mounts one, so p moves instead; the
    defaults move q, and the other field does not hold it."""
    snapshot = one_move()
    mounting = replace(snapshot, pods=tuple(replace(p, **volume) if p.name == "q" else p for p in snapshot.pods))
    decision = decide_run(parse_policy(HEAD + "mode: on\n" + field), mounting, waiting(32), [], NOW, "r1")
    assert [m.pod for m in decision.moves] == ["team-a/p"]
    assert decision.held == (held,)
    assert [m.pod for m in decide_run(ON, mounting, waiting(32), [], NOW, "r1").moves] == ["team-a/q"], "defaults"
    other = "ignorePvcPods: true" if field.startswith("evict") else "evictLocalStoragePods: false"
    crossed = decide_run(parse_policy(HEAD + "mode: on\n" + other), mounting, waiting(32), [], NOW, "r1")
    assert [m.pod for m in crossed.moves] == ["team-a/q"], "the other field holds nothing"


def test_only_the_pods_the_label_selector_selects_move() -> None:
    """The descheduler's labelSelector: an operator lets workloads move one by one. q (the pod the plan would move)
    is not selected, so p moves instead; an empty selector is no selector."""
    snapshot = one_move()
    labelled = replace(snapshot, pods=tuple(replace(p, labels={"movable": p.name}) for p in snapshot.pods))
    policy = parse_policy(HEAD + "mode: on\nlabelSelector: {matchLabels: {movable: p}}")
    decision = decide_run(policy, labelled, waiting(32), [], NOW, "r1")
    assert [m.pod for m in decision.moves] == ["team-a/p"]
    assert decision.held == ("team-a/q: is not selected by the policy's labelSelector",)
    everyone = parse_policy(HEAD + "mode: on\nlabelSelector: {}")
    assert everyone.label_selector is None
    assert [m.pod for m in decide_run(everyone, labelled, waiting(32), [], NOW, "r1").moves] == ["team-a/q"]


def test_a_pod_in_its_cooldown_or_a_left_out_namespace_stays() -> None:
    cooling = decide_run(ON, one_move(), waiting(32), [spent("team-a/q", "z", 10)], NOW, "r1")
    assert [m.pod for m in cooling.moves] == ["team-a/p"]
    both = decide_run(ON, one_move(), waiting(32), [spent("team-a/q", "z", 10), spent("team-a/p", "z", 5)], NOW, "r1")
    assert both.moves == () and "team-a/q was moved recently" in both.reason
    out = decide_run(
        replace(ON, namespaces=Namespaces(exclude=("team-a",))), one_move(), waiting(32, namespace="b"), [], NOW, "r1"
    )
    assert out.moves == () and "which the policy leaves out" in out.reason
    own = decide_run(ON, one_move(), waiting(32, namespace="kube-system"), [], NOW, "r1")
    assert own.reason == "namespace kube-system is out of the policy's namespaces"


def test_a_history_that_can_be_read_only_once_still_rests_its_moved_pod() -> None:
    """The budgets and the cooldowns both read the history: handed over as an iterator, q still rests."""
    cooling = decide_run(ON, one_move(), waiting(32), iter([spent("team-a/q", "z", 10)]), NOW, "r1")
    assert [m.pod for m in cooling.moves] == ["team-a/p"]
    assert cooling.held == ("team-a/q: was moved recently; its cooldown (budgets.cooldown) ends at 12:50:00 UTC",)


def test_a_pod_its_workload_made_after_a_move_stays_for_the_moves_cooldown() -> None:
    """q was made by a workload whose pod a given-up move evicted 10 min ago (its replacement evicted in turn, so no
    move names q): q rests; p, of that workload too but older than the move, may move."""
    workload = selector_from_dict({"matchLabels": {"app": "w"}})
    given_up = replace(spent("team-a/gone", "z", 10), placement="move-gone", workload=workload)
    made = NOW - timedelta(minutes=2)
    snapshot = one_move()
    p, q = snapshot.pods
    older = replace(p, labels={"app": "w"}, created=NOW - timedelta(hours=2))
    snapshot = replace(snapshot, pods=(older, replace(q, labels={"app": "w"}, created=made)))
    decision = decide_run(ON, snapshot, waiting(32), [given_up], NOW, "r1")
    assert [m.pod for m in decision.moves] == ["team-a/p"]
    assert decision.held == (
        "team-a/q: was made by a workload one of whose pods was moved recently; the cooldown (budgets.cooldown) ends "
        "at 12:50:00 UTC",
    )
    later = decide_run(ON, snapshot, waiting(32), [given_up], NOW + timedelta(minutes=51), "r1")
    assert [m.pod for m in later.moves] == ["team-a/q"], "the cooldown ended"


def test_a_pod_that_fits_now_needs_no_move() -> None:
    """Only a rescue whose pod fits the cards as they are is sent back to the scheduler (`fits_now`): one that needs
    moves, one over budget or a keep-room run with nothing to gain is not."""
    decision = decide_run(ON, one_move(), waiting(8), [], NOW, "r1")
    assert decision.moves == () and decision.reason == "no move needed: team-a/waiting fits on a now"
    assert decision.fits_now
    moving = decide_run(ON, one_move(), waiting(32), [], NOW, "r1")
    assert moving.moves and not moving.fits_now
    dry = decide_run(replace(ON, mode=Mode.dry_run), one_move(), waiting(32), [], NOW, "r1")
    assert dry.plan is not None and dry.plan.moves and not dry.fits_now, "a dry run's plan still moves"
    history = [spent(f"team-b/x{i}", f"n{i}", 30) for i in range(11)]
    over = decide_run(ON, two_moves(), waiting(40), history, NOW, "r1")
    assert over.reason.startswith("budget") and not over.fits_now
    met = RoomTrigger(FreeCardsGoal(0))
    room = decide_run(replace(ON, keep_room=KeepRoom(enabled=True)), one_move(), met, [], NOW, "r1")
    assert (room.moves, room.reason) == ((), "no plan: nothing to gain") and room.plan is not None
    assert room.plan.complete and not room.fits_now, "a keep-room goal met has no pod to send back"


def test_keep_room_moves_within_budget_even_when_the_goal_is_not_met_in_full() -> None:
    policy = replace(ON, keep_room=KeepRoom(enabled=True))
    snapshot = Snapshot((node("a"), node("b")), (placed("p", "a0", 10), placed("q", "a1", 10), placed("r", "b0", 5)))
    decision = decide_run(policy, snapshot, RoomTrigger(FreeCardsGoal(3)), [], NOW, "r1")
    assert decision.acts and 1 <= len(decision.moves) <= 2
    assert decide_run(ON, snapshot, RoomTrigger(FreeCardsGoal(1)), [], NOW, "r1").reason.startswith("keep-room is off")


NAMESPACES = ("team-a", "team-b", "kube-system", "ml")


@st.composite
def scenes(draw: st.DrawFn) -> tuple[DefragPolicy, Snapshot, RescueTrigger | RoomTrigger, list[MoveRecord]]:
    """A random cluster of 40 GiB cards, pods that fit them, a history, a policy in mode on and a trigger."""
    nodes = [
        replace(node(f"n{i}", draw(st.integers(1, 3))), labels={"pool": draw(st.sampled_from("xy"))})
        for i in range(draw(st.integers(2, 4)))
    ]
    pods = []
    for slot in (card for n in nodes for card in n.cards):
        free = 40
        for _ in range(draw(st.integers(1, 5))):
            gib = draw(st.sampled_from((6, 8, 12, 16, 20)))
            if gib > free:
                continue
            free -= gib
            pod = placed(
                f"p{len(pods)}",
                slot.uuid,
                gib,
                namespace=draw(st.sampled_from(NAMESPACES)),
                priority=draw(st.integers(0, 3)),
                owner=f"rs-{draw(st.integers(0, 3))}",
            )
            minutes = draw(st.sampled_from((None, 0, 5, 30, 90, 120)))
            scheduled = None if minutes is None else NOW - timedelta(minutes=minutes)
            pods.append(
                replace(
                    pod,
                    scheduled=scheduled,
                    budgets=draw(st.sampled_from(((), ("team-a/pdb",), ("team-a/pdb",)))),
                    local_storage=draw(st.sampled_from(("", "", "emptyDir"))),
                    mounts_claim=draw(st.sampled_from((False, False, True))),
                )
            )
    history = [
        MoveRecord(
            draw(st.sampled_from(("r0", "r1"))),
            pod.key if draw(st.booleans()) else f"{pod.namespace}/gone",
            pod.namespace,
            draw(st.sampled_from([n.name for n in nodes])),
            NOW - timedelta(minutes=draw(st.integers(0, 120))),
            draw(st.sampled_from(("Evicted", "DryRun", "Blocked", "Pending"))),
        )
        for pod in (draw(st.lists(st.sampled_from(pods), max_size=6)) if pods else [])
    ]
    budgets = Budgets(
        moves_per_run=draw(st.integers(1, 4)),
        moves_per_hour=draw(st.integers(1, 6)),
        moves_per_node=draw(st.integers(0, 3)),
        moves_per_namespace=draw(st.integers(0, 3)),
        cooldown=timedelta(minutes=draw(st.integers(0, 90))),
    )
    policy = DefragPolicy(
        mode=Mode.on,
        namespaces=Namespaces(exclude=tuple(draw(st.lists(st.sampled_from(("team-b", "ml*")), max_size=2)))),
        keep_room=KeepRoom(enabled=True),
        budgets=budgets,
        max_moves_per_plan=draw(st.integers(1, 6)),
        priority_threshold=draw(st.none() | st.integers(0, 4)),
        min_replicas=draw(st.integers(0, 3)),
        # Each hold is drawn rarely, so that most scenes still move pods for the properties to judge.
        min_pod_age=timedelta(minutes=draw(st.sampled_from((0, 0, 0, 10, 60)))),
        ignore_pods_without_budget=draw(st.sampled_from((False, False, False, True))),
        evict_local_storage=draw(st.sampled_from((True, True, True, False))),
        ignore_claim_pods=draw(st.sampled_from((False, False, False, True))),
        node_selector=draw(
            st.sampled_from((None, None, None, parse_selector_string("pool=x"), parse_selector_string("pool!=x")))
        ),
    )
    trigger: RescueTrigger | RoomTrigger
    if draw(st.booleans()):
        trigger = waiting(draw(st.sampled_from((28, 32, 36, 40))), priority=draw(st.integers(0, 3)))
    else:
        trigger = RoomTrigger(FreeCardsGoal(draw(st.integers(1, 3))))
    return policy, Snapshot(tuple(nodes), tuple(pods), budgets={"team-a/pdb": 3}), trigger, history


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenes())
def test_a_decision_never_exceeds_a_budget_nor_moves_a_pod_the_policy_keeps(scene: tuple) -> None:
    policy, snapshot, trigger, history = scene
    decision = decide_run(policy, snapshot, trigger, history, NOW, "r1")
    left = allowance(policy.budgets, history, NOW, "r1")
    moves = decision.moves
    assert len(moves) <= min(left.moves, policy.max_moves_per_plan)
    for from_node, count in Counter(m.from_node for m in moves).items():
        assert count <= left.for_node(from_node) and count <= policy.budgets.moves_per_node
    for namespace, count in Counter(m.pod.split("/")[0] for m in moves).items():
        assert count <= left.for_namespace(namespace) and count <= policy.budgets.moves_per_namespace
    pods = {p.key: p for p in snapshot.pods}
    for move in moves:
        pod = pods[move.pod]
        assert policy.namespaces.allows(pod.namespace), move
        assert cooldowns(policy.budgets, history, NOW).get(move.pod) is None, move
        if isinstance(trigger, RescueTrigger):
            assert pod.priority <= trigger.pod.priority, move
        if policy.priority_threshold is not None:
            assert pod.priority < policy.priority_threshold, move
        siblings = [p for p in snapshot.pods if p.owner_uid == pod.owner_uid and p.allocation is not None]
        assert len(siblings) >= policy.min_replicas, move
        if policy.min_pod_age:
            assert pod.scheduled is not None and NOW - pod.scheduled >= policy.min_pod_age, move
        if policy.ignore_pods_without_budget:
            assert pod.budgets, move
        if not policy.evict_local_storage:
            assert not pod.local_storage, move
        if policy.ignore_claim_pods:
            assert not pod.mounts_claim, move
        if policy.node_selector is not None:
            on = {n.name: matches(policy.node_selector, n.labels) for n in snapshot.nodes}
            assert on[move.from_node] and on[move.to_node], move
    if isinstance(trigger, RescueTrigger) and moves:
        assert decision.plan is not None and decision.plan.complete
    assert bool(moves) != bool(decision.reason)


def test_cards_kept_for_another_rescued_pod_take_no_moved_pod_and_no_other_rescue() -> None:
    """q would move onto a0 (see the first test); while a0 is kept for another Pending pod, no plan uses it, and the
    pod a0 is kept for is planned as if it were not."""
    kept = (Reservation("team-a/other", ("a0",), NOW + timedelta(seconds=60)),)
    assert keep_off(one_move(), kept, NOW).nodes[0].cordoned == frozenset({"a0"})
    decision = decide_run(ON, keep_off(one_move(), kept, NOW), waiting(32), [], NOW, "r1")
    assert not decision.moves and decision.reason.startswith("no plan"), decision.reason
    assert "gpu-0 (a0) is kept for team-a/other, whose rescue freed it, until 12:01:00 UTC" in decision.reason
    assert "device-cordon" not in decision.reason, "the reason is the rescue's, not HAMi's cordon"
    assert keep_off(one_move(), kept, NOW, "team-a/other") == one_move()
    assert keep_off(one_move(), kept, NOW + timedelta(seconds=60)) == one_move(), "an expired reservation keeps nothing"


def test_a_card_hami_refused_a_given_up_moves_replacement_on_takes_no_plan_until_the_cooldown_ends() -> None:
    """q would move onto a0 for the 32 GiB pod; once HAMi refused a given-up move's replacement on a0, no plan uses a0
    (nor frees it for the pod) until the cooldown ends: q joins s on node b instead."""
    snapshot = Snapshot((node("a"), node("b")), (*one_move().pods, placed("r", "b0", 31), placed("s", "b1", 10)))
    assert [(m.pod, m.to_cards) for m in decide_run(ON, snapshot, waiting(32), [], NOW, "r1").moves] == [
        ("team-a/q", ("a0",))
    ]
    refused = refuse({}, ["a0"], NOW, timedelta(hours=1))
    assert refused == {"a0": NOW + timedelta(hours=1)}
    decision = decide_run(ON, keep_off(snapshot, (), NOW, refused=refused), waiting(32), [], NOW, "r1")
    assert [(m.pod, m.to_cards) for m in decision.moves] == [("team-a/q", ("b1",))], decision.reason
    alone = decide_run(ON, keep_off(one_move(), (), NOW, refused=refused), waiting(32), [], NOW, "r1")
    assert not alone.moves, "on node a alone, a0 neither takes q nor is freed for the pod"
    assert "gpu-0 (a0) is left out of plans until 13:00:00 UTC: HAMi refused a given-up move's pod" in alone.reason
    later = NOW + timedelta(hours=1)
    assert keep_off(snapshot, (), later, refused=refused) == snapshot, "the cooldown ended"
    assert refuse(refused, ["b1"], later, timedelta(hours=1)) == {"b1": later + timedelta(hours=1)}, "a0's time is up"


def test_a_budget_lowered_or_a_namespace_taken_out_mid_run_binds_from_the_runs_next_move() -> None:
    """The policy read again between a run's moves: the moves it made count, and what is left must still fit."""
    now = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
    planned = [Move(f"team-a/p{i}", f"u{i}", "n1", ("GPU-0",), "n2", ("GPU-1",), "room") for i in range(3)]
    roomy = Budgets(moves_per_run=4, moves_per_hour=10, moves_per_node=4, moves_per_namespace=4)

    def left(budgets: Budgets, history: list[MoveRecord], done: int, **changed: Any) -> str:
        policy = replace(ON, budgets=budgets, **changed)
        return still_allowed(policy, history, planned[:done], planned[done:], now, "r1")

    assert left(roomy, [], 1) == ""
    earlier = [MoveRecord("r0", "team-b/q", "team-b", "n9", now - timedelta(minutes=5), "Evicted")]
    hourly = replace(roomy, moves_per_hour=3)
    assert left(hourly, earlier, 1) == "budget: 1 move left this hour, the rescue needs 2"
    rolled = [replace(earlier[0], time=now - timedelta(minutes=61))]
    assert left(hourly, rolled, 2) == "", "the earlier move left the hour"
    assert (
        left(replace(roomy, moves_per_node=2), [], 1) == "budget: 1 move left off node n1 this hour, the rescue needs 2"
    )
    assert left(replace(roomy, moves_per_run=2), [], 2).startswith("budget: 0 moves left this run")
    out = Namespaces(exclude=("team-a",))
    assert left(roomy, [], 1, namespaces=out) == "namespace team-a is now out of the policy's namespaces"
    assert left(roomy, [], 3, namespaces=out) == "", "no move left to make"


def test_a_pod_the_policy_leaves_out_mid_run_is_not_evicted_and_the_runs_own_moves_start_no_cooldown() -> None:
    """The policy read again before each move: a pod its new labelSelector or priorityThreshold leaves out, or a
    target its new nodeSelector does not select, stops the run; the run's own earlier moves hold no pod, another
    run's do."""
    snapshot = one_move()
    move = decide_run(ON, snapshot, waiting(32), [], NOW, "r1").moves[0]
    assert (move.pod, move.to_node) == ("team-a/q", "a")
    assert held_now(ON, snapshot, [], NOW, "r1", move) == ""
    narrowed = replace(ON, label_selector=parse_selector_string("app=web"))
    assert held_now(narrowed, snapshot, [], NOW, "r1", move) == "team-a/q is not selected by the policy's labelSelector"
    assert held_now(replace(ON, priority_threshold=0), snapshot, [], NOW, "r1", move) == (
        "team-a/q has priority 0, at or above the policy's priorityThreshold 0"
    )
    elsewhere = replace(ON, node_selector=parse_selector_string("zone=b"))
    assert held_now(elsewhere, snapshot, [], NOW, "r1", move) == (
        "its target node a is no longer selected by the policy's nodeSelector"
    )
    assert held_now(ON, snapshot, [spent("team-a/q", "a", 10, run="r1")], NOW, "r1", move) == ""
    assert held_now(ON, snapshot, [spent("team-a/q", "a", 10)], NOW, "r1", move) == (
        "team-a/q was moved recently; its cooldown (budgets.cooldown) ends at 12:50:00 UTC"
    )


def bystanding(snapshot: Snapshot) -> Snapshot:
    """The snapshot with node z's one card full with a kube-system pod, which the policy leaves out."""
    return Snapshot((*snapshot.nodes, node("z", 1)), (*snapshot.pods, placed("sys", "z0", 40, namespace="kube-system")))


SYS_HELD = ("kube-system/sys: is in namespace kube-system, which the policy leaves out",)
RESCUE = "rescue team-a/waiting (CardInsufficientMemory)"


def test_a_decision_that_moves_nothing_still_names_its_run_trigger_goal_and_mode() -> None:
    """The controller records and reports every decision, those that move nothing too."""
    trigger = waiting(32)
    why = "the policy's mode is off"
    off = decide_run(DefragPolicy(mode=Mode.off), one_move(), trigger, [], NOW, "r1")
    assert off == RunDecision("r1", RESCUE, FitGoal(trigger.pod), (), False, why, None, (), why)
    why = "rescue is off in the policy (rescue.enabled: false)"
    dry = decide_run(replace(DefragPolicy(), rescue=Rescue(enabled=False)), one_move(), trigger, [], NOW, "r1")
    assert dry == RunDecision("r1", RESCUE, FitGoal(trigger.pod), (), True, why, None, (), why)
    why = "keep-room is off in the policy (keepRoom.enabled: false)"
    room = decide_run(ON, one_move(), RoomTrigger(FreeCardsGoal(1)), [], NOW, "r1")
    trigger_words = "keep room: free 1 more whole card (cards already free do not count)"
    assert room == RunDecision("r1", trigger_words, FreeCardsGoal(1), (), False, why, None, (), why)


def test_a_pod_that_fits_now_keeps_the_plan_and_the_held_pods_of_its_decision() -> None:
    why = "no move needed: team-a/waiting fits on a now"
    decision = decide_run(ON, bystanding(one_move()), waiting(8), [], NOW, "r1")
    assert decision == RunDecision("r1", RESCUE, FitGoal(waiting(8).pod), (), False, why, decision.plan, SYS_HELD, why)
    assert decision.plan is not None and decision.plan.target == ("a", ("a0",))


def test_a_rescue_over_budget_keeps_the_plan_and_the_held_pods_of_its_decision() -> None:
    history = [spent(f"team-b/x{i}", f"n{i}", 30) for i in range(11)]
    decision = decide_run(ON, bystanding(two_moves()), waiting(40), history, NOW, "r1")
    why = "budget: 1 move left this hour, the rescue needs 2"
    assert decision == RunDecision("r1", RESCUE, FitGoal(waiting(40).pod), (), False, why, decision.plan, SYS_HELD, why)
    assert decision.plan is not None and not decision.plan.complete


def test_a_rescue_needing_more_moves_than_a_plan_may_make_has_no_plan_rather_than_a_budget() -> None:
    """maxMovesPerPlan bounds the plan a rescue is measured by too: two moves needed, one allowed, is no plan (the
    budgets, untouched, are not what stops it)."""
    policy = replace(ON, max_moves_per_plan=1)
    decision = decide_run(policy, bystanding(two_moves()), waiting(40), [], NOW, "r1")
    why = (
        "no plan: no node can make room within the bounds: "
        "a: moving team-a/q would make room on gpu-1, but team-a/q fits no other card. "
        "b: moving team-a/r would make room on gpu-0, but team-a/r fits no other card. "
        "z: gpu-0: CardInsufficientMemory, and kube-system/sys is in namespace kube-system, which the policy leaves out"
    )
    assert decision == RunDecision("r1", RESCUE, FitGoal(waiting(40).pod), (), False, why, decision.plan, SYS_HELD, why)
    assert decision.plan is not None and not decision.plan.complete
    guarded = replace(
        two_moves(),
        pods=tuple(replace(p, budgets=("team-a/hold",)) for p in two_moves().pods),
        budgets={"team-a/hold": 0},
    )
    blocked = decide_run(policy, guarded, waiting(40), [], NOW, "r1")
    assert blocked.reason.startswith("no plan: "), "no plan within maxMovesPerPlan even with the budgets lifted"


def test_a_rescue_needing_more_moves_off_one_node_than_the_planners_default_is_measured_by_the_plans_bound() -> None:
    """Nine pods must leave node a: with maxMovesPerPlan 9 the rescue is only over the run's budget of 4."""
    pods = tuple(placed(f"p{i}", "a0", 4) for i in range(9))
    rest = (placed("x", "b0", 1, namespace="kube-system"), placed("y", "b1", 1, namespace="kube-system"))
    snapshot = Snapshot((node("a", 1), node("b")), (*pods, *rest))
    decision = decide_run(replace(ON, max_moves_per_plan=9), snapshot, waiting(40), [], NOW, "r1")
    assert decision.reason == "budget: 4 moves left this run, the rescue needs 9"


def test_a_block_names_every_pod_to_evict_and_only_the_budgets_that_fall_short() -> None:
    """p1 and p2 must leave a0 (q, r and s are held): team-a/gone (unknown, so 0) and team-a/pair (1 for 2) fall short,
    team-a/solo (1 for 1) does not."""
    covered = {"p1": ("team-a/gone", "team-a/pair"), "p2": ("team-a/pair", "team-a/solo")}
    snapshot = two_moves()
    snapshot = replace(
        snapshot,
        pods=tuple(
            replace(p, budgets=covered[p.name]) if p.name in covered else replace(p, namespace="kube-system")
            for p in snapshot.pods
        ),
        budgets={"team-a/pair": 1, "team-a/solo": 1},
    )
    decision = decide_run(ON, snapshot, waiting(40), [], NOW, "r1")
    why = (
        "blocked: the rescue must evict team-a/p1, team-a/p2; "
        "PodDisruptionBudget team-a/gone allows 0 disruption(s), the rescue needs 1; "
        "PodDisruptionBudget team-a/pair allows 1 disruption(s), the rescue needs 2"
    )
    held = tuple(f"kube-system/{name}: is in namespace kube-system, which the policy leaves out" for name in "qrs")
    assert decision == RunDecision("r1", RESCUE, FitGoal(waiting(40).pod), (), False, why, decision.plan, held, why)
    assert decision.plan is not None and not decision.plan.complete


def test_keep_room_with_no_plan_says_why_and_keeps_the_plan_and_the_held_pods() -> None:
    policy = replace(ON, keep_room=KeepRoom(enabled=True))
    goal = FreeCardsGoal(1)
    decision = decide_run(
        policy, bystanding(Snapshot((node("a"),), (placed("p", "a0", 10),))), RoomTrigger(goal), [], NOW, "r1"
    )
    why = (
        "no plan: freed 0 of 1 card(s); the others cannot be emptied: a/gpu-0: team-a/p fits no other card in use. "
        "z/gpu-0: kube-system/sys is in namespace kube-system, which the policy leaves out"
    )
    trigger = "keep room: free 1 more whole card (cards already free do not count)"
    assert decision == RunDecision("r1", trigger, goal, (), False, why, decision.plan, SYS_HELD, why)
    assert decision.plan is not None and not decision.plan.complete
    met = FreeCardsGoal(1, on_one_node=True)
    assert decide_run(policy, Snapshot((node("a"),), ()), RoomTrigger(met), [], NOW, "r1").reason == (
        "no plan: nothing to gain"
    ), "a goal already met"


def test_the_message_names_each_move_and_each_card_of_a_move() -> None:
    moves = decide_run(ON, two_moves(), waiting(40), [], NOW, "r1")
    assert moves == RunDecision(
        "r1",
        RESCUE,
        FitGoal(waiting(40).pod),
        moves.moves,
        False,
        "",
        moves.plan,
        (),
        "moving team-a/p1 from a/gpu-0 to b/gpu-0; team-a/q from a/gpu-1 to a/gpu-0 to rescue team-a/waiting "
        "(CardInsufficientMemory)",
        {"a0": "gpu-0", "a1": "gpu-1", "b0": "gpu-0"},
        "moving team-a/p1 from a/gpu-0 to b/gpu-0; team-a/q from a/gpu-1 to a/gpu-0",
    ), "the names of the moves' cards only (b1 is in no move), and the moves apart from the trigger"
    devices = (tuple(ContainerDevice(uuid, "NVIDIA", 10 * GIB, 0) for uuid in ("a0", "a1")),)
    wide = PlanPod(
        namespace="team-a",
        name="w",
        uid="uid-w",
        requests=(card_request(2, memreq=10 * GIB),),
        allocation=PodAllocation("team-a", "w", "uid-w", "a", "Running", devices),
        owner_kind="ReplicaSet",
    )
    snapshot = Snapshot((node("a"), node("b")), (wide, placed("x", "b0", 10), placed("y", "b1", 10)))
    two_cards = RescueTrigger(PlanPod(namespace="team-a", name="waiting", requests=(card_request(2, memreq=40 * GIB),)))
    assert decide_run(ON, snapshot, two_cards, [], NOW, "r1").message == (
        "moving team-a/w from a/gpu-0,gpu-1 to b/gpu-0,gpu-1 to rescue team-a/waiting"
    ), "a trigger without HAMi's reason names none"


def test_the_cards_named_are_those_of_the_moves_and_of_the_target_a_card_already_free_too() -> None:
    """The kept room's Event names the target's cards: a two-card pod whose target has a card free already."""
    snapshot = Snapshot((node("a"), node("b")), (placed("p", "a1", 10), placed("x", "b0", 30), placed("y", "b1", 30)))
    two_cards = RescueTrigger(PlanPod(namespace="team-a", name="waiting", requests=(card_request(2, memreq=40 * GIB),)))
    decision = decide_run(ON, snapshot, two_cards, [], NOW, "r1")
    assert decision.message == "moving team-a/p from a/gpu-1 to b/gpu-0 to rescue team-a/waiting"
    assert decision.plan is not None and decision.plan.target == ("a", ("a0", "a1"))
    assert decision.card_names == {"a0": "gpu-0", "a1": "gpu-1", "b0": "gpu-0"}, "a0 is in no move, b1 in neither"


def scheduled(node: str, *containers: tuple[str, ...], on: str = "") -> dict[str, Any]:
    """A pod bound to `node`, whose containers HAMi allocated these cards on `on` (default `node`)."""
    allocated = tuple(tuple(ContainerDevice(uuid, "NVIDIA", GIB, 0) for uuid in uuids) for uuids in containers)
    annotations = {NODE_ANNOTATION: on or node, ALLOCATED_ANNOTATION: encode_allocation(allocated)}
    return {"metadata": {"name": "big", "namespace": "team-a", "annotations": annotations}, "spec": {"nodeName": node}}


def registered(name: str, cards: int = 4) -> dict[str, Any]:
    """Node `name` as stored, its register naming cards `<name>0`, `<name>1`, ..."""
    register = encode_register(node(name, cards).cards)
    return {"metadata": {"name": name, "annotations": {REGISTER_ANNOTATION: register}}}


def test_a_rescued_pod_is_said_to_run_on_the_cards_hami_allocated_it_by_their_index_else_on_its_node() -> None:
    """The rescue's last Event names the cards HAMi gave the pod, as the run's Event named the cards it freed."""
    assert scheduled_where(scheduled("a", ("a3",), ("a1", "a3")), registered("a")) == "a/gpu-1,gpu-3", "by index"
    unread = {"metadata": {"name": "a", "annotations": {REGISTER_ANNOTATION: "not a register"}}}
    for pod, stored in (
        (scheduled("a", ("a1",)), {}),
        (scheduled("a", ("a1",)), {"metadata": {"name": "a"}}),
        (scheduled("a", ("a1",)), unread),
        (scheduled("a", ("a9",)), registered("a")),
        (scheduled("a", ("a1",), on="b"), registered("a")),
        (scheduled("a"), registered("a")),
        (
            {"metadata": {"annotations": {NODE_ANNOTATION: "a", ALLOCATED_ANNOTATION: "x"}}, "spec": {"nodeName": "a"}},
            registered("a"),
        ),
        ({"spec": {"nodeName": "a"}}, registered("a")),
    ):
        assert scheduled_where(pod, stored) == "a", (pod, stored)


def test_a_namespace_budget_lowered_mid_run_counts_the_runs_moves_in_that_namespace() -> None:
    now = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
    planned = [Move(f"team-a/p{i}", f"u{i}", f"n{i}", ("GPU-0",), "m", ("GPU-1",), "room") for i in range(3)]
    budgets = Budgets(moves_per_run=4, moves_per_hour=10, moves_per_node=4, moves_per_namespace=2)
    policy = replace(ON, budgets=budgets)
    assert still_allowed(policy, [], planned[:1], planned[1:], now, "r1") == (
        "budget: 1 move left in namespace team-a this hour, the rescue needs 2"
    )
    roomier = replace(policy, budgets=replace(budgets, moves_per_namespace=3))
    assert still_allowed(roomier, [], planned[:1], planned[1:], now, "r1") == "", "exactly the moves left"


def test_a_rescue_kept_off_nodes_for_reasons_the_plan_does_not_read_names_each_one_and_keeps_its_held_pods() -> None:
    unread = ("1 node(s) didn't match pod anti-affinity rules", "2 node(s) had volume node affinity conflict")
    trigger = replace(waiting(32), unread=unread)
    decision = decide_run(ON, bystanding(one_move()), trigger, [], NOW, "r1")
    why = (
        "no plan: kube-scheduler keeps the pod off nodes for reasons the plan does not read (1 node(s) didn't match "
        "pod anti-affinity rules; 2 node(s) had volume node affinity conflict), so the room its moves make could be "
        "where the pod may not go; run `kubectl hami-place plan --for waiting -n team-a` and apply it if its target "
        "suits the pod"
    )
    assert decision == RunDecision("r1", RESCUE, FitGoal(trigger.pod), (), False, why, decision.plan, SYS_HELD, why)
    assert decision.plan is not None and [m.pod for m in decision.plan.moves] == ["team-a/q"]


def test_a_rescued_pod_on_every_card_of_its_node_is_said_to_run_on_each_of_them() -> None:
    assert scheduled_where(scheduled("a", ("a0", "a1")), registered("a", 2)) == "a/gpu-0,gpu-1"
