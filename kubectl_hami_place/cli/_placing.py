"""What `pin` and `evict --to-node` share: read a snapshot of the cluster, call `core.plan`, word its problems.

Nothing is written here: the verbs create the object only after `check_placement` returned without refusing.
"""

from __future__ import annotations

import secrets
import string
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kubectl_hami_place.cli._errors import Refused, UsageProblem
from kubectl_hami_place.cli._present import selector_text
from kubectl_hami_place.cli.output import Block, Table, Text
from kubectl_hami_place.core.cards import Card
from kubectl_hami_place.core.check import CardCheck
from kubectl_hami_place.core.errors import CardRefError, ModelError, SelectorError
from kubectl_hami_place.core.fit import FitReason
from kubectl_hami_place.core.placement import (
    PlacementSpec,
    placement_object,
    placements_from_objects,
    validate_spec,
)
from kubectl_hami_place.core.plan import (
    ClusterSnapshot,
    Plan,
    PlanReason,
    Problem,
    Workload,
    eviction_warnings,
    pending_warnings,
    plan,
    workload_from_pod,
    workload_from_request,
)
from kubectl_hami_place.core.refs import CardRef, parse_card_ref
from kubectl_hami_place.core.requests import card_request
from kubectl_hami_place.core.selectors import LabelSelector, matches, parse_selector_string
from kubectl_hami_place.core.usage import PodAllocation, pod_allocation
from kubectl_hami_place.kube import cluster, placements
from kubectl_hami_place.kube.client import Kube
from kubectl_hami_place.kube.errors import KubeForbidden, KubeNotFound

MANAGED_BY = {"app.kubernetes.io/managed-by": "kubectl-hami-place"}
REQ_ID_ALPHABET = string.ascii_lowercase + string.digits
REQ_ID_LENGTH = 12


@dataclass(frozen=True)
class Checked:
    """A placement that passed every check: the object to create, the plan, the pod placed, and the warnings."""

    namespace: str
    obj: dict[str, Any]
    node: str
    checks: tuple[CardCheck, ...]
    workload: Workload
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


def flag_workload(nums: int, memory: int | None, cores: int | None) -> Workload | None:
    """The pod given with --request-memory/--request-cores, or None when neither flag was given."""
    if memory is None and cores is None:
        return None
    try:
        request = card_request(nums, memreq=memory or 0, coresreq=cores)
    except ModelError as exc:
        raise UsageProblem(f"bad --request-memory/--request-cores: {exc}", "give whole MiB and 0..100") from exc
    return workload_from_request(request, "--request-memory/--request-cores", own_memory=bool(memory))


def resolve_workload(
    kube: Kube,
    namespace: str,
    selector: LabelSelector,
    *,
    nums: int,
    memory: int | None,
    cores: int | None,
) -> Workload:
    """The pod to place: from --request-* flags, else the pod template of a matching controller."""
    given = flag_workload(nums, memory, cores)
    if given is not None:
        return given
    for controller in cluster.list_controllers(kube, namespace):
        if controller.owner_kind in cluster.CONTROLLER_KINDS:
            continue
        labels = (controller.template.get("metadata") or {}).get("labels") or {}
        if matches(selector, labels):
            return workload_from_pod(controller.template, f"{controller.kind} {controller.name}", template=True)
    raise UsageProblem(
        f"no Deployment, ReplicaSet, StatefulSet or Job in namespace {namespace} has pods matching -l {selector}, "
        "so the pod's GPU request is unknown",
        "pass --request-memory MiB and --request-cores PCT",
    )


def read_snapshot(kube: Kube, node: str) -> ClusterSnapshot:
    """The node (when it exists) and every pod HAMi placed, cluster-wide: usage is counted whatever the namespace."""
    try:
        nodes = {node: cluster.get_node(kube, node)}
    except KubeNotFound:
        nodes = {}
    found: list[PodAllocation] = []
    for pod in cluster.list_pods(kube, None):
        try:
            allocation = pod_allocation(pod)
        except ModelError:
            continue
        if allocation is not None:
            found.append(allocation)
    return ClusterSnapshot(nodes, tuple(found))


def check_placement(
    kube: Kube,
    namespace: str,
    spec: PlacementSpec,
    *,
    name: str,
    workload: Workload,
    evicted_pod: dict[str, Any] | None,
) -> Checked:
    """Plans the pin against the cluster as it is now; raises Refused with one line per problem."""
    node = spec.node_name
    evict_allocation = None
    warnings: list[str] = []
    if evicted_pod is not None:
        try:
            evict_allocation = pod_allocation(evicted_pod)
        except ModelError:
            evict_allocation = None
        warnings.extend(eviction_warnings(evicted_pod, evict_allocation, node))
    pin = plan(spec, read_snapshot(kube, node), workload, evict=evict_allocation)
    evicting = spec.evict_pod or (_name(evicted_pod) if evicted_pod is not None else None)
    if not pin.ok:
        lines = [refusal_line(problem, pin, workload.source, evicting) for problem in pin.problems]
        raise Refused(list(dict.fromkeys(lines)))
    warnings.extend(pending_warnings(spec, namespace, name, _placements(kube, namespace), pin.cards))
    obj = placement_object(name, namespace, spec, labels=MANAGED_BY)
    return Checked(namespace, obj, node, pin.checks, workload, spec.evict_pod, tuple(warnings))


_HINTS = {
    PlanReason.NodeNotFound: "check the name (kubectl get nodes)",
    PlanReason.NoRegister: "pin to a node where HAMi's device plugin runs",
    PlanReason.CardNamedTwice: "give each card once",
    PlanReason.InvalidSpec: "fix the placement",
    PlanReason.InvalidGpuRequest: "fix its GPU resources",
    PlanReason.NoGpuRequest: "a placement pins GPU pods only",
    PlanReason.NodeNameSet: "drop spec.nodeName so that the scheduler places the pod",
    PlanReason.CardCountMismatch: "give one --gpu per card",
    PlanReason.ShareTooSmall: "raise the percent in --gpu",
    FitReason.RequestExceedsPercent: "raise the percent in --gpu or lower the pod's nvidia.com/gpumem",
}


def refusal_line(problem: Problem, pin: Plan, source: str, evict: str | None) -> str:
    """`gpu-1 on gpu-a100-0: CardInsufficientMemory: <numbers>; <what to do>`, or `<source>: <why>; <what to do>`."""
    node = pin.node
    status_hint = f"kubectl hami-place status {node}"
    check = next((c for c in pin.checks if c.ref == problem.ref), None)
    card = problem.card
    if problem.reason in _HINTS:
        hint = _HINTS[problem.reason]  # type: ignore[index]
    elif problem.reason == FitReason.UnknownCard:
        hint = f"list the node's cards ({status_hint})"
    elif problem.reason in (FitReason.CardUnhealthy, FitReason.CardCordoned, FitReason.CardNotNvidia):
        hint = f"pick another card ({status_hint})"
    elif check is not None and card is not None and check.memory_mib > card.devmem:
        hint = f"the card has {card.devmem} MiB in all; pick a bigger card or ask for less memory"
    elif evict:
        hint = f"it does not fit even once {evict} is evicted; pick another card ({status_hint}) or evict another pod"
    else:
        hint = f"pick another card ({status_hint}) or add --evict POD"
    if problem.ref is None:
        about = f"{source}: " if problem.reason in _POD_REASONS else ""
        return f"{about}{problem.message}; {hint}"
    return f"{problem.ref} on {node}: {problem.reason}: {_message(problem.message, card)}; {hint}"


_POD_REASONS = frozenset(
    {
        PlanReason.InvalidGpuRequest,
        PlanReason.NoGpuRequest,
        PlanReason.NodeNameSet,
        PlanReason.CardCountMismatch,
        PlanReason.ShareTooSmall,
    }
)


def _message(message: str, card: Card | None) -> str:
    """The core's message without the card label the line already names: `2048 MiB free, the pod asks 4096 MiB`."""
    if card is None or not message.startswith(card.label()):
        return message
    rest = message[len(card.label()) :].strip().lstrip(":").strip()
    return rest[len("has ") :] if rest.startswith("has ") else rest if rest.startswith("the ") else f"the card {rest}"


def _placements(kube: Kube, namespace: str) -> list[Any]:
    """Every placement the user may read: cluster-wide, else the namespace's."""
    try:
        items = placements.list_placements(kube, None)
    except KubeForbidden:
        items = placements.list_placements(kube, namespace)
    return placements_from_objects(items)


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
            "request": self.checked.workload.source,
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
            f"(its request from {self.checked.workload.source}):",
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
