"""The per-card verdict `pin` prints: does the placed pod fit each named card now, or once the evicted pod is gone."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from kubectl_hami_place.core.cards import Card
from kubectl_hami_place.core.errors import CardRefError
from kubectl_hami_place.core.fit import FitReason, fit
from kubectl_hami_place.core.refs import CardRef, resolve
from kubectl_hami_place.core.requests import CardRequest, memory_for, with_percent
from kubectl_hami_place.core.usage import CardUsage, PodAllocation, release


@dataclass(frozen=True)
class CardCheck:
    """One named card: the card (None when unknown), the request it would get, and the verdict now / after eviction.

    `fits_after_eviction` is None when no pod is to be evicted. `reason` and `message` explain the verdict that
    decides: the one after eviction when there is an eviction, else the one now.
    """

    ref: CardRef
    card: Card | None
    request: CardRequest
    memory_mib: int
    fits_now: bool
    fits_after_eviction: bool | None
    reason: FitReason | None
    message: str

    @property
    def ok(self) -> bool:
        """True when the placement can be honoured on this card (after the eviction, if there is one)."""
        return self.fits_now if self.fits_after_eviction is None else self.fits_after_eviction


def check_pin(
    cards: Sequence[Card],
    usage_by_uuid: Mapping[str, CardUsage],
    refs: Iterable[CardRef],
    request: CardRequest,
    evict_allocation: PodAllocation | None = None,
    *,
    node: str = "the node",
    annotations: Mapping[str, str] | None = None,
    cordoned: Iterable[str] = (),
) -> list[CardCheck]:
    """Check each reference of a placement against its node's cards; `cordoned` holds cordoned card UUIDs."""
    after = release(usage_by_uuid, evict_allocation) if evict_allocation is not None else None
    cordoned_uuids = frozenset(cordoned)
    checks = []
    for ref in refs:
        placed = with_percent(request, ref.percent)
        try:
            card = resolve(ref, cards, node)
        except CardRefError as err:
            checks.append(CardCheck(ref, None, placed, 0, False, None, FitReason.UnknownCard, str(err)))
            continue
        memory = memory_for(placed, card)
        if ref.percent is not None and request.memreq > card.devmem * ref.percent // 100:
            limit = card.devmem * ref.percent // 100
            message = (
                f"{card.label()}: the pod asks {request.memreq} MiB, more than {ref.percent}% of the card ({limit} MiB)"
            )
            checks.append(CardCheck(ref, card, placed, memory, False, None, FitReason.RequestExceedsPercent, message))
            continue
        is_cordoned = card.uuid in cordoned_uuids
        now = fit(card, usage_by_uuid.get(card.uuid), placed, annotations, is_cordoned)
        later = fit(card, after.get(card.uuid), placed, annotations, is_cordoned) if after is not None else None
        decisive = later if later is not None else now
        message = decisive.message
        if later is not None and later.ok and not now.ok:
            message = f"{now.message}; fits once {evict_allocation.key if evict_allocation else 'the pod'} is evicted"
        checks.append(
            CardCheck(
                ref=ref,
                card=card,
                request=placed,
                memory_mib=memory,
                fits_now=now.ok,
                fits_after_eviction=later.ok if later is not None else None,
                reason=decisive.reason,
                message=message,
            )
        )
    return checks


def card_count_mismatch(requests: Iterable[CardRequest | None], refs: Sequence[CardRef]) -> str | None:
    """The reason a pod cannot take these cards because a GPU container's card count differs, else None."""
    for position, request in enumerate(requests):
        if request is not None and request.nums != len(refs):
            return (
                f"container {position} asks {request.nums} card(s) (nvidia.com/gpu) but the placement names "
                f"{len(refs)}; give one --gpu per card"
            )
    return None
