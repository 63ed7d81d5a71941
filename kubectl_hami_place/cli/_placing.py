"""What `pin` and `evict --to-node` share: read the cluster, run every check, refuse or build the placement.

Nothing is written here: the verbs create the object only after `check_placement` returned without refusing.
"""

from __future__ import annotations

import secrets
import string
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from kubectl_hami_place.cli._errors import Refused, UsageProblem
from kubectl_hami_place.cli._present import selector_text
from kubectl_hami_place.cli.output import Block, Table, Text
from kubectl_hami_place.core.allocations import ALLOCATED_ANNOTATION
from kubectl_hami_place.core.cards import Card, node_cards
from kubectl_hami_place.core.check import CardCheck, card_count_mismatch, check_pin
from kubectl_hami_place.core.errors import CardRefError, ModelError, PlacementError, SelectorError
from kubectl_hami_place.core.fit import USE_UUID, FitReason, cordoned_cards
from kubectl_hami_place.core.placement import (
    PlacementSpec,
    placement_from_object,
    placement_object,
    validate_spec,
)
from kubectl_hami_place.core.refs import CardRef, parse_card_ref, resolve
from kubectl_hami_place.core.requests import CardRequest, card_request, pod_requests
from kubectl_hami_place.core.selectors import LabelSelector, matches, may_overlap, parse_selector_string
from kubectl_hami_place.core.usage import PodAllocation, card_usage, pod_allocation
from kubectl_hami_place.kube import cluster, placements
from kubectl_hami_place.kube.client import Kube
from kubectl_hami_place.kube.errors import KubeForbidden, KubeNotFound

MANAGED_BY = {"app.kubernetes.io/managed-by": "kubectl-hami-place"}
REQ_ID_ALPHABET = string.ascii_lowercase + string.digits
REQ_ID_LENGTH = 12
# The pod template's labels a controller adds per revision: a selector must not pin to one revision by accident.
_REVISION_LABELS = ("pod-template-hash", "controller-revision-hash", "statefulset.kubernetes.io/pod-name")


@dataclass(frozen=True)
class RequestSource:
    """The per-card request of the pod to place and where it came from (flags, a controller, a pod)."""

    requests: tuple[CardRequest, ...]
    source: str
    annotations: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Checked:
    """A placement that passed every check: the object to create, the card verdicts, and the warnings."""

    namespace: str
    obj: dict[str, Any]
    node: str
    checks: tuple[CardCheck, ...]
    request: RequestSource
    evict: str | None
    warnings: tuple[str, ...]


def parse_selector(text: str) -> LabelSelector:
    """`-l` as a non-empty selector, or a usage error."""
    try:
        return parse_selector_string(text, require_nonempty=True)
    except SelectorError as exc:
        raise UsageProblem(
            f"bad selector -l {text!r}: {exc}", "use kubectl's syntax, e.g. -l app=train,tier=gpu"
        ) from exc


def parse_gpus(values: Sequence[str]) -> tuple[CardRef, ...]:
    """`--gpu` values as card references, or a usage error naming the bad one."""
    if not values:
        raise UsageProblem("no card given", "pass --gpu gpu-N (or gpu-N/P, or a card UUID) once per card")
    refs = []
    for value in values:
        try:
            refs.append(parse_card_ref(value))
        except CardRefError as exc:
            raise UsageProblem(
                f"bad --gpu {value!r}: {exc}", "see the node's cards with kubectl hami-place status"
            ) from exc
    return tuple(refs)


def new_req_id() -> str:
    """A random request id, unguessable enough that two pins never collide."""
    return "".join(secrets.choice(REQ_ID_ALPHABET) for _ in range(REQ_ID_LENGTH))


def build_spec(
    req_id: str | None, selector: LabelSelector, node: str, refs: tuple[CardRef, ...], evict: str | None
) -> PlacementSpec:
    """The spec with the schema's rules checked locally (usage error), so the server only sees valid objects."""
    spec = PlacementSpec(
        req_id=req_id if req_id is not None else new_req_id(),
        pod_selector=selector,
        node_name=node,
        gpu_devices=refs,
        evict_pod=evict,
    )
    problem = validate_spec(spec)
    if problem:
        flag = "--req-id" if "reqID" in problem else "--evict" if "evictPod" in problem else "--gpu"
        raise UsageProblem(problem, f"fix {flag}")
    return spec


def placement_name(given: str | None, spec: PlacementSpec) -> str:
    """The object name: given, else `pin-<reqID>` when the reqID makes a valid name, else `pin-<random>`."""
    if given:
        return given
    token = spec.req_id.lower()
    if not all(c in REQ_ID_ALPHABET or c == "-" for c in token) or len(token) > 200 or token.endswith("-"):
        token = new_req_id()
    return f"pin-{token}"


def flag_request(nums: int, memory: int | None, cores: int | None) -> RequestSource | None:
    """The request given with --request-memory/--request-cores, or None when neither flag was given."""
    if memory is None and cores is None:
        return None
    try:
        request = card_request(nums, memreq=memory or 0, coresreq=cores)
    except ModelError as exc:
        raise UsageProblem(f"bad --request-memory/--request-cores: {exc}", "give whole MiB and 0..100") from exc
    return RequestSource((request,), "--request-memory/--request-cores")


def template_request(source: str, template: dict[str, Any]) -> RequestSource:
    """What a pod made from this template (or this pod) asks of each card; refused when it asks no GPU."""
    try:
        found = tuple(r for r in pod_requests(template.get("spec") or {}) if r is not None)
    except ModelError as exc:
        raise Refused([f"{source}: {exc}; fix its GPU resources"]) from exc
    if not found:
        raise Refused([f"{source}: its pods ask no nvidia.com/gpu; a placement pins GPU pods only"])
    return RequestSource(found, source, steering_annotations(template))


def resolve_request(
    kube: Kube,
    namespace: str,
    selector: LabelSelector,
    *,
    nums: int,
    memory: int | None,
    cores: int | None,
) -> RequestSource:
    """The pod's per-card request: from --request-* flags, else the pod template of a matching controller."""
    given = flag_request(nums, memory, cores)
    if given is not None:
        return given
    for controller in cluster.list_controllers(kube, namespace):
        if controller.owner_kind in cluster.CONTROLLER_KINDS:
            continue
        labels = (controller.template.get("metadata") or {}).get("labels") or {}
        if matches(selector, labels):
            return template_request(f"{controller.kind} {controller.name}", controller.template)
    raise UsageProblem(
        f"no Deployment, ReplicaSet, StatefulSet or Job in namespace {namespace} has pods matching -l {selector}, "
        "so the pod's GPU request is unknown",
        "pass --request-memory MiB and --request-cores PCT",
    )


def steering_annotations(pod_or_template: dict[str, Any]) -> dict[str, str]:
    """The pod's annotations that steer HAMi's card choice, minus the card list the webhook will overwrite."""
    annotations = (pod_or_template.get("metadata") or {}).get("annotations") or {}
    return {str(k): str(v) for k, v in annotations.items() if k != USE_UUID}


def check_placement(
    kube: Kube,
    namespace: str,
    spec: PlacementSpec,
    *,
    name: str,
    request: RequestSource,
    evicted_pod: dict[str, Any] | None,
) -> Checked:
    """Runs every check of a placement against the cluster as it is now; raises Refused with one line per failure."""
    node = spec.node_name
    try:
        node_obj = cluster.get_node(kube, node)
    except KubeNotFound as exc:
        raise Refused([f"node {node} not found; check the name (kubectl get nodes)"]) from exc
    try:
        cards = node_cards(node_obj)
    except ModelError as exc:
        raise Refused([f"{exc}; pin to a node where HAMi's device plugin runs"]) from exc
    if not cards:
        raise Refused([f"node {node} registers no cards; pin to a node where HAMi's device plugin runs"])
    reasons: list[str] = []
    warnings: list[str] = []
    mismatch = card_count_mismatch(request.requests, spec.gpu_devices)
    if mismatch:
        reasons.append(f"{request.source}: {mismatch}")
    allocations = _allocations(kube)
    usage = card_usage(cards, allocations, node=node)
    evict_allocation = pod_allocation(evicted_pod) if evicted_pod is not None else None
    if evicted_pod is not None:
        warnings.extend(_evict_warnings(evicted_pod, evict_allocation, node))
    evicting = spec.evict_pod or (_name(evicted_pod) if evicted_pod is not None else None)
    checks: list[CardCheck] = []
    for per_card in request.requests:
        checks = check_pin(
            cards,
            usage,
            spec.gpu_devices,
            per_card,
            evict_allocation if evict_allocation is not None and evict_allocation.node == node else None,
            node=node,
            annotations=request.annotations,
            cordoned=cordoned_cards((node_obj.get("metadata") or {}).get("annotations")),
        )
        for check in checks:
            if not check.ok:
                reasons.append(refusal_line(check, node, evicting))
    if len(request.requests) > 1:
        warnings.append(
            f"{request.source} has {len(request.requests)} GPU containers; each was checked alone, "
            "their sum on a shared card is checked by HAMi when the pod schedules"
        )
    if reasons:
        raise Refused(list(dict.fromkeys(reasons)))
    warnings.extend(_pending_warnings(kube, namespace, spec, name, cards))
    obj = placement_object(name, namespace, spec, labels=MANAGED_BY)
    return Checked(namespace, obj, node, tuple(checks), request, spec.evict_pod, tuple(warnings))


def refusal_line(check: CardCheck, node: str, evict: str | None) -> str:
    """`gpu-1 on gpu-a100-0: CardInsufficientMemory: <numbers>; <what to do>`."""
    reason = check.reason.value if check.reason is not None else "Refused"
    status_hint = f"kubectl hami-place status {node}"
    if check.reason is FitReason.UnknownCard:
        hint = f"list the node's cards ({status_hint})"
    elif check.reason is FitReason.RequestExceedsPercent:
        hint = "raise the percent in --gpu or lower the pod's nvidia.com/gpumem"
    elif check.reason in (FitReason.CardUnhealthy, FitReason.CardCordoned, FitReason.CardNotNvidia):
        hint = f"pick another card ({status_hint})"
    elif check.card is not None and check.memory_mib > check.card.devmem:
        hint = f"the card has {check.card.devmem} MiB in all; pick a bigger card or ask for less memory"
    elif evict:
        hint = f"it does not fit even once {evict} is evicted; pick another card ({status_hint}) or evict another pod"
    else:
        hint = f"pick another card ({status_hint}) or add --evict POD"
    return f"{check.ref} on {node}: {reason}: {_message(check)}; {hint}"


def _message(check: CardCheck) -> str:
    """The core's message without the card label the line already names: `2048 MiB free, the pod asks 4096 MiB`."""
    if check.card is None or not check.message.startswith(check.card.label()):
        return check.message
    rest = check.message[len(check.card.label()) :].strip()
    return rest[len("has ") :] if rest.startswith("has ") else f"the card {rest}"


def _allocations(kube: Kube) -> list[PodAllocation]:
    """Every pod HAMi placed, cluster-wide: usage is counted per card whatever the pod's namespace."""
    found = []
    for pod in cluster.list_pods(kube, None):
        try:
            allocation = pod_allocation(pod)
        except ModelError:
            continue
        if allocation is not None:
            found.append(allocation)
    return found


def _evict_warnings(pod: dict[str, Any], allocation: PodAllocation | None, node: str) -> list[str]:
    """Warn when evicting this pod will not free anything on the target node."""
    name = _name(pod)
    where = allocation.node if allocation is not None else (pod.get("spec") or {}).get("nodeName")
    if allocation is None:
        return [f"pod {name} holds no HAMi card (no {ALLOCATED_ANNOTATION}); evicting it frees no card"]
    if where != node:
        return [f"pod {name} runs on {where or 'no node'}, not on {node}; evicting it frees nothing there"]
    return []


def _pending_warnings(kube: Kube, namespace: str, spec: PlacementSpec, name: str, cards: Sequence[Card]) -> list[str]:
    """Other unclaimed placements: a selector that may match the same pods, or the same cards not yet counted."""
    try:
        items = placements.list_placements(kube, None)
    except KubeForbidden:
        items = placements.list_placements(kube, namespace)
    mine = _uuids(spec.gpu_devices, cards)
    warnings = []
    for item in items:
        try:
            other = placement_from_object(item)
        except PlacementError:
            continue
        if (other.namespace, other.name) == (namespace, name) or not other.unclaimed:
            continue
        if other.namespace == namespace and may_overlap(spec.pod_selector, other.spec.pod_selector):
            warnings.append(
                f"placement {other.name} (Pending, -l {other.spec.pod_selector}) may match the same pods as -l "
                f"{spec.pod_selector}; the first matching pod claims only one of them"
            )
        shared = mine & _uuids(other.spec.gpu_devices, cards) if other.spec.node_name == spec.node_name else set()
        if shared:
            names = ", ".join(card.name for card in cards if card.uuid in shared)
            warnings.append(
                f"placement {other.key} (Pending) also pins a pod to {names} on {spec.node_name}; that pod does not "
                "exist yet, so its share was not counted"
            )
    return warnings


def _uuids(refs: Sequence[CardRef], cards: Sequence[Card]) -> set[str]:
    """The UUIDs of the references that name a card of the node."""
    found = set()
    for ref in refs:
        try:
            found.add(resolve(ref, cards).uuid)
        except CardRefError:
            continue
    return found


def _name(obj: dict[str, Any]) -> str:
    """metadata.name."""
    return str((obj.get("metadata") or {}).get("name", ""))


@dataclass(frozen=True)
class PlacementResult:
    """What was created (or would be, under dry-run) and what the placed pod will get on each card."""

    checked: Checked
    dry_run: str
    obj: dict[str, Any]
    evicted: str | None = None

    def cards(self) -> list[dict[str, Any]]:
        """Per card: reference, UUID, model, memory and cores the pod gets, verdict now and after eviction."""
        rows = []
        for check in self.checked.checks:
            card: Card | None = check.card
            rows.append(
                {
                    "ref": str(check.ref),
                    "uuid": card.uuid if card else "",
                    "index": card.index if card else None,
                    "model": card.type if card else "",
                    "memoryMiB": check.memory_mib,
                    "cores": check.request.coresreq,
                    "fitsNow": check.fits_now,
                    "fitsAfterEviction": check.fits_after_eviction,
                }
            )
        return rows

    def to_data(self) -> Any:
        """The placement object plus the per-card outcome and warnings."""
        return {
            "placement": self.obj,
            "dryRun": self.dry_run,
            "request": self.checked.request.source,
            "cards": self.cards(),
            "evicted": self.evicted,
            "warnings": list(self.checked.warnings),
        }

    def to_blocks(self) -> list[Block]:
        """A created line, what the pod gets on each card, what happens next."""
        metadata = self.obj.get("metadata") or {}
        spec = self.obj.get("spec") or {}
        suffix = "" if self.dry_run == "none" else f" ({self.dry_run} dry run)"
        header = [
            f"hamipodplacement {metadata.get('namespace')}/{metadata.get('name')} created{suffix} "
            f"(reqID {spec.get('reqID')})",
            f"The next pod matching -l {selector_text(spec.get('podSelector'))} in namespace "
            f"{metadata.get('namespace')} goes to node {self.checked.node} "
            f"(its request from {self.checked.request.source}):",
        ]
        rows = []
        for card in self.cards():
            if card["fitsAfterEviction"] is None or card["fitsNow"]:
                verdict = "fits now"
            else:
                verdict = "fits once the evicted pod is gone"
            rows.append(
                (card["ref"], card["uuid"], card["model"], f"{card['memoryMiB']} MiB", f"{card['cores']}%", verdict)
            )
        blocks: list[Block] = [
            Text(tuple(header)),
            Table(columns=("Card", "UUID", "Model", "Memory", "Cores", "Verdict"), rows=tuple(rows)),
        ]
        if self.checked.evict and not self.evicted:
            blocks.append(Text((f"Pod {self.checked.evict} will be evicted once a pod claims the placement.",)))
        if self.evicted:
            blocks.append(Text((f"pod {self.checked.namespace}/{self.evicted} evicted{suffix}",)))
        return blocks
