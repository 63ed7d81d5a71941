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
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from kubectl_hami_place.core.cards import Card
from kubectl_hami_place.core.requests import CardRequest, memory_for
from kubectl_hami_place.core.usage import CardUsage

USE_UUID = "nvidia.com/use-gpuuuid"
NOUSE_UUID = "nvidia.com/nouse-gpuuuid"
USE_TYPE = "nvidia.com/use-gputype"
NOUSE_TYPE = "nvidia.com/nouse-gputype"
VGPU_MODE = "nvidia.com/vgpu-mode"
GPU_SCHEDULER_POLICY = "hami.io/gpu-scheduler-policy"
DEVICE_CORDON = "hami.io/device-cordon"


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


def fit(
    card: Card,
    usage: CardUsage | None,
    request: CardRequest,
    annotations: Mapping[str, str] | None = None,
    cordoned: bool = False,
) -> FitResult:
    """Whether `request` fits `card` given its `usage`, checked in HAMi's order; `annotations` are the pod's."""
    annotations = annotations or {}
    used_slots = usage.used_slots if usage else 0
    used_cores = usage.used_cores if usage else 0
    label = card.label()
    memreq = memory_for(request, card)
    coresreq = min(request.coresreq, 100)

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
    if "mutex" in _split(annotations.get(GPU_SCHEDULER_POLICY, "")) and used_slots > 0:
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


def cordoned_cards(node_annotations: Mapping[str, str] | None) -> frozenset[str]:
    """The card UUIDs a node's `hami.io/device-cordon` annotation takes out of new placements."""
    value = (node_annotations or {}).get(DEVICE_CORDON)
    return frozenset(_split(value)) if isinstance(value, str) else frozenset()


def _split(value: str) -> list[str]:
    """A comma list with blanks dropped."""
    return [item.strip() for item in value.split(",") if item.strip()]


def _uuid_allowed(annotations: Mapping[str, str], uuid: str) -> bool:
    """HAMi's CheckUUID: exact UUIDs; an empty list means no constraint."""
    use = _split(annotations.get(USE_UUID, ""))
    nouse = _split(annotations.get(NOUSE_UUID, ""))
    return (not use or uuid in use) and uuid not in nouse


def _type_allowed(annotations: Mapping[str, str], card: Card) -> bool:
    """HAMi's CheckType: case-insensitive substrings of the card's type, and the card's mode in vgpu-mode."""
    card_type = card.type.upper()
    use = _split(annotations.get(USE_TYPE, ""))
    nouse = _split(annotations.get(NOUSE_TYPE, ""))
    if use and not any(item.upper() in card_type for item in use):
        return False
    if any(item.upper() in card_type for item in nouse):
        return False
    mode = annotations.get(VGPU_MODE)
    return mode is None or card.mode in mode
