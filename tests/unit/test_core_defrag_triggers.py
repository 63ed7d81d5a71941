"""The triggers: HAMi's curable reasons in FailedScheduling messages, rescue candidates, and keep-room goals."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kubectl_hami_place.core.allocations import ContainerDevice
from kubectl_hami_place.core.cards import Card
from kubectl_hami_place.core.defrag.policy import DefragPolicy, KeepRoom, Namespaces, Rescue, WholeFreeCards
from kubectl_hami_place.core.defrag.triggers import (
    Candidate,
    Room,
    pending_pod,
    pending_since,
    refused_groups,
    rescue_candidates,
    rescue_reason,
    room_goal,
    room_of,
    unread_refusals,
    unschedulable_message,
)
from kubectl_hami_place.core.hami_config import HAMI_DEFAULTS, HamiConfig
from kubectl_hami_place.core.node_resources import Resources
from kubectl_hami_place.core.node_selection import node_marks
from kubectl_hami_place.core.planner import FreeCardsGoal, PlanNode, PlanPod, Snapshot
from kubectl_hami_place.core.planner.objects import pod_for_plan
from kubectl_hami_place.core.requests import card_request
from kubectl_hami_place.core.usage import PodAllocation
from kubectl_hami_place.core.volumes import volumes_of

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
GIB = 1024


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (
            "0/2 nodes are available: 2 2/2 CardInsufficientMemory. preemption: 0/2 nodes are available: "
            "2 No preemption victims found for incoming pod.",
            "CardInsufficientMemory",
        ),
        (
            "0/3 nodes are available: 1 node(s) had untolerated taint {gpu: x}, "
            "2 1/2 CardInsufficientCore, 1/2 NumaNotFit.",
            "CardInsufficientCore, NumaNotFit",
        ),
        (
            "0/1 nodes are available: 1 1/4 CardTypeMismatch, 3/4 ExclusiveDeviceAllocateConflict.",
            "ExclusiveDeviceAllocateConflict",
        ),
        (
            "0/1 nodes are available: 1 1/2 AllocatedCardsInsufficientRequest, 1/2 CardTimeSlicingExhausted.",
            "AllocatedCardsInsufficientRequest, CardTimeSlicingExhausted",
        ),
        ("0/1 nodes are available: 1 Insufficient cpu, 1 4/4 CardComputeUnitsExhausted.", "CardComputeUnitsExhausted"),
        ("0/2 nodes are available: 2 node(s) had untolerated taint {node.kubernetes.io/not-ready: }.", None),
        ("0/2 nodes are available: 1 Insufficient cpu, 1 Insufficient memory.", None),
        ("0/1 nodes are available: 1 2/2 CardTypeMismatch.", None),
        ("0/1 nodes are available: 1 2/2 CardUuidMismatch.", None),
        ("0/1 nodes are available: 1 NodeInsufficientDevice.", None),
        ("running Bind plugin: node gpu-0 is locked: node lock contention", None),
        ("binding rejected: 1/2 CardInsufficientMemory; node lock contention", None),
    ],
)
def test_rescue_reason_takes_only_what_moves_can_cure(message: str, reason: str | None) -> None:
    assert rescue_reason(message) == reason


def test_refused_groups_are_counted_reasons_with_hamis_joined_reasons_kept_together() -> None:
    message = (
        "0/6 nodes are available: 1 node(s) had taint {team: b}, that the pod didn't tolerate, "
        "2 1/2 CardInsufficientCore, 1/2 NumaNotFit, 3 node(s) didn't match pod anti-affinity rules. "
        "preemption: 0/6 nodes are available: 6 No preemption victims found for incoming pod."
    )
    assert refused_groups(message) == (
        (1, "node(s) had taint {team: b}, that the pod didn't tolerate"),
        (2, "1/2 CardInsufficientCore, 1/2 NumaNotFit"),
        (3, "node(s) didn't match pod anti-affinity rules"),
    )
    assert refused_groups("running Bind plugin: node lock contention") == ()
    assert refused_groups("0/1 nodes are available: 1 Insufficient cpu.") == ((1, "Insufficient cpu"),)
    odd = f"0/9 nodes are available: 1 Insufficient cpu, \u00b2 node(s) had x, {'9' * 5000} node(s) had y."
    assert refused_groups(odd) == ((1, f"Insufficient cpu, \u00b2 node(s) had x, {'9' * 5000} node(s) had y"),)


@pytest.mark.parametrize(
    ("groups", "unread"),
    [
        ("2 2/2 CardInsufficientMemory", ()),
        ("1 node(s) had untolerated taint {a: b}, 1 1/2 CardInsufficientMemory", ()),
        ("1 node(s) had taint {a: b}, that the pod didn't tolerate, 1 2/2 NumaNotFit", ()),
        ("1 node(s) didn't match Pod's node affinity/selector, 1 node(s) were unschedulable, 1 2/2 NumaNotFit", ()),
        ("1 Insufficient cpu, 1 Insufficient memory, 1 Too many pods, 1 Insufficient nvidia.com/gpu", ()),
        ("1 NodeInsufficientDevice, 1 node unregistered, 1 node usage unavailable, 1 2/2 NumaNotFit", ()),
        ("2 2/2 CardReasonOfALaterHami", ()),
        (
            "2 node(s) didn't match pod anti-affinity rules, 1 2/2 CardInsufficientMemory",
            ("2 node(s) didn't match pod anti-affinity rules",),
        ),
        (
            "1 node(s) had volume node affinity conflict, 1 node(s) didn't match pod topology spread constraints, "
            "1 node(s) didn't have free ports for the requested pod ports, 1 Insufficient ephemeral-storage, "
            "1 2/2 CardInsufficientMemory",
            (
                "1 node(s) had volume node affinity conflict",
                "1 node(s) didn't match pod topology spread constraints",
                "1 node(s) didn't have free ports for the requested pod ports",
                "1 Insufficient ephemeral-storage",
            ),
        ),
    ],
)
def test_unread_refusals_are_the_nodes_the_plan_cannot_tell_apart(groups: str, unread: tuple[str, ...]) -> None:
    """HAMi's reasons (any in its `n/m Reason` form), node selection, taints, cordons, CPU, memory, pods and HAMi's
    card count the plan reads as kube-scheduler does; pod (anti-)affinity, volumes, spreads, ports and any other
    resource it does not."""
    assert unread_refusals(f"0/9 nodes are available: {groups}.") == unread


def test_a_renamed_card_count_is_read_under_its_own_name() -> None:
    renamed = HamiConfig(resource_count_name="example.com/vgpu")
    message = "0/2 nodes are available: 1 Insufficient example.com/vgpu, 1 2/2 CardInsufficientMemory."
    assert unread_refusals(message, renamed) == ()
    assert unread_refusals(message) == ("1 Insufficient example.com/vgpu",)


def test_the_pending_pod_carries_the_refusals_the_plan_does_not_read_and_the_pods_it_counts() -> None:
    """Another pod's anti-affinity against it is never read; its own terms are once the pods they select are."""
    refused = (
        "0/3 nodes are available: 1 node(s) didn't satisfy existing pods anti-affinity rules, "
        "1 node(s) didn't match pod anti-affinity rules, 1 2/2 CardInsufficientMemory."
    )
    marks = node_marks([])
    [found] = rescue_candidates([pod("alone", refused=refused)], [event("alone", refused)], NOW, DefragPolicy())
    assert found.reason == "CardInsufficientMemory"
    alone = pending_pod(found.pod, marks, HAMI_DEFAULTS, [])
    assert alone.unread == ("1 node(s) didn't satisfy existing pods anti-affinity rules",)
    assert alone.pod.counts == ()
    assert pending_pod(found.pod, marks, HAMI_DEFAULTS, None).unread == (
        "1 node(s) didn't satisfy existing pods anti-affinity rules",
        "1 node(s) didn't match pod anti-affinity rules",
    )
    term = {"labelSelector": {"matchLabels": {"app": "spread"}}, "topologyKey": "kubernetes.io/hostname"}
    apart = pod("spread", refused=refused, spec={"affinity": {"podAntiAffinity": {REQUIRED: [term]}}})
    counted = pending_pod(apart, marks, HAMI_DEFAULTS, []).pod.counts
    assert [(c.namespaces, str(c.selector)) for c in counted] == [({"team-a"}, "app=spread")]


def pod(
    name: str, *, namespace: str = "team-a", minutes: float = 5, gpu: bool = True, refused: str = "", **extra: Any
) -> dict:
    """A Pending pod unschedulable since `minutes` before NOW, the scheduler's last refusal `refused` (FULL)."""
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "30000"} if gpu else {"cpu": "1"}
    since = (NOW - timedelta(minutes=minutes)).isoformat()
    scheduled = {"type": "PodScheduled", "status": "False", "lastTransitionTime": since, "reason": "Unschedulable"}
    obj: dict = {
        "metadata": {"namespace": namespace, "name": name, "uid": f"uid-{name}", "creationTimestamp": since},
        "spec": {"containers": [{"name": "c", "resources": {"limits": limits}}], "priority": 5},
        "status": {"phase": "Pending", "conditions": [{**scheduled, "message": refused or FULL}]},
    }
    for key, value in extra.items():
        obj[key] = {**obj.get(key, {}), **value}
    return obj


def event(name: str, message: str, minutes: float = 1, namespace: str = "team-a") -> dict:
    """A FailedScheduling event for the pod, `minutes` before NOW."""
    return {
        "metadata": {"namespace": namespace},
        "reason": "FailedScheduling",
        "involvedObject": {"kind": "Pod", "namespace": namespace, "name": name, "uid": f"uid-{name}"},
        "message": message,
        "lastTimestamp": (NOW - timedelta(minutes=minutes)).isoformat(),
    }


FULL = "0/2 nodes are available: 2 2/2 CardInsufficientMemory."
TAINTED = "0/2 nodes are available: 2 node(s) had untolerated taint {a: b}."


def test_rescue_candidates_are_pending_gpu_pods_refused_for_room_highest_priority_then_longest_waiting() -> None:
    pods = [
        pod("urgent", minutes=2, spec={"priority": 100}),
        pod("new", minutes=0.5),
        pod("ok"),
        pod("older", minutes=9),
        pod("cpu", gpu=False),
        pod("elsewhere", namespace="kube-system"),
        pod("tainted", refused=TAINTED),
        pod("pinned", metadata={"annotations": {"scheduling.hami.placement.com/placement": "move-x"}}),
        pod("running", status={"phase": "Running"}),
        pod("bound", spec={"nodeName": "gpu-0"}),
        pod("silent"),
    ]
    events = [
        event("urgent", FULL),
        event("new", FULL),
        event("ok", TAINTED, minutes=3),
        event("ok", FULL, minutes=2),
        event("older", FULL),
        event("cpu", FULL),
        event("elsewhere", FULL, namespace="kube-system"),
        event("tainted", FULL, minutes=3),
        event("tainted", TAINTED, minutes=2),
        event("pinned", FULL),
        event("running", FULL),
        event("bound", FULL),
    ]
    found = rescue_candidates(pods, events, NOW, DefragPolicy())
    assert [c.key for c in found] == ["team-a/urgent", "team-a/older", "team-a/ok"]
    assert found[1].reason == "CardInsufficientMemory"
    planned = pod_for_plan(found[1].pod, node_marks([]), HAMI_DEFAULTS)
    assert planned.key == "team-a/older" and planned.priority == 5 and planned.allocation is None


def test_rescue_off_or_namespace_out_finds_nothing() -> None:
    pods, events = [pod("ok")], [event("ok", FULL)]
    assert rescue_candidates(pods, events, NOW, DefragPolicy(rescue=Rescue(enabled=False))) == ()
    assert rescue_candidates(pods, events, NOW, DefragPolicy(namespaces=Namespaces(exclude=("team-*",)))) == ()
    assert len(rescue_candidates(pods, events, NOW, DefragPolicy())) == 1


def test_an_event_of_an_earlier_pod_of_the_same_name_does_not_count() -> None:
    stale = event("ok", FULL)
    stale["involvedObject"]["uid"] = "uid-of-the-pod-before"
    assert rescue_candidates([pod("ok")], [stale], NOW, DefragPolicy()) == ()


def test_an_event_of_another_namespace_naming_the_pod_counts_for_nothing() -> None:
    """A pod's Events live in its namespace, but with `eventTime` set the API server lets a tenant of `evil` write one
    naming team-a's pod: its later word, another UID, would veto the rescue of a pod that tenant may not touch."""
    forged = event("ok", FULL, minutes=0)
    forged["metadata"]["namespace"] = "evil"
    forged["involvedObject"]["uid"] = "uid-not-the-pod"
    assert [c.key for c in rescue_candidates([pod("ok")], [event("ok", FULL), forged], NOW, DefragPolicy())] == [
        "team-a/ok"
    ]


def test_an_event_alone_starts_no_rescue_the_scheduler_must_have_refused_the_pod_for_room() -> None:
    """Anyone who may create Events in the namespace can write a FailedScheduling one; only a writer of pods/status
    (the scheduler) sets the pod's PodScheduled condition, so its message decides."""
    forged = [event(name, FULL) for name in ("tainted", "silent", "errored", "bare")]
    errored = pod("errored")
    errored["status"]["conditions"][0]["reason"] = "SchedulerError"
    bare = pod("bare")
    del bare["status"]["conditions"][0]["message"]
    pods = [pod("tainted", refused=TAINTED), pod("silent", status={"conditions": []}), errored, bare]
    assert rescue_candidates(pods, forged, NOW, DefragPolicy()) == ()
    [found] = rescue_candidates([pod("ok", refused=FULL)], [event("ok", TAINTED)], NOW, DefragPolicy())
    assert (found.reason, found.message) == ("CardInsufficientMemory", FULL), "the condition's word, not the Event's"


def test_events_k8s_io_form_is_read() -> None:
    new_form = {
        "metadata": {"namespace": "team-a"},
        "reason": "FailedScheduling",
        "regarding": {"kind": "Pod", "namespace": "team-a", "name": "ok"},
        "note": FULL,
        "eventTime": (NOW - timedelta(minutes=1)).isoformat(),
    }
    assert [c.key for c in rescue_candidates([pod("ok")], [new_form], NOW, DefragPolicy())] == ["team-a/ok"]


def test_a_candidate_carries_the_pods_uid_and_the_schedulers_reason_and_wait() -> None:
    ok = pod("ok")
    assert rescue_candidates([ok], [event("ok", FULL)], NOW, DefragPolicy()) == (
        Candidate("team-a", "ok", "uid-ok", "CardInsufficientMemory", FULL, NOW - timedelta(minutes=5), ok),
    )


def test_each_pod_left_out_leaves_the_pods_after_it_to_be_looked_at() -> None:
    """A terminating pod and one our placement already pinned are no candidates either."""
    pods = [
        pod("running", status={"phase": "Running"}),
        pod("deleted", metadata={"deletionTimestamp": NOW.isoformat()}),
        pod("pinned", metadata={"annotations": {"scheduling.hami.placement.com/placement": "move-x"}}),
        pod("cpu", gpu=False),
        pod("silent"),
        pod("tainted", refused=TAINTED),
        pod("ok"),
    ]
    events = [event(name, FULL) for name in ("running", "deleted", "pinned", "cpu", "tainted", "ok")]
    assert [c.key for c in rescue_candidates(pods, events, NOW, DefragPolicy())] == ["team-a/ok"]


def test_a_pod_without_a_priority_ranks_as_priority_zero() -> None:
    unset, zero = pod("unset", minutes=2), pod("zero", minutes=9, spec={"priority": 0})
    del unset["spec"]["priority"]
    found = rescue_candidates([unset, zero], [event("unset", FULL), event("zero", FULL)], NOW, DefragPolicy())
    assert [c.key for c in found] == ["team-a/zero", "team-a/unset"], "the longer wait first"


CUSTOM = HamiConfig(resource_count_name="example.com/gpu", resource_memory_name="example.com/gpumem")
"""A HAMi configured with its own resource names."""


def test_a_rescue_reads_cards_by_hamis_resource_names_and_the_pods_nodes_by_their_labels() -> None:
    limits = {"limits": {"example.com/gpu": "1"}}
    asking = pod("ok", spec={"containers": [{"name": "c", "resources": limits}], "nodeSelector": {"zone": "a"}})
    assert rescue_candidates([asking], [event("ok", FULL)], NOW, DefragPolicy()) == (), "no card by the default names"
    [found] = rescue_candidates([asking], [event("ok", FULL)], NOW, DefragPolicy(), CUSTOM)
    nodes = [{"metadata": {"name": f"gpu-{zone}", "labels": {"zone": zone}}} for zone in ("a", "b")]
    planned = pod_for_plan(found.pod, node_marks(nodes), CUSTOM)
    assert (planned.key, planned.requests[0] is not None, planned.nodes) == ("team-a/ok", True, frozenset({"gpu-a"}))


def test_a_pod_whose_card_request_cannot_be_read_is_no_candidate() -> None:
    odd = pod("odd", spec={"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "abc"}}}]})
    assert rescue_candidates([odd], [event("odd", FULL)], NOW, DefragPolicy()) == ()


def ago(minutes: float) -> str:
    """The time `minutes` before NOW, as the API writes it."""
    return (NOW - timedelta(minutes=minutes)).isoformat()


@pytest.mark.parametrize(
    ("conditions", "since"),
    [
        ([{"type": "PodScheduled", "status": "False", "lastTransitionTime": ago(5)}], ago(5)),
        (
            [
                "not a condition",
                {"type": "Ready", "status": "False", "lastTransitionTime": ago(2)},
                {"type": "PodScheduled", "status": "False", "lastTransitionTime": ago(5)},
            ],
            ago(5),
        ),
        ([{"type": "PodScheduled", "status": "True", "lastTransitionTime": ago(5)}], ago(60)),
        ([{"type": "PodScheduled", "status": "False", "lastTransitionTime": "soon"}], ago(60)),
        ([], ago(60)),
    ],
)
def test_a_pod_waits_since_it_became_unschedulable_else_since_it_was_created(conditions: list[Any], since: str) -> None:
    waiting = {"metadata": {"creationTimestamp": ago(60)}, "status": {"conditions": conditions}}
    assert pending_since(waiting) == datetime.fromisoformat(since)


def test_a_pod_with_neither_time_has_no_wait() -> None:
    assert pending_since({"status": {"conditions": []}}) is None


def test_the_schedulers_word_is_empty_unless_it_refused_the_pod_as_unschedulable() -> None:
    errored = pod("errored")
    errored["status"]["conditions"][0]["reason"] = "SchedulerError"
    bound = pod("bound")
    bound["status"]["conditions"][0]["status"] = "True"  # scheduled since; the reason and message are stale
    others = (errored, pod("new", status={"conditions": []}), bound, pod("odd", status={"conditions": 5}))
    assert [unschedulable_message(p) for p in (pod("ok"), *others)] == [FULL, "", "", "", ""]


def new_form(name: str = "ok", **fields: Any) -> dict:
    """An events.k8s.io/v1 FailedScheduling event for the pod, timed by `fields` alone."""
    regarding = {"kind": "Pod", "namespace": "team-a", "name": name, "uid": f"uid-{name}"}
    return {
        "metadata": {"namespace": "team-a"},
        "reason": "FailedScheduling",
        "regarding": regarding,
        "note": FULL,
        **fields,
    }


@pytest.mark.parametrize(
    "timed",
    [
        {"deprecatedLastTimestamp": ago(1)},
        {"series": {"lastObservedTime": ago(1)}},
        {"eventTime": ago(1)},
        {"metadata": {"namespace": "team-a", "creationTimestamp": ago(1)}},
    ],
)
def test_an_event_counts_by_whichever_of_its_times_it_carries(timed: dict[str, Any]) -> None:
    assert [c.key for c in rescue_candidates([pod("ok")], [new_form(**timed)], NOW, DefragPolicy())] == ["team-a/ok"]


def test_events_of_another_reason_another_kind_of_object_or_no_time_are_passed_over_one_by_one() -> None:
    scheduled = {**event("ok", FULL), "reason": "Scheduled"}
    node = {**event("ok", FULL), "involvedObject": {"kind": "Node", "namespace": "team-a", "name": "ok"}}
    untimed = {**event("ok", FULL), "lastTimestamp": None}
    for skipped in (scheduled, node, untimed):
        assert rescue_candidates([pod("ok")], [skipped], NOW, DefragPolicy()) == ()
        found = rescue_candidates([pod("ok")], [skipped, event("ok", FULL)], NOW, DefragPolicy())
        assert [c.key for c in found] == ["team-a/ok"]


def test_an_event_naming_no_kind_or_no_namespace_of_its_object_is_about_a_pod_of_its_own_namespace() -> None:
    kindless, placeless = event("ok", FULL), event("ok", FULL)
    del kindless["involvedObject"]["kind"], placeless["involvedObject"]["namespace"]
    for known in (kindless, placeless):
        assert [c.key for c in rescue_candidates([pod("ok")], [known], NOW, DefragPolicy())] == ["team-a/ok"]


def test_of_two_events_at_one_time_the_later_listed_counts() -> None:
    """The watch lists a pod's events as they came: the later one is the pod now of that name."""
    stale = event("ok", FULL)
    stale["involvedObject"]["uid"] = "uid-of-the-pod-before"
    assert [c.key for c in rescue_candidates([pod("ok")], [stale, event("ok", FULL)], NOW, DefragPolicy())] == [
        "team-a/ok"
    ]


def gpu_card(uuid: str, index: int, card_type: str = "NVIDIA-A100") -> Card:
    """A 40 GiB card."""
    return Card(uuid=uuid, index=index, count=10, devmem=40 * GIB, devcore=100, type=card_type, health=True)


def holding(name: str, node: str, uuid: str, mem: int, cores: int = 0) -> PlanPod:
    """A placed pod holding `mem` MiB (and `cores` percent) of one card."""
    devices = ((ContainerDevice(uuid, "NVIDIA", mem, cores),),)
    return PlanPod(
        namespace="ns",
        name=name,
        uid=name,
        requests=(card_request(1, memreq=mem),),
        allocation=PodAllocation("ns", name, name, node, "Running", devices),
        owner_kind="ReplicaSet",
    )


def room_snapshot() -> Snapshot:
    """Node a: two A100s each a quarter used; node b: an empty T4 and an empty A100."""
    return Snapshot(
        nodes=(
            PlanNode("a", (gpu_card("a0", 0), gpu_card("a1", 1))),
            PlanNode("b", (gpu_card("b0", 0, "NVIDIA-T4"), gpu_card("b1", 1))),
        ),
        pods=(holding("p", "a", "a0", 10 * GIB), holding("q", "a", "a1", 10 * GIB)),
    )


def test_room_counts_whole_free_cards_by_type_and_stranded_memory() -> None:
    room = room_of(room_snapshot())
    assert room.whole_free_of("a100") == 1 and room.whole_free_of("T4") == 1 and room.whole_free_of("") == 2
    assert room.free_mib == 140 * GIB and room.stranded_mib == 60 * GIB
    assert room.stranded_share == pytest.approx(60 / 140)


def test_an_idle_card_smaller_than_the_largest_is_whole_not_stranded() -> None:
    small = Card(uuid="t0", index=0, count=10, devmem=16 * GIB, devcore=100, type="NVIDIA-T4", health=True)
    snapshot = Snapshot(
        nodes=(PlanNode("a", (gpu_card("a0", 0),)), PlanNode("t", (small,))),
        pods=(holding("p", "a", "a0", 10 * GIB),),
    )
    room = room_of(snapshot)
    assert room.free_mib == 46 * GIB and room.stranded_mib == 30 * GIB and room.whole_free_of("T4") == 1


def test_room_leaves_out_closed_cards_and_cards_with_no_slot_or_core_left() -> None:
    """Counted: two idle A100s, one whose memory is all taken (no free MiB, not below zero), an idle card with no
    core limit; left out: a cordoned, an unhealthy and an unschedulable node's card, a card's last slot taken and
    a card's cores all taken."""
    one_slot = Card(uuid="s0", index=5, count=1, devmem=40 * GIB, devcore=100, type="NVIDIA-A100", health=True)
    coreless = Card(uuid="l0", index=4, count=10, devmem=24 * GIB, devcore=0, type="NVIDIA-L4", health=True)
    sick = Card(uuid="x0", index=7, count=10, devmem=40 * GIB, devcore=100, type="NVIDIA-A100", health=False)
    cards = (gpu_card("a0", 0), gpu_card("a1", 1), gpu_card("a2", 2), gpu_card("a3", 3), coreless, one_slot)
    snapshot = Snapshot(
        nodes=(
            PlanNode("a", (*cards, gpu_card("c0", 6), sick), cordoned=frozenset({"c0"})),
            PlanNode("down", (gpu_card("d0", 0),), schedulable=False),
        ),
        pods=(holding("m", "a", "a2", 40 * GIB), holding("c", "a", "a3", 10 * GIB, 100), holding("s", "a", "s0", GIB)),
    )
    assert room_of(snapshot) == Room(
        whole_free={"NVIDIA-A100": 2, "NVIDIA-L4": 1}, free_mib=104 * GIB, stranded_mib=0, whole_card_mib=40 * GIB
    )


def test_no_open_card_is_no_room() -> None:
    assert room_of(Snapshot(nodes=(), pods=())) == Room(whole_free={}, free_mib=0, stranded_mib=0, whole_card_mib=0)


def keep(count: int = 0, card_type: str = "", share: float | None = None) -> DefragPolicy:
    """A policy keeping room."""
    return DefragPolicy(
        keep_room=KeepRoom(True, whole_free_cards=WholeFreeCards(count, card_type), max_stranded_share=share)
    )


def test_room_goal_asks_for_the_missing_whole_cards_then_for_less_stranded_memory() -> None:
    room = room_of(room_snapshot())
    assert room_goal(room, keep(3, "A100")) == FreeCardsGoal(count=2, card_type="A100")
    assert room_goal(room, keep(2, "A100")) == FreeCardsGoal(count=1, card_type="A100")
    assert room_goal(room, keep(1, "A100")) is None
    assert room_goal(room, keep(share=0.5)) is None
    assert room_goal(room, keep(share=0.2)) == FreeCardsGoal(count=1)
    assert room_goal(room, DefragPolicy()) is None


def test_stranded_memory_at_exactly_its_share_asks_for_nothing() -> None:
    assert room_goal(Room(whole_free={}, free_mib=100, stranded_mib=50, whole_card_mib=40), keep(share=0.5)) is None


OTHER_PARTS = (
    "{n} node(s) had untolerated taint {{gpu: x}}",
    "{n} Insufficient cpu",
    "{n} Insufficient memory",
    "{n} node(s) didn't match Pod's node affinity/selector",
    "{n} {n}/4 CardTypeMismatch",
    "{n} {n}/2 CardUuidMismatch, {n}/2 CardNotHealth",
    "{n} NodeInsufficientDevice",
)
ROOM_PARTS = ("{n} {n}/2 CardInsufficientMemory", "{n} 1/{n} NumaNotFit", "{n} {n}/8 CardInsufficientCore")


@given(
    others=st.lists(st.sampled_from(OTHER_PARTS), max_size=4),
    rooms=st.lists(st.sampled_from(ROOM_PARTS), max_size=2),
    count=st.integers(1, 9),
    locked=st.booleans(),
)
def test_a_message_starts_a_rescue_exactly_when_a_curable_reason_is_in_it(
    others: list[str], rooms: list[str], count: int, locked: bool
) -> None:
    parts = [part.format(n=count) for part in others + rooms]
    message = f"0/{count} nodes are available: {', '.join(parts)}." + (" node gpu-0 is locked" if locked else "")
    reason = rescue_reason(message)
    assert (reason is not None) == (bool(rooms) and not locked), message


def test_a_refusal_spanning_lines_leaves_the_groups_after_it_counted() -> None:
    """A filter plugin's reason may carry a line break: the groups after it are still read."""
    message = (
        "0/3 nodes are available: 1 node(s) refused by the quota plugin:\nteam over its share, "
        "2 2/2 CardInsufficientMemory."
    )
    assert refused_groups(message) == (
        (1, "node(s) refused by the quota plugin:\nteam over its share"),
        (2, "2/2 CardInsufficientMemory"),
    )


def test_the_pending_pods_terms_pick_namespaces_by_their_labels_once_read() -> None:
    """A term's namespaceSelector picks the namespaces whose labels match; unread labels leave it any namespace."""
    term = {
        "labelSelector": {"matchLabels": {"app": "db"}},
        "topologyKey": "kubernetes.io/hostname",
        "namespaceSelector": {"matchLabels": {"team": "ml"}},
    }
    apart = pod("apart", spec={"affinity": {"podAntiAffinity": {REQUIRED: [term]}}})
    labels = {"team-a": {}, "team-b": {"team": "ml"}, "team-c": {"team": "web"}}
    read = pending_pod(apart, node_marks([]), HAMI_DEFAULTS, [], namespace_labels=labels).pod.counts
    assert [(c.namespaces, str(c.selector)) for c in read] == [({"team-b"}, "app=db")]
    unread = pending_pod(apart, node_marks([]), HAMI_DEFAULTS, []).pod.counts
    assert [(c.namespaces, str(c.selector)) for c in unread] == [(None, "app=db")]


def test_the_pending_pods_cards_are_read_by_hamis_configured_resource_names() -> None:
    limits = {"limits": {"example.com/gpu": "1", "example.com/gpumem": "2000"}}
    asking = pod("ok", spec={"containers": [{"name": "c", "resources": limits}]})
    assert pending_pod(asking, node_marks([]), CUSTOM, None).pod.requests == (card_request(1, memreq=2000),)
    assert pending_pod(asking, node_marks([]), HAMI_DEFAULTS, None).pod.requests == (None,)


def running(name: str, node: str, **labels: str) -> dict:
    """A pod of team-a bound to `node` and running, with these labels."""
    metadata = {"namespace": "team-a", "name": name, "labels": labels}
    return {"metadata": metadata, "spec": {"nodeName": node}, "status": {"phase": "Running"}}


HOSTS = node_marks([{"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}} for name in "ab"])
"""Nodes a and b, each its own hostname domain."""


def test_the_pending_pods_spread_counts_only_pods_sharing_its_match_label_keys_values() -> None:
    """matchLabelKeys narrows the spread to pods with the pending pod's own value: a's two pods of the old revision
    do not count against the new one, two of its own revision keep it off a."""
    spread = {
        "maxSkew": 1,
        "topologyKey": "kubernetes.io/hostname",
        "labelSelector": {"matchLabels": {"app": "web"}},
        "matchLabelKeys": ["rev"],
    }
    new = pod("new", metadata={"labels": {"app": "web", "rev": "2"}}, spec={"topologySpreadConstraints": [spread]})
    old = [running("old-1", "a", app="web", rev="1"), running("old-2", "a", app="web", rev="1")]
    assert pending_pod(new, HOSTS, HAMI_DEFAULTS, old).pod.kept_off == {}
    same = [running("new-1", "a", app="web", rev="2"), running("new-2", "a", app="web", rev="2")]
    assert pending_pod(new, HOSTS, HAMI_DEFAULTS, same).pod.kept_off == {
        "a": (
            "PodTopologySpread",
            "the pod's topology spread (app=web,rev in (2), maxSkew 1): 2 such pod(s) run in its "
            "kubernetes.io/hostname=a, 0 where fewest run",
        )
    }


EBS = "attachable-volumes-csi-ebs.csi.aws.com"
"""The scalar a node's EBS attach limit is counted by."""
COUNTING_EBS = Snapshot(nodes=(), pods=(), scalars=frozenset({EBS}))
"""A snapshot whose nodes count EBS attach limits."""


def test_the_pending_pods_ephemeral_volume_is_read_by_its_claim_named_after_the_pod() -> None:
    """ok's volume scratch is claim ok-scratch, bound to an EBS volume only node a may use: the pod is kept off b,
    counts one EBS attachment, and kube-scheduler's volume refusal is read."""
    on_a = {"key": "kubernetes.io/hostname", "operator": "In", "values": ["a"]}
    volume = {
        "metadata": {"name": "pv-e"},
        "spec": {
            "csi": {"driver": "ebs.csi.aws.com", "volumeHandle": "vol-e"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [on_a]}]}},
        },
    }
    claimed = volumes_of(
        [{"metadata": {"namespace": "team-a", "name": "ok-scratch"}, "spec": {"volumeName": "pv-e"}}], [volume]
    )
    scratch = {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {"storageClassName": "nope"}}}}
    refused = "0/2 nodes are available: 1 node(s) had volume node affinity conflict, 1 2/2 CardInsufficientMemory."
    ok = pod("ok", refused=refused, spec={"volumes": [scratch]})
    found = pending_pod(ok, HOSTS, HAMI_DEFAULTS, None, COUNTING_EBS, volumes=claimed)
    assert found.unread == ()
    assert found.pod.kept_off == {"b": ("VolumeBinding", "its volume pv-e's node affinity excludes it")}
    assert found.pod.needs == Resources(pods=1, scalars=((EBS, 1),))


MAX_VOLUMES = "0/2 nodes are available: 1 node(s) exceed max volume count, 1 2/2 CardInsufficientMemory."
CLAIMING = {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]}


def test_a_max_volume_count_refusal_is_unread_while_no_node_counts_attach_limits() -> None:
    claiming = pod("ok", refused=MAX_VOLUMES, spec=CLAIMING)
    assert pending_pod(claiming, node_marks([]), HAMI_DEFAULTS, None).unread == ("1 node(s) exceed max volume count",)


def test_a_pending_pod_whose_claims_were_not_read_counts_no_attachment_and_leaves_the_volume_count_unread() -> None:
    """Without the claims and volumes nothing says which driver attaches its claim, so kube-scheduler's volume count
    refusal is not the plan's to answer: the node it picks could be one the pod's attachments would overfill."""
    claiming = pod("ok", refused=MAX_VOLUMES, spec=CLAIMING)
    found = pending_pod(claiming, node_marks([]), HAMI_DEFAULTS, None, COUNTING_EBS, volumes=None)
    assert found.pod.needs == Resources(pods=1)
    assert found.unread == ("1 node(s) exceed max volume count",)
    read = pending_pod(claiming, node_marks([]), HAMI_DEFAULTS, None, COUNTING_EBS, volumes=volumes_of([], []))
    assert read.unread == (), "with the claims read (none bound to an EBS volume), the count is the plan's"
