"""`status` at the size of a fleet: the cards summed per card type, and the nodes whose free memory is most stranded.

At thousands of nodes one table per node is unreadable; this summary reads the same cluster-info view and counts
open cards, whole free cards, free and stranded memory exactly as `fragmentation` does, grouped by card type.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kubectl_hami_place.core.cluster_info import ClusterInfo
from kubectl_hami_place.core.fragmentation import free_of, is_open


@dataclass(frozen=True)
class CardTypeRoom:
    """One card type across the fleet: where it is, how many cards, and their room (open cards only)."""

    card_type: str
    nodes: int
    cards: int
    open_cards: int
    whole_cards_free: int
    free_mib: int
    stranded_mib: int

    def to_dict(self) -> dict[str, Any]:
        """The row as JSON."""
        return {
            "type": self.card_type,
            "nodes": self.nodes,
            "cards": self.cards,
            "openCards": self.open_cards,
            "wholeCardsFree": self.whole_cards_free,
            "freeMiB": self.free_mib,
            "strandedMiB": self.stranded_mib,
        }


@dataclass(frozen=True)
class FragmentedNode:
    """A node with stranded memory: free memory on cards some pod already uses."""

    name: str
    card_types: tuple[str, ...]
    open_cards: int
    whole_cards_free: int
    free_mib: int
    stranded_mib: int
    largest_request_mib: int

    def to_dict(self) -> dict[str, Any]:
        """The node as JSON."""
        return {
            "name": self.name,
            "types": list(self.card_types),
            "openCards": self.open_cards,
            "wholeCardsFree": self.whole_cards_free,
            "freeMiB": self.free_mib,
            "strandedMiB": self.stranded_mib,
            "largestRequestMiB": self.largest_request_mib,
        }


@dataclass(frozen=True)
class FleetSummary:
    """The whole fleet in a few lines: node counts, one row per card type and a total, the most fragmented nodes."""

    nodes: int
    usable_nodes: int
    types: tuple[CardTypeRoom, ...]
    total: CardTypeRoom
    most_fragmented: tuple[FragmentedNode, ...]
    fragmented_nodes: int

    def to_dict(self) -> dict[str, Any]:
        """The summary as JSON."""
        return {
            "nodes": self.nodes,
            "usableNodes": self.usable_nodes,
            "cardTypes": [row.to_dict() for row in self.types],
            "total": self.total.to_dict(),
            "fragmentedNodes": self.fragmented_nodes,
            "mostFragmented": [node.to_dict() for node in self.most_fragmented],
        }


@dataclass
class _Tally:
    """A card type's counts while the cards are walked."""

    nodes: set[str]
    cards: int = 0
    open_cards: int = 0
    whole_cards_free: int = 0
    free_mib: int = 0
    stranded_mib: int = 0

    def row(self, card_type: str) -> CardTypeRoom:
        return CardTypeRoom(
            card_type,
            len(self.nodes),
            self.cards,
            self.open_cards,
            self.whole_cards_free,
            self.free_mib,
            self.stranded_mib,
        )


def summarize_fleet(info: ClusterInfo, top: int = 10) -> FleetSummary:
    """Per card type and in total; the `top` nodes with the most stranded memory (ties by name)."""
    tallies: dict[str, _Tally] = {}
    fragmented: list[FragmentedNode] = []
    # One pass over the cards, plain counters: at 5,000 nodes of 8 cards this is part of status's own time.
    for node in info.nodes:
        open_cards = whole = free_mib = stranded = largest = 0
        types = set()
        for card in node.cards:
            tally = tallies.get(card.type)
            if tally is None:
                tally = tallies[card.type] = _Tally(nodes=set())
            tally.nodes.add(node.name)
            tally.cards += 1
            types.add(card.type)
            if not is_open(node, card):
                continue
            free = free_of(card)
            tally.open_cards += 1
            tally.free_mib += free
            open_cards += 1
            free_mib += free
            largest = max(largest, free)
            if card.slots_used == 0:
                tally.whole_cards_free += 1
                whole += 1
            else:
                tally.stranded_mib += free
                stranded += free
        if stranded > 0:
            fragmented.append(
                FragmentedNode(node.name, tuple(sorted(types)), open_cards, whole, free_mib, stranded, largest)
            )
    fragmented.sort(key=lambda node: (-node.stranded_mib, node.name))
    rows = tuple(tallies[kind].row(kind) for kind in sorted(tallies))
    total = CardTypeRoom(
        "all",
        len(info.nodes),
        sum(row.cards for row in rows),
        sum(row.open_cards for row in rows),
        sum(row.whole_cards_free for row in rows),
        sum(row.free_mib for row in rows),
        sum(row.stranded_mib for row in rows),
    )
    return FleetSummary(
        nodes=len(info.nodes),
        usable_nodes=sum(1 for node in info.nodes if node.usable),
        types=rows,
        total=total,
        most_fragmented=tuple(fragmented[: max(top, 0)]),
        fragmented_nodes=len(fragmented),
    )


def placements_by_phase(placements: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """How many placements are in each phase (a placement without a status yet counts as Pending)."""
    counts: dict[str, int] = {}
    for item in placements:
        status = item.get("status")
        phase = status.get("phase") if isinstance(status, Mapping) else None
        key = phase if isinstance(phase, str) and phase else "Pending"
        counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items()))
