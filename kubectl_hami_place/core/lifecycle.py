"""A placement's life after its creation, decided on the typed model: claim, consumer, eviction, release, expiry.

Every step is a `StatusWrite`: the status to write, valid only if the placement is still at the resourceVersion it
was decided on, and the Event that tells the story. The server owns the clock, the tokens and every API call; the
rules are here (contract in docs/architecture.md, "Placement status").
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from kubectl_hami_place.core.errors import clip
from kubectl_hami_place.core.fields import as_mapping
from kubectl_hami_place.core.k8s_names import is_object_name
from kubectl_hami_place.core.names import (
    CLAIM_ANNOTATION,
    CLAIMED_PHASES,
    DONE_EVICTIONS,
    ENDED_PHASES,
    PLACEMENT_ANNOTATION,
    ROOM_ANNOTATION,
    ROOM_GATE,
    USE_GPUUUID_ANNOTATION,
    EvictionResult,
    Phase,
)
from kubectl_hami_place.core.pin_check import Problem, Scope
from kubectl_hami_place.core.placement import (
    Condition,
    EvictionStatus,
    Placement,
    PlacementSpec,
    PlacementStatus,
    condition,
    merge_condition,
)

# How long a waiting pod's room must have been made before the pod is sent to the scheduler: HAMi's scheduler learns
# that an evicted pod is gone from a watch of its own, which may lag ours, and an attempt it refused meanwhile is a
# FailedScheduling warning (and, on a kube-scheduler without kubernetes#122019's fix, minutes of waiting).
ROOM_SETTLE_SECONDS = 1.0
EVICTION_RETRY_FIRST_SECONDS = 5
EVICTION_RETRY_MAX_SECONDS = 60
# How much of the last attempt's message (as the status holds it) giving up quotes.
LAST_MESSAGE_MAX = 1024
GUARD_LABEL = "app.kubernetes.io/managed-by"
GUARD_LABEL_VALUE = "hami-place-reqid-guard"
FOREVER = datetime.max.replace(tzinfo=UTC)
"""What `quiet_until` says of a placement no clock will move: only a change of its inputs will."""


@dataclass(frozen=True)
class StatusWrite:
    """A placement status to write, valid only if the placement is still at the version it was read at; its Event."""

    placement: Placement
    status: PlacementStatus
    reason: str
    message: str
    warning: bool = False
    event: bool = True
    """Whether the step is worth an Event (an acknowledgement is not: it happens to every placement)."""

    @property
    def namespace(self) -> str:
        """The placement's namespace."""
        return self.placement.namespace

    @property
    def name(self) -> str:
        """The placement's name."""
        return self.placement.name

    @property
    def resource_version(self) -> str:
        """The version the write is guarded by."""
        return self.placement.resource_version


@dataclass(frozen=True)
class PodEvent:
    """An Event about a pod, by UID: what `kubectl describe pod` shows of its placement."""

    namespace: str
    name: str
    uid: str
    reason: str
    message: str

    @property
    def involved(self) -> dict[str, Any]:
        """The pod as an Event's involved object."""
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"namespace": self.namespace, "name": self.name, "uid": self.uid},
        }


@dataclass(frozen=True)
class FollowUp:
    """A status to write next; with `evict`, the write is the lease of one eviction attempt of that pod.

    `evict_uid` is the identity the eviction must carry as its precondition (empty for a status written before
    UIDs were recorded: then the name alone).
    """

    write: StatusWrite
    evict: str = ""
    evict_uid: str = ""
    release: bool = False
    """The write releases a claim: the server first asks the API server whether a pod carries it after all."""
    pod_event: PodEvent | None = None
    """An Event on a pod once the write landed: the pin, on the placed pod."""


def claimed(placement: Placement, pod_name: str, token: str, now: datetime, evict_uid: str = "") -> StatusWrite:
    """The status that records the claim: Evicting when a pod must make room first, else Consumed.

    `evict_uid` is the UID of the stored pod named by `spec.evictPod` at this moment: only that pod will be
    evicted. Without it the pod did not exist (a misspelled name, or already gone): nothing is evicted, and the
    status says the pod was missing, not that it was evicted.
    """
    evict = placement.spec.evict_pod or ""
    who = f"pod {pod_name}" if pod_name else "a pod (name given at creation)"
    conditions: tuple[Condition, ...] = (condition("Claimed", True, "Claimed", f"claimed by {who}", now),)
    eviction = None
    message = f"claimed by {who}"
    evicting = bool(evict and evict_uid)
    if evicting:
        eviction = EvictionStatus(
            pod=evict,
            uid=evict_uid,
            result=EvictionResult.Pending,
            message="waiting for the placed pod to be stored",
            time=now,
        )
        conditions += (condition("Evicted", False, "Pending", f"pod {evict} not evicted yet", now),)
        message += f"; evicting pod {evict}"
    elif evict:
        missing = f"pod {evict} did not exist when the placement was claimed; nothing was evicted (check evictPod)"
        eviction = EvictionStatus(pod=evict, result=EvictionResult.NotFound, message=missing, time=now)
        conditions += (condition("Evicted", False, "NotFound", missing, now),)
        message += f"; {missing}"
    status = PlacementStatus(
        phase=Phase.Evicting if evicting else Phase.Consumed,
        message=message,
        claim_token=token,
        claimed_at=now,
        consumed_by_name=pod_name or None,
        consumed_at=now,
        eviction=eviction,
        conditions=conditions,
        observed_generation=placement.generation or placement.status.observed_generation,
    )
    return StatusWrite(placement, status, "Claimed", message, warning=bool(evict and not evict_uid))


def acknowledgement(placement: Placement) -> StatusWrite | None:
    """The status that tells the CLI the webhook has seen this generation (it waits for it before evicting); None
    when status.observedGeneration already caught up."""
    if placement.acknowledged:
        return None
    status = replace(placement.status, observed_generation=placement.generation)
    message = f"generation {placement.generation} observed"
    return StatusWrite(placement, status, "Observed", message, event=False)


def req_id_guard_name(namespace: str, req_id: str) -> str:
    """The name of the Lease that guards a reqID in its namespace: one object per (namespace, reqID)."""
    digest = hashlib.sha256(f"{namespace}/{req_id}".encode()).hexdigest()[:32]
    return f"hami-place-reqid-{digest}"


def claim_digest(token: str) -> str:
    """The value of a pinned pod's claim-digest label: a label value holds 63 characters at most."""
    return hashlib.sha256(token.encode()).hexdigest()[:40]


def guard_obsolete(holder: Placement | None, holder_uid: str) -> bool:
    """Whether a reqID guard may go: its placement is gone (or replaced), or ended without a claim (Expired, Failed)."""
    if holder is None or holder.uid != holder_uid:
        return True
    return holder.status.phase in (Phase.Expired, Phase.Failed) and not holder.status.claim_token


def finished_at(placement: Placement) -> datetime | None:
    """When a placement that can do nothing more finished (Consumed with its pod known, Failed, Expired): the latest
    time its status records; None while it may still act, or when it records no time at all (kept)."""
    status = placement.status
    done = status.phase in (Phase.Failed, Phase.Expired) or (
        status.phase == Phase.Consumed and bool(status.consumed_by_uid)
    )
    if not done or placement.deleting:
        return None
    eviction_time = status.eviction.time if status.eviction else None
    stamps = [status.claimed_at, status.consumed_at, eviction_time]
    stamps += [c.last_transition_time for c in status.conditions]
    known = [stamp for stamp in stamps if stamp is not None]
    return max(known) if known else None


def failed(placement: Placement, reason: str, now: datetime) -> StatusWrite:
    """The status of a placement that can never be honoured."""
    status = placement.status
    conditions = merge_condition(status.conditions, condition("Claimed", False, "CannotHonour", reason, now))
    failed_status = replace(status, phase=Phase.Failed, message=reason, conditions=conditions)
    return StatusWrite(placement, failed_status, "CannotHonour", reason, warning=True)


def consumed_req_ids(placements: Sequence[Placement]) -> dict[tuple[str, str], str]:
    """(namespace, reqID) -> name of the oldest placement that consumed that reqID."""
    consumed: dict[tuple[str, str], str] = {}
    # Only the claimed ones are sorted: every reconcile pass asks, and most placements are open.
    for placement in sorted((p for p in placements if p.claimed), key=age_key):
        consumed.setdefault((placement.namespace, placement.spec.req_id), placement.name)
    return consumed


def age_key(placement: Placement) -> tuple[str, str]:
    """Oldest first; the name breaks ties."""
    created = placement.created.isoformat() if placement.created is not None else ""
    return (created, placement.name)


def follow_up(
    placement: Placement,
    claimed_pods: Mapping[tuple[str, str], Mapping[str, Any]],
    now: datetime,
    ttl_seconds: int,
    claim_grace_seconds: int,
    *,
    consumed: Mapping[tuple[str, str], str] | None = None,
    problems: Callable[[PlacementSpec], Sequence[Problem]] | None = None,
    claim_ages: Mapping[tuple[str, str], float] | None = None,
) -> FollowUp | None:
    """The next step for one placement, given the stored pods by (namespace, claim token); None when none is due.

    A generation not yet acknowledged (status.observedGeneration behind metadata.generation): acknowledge it first.
    Unclaimed while another placement of the namespace consumed its reqID (`consumed`, from `consumed_req_ids`),
    or unclaimed while the placement itself can never be honoured (node gone, card missing: given `problems`,
    `pin_check.problems_on` the nodes):
    Failed. Unclaimed past the TTL: Expired. Claimed, and the pod carrying the token is stored: fill consumedBy.
    Claimed, but no such pod appeared within the grace period (its creation failed, or we stopped before
    answering): release the claim, back to Pending. The grace is measured by `claim_ages` when given ((namespace,
    token) -> seconds since the deciding replica first saw the claim, on its own monotonic clock), else from the
    claim's wall-clock claimedAt. Evicting with the pod stored: lease the next eviction attempt
    when its backoff is over, or give up once the TTL since the claim has passed; stop once the placed pod is
    gone (deleted, or finished), and never evict the placed pod itself.
    """
    status = placement.status
    token = status.claim_token or ""
    if placement.deleting:
        return None
    ack = acknowledgement(placement)
    if ack is not None:
        return FollowUp(ack)
    if not token:
        if not placement.unclaimed:
            return None
        owner = (consumed or {}).get((placement.namespace, placement.spec.req_id))
        if owner and owner != placement.name:
            return FollowUp(failed(placement, f"reqID already consumed by placement {owner}", now))
        if problems is not None:
            final = [problem.message for problem in problems(placement.spec) if problem.scope is Scope.Placement]
            if final:
                return FollowUp(failed(placement, "; ".join(final), now))
        created = placement.created
        if created is not None and (now - created).total_seconds() > ttl_seconds:
            return FollowUp(_expired(placement, ttl_seconds, now))
        return None
    if status.phase not in CLAIMED_PHASES:
        return None
    claimed_at = status.claimed_at or now
    if not status.consumed_by_uid:
        pod = claimed_pods.get((placement.namespace, token))
        if pod is not None:
            return FollowUp(_consumed_by(placement, pod), pod_event=pinned(placement, pod))
        if claim_ages is not None:
            age = claim_ages.get((placement.namespace, token), 0.0)
        else:
            age = (now - claimed_at).total_seconds()
        if age > claim_grace_seconds:
            return FollowUp(_released(placement, now), release=True)
        return None
    if status.phase != Phase.Evicting:
        return None
    placed = claimed_pods.get((placement.namespace, token))
    if placed is None or _finished(placed) or _uid_of(placed) != status.consumed_by_uid:
        return FollowUp(_placed_pod_gone(placement, now))
    eviction = status.eviction or EvictionStatus(pod=placement.spec.evict_pod or "")
    if (eviction.uid and eviction.uid == status.consumed_by_uid) or (
        not eviction.uid and eviction.pod == status.consumed_by_name
    ):
        message = f"pod {eviction.pod} is the placed pod itself; it is never evicted"
        return FollowUp(eviction_outcome(placement, EvictionResult.NotFound, message, now))
    to_evict = placement.spec.evict_pod or eviction.pod
    if not to_evict:
        message = "no pod to evict is named (spec.evictPod and status.eviction.pod are empty)"
        return FollowUp(eviction_outcome(placement, EvictionResult.NotFound, message, now))
    if not is_object_name(to_evict):
        # spec.evictPod has the CRD's pattern; the status holds what its writer wrote, the API server checks no name
        message = "status.eviction.pod is no pod name; nothing is evicted"
        return FollowUp(eviction_outcome(placement, EvictionResult.NotFound, message, now))
    return _next_eviction(placement, claimed_at, now, ttl_seconds)


def quiet_until(placement: Placement, ttl_seconds: int) -> datetime | None:
    """Until when `follow_up`, having found no step for this placement, finds none again whatever the pods and the
    claims' ages, while the placement, its node and its reqID's consumer stay as they are (FOREVER: until one of
    them changes); None when its next step hangs on the pods or a claim's age, so that it is asked every pass."""
    status = placement.status
    if placement.deleting:
        return FOREVER
    if not placement.acknowledged:
        return None
    if not status.claim_token:
        if placement.unclaimed and placement.created is not None:
            return placement.created + timedelta(seconds=ttl_seconds)
        return FOREVER
    if status.phase not in CLAIMED_PHASES:
        return FOREVER
    if not status.consumed_by_uid or status.phase == Phase.Evicting:
        return None
    return FOREVER


def eviction_outcome(placement: Placement, result: EvictionResult, message: str, now: datetime) -> StatusWrite:
    """The status after one eviction attempt: Evicted or NotFound ends it (Consumed), Blocked or Failed retries."""
    status = placement.status
    eviction = replace(
        status.eviction or EvictionStatus(pod=placement.spec.evict_pod or ""),
        result=result,
        message=message,
        time=now,
    )
    done = result in DONE_EVICTIONS
    conditions = merge_condition(status.conditions, condition("Evicted", done, result.value, message, now))
    if done:
        text = f"consumed by {_pod(status.consumed_by_name or '')}; {message}"
        updated = replace(status, phase=Phase.Consumed, message=text, eviction=eviction, conditions=conditions)
    else:
        text = f"eviction of pod {eviction.pod} {result.value.lower()}: {message}; will retry"
        updated = replace(status, message=text, eviction=eviction, conditions=conditions)
    reason = {
        EvictionResult.Evicted: "Evicted",
        EvictionResult.NotFound: "EvictionNotNeeded",
        EvictionResult.Blocked: "EvictionBlocked",
    }.get(result, "EvictionFailed")
    return StatusWrite(placement, updated, reason, message, warning=not done)


def _next_eviction(placement: Placement, claimed_at: datetime, now: datetime, ttl_seconds: int) -> FollowUp | None:
    """Lease the next eviction attempt once its backoff is over, or give up after the TTL since the claim."""
    status = placement.status
    eviction = status.eviction or EvictionStatus(pod=placement.spec.evict_pod or "")
    pod = placement.spec.evict_pod or eviction.pod
    if (now - claimed_at).total_seconds() > ttl_seconds:
        # cut: the status's writer may have written any length, and the condition's message holds 32768 at most
        last = clip(eviction.message, LAST_MESSAGE_MAX) or "no attempt succeeded"
        reason = f"eviction of pod {pod} did not succeed within {ttl_seconds}s: {last}"
        gave_up = replace(
            status,
            phase=Phase.Failed,
            message=reason,
            eviction=replace(eviction, result=EvictionResult.Failed, message=reason, time=now),
            conditions=merge_condition(status.conditions, condition("Evicted", False, "GaveUp", reason, now)),
        )
        return FollowUp(StatusWrite(placement, gave_up, "EvictionGaveUp", reason, warning=True))
    if eviction.attempts > 0 and eviction.time is not None:
        # Bounded: attempts is what the status's writer wrote, and 2 ** (2^31 - 1) is a number of 256 MiB.
        doublings = min(eviction.attempts - 1, 64)
        wait = min(EVICTION_RETRY_FIRST_SECONDS * 2**doublings, EVICTION_RETRY_MAX_SECONDS)
        if (now - eviction.time).total_seconds() < wait:
            return None
    lease = replace(status, eviction=replace(eviction, pod=pod, attempts=eviction.attempts + 1, time=now))
    # The attempt's number is in the status and in the Event's count: one Event counts every attempt.
    message = f"evicting pod {pod}"
    return FollowUp(StatusWrite(placement, lease, "EvictionAttempt", message), evict=pod, evict_uid=eviction.uid)


def gated(pod: Mapping[str, Any]) -> bool:
    """Whether the pod carries ROOM_GATE among its scheduling gates."""
    gates = as_mapping(pod.get("spec")).get("schedulingGates")
    return isinstance(gates, list) and {"name": ROOM_GATE} in gates


def waits_for_room(pod: Mapping[str, Any]) -> bool:
    """Whether the pod waits for its room: gated, or carrying ROOM_ANNOTATION where the API server dropped the gate."""
    return gated(pod) or ROOM_ANNOTATION in as_mapping(as_mapping(pod.get("metadata")).get("annotations"))


def gating_placement(pod: Mapping[str, Any]) -> tuple[str, str]:
    """(the placement's name, the claim token) a gated pod carries in its annotations; '' for either when absent."""
    annotations = as_mapping(as_mapping(pod.get("metadata")).get("annotations"))
    return str(annotations.get(PLACEMENT_ANNOTATION) or ""), str(annotations.get(CLAIM_ANNOTATION) or "")


def room_made(placement: Placement | None, token: str, evicted: Mapping[str, Any] | None) -> str | None:
    """Why a pod gated by ROOM_GATE may be scheduled now, None while it waits: its placement (claimed with `token`)
    is still evicting, or evicted a pod that is still stored and not ended (`evicted`, the stored pod of the evicted
    name, any UID: HAMi counts a terminating pod's cards until it is gone). Its placement gone, its claim released,
    the eviction not needed or given up: the pod goes to the scheduler as it is."""
    if placement is None or placement.deleting:
        return "its placement is gone"
    status = placement.status
    if not token or status.claim_token != token:
        return f"placement {placement.name} is no longer claimed by it"
    if status.phase == Phase.Evicting:
        return None
    eviction = status.eviction
    if status.phase != Phase.Consumed or eviction is None:
        return f"placement {placement.name} is {status.phase.value}"
    still = evicted is not None and not _ended(evicted) and (not eviction.uid or _uid_of(evicted) == eviction.uid)
    if eviction.result == EvictionResult.Evicted and still:
        return None
    # A status anyone allowed to write it may have written: a name is said only when it is one.
    return f"pod {eviction.pod} is gone" if is_object_name(eviction.pod) else "the evicted pod is gone"


def _ended(pod: Mapping[str, Any]) -> bool:
    """The pod has ended (Succeeded or Failed): HAMi no longer counts its cards."""
    return as_mapping(pod.get("status")).get("phase") in ENDED_PHASES


def _finished(pod: Mapping[str, Any]) -> bool:
    """The pod is being deleted or has ended: it no longer needs the room an eviction would make."""
    deleting = as_mapping(pod.get("metadata")).get("deletionTimestamp") is not None
    return deleting or _ended(pod)


def _uid_of(pod: Mapping[str, Any]) -> str:
    """metadata.uid, '' when absent."""
    return str(as_mapping(pod.get("metadata")).get("uid") or "")


def _placed_pod_gone(placement: Placement, now: datetime) -> StatusWrite:
    """The pod that claimed the placement is gone while its eviction was pending: stop evicting, say so."""
    status = placement.status
    eviction = status.eviction or EvictionStatus(pod=placement.spec.evict_pod or "")
    placed = f"placed pod {status.consumed_by_name}" if status.consumed_by_name else "the placed pod"
    reason = f"{placed} is gone (deleted or ended); eviction of {_pod(eviction.pod)} stopped"
    stopped = replace(
        status,
        phase=Phase.Failed,
        message=reason,
        eviction=replace(eviction, result=EvictionResult.Failed, message=reason, time=now),
        conditions=merge_condition(status.conditions, condition("Evicted", False, "PlacedPodGone", reason, now)),
    )
    return StatusWrite(placement, stopped, "PlacedPodGone", reason, warning=True)


def _pod(name: str) -> str:
    """`pod NAME`, or `a pod` for a name a status written by hand left out."""
    return f"pod {name}" if name else "a pod"


def _consumed_by(placement: Placement, pod: Mapping[str, Any]) -> StatusWrite:
    """The claim's pod is stored: record its name and UID."""
    meta = as_mapping(pod.get("metadata"))
    name, uid = str(meta.get("name") or ""), str(meta.get("uid") or "")
    status = placement.status
    evict = (status.eviction.pod if status.eviction else "") or placement.spec.evict_pod or ""
    if status.phase == Phase.Consumed:
        message = f"consumed by pod {name}"
    else:
        message = f"claimed by pod {name}" + (f"; evicting pod {evict}" if evict else "")
    updated = replace(status, consumed_by_name=name, consumed_by_uid=uid, message=message)
    return StatusWrite(placement, updated, "Consumed", f"pod {name} ({uid}) is stored carrying the claim")


def pinned(placement: Placement, pod: Mapping[str, Any]) -> PodEvent:
    """The Event on the placed pod once it is stored: which placement pinned it to which node and cards."""
    meta = as_mapping(pod.get("metadata"))
    uuids = as_mapping(meta.get("annotations")).get(USE_GPUUUID_ANNOTATION)
    spec = placement.spec
    cards = ", ".join(str(card) for card in spec.gpu_devices)
    message = f"pinned by placement {placement.name} to node {spec.node_name}, cards {cards}"
    if isinstance(uuids, str) and uuids:
        message += f" ({uuids})"
    return PodEvent(placement.namespace, str(meta.get("name") or ""), str(meta.get("uid") or ""), "Pinned", message)


def _released(placement: Placement, now: datetime) -> StatusWrite:
    """No pod carrying the claim was stored in time: back to Pending, claimable again."""
    reason = "claim released: no pod carrying it was stored (its creation failed or was interrupted)"
    status = placement.status
    conditions = merge_condition(status.conditions, condition("Claimed", False, "ClaimReleased", reason, now))
    released = PlacementStatus(
        phase=Phase.Pending,
        message=reason,
        conditions=tuple(c for c in conditions if c.type != "Evicted"),
        observed_generation=status.observed_generation,
    )
    return StatusWrite(placement, released, "ClaimReleased", reason, warning=True)


def _expired(placement: Placement, ttl_seconds: int, now: datetime) -> StatusWrite:
    """Not claimed within the TTL."""
    message = f"not claimed within {ttl_seconds}s"
    status = placement.status
    conditions = merge_condition(status.conditions, condition("Claimed", False, "Expired", message, now))
    expired = replace(status, phase=Phase.Expired, message=message, conditions=conditions)
    return StatusWrite(placement, expired, "Expired", message, warning=True)
