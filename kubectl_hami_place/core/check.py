"""The per-card verdict of a pin: does the whole pod fit the card now, and once the evicted pod's share is released.

HAMi fits a pod container by container and counts each app container's share before fitting the next, so two
containers that each fit alone may not fit together (e.g. two 100-core containers on one card). Init containers
run one at a time, so each is fitted against the card alone. `core.pin_check` calls this once per named card with the
requests the containers will have once pinned.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kubectl_hami_place.core.cards import Card
from kubectl_hami_place.core.fit import FitReason, FitResult, fit, taking
from kubectl_hami_place.core.refs import CardRef
from kubectl_hami_place.core.requests import CardRequest, memory_for
from kubectl_hami_place.core.usage import CardUsage


@dataclass(frozen=True)
class Placed:
    """One GPU container as it will be once pinned: its name, whether it is an init container, its request."""

    name: str
    init: bool
    request: CardRequest


@dataclass(frozen=True)
class CardCheck:
    """One named card: the card, what the pod gets there, and the verdict now / after eviction.

    `fits_after_eviction` is None when no pod is to be evicted. `reason` and `message` explain the verdict that
    decides: the one after eviction when there is an eviction, else the one now.
    """

    ref: CardRef
    card: Card
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


def check_card(
    ref: CardRef,
    card: Card,
    placed: Sequence[Placed],
    now: CardUsage | None,
    after: CardUsage | None = None,
    *,
    evicting: str = "",
    annotations: Mapping[str, str] | None = None,
    cordoned: bool = False,
    default_policy: str = "",
) -> CardCheck:
    """The verdict of the whole pod on one card; `after` is the card's usage once `evicting` is gone (or None).

    `default_policy` is HAMi's `--gpu-scheduler-policy` for a pod naming none (a `mutex` default refuses a used card).
    """
    sequence = _Sequence(card, tuple(placed), annotations or {}, cordoned, default_policy)
    verdict_now = sequence.fit(now)
    verdict_after = sequence.fit(after) if evicting else None
    decisive = verdict_after if verdict_after is not None else verdict_now
    message = decisive.message
    if verdict_after is not None and verdict_after.ok and not verdict_now.ok:
        message = f"{verdict_now.message}; fits once {evicting} is evicted"
    return CardCheck(
        ref=ref,
        card=card,
        request=placed[0].request,
        memory_mib=pod_memory(card, placed),
        fits_now=verdict_now.ok,
        fits_after_eviction=verdict_after.ok if verdict_after is not None else None,
        reason=decisive.reason,
        message=message,
    )


def pod_memory(card: Card, placed: Sequence[Placed]) -> int:
    """MiB the pod will hold on the card: the larger of its biggest init container and its app containers' sum."""
    init_peak = max((memory_for(p.request, card) for p in placed if p.init), default=0)
    app_sum = sum(memory_for(p.request, card) for p in placed if not p.init)
    return max(init_peak, app_sum)


@dataclass(frozen=True)
class _Sequence:
    """A pod's GPU containers to fit one after another on one card."""

    card: Card
    placed: tuple[Placed, ...]
    annotations: Mapping[str, str]
    cordoned: bool
    default_policy: str

    def fit(self, usage: CardUsage | None) -> FitResult:
        """The first failing container's verdict, else the last container's success."""
        base = usage or CardUsage(self.card.uuid)
        running = base
        result = FitResult(ok=True, reason=None, message=f"{self.card.label()} fits")
        for container in self.placed:
            request = container.request
            usage_now = base if container.init else running
            result = fit(
                self.card, usage_now, request, self.annotations, self.cordoned, default_policy=self.default_policy
            )
            if not result.ok:
                prefix = f"container {container.name}: " if len(self.placed) > 1 else ""
                return FitResult(ok=False, reason=result.reason, message=prefix + result.message)
            if not container.init:
                running = taking(running, request, self.card)
        return result
