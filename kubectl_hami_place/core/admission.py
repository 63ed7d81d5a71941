"""The admission decision: an AdmissionReview plus a snapshot of the cluster in, the response and the writes out.

Pure on purpose: the server owns the clock, the claim token and every API call, so the rules below (which pod
claims which placement, how it is pinned, when a placement cannot be honoured) are tested on plain dicts. The rules
are in docs/architecture.md; in short, only the CREATE of a Pod with the configured schedulerName is considered; it
claims the oldest unclaimed placement of its namespace whose selector matches; it is pinned by a hostname node
affinity merged into its own, the placement's card UUIDs and, for `gpu-N/P`, a memory percentage; a placement that
cannot be honoured goes Failed and the pod is admitted unchanged with a warning. The server writes the claim
(guarded by the placement's resourceVersion) before it sends the response, so a placement is consumed once.
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import jsonpatch

from kubectl_hami_place.core.cards import Card, node_cards
from kubectl_hami_place.core.errors import (
    CardRefError,
    ModelError,
    PlacementError,
    RegisterError,
    RequestError,
    SelectorError,
)
from kubectl_hami_place.core.placement import parse_time, rfc3339
from kubectl_hami_place.core.refs import parse_card_ref, resolve
from kubectl_hami_place.core.requests import GPUMEM, GPUMEM_PERCENTAGE, container_request
from kubectl_hami_place.core.selectors import LabelSelector, matches

ADMISSION_API_VERSION = "admission.k8s.io/v1"
PLACEMENT_ANNOTATION = "scheduling.hami.placement.com/placement"
REQ_ID_ANNOTATION = "scheduling.hami.placement.com/req-id"
CLAIM_ANNOTATION = "scheduling.hami.placement.com/claim"
USE_GPUUUID_ANNOTATION = "nvidia.com/use-gpuuuid"
HOSTNAME_LABEL = "kubernetes.io/hostname"

CLAIMED_PHASES = frozenset({"Evicting", "Consumed"})
OPEN_PHASES = frozenset({"", "Pending"})

# Bounded values of Decision.result (a metrics label).
IGNORED = "ignored"
NO_PLACEMENT = "no_placement"
PINNED = "pinned"
REINVOKED = "reinvoked"
NOT_HONOURED = "not_honoured"
RESULTS = (IGNORED, NO_PLACEMENT, PINNED, REINVOKED, NOT_HONOURED)


class ReviewError(ModelError):
    """The request body is not an AdmissionReview the webhook can answer (the server replies 400)."""


@dataclass(frozen=True)
class Settings:
    """What the operator configures: the scheduler whose pods may be pinned, namespaces never touched."""

    scheduler_name: str = "hami-scheduler"
    excluded_namespaces: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Snapshot:
    """What the decision may look at: placements and nodes (API dicts), settings, and the injected token and clock."""

    placements: Sequence[Mapping[str, Any]]
    nodes: Mapping[str, Mapping[str, Any]]
    settings: Settings
    token: str
    now: datetime


@dataclass(frozen=True)
class StatusWrite:
    """A placement status to write, valid only if the placement is still at `resource_version`; plus its Event."""

    namespace: str
    name: str
    resource_version: str
    status: dict[str, Any]
    reason: str
    message: str
    warning: bool = False


@dataclass(frozen=True)
class Decision:
    """The AdmissionReview response and the status writes that must succeed before it is sent."""

    uid: str
    result: str
    patch: tuple[dict[str, Any], ...] = ()
    warnings: tuple[str, ...] = ()
    claim: StatusWrite | None = None
    failures: tuple[StatusWrite, ...] = ()
    placement: str = ""

    def response(self) -> dict[str, Any]:
        """The AdmissionReview (admission.k8s.io/v1) to send back; a decision never denies a pod."""
        body: dict[str, Any] = {"uid": self.uid, "allowed": True}
        if self.patch:
            body["patchType"] = "JSONPatch"
            body["patch"] = base64.b64encode(json.dumps(list(self.patch)).encode()).decode()
        if self.warnings:
            body["warnings"] = list(self.warnings)
        return {"apiVersion": ADMISSION_API_VERSION, "kind": "AdmissionReview", "response": body}

    def unchanged(self, warning: str) -> Decision:
        """The same admission without the pin, the claim and the failures: used when the claim cannot be written."""
        return Decision(uid=self.uid, result=NOT_HONOURED, warnings=(*self.warnings, warning))


@dataclass(frozen=True)
class Review:
    """The parts of an AdmissionReview request the decision reads."""

    uid: str
    operation: str
    kind: str
    group: str
    sub_resource: str
    namespace: str
    name: str
    dry_run: bool
    pod: Mapping[str, Any]


@dataclass(frozen=True)
class _Pin:
    """How a placement pins a pod: the node, the card UUIDs in placement order, and the memory percent if any."""

    node: str
    uuids: tuple[str, ...]
    percent: int | None


class _CannotHonour(Exception):
    """This placement cannot be honoured for this pod; the message is the reason written into its status."""


def parse_review(body: object) -> Review:
    """Check that the body is an admission.k8s.io/v1 AdmissionReview request, and extract what the decision needs."""
    if not isinstance(body, dict):
        raise ReviewError("the body must be a JSON object (an AdmissionReview)")
    if body.get("apiVersion") != ADMISSION_API_VERSION or body.get("kind") != "AdmissionReview":
        raise ReviewError(
            f"expected apiVersion {ADMISSION_API_VERSION} kind AdmissionReview, "
            f"got {str(body.get('apiVersion'))[:60]} {str(body.get('kind'))[:60]}"
        )
    request = body.get("request")
    if not isinstance(request, dict):
        raise ReviewError("the AdmissionReview has no request object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise ReviewError("the AdmissionReview request has no uid")
    kind = _mapping(request.get("kind"))
    operation = request.get("operation")
    if not isinstance(operation, str) or not operation:
        raise ReviewError("the AdmissionReview request has no operation")
    pod = request.get("object")
    if operation == "CREATE" and not isinstance(pod, dict):
        raise ReviewError("a CREATE AdmissionReview request must carry the object")
    return Review(
        uid=uid,
        operation=operation,
        kind=str(kind.get("kind") or ""),
        group=str(kind.get("group") or ""),
        sub_resource=str(request.get("subResource") or ""),
        namespace=str(request.get("namespace") or ""),
        name=str(request.get("name") or ""),
        dry_run=request.get("dryRun") is True,
        pod=pod if isinstance(pod, dict) else {},
    )


def decide(review: Mapping[str, Any], snapshot: Snapshot) -> Decision:
    """The admission of one review against one snapshot; raises ReviewError only for a malformed review."""
    request = parse_review(review)
    pod = request.pod
    meta = _mapping(pod.get("metadata"))
    namespace = request.namespace or str(meta.get("namespace") or "")
    if not _considered(request, snapshot.settings, namespace):
        return Decision(uid=request.uid, result=IGNORED)
    annotations = _mapping(meta.get("annotations"))
    if CLAIM_ANNOTATION in annotations:
        return _reinvoked(request, snapshot, namespace, annotations)
    placements = [p for p in snapshot.placements if _namespace(p) == namespace]
    labels = {str(k): str(v) for k, v in _mapping(meta.get("labels")).items()}
    candidates = sorted((p for p in placements if _open(p) and _selects(p, labels)), key=_age_key)
    failures: list[StatusWrite] = []
    warnings: list[str] = []
    for placement in candidates:
        try:
            _check_req_id(placement, placements)
            pin = _plan(placement, pod, snapshot.nodes)
        except _CannotHonour as reason:
            failures.append(_failed(placement, str(reason), snapshot.now))
            warnings.append(f"hami-place: placement {_name(placement)} cannot be honoured: {reason}")
            continue
        mutated = _pinned(pod, pin, placement, snapshot.token)
        claim = _claimed(placement, request.name or str(meta.get("name") or ""), snapshot.token, snapshot.now)
        return Decision(
            uid=request.uid,
            result=PINNED,
            patch=tuple(jsonpatch.JsonPatch.from_diff(dict(pod), mutated).patch),
            warnings=tuple(warnings),
            claim=None if request.dry_run else claim,
            failures=() if request.dry_run else tuple(failures),
            placement=_name(placement),
        )
    if failures:
        warnings.append("hami-place: the pod is admitted unchanged")
        return Decision(
            uid=request.uid,
            result=NOT_HONOURED,
            warnings=tuple(warnings),
            failures=() if request.dry_run else tuple(failures),
        )
    return Decision(uid=request.uid, result=NO_PLACEMENT)


def _considered(request: Review, settings: Settings, namespace: str) -> bool:
    """Only the creation of a Pod with our scheduler, outside the excluded namespaces, may claim a placement."""
    if request.operation != "CREATE" or request.kind != "Pod" or request.group or request.sub_resource:
        return False
    if namespace in settings.excluded_namespaces or not namespace:
        return False
    return _mapping(request.pod.get("spec")).get("schedulerName") == settings.scheduler_name


def _reinvoked(request: Review, snapshot: Snapshot, namespace: str, annotations: Mapping[str, Any]) -> Decision:
    """A pod already carrying a claim (a reinvocation, or a copy of a pinned pod): re-apply that pin, claim nothing."""
    name = str(annotations.get(PLACEMENT_ANNOTATION) or "")
    placement = next((p for p in snapshot.placements if _namespace(p) == namespace and _name(p) == name), None)
    if placement is None:
        return Decision(uid=request.uid, result=REINVOKED, placement=name)
    try:
        pin = _plan(placement, request.pod, snapshot.nodes)
    except _CannotHonour:
        return Decision(uid=request.uid, result=REINVOKED, placement=name)
    mutated = _pinned(request.pod, pin, placement, str(annotations.get(CLAIM_ANNOTATION)))
    patch = tuple(jsonpatch.JsonPatch.from_diff(dict(request.pod), mutated).patch)
    return Decision(uid=request.uid, result=REINVOKED, patch=patch, placement=name)


def _check_req_id(placement: Mapping[str, Any], placements: Sequence[Mapping[str, Any]]) -> None:
    """A reqID is consumed once per namespace: a second placement with a consumed reqID cannot be honoured."""
    req_id = _mapping(placement.get("spec")).get("reqID")
    for other in placements:
        if other is placement or _name(other) == _name(placement):
            continue
        if _mapping(other.get("spec")).get("reqID") == req_id and _claimed_already(other):
            raise _CannotHonour(f"reqID already consumed by placement {_name(other)}")


def _plan(placement: Mapping[str, Any], pod: Mapping[str, Any], nodes: Mapping[str, Mapping[str, Any]]) -> _Pin:
    """Resolve the placement's node and cards and check the pod against them, or say why it cannot be honoured."""
    spec = _mapping(placement.get("spec"))
    node_name = str(spec.get("nodeName") or "")
    pod_spec = _mapping(pod.get("spec"))
    if pod_spec.get("nodeName"):
        raise _CannotHonour(f"the pod sets spec.nodeName {pod_spec.get('nodeName')}, which bypasses the scheduler")
    node = nodes.get(node_name)
    if node is None:
        raise _CannotHonour(f"node {node_name} not found")
    try:
        cards = node_cards(node)
        refs = [parse_card_ref(text) for text in spec.get("gpuDevices") or []]
    except (RegisterError, CardRefError) as error:
        raise _CannotHonour(str(error)) from None
    if not refs:
        raise _CannotHonour("the placement names no card")
    percents = {ref.percent for ref in refs}
    if len(percents) > 1:
        raise _CannotHonour("every gpuDevices entry must carry the same memory percentage")
    percent = percents.pop()
    chosen: list[Card] = []
    for ref in refs:
        try:
            card = resolve(ref, cards, node_name)
        except CardRefError as error:
            raise _CannotHonour(str(error)) from None
        if not card.health:
            raise _CannotHonour(f"card {card.label()} on node {node_name} is unhealthy")
        if card in chosen:
            raise _CannotHonour(f"card {card.label()} is named twice")
        chosen.append(card)
    _check_pod_fits_share(pod_spec, chosen, percent)
    return _Pin(node=node_name, uuids=tuple(card.uuid for card in chosen), percent=percent)


def _check_pod_fits_share(pod_spec: Mapping[str, Any], cards: list[Card], percent: int | None) -> None:
    """Each GPU container must ask for exactly these cards, and no more memory than its share of each."""
    gpu_containers = 0
    for container in _containers(pod_spec):
        try:
            request = container_request(container, hami_webhook=False)
        except RequestError as error:
            raise _CannotHonour(f"the pod's GPU resources are invalid: {error}") from None
        if request is None:
            continue
        gpu_containers += 1
        name = container.get("name") or "?"
        if request.nums != len(cards):
            raise _CannotHonour(
                f"container {name} asks for {request.nums} card(s) (nvidia.com/gpu) "
                f"but the placement names {len(cards)}"
            )
        asked_percent = _asked(container, GPUMEM_PERCENTAGE)
        if request.memreq > 0:
            for card in cards:
                share = card.devmem * (percent or 100) // 100
                if request.memreq > share:
                    raise _CannotHonour(
                        f"container {name} asks {request.memreq} MiB per card, more than its share of "
                        f"{card.label()}: {share} MiB"
                    )
        elif (
            percent is not None
            and asked_percent is not None
            and request.mem_percentage is not None
            and request.mem_percentage > percent
        ):
            raise _CannotHonour(
                f"container {name} asks {request.mem_percentage}% of card memory, more than its share: {percent}%"
            )
    if gpu_containers == 0:
        raise _CannotHonour(f"the pod asks for no card (nvidia.com/gpu) but the placement names {len(cards)}")


def _pinned(pod: Mapping[str, Any], pin: _Pin, placement: Mapping[str, Any], token: str) -> dict[str, Any]:
    """A copy of the pod pinned to the node and cards; applying it to its own result changes nothing."""
    mutated: dict[str, Any] = copy.deepcopy(dict(pod))
    annotations = _child(_child(mutated, "metadata"), "annotations")
    annotations[USE_GPUUUID_ANNOTATION] = ",".join(pin.uuids)
    annotations[PLACEMENT_ANNOTATION] = _name(placement)
    annotations[REQ_ID_ANNOTATION] = str(_mapping(placement.get("spec")).get("reqID") or "")
    annotations[CLAIM_ANNOTATION] = token
    spec = _child(mutated, "spec")
    _require_hostname(spec, pin.node)
    if pin.percent is not None:
        for container in _containers(spec):
            if (
                _gpu_container(container)
                and _asked(container, GPUMEM) is None
                and _asked(container, GPUMEM_PERCENTAGE) is None
            ):
                _child(_child(container, "resources"), "limits")[GPUMEM_PERCENTAGE] = str(pin.percent)
    return mutated


def _require_hostname(spec: dict[str, Any], node: str) -> None:
    """AND `kubernetes.io/hostname In [node]` into every required node selector term (a new term if there is none)."""
    requirement = {"key": HOSTNAME_LABEL, "operator": "In", "values": [node]}
    node_affinity = _child(_child(spec, "affinity"), "nodeAffinity")
    required = _child(node_affinity, "requiredDuringSchedulingIgnoredDuringExecution")
    terms = required.get("nodeSelectorTerms")
    if not isinstance(terms, list) or not terms:
        terms = [{}]
        required["nodeSelectorTerms"] = terms
    for term in terms:
        expressions = term.get("matchExpressions")
        if not isinstance(expressions, list):
            expressions = []
            term["matchExpressions"] = expressions
        if requirement not in expressions:
            expressions.append(requirement)


def _child(parent: dict[str, Any], key: str) -> dict[str, Any]:
    """parent[key] as a dict, created (or replacing a null) when missing."""
    value = parent.get(key)
    if not isinstance(value, dict):
        value = {}
        parent[key] = value
    return value


def _claimed(placement: Mapping[str, Any], pod_name: str, token: str, now: datetime) -> StatusWrite:
    """The status that records the claim: Evicting when a pod must make room first, else Consumed."""
    spec = _mapping(placement.get("spec"))
    evict = str(spec.get("evictPod") or "")
    stamp = rfc3339(now)
    who = f"pod {pod_name}" if pod_name else "a pod (name given at creation)"
    status: dict[str, Any] = {
        "phase": "Evicting" if evict else "Consumed",
        "message": f"claimed by {who}" + (f"; evicting pod {evict}" if evict else ""),
        "claim": {"token": token, "claimedAt": stamp},
        "consumedAt": stamp,
        "conditions": [condition("Claimed", True, "Claimed", f"claimed by {who}", now)],
    }
    if pod_name:
        status["consumedBy"] = {"name": pod_name}
    if evict:
        status["eviction"] = {
            "pod": evict,
            "result": "Pending",
            "message": "waiting for the placed pod to be stored",
            "time": stamp,
            "attempts": 0,
        }
        status["conditions"].append(condition("Evicted", False, "Pending", f"pod {evict} not evicted yet", now))
    return _status_write(placement, status, "Claimed", status["message"])


def _failed(placement: Mapping[str, Any], reason: str, now: datetime) -> StatusWrite:
    """The status of a placement that cannot be honoured."""
    status = dict(_mapping(placement.get("status")))
    status.update({"phase": "Failed", "message": reason})
    status["conditions"] = merge_condition(
        status.get("conditions"), condition("Claimed", False, "CannotHonour", reason, now)
    )
    return _status_write(placement, status, "CannotHonour", reason, warning=True)


def condition(kind: str, true: bool, reason: str, message: str, now: datetime) -> dict[str, Any]:
    """A metav1.Condition as the CRD's status.conditions holds it."""
    return {
        "type": kind,
        "status": "True" if true else "False",
        "lastTransitionTime": rfc3339(now),
        "reason": reason,
        "message": message,
    }


def merge_condition(conditions: object, new: dict[str, Any]) -> list[dict[str, Any]]:
    """Replace the condition of the same type (keeping its transition time when the status did not change)."""
    result: list[dict[str, Any]] = []
    replaced = False
    for old in conditions if isinstance(conditions, list) else []:
        if isinstance(old, dict) and old.get("type") == new["type"]:
            merged = dict(new)
            if old.get("status") == new["status"] and old.get("lastTransitionTime"):
                merged["lastTransitionTime"] = old["lastTransitionTime"]
            result.append(merged)
            replaced = True
        elif isinstance(old, dict):
            result.append(old)
    if not replaced:
        result.append(new)
    return result


def _containers(pod_spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Init containers then app containers (HAMi's order)."""
    found: list[dict[str, Any]] = []
    for key in ("initContainers", "containers"):
        items = pod_spec.get(key)
        if isinstance(items, list):
            found.extend(item for item in items if isinstance(item, dict))
    return found


def _gpu_container(container: Mapping[str, Any]) -> bool:
    """Whether the container asks for NVIDIA cards."""
    try:
        return container_request(container, hami_webhook=False) is not None
    except RequestError:
        return False


def _asked(container: Mapping[str, Any], key: str) -> object | None:
    """The container's own value of a resource, limits first then requests; None when it does not set it."""
    resources = _mapping(container.get("resources"))
    for section in ("limits", "requests"):
        values = _mapping(resources.get(section))
        if key in values:
            return values[key]
    return None


def _selects(placement: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether the placement's podSelector matches the labels; a malformed or empty selector matches nothing."""
    selector = _mapping(placement.get("spec")).get("podSelector")
    try:
        parsed = LabelSelector.from_dict(selector, require_nonempty=True)
    except SelectorError:
        return False
    return matches(parsed, labels)


def _open(placement: Mapping[str, Any]) -> bool:
    """Unclaimed, not finished, not being deleted."""
    status = _mapping(placement.get("status"))
    if _mapping(placement.get("metadata")).get("deletionTimestamp"):
        return False
    return str(status.get("phase") or "") in OPEN_PHASES and not _mapping(status.get("claim")).get("token")


def _claimed_already(placement: Mapping[str, Any]) -> bool:
    """A placement that a pod has claimed (whatever became of it since)."""
    status = _mapping(placement.get("status"))
    return bool(_mapping(status.get("claim")).get("token")) or status.get("phase") in CLAIMED_PHASES


def _age_key(placement: Mapping[str, Any]) -> tuple[str, str]:
    """Oldest first; RFC3339 UTC timestamps sort as text; the name breaks ties."""
    return (str(_mapping(placement.get("metadata")).get("creationTimestamp") or ""), _name(placement))


def _name(obj: Mapping[str, Any]) -> str:
    return str(_mapping(obj.get("metadata")).get("name") or "")


def _namespace(obj: Mapping[str, Any]) -> str:
    return str(_mapping(obj.get("metadata")).get("namespace") or "")


def _resource_version(obj: Mapping[str, Any]) -> str:
    return str(_mapping(obj.get("metadata")).get("resourceVersion") or "")


def _mapping(value: object) -> Mapping[str, Any]:
    """The value if it is a mapping, else an empty one: API objects may carry nulls anywhere."""
    return value if isinstance(value, Mapping) else {}


# After the claim: what the webhook's background loop does to a placement, also decided here, on plain data. ------

EVICTION_RETRY_FIRST_SECONDS = 5
EVICTION_RETRY_MAX_SECONDS = 60
DONE_EVICTIONS = frozenset({"Evicted", "NotFound"})


@dataclass(frozen=True)
class FollowUp:
    """A status to write next; with `evict`, the write is the lease of one eviction attempt of that pod."""

    write: StatusWrite
    evict: str = ""


def consumed_req_ids(placements: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], str]:
    """(namespace, reqID) -> name of the placement that consumed that reqID."""
    consumed: dict[tuple[str, str], str] = {}
    for placement in sorted(placements, key=_age_key):
        req_id = str(_mapping(placement.get("spec")).get("reqID") or "")
        if req_id and _claimed_already(placement):
            consumed.setdefault((_namespace(placement), req_id), _name(placement))
    return consumed


def follow_up(
    placement: Mapping[str, Any],
    claimed_pods: Mapping[tuple[str, str], Mapping[str, Any]],
    now: datetime,
    ttl_seconds: int,
    claim_grace_seconds: int,
    *,
    consumed: Mapping[tuple[str, str], str] | None = None,
) -> FollowUp | None:
    """The next step for one placement, given the stored pods by (namespace, claim token); None when none is due.

    Unclaimed while another placement of the namespace consumed its reqID (`consumed`, from
    `consumed_req_ids`): Failed. Unclaimed past the TTL: Expired. Claimed, and the pod carrying the token is
    stored: fill consumedBy. Claimed, but no such pod appeared within the grace period (its creation failed, or we
    stopped before answering): release the claim, back to Pending. Evicting with the pod stored: lease the next
    eviction attempt when its backoff is over, or give up once the TTL since the claim has passed.
    """
    status = dict(_mapping(placement.get("status")))
    phase = str(status.get("phase") or "")
    token = str(_mapping(status.get("claim")).get("token") or "")
    if _mapping(placement.get("metadata")).get("deletionTimestamp"):
        return None
    if not token:
        req_id = str(_mapping(placement.get("spec")).get("reqID") or "")
        owner = (consumed or {}).get((_namespace(placement), req_id))
        if phase in OPEN_PHASES and owner and owner != _name(placement):
            return FollowUp(_failed(placement, f"reqID already consumed by placement {owner}", now))
        created = _parse_time(_mapping(placement.get("metadata")).get("creationTimestamp"))
        if phase in OPEN_PHASES and created is not None and (now - created).total_seconds() > ttl_seconds:
            return FollowUp(
                _status_write(
                    placement,
                    _expired(status, ttl_seconds, now),
                    "Expired",
                    f"not claimed within {ttl_seconds}s",
                    warning=True,
                )
            )
        return None
    if phase not in CLAIMED_PHASES:
        return None
    claimed_at = _parse_time(_mapping(status.get("claim")).get("claimedAt")) or now
    consumed_by = _mapping(status.get("consumedBy"))
    if not consumed_by.get("uid"):
        pod = claimed_pods.get((_namespace(placement), token))
        if pod is not None:
            return FollowUp(_consumed_by(placement, status, pod))
        if (now - claimed_at).total_seconds() > claim_grace_seconds:
            return FollowUp(_released(placement, status, now))
        return None
    if phase != "Evicting":
        return None
    return _next_eviction(placement, status, claimed_at, now, ttl_seconds)


def eviction_outcome(placement: Mapping[str, Any], result: str, message: str, now: datetime) -> StatusWrite:
    """The status after one eviction attempt: Evicted or NotFound ends it (Consumed), Blocked or Failed retries."""
    status = dict(_mapping(placement.get("status")))
    eviction = dict(_mapping(status.get("eviction")))
    eviction.update({"result": result, "message": message, "time": rfc3339(now)})
    status["eviction"] = eviction
    done = result in DONE_EVICTIONS
    status["conditions"] = merge_condition(status.get("conditions"), condition("Evicted", done, result, message, now))
    if done:
        status["phase"] = "Consumed"
        status["message"] = f"consumed by pod {_mapping(status.get('consumedBy')).get('name', '')}; {message}"
    else:
        status["message"] = f"eviction of pod {eviction.get('pod', '')} {result.lower()}: {message}; will retry"
    reason = {"Evicted": "Evicted", "NotFound": "EvictionNotNeeded", "Blocked": "EvictionBlocked"}.get(
        result, "EvictionFailed"
    )
    return _status_write(placement, status, reason, message, warning=not done)


def _next_eviction(
    placement: Mapping[str, Any], status: dict[str, Any], claimed_at: datetime, now: datetime, ttl_seconds: int
) -> FollowUp | None:
    eviction = dict(_mapping(status.get("eviction")))
    pod = str(_mapping(placement.get("spec")).get("evictPod") or eviction.get("pod") or "")
    if (now - claimed_at).total_seconds() > ttl_seconds:
        last = str(eviction.get("message") or "no attempt succeeded")
        reason = f"eviction of pod {pod} did not succeed within {ttl_seconds}s: {last}"
        failed = dict(status, phase="Failed", message=reason)
        failed["eviction"] = dict(eviction, result="Failed", message=reason, time=rfc3339(now))
        failed["conditions"] = merge_condition(
            status.get("conditions"), condition("Evicted", False, "GaveUp", reason, now)
        )
        return FollowUp(_status_write(placement, failed, "EvictionGaveUp", reason, warning=True))
    attempts = int(eviction.get("attempts") or 0)
    last_time = _parse_time(eviction.get("time"))
    if attempts > 0 and last_time is not None:
        wait = min(EVICTION_RETRY_FIRST_SECONDS * 2 ** (attempts - 1), EVICTION_RETRY_MAX_SECONDS)
        if (now - last_time).total_seconds() < wait:
            return None
    eviction.update({"pod": pod, "attempts": attempts + 1, "time": rfc3339(now)})
    eviction.setdefault("result", "Pending")
    lease = dict(status, eviction=eviction)
    return FollowUp(
        _status_write(placement, lease, "EvictionAttempt", f"evicting pod {pod} (attempt {attempts + 1})"), evict=pod
    )


def _consumed_by(placement: Mapping[str, Any], status: dict[str, Any], pod: Mapping[str, Any]) -> StatusWrite:
    meta = _mapping(pod.get("metadata"))
    name, uid = str(meta.get("name") or ""), str(meta.get("uid") or "")
    updated = dict(status, consumedBy={"name": name, "uid": uid})
    if updated.get("phase") == "Consumed":
        updated["message"] = f"consumed by pod {name}"
    else:
        updated["message"] = f"claimed by pod {name}; evicting pod {_mapping(status.get('eviction')).get('pod', '')}"
    return _status_write(placement, updated, "Consumed", f"pod {name} ({uid}) is stored carrying the claim")


def _released(placement: Mapping[str, Any], status: dict[str, Any], now: datetime) -> StatusWrite:
    reason = "claim released: no pod carrying it was stored (its creation failed or was interrupted)"
    released = {
        key: value for key, value in status.items() if key not in ("claim", "consumedBy", "consumedAt", "eviction")
    }
    released.update({"phase": "Pending", "message": reason})
    released["conditions"] = [
        c
        for c in merge_condition(status.get("conditions"), condition("Claimed", False, "ClaimReleased", reason, now))
        if c.get("type") != "Evicted"
    ]
    return _status_write(placement, released, "ClaimReleased", reason, warning=True)


def _expired(status: dict[str, Any], ttl_seconds: int, now: datetime) -> dict[str, Any]:
    message = f"not claimed within {ttl_seconds}s"
    expired = dict(status, phase="Expired", message=message)
    expired["conditions"] = merge_condition(
        status.get("conditions"), condition("Claimed", False, "Expired", message, now)
    )
    return expired


def _status_write(
    placement: Mapping[str, Any], status: dict[str, Any], reason: str, message: str, warning: bool = False
) -> StatusWrite:
    return StatusWrite(
        namespace=_namespace(placement),
        name=_name(placement),
        resource_version=_resource_version(placement),
        status=status,
        reason=reason,
        message=message,
        warning=warning,
    )


def _parse_time(value: object) -> datetime | None:
    """An RFC3339 time as Kubernetes writes it, or None when absent or malformed."""
    try:
        return parse_time(value)
    except PlacementError:
        return None
