"""Does a container's per-card request fit a card, in HAMi v2.10's order and with its reason names.

HAMi's NVIDIA `Fit` (`pkg/device/nvidia/device.go`, checks in `fit_checks.go`) tries each card in turn:
unhealthy, cordoned (`hami.io/device-cordon`: comma list of card UUIDs on the node), type not allowed
(`nvidia.com/use-gputype`/`nouse-gputype`, `nvidia.com/vgpu-mode`), UUID not allowed
(`nvidia.com/use-gpuuuid`/`nouse-gpuuuid`), slots used up (`CardTimeSlicingExhausted`), the `mutex` policy on a
card in use, free memory below the request, free cores below the request (a request above 100 is cut to 100),
a 100-core request on a 100-core card already in use (`ExclusiveDeviceAllocateConflict`), a 0-core request on a
card whose cores are all taken (`CardComputeUnitsExhausted`). Before those, hami-place adds what HAMi filters
elsewhere: a card HAMi's NVIDIA scheduler ignores (type without "NVIDIA"). HAMi calls an unhealthy card
`CardNotHealth`; hami-place reports `CardUnhealthy`.

`fit_pod` is HAMi's whole verdict for a pod on a node (`Scheduler.Filter` -> `scoreNode` -> `fitInDevices` -> `Fit`):
each GPU container in turn, init containers against the node as it is, app containers against the node with the
earlier app containers' cards taken; before each container the cards are scored (slots, cores and memory in use,
in float32) and sorted by the GPU policy (Go's insertion sort, stable, as Go sorts up to 12 cards), then tried from
the last; the first failing container's reason counts are HAMi's `FailedNodes` text for the node.

`hami.io/device-scoring-weights` (`slot=1,core=1,memory=3`) weighs the three parts of the score
(`ParseDeviceScoringWeights`, `pkg/util/device_scoring_weights.go`; `ComputeScore`); a value HAMi cannot parse fails
its whole Filter for the pod (`calcScore`, `pkg/scheduler/score.go`), on every node.

`nvidia.com/numa-bind` (true as Go's `strconv.ParseBool` reads it) makes HAMi keep a container's cards on one NUMA
node: the sort keeps NUMA groups together (`DeviceUsageList.Less`, `pkg/scheduler/policy/gpu_policy.go`) and `Fit`
starts over whenever the walk reaches a card of another NUMA node, counting the cards it gives up as `NumaNotFit`.
"""

from __future__ import annotations

import itertools
import json
import struct
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from kubectl_hami_place.core.cards import PAIR_SCORE_ANNOTATION, Card, node_cards, pair_scores
from kubectl_hami_place.core.errors import RegisterError, RequestError
from kubectl_hami_place.core.fields import as_mapping, comma_list, go_decimal
from kubectl_hami_place.core.hami_config import HAMI_DEFAULTS, HamiConfig
from kubectl_hami_place.core.names import NOUSE_GPUUUID_ANNOTATION, USE_GPUUUID_ANNOTATION
from kubectl_hami_place.core.requests import CardRequest, cores_for, memory_for, pod_requests
from kubectl_hami_place.core.usage import CardUsage, PodAllocation, card_usage

USE_UUID = USE_GPUUUID_ANNOTATION
NOUSE_UUID = NOUSE_GPUUUID_ANNOTATION
USE_TYPE = "nvidia.com/use-gputype"
NOUSE_TYPE = "nvidia.com/nouse-gputype"
VGPU_MODE = "nvidia.com/vgpu-mode"
GPU_SCHEDULER_POLICY = "hami.io/gpu-scheduler-policy"
DEVICE_CORDON = "hami.io/device-cordon"
NUMA_BIND = "nvidia.com/numa-bind"
TOPOLOGY_AWARE = "topology-aware"
SCORING_WEIGHTS = "hami.io/device-scoring-weights"
FIT_ANNOTATIONS = (
    USE_TYPE,
    NOUSE_TYPE,
    VGPU_MODE,
    USE_UUID,
    NOUSE_UUID,
    GPU_SCHEDULER_POLICY,
    NUMA_BIND,
    SCORING_WEIGHTS,
)
"""The pod annotations `fit` and `fit_pod` read: pods that differ only in others get the same verdicts."""
_INT64_MAX = 2**63 - 1
_GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})


class FitReason(StrEnum):
    """Why a card cannot take a request: HAMi's own reason names, plus hami-place's for what HAMi filters earlier."""

    CardUuidMismatch = "CardUuidMismatch"
    CardTypeMismatch = "CardTypeMismatch"
    CardTimeSlicingExhausted = "CardTimeSlicingExhausted"
    CardInsufficientMemory = "CardInsufficientMemory"
    CardInsufficientCore = "CardInsufficientCore"
    ExclusiveDeviceAllocateConflict = "ExclusiveDeviceAllocateConflict"
    CardComputeUnitsExhausted = "CardComputeUnitsExhausted"
    CardUnhealthy = "CardUnhealthy"
    CardCordoned = "CardCordoned"
    CardNotNvidia = "CardNotNvidia"
    UnknownCard = "UnknownCard"
    RequestExceedsPercent = "RequestExceedsPercent"
    NumaNotFit = "NumaNotFit"
    CardMigMode = "CardMigMode"


@dataclass(frozen=True)
class FitResult:
    """The verdict for one card: ok, or the first reason it fails, and a one-line message naming the numbers."""

    ok: bool
    reason: FitReason | None
    message: str


def free_memory(card: Card, usage: CardUsage | None) -> int:
    """MiB of the card's memory HAMi counts as free (may be negative when a card is over-committed)."""
    return card.devmem - (usage.used_mem if usage else 0)


def free_cores(card: Card, usage: CardUsage | None) -> int:
    """Percent of the card's cores HAMi counts as free."""
    return card.devcore - (usage.used_cores if usage else 0)


def taking(usage: CardUsage, request: CardRequest, card: Card) -> CardUsage:
    """The card's usage once one more container's request holds it, as HAMi counts it after Fit: a slot, the
    request's MiB and its cores (capped at 100)."""
    return replace(
        usage,
        used_slots=usage.used_slots + 1,
        used_mem=usage.used_mem + memory_for(request, card),
        used_cores=usage.used_cores + cores_for(request),
    )


def fit(
    card: Card,
    usage: CardUsage | None,
    request: CardRequest,
    annotations: Mapping[str, str] | None = None,
    cordoned: bool = False,
    *,
    default_policy: str = "",
) -> FitResult:
    """Whether `request` fits `card` given its `usage`, checked in HAMi's order; `annotations` are the pod's.

    `default_policy` is HAMi's `--gpu-scheduler-policy` (`HamiConfig.gpu_scheduler_policy`), for a pod naming none.
    """
    annotations = annotations or {}
    used_slots = usage.used_slots if usage else 0
    used_cores = usage.used_cores if usage else 0
    label = card.label()
    memreq = memory_for(request, card)
    coresreq = cores_for(request)

    def fail(reason: FitReason, message: str) -> FitResult:
        """A failed verdict."""
        return FitResult(ok=False, reason=reason, message=message)

    if not card.is_nvidia:
        return fail(
            FitReason.CardNotNvidia, f"{label} is a {card.type or 'untyped'} card, not an NVIDIA card HAMi schedules"
        )
    if not card.health:
        return fail(FitReason.CardUnhealthy, f"{label} is unhealthy in the node's register")
    if cordoned:
        return fail(FitReason.CardCordoned, f"{label} is cordoned (hami.io/device-cordon)")
    if not _type_allowed(annotations, card):
        return fail(
            FitReason.CardTypeMismatch,
            f"{label} is a {card.type} ({card.mode or 'no mode'}), which the pod's type annotations exclude",
        )
    if not _uuid_allowed(annotations, card.uuid):
        return fail(FitReason.CardUuidMismatch, f"{label} is excluded by the pod's {USE_UUID}/{NOUSE_UUID} annotations")
    if card.count <= used_slots:
        return fail(FitReason.CardTimeSlicingExhausted, f"{label} has all {card.count} slots in use")
    if "mutex" in gpu_policies(annotations, default_policy) and used_slots > 0:
        return fail(
            FitReason.ExclusiveDeviceAllocateConflict,
            f"{label} is in use by {used_slots} container(s) and the pod's mutex policy wants an unused card",
        )
    free_mem = free_memory(card, usage)
    if free_mem < memreq:
        return fail(FitReason.CardInsufficientMemory, f"{label} has {free_mem} MiB free, the pod asks {memreq} MiB")
    free_core = free_cores(card, usage)
    if free_core < coresreq:
        return fail(FitReason.CardInsufficientCore, f"{label} has {free_core}% cores free, the pod asks {coresreq}%")
    if card.devcore == 100 and coresreq == 100 and used_slots > 0:
        return fail(
            FitReason.ExclusiveDeviceAllocateConflict,
            f"{label} is in use by {used_slots} container(s) and the pod asks the whole card (100% cores)",
        )
    if card.devcore != 0 and used_cores == card.devcore and coresreq == 0:
        return fail(FitReason.CardComputeUnitsExhausted, f"{label} has all its cores taken and the pod asks 0% cores")
    return FitResult(
        ok=True,
        reason=None,
        message=(
            f"{label} fits: the pod asks {memreq} MiB and {coresreq}% cores; "
            f"{free_mem} MiB, {free_core}% cores and {card.count - used_slots} of {card.count} slots free"
        ),
    )


Weights = tuple[int, int, int]
DEFAULT_WEIGHTS: Weights = (1, 1, 1)


def scoring_weights(annotations: Mapping[str, str] | None) -> Weights:
    """The pod's (slot, core, memory) score weights as HAMi's GetDeviceScoringWeightsByPod reads them (1, 1, 1 when
    not given); RequestError with HAMi's own message for a value it refuses (its Filter then fails for the pod)."""
    value = (annotations or {}).get(SCORING_WEIGHTS)
    if value is None:
        return DEFAULT_WEIGHTS

    def refuse(why: str) -> RequestError:
        """HAMi's error for the value."""
        return RequestError(f"invalid {SCORING_WEIGHTS} annotation {_go_quote(value)}: {why}")

    parts = value.split(",")
    if len(parts) != 3:
        raise refuse("expected slot, core, and memory weights")
    weights: dict[str, int] = {}
    for part in parts:
        pair = part.strip().split("=", 1)
        if len(pair) != 2:
            raise refuse("expected key=value entries")
        key = pair[0].strip()
        if key in weights:
            raise refuse(f"duplicate {_go_quote(key)} weight")
        weight = go_decimal(pair[1].strip())
        if weight is None or not -_INT64_MAX - 1 <= weight <= _INT64_MAX:
            raise refuse(f"{_go_quote(key)} weight must be an integer")
        if weight < 0:
            raise refuse(f"{_go_quote(key)} weight must not be negative")
        if key not in ("slot", "core", "memory"):
            raise refuse(f"unknown weight {_go_quote(key)}")
        weights[key] = weight
    if not any(weights.values()):
        raise refuse("at least one weight must be positive")
    return weights["slot"], weights["core"], weights["memory"]


def _go_quote(text: str) -> str:
    """A string as Go's %q writes it (close enough for messages: JSON's quoting of printable text)."""
    return json.dumps(text, ensure_ascii=False)


def numa_bind(annotations: Mapping[str, str] | None) -> bool:
    """True when the pod asks its cards on one NUMA node: `nvidia.com/numa-bind` true for Go's strconv.ParseBool."""
    return (annotations or {}).get(NUMA_BIND) in _GO_TRUE


def gpu_policies(annotations: Mapping[str, str] | None, default_policy: str = "") -> list[str]:
    """HAMi's GPU policies for the pod (its annotation, else `default_policy`), as `GetGPUSchedulerPolicyByPod` and
    `PolicyContains` (`pkg/util/util.go`) read them."""
    return comma_list((annotations or {}).get(GPU_SCHEDULER_POLICY, default_policy))


def topology_aware(annotations: Mapping[str, str] | None, default_policy: str = "") -> bool:
    """True when HAMi's GPU policy for the pod names `topology-aware`."""
    return TOPOLOGY_AWARE in gpu_policies(annotations, default_policy)


def cordoned_cards(node_annotations: Mapping[str, str] | None) -> frozenset[str]:
    """The card UUIDs a node's `hami.io/device-cordon` annotation takes out of new placements."""
    value = (node_annotations or {}).get(DEVICE_CORDON)
    return frozenset(comma_list(value)) if isinstance(value, str) else frozenset()


def topology_numa(
    cards: Iterable[Card], annotations: Mapping[str, str] | None, cordoned: Iterable[str], default_policy: str = ""
) -> int | None:
    """The one NUMA node HAMi's Fit can give cards from under `topology-aware` with numa-bind; None when either is off.

    That walk (`Fit`, `pkg/device/nvidia/device.go`) never stops early, and each card of another NUMA node drops what
    it picked, so only the NUMA node it reaches last counts: the lowest (the sort puts it first) of the cards it does
    not skip before the NUMA check (NVIDIA, healthy, not cordoned, of a type the pod allows)."""
    if not numa_bind(annotations) or not topology_aware(annotations, default_policy):
        return None
    barred = set(cordoned)
    usable = [
        card.numa
        for card in cards
        if card.is_nvidia and card.health and card.uuid not in barred and _type_allowed(annotations or {}, card)
    ]
    return min(usable, default=None)


def _uuid_allowed(annotations: Mapping[str, str], uuid: str) -> bool:
    """HAMi's CheckUUID on the pod's annotations."""
    return uuid_allowed(uuid_lists(annotations), uuid)


UuidLists = tuple[frozenset[str], frozenset[str]]


def uuid_lists(annotations: Mapping[str, str]) -> UuidLists:
    """The UUIDs the pod's annotations name to use and not to use, read once for a caller asking card after card."""
    return frozenset(comma_list(annotations.get(USE_UUID, ""))), frozenset(comma_list(annotations.get(NOUSE_UUID, "")))


def uuid_allowed(lists: UuidLists, uuid: str) -> bool:
    """HAMi's CheckUUID: exact UUIDs; an empty list means no constraint."""
    use, nouse = lists
    return (not use or uuid in use) and uuid not in nouse


def _type_allowed(annotations: Mapping[str, str], card: Card) -> bool:
    """HAMi's CheckType: case-insensitive substrings of the card's type, and the card's mode in vgpu-mode."""
    card_type = card.type.upper()
    use = comma_list(annotations.get(USE_TYPE, ""))
    nouse = comma_list(annotations.get(NOUSE_TYPE, ""))
    if use and not any(item.upper() in card_type for item in use):
        return False
    if any(item.upper() in card_type for item in nouse):
        return False
    mode = annotations.get(VGPU_MODE)
    return mode is None or card.mode in mode


# The whole pod on one node, as HAMi's Filter decides it ------------------------------------------------------

NODE_UNREGISTERED = "node unregistered"
NODE_INSUFFICIENT_DEVICE = "NodeInsufficientDevice"
ALLOCATED_CARDS_INSUFFICIENT = "AllocatedCardsInsufficientRequest"
CALC_SCORE_FAILED = "calcScore failed"
_HAMI_NAMES = {FitReason.CardUnhealthy: "CardNotHealth"}
# the checks HAMi's Fit makes before it looks at the card's NUMA node
_BEFORE_NUMA = frozenset(
    {FitReason.CardNotNvidia, FitReason.CardUnhealthy, FitReason.CardCordoned, FitReason.CardTypeMismatch}
)
_SCORE_WEIGHT = 10.0


@dataclass(frozen=True)
class PodFit:
    """HAMi's verdict for a pod on a node: the cards each GPU container gets, or its `FailedNodes` reason text.

    `reason` is "" when the pod fits, else HAMi's text: `node unregistered`, `NodeInsufficientDevice`, or the
    failing container's per-card counts such as `1/2 CardInsufficientMemory, 1/2 CardUuidMismatch`; `counts` holds
    those counts by HAMi's reason name. `devices` lists the card UUIDs of each GPU container, init containers first.
    """

    ok: bool
    reason: str = ""
    counts: Mapping[str, int] = field(default_factory=dict)
    devices: tuple[tuple[str, ...], ...] = ()


def hami_reason_name(reason: FitReason) -> str:
    """HAMi's name for a card's fit reason (CardNotHealth where hami-place says CardUnhealthy)."""
    return _HAMI_NAMES.get(reason, reason.value)


def fit_pod(
    cards: Sequence[Card],
    usage: Mapping[str, CardUsage],
    requests: Sequence[CardRequest | None],
    init_containers: int = 0,
    annotations: Mapping[str, str] | None = None,
    *,
    cordoned: frozenset[str] = frozenset(),
    config: HamiConfig = HAMI_DEFAULTS,
    pair_scores: Mapping[str, Mapping[str, int]] | None = None,
) -> PodFit:
    """Whether HAMi places the pod (its `requests` in `pod_requests` order) on a node with these cards and usage;
    `pair_scores` are the node's `hami.io/node-nvidia-score` (`cards.pair_scores`), read by `topology-aware`."""
    annotations = dict(annotations or {})
    if all(request is None for request in requests):
        return PodFit(ok=True)
    try:
        weights = scoring_weights(annotations)
    except RequestError as err:
        return PodFit(ok=False, reason=f"{CALC_SCORE_FAILED} {err}")
    policy = annotations.get(GPU_SCHEDULER_POLICY, config.gpu_scheduler_policy)
    annotations[GPU_SCHEDULER_POLICY] = policy
    scores = pair_scores or {}
    base = [_Slot(card, usage.get(card.uuid) or CardUsage(card.uuid)) for card in cards]
    chosen: list[tuple[str, ...]] = []
    for request in requests[:init_containers]:
        if request is not None:
            verdict = _fit_container(
                [slot.copy() for slot in base], request, annotations, cordoned, policy, weights=weights, scores=scores
            )
            if isinstance(verdict, PodFit):
                return verdict
            chosen.append(verdict)
    running = [slot.copy() for slot in base]
    for request in requests[init_containers:]:
        if request is not None:
            verdict = _fit_container(running, request, annotations, cordoned, policy, weights=weights, scores=scores)
            if isinstance(verdict, PodFit):
                return verdict
            chosen.append(verdict)
    return PodFit(ok=True, devices=tuple(chosen))


def fit_pod_on_node(
    node: Mapping[str, Any],
    pod: Mapping[str, Any],
    allocations: Iterable[PodAllocation],
    *,
    hami_webhook: bool = True,
    config: HamiConfig = HAMI_DEFAULTS,
) -> PodFit:
    """`fit_pod` for a node and a pod object (JSON dict form) given every pod allocation HAMi counts.

    A pod asking no card fits any node, registered or not, as HAMi's Filter passes it before looking at nodes; one
    whose score weights HAMi cannot read fails on every node, registered or not.
    """
    spec = as_mapping(pod.get("spec"))
    requests = pod_requests(spec, hami_webhook, config=config)
    if all(request is None for request in requests):
        return PodFit(ok=True)
    pod_annotations = as_mapping(as_mapping(pod.get("metadata")).get("annotations"))
    annotations = {key: value for key, value in pod_annotations.items() if isinstance(value, str)}
    try:
        scoring_weights(annotations)
    except RequestError as err:
        return PodFit(ok=False, reason=f"{CALC_SCORE_FAILED} {err}")
    node_metadata = as_mapping(node.get("metadata"))
    try:
        cards = node_cards(node)
    except RegisterError:
        return PodFit(ok=False, reason=NODE_UNREGISTERED)
    name = node_metadata.get("name")
    usage = card_usage(cards, allocations, node=name if isinstance(name, str) else None)
    init = spec.get("initContainers")
    node_annotations = as_mapping(node_metadata.get("annotations"))
    scores = node_annotations.get(PAIR_SCORE_ANNOTATION)
    return fit_pod(
        cards,
        usage,
        requests,
        len(init) if isinstance(init, list) else 0,
        annotations,
        cordoned=cordoned_cards(node_annotations),
        config=config,
        pair_scores=pair_scores(scores) if scores is not None else None,
    )


@dataclass
class _Slot:
    """One card while HAMi fits a pod: its usage so far and its score for the container being fitted."""

    card: Card
    usage: CardUsage
    score: float = 0.0

    def copy(self) -> _Slot:
        """An independent copy (HAMi deep-copies the node for each init container and for the app containers)."""
        return _Slot(self.card, self.usage, self.score)


def _fit_container(
    slots: list[_Slot],
    request: CardRequest,
    annotations: Mapping[str, str],
    cordoned: frozenset[str],
    policy: str,
    *,
    weights: Weights = DEFAULT_WEIGHTS,
    scores: Mapping[str, Mapping[str, int]],
) -> tuple[str, ...] | PodFit:
    """HAMi's fitInDevices for one container: the UUIDs it gets (usage added to `slots`), or the failure.

    Under `topology-aware` HAMi's Fit walks every card, then keeps, of more fitting cards than asked, the one card
    with the lowest pair scores to the others (`computeWorstSingleCard`) or the combination with the highest
    (`computeBestCombination`), the first found on ties."""
    for slot in slots:
        slot.score = _score(slot, request, weights)
    bind = numa_bind(annotations)
    _insertion_sort(slots, policy, bind)
    typed = [slot for slot in slots if slot.card.is_nvidia]
    if request.nums > len(typed):
        return PodFit(ok=False, reason=NODE_INSUFFICIENT_DEVICE, counts={NODE_INSUFFICIENT_DEVICE: 1})
    topology = TOPOLOGY_AWARE in comma_list(policy)
    counts: Counter[str] = Counter()
    picked: list[_Slot] = []
    previous_numa = -1
    for slot in reversed(typed):
        verdict = fit(slot.card, slot.usage, request, annotations, slot.card.uuid in cordoned)
        if verdict.reason in _BEFORE_NUMA:
            counts[hami_reason_name(verdict.reason)] += 1
            continue
        if bind and slot.card.numa != previous_numa:
            # HAMi's Fit: a card of another NUMA node drops what the walk picked so far
            if picked and not topology:
                counts[FitReason.NumaNotFit.value] += len(picked)
            picked, previous_numa = [], slot.card.numa
        if not verdict.ok and verdict.reason is not None:
            counts[hami_reason_name(verdict.reason)] += 1
            continue
        picked.append(slot)
        if len(picked) == request.nums and not topology:
            break
    if topology and len(picked) > request.nums:
        picked = _worst_single(picked, scores) if request.nums == 1 else _best_combination(picked, request.nums, scores)
    if len(picked) < request.nums:
        if picked:
            counts[ALLOCATED_CARDS_INSUFFICIENT] = len(picked)
        text = ", ".join(sorted(f"{count}/{len(typed)} {name}" for name, count in counts.items()))
        return PodFit(ok=False, reason=text, counts=dict(counts))
    for slot in picked:
        slot.usage = taking(slot.usage, request, slot.card)
    return tuple(slot.card.uuid for slot in picked)


def _pair_total(group: Sequence[_Slot], scores: Mapping[str, Mapping[str, int]]) -> int:
    """The group's pair scores, each card's score of every later card (HAMi's computeBestCombination)."""
    return sum(scores.get(a.card.uuid, {}).get(b.card.uuid, 0) for i, a in enumerate(group) for b in group[i + 1 :])


def _worst_single(picked: list[_Slot], scores: Mapping[str, Mapping[str, int]]) -> list[_Slot]:
    """HAMi's computeWorstSingleCard: the first card whose scores of the other fitting cards sum lowest."""
    best: tuple[int, _Slot] | None = None
    for a in picked:
        total = sum(scores.get(a.card.uuid, {}).get(b.card.uuid, 0) for b in picked if b.card.uuid != a.card.uuid)
        if best is None or total < best[0]:
            best = (total, a)
    return [best[1]] if best is not None else []


def _best_combination(picked: list[_Slot], nums: int, scores: Mapping[str, Mapping[str, int]]) -> list[_Slot]:
    """HAMi's generateCombinations + computeBestCombination: the first combination with the highest pair scores."""
    best: tuple[int, tuple[_Slot, ...]] | None = None
    for group in itertools.combinations(picked, nums):
        total = _pair_total(group, scores)
        if best is None or total > best[0]:
            best = (total, group)
    return list(best[1]) if best is not None else []


def _f32(value: float) -> float:
    """The value rounded to float32, as Go's float32 arithmetic rounds every step."""
    result: float = struct.unpack("f", struct.pack("f", value))[0]
    return result


def _score(slot: _Slot, request: CardRequest, weights: Weights = DEFAULT_WEIGHTS) -> float:
    """HAMi's DeviceListsScore.ComputeScore: how full the card would be, each part weighted, in float32.

    HAMi adds the request only to a card whose type is exactly "NVIDIA" (it compares the request's vendor word with
    the card's model), so for every real model the score is the card's usage alone.
    """
    card, used = slot.card, slot.usage
    if card.count == 0 or card.devcore == 0 or card.devmem == 0:
        return 0.0
    asked, cores, mem = 0, 0, 0
    if card.type == "NVIDIA":
        asked, cores, mem = 1, request.coresreq, memory_for(request, card)
    slots = _f32(_f32(asked + used.used_slots) / _f32(card.count))
    core = _f32(_f32(cores + used.used_cores) / _f32(card.devcore))
    memory = _f32(_f32(mem + used.used_mem) / _f32(card.devmem))
    slot_weight, core_weight, memory_weight = (_f32(float(weight)) for weight in weights)
    total = _f32(_f32(_f32(slot_weight * slots) + _f32(core_weight * core)) + _f32(memory_weight * memory))
    return _f32(_SCORE_WEIGHT * total)


def _insertion_sort(slots: list[_Slot], policy: str, bind: bool = False) -> None:
    """Go's insertionSort with HAMi's DeviceUsageList.Less (what sort.Sort does for up to 12 cards)."""
    less = _less_by_chain(policy, bind) if "," in policy or policy == "numa" else _less_single(policy, bind)
    for i in range(1, len(slots)):
        j = i
        while j > 0 and less(slots[j], slots[j - 1]):
            slots[j], slots[j - 1] = slots[j - 1], slots[j]
            j -= 1


_SINGLE_POLICIES = ("binpack", "spread", "mutex", "numa")
_CHAIN_KEYS = ("binpack", "spread", "numa")


def is_gpu_policy(policy: str) -> bool:
    """Whether HAMi reads `policy` as it is written: one of its policies, or a comma list of its sort keys. HAMi
    reads any other word as spread, so a typed one is more likely a typo than what the scheduler runs."""
    if policy in (*_SINGLE_POLICIES, TOPOLOGY_AWARE):
        return True
    words = [word.strip() for word in policy.split(",")]
    return "," in policy and all(word in _CHAIN_KEYS for word in words)


def _less_single(policy: str, bind: bool) -> Any:
    """Less for one policy word: mutex (busy first), binpack (emptiest first), else spread (fullest first); under
    numa-bind binpack puts higher NUMA nodes first and spread lower ones, the score ordering cards within one."""

    def less(a: _Slot, b: _Slot) -> bool:
        """HAMi's comparison, NUMA breaking ties."""
        if policy == "mutex":
            if a.usage.used_slots != b.usage.used_slots:
                return a.usage.used_slots > b.usage.used_slots
        elif bind:
            if a.card.numa == b.card.numa:
                return a.score < b.score if policy == "binpack" else a.score > b.score
            return a.card.numa > b.card.numa if policy == "binpack" else a.card.numa < b.card.numa
        elif a.score != b.score:
            return a.score < b.score if policy == "binpack" else a.score > b.score
        return a.card.numa < b.card.numa

    return less


def _less_by_chain(policy: str, bind: bool) -> Any:
    """Less for a comma list of binpack/spread/numa sort keys (spread when it names none; numa first under
    numa-bind), index breaking ties."""
    chain: list[str] = []
    for word in policy.split(","):
        if word.strip() in _CHAIN_KEYS and word.strip() not in chain:
            chain.append(word.strip())
    chain = chain or ["spread"]
    if bind and chain[0] != "numa":
        chain = ["numa", *(key for key in chain if key != "numa")]

    def less(a: _Slot, b: _Slot) -> bool:
        """HAMi's lessByChain."""
        for key in chain:
            if key == "binpack" and a.score != b.score:
                return a.score < b.score
            if key == "spread" and a.score != b.score:
                return a.score > b.score
            if key == "numa" and a.card.numa != b.card.numa:
                return a.card.numa < b.card.numa
        return a.card.index < b.card.index

    return less
