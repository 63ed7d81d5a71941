"""How fragmented the cluster's GPU memory is, from the cluster-info view.

Definitions (memory in MiB):

- An *open card* can take a new pod now: its node is usable (Ready, not cordoned, allocatable `nvidia.com/gpu`
  above 0, register readable), the card is NVIDIA, healthy and not device-cordoned, it has a free slot, and its
  cores are not all taken (HAMi refuses even a 0-core request on such a card). Its *free memory* is
  `devmem - used`, never below 0.
- `whole_cards_free`: open cards with no slot used at all (a pod can have the card to itself).
- `free_mib`: the sum of free memory over open cards.
- `largest_request_mib`: the largest one-card memory request that still fits somewhere: the most free memory on
  any open card (0 when there is none).
- `stranded_mib`: free memory on open cards that some pod already uses (a slot taken): a request for a whole card
  of that type cannot have it. An idle card is whole, whatever its size beside the cluster's largest cards.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol


class CardInfo(Protocol):
    """What the summary reads of a card (core.cluster_info.CardInfo has it): declared here, so it needs no view."""

    @property
    def schedulable(self) -> bool: ...

    @property
    def slots_free(self) -> int: ...

    @property
    def memory_free(self) -> int: ...

    @property
    def slots_used(self) -> int: ...

    @property
    def memory_total(self) -> int: ...

    @property
    def cores_total(self) -> int: ...

    @property
    def cores_used(self) -> int: ...


class NodeInfo(Protocol):
    """What the summary reads of a node (core.cluster_info.NodeInfo)."""

    @property
    def name(self) -> str: ...

    @property
    def usable(self) -> bool: ...

    @property
    def cards(self) -> Sequence[CardInfo]: ...


class ClusterInfo(Protocol):
    """What the summary reads of the cluster-info view (core.cluster_info.ClusterInfo)."""

    @property
    def nodes(self) -> Sequence[NodeInfo]: ...


@dataclass(frozen=True)
class NodeFragmentation:
    """One node's share of the summary."""

    name: str
    open_cards: int
    whole_cards_free: int
    free_mib: int
    largest_request_mib: int
    stranded_mib: int

    def to_dict(self) -> dict[str, Any]:
        """The node summary as JSON."""
        return {
            "name": self.name,
            "openCards": self.open_cards,
            "wholeCardsFree": self.whole_cards_free,
            "freeMiB": self.free_mib,
            "largestRequestMiB": self.largest_request_mib,
            "strandedMiB": self.stranded_mib,
        }


@dataclass(frozen=True)
class Fragmentation:
    """The cluster's fragmentation summary (definitions in the module docstring)."""

    open_cards: int
    whole_cards_free: int
    free_mib: int
    largest_request_mib: int
    stranded_mib: int
    nodes: tuple[NodeFragmentation, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The summary as JSON (part of the cluster-info document)."""
        return {
            "openCards": self.open_cards,
            "wholeCardsFree": self.whole_cards_free,
            "freeMiB": self.free_mib,
            "largestRequestMiB": self.largest_request_mib,
            "strandedMiB": self.stranded_mib,
            "nodes": [node.to_dict() for node in self.nodes],
        }


def is_open(node: NodeInfo, card: CardInfo) -> bool:
    """Whether the card can take a new pod now (see the module docstring)."""
    return node.usable and _card_open(card)


def _card_open(card: CardInfo) -> bool:
    """Whether the card itself can take a new pod, on a usable node."""
    cores_exhausted = card.cores_total != 0 and card.cores_used >= card.cores_total
    return card.schedulable and card.slots_free > 0 and not cores_exhausted


def free_of(card: CardInfo) -> int:
    """The card's free memory, never below 0."""
    return max(card.memory_free, 0)


def node_fragmentation(name: str, cards: Sequence[CardInfo]) -> NodeFragmentation:
    """One node's summary from its open cards."""
    free = [free_of(card) for card in cards]
    return NodeFragmentation(
        name=name,
        open_cards=len(cards),
        whole_cards_free=sum(1 for card in cards if card.slots_used == 0),
        free_mib=sum(free),
        largest_request_mib=max(free, default=0),
        stranded_mib=sum(mib for card, mib in zip(cards, free, strict=True) if card.slots_used != 0),
    )


def combine(nodes: Sequence[NodeFragmentation]) -> Fragmentation:
    """The cluster's summary from its nodes' (the webhook keeps them per node and sums them)."""
    return Fragmentation(
        open_cards=sum(node.open_cards for node in nodes),
        whole_cards_free=sum(node.whole_cards_free for node in nodes),
        free_mib=sum(node.free_mib for node in nodes),
        largest_request_mib=max((node.largest_request_mib for node in nodes), default=0),
        stranded_mib=sum(node.stranded_mib for node in nodes),
        nodes=tuple(nodes),
    )


def summarize(info: ClusterInfo) -> Fragmentation:
    """The fragmentation summary of a cluster-info view."""
    return combine(
        [
            node_fragmentation(node.name, [card for card in node.cards if _card_open(card)] if node.usable else [])
            for node in info.nodes
        ]
    )
