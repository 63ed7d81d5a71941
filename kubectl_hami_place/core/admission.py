"""The pin decision: a parsed AdmissionReview plus a view of the cluster in, the patch and the claim to write out.

Pure on purpose: the server owns the clock, the claim token and every API call, so the rules below are tested on
plain data. Only the CREATE of a Pod with the configured schedulerName is considered. It claims the oldest open
placement of its namespace whose selector matches and whose `core.pin_check` finds no problem with this pod; a
placement with a problem is skipped for this pod with a warning and stays open (only the reconciler fails a
placement, and only for what no pod can change), as is one whose node kube-scheduler would keep the pod off (its
node selection, the node's taints), and one that evicts a pod for it on a node without the CPU, memory or pod room
it asks once that pod is gone (the eviction would free nothing it could use). The pod is pinned by a hostname node
affinity merged into its own, the placement's card UUIDs and, for `gpu-N/P`, each GPU container's part of the share;
when the placement evicts a pod, it is also gated (`ROOM_GATE`, and `ROOM_ANNOTATION` for API servers that drop the
gate) until the reconciler sees that pod gone (`lifecycle.room_made`).
While a rescue keeps room for another Pending pod (`core.reservation`), the kept cards are added to the pod's
`nvidia.com/nouse-gpuuuid`; a pod pinned by a placement to a kept card keeps its pin (a person's choice wins over
the controller's). Our annotations on an incoming pod are honoured only when they carry the named placement's stored
claim token (a reinvocation); otherwise the patch removes them and the pod goes the normal way. The server writes
the claim (guarded by the placement's resourceVersion) before it answers, so a placement is consumed once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import jsonpatch

from kubectl_hami_place.core.fields import as_mapping
from kubectl_hami_place.core.hami_config import HAMI_DEFAULTS, HamiConfig
from kubectl_hami_place.core.k8s_names import is_generate_name, is_object_name
from kubectl_hami_place.core.lifecycle import StatusWrite, age_key, claim_digest, claimed
from kubectl_hami_place.core.names import (
    CLAIM_ANNOTATION,
    CLAIM_DIGEST_LABEL,
    HOSTNAME_LABEL,
    NOUSE_GPUUUID_ANNOTATION,
    OUR_ANNOTATIONS,
    PLACEMENT_ANNOTATION,
    REQ_ID_ANNOTATION,
    ROOM_ANNOTATION,
    ROOM_GATE,
    SCHEDULER_NAME,
    USE_GPUUUID_ANNOTATION,
)
from kubectl_hami_place.core.node_resources import CountedPod
from kubectl_hami_place.core.pin_check import (
    PinVerdict,
    PinView,
    kept_off_node,
    node_room,
    pin_verdict,
    room_short,
    workload_from_pod,
)
from kubectl_hami_place.core.placement import Placement
from kubectl_hami_place.core.reservation import Reservation, barred_cards, kept_off
from kubectl_hami_place.core.reviews import Review, build_response
from kubectl_hami_place.core.selectors import matches

# Bounded values of Decision.result (a metrics label).
IGNORED = "ignored"
NO_PLACEMENT = "no_placement"
PINNED = "pinned"
REINVOKED = "reinvoked"
NOT_HONOURED = "not_honoured"
RESULTS = (IGNORED, NO_PLACEMENT, PINNED, REINVOKED, NOT_HONOURED)


@dataclass(frozen=True)
class Settings:
    """What the operator configures: the scheduler whose pods may be pinned, namespaces never touched."""

    scheduler_name: str = SCHEDULER_NAME
    excluded_namespaces: frozenset[str] = frozenset()
    hami: HamiConfig = HAMI_DEFAULTS
    """The cluster's HAMi device config: the resource names a pin reads and writes, and HAMi's defaults."""


@dataclass(frozen=True)
class AdmissionView:
    """What the decision may look at: placements (typed), nodes (API dicts), settings, the injected token and clock."""

    placements: Sequence[Placement]
    nodes: Mapping[str, Mapping[str, Any]]
    settings: Settings
    token: str
    now: datetime
    carried: frozenset[str] = frozenset()
    """Claim tokens a stored pod already carries: a new pod arriving with one is a copy, not a reinvocation."""
    pod_uids: Mapping[str, str] = field(default_factory=dict)
    """Name -> UID of the namespace's stored pods that placements name in evictPod: the identity a claim records."""
    evicted_pods: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Those stored pods by name (the pod uids name): what one gives back of its node's room once evicted."""
    node_pods: Mapping[str, tuple[Sequence[Mapping[str, Any]], Sequence[CountedPod]]] = field(default_factory=dict)
    """Node -> the pods its room counts (HAMi's as stored, the other schedulers' as counted), for the nodes of the
    placements that evict a pod, when the server keeps what they ask (its controller plans); a node absent: its room
    is not judged."""
    held_req_ids: Mapping[str, str] = field(default_factory=dict)
    """reqID -> the other placement whose guard holds it (learned from the API server): not claimable here."""
    reservations: Sequence[Reservation] = ()
    """The rooms kept for rescued Pending pods (as the cache read them; their deadlines are checked against `now`)."""


@dataclass(frozen=True)
class Decision:
    """The admission's patch and warnings, and the claim that must be written before it is sent."""

    uid: str
    result: str
    patch: tuple[dict[str, Any], ...] = ()
    warnings: tuple[str, ...] = ()
    claim: StatusWrite | None = None
    placement: str = ""
    unpinned: tuple[dict[str, Any], ...] = ()
    """The patch without the pin: only the removal of our annotations the pod was not entitled to."""

    def response(self) -> dict[str, Any]:
        """The AdmissionReview (admission.k8s.io/v1) to send back; a decision never denies a pod."""
        return build_response(self.uid, self.patch, self.warnings)

    def unchanged(self, warning: str) -> Decision:
        """The same admission without the pin and the claim: used when the claim cannot be written."""
        return Decision(uid=self.uid, result=NOT_HONOURED, patch=self.unpinned, warnings=(*self.warnings, warning))


def decide(review: Review, view: AdmissionView) -> Decision:
    """The admission of one parsed review against one view."""
    pod = review.pod
    meta = as_mapping(pod.get("metadata"))
    namespace = review.namespace
    if not considered(review, view.settings):
        return Decision(uid=review.uid, result=IGNORED)
    placements = [p for p in view.placements if p.namespace == namespace]
    nodes = PinView(view.nodes)
    annotations = review.annotations
    labels = {str(k): str(v) for k, v in as_mapping(meta.get("labels")).items()}
    if any(key in annotations for key in OUR_ANNOTATIONS) or CLAIM_DIGEST_LABEL in labels:
        holder = _claim_holder(placements, annotations, view.carried)
        if holder is not None:
            return _reinvoked(review, holder, nodes, view.settings.hami)
        pod = _without_our_annotations(pod)
        labels.pop(CLAIM_DIGEST_LABEL, None)
    candidates = sorted((p for p in placements if p.open and _selects(p, labels)), key=age_key)
    name = review.name or str(meta.get("name") or "")
    barred = barred_cards(view.reservations, view.now, f"{namespace}/{name}")
    kept = _kept_off(pod, barred)
    unpinned = _diff(review.pod, kept)
    if not (is_object_name(name) if name else is_generate_name(meta.get("generateName"))):
        # Mutating admission runs before the API server validates the name (or generates one from generateName): it
        # refuses this pod after us, and a claim would hold the placement for a pod that never exists.
        candidates = []
    if not candidates:
        return Decision(uid=review.uid, result=NO_PLACEMENT, patch=unpinned, warnings=_kept_warning(barred))
    workload = workload_from_pod(pod, "the pod", config=view.settings.hami)
    warnings: list[str] = []
    for placement in candidates:
        owner = next((o.name for o in placements if o.spec.req_id == placement.spec.req_id and o.claimed), None)
        if owner is not None:
            warnings.append(f"hami-place: placement {placement.name} skipped: reqID already consumed by {owner}")
            continue
        guard_holder = view.held_req_ids.get(placement.spec.req_id)
        if guard_holder is not None:
            warnings.append(f"hami-place: placement {placement.name} skipped: reqID already held by {guard_holder}")
            continue
        pin = pin_verdict(placement.spec, nodes, workload)
        if not pin.ok:
            warnings.append(f"hami-place: placement {placement.name} skipped for this pod: {pin.summary()}")
            continue
        off = kept_off_node(workload, view.nodes.get(pin.node))
        if off:
            # Pinned, the pod would wait there for good (and its evictPod would be evicted for nothing).
            warnings.append(
                f"hami-place: placement {placement.name} skipped for this pod: {off}, so kube-scheduler would leave "
                "it Pending there"
            )
            continue
        evict_uid = view.pod_uids.get(placement.spec.evict_pod or "", "")
        gated = bool(placement.spec.evict_pod and evict_uid)
        counted = view.node_pods.get(pin.node) if gated else None
        room = node_room(view.nodes.get(pin.node), counted[0], workload, counted[1]) if counted else None
        short = room_short(workload, pin.node, room, view.evicted_pods.get(placement.spec.evict_pod or ""))
        if short is not None:
            warnings.append(
                f"hami-place: placement {placement.name} skipped for this pod: {short.message}, even with pod "
                f"{placement.spec.evict_pod} evicted, so it would stay Pending there"
            )
            continue
        mutated = _kept_off(
            _pinned(pod, pin, placement, view.token, gated=gated), [c for c in barred if c not in pin.uuids]
        )
        claim = claimed(placement, name, view.token, view.now, evict_uid)
        return Decision(
            uid=review.uid,
            result=PINNED,
            patch=_diff(review.pod, mutated),
            warnings=tuple(warnings),
            claim=None if review.dry_run else claim,
            placement=placement.name,
            unpinned=unpinned,
        )
    # Every candidate skipped said why in a warning.
    warnings.append("hami-place: the pod is admitted without a pin")
    return Decision(uid=review.uid, result=NOT_HONOURED, patch=unpinned, warnings=(*warnings, *_kept_warning(barred)))


def claimed_by_annotations(review: Review) -> tuple[str, str]:
    """(placement, token) an incoming pod's annotations claim, ('', '') when none: the server checks them first.

    A placement name that is not an object name claims nothing (no stored placement has it): it never reaches the
    API server, where it would be a path (`../../../api/v1/pods`) rather than a name."""
    token = str(review.annotations.get(CLAIM_ANNOTATION) or "")
    name = review.annotations.get(PLACEMENT_ANNOTATION)
    return (name, token) if token and is_object_name(name) else ("", "")


def considered(review: Review, settings: Settings) -> bool:
    """Only the creation of a Pod with our scheduler, outside the excluded namespaces, may claim a placement (the
    server reads nothing from the API server for any other review)."""
    namespace = review.namespace
    if review.operation != "CREATE" or review.kind != "Pod" or review.group or review.sub_resource:
        return False
    if namespace in settings.excluded_namespaces or not namespace:
        return False
    return as_mapping(review.pod.get("spec")).get("schedulerName") == settings.scheduler_name


def _selects(placement: Placement, labels: Mapping[str, str]) -> bool:
    """Whether the placement's podSelector matches the labels; an empty selector matches nothing."""
    return not placement.spec.pod_selector.empty and matches(placement.spec.pod_selector, labels)


def _claim_holder(
    placements: Sequence[Placement], annotations: Mapping[str, Any], carried: frozenset[str]
) -> Placement | None:
    """The placement whose claim this pod is being admitted for (a reinvocation), None for anything else.

    The token must be the placement's stored claim token, and no stored pod may carry it yet: a reinvocation
    happens before the pod is stored, so a pod arriving with a token some stored pod carries is a copy.
    """
    name = str(annotations.get(PLACEMENT_ANNOTATION) or "")
    token = str(annotations.get(CLAIM_ANNOTATION) or "")
    found = next((p for p in placements if p.name == name), None)
    if found is None or not token or found.status.claim_token != token or token in carried:
        return None
    return found


def _reinvoked(review: Review, placement: Placement, nodes: PinView, config: HamiConfig) -> Decision:
    """A pod carrying its placement's claim (a reinvocation): re-apply that pin, claim nothing."""
    token = str(review.annotations.get(CLAIM_ANNOTATION))
    pin = pin_verdict(placement.spec, nodes, workload_from_pod(review.pod, "the pod", config=config))
    if not pin.cards:
        return Decision(uid=review.uid, result=REINVOKED, placement=placement.name)
    mutated = _pinned(review.pod, pin, placement, token)
    return Decision(uid=review.uid, result=REINVOKED, patch=_diff(review.pod, mutated), placement=placement.name)


def _without_our_annotations(pod: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of the pod without our annotations and claim-digest label (copied from a pinned pod, or forged): it is
    not pinned by them."""
    stripped = dict(pod)
    metadata = _own(stripped, "metadata")
    for key, names in (("annotations", OUR_ANNOTATIONS), ("labels", (CLAIM_DIGEST_LABEL,))):
        if isinstance(metadata.get(key), dict):
            found = _own(metadata, key)
            for name in names:
                found.pop(name, None)
    return stripped


def _kept_off(pod: Mapping[str, Any], cards: Sequence[str]) -> Mapping[str, Any]:
    """The pod with `cards` (kept for a rescued pod) added to its `nvidia.com/nouse-gpuuuid`; itself when none."""
    if not cards:
        return pod
    kept = dict(pod)
    annotations = _own(_own(kept, "metadata"), "annotations")
    own = annotations.get(NOUSE_GPUUUID_ANNOTATION)
    annotations[NOUSE_GPUUUID_ANNOTATION] = kept_off(own if isinstance(own, str) else None, cards)
    return kept


def _kept_warning(cards: Sequence[str]) -> tuple[str, ...]:
    """What the pod is told when it is kept off cards a rescue keeps (not for whom: that pod may be in another
    namespace)."""
    if not cards:
        return ()
    return (
        f"hami-place: {len(cards)} card(s) are kept for a rescued pod for a while; "
        f"{NOUSE_GPUUUID_ANNOTATION} keeps this pod off them",
    )


def _pinned(
    pod: Mapping[str, Any], pin: PinVerdict, placement: Placement, token: str, *, gated: bool = False
) -> dict[str, Any]:
    """A copy of the pod pinned to the node and cards, `gated` by ROOM_GATE and ROOM_ANNOTATION while the placement
    evicts; applying it to its own result changes nothing."""
    mutated = dict(pod)
    metadata = _own(mutated, "metadata")
    annotations = _own(metadata, "annotations")
    annotations[USE_GPUUUID_ANNOTATION] = ",".join(pin.uuids)
    annotations[PLACEMENT_ANNOTATION] = placement.name
    annotations[REQ_ID_ANNOTATION] = placement.spec.req_id
    annotations[CLAIM_ANNOTATION] = token
    _own(metadata, "labels")[CLAIM_DIGEST_LABEL] = claim_digest(token)
    spec = _own(mutated, "spec")
    _require_hostname(spec, pin.node)
    if gated:
        _gate(spec)
        annotations[ROOM_ANNOTATION] = f"waiting for pod {placement.spec.evict_pod} to go"
    for patch in pin.patches:
        resources = _own(_own_container(spec, patch.position), "resources")
        _own(resources, "limits")[pin.config.resource_memory_percentage_name] = str(patch.percent)
        if patch.drop_cores:
            for section in ("limits", "requests"):
                if isinstance(resources.get(section), dict):
                    _own(resources, section).pop(pin.config.resource_core_name, None)
    return mutated


def _require_hostname(spec: dict[str, Any], node: str) -> None:
    """AND `kubernetes.io/hostname In [node]` into every required node selector term (a new term if there is none)."""
    requirement = {"key": HOSTNAME_LABEL, "operator": "In", "values": [node]}
    node_affinity = _own(_own(spec, "affinity"), "nodeAffinity")
    required = _own(node_affinity, "requiredDuringSchedulingIgnoredDuringExecution")
    terms = required.get("nodeSelectorTerms")
    # A term that is no object (only a forged review holds one) becomes a term with the hostname alone.
    owned = [dict(term) if isinstance(term, dict) else {} for term in terms] if isinstance(terms, list) else []
    required["nodeSelectorTerms"] = owned or [{}]
    for term in required["nodeSelectorTerms"]:
        expressions = term.get("matchExpressions")
        expressions = list(expressions) if isinstance(expressions, list) else []
        term["matchExpressions"] = expressions
        if requirement not in expressions:
            expressions.append(requirement)


def _gate(spec: dict[str, Any]) -> None:
    """Add ROOM_GATE to the pod's scheduling gates, once (a reinvocation finds it there)."""
    gates = spec.get("schedulingGates")
    gates = list(gates) if isinstance(gates, list) else []
    spec["schedulingGates"] = gates
    if {"name": ROOM_GATE} not in gates:
        gates.append({"name": ROOM_GATE})


def _own_container(spec: dict[str, Any], position: int) -> dict[str, Any]:
    """A copy of the container at `position` put in its place, init containers first (HAMi's order, and the pin
    check's positions)."""
    for key in ("initContainers", "containers"):
        items = spec.get(key)
        items = list(items) if isinstance(items, list) else []
        if position < len(items):
            spec[key] = items
            item = items[position]
            items[position] = dict(item) if isinstance(item, dict) else {}
            return items[position]
        position -= len(items)
    return {}


_SAME = "\x00hami-place: the same in both"
"""What `_pruned` puts where the two pods agree: no JSON a review carries holds a NUL."""


def _diff(before: Mapping[str, Any], after: Mapping[str, Any]) -> tuple[dict[str, Any], ...]:
    """The JSON patch from one pod to the other, by diff (none when they are equal), of the parts where they differ:
    jsonpatch serializes every item of every list it is given, a forged review's million tolerations for 5 s."""
    if before == after:
        return ()
    old, new = _pruned(dict(before), dict(after))
    return tuple(jsonpatch.JsonPatch.from_diff(old, new).patch)


def _pruned(before: dict[str, Any], after: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Copies of both with each member equal in both (a C-speed check) replaced by _SAME in both, down the members
    that are objects in both. The diff compares such objects member by member, never writing one whole, and lists
    are left whole (its matching of their items could pair one with another's), so what it writes is the pods' own."""
    old, new = dict(before), dict(after)
    for key in before.keys() & after.keys():
        was, now = before[key], after[key]
        if was == now:
            old[key] = new[key] = _SAME
        elif isinstance(was, dict) and isinstance(now, dict):
            old[key], new[key] = _pruned(was, now)
    return old, new


def _own(parent: dict[str, Any], key: str) -> dict[str, Any]:
    """A copy of parent[key] put in its place (a new dict where it is none or no object): the pod is copied only
    along the paths a decision changes, where a deep copy walked all of it."""
    value = parent.get(key)
    owned = dict(value) if isinstance(value, dict) else {}
    parent[key] = owned
    return owned
