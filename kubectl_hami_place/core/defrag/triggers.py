"""The two triggers: a Pending pod HAMi refused for want of room (rescue), and a room goal not met (keep room).

HAMi's scheduler extender answers kube-scheduler with a reason per failed node, `common.GenReason`'s
`"<n>/<cards> <Reason>"` joined by `, ` (e.g. `1/2 CardInsufficientMemory, 1/2 NumaNotFit`), or a bare name such as
`NodeInsufficientDevice`. kube-scheduler folds them into the pod's FailedScheduling message with the other
plugins' reasons: `0/3 nodes are available: 1 node(s) had untolerated taint {...}, 2 1/2 CardInsufficientMemory.
preemption: ...`. Only the reasons moving pods can cure start a rescue; a card type or UUID the pod excludes, an
unhealthy or cordoned card, a node with too few cards, CPU, memory, taints and node lock contention do not.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from kubectl_hami_place.core.attach_limits import MAX_VOLUME_COUNT, attach_needs, attach_refs, driver_of_scalar
from kubectl_hami_place.core.defrag.policy import DefragPolicy
from kubectl_hami_place.core.errors import ModelError
from kubectl_hami_place.core.fields import as_mapping
from kubectl_hami_place.core.hami_config import HAMI_DEFAULTS, HamiConfig
from kubectl_hami_place.core.node_resources import Resources
from kubectl_hami_place.core.node_selection import NodeMarks
from kubectl_hami_place.core.placement import time_or_none
from kubectl_hami_place.core.planner import FreeCardsGoal, Goal, Limits, PlanPod, Snapshot
from kubectl_hami_place.core.planner.model import PLACED_BY
from kubectl_hami_place.core.planner.objects import kept_off_nodes, pod_for_plan, scheduled_condition, selected_nodes
from kubectl_hami_place.core.planner.state import State
from kubectl_hami_place.core.pod_affinity import (
    AFFINITY_REFUSALS,
    INTER_POD_AFFINITY,
    NODE_PORTS,
    PORTS_REFUSAL,
    REPELLED_REFUSAL,
    SPREAD_REFUSAL,
    ByPlacedPods,
    DomainIndex,
    NamespaceLabels,
    PlacedPod,
    Repelling,
    host_ports,
    kept_off_by_ports,
    placed_pods,
    pod_spreads,
    pod_terms,
)
from kubectl_hami_place.core.requests import pod_requests
from kubectl_hami_place.core.volumes import VOLUME_REFUSALS, Volumes, volume_reach

ROOM_REASONS = (
    "CardInsufficientMemory",
    "CardInsufficientCore",
    "CardTimeSlicingExhausted",
    "CardComputeUnitsExhausted",
    "ExclusiveDeviceAllocateConflict",
    "NumaNotFit",
    "AllocatedCardsInsufficientRequest",
)
"""HAMi's fit reasons (pkg/device/common/common.go, v2.10) that moving other pods off a card can cure."""
OTHER_REASONS = (
    "CardTypeMismatch",
    "CardUuidMismatch",
    "CardNotHealth",
    "CardCordoned",
    "CardNotFoundCustomFilterRule",
    "CardMigTopologyInfeasible",
    "NodeInsufficientDevice",
    "ResourceQuotaNotFit",
    "ModeNotFit",
)
"""HAMi's reasons that no move cures."""
HAMI_NODE_REASONS = ("node unregistered", "node usage unavailable")
"""What HAMi's extender says of a node it has no cards of (pkg/scheduler/scheduler.go, v2.10)."""
READ_REASONS = (
    "didn't match Pod's node affinity/selector",
    "had untolerated taint",
    "that the pod didn't tolerate",
    "were unschedulable",
    "Insufficient cpu",
    "Insufficient memory",
    "Too many pods",
)
"""kube-scheduler's reasons for a node that the plan reads as it does (NodeAffinity, TaintToleration in 1.25+ and in
1.24's words, NodeUnschedulable, NodeResourcesFit's CPU, memory and pods)."""
FAILED_SCHEDULING = "FailedScheduling"
UNSCHEDULABLE = "Unschedulable"
"""The reason kube-scheduler writes on a pod's PodScheduled condition when no node fits (v1.PodReasonUnschedulable)."""
_COUNTED = re.compile(r"\b\d+/\d+ ([A-Za-z]+)\b")
_COUNT = re.compile(r"[0-9]{1,9}")
"""A group's count of nodes as kube-scheduler writes it; a part led by other digits (`²`, 5,000 of them) is no count,
so int() never sees what it refuses."""
_TRANSIENT = ("node lock contention", "is locked")


def rescue_reason(message: str) -> str | None:
    """HAMi's curable fit reasons in a FailedScheduling message (`CardInsufficientMemory, NumaNotFit`), or None.

    None too when the failure was node lock contention: the scheduler retries that on its own.
    """
    if any(marker in message for marker in _TRANSIENT):
        return None
    found = dict.fromkeys(name for name in _COUNTED.findall(message) if name in ROOM_REASONS)
    return ", ".join(found) or None


def refused_groups(message: str) -> tuple[tuple[int, str], ...]:
    """The groups of nodes a FailedScheduling message says were refused, each (count, reason), preemption's part left
    out: `0/5 nodes are available: 2 node(s) had untolerated taint {a: b}, 3 1/2 CardInsufficientMemory, 1/2
    NumaNotFit.` gives (2, `node(s) had untolerated taint {a: b}`), (3, `1/2 CardInsufficientMemory, 1/2 NumaNotFit`).
    A part not led by a count goes on the group before it (HAMi joins a node's reasons with `, ` too)."""
    head = message.split(" preemption: ", 1)[0].strip()
    found = re.match(r"0/\d+ nodes are available: (.*)", head, re.DOTALL)
    if found is None:
        return ()
    groups: list[tuple[int, str]] = []
    for part in found.group(1).rstrip(".").split(", "):
        count, _, reason = part.partition(" ")
        if _COUNT.fullmatch(count) and reason:
            groups.append((int(count), reason))
        elif groups:
            groups[-1] = (groups[-1][0], f"{groups[-1][1]}, {part}")
    return tuple(groups)


def unread_refusals(
    message: str, config: HamiConfig = HAMI_DEFAULTS, also_read: tuple[str, ...] = ()
) -> tuple[str, ...]:
    """The groups of nodes kube-scheduler kept the pod off for a reason the plan does not read (`2 node(s) didn't
    satisfy existing pods anti-affinity rules`, a volume's node or zone, host ports, or a reason it does not know;
    the pod's own pod affinity, anti-affinity and topology spread unless their words are in `also_read`): the plan
    cannot tell which nodes those are, so a move could make room on one of them for nothing."""
    read = (*READ_REASONS, f"Insufficient {config.resource_count_name}", *HAMI_NODE_REASONS, *also_read)
    return tuple(
        f"{count} {reason}"
        for count, reason in refused_groups(message)
        if not (_COUNTED.search(reason) or any(name in reason for name in (*ROOM_REASONS, *OTHER_REASONS, *read)))
    )


@dataclass(frozen=True)
class Candidate:
    """A Pending GPU pod to rescue: why HAMi refused it and since when it waits; `pod` is the API object."""

    namespace: str
    name: str
    uid: str
    reason: str
    message: str
    pending_since: datetime
    pod: Mapping[str, Any]

    @property
    def key(self) -> str:
        """`namespace/name`."""
        return f"{self.namespace}/{self.name}"


def rescue_candidates(
    pods: Iterable[Mapping[str, Any]],
    events: Iterable[Mapping[str, Any]],
    now: datetime,
    policy: DefragPolicy,
    config: HamiConfig = HAMI_DEFAULTS,
) -> tuple[Candidate, ...]:
    """The pods the rescue trigger would plan for now: the highest priority first, then the longest waiting.

    A candidate is Pending and unscheduled, not terminating, asks for GPU cards, is not pinned by a placement (that
    pod waits for its own card), lives in a namespace the policy allows, has waited at least `rescue.pendingFor`,
    has a FailedScheduling event, and the scheduler's own word on it carries a curable HAMi reason: the message of
    its PodScheduled=False condition (reason Unschedulable), which only a writer of pods/status sets, where an Event
    can be written by anyone who may create Events in the namespace.
    """
    if not policy.rescue.enabled:
        return ()
    latest = _latest_failures(events)
    found = []
    for pod in pods:
        metadata, spec = as_mapping(pod.get("metadata")), as_mapping(pod.get("spec"))
        namespace, name = str(metadata.get("namespace", "")), str(metadata.get("name", ""))
        if as_mapping(pod.get("status")).get("phase") != "Pending" or spec.get("nodeName"):
            continue
        if metadata.get("deletionTimestamp") or PLACED_BY in as_mapping(metadata.get("annotations")):
            continue
        if not policy.namespaces.allows(namespace) or not _asks_gpu(spec, config):
            continue
        since = pending_since(pod)
        if since is None or now - since < policy.rescue.pending_for:
            continue
        failed_uid = latest.get((namespace, name))
        if failed_uid is None or (failed_uid and metadata.get("uid") and failed_uid != metadata.get("uid")):
            continue
        message = unschedulable_message(pod)
        reason = rescue_reason(message)
        if reason is None:
            continue
        uid = str(metadata.get("uid", ""))
        found.append(Candidate(namespace, name, uid, reason, message, since, pod))
    return tuple(sorted(found, key=lambda c: (-pod_priority(c.pod), c.pending_since, c.key)))


def pod_priority(pod: Mapping[str, Any]) -> int:
    """The pod's `spec.priority` as the admission plugin resolved it (0 when unset, as kube-scheduler reads it)."""
    value = as_mapping(pod.get("spec")).get("priority")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _asks_gpu(spec: Mapping[str, Any], config: HamiConfig) -> bool:
    """Whether any container asks for cards (an unreadable request: no, HAMi would not place it either)."""
    try:
        return any(request is not None for request in pod_requests(spec, config=config))
    except ModelError:
        return False


def pending_since(pod: Mapping[str, Any]) -> datetime | None:
    """When the pod became unschedulable (its PodScheduled=False condition), else when it was created."""
    condition = scheduled_condition(pod)
    if condition.get("status") == "False" and (stamp := time_or_none(condition.get("lastTransitionTime"))) is not None:
        return stamp
    return time_or_none(as_mapping(pod.get("metadata")).get("creationTimestamp"))


@dataclass(frozen=True)
class PendingPod:
    """A pod to make room for: as the planner sees it (kept off the nodes its own pod affinity and topology spreads
    refuse, when the pods they select were read, and those placed pods' anti-affinity refuses), the refusals of
    nodes in kube-scheduler's last word on it that the plan does not read (`unread_refusals`: a plan's room may be
    on one of those nodes)."""

    pod: PlanPod
    unread: tuple[str, ...]


def pending_pod(
    pod: Mapping[str, Any],
    marks: NodeMarks,
    config: HamiConfig,
    pods: Iterable[Mapping[str, Any]] | None,
    placed: Snapshot | None = None,
    *,
    volumes: Volumes | None = None,
    namespace_labels: NamespaceLabels | None = None,
) -> PendingPod:
    """The Pending pod a plan is for; `pods` the API objects of pods its pod affinity terms and topology spreads may
    select (any superset of those bound to a node: `pod_affinity.placed_pods` reads them), None when they were not
    read; `placed` the snapshot whose bound pods' anti-affinity and host ports keep it off nodes, None when not read;
    `volumes` the claims and volumes read, whose bound volumes keep it off nodes (None: not read); `namespace_labels`
    the namespaces' labels its terms' namespaceSelectors pick namespaces by (None: not read)."""
    metadata, spec = as_mapping(pod.get("metadata")), as_mapping(pod.get("spec"))
    namespace = str(metadata.get("namespace", ""))
    scalars = placed.scalars if placed is not None else frozenset()
    planned = pod_for_plan(pod, marks, config, scalars=scalars, namespace_labels=namespace_labels)
    terms = pod_terms(spec, namespace, namespace_labels) if pods is not None else None
    spreads = pod_spreads(spec, planned.labels) if pods is not None else None
    selected = placed_pods(pods or ()) if terms or spreads else ()
    # kube-scheduler's filters in its order, the first that refuses a node naming why: NodePorts, VolumeBinding and
    # VolumeZone, PodTopologySpread, InterPodAffinity (the pod's own terms, then placed pods' anti-affinity).
    found: list[Mapping[str, tuple[str, str]]] = []
    if placed is not None:
        held = kept_off_by_ports(host_ports(spec), placed.port_holders)
        found.append({node: (NODE_PORTS, words) for node, words in held.items()})
    reach = None
    if volumes is not None:
        reach = volume_reach(spec, namespace, planned.name, volumes, marks.labels, replacement=False)
        found.append(reach.kept_off)
    domains = DomainIndex(marks.labels)
    if terms or spreads:
        allowed = selected_nodes(spec, marks) if spreads else None
        # The nodes whose taints the pod does not tolerate are those its planner form is kept off for a taint.
        untolerated = frozenset(planned.untolerated)
        itself = PlacedPod(namespace, planned.name, "", planned.labels)
        judged = ByPlacedPods(lambda: selected, domains)
        found.append(judged.kept_off(itself, terms or (), spreads or (), allowed, untolerated))
    if placed is not None:
        kept_off = Repelling(placed.repellers, domains).kept_off(namespace, planned.name, planned.labels)
        found.append({node: (INTER_POD_AFFINITY, words) for node, words in kept_off.items()})
    kept: dict[str, tuple[str, str]] = {}
    for refused in found:
        kept.update((node, why) for node, why in refused.items() if node not in kept)
    planned = kept_off_nodes(planned, kept)
    attached = frozenset(name for name in scalars if driver_of_scalar(name))
    if volumes is not None and attached:
        asked = attach_needs(attach_refs(spec, planned.name), namespace, volumes, attached)
        planned = replace(planned, needs=planned.needs + Resources(scalars=asked))
    read = (
        *(AFFINITY_REFUSALS if terms is not None else ()),
        *((SPREAD_REFUSAL,) if spreads is not None else ()),
        *((REPELLED_REFUSAL, PORTS_REFUSAL) if placed is not None else ()),
        *(VOLUME_REFUSALS if reach is not None and not reach.unread else ()),
        *(f"Insufficient {name}" for name in sorted(scalars - attached)),
        # Read only when the pod's attachments are counted: with its claims unread, a plan could pick a node full.
        *((MAX_VOLUME_COUNT,) if attached and volumes is not None else ()),
    )
    return PendingPod(planned, unread_refusals(unschedulable_message(pod), config, read))


def unschedulable_message(pod: Mapping[str, Any]) -> str:
    """Why the scheduler last refused the pod, as written on it (PodScheduled=False, Unschedulable), else ""."""
    condition = scheduled_condition(pod)
    message = condition.get("message")
    refused = condition.get("status") == "False" and condition.get("reason") == UNSCHEDULABLE
    return message if refused and isinstance(message, str) else ""


def failed_pod(event: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """The namespace, name and UID ("" for none) of the pod a FailedScheduling Event is about (core/v1
    `involvedObject` or events.k8s.io/v1 `regarding`), None for another Event. A pod's Events live in its namespace:
    one naming a pod of another namespace is a tenant's forgery (the API server lets it through once `eventTime` is
    set) and names no pod."""
    if event.get("reason") != FAILED_SCHEDULING:
        return None
    regarding = as_mapping(event.get("involvedObject") or event.get("regarding"))
    if regarding.get("kind", "Pod") != "Pod":
        return None
    own = as_mapping(event.get("metadata")).get("namespace")
    namespace, name = regarding.get("namespace") or own, regarding.get("name")
    if not (isinstance(namespace, str) and namespace and isinstance(name, str) and name):
        return None
    return (namespace, name, str(regarding.get("uid", ""))) if own in (None, "", namespace) else None


def _latest_failures(events: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], str]:
    """The pod UID each pod's latest FailedScheduling event names ("" for none); core/v1 and events.k8s.io/v1 forms.
    Its message is not read: the scheduler's word is the pod's own condition (`unschedulable_message`)."""
    latest: dict[tuple[str, str], tuple[datetime, str]] = {}
    for event in events:
        about = failed_pod(event)
        if about is None:
            continue
        metadata = as_mapping(event.get("metadata"))
        stamp = None
        for value in (
            event.get("lastTimestamp"),
            event.get("deprecatedLastTimestamp"),
            as_mapping(event.get("series")).get("lastObservedTime"),
            event.get("eventTime"),
            metadata.get("creationTimestamp"),
        ):
            stamp = stamp or time_or_none(value)
        if stamp is None:
            continue
        namespace, name, uid = about
        if (namespace, name) not in latest or latest[namespace, name][0] <= stamp:
            latest[namespace, name] = (stamp, uid)
    return {key: uid for key, (_, uid) in latest.items()}


@dataclass(frozen=True)
class Room:
    """The room the keep-room goals read: whole free cards by type, free and stranded memory of the open cards.

    `stranded_mib` is free memory on open cards some pod already uses (as `fragmentation.summarize` counts it);
    `whole_card_mib` the largest open card's memory, what one freed card turns from stranded to whole at most.
    """

    whole_free: Mapping[str, int]
    free_mib: int
    stranded_mib: int
    whole_card_mib: int

    def whole_free_of(self, card_type: str) -> int:
        """Whole free cards whose type contains `card_type` (case-insensitive; all when empty)."""
        word = card_type.upper()
        return sum(count for kind, count in self.whole_free.items() if word in kind.upper())

    @property
    def stranded_share(self) -> float:
        """Stranded memory as a share of free memory (0 when nothing is free)."""
        return self.stranded_mib / self.free_mib if self.free_mib else 0.0


def room_of(snapshot: Snapshot) -> Room:
    """The room on the snapshot's open cards, counted as the planner counts usage."""
    state = State(snapshot, Limits())
    slots = [
        slot
        for slot in state.cards
        if slot.open
        and slot.slots < slot.card.count
        and not (slot.card.devcore != 0 and slot.cores >= slot.card.devcore)
    ]
    whole: dict[str, int] = {}
    for slot in slots:
        if not slot.used:
            whole[slot.card.type] = whole.get(slot.card.type, 0) + 1
    return Room(
        whole_free=whole,
        free_mib=sum(max(slot.free, 0) for slot in slots),
        stranded_mib=sum(max(slot.free, 0) for slot in slots if slot.used),
        whole_card_mib=max((slot.card.devmem for slot in slots), default=0),
    )


def room_goal(room: Room, policy: DefragPolicy) -> Goal | None:
    """The goal keep-room plans toward now, or None when its goals are met (or it is off).

    Whole free cards first: free the missing ones. Else, when stranded memory is above its share of free memory,
    free enough whole cards to bring it under: each card freed turns at most one card's memory from stranded to
    whole, so the estimate asks for at least that many.
    """
    keep = policy.keep_room
    if not keep.enabled:
        return None
    wanted = keep.whole_free_cards
    missing = wanted.count - room.whole_free_of(wanted.type)
    if wanted.count and missing > 0:
        return FreeCardsGoal(count=missing, card_type=wanted.type)
    share = keep.max_stranded_share
    if share is not None and room.whole_card_mib and room.stranded_share > share:
        excess = room.stranded_mib - share * room.free_mib
        return FreeCardsGoal(count=max(1, math.ceil(excess / room.whole_card_mib)))
    return None
