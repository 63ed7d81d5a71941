"""The planner's input snapshot, goals, limits and output: small frozen dataclasses over plain data.

A snapshot holds every GPU node with its register cards and every placed pod with HAMi's allocation
(`usage.PodAllocation`), its GPU requests (`requests.pod_requests` order: init containers first), its controller and
its PodDisruptionBudgets. Memory is in MiB, cores in percent of a card.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from types import MappingProxyType
from typing import Any

from kubectl_hami_place.core.cards import Card
from kubectl_hami_place.core.fit import FIT_ANNOTATIONS, USE_UUID
from kubectl_hami_place.core.node_resources import NOTHING, Resources
from kubectl_hami_place.core.pod_affinity import CountedPods, PortHolder, Repeller
from kubectl_hami_place.core.requests import CardRequest
from kubectl_hami_place.core.usage import PodAllocation

DO_NOT_MOVE = "scheduling.hami.placement.com/do-not-move"
PLACED_BY = "scheduling.hami.placement.com/placement"
SYSTEM_CRITICAL = frozenset({"system-cluster-critical", "system-node-critical"})
NOT_RECREATING = frozenset({"DaemonSet", "Node"})
MIRROR = "kubernetes.io/config.mirror"
SEARCH_STEPS = 100_000
"""The default search bound (`Limits.max_steps`): under 0.8 s of CPU at 1,213 nodes and 6,212 cards on a shared 2-core
box, 0.34 s at the median (docs/performance.md, "Planning time at 1,213 nodes"); the trace replay's inflation found
plans after up to 98,000 steps."""
_NO_ANNOTATIONS: Mapping[str, str] = MappingProxyType({})
"""`PlanPod.fit_annotations` of every pod with none HAMi's fit reads."""


def asks_not_to_move(annotations: Mapping[str, Any]) -> bool:
    """Whether a pod's annotations ask that it never move: any value of DO_NOT_MOVE but "false", in any case."""
    return str(annotations.get(DO_NOT_MOVE, "false")).lower() != "false"


@dataclass(frozen=True)
class PlanNode:
    """A GPU node: its cards, whether new pods may land on it, its device-cordoned card UUIDs, its cards' pair
    scores (`hami.io/node-nvidia-score`, by card UUID; None without them), which HAMi's topology-aware policy reads,
    the CPU, memory and pods it has left for kube-scheduler (`node_resources`; None: not counted), and its labels
    (the defragmentation policy's nodeSelector reads them).

    `barred` says, by card UUID, why a caller keeps a card from new pods as the cordon does (the card is also in
    `cordoned`): a plan's reasons say that instead of the cordon annotation."""

    name: str
    cards: tuple[Card, ...]
    schedulable: bool = True
    cordoned: frozenset[str] = frozenset()
    barred: Mapping[str, str] = field(default_factory=dict, hash=False)
    pair_scores: Mapping[str, Mapping[str, int]] | None = field(default=None, hash=False)
    room: Resources | None = None
    labels: Mapping[str, Any] = field(default_factory=dict, hash=False)


@dataclass(frozen=True)
class PlanPod:
    """A pod as the planner sees it; `allocation` is None for a pod HAMi has not placed (Pending).

    `owner_kind` is the kind of its controller ("" when none) and `owner_uid` its UID, `priority` its `spec.priority`,
    `budgets` the PodDisruptionBudgets ("ns/name") that select it, `nodes` the node names its node selection and
    tolerations let it run on (None: any), `untolerated` the taint (`key=value:Effect`) that keeps it off each node its
    tolerations exclude from `nodes`, `kept_off` the kube-scheduler filter and the words of why it is kept off each node
    of those that another filter refuses (host ports, volumes, pod affinity and spreads), a node it may not run on
    either (`runs_on`), though not taken out of `nodes`: one set per replica of the rest of 1,213 nodes held 1.9 GiB at
    29,000 pods (bench/pod_terms.py); `held` why a caller keeps it where it is in this plan ("" when it may move; the
    defragmentation controller's policy), `default_policy` HAMi's `--gpu-scheduler-policy`, which its fit applies when
    the pod names no policy, `needs` the CPU, memory and pod count it asks of a node (`node_resources.pod_resources`);
    `labels` and `created` tell the controller's cooldown which pods a moved pod's workload made after the move,
    `scheduled` when it was bound to its node (its PodScheduled condition: the policy's minPodAge); `stays`
    why a placed pod may move only between its own node's cards ("" when it may go to others); `counts` the pods where
    kube-scheduler lets its replacement go depends on (`pod_affinity.counted_pods`), none of which a plan moves to
    another node beside it; `local_storage` the kind of its first emptyDir or hostPath volume ("" when none) and
    `mounts_claim` whether it mounts a PersistentVolumeClaim, by which the controller's policy may hold it.
    """

    namespace: str
    name: str
    requests: tuple[CardRequest | None, ...]
    init_containers: int = 0
    annotations: Mapping[str, str] = field(default_factory=dict)
    allocation: PodAllocation | None = None
    owner_kind: str = ""
    owner_uid: str = ""
    priority_class: str = ""
    priority: int = 0
    budgets: tuple[str, ...] = ()
    nodes: frozenset[str] | None = None
    untolerated: Mapping[str, str] = field(default_factory=dict, hash=False)
    kept_off: Mapping[str, tuple[str, str]] = field(default_factory=dict, hash=False)
    uid: str = ""
    held: str = ""
    default_policy: str = ""
    needs: Resources = NOTHING
    labels: Mapping[str, str] = field(default_factory=dict, hash=False)
    created: datetime | None = None
    scheduled: datetime | None = None
    stays: str = ""
    counts: tuple[CountedPods, ...] = ()
    local_storage: str = ""
    mounts_claim: bool = False

    @cached_property
    def key(self) -> str:
        """`namespace/name`, made once: every plan reads it of every pod many times."""
        return f"{self.namespace}/{self.name}"

    def runs_on(self, node: str) -> bool:
        """Whether kube-scheduler lets the pod (or its replacement) onto `node`: its node selection and tolerations
        allow it (`nodes`) and no other filter keeps it off (`kept_off`)."""
        return (self.nodes is None or node in self.nodes) and node not in self.kept_off

    @cached_property
    def never_moves(self) -> str | None:
        """Why the pod must never move whatever the plan, or None when it may: worked out once, as each plan asks it
        of every pod on a card the plan would free."""
        if self.held:
            return self.held
        if self.allocation is not None and self.allocation.deleting:
            return "is terminating"
        if asks_not_to_move(self.annotations):
            return f"is annotated {DO_NOT_MOVE}"
        if self.priority_class in SYSTEM_CRITICAL:
            return f"is system-critical ({self.priority_class})"
        if MIRROR in self.annotations or self.owner_kind == "Node":
            return "is a static pod"
        if self.owner_kind in NOT_RECREATING:
            return f"belongs to a {self.owner_kind}, which would not recreate it elsewhere"
        if not self.owner_kind:
            return "has no controller to recreate it"
        gpu = self.gpu_requests
        if not gpu:
            return "has no GPU request in its spec"
        if len(gpu) > 1 and any(request.nums != gpu[0][1].nums for _, request in gpu[1:]):
            return "has GPU containers asking different card counts, which one placement cannot pin"
        return None

    @cached_property
    def kept_key(self) -> frozenset[str] | None:
        """The nodes of `kept_off`, hashable (None when there are none): the search remembers its walks by them."""
        return frozenset(self.kept_off) if self.kept_off else None

    @cached_property
    def gpu_requests(self) -> tuple[tuple[int, CardRequest], ...]:
        """(container position, request) of each container that asks for cards."""
        return tuple((position, request) for position, request in enumerate(self.requests) if request is not None)

    @cached_property
    def fit_annotations(self) -> Mapping[str, str]:
        """The annotations HAMi's fit reads (`FIT_ANNOTATIONS`), without a `use-gpuuuid` hami-place wrote for an
        earlier placement: pods that differ only in others, HAMi's own allocation annotations among them, share one
        fit kind and so their verdicts and walks (`State.fit_kind`). One empty mapping for the pods with none."""
        placed = PLACED_BY in self.annotations
        read = {
            key: value
            for key in FIT_ANNOTATIONS
            if (value := self.annotations.get(key)) is not None and not (placed and key == USE_UUID)
        }
        return read or _NO_ANNOTATIONS


@dataclass(frozen=True)
class Snapshot:
    """The cluster at one moment: nodes, placed pods, each PodDisruptionBudget's disruptions allowed, the bound
    pods whose required anti-affinity keeps others off or that hold host ports (a Pending pod's nodes are judged by
    them too), and the scalar resources the nodes' rooms count (`node_resources.counted_scalars`)."""

    nodes: tuple[PlanNode, ...]
    pods: tuple[PlanPod, ...]
    budgets: Mapping[str, int] = field(default_factory=dict)
    repellers: tuple[Repeller, ...] = ()
    port_holders: tuple[PortHolder, ...] = ()
    scalars: frozenset[str] = frozenset()

    def card_names(self) -> dict[str, str]:
        """Each card's `gpu-N` by UUID: a move's cards in words (`refs.where`)."""
        return {card.uuid: card.name for node in self.nodes for card in node.cards}


@dataclass(frozen=True)
class FitGoal:
    """Make room for one pod (usually Pending) with the fewest moves."""

    pod: PlanPod

    def describe(self) -> str:
        """The goal in words."""
        return f"make room for {self.pod.key}"


@dataclass(frozen=True)
class FreeCardsGoal:
    """Free `count` more whole cards (of a type containing `card_type`, case-insensitive), or as many as possible.

    `on_one_node`: have `count` whole free cards on one node instead (cards already free there count), as a task
    asking that many whole cards needs them; all or nothing.
    """

    count: int
    card_type: str = ""
    on_one_node: bool = False

    def describe(self) -> str:
        """The goal in words."""
        kind = f" {self.card_type}" if self.card_type else ""
        cards = "card" if self.count == 1 else "cards"
        if self.on_one_node:
            return f"have {self.count} whole free{kind} {cards} on one node"
        return f"free {self.count} more whole{kind} {cards} (cards already free do not count)"


@dataclass(frozen=True)
class CompactGoal:
    """Pack the shares of these nodes onto as few of their cards as possible, moving pods only among them."""

    nodes: tuple[str, ...]

    def describe(self) -> str:
        """The goal in words."""
        return "compact " + ", ".join(self.nodes)


Goal = FitGoal | FreeCardsGoal | CompactGoal


@dataclass(frozen=True)
class Limits:
    """Bounds on a plan: moves in all, moves of pods off any one node, and moves of any one namespace's pods.

    `node_moves_left` and `namespace_moves_left` lower the bound for the nodes and namespaces they name (moves made
    earlier within a budget's window). `max_steps` bounds the search itself, counted in relocations tried and cards
    walked (not in seconds, so a plan does not depend on the machine): a search that spends it stops with the best
    plan found so far, or none, and says so.
    """

    max_moves: int = 20
    max_moves_per_node: int = 8
    max_moves_per_namespace: int | None = None
    node_moves_left: Mapping[str, int] = field(default_factory=dict)
    namespace_moves_left: Mapping[str, int] = field(default_factory=dict)
    max_steps: int = SEARCH_STEPS


@dataclass(frozen=True)
class Move:
    """One pod moved: evicted from its cards and re-placed on others (pinned through a placement)."""

    pod: str
    uid: str
    from_node: str
    from_cards: tuple[str, ...]
    to_node: str
    to_cards: tuple[str, ...]
    reason: str

    def to_dict(self) -> dict[str, Any]:
        """The move as JSON."""
        return {
            "pod": self.pod,
            "uid": self.uid,
            "from": {"node": self.from_node, "cards": list(self.from_cards)},
            "to": {"node": self.to_node, "cards": list(self.to_cards)},
            "reason": self.reason,
        }


@dataclass(frozen=True)
class CardState:
    """One card in the card map: totals, what HAMi would count as used, and the pods on it."""

    node: str
    uuid: str
    index: int
    type: str
    mem_total: int
    mem_used: int
    cores_total: int
    cores_used: int
    slots_total: int
    slots_used: int
    pods: tuple[str, ...]

    @property
    def name(self) -> str:
        """`gpu-N`."""
        return f"gpu-{self.index}"

    def to_dict(self) -> dict[str, Any]:
        """The card as JSON."""
        return {
            "node": self.node,
            "uuid": self.uuid,
            "name": self.name,
            "type": self.type,
            "memory": {"total": self.mem_total, "used": self.mem_used},
            "cores": {"total": self.cores_total, "used": self.cores_used},
            "slots": {"total": self.slots_total, "used": self.slots_used},
            "pods": list(self.pods),
        }


@dataclass(frozen=True)
class Summary:
    """Fragmentation over the cards in scope that can take new pods: whole cards free, free MiB, largest free MiB."""

    open_cards: int
    whole_cards_free: int
    free_mib: int
    largest_free_mib: int

    def to_dict(self) -> dict[str, Any]:
        """The summary as JSON."""
        return {
            "openCards": self.open_cards,
            "wholeCardsFree": self.whole_cards_free,
            "freeMiB": self.free_mib,
            "largestFreeMiB": self.largest_free_mib,
        }


@dataclass(frozen=True)
class Plan:
    """The planner's answer: ordered moves, whether the goal is met, why not, and the cards before and after.

    `target` is where a `fit` goal's pod would go (node and card UUIDs), `freed` the cards the moves free.
    """

    goal: str
    moves: tuple[Move, ...]
    complete: bool
    reasons: tuple[str, ...]
    before: Summary
    after: Summary
    cards_after: tuple[CardState, ...]
    target: tuple[str, tuple[str, ...]] | None = None
    freed: tuple[str, ...] = ()

    @property
    def gain(self) -> str:
        """What the plan gains, in one line."""
        if self.target is not None:
            node, cards = self.target
            return f"the pod fits {node} on {', '.join(cards)} after {len(self.moves)} move(s)"
        return (
            f"{len(self.freed)} whole card(s) freed with {len(self.moves)} move(s): "
            f"{self.before.whole_cards_free} -> {self.after.whole_cards_free} whole cards free"
        )

    @property
    def why(self) -> str:
        """The reasons in one line, for an Event: each ends in a full stop but a heading (one ending in a colon), as
        a node's reasons already join its cards' with semicolons."""
        return " ".join(
            reason if reason.endswith(":") or position == len(self.reasons) - 1 else f"{reason}."
            for position, reason in enumerate(self.reasons)
        )

    def to_dict(self) -> dict[str, Any]:
        """The plan as JSON."""
        return {
            "goal": self.goal,
            "complete": self.complete,
            "gain": self.gain,
            "reasons": list(self.reasons),
            "target": None if self.target is None else {"node": self.target[0], "cards": list(self.target[1])},
            "freed": list(self.freed),
            "before": self.before.to_dict(),
            "after": self.after.to_dict(),
            "moves": [move.to_dict() for move in self.moves],
            "cardsAfter": [card.to_dict() for card in self.cards_after],
        }
