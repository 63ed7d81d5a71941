"""The one check of a pin: a placement's spec, a view of the cluster and the pod in; cards, patch, problems out.

`pin`, `evict --to-node` and the webhook all call `pin_verdict`, so the CLI refuses exactly what the webhook would not
honour. It checks the whole pod as HAMi does (docs/architecture.md, "Where each rule lives"):

- the placement itself: a valid spec, the node, its register, every card resolvable, named once and not in MIG
  mode (not modelled);
- the node's allocatable card count, when listed, above 0 (else HAMi's health check cycles the node and the kubelet
  refuses the pod);
- the pod: GPU resources readable, no `spec.nodeName`, score weights HAMi can read, every GPU container asking as
  many cards as are named;
- `gpu-N/P`: P% of each card is the share of the whole pod. App containers that ask no memory of their own split
  what the others leave of it (each at least 1%, the first ones take the remainder), init containers (which run
  alone) get all of it; the pod must fit its share on every card;
- `nvidia.com/numa-bind`: a pod that asks it cannot have cards of two NUMA nodes (HAMi's `NumaNotFit`), and under
  `topology-aware` (its annotation or the cluster's default) only cards of the one NUMA node HAMi's walk keeps;
- fit: the pinned containers fitted one after another on each card (`core.check`), against the card's usage
  (now and once the evicted pod is gone) when the view has the allocations, against the empty card otherwise.

HAMi's webhook gives a container that asks a card count but no cores and no memory `nvidia.com/gpucores: 100`,
which makes it exclusive. A share below 100% is not exclusive, so the patch drops a `gpucores: 100` that HAMi's
webhook may already have added, and HAMi's scheduler then gives the container its `defaultCores`
(`GenerateResourceRequests`, `pkg/device/nvidia/device.go`): the check predicts those cores (0 with HAMi's chart),
so a card without them free is refused with `CardInsufficientCore`, as HAMi would refuse it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from kubectl_hami_place.core.allocations import ALLOCATED_ANNOTATION
from kubectl_hami_place.core.attach_limits import NO_REFS, AttachRefs, attach_needs, attach_refs
from kubectl_hami_place.core.cards import Card, node_cards
from kubectl_hami_place.core.check import CardCheck, Placed, check_card
from kubectl_hami_place.core.errors import CardRefError, RegisterError, RequestError
from kubectl_hami_place.core.fields import as_mapping
from kubectl_hami_place.core.fit import (
    NUMA_BIND,
    FitReason,
    cordoned_cards,
    numa_bind,
    scoring_weights,
    topology_numa,
)
from kubectl_hami_place.core.hami_config import HAMI_DEFAULTS, HamiConfig
from kubectl_hami_place.core.names import OUR_ANNOTATIONS, USE_GPUUUID_ANNOTATION
from kubectl_hami_place.core.node_resources import (
    CountedPod,
    Resources,
    attach_rooms,
    bound_pods,
    counted_pod,
    node_remainders,
    pod_resources,
    shortfall,
    with_attach_needs,
)
from kubectl_hami_place.core.node_selection import kept_off
from kubectl_hami_place.core.placement import Placement, PlacementSpec, validate_spec
from kubectl_hami_place.core.refs import CardRef, resolve, uuids_named
from kubectl_hami_place.core.requests import CardRequest, container_request, memory_for, parse_quantity
from kubectl_hami_place.core.selectors import may_overlap
from kubectl_hami_place.core.usage import CardUsage, PodAllocation, card_usage, release

if TYPE_CHECKING:
    from kubectl_hami_place.core.volumes import Volumes


class Scope(StrEnum):
    """Whom a problem is about: the webhook skips a placement for any of them, the reconciler fails it on Placement."""

    Placement = "Placement"
    """The placement can never be honoured (bad spec, node gone, card missing)."""
    Card = "Card"
    """The card's state now (unhealthy, cordoned, in use, no register yet): it may change."""
    Pod = "Pod"
    """This pod does not suit the placement; another pod may."""


class PinReason(StrEnum):
    """The pin check's own reasons, beside HAMi's fit reasons (`core.fit.FitReason`)."""

    InvalidSpec = "InvalidSpec"
    NodeNotFound = "NodeNotFound"
    NoRegister = "NoRegister"
    CardNamedTwice = "CardNamedTwice"
    InvalidGpuRequest = "InvalidGpuRequest"
    NoGpuRequest = "NoGpuRequest"
    NodeNameSet = "NodeNameSet"
    PrivilegedContainer = "PrivilegedContainer"
    NoAllocatableGpu = "NoAllocatableGpu"
    InvalidScoringWeights = "InvalidScoringWeights"
    CardCountMismatch = "CardCountMismatch"
    ShareTooSmall = "ShareTooSmall"
    KeptOffNode = "KeptOffNode"
    NodeResourcesShort = "NodeResourcesShort"


_CARD_STATE = frozenset({FitReason.CardUnhealthy, FitReason.CardCordoned, FitReason.CardNotNvidia})


@dataclass(frozen=True)
class Problem:
    """Why the placement cannot take this pod: a reason name, one line, whom it is about, the card if one."""

    reason: str
    message: str
    scope: Scope
    ref: CardRef | None = None
    card: Card | None = None


@dataclass(frozen=True)
class GpuContainer:
    """A container that asks for cards, as HAMi reads it before the pin (its webhook's default cores included).

    `own_memory`: it sets gpumem or gpumem-percentage itself, which the pin keeps. `default_cores`: its 100 cores
    are HAMi's webhook default (no gpucores of its own, or exactly 100 with no memory ask), not a choice.
    """

    name: str
    position: int
    init: bool
    request: CardRequest
    own_memory: bool = False
    default_cores: bool = False


@dataclass(frozen=True)
class Workload:
    """The pod to place: its GPU containers (init first), its annotations that steer HAMi, where it came from."""

    containers: tuple[GpuContainer, ...]
    source: str
    annotations: Mapping[str, str] = field(default_factory=dict)
    node_name: str = ""
    invalid: str = ""
    config: HamiConfig = HAMI_DEFAULTS
    """How the cluster's HAMi reads the pod: its resource names (which the patch writes too) and defaults."""
    privileged: str = ""
    """The first privileged container (init containers first), '' when none: HAMi denies it any card."""
    scheduling: Mapping[str, Any] | None = None
    """What kube-scheduler picks its node by (nodeSelector, affinity, tolerations; empty for none); None when only its
    request is known."""
    needs: Resources | None = None
    """What each pod asks of its node (`node_resources.pod_resources`); None when only its request is known."""
    attaches: AttachRefs = NO_REFS
    """The volumes each pod attaches (`attach_limits.attach_refs`), counted against a node's CSI attach limits."""


@dataclass(frozen=True)
class PinView:
    """What a pin is checked against: nodes by name, HAMi's allocations (None: usage unknown, cards taken as empty)."""

    nodes: Mapping[str, Mapping[str, Any]]
    allocations: Sequence[PodAllocation] | None = None
    room: Resources | None = None
    """The pinned node's CPU, memory, pods and the scalars the pod asks left, as kube-scheduler counts them; None
    when not read, or the node states no CPU or memory."""


@dataclass(frozen=True)
class ContainerPatch:
    """What the pin writes into one container: its memory percentage, and whether HAMi's default cores go."""

    position: int
    percent: int
    drop_cores: bool


@dataclass(frozen=True)
class PinVerdict:
    """The node, the cards in placement order, the verdict per card, the container patches, and the problems."""

    node: str
    cards: tuple[Card, ...] = ()
    checks: tuple[CardCheck, ...] = ()
    patches: tuple[ContainerPatch, ...] = ()
    problems: tuple[Problem, ...] = ()
    config: HamiConfig = HAMI_DEFAULTS

    @property
    def ok(self) -> bool:
        """True when the placement can take the pod."""
        return not self.problems

    @property
    def uuids(self) -> tuple[str, ...]:
        """The card UUIDs for `nvidia.com/use-gpuuuid`, in placement order."""
        return tuple(card.uuid for card in self.cards)

    def summary(self) -> str:
        """The problems in one line, each with its reason name."""
        return "; ".join(f"{problem.reason}: {problem.message}" for problem in self.problems)


def workload_from_pod(
    pod: Mapping[str, Any], source: str, *, template: bool = False, config: HamiConfig = HAMI_DEFAULTS
) -> Workload:
    """The workload of a pod (JSON dict form), its containers read the way the cluster's HAMi (`config`) reads them.

    `template`: the pod to place is made from this one (a controller's template, or a pod to be recreated), so
    its own `spec.nodeName` says nothing about the new pod.
    """
    metadata = as_mapping(pod.get("metadata"))
    spec = as_mapping(pod.get("spec"))
    annotations = {
        str(k): str(v)
        for k, v in as_mapping(metadata.get("annotations")).items()
        if k != USE_GPUUUID_ANNOTATION and k not in OUR_ANNOTATIONS
    }
    containers: list[GpuContainer] = []
    privileged: list[str] = []
    position = 0
    try:
        for key in ("initContainers", "containers"):
            items = spec.get(key) or []
            if not isinstance(items, list):
                raise RequestError(f"pod spec {key} must be a list")
            for item in items:
                found = _gpu_container(item, position, key == "initContainers", config)
                if found is not None:
                    containers.append(found)
                if _privileged(item):
                    privileged.append(str(as_mapping(item).get("name") or position))
                position += 1
    except RequestError as error:
        return Workload((), source, annotations, invalid=str(error), config=config)
    node_name = "" if template else str(spec.get("nodeName") or "")
    first = privileged[0] if privileged else ""
    scheduling = {key: spec[key] for key in SCHEDULING if key in spec}
    try:
        needs: Resources | None = pod_resources(spec)
    except RequestError:
        needs = None
    return Workload(
        tuple(containers),
        source,
        annotations,
        node_name=node_name,
        config=config,
        privileged=first,
        scheduling=scheduling,
        needs=needs,
        attaches=attach_refs(spec, str(metadata.get("name", ""))),
    )


UNCHECKED_LIMITS = "the node's CSI attach limits are not checked for the pod's volumes"
"""What a pin's check leaves out when it may not read the claims and volumes or the CSINodes and VolumeAttachments."""
SCHEDULING = ("nodeSelector", "affinity", "tolerations")
"""The parts of a pod's spec `kept_off_node` reads."""


def kept_off_node(workload: Workload, node: Mapping[str, Any] | None, placed_on: str = "") -> str:
    """Why kube-scheduler would keep the workload's pods off `node` (their node selection, the node's taints), ""
    when it would not or the workload says nothing of where it may go; `placed_on` as `node_selection.required_terms`
    reads it."""
    if node is None or workload.scheduling is None:
        return ""
    return kept_off(workload.scheduling, node, placed_on)


def move_kept_off(workload: Workload, node: Mapping[str, Any] | None, placed_on: str) -> Problem | None:
    """A move evicts its pod at once: a replacement kube-scheduler keeps off the target node (the webhook does not
    pin it there) would land elsewhere, so the move is refused before anything is written. `placed_on`: the moved
    pod's node (a pod that is its own replacement may carry our pin to it)."""
    why = kept_off_node(workload, node, placed_on)
    if not why:
        return None
    return Problem(PinReason.KeptOffNode, f"{why}, so the webhook would not pin its replacement there", Scope.Pod)


def node_warnings(workload: Workload, node: Mapping[str, Any] | None) -> list[str]:
    """Warn when kube-scheduler would keep the workload's pods off the pinned node (their node selection, the node's
    taints): the webhook skips such a placement for them, as the pin would leave them Pending."""
    why = kept_off_node(workload, node)
    if not why:
        return []
    return [
        f"the pods of {workload.source}: {why}, so the webhook will not pin them there (kube-scheduler would leave "
        "them Pending); pin another node or change the pods' tolerations or node selection"
    ]


def node_room(
    node: Mapping[str, Any] | None,
    pods: Iterable[Mapping[str, Any]],
    workload: Workload,
    others: Iterable[CountedPod] = (),
    volumes: Volumes | None = None,
) -> Resources | None:
    """The node's CPU, memory, pods and the scalar resources the workload asks (less HAMi's own, which kube-scheduler
    leaves to HAMi) left once the node's bound, unfinished pods among `pods` (and `others`, read already) are counted,
    with its CSI attach counts when the workload asks some (`with_volumes`: `volumes` read their limits); None when
    unknown (no node, no CPU or memory stated, a pod there whose requests cannot be read)."""
    if node is None or workload.needs is None:
        return None
    name = str(as_mapping(node.get("metadata")).get("name", ""))
    counted = frozenset(scalar for scalar, _ in workload.needs.scalars).difference(workload.config.resource_names)
    # Only the node's pods are read for what they ask (node_remainders would read every pod given, then skip it).
    there = [pod for pod in pods if as_mapping(pod.get("spec")).get("nodeName") == name]
    bound = [*bound_pods(there), *(other for other in others if other.node == name)]
    attach = volumes.attach if volumes is not None else None
    if attach is not None and counted.isdisjoint(attach.counted):
        attach = None  # the workload asks no limited driver's count
    if attach is not None and volumes is not None:
        bound = [with_attach_needs(pod, volumes, attach.counted) for pod in bound]
    remainders, unread = node_remainders([node], (), bound, counted)
    if unread:
        return None
    if attach is not None and volumes is not None:
        remainders = attach_rooms(remainders, bound, attach, volumes)
    return remainders.get(name)


def with_volumes(workload: Workload, volumes: Volumes | None, namespace: str) -> Workload:
    """The workload with what its volumes ask of a node's CSI attach counts (kube-scheduler's NodeVolumeLimits)
    added to its needs, when the limits were read (`volumes.attach`) and it attaches a volume of a limited driver."""
    attach = volumes.attach if volumes is not None else None
    if attach is None or volumes is None or workload.needs is None or workload.attaches is NO_REFS:
        return workload
    asked = attach_needs(workload.attaches, namespace, volumes, attach.counted)
    return replace(workload, needs=workload.needs + Resources(scalars=asked)) if asked else workload


def room_short(
    workload: Workload,
    node: str,
    room: Resources | None,
    evicted: Mapping[str, Any] | None = None,
    volumes: Volumes | None = None,
) -> Problem | None:
    """kube-scheduler's NodeResourcesFit (and NodeVolumeLimits) before HAMi's filter: a node without the CPU, memory
    or pod room the pod asks, or the room its CSI volumes take (once `evicted`, when it runs there, is gone, its
    volumes too when `volumes` read their limits) leaves it Pending there however free the pinned cards are. Only the
    scalars `room` counts are checked (the adapter counts those the pod asks, less HAMi's own)."""
    if room is None or workload.needs is None:
        return None
    counted = frozenset(name for name, _ in room.scalars)
    if evicted is not None:
        gone = counted_pod(evicted)
        if volumes is not None and volumes.attach is not None:
            gone = with_attach_needs(gone, volumes, volumes.attach.counted)
        if gone.node == node and isinstance(gone.needs, Resources):
            room = room + gone.needs.only(counted)
    why = shortfall(room, workload.needs.only(counted))
    if not why:
        return None
    return Problem(PinReason.NodeResourcesShort, f"node {node}: kube-scheduler: {why}", Scope.Pod)


def room_warning(workload: Workload, short: Problem) -> str:
    """The warning of a pin whose node has no room for its pods now (nothing evicted for it: room may come)."""
    return (
        f"the pods of {workload.source}: {short.message}, so they would wait Pending there until room is freed; "
        "pin another node, add --evict POD, or lower their requests"
    )


def _privileged(container: object) -> bool:
    """`securityContext.privileged: true`, as HAMi's webhook (`isPrivilegedContainer`) reads it."""
    context = as_mapping(as_mapping(container).get("securityContext"))
    return context.get("privileged") is True


def workload_from_request(
    request: CardRequest, source: str, *, own_memory: bool, config: HamiConfig = HAMI_DEFAULTS
) -> Workload:
    """The workload of a pod known only by its per-card request (the CLI's --request-* flags): one app container."""
    container = GpuContainer("0", 0, False, request, own_memory, request.cores_by_webhook)
    return Workload((container,), source, config=config)


def with_node_needs(request: Workload, pod: Workload) -> Workload:
    """The --request-* flags' workload for a pod the move reads too: the flags stand for its card request only, so
    where it may go, what it asks of its node and the volumes it attaches stay the pod's (else a move would skip
    those checks)."""
    source = f"{pod.source} (its request from {request.source})"
    return replace(request, source=source, scheduling=pod.scheduling, needs=pod.needs, attaches=pod.attaches)


def pin_verdict(
    spec: PlacementSpec, view: PinView, workload: Workload, *, evict: PodAllocation | None = None
) -> PinVerdict:
    """The pin of `workload` by `spec`: what it gets, or every problem that stops it (see the module's docstring)."""
    node, config = spec.node_name, workload.config
    refused = _refused_everywhere(workload)
    if refused:
        return PinVerdict(node, problems=refused, config=config)
    cards, problems = _placement(spec, view)
    if problems:
        return PinVerdict(node, problems=problems, config=config)
    empty = _no_allocatable(view.nodes[node], node, config)
    if empty is not None:
        return PinVerdict(node, cards=cards, problems=(empty,), config=config)
    refs = spec.gpu_devices
    problems = _pod_problems(workload, len(refs))
    if problems:
        return PinVerdict(node, cards=cards, problems=problems, config=config)
    placed, patches, share_problems = _shares(workload, spec.percent, cards, refs)
    if share_problems:
        return PinVerdict(node, cards=cards, problems=share_problems, config=config)
    if numa_bind(workload.annotations) and len({card.numa for card in cards}) > 1:
        return PinVerdict(node, cards=cards, problems=(_numa_problem(cards),), config=config)
    node_obj = view.nodes[node]
    cordoned = cordoned_cards(as_mapping(as_mapping(node_obj.get("metadata")).get("annotations")))
    kept = topology_numa(node_cards(node_obj), workload.annotations, cordoned, config.gpu_scheduler_policy)
    if kept is not None and cards[0].numa != kept:
        return PinVerdict(node, cards=cards, problems=(_topology_numa_problem(cards, kept),), config=config)
    usage: Mapping[str, CardUsage] = {}
    if view.allocations is not None:
        usage = card_usage(cards, view.allocations, node=node)
    after = release(usage, evict) if evict is not None and evict.node == node else None
    checks = []
    found: list[Problem] = []
    for ref, card in zip(refs, cards, strict=True):
        check = check_card(
            ref,
            card,
            placed,
            usage.get(card.uuid),
            after.get(card.uuid) if after is not None else None,
            evicting=evict.key if after is not None and evict is not None else "",
            annotations=workload.annotations,
            cordoned=card.uuid in cordoned,
            default_policy=config.gpu_scheduler_policy,
        )
        checks.append(check)
        if not check.ok and check.reason is not None:
            scope = Scope.Card if check.reason in _CARD_STATE or view.allocations is not None else Scope.Pod
            found.append(Problem(check.reason.value, check.message, scope, ref, card))
    return PinVerdict(node, cards, tuple(checks), patches, tuple(found), config)


def placement_problems(spec: PlacementSpec, view: PinView) -> tuple[Problem, ...]:
    """The problems of the placement whatever the pod: the reconciler fails a placement on the Placement ones."""
    return _placement(spec, view)[1]


def problems_on(nodes: Mapping[str, Mapping[str, Any]]) -> Callable[[PlacementSpec], tuple[Problem, ...]]:
    """`placement_problems` against these nodes, as `lifecycle.follow_up` asks for them."""
    view = PinView(nodes)
    return lambda spec: placement_problems(spec, view)


def pending_warnings(
    spec: PlacementSpec, namespace: str, name: str, others: Sequence[Placement], cards: Sequence[Card]
) -> list[str]:
    """Other unclaimed placements: a selector that may match the same pods, or the same cards not yet counted."""
    mine = uuids_named(spec.gpu_devices, cards)
    warnings = []
    for other in others:
        if (other.namespace, other.name) == (namespace, name) or not other.unclaimed:
            continue
        if other.namespace == namespace and may_overlap(spec.pod_selector, other.spec.pod_selector):
            warnings.append(
                f"placement {other.name} (Pending, -l {other.spec.pod_selector}) may match the same pods as -l "
                f"{spec.pod_selector}; the first matching pod claims only one of them"
            )
        shared = mine & uuids_named(other.spec.gpu_devices, cards) if other.spec.node_name == spec.node_name else set()
        if shared:
            names = ", ".join(card.name for card in cards if card.uuid in shared)
            warnings.append(
                f"placement {other.key} (Pending) also pins a pod to {names} on {spec.node_name}; that pod does not "
                "exist yet, so its share was not counted"
            )
    return warnings


def eviction_warnings(pod: Mapping[str, Any], allocation: PodAllocation | None, node: str) -> list[str]:
    """Warn when evicting this pod will not free anything on the target node."""
    metadata = as_mapping(pod.get("metadata"))
    name = str(metadata.get("name") or "")
    if allocation is None:
        return [f"pod {name} holds no HAMi card (no {ALLOCATED_ANNOTATION}); evicting it frees no card"]
    if allocation.node != node:
        return [f"pod {name} runs on {allocation.node}, not on {node}; evicting it frees nothing there"]
    return []


def _placement(spec: PlacementSpec, view: PinView) -> tuple[tuple[Card, ...], tuple[Problem, ...]]:
    """The node's cards the spec names, in its order, or the problems of the placement itself."""
    invalid = validate_spec(spec)
    if invalid:
        return (), (Problem(PinReason.InvalidSpec, invalid, Scope.Placement),)
    node = spec.node_name
    node_obj = view.nodes.get(node)
    if node_obj is None:
        return (), (Problem(PinReason.NodeNotFound, f"node {node} not found", Scope.Placement),)
    try:
        cards = node_cards(node_obj)
    except RegisterError as error:
        return (), (Problem(PinReason.NoRegister, str(error), Scope.Card),)
    chosen: list[Card] = []
    problems: list[Problem] = []
    for ref in spec.gpu_devices:
        try:
            card = resolve(ref, cards, node)
        except CardRefError as error:
            problems.append(Problem(FitReason.UnknownCard, str(error), Scope.Placement, ref))
            continue
        if card in chosen:
            message = f"{ref} names {card.label()} on node {node}, which is already in the list"
            problems.append(Problem(PinReason.CardNamedTwice, message, Scope.Placement, ref, card))
        elif card.is_mig:
            problems.append(Problem(FitReason.CardMigMode, _mig_message(card), Scope.Placement, ref, card))
        chosen.append(card)
    return tuple(chosen), tuple(problems)


def _refused_everywhere(workload: Workload) -> tuple[Problem, ...]:
    """What HAMi refuses before it reads any node: its webhook denies a privileged container, and its filter fails on
    every node (registered or not) for scoring weights it cannot read."""
    if workload.privileged and workload.containers:
        message = (
            f"container {workload.privileged} is privileged: HAMi's webhook denies a pod asking for cards with a "
            "privileged container"
        )
        return (Problem(PinReason.PrivilegedContainer, message, Scope.Pod),)
    if workload.containers:
        try:
            scoring_weights(workload.annotations)
        except RequestError as error:
            message = f"{error}: HAMi's filter fails for the pod on every node"
            return (Problem(PinReason.InvalidScoringWeights, message, Scope.Pod),)
    return ()


def _pod_problems(workload: Workload, cards: int) -> tuple[Problem, ...]:
    """What stops this pod whatever the cards hold: unreadable GPU resources, nodeName, no or other card counts."""
    if workload.invalid:
        return (Problem(PinReason.InvalidGpuRequest, workload.invalid, Scope.Pod),)
    if workload.node_name:
        message = f"the pod sets spec.nodeName {workload.node_name}, which bypasses the scheduler"
        return (Problem(PinReason.NodeNameSet, message, Scope.Pod),)
    count = workload.config.resource_count_name
    if not workload.containers:
        message = f"no container asks for {count}"
        return (Problem(PinReason.NoGpuRequest, message, Scope.Pod),)
    return tuple(
        Problem(
            PinReason.CardCountMismatch,
            f"container {c.name} asks {c.request.nums} card(s) ({count}) but the placement names {cards}",
            Scope.Pod,
        )
        for c in workload.containers
        if c.request.nums != cards
    )


def _shares(
    workload: Workload, percent: int | None, cards: Sequence[Card], refs: Sequence[CardRef]
) -> tuple[tuple[Placed, ...], tuple[ContainerPatch, ...], tuple[Problem, ...]]:
    """Each container's request once pinned, the patches that give it, and the problems of the pod's share."""
    if percent is None:
        return tuple(Placed(c.name, c.init, c.request) for c in workload.containers), (), ()
    app = [c for c in workload.containers if not c.init]
    takers = [c for c in app if not c.own_memory]
    own_percent = sum(c.request.mem_percentage or 0 for c in app if c.own_memory and c.request.memreq == 0)
    own_mib = sum(c.request.memreq for c in app if c.own_memory)
    left = min(percent - own_percent - _percent_of(own_mib, card) for card in cards)
    if takers and left < len(takers):
        names = ", ".join(c.name for c in takers)
        message = (
            f"the pod's share is {percent}% of each card, {max(left, 0)}% once the containers that ask their own "
            f"memory are counted: too little to split among containers {names} (at least 1% each)"
        )
        return (), (), (Problem(PinReason.ShareTooSmall, message, Scope.Pod),)
    given = {c.position: left // len(takers) + (1 if i < left % len(takers) else 0) for i, c in enumerate(takers)}
    given.update({c.position: percent for c in workload.containers if c.init and not c.own_memory})
    placed = []
    patches = []
    for c in workload.containers:
        share = given.get(c.position)
        if share is None:
            placed.append(Placed(c.name, c.init, c.request))
            continue
        drop = c.default_cores and share < 100
        cores = workload.config.default_cores if drop else c.request.coresreq
        placed.append(Placed(c.name, c.init, CardRequest(c.request.nums, 0, share, cores)))
        patches.append(ContainerPatch(c.position, share, drop))
    problems = []
    for ref, card in zip(refs, cards, strict=True):
        limit = card.devmem * percent // 100
        asked = max(
            [sum(memory_for(p.request, card) for p in placed if not p.init)]
            + [memory_for(p.request, card) for p in placed if p.init]
        )
        if asked > limit:
            message = f"{card.label()}: the pod asks {asked} MiB, more than {percent}% of the card ({limit} MiB)"
            problems.append(Problem(FitReason.RequestExceedsPercent, message, Scope.Pod, ref, card))
    return tuple(placed), tuple(patches), tuple(problems)


def _no_allocatable(node_obj: Mapping[str, Any], node: str, config: HamiConfig) -> Problem | None:
    """A node whose allocatable card count is listed as 0 (the kubelet lost HAMi's device plugin): HAMi's CheckHealth
    (`pkg/device/nvidia/device.go`) keeps or re-adds its cards while the plugin's handshake is fresh and drops them
    once it expires, and the kubelet refuses a pod asking cards there, so a pinned pod never runs."""
    count = config.resource_count_name
    allocatable = as_mapping(as_mapping(node_obj.get("status")).get("allocatable"))
    if count not in allocatable:
        return None
    try:
        if parse_quantity(allocatable[count]) > 0:
            return None
    except RequestError:
        pass
    message = (
        f"node {node} has no allocatable {count} (HAMi's device plugin is not serving it): HAMi drops and re-adds the "
        "node as its handshake expires and the kubelet refuses a pod asking cards there"
    )
    return Problem(PinReason.NoAllocatableGpu, message, Scope.Card)


def _mig_message(card: Card) -> str:
    """Why a MIG card cannot be pinned: HAMi's MIG rules are not modelled, so a pin could be refused forever."""
    return (
        f"{card.label()} is in MIG mode: HAMi fits it by its MIG profiles and free placements "
        "(CardMigTopologyInfeasible) and calls it unhealthy when a pod holds it without a MIG reservation, which "
        "hami-place does not model"
    )


def _numa_problem(cards: Sequence[Card]) -> Problem:
    """HAMi's Fit under numa-bind drops the cards picked on one NUMA node when the next is on another, every time."""
    where = ", ".join(f"{card.name} on NUMA node {card.numa}" for card in cards)
    message = (
        f"the pod asks {NUMA_BIND}: true but the placement names {where}; HAMi refuses it on every try "
        "(AllocatedCardsInsufficientRequest, NumaNotFit)"
    )
    return Problem(FitReason.NumaNotFit, message, Scope.Pod)


def _topology_numa_problem(cards: Sequence[Card], kept: int) -> Problem:
    """HAMi's topology-aware Fit under numa-bind keeps only the cards of the lowest NUMA node it can use."""
    where = ", ".join(f"{card.name} on NUMA node {card.numa}" for card in cards)
    message = (
        f"the pod asks {NUMA_BIND}: true under the topology-aware policy, where HAMi only gives cards of NUMA node "
        f"{kept} (the lowest of the node's usable cards), but the placement names {where}; HAMi refuses it on "
        "every try"
    )
    return Problem(FitReason.NumaNotFit, message, Scope.Pod)


def _percent_of(mib: int, card: Card) -> int:
    """The whole percents of the card's memory that `mib` takes, rounded up (all of it on a card without memory)."""
    if mib <= 0:
        return 0
    return -(-mib * 100 // card.devmem) if card.devmem else 100


def _gpu_container(container: object, position: int, init: bool, config: HamiConfig) -> GpuContainer | None:
    """One container as the pin check sees it, or None when it asks for no card."""
    request = container_request(container, hami_webhook=True, config=config)  # type: ignore[arg-type]
    if request is None or not isinstance(container, Mapping):
        return None
    resources = as_mapping(container.get("resources"))
    asked = {key for section in ("limits", "requests") for key in as_mapping(resources.get(section))}
    own_memory = config.resource_memory_name in asked or config.resource_memory_percentage_name in asked
    default_cores = request.cores_by_webhook or (
        not own_memory and config.resource_core_name in asked and request.coresreq == 100
    )
    name = str(container.get("name") or position)
    return GpuContainer(name, position, init, request, own_memory, default_cores)
