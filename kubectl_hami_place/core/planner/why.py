"""Why a pod does not fit today: node by node, card by card, in HAMi's reason names."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kubectl_hami_place.core.attach_limits import VOLUME_LIMITS, driver_of_scalar
from kubectl_hami_place.core.fit import FitReason
from kubectl_hami_place.core.hami_config import HAMI_DEFAULTS, HamiConfig
from kubectl_hami_place.core.node_resources import shortfall
from kubectl_hami_place.core.planner.model import Limits, PlanPod, Snapshot
from kubectl_hami_place.core.planner.state import State

NODE_UNSCHEDULABLE = "NodeUnschedulable"
NODE_NOT_SELECTED = "NodeNotSelected"
TAINT_NOT_TOLERATED = "TaintNotTolerated"
NO_FIT = "NodeFitFailed"
NO_RESOURCES = "NodeResourcesFit"
NODE_CLOSED = (
    "the node takes no new pods: not Ready, cordoned, its register unreadable, or no allocatable nvidia.com/gpu "
    "(HAMi's health check then drops and re-adds the node and the kubelet refuses GPU pods there)"
)


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
    """One node's verdict: HAMi's for a node the pod may use, else why the node is out; and each card's reason."""

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


def why(snapshot: Snapshot, pod: PlanPod, config: HamiConfig = HAMI_DEFAULTS) -> tuple[NodeWhy, ...]:
    """Each node's verdict for the pod as the cluster is now, in node-name order.

    A usable, selected node's verdict is HAMi's own (`fit.fit_pod`), with its `FailedNodes` text as the message.
    """
    state = State(snapshot, Limits())
    result = []
    for node, slots in state.by_node.items():
        cards = tuple(
            CardWhy(slot.card.uuid, slot.card.index, verdict.ok, verdict.reason, verdict.message)
            for slot in slots
            for verdict in (state.verdict(pod, slot),)
        )
        if not state.node_open[node]:
            verdict = NodeWhy(node, False, NODE_UNSCHEDULABLE, NODE_CLOSED, cards)
        elif not pod.runs_on(node):
            taint = pod.untolerated.get(node)
            if taint:
                verdict = NodeWhy(
                    node, False, TAINT_NOT_TOLERATED, f"the pod does not tolerate the taint {taint}", cards
                )
            elif node in pod.kept_off:
                name, words = pod.kept_off[node]
                verdict = NodeWhy(node, False, name, f"kube-scheduler: {words}", cards)
            else:
                verdict = NodeWhy(node, False, NODE_NOT_SELECTED, "the pod's node selection excludes the node", cards)
        elif not state.holds(node, pod, state.node_of(pod)):
            room = state.room[node]
            message = f"kube-scheduler: {shortfall(room, pod.needs)}"
            # NodeResourcesFit filters before NodeVolumeLimits: it is named when it refuses too.
            limits_only = all(driver_of_scalar(count) for count in room.short(pod.needs))
            verdict = NodeWhy(node, False, VOLUME_LIMITS if limits_only else NO_RESOURCES, message, cards)
        else:
            cordoned = frozenset(slot.card.uuid for slot in slots if slot.cordoned)
            hami = state.hami_fit(pod, node, pod.annotations, cordoned, config)
            if hami.ok:
                chosen = [state.by_uuid[uuid].card for uuid in dict.fromkeys(_flat(hami.devices))]
                placed = ", ".join(card.name for card in chosen)
                mig = ", ".join(card.name for card in chosen if card.is_mig)
                caveat = (
                    f" ({mig} in MIG mode, which hami-place does not model: HAMi may decide otherwise)" if mig else ""
                )
                verdict = NodeWhy(node, True, None, f"HAMi places it on {placed}{caveat}", cards)
            else:
                verdict = NodeWhy(node, False, NO_FIT, f"HAMi: {hami.reason}", cards)
        result.append(verdict)
    return tuple(result)


def _flat(devices: tuple[tuple[str, ...], ...]) -> list[str]:
    """Every card UUID of every container, in order."""
    return [uuid for container in devices for uuid in container]
