"""Why a pod does not fit today: node by node, card by card, in HAMi's reason names."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kubectl_hami_place.core.fit import FitReason
from kubectl_hami_place.core.planner.model import Limits, PlanPod, Snapshot
from kubectl_hami_place.core.planner.state import State

NODE_UNSCHEDULABLE = "NodeUnschedulable"
NODE_NOT_SELECTED = "NodeNotSelected"
TOO_FEW_CARDS = "TooFewCards"


@dataclass(frozen=True)
class CardWhy:
    """One card's verdict for the pod."""

    uuid: str
    index: int
    ok: bool
    reason: FitReason | None
    message: str

    def to_dict(self) -> dict[str, Any]:
        """The verdict as JSON."""
        return {
            "uuid": self.uuid,
            "name": f"gpu-{self.index}",
            "fits": self.ok,
            "reason": None if self.reason is None else str(self.reason),
            "message": self.message,
        }


@dataclass(frozen=True)
class NodeWhy:
    """One node's verdict: fits when enough of its cards fit; else a node-level reason or the cards' reasons."""

    node: str
    fits: bool
    reason: str | None
    message: str
    cards: tuple[CardWhy, ...]

    def to_dict(self) -> dict[str, Any]:
        """The verdict as JSON."""
        return {
            "node": self.node,
            "fits": self.fits,
            "reason": self.reason,
            "message": self.message,
            "cards": [card.to_dict() for card in self.cards],
        }


def why(snapshot: Snapshot, pod: PlanPod) -> tuple[NodeWhy, ...]:
    """Each node's verdict for the pod as the cluster is now, in node-name order."""
    state = State(snapshot, Limits())
    gpu = pod.gpu_requests
    nums = max((request.nums for _, request in gpu), default=0)
    result = []
    for node, slots in state.by_node.items():
        cards = tuple(
            CardWhy(slot.card.uuid, slot.card.index, verdict.ok, verdict.reason, verdict.message)
            for slot in slots
            for verdict in (state.verdict(pod, slot),)
        )
        fitting = sum(card.ok for card in cards)
        if not state.node_open[node]:
            verdict = NodeWhy(node, False, NODE_UNSCHEDULABLE, "the node takes no new pods", cards)
        elif pod.nodes is not None and node not in pod.nodes:
            verdict = NodeWhy(node, False, NODE_NOT_SELECTED, "the pod's node selection excludes the node", cards)
        elif fitting >= nums:
            verdict = NodeWhy(node, True, None, f"{fitting} card(s) fit, the pod needs {nums}", cards)
        else:
            verdict = NodeWhy(node, False, TOO_FEW_CARDS, f"{fitting} card(s) fit, the pod needs {nums}", cards)
        result.append(verdict)
    return tuple(result)
