"""The defragmentation controller's work-queue keys: which key a change wakes, and when a key is looked at again.

The controller keeps client-go's kind of work queue (`webhook/workqueue.py`): a Pending pod (`PodKey`) is added
when its FailedScheduling Event arrives or the pod changes while it waits unscheduled; `KEEP_ROOM` on the policy's
`keepRoom.interval`; `POLICY` when the policy's ConfigMap changes; `RESUME` when the replica starts leading. Each
key's look ends in "done" (only a change wakes it again) or "again after T", decided here on plain data.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum
from typing import Any

from kubectl_hami_place.core.defrag.budget import HOUR, MoveRecord
from kubectl_hami_place.core.defrag.policy import Budgets, DefragPolicy
from kubectl_hami_place.core.defrag.seal import move_sealed
from kubectl_hami_place.core.defrag.triggers import failed_pod, pending_since, pod_priority, rescue_candidates
from kubectl_hami_place.core.errors import CardRefError
from kubectl_hami_place.core.fields import as_mapping
from kubectl_hami_place.core.hami_config import HAMI_DEFAULTS, HamiConfig
from kubectl_hami_place.core.lifecycle import ROOM_SETTLE_SECONDS
from kubectl_hami_place.core.names import (
    DEFRAG_POD_UID_ANNOTATION,
    DEFRAG_RUN_LABEL,
    ENDED_PHASES,
    PLACEMENT_ANNOTATION,
)
from kubectl_hami_place.core.placement import time_or_none
from kubectl_hami_place.core.planner.model import Move, PlanNode
from kubectl_hami_place.core.refs import CardRef, parse_card_ref, uuids_named
from kubectl_hami_place.core.reservation import RoomKey

POLICY = "policy"
KEEP_ROOM = "keep-room"
RESUME = "resume"
SEND_BACK_AGAIN_SECONDS = 10.0
SEND_BACK_AGAIN_MAX_SECONDS = 80.0
# After a run failed, its pod is not planned for again for this long: a move that cannot be made (no
# acknowledgement, a refusal) is not retried at every look.
RETRY = timedelta(seconds=60)
# A rescue whose pod neither ran nor was refused again within this long after its moves is no longer followed.
FOLLOW = timedelta(seconds=900)
# The longest a pod that keeps having no plan (or a dry run that keeps naming moves) waits between two plans: as long
# as kube-scheduler's own sweep of the pods it could not place (podMaxInUnschedulablePodsDuration).
LOOK_AGAIN_MAX = timedelta(seconds=300)
# Looks brought forward by room freed (`look_sooner`) take at most this share of a core: each reads a snapshot and
# plans (seconds of CPU at a thousand nodes), and under a churn of pods leaving they would follow one another.
SOONER_CPU_SHARE = 0.1
# A refusal this soon after a rescue's moves settled does not mean its room was taken: the scheduler may retry the
# pod once more on a view that still holds the evicted pod (seen on a loaded sandbox) before it places it.
ROOM_SETTLE = timedelta(seconds=30)


@dataclass(frozen=True)
class PodKey:
    """A pod that waits unscheduled, by namespace and name (its UID is read from the pod when it is looked at)."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


Key = PodKey | str


def pod_key(pod: Mapping[str, Any]) -> PodKey | None:
    """The key of a pod waiting unscheduled (Pending, no node, not being deleted): only such a pod may be rescued."""
    metadata, spec, status = as_mapping(pod.get("metadata")), as_mapping(pod.get("spec")), as_mapping(pod.get("status"))
    if status.get("phase") != "Pending" or spec.get("nodeName") or metadata.get("deletionTimestamp"):
        return None
    namespace, name = metadata.get("namespace"), metadata.get("name")
    return PodKey(namespace, name) if isinstance(namespace, str) and isinstance(name, str) and name else None


def event_key(event: Mapping[str, Any]) -> PodKey | None:
    """The pod a FailedScheduling Event is about (`triggers.failed_pod`: none for one in another namespace)."""
    about = failed_pod(event)
    return None if about is None else PodKey(*about[:2])


def batch_order(key: Key, pod: Mapping[str, Any] | None = None) -> tuple[int, int, float, str]:
    """Where a key goes in a batch of ready keys: the policy, a new leader's resume, the Pending pods as
    `rescue_candidates` orders them (highest priority first, then the longest waiting; `pod` is the key's pod),
    keep-room last, so that a rescue runs before keep-room takes the room."""
    if isinstance(key, PodKey):
        since = pending_since(pod) if pod is not None else None
        rank = pod_priority(pod) if pod is not None else 0
        return (2, -rank, since.timestamp() if since is not None else float("inf"), str(key))
    return ({POLICY: 0, RESUME: 1}.get(key, 3), 0, 0.0, key)


def pending_wait(
    pod: Mapping[str, Any],
    events: Iterable[Mapping[str, Any]],
    now: datetime,
    policy: DefragPolicy,
    config: HamiConfig = HAMI_DEFAULTS,
) -> timedelta | None:
    """How long until the pod has waited `rescue.pendingFor`, when that alone keeps it from being a rescue
    candidate now (None: it is one already, or waiting would not make it one)."""
    since = pending_since(pod)
    if since is None:
        return None
    due = since + policy.rescue.pending_for
    if due <= now or not rescue_candidates([pod], events, due, policy, config):
        return None
    return due - now


def budget_eases(budgets: Budgets, history: Iterable[MoveRecord], now: datetime) -> datetime | None:
    """When the budgets next allow more than now: a spent move of the last hour leaves it, or its cooldown ends."""
    ends = [
        end
        for record in history
        if record.spent
        for end in (record.time + HOUR, record.time + budgets.cooldown)
        if end > now
    ]
    return min(ends, default=None)


@dataclass(frozen=True)
class OpenMove:
    """A pod waiting unscheduled that a run's move pinned: the move's placement's namespace and name, the evicted
    pod's UID ("" when the placement names none), and how long until the move is given up (zero or less: now)."""

    namespace: str
    placement: str
    evicted_uid: str
    wait: timedelta
    node: str = ""
    cards: tuple[CardRef, ...] = ()
    """The placement's `spec.nodeName` and its `spec.gpuDevices` that parse: the cards HAMi refused the pod on."""

    def target(self, nodes: Iterable[PlanNode]) -> set[str]:
        """The UUIDs of the cards the placement names on its node: the pod's own `use-gpuuuid` annotation is not
        read, since anyone who may edit the pod can change it."""
        node = next((node for node in nodes if node.name == self.node), None)
        return uuids_named(self.cards, node.cards) if node is not None else set()


def open_move(
    pod: Mapping[str, Any],
    placement: Mapping[str, Any] | None,
    now: datetime,
    give_up_after: timedelta,
    key: RoomKey | None = None,
) -> OpenMove | None:
    """The run move whose replacement `pod` is, while it waits unscheduled; `placement` is the one named on the pod.

    Its leader follows the move until it settles or gives it up; a leader that died meanwhile leaves it to this: the
    move is given up `give_up_after` its placement was created. Until then the pod is no rescue's candidate (its
    cards are the move's). None for any other pod, or when `placement` is not a run's, sealed with `key` (a person's
    pin stays).
    """
    if pod_key(pod) is None or placement is None:
        return None
    metadata, held = as_mapping(pod.get("metadata")), as_mapping(placement.get("metadata"))
    name = held.get("name")
    if not name or as_mapping(metadata.get("annotations")).get(PLACEMENT_ANNOTATION) != name:
        return None
    if held.get("namespace") != metadata.get("namespace") or not as_mapping(held.get("labels")).get(DEFRAG_RUN_LABEL):
        return None
    if not move_sealed(placement, key):
        return None
    created = time_or_none(held.get("creationTimestamp"))
    if created is None:
        return None
    spec = as_mapping(placement.get("spec"))
    devices = spec.get("gpuDevices")
    return OpenMove(
        namespace=str(held["namespace"]),
        placement=str(name),
        evicted_uid=str(as_mapping(held.get("annotations")).get(DEFRAG_POD_UID_ANNOTATION, "")),
        wait=created + give_up_after - now,
        node=str(spec.get("nodeName") or ""),
        cards=tuple(_card_refs(devices if isinstance(devices, list) else [])),
    )


def _card_refs(texts: Iterable[object]) -> Iterator[CardRef]:
    """The references among `texts` that parse (a placement's `spec.gpuDevices`, as stored)."""
    for text in texts:
        try:
            yield parse_card_ref(text)
        except CardRefError:
            continue


class Look(Enum):
    """What a look at a Pending pod's key ended in."""

    not_yet = "not_yet"  # not a candidate (or not yet): a change of the pod or its Events wakes it
    moved = "moved"  # a rescue's moves are done: followed until the pod runs or is refused again
    failed = "failed"  # the run stopped: not planned for again before RETRY
    budget = "budget"  # a plan exists but the budgets do not allow it now
    no_plan = "no_plan"  # no plan (or one said, dry-run): the cluster may change in ways no Event of the pod tells
    dry_run = "dry_run"


def look_again(
    look: Look, now: datetime, interval: timedelta, eases: datetime | None = None, repeats: int = 0
) -> timedelta | None:
    """When a Pending pod's key is looked at again after `look` (None: only when the pod or its Events change): a
    rescue that moved at the end of its follow-up, a failed run after RETRY, a plan over budget once the budget
    eases (`budget_eases`); no plan, a dry run, and a plan over a budget that no time eases (the moves of one run)
    after `interval`, doubled for each look before it that ended so (`repeats`), up to LOOK_AGAIN_MAX: each look
    plans (up to a second of CPU at a thousand nodes), and a dry run or a backlog of pods without a plan would have
    the controller plan for every one of them at every interval for as long as they wait."""
    if look is Look.moved:
        return FOLLOW
    if look is Look.failed:
        return RETRY
    if look is Look.budget and eases is not None and eases > now:
        return eases - now
    if look in (Look.budget, Look.no_plan, Look.dry_run):
        return min(interval * 2 ** min(repeats, 16), max(interval, LOOK_AGAIN_MAX))
    return None


def frees_room(kind: str, pod: Mapping[str, Any]) -> bool:
    """A pod's change that may make a plan where a look found none: a pod bound to a node deleted, or ended (neither
    HAMi nor kube-scheduler counts it any more); kube-scheduler itself moves the pods it could not place back to its
    active queue on an assigned pod's deletion."""
    if not as_mapping(pod.get("spec")).get("nodeName"):
        return False
    return kind == "DELETED" or as_mapping(pod.get("status")).get("phase") in ENDED_PHASES


def sooner_gap(interval: timedelta, cost: float) -> float:
    """Seconds before room freed brings another look forward, after bringing one forward while the last plan took
    `cost` seconds of CPU: an interval, or longer so that such looks take at most SOONER_CPU_SHARE of a core."""
    return max(interval.total_seconds(), cost / SOONER_CPU_SHARE)


@dataclass(frozen=True)
class BackedOff:
    """A Pending pod whose looks in a row ended without moves: its key and priority, how many such looks, and when
    the last was (on the monotonic clock)."""

    key: PodKey
    priority: int
    repeats: int
    looked: float


def look_sooner(
    backed_off: Mapping[str, BackedOff], due: Mapping[str, float], now: float, interval: timedelta
) -> tuple[PodKey, str, float] | None:
    """The pod backed off (by UID, next look `due`) to look at sooner once room was freed, and when: of those due
    later than an interval after their last look, the highest priority, then the one whose last look is oldest (so
    pods of one priority take turns), one interval after its last look and never before now. One pod: the room one
    pod leaving frees rarely rescues more, and under a churn of pods leaving a backlog costs one plan more each time,
    not one per pod waiting (a plan is up to a second of CPU at a thousand nodes)."""
    step = interval.total_seconds()
    later = [
        (-off.priority, off.looked, uid)
        for uid, off in backed_off.items()
        if due.get(uid, 0.0) > max(now, off.looked + step)
    ]
    if not later:
        return None
    _, looked, uid = min(later)
    return backed_off[uid].key, uid, max(now, looked + step)


class Followed(Enum):
    """Where a rescue whose moves are done stands."""

    rescued = "rescued"  # the pod was scheduled
    room_lost = "room_lost"  # refused again after the moves settled: another pod took the room
    given_up = "given_up"  # gone, or neither within FOLLOW
    waiting = "waiting"


def _stored_as(pod: Mapping[str, Any] | None, uid: str) -> Mapping[str, Any] | None:
    """The metadata of `pod` (as stored now) when it is the pod with this UID; None when it is gone or replaced."""
    metadata = as_mapping(pod.get("metadata")) if pod is not None else {}
    return metadata if pod is not None and metadata.get("uid") == uid else None


def follow(
    pod: Mapping[str, Any] | None, uid: str, events: Iterable[Mapping[str, Any]], done_at: datetime, now: datetime
) -> Followed:
    """Where the rescue of the pod with this UID stands, its moves done at `done_at`; `pod` as stored now."""
    if pod is None or _stored_as(pod, uid) is None:
        return Followed.given_up
    if as_mapping(pod.get("spec")).get("nodeName"):
        return Followed.rescued
    if refused_since(events, uid, done_at + ROOM_SETTLE):
        return Followed.room_lost
    if now - done_at > FOLLOW:
        return Followed.given_up
    return Followed.waiting


def rescue_unneeded(pod: Mapping[str, Any] | None, uid: str) -> str:
    """Why a run for the Pending pod with this UID has no reason left to make its next move ("" while the pod still
    waits; `pod` as stored now): every move evicts a pod, and one made for a pod deleted or scheduled meanwhile is a
    disruption for nothing."""
    metadata = _stored_as(pod, uid)
    if pod is None or metadata is None:
        return "the pod it rescues is gone"
    if metadata.get("deletionTimestamp"):
        return "the pod it rescues is being deleted"
    node = as_mapping(pod.get("spec")).get("nodeName")
    if node:
        return f"the pod it rescues was scheduled on {node} meanwhile"
    return ""


def terminating_until(pod: Mapping[str, Any] | None, uid: str) -> datetime | None:
    """When the evicted pod with this UID is due to be gone (its `deletionTimestamp`: the eviction's time plus its
    grace period; `pod` as stored now), None when it is gone or not terminating. HAMi counts its cards until then."""
    metadata = _stored_as(pod, uid)
    return None if metadata is None else time_or_none(metadata.get("deletionTimestamp"))


def termination_left(pod: Mapping[str, Any] | None, uid: str, now: datetime) -> float:
    """Seconds until the evicted pod with this UID is due to be gone, 0 when it is gone, not terminating or late."""
    until = terminating_until(pod, uid)
    return max((until - now).total_seconds(), 0.0) if until is not None else 0.0


# The longest a move waits for its evicted pod's grace period before its own timeout counts: a run holds the
# controller while it waits, so a pod given an hour to stop does not stop every other rescue for that hour.
TERMINATION_WAIT_MAX_SECONDS = 600.0


def settle_deadline(evicted_at: float, now: float, left: float, timeout: float) -> float:
    """When a move evicted at `evicted_at` is given up (one monotonic clock), as its evicted pod looks now: `timeout`
    after the pod is due to be gone (`left` seconds from `now`; 0 when it is gone or not terminating), counted from
    no later than TERMINATION_WAIT_MAX_SECONDS after the eviction; `timeout` after the eviction when it is not
    terminating. The caller keeps the latest of these."""
    if left <= 0:
        return evicted_at + timeout
    return min(now + left, evicted_at + TERMINATION_WAIT_MAX_SECONDS) + timeout


@dataclass
class SettleClock:
    """When a move evicted at `evicted_at` is given up (one monotonic clock): `timeout` after its evicted pod is due to
    be gone, the latest `settle_deadline` seen while it went. `apply` and the controller both look at the pod at each
    poll, so a pod that went before the timeout gives the move the same time in both."""

    evicted_at: float
    timeout: float
    deadline: float = 0.0

    def __post_init__(self) -> None:
        self.deadline = self.evicted_at + self.timeout

    def saw(self, now: float, left: float) -> None:
        """The evicted pod as seen at `now`: due to be gone `left` seconds later (0: gone, not terminating or late)."""
        self.deadline = max(self.deadline, settle_deadline(self.evicted_at, now, left, self.timeout))


def moved_pods_gone(moves: Iterable[Move], stored: Mapping[str, str]) -> bool:
    """Whether every pod the moves evicted is gone (`stored`: the UID of the pod stored under each `ns/name` now, ""
    when none): HAMi counts a pod's cards until then, so a rescued pod sent back to the scheduler earlier is refused."""
    return all(stored.get(move.pod, "") != move.uid for move in moves)


def room_settled(
    moves: Iterable[Move], stored: Mapping[str, str], since: float | None, now: float
) -> tuple[float | None, bool]:
    """When every moved pod was first seen gone (None while one is still there; times on one monotonic clock), and
    whether that was ROOM_SETTLE_SECONDS ago: HAMi's scheduler learns of a deletion from a watch of its own, so a pod
    sent back to kube-scheduler sooner may be refused again."""
    if not moved_pods_gone(moves, stored):
        return None, False
    since = now if since is None else since
    return since, now - since >= ROOM_SETTLE_SECONDS


def send_back_again_after(sends: int) -> float:
    """Seconds after its `sends`-th send-back that a pod still Pending is sent back again: HAMi may have refused the
    try the last one caused (its watch of the deletions behind ours), and kube-scheduler before 1.29 then waits out
    its 5-minute sweep. Doubling, so a pod that does not fit is not written often."""
    return min(SEND_BACK_AGAIN_SECONDS * 2 ** (sends - 1), SEND_BACK_AGAIN_MAX_SECONDS)


def refused_since(events: Iterable[Mapping[str, Any]], uid: str, since: datetime) -> bool:
    """Whether the scheduler refused the pod (by UID) again after `since`."""
    for event in events:
        about = failed_pod(event)
        if about is None or about[2] != uid:
            continue
        for value in (
            event.get("lastTimestamp"),
            as_mapping(event.get("series")).get("lastObservedTime"),
            event.get("eventTime"),
        ):
            stamp = time_or_none(value)
            if stamp is not None and stamp > since:
                return True
    return False
