"""The per-card verdict `pin` prints: does the placed pod fit each named card now, or once the evicted pod is gone."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from kubectl_hami_place.core.cards import Card
from kubectl_hami_place.core.errors import CardRefError
from kubectl_hami_place.core.fit import FitReason, FitResult, fit
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
    """Check each reference of a placement against its node's cards for one container's request."""
    return check_pin_pod(
        cards,
        usage_by_uuid,
        refs,
        [request],
        evict_allocation,
        node=node,
        annotations=annotations,
        cordoned=cordoned,
    )


def card_count_mismatch(requests: Iterable[CardRequest | None], refs: Sequence[CardRef]) -> str | None:
    """The reason a pod cannot take these cards because a GPU container's card count differs, else None."""
    for position, request in enumerate(requests):
        if request is not None and request.nums != len(refs):
            return (
                f"container {position} asks {request.nums} card(s) (nvidia.com/gpu) but the placement names "
                f"{len(refs)}; give one --gpu per card"
            )
    return None


def check_pin_pod(
    cards: Sequence[Card],
    usage_by_uuid: Mapping[str, CardUsage],
    refs: Iterable[CardRef],
    requests: Sequence[CardRequest | None],
    evict_allocation: PodAllocation | None = None,
    *,
    init_containers: int = 0,
    node: str = "the node",
    annotations: Mapping[str, str] | None = None,
    cordoned: Iterable[str] = (),
) -> list[CardCheck]:
    """check_pin for a whole pod: its GPU containers (`pod_requests` order) fitted one after another on each card.

    HAMi fits container by container and counts each app container's share before fitting the next, so two
    containers that each fit alone may not fit together (e.g. two 100-core containers on one card). Init
    containers run one at a time, so each is fitted against the card alone. The verdict and message are those
    of the first container that does not fit (prefixed `container N:` when the pod has several GPU containers).
    """
    gpu = [(position, request) for position, request in enumerate(requests) if request is not None]
    if not gpu:
        return []
    after = release(usage_by_uuid, evict_allocation) if evict_allocation is not None else None
    cordoned_uuids = frozenset(cordoned)
    checks = []
    for ref in refs:
        first = with_percent(gpu[0][1], ref.percent)
        try:
            card = resolve(ref, cards, node)
        except CardRefError as err:
            checks.append(CardCheck(ref, None, first, 0, False, None, FitReason.UnknownCard, str(err)))
            continue
        placed = [(position, with_percent(request, ref.percent)) for position, request in gpu]
        too_big = next(
            (r for _, r in gpu if ref.percent is not None and r.memreq > card.devmem * ref.percent // 100), None
        )
        if too_big is not None and ref.percent is not None:
            limit = card.devmem * ref.percent // 100
            message = (
                f"{card.label()}: the pod asks {too_big.memreq} MiB, more than {ref.percent}% of the card ({limit} MiB)"
            )
            checks.append(CardCheck(ref, card, first, 0, False, None, FitReason.RequestExceedsPercent, message))
            continue
        sequence = _Sequence(card, tuple(placed), init_containers, annotations or {}, card.uuid in cordoned_uuids)
        now = sequence.fit(usage_by_uuid.get(card.uuid))
        later = sequence.fit(after.get(card.uuid)) if after is not None else None
        decisive = later if later is not None else now
        message = decisive.message
        if later is not None and later.ok and not now.ok:
            message = f"{now.message}; fits once {evict_allocation.key if evict_allocation else 'the pod'} is evicted"
        checks.append(
            CardCheck(
                ref=ref,
                card=card,
                request=first,
                memory_mib=_pod_memory(card, placed, init_containers),
                fits_now=now.ok,
                fits_after_eviction=later.ok if later is not None else None,
                reason=decisive.reason,
                message=message,
            )
        )
    return checks


@dataclass(frozen=True)
class _Sequence:
    """A pod's GPU containers to fit one after another on one card."""

    card: Card
    placed: tuple[tuple[int, CardRequest], ...]
    init_containers: int
    annotations: Mapping[str, str]
    cordoned: bool

    def fit(self, usage: CardUsage | None) -> FitResult:
        """The first failing container's verdict, else the last container's success."""
        base = usage or CardUsage(self.card.uuid)
        running = base
        result = FitResult(ok=True, reason=None, message=f"{self.card.label()} fits")
        for position, request in self.placed:
            is_init = position < self.init_containers
            result = fit(self.card, base if is_init else running, request, self.annotations, self.cordoned)
            if not result.ok:
                prefix = f"container {position}: " if len(self.placed) > 1 else ""
                return FitResult(ok=False, reason=result.reason, message=prefix + result.message)
            if not is_init:
                running = replace(
                    running,
                    used_slots=running.used_slots + 1,
                    used_mem=running.used_mem + memory_for(request, self.card),
                    used_cores=running.used_cores + min(request.coresreq, 100),
                )
        return result


def _pod_memory(card: Card, placed: Sequence[tuple[int, CardRequest]], init_containers: int) -> int:
    """MiB the pod will hold on the card: the larger of its biggest init container and its app containers' sum."""
    init_peak = max((memory_for(r, card) for p, r in placed if p < init_containers), default=0)
    app_sum = sum(memory_for(r, card) for p, r in placed if p >= init_containers)
    return max(init_peak, app_sum)
