"""Card references in a placement: `gpu-N` (register index N), `gpu-N/P` (P% of that card's memory), a card UUID.

HAMi has no way to pick a card by index, so `gpu-N` is resolved through the node's register to a UUID, which is
what the webhook writes into `nvidia.com/use-gpuuuid`. Cards are said back the same way, by node and index
(`node/gpu-1,gpu-2`), where plans, moves and the controller's Events say where a pod is or goes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from kubectl_hami_place.core.cards import Card
from kubectl_hami_place.core.errors import CardRefError, clip

GPU_DEVICE_PATTERN = r"^(gpu-[0-9]+(/([1-9][0-9]?|100))?|GPU-[0-9A-Za-z-]+)$"
"""The pattern the CRD's schema puts on every `spec.gpuDevices` entry (kept identical to the CRD)."""

_PATTERN = re.compile(GPU_DEVICE_PATTERN)
_MAX_INDEX = 2**64 - 1


@dataclass(frozen=True)
class CardRef:
    """A reference to one card: by register `index` or by `uuid` (exactly one set), with an optional memory %."""

    index: int | None = None
    uuid: str | None = None
    percent: int | None = None

    def __post_init__(self) -> None:
        """Keep only references that render to text the CRD accepts."""
        if (self.index is None) == (self.uuid is None):
            raise CardRefError("a card reference names either an index or a UUID")
        if self.percent is not None and not 1 <= self.percent <= 100:
            raise CardRefError(f"card memory percent {self.percent} is outside 1..100")
        if self.uuid is not None and self.percent is not None:
            raise CardRefError(f"{self.uuid}: a percent can only follow gpu-N, not a UUID")
        if self.index is not None and not 0 <= self.index <= _MAX_INDEX:
            raise CardRefError(f"card index {self.index} is out of range")
        if self.uuid is not None and not _PATTERN.fullmatch(self.uuid):
            raise CardRefError(f"{self.uuid!r} is not a card UUID (GPU-...)")

    def __str__(self) -> str:
        """The reference as written in `spec.gpuDevices`."""
        if self.uuid is not None:
            return self.uuid
        suffix = "" if self.percent is None else f"/{self.percent}"
        return f"gpu-{self.index}{suffix}"


def parse_card_ref(text: object) -> CardRef:
    """Parse `gpu-N`, `gpu-N/P` (P in 1..100) or `GPU-...` into a CardRef."""
    if not isinstance(text, str):
        raise CardRefError(f"card reference must be a string, got {type(text).__name__}")
    if not _PATTERN.fullmatch(text):
        raise CardRefError(
            f"{clip(text, 60)!r} is not a card reference: use gpu-<index>, gpu-<index>/<percent 1..100> "
            "or a card UUID (GPU-...)"
        )
    if text.startswith("GPU-"):
        return CardRef(uuid=text)
    body = text[len("gpu-") :]
    index_text, _, percent_text = body.partition("/")
    index_text = index_text.lstrip("0") or "0"
    if len(index_text) > len(str(_MAX_INDEX)):  # past the range CardRef checks, and past what int() reads
        raise CardRefError(f"{clip(text, 60)!r} names a card index no node has: use gpu-<index> of a registered card")
    return CardRef(index=int(index_text), percent=int(percent_text) if percent_text else None)


def _named(ref: CardRef, cards: tuple[Card, ...]) -> list[Card]:
    """The cards a reference matches: by UUID, or by index (legacy registers give several cards one index)."""
    return [card for card in cards if card.uuid == ref.uuid or card.index == ref.index]


def resolve(ref: CardRef, cards: Iterable[Card], node: str) -> Card:
    """The node's card a reference names, or CardRefError listing the cards the node has."""
    cards = tuple(cards)
    found = _named(ref, cards)
    if len(found) == 1:
        return found[0]
    if len(found) > 1:
        uuids = ", ".join(card.uuid for card in found)
        raise CardRefError(f"node {node} has {len(found)} cards registered as {ref}: {uuids}; name the card by UUID")
    have = ", ".join(card.name if ref.index is not None else card.uuid for card in cards) or "no cards"
    what = f"index {ref.index}" if ref.index is not None else f"UUID {ref.uuid}"
    raise CardRefError(f"node {node} has no card with {what}; it has {have}")


def uuids_named(refs: Iterable[CardRef], cards: Iterable[Card]) -> set[str]:
    """The UUIDs of the node's cards the references name (a reference that names none is left out)."""
    cards = tuple(cards)
    return {found[0].uuid for found in (_named(ref, cards) for ref in refs) if len(found) == 1}


def place(node: str, cards: Sequence[str]) -> str:
    """Where a pod is or goes, in words: `node/gpu-1,gpu-2`, the node when no card is named, `-` when neither is."""
    if not node:
        return "-"
    return f"{node}/{','.join(cards)}" if cards else node


def where(node: str, uuids: Iterable[str], names: Mapping[str, str]) -> str:
    """Where a pod is or goes, in words: `node/gpu-1,gpu-2` from the card names by UUID, a card `names` lacks by its
    UUID."""
    return place(node, [names.get(uuid, uuid) for uuid in uuids])
