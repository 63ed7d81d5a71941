"""The planner's working copy of the cluster: per-card usage as HAMi counts it, indexed for fast target search.

Usage starts from each node's allocations, summed share by share as `usage.card_usage` sums them; a move releases
the pod's allocated shares and adds the share its GPU containers would take on the target cards. Every verdict goes
through `fit.fit`, container after container as HAMi fits them. Moves are logged so a trial can be rolled back.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from heapq import merge
from itertools import islice
from operator import attrgetter
from typing import Generic, TypeVar

from kubectl_hami_place.core.cards import Card
from kubectl_hami_place.core.fit import (
    NOUSE_UUID,
    USE_UUID,
    FitReason,
    FitResult,
    PodFit,
    UuidLists,
    fit,
    fit_pod,
    numa_bind,
    taking,
    topology_aware,
    topology_numa,
    uuid_allowed,
    uuid_lists,
)
from kubectl_hami_place.core.hami_config import HAMI_DEFAULTS, HamiConfig
from kubectl_hami_place.core.node_resources import Resources, count_name
from kubectl_hami_place.core.planner.model import (
    CardState,
    Limits,
    Move,
    PlanPod,
    Snapshot,
    Summary,
)
from kubectl_hami_place.core.pod_affinity import counts_any
from kubectl_hami_place.core.requests import CardRequest, cores_for, memory_for
from kubectl_hami_place.core.usage import CardUsage

CHAIN_CARDS = 32
Share = tuple[int, int, int]
Room = tuple["CardSlot", list[str]]
"""A card in use and those of its pods whose leaving makes room on it."""
T = TypeVar("T")
U = TypeVar("U")


def sequence_fit(
    card: Card,
    usage: CardUsage,
    gpu: tuple[tuple[int, CardRequest], ...],
    *,
    init_containers: int,
    annotations: Mapping[str, str],
    cordoned: bool,
    default_policy: str = "",
) -> FitResult:
    """A pod's GPU containers fitted one after another on one card, as HAMi does: the first failure decides.

    App containers add their share before the next is fitted; init containers run alone, so each meets the card
    as the pod found it. `default_policy` is HAMi's `--gpu-scheduler-policy`, for a pod naming none (as in `fit`).
    """
    if card.is_mig:
        return FitResult(
            ok=False, reason=FitReason.CardMigMode, message=f"{card.label()} is in MIG mode (not modelled)"
        )
    running = usage
    result = FitResult(ok=True, reason=None, message=f"{card.label()} fits")
    for position, request in gpu:
        is_init = position < init_containers
        result = fit(card, usage if is_init else running, request, annotations, cordoned, default_policy=default_policy)
        if not result.ok:
            prefix = f"container {position}: " if len(gpu) > 1 else ""
            return FitResult(ok=False, reason=result.reason, message=prefix + result.message)
        if not is_init:
            running = taking(running, request, card)
    return result


def pod_share(card: Card, gpu: tuple[tuple[int, CardRequest], ...], init_containers: int) -> Share:
    """(slots, MiB, cores) HAMi will count for the pod on that card: init containers' peak or app containers' sum."""
    init_mem = init_cores = app_mem = app_cores = app_slots = 0
    for position, request in gpu:
        mem, cores = memory_for(request, card), cores_for(request)
        if position < init_containers:
            init_mem, init_cores = max(init_mem, mem), max(init_cores, cores)
        else:
            app_mem, app_cores, app_slots = app_mem + mem, app_cores + cores, app_slots + 1
    return max(app_slots, 1), max(init_mem, app_mem), max(init_cores, app_cores)


class SearchSpent(Exception):
    """The search used up `Limits.max_steps`; the state may be mid-trial, so the catcher rolls back."""


class CardSlot:
    """A card's mutable usage in the working copy."""

    __slots__ = ("card", "cordoned", "cores", "kind", "mem", "node", "open", "ordinal", "pods", "slots")

    def __init__(
        self,
        ordinal: int,
        node: str,
        card: Card,
        cordoned: bool,
        node_open: bool,
        *,
        kinds: dict[tuple[object, ...], tuple[tuple[object, ...], bool]] | None = None,
    ) -> None:
        """A card with nothing counted yet; `kinds` keeps one `kind` (and whether such a card is open) per kind."""
        self.ordinal = ordinal
        self.node = node
        self.card = card
        self.cordoned = cordoned
        kind = (card.type, card.mode, card.health, card.count, card.devmem, card.devcore, cordoned)
        known = None if kinds is None else kinds.get(kind)
        if known is None:
            known = (kind, card.is_nvidia and card.health and not cordoned and not card.is_mig)
            if kinds is not None:
                kinds[kind] = known
        self.kind = known[0]
        """What HAMi's fit reads of the card but its UUID: cards of one kind and usage get one verdict."""
        self.open = node_open and known[1]
        self.slots = self.mem = self.cores = 0
        self.pods: dict[str, Share] = {}

    @property
    def free(self) -> int:
        """MiB HAMi counts as free."""
        return self.card.devmem - self.mem

    @property
    def used(self) -> bool:
        """True when any pod holds the card."""
        return self.slots > 0 or self.mem > 0 or bool(self.pods)

    def usage(self, released: Iterable[str] = ()) -> CardUsage:
        """The card's usage in `usage.CardUsage` form, for `fit`, with the shares of the `released` pods (by key)
        taken off."""
        gone = [self.pods[key] for key in released if key in self.pods]
        return CardUsage(
            uuid=self.card.uuid,
            used_slots=self.slots - sum(share[0] for share in gone),
            used_mem=self.mem - sum(share[1] for share in gone),
            used_cores=self.cores - sum(share[2] for share in gone),
        )


class PodSlot:
    """A placed pod in the working copy: where it is now, whether this plan moved it, and why it may never move."""

    __slots__ = ("cards", "moved", "node", "pod")

    def __init__(self, pod: PlanPod, node: str, cards: tuple[str, ...], moved: bool = False) -> None:
        """The pod where the snapshot has it."""
        self.pod = pod
        self.node = node
        self.cards = cards
        self.moved = moved

    @property
    def blocked(self) -> str | None:
        """Why the pod may never move (`PlanPod.never_moves`)."""
        return self.pod.never_moves


@dataclass(frozen=True)
class _Step:
    """A logged move, enough to undo it; `serial` names the state it leads to (never reused within a plan)."""

    key: str
    node: str
    cards: tuple[str, ...]
    shares: tuple[tuple[str, Share], ...]
    moved: bool
    serial: int


class _Remembered(Generic[T]):
    """A lazy walk whose items are kept, so a later walk at the same state reads them before walking further."""

    __slots__ = ("found", "source")

    def __init__(self, source: Iterator[T]) -> None:
        """Nothing walked yet."""
        self.found: list[T] = []
        self.source: Iterator[T] | None = source

    def __iter__(self) -> Iterator[T]:
        """The items found so far, then the walk's next ones."""
        position = 0
        while True:
            if position < len(self.found):
                yield self.found[position]
                position += 1
                continue
            if self.source is None:
                return
            item = next(self.source, None)
            if item is None:
                self.source = None
                return
            self.found.append(item)


class _Passed(Generic[T]):
    """A card walk at one state, made once for the walks that differ from it only in which of its items they keep
    (`State._counted`): the items found, each with the steps a walk of its own counts to reach it from the one
    before (`State.step`), and the steps after the last."""

    __slots__ = ("found", "source", "tail", "unit")

    def __init__(self, unit: bool, source: Iterator[tuple[int, T | None]]) -> None:
        """Nothing walked yet; `source` gives each card's steps and item (None: nothing for a walk to keep), and
        `unit` says its steps come one card at a time (a walk then stops at the first card over the bound)."""
        self.found: list[tuple[int, T]] = []
        self.source: Iterator[tuple[int, T | None]] | None = source
        self.tail = 0
        self.unit = unit

    def advance(self) -> bool:
        """Walk on to the next item; False when the walk has ended."""
        if self.source is None:
            return False
        for steps, item in self.source:
            self.tail += steps
            if item is not None:
                self.found.append((self.tail, item))
                self.tail = 0
                return True
        self.source = None
        return False


class _Kept:
    """What a search keeps for one state until a rollback leaves it: the walks remembered there (`_remembered`), the
    walks they share (`_pass`), and the pods a chain found no card for (`_dead_end`), with its scope."""

    __slots__ = ("dead", "passed", "walks")

    def __init__(self) -> None:
        """Nothing kept yet."""
        self.walks: dict[tuple[object, ...], _Remembered[object]] = {}
        self.passed: dict[tuple[object, ...], _Passed[object]] = {}
        self.dead: set[tuple[str, frozenset[str] | None, bool]] = set()


def _every(item: T) -> T:
    """The item itself: a walk keeping all its shared walk finds."""
    return item


class State:
    """The working copy: cards indexed by UUID, by node and by free memory; pods by key (every pod a card holds is
    one of them); moves so far."""

    def __init__(self, snapshot: Snapshot, limits: Limits) -> None:
        """Count usage from the snapshot's allocations, node by node."""
        self.limits = limits
        self.cards: list[CardSlot] = []
        self.by_uuid: dict[str, CardSlot] = {}
        self.by_node: dict[str, list[CardSlot]] = {}
        self.node_open: dict[str, bool] = {}
        self.pair_scores = {node.name: node.pair_scores for node in snapshot.nodes}
        self.room: dict[str, Resources] = {node.name: node.room for node in snapshot.nodes if node.room is not None}
        self.barred = {card: why for node in snapshot.nodes for card, why in node.barred.items()}
        counted = [(p, p.allocation) for p in snapshot.pods if p.allocation is not None and p.allocation.counted]
        counted.sort(key=lambda pair: pair[0].key)
        kinds: dict[tuple[object, ...], tuple[tuple[object, ...], bool]] = {}
        for node in sorted(snapshot.nodes, key=attrgetter("name")):
            self.node_open[node.name] = node.schedulable
            slots = []
            for card in sorted(node.cards, key=lambda c: (c.index, c.uuid)):
                if card.uuid in self.by_uuid:
                    continue
                slot = CardSlot(
                    len(self.cards), node.name, card, card.uuid in node.cordoned, node.schedulable, kinds=kinds
                )
                self.cards.append(slot)
                self.by_uuid[card.uuid] = slot
                slots.append(slot)
            self.by_node[node.name] = slots
        shares: dict[Share, Share] = {}
        by_uuid = self.by_uuid
        self.pods: dict[str, PodSlot] = {}
        for plan_pod, allocation in counted:
            # as `usage.card_usage` counts each node's allocations on its cards, without a CardUsage per card
            key, node_name = plan_pod.key, allocation.node
            held: list[tuple[int, str]] = []
            for uuid, taken, mem, cores in allocation.takes():
                on_card = by_uuid.get(uuid)
                if on_card is None or on_card.node != node_name:
                    continue
                on_card.slots += taken
                on_card.mem += mem
                on_card.cores += cores
                share = (taken, mem, cores)
                on_card.pods[key] = shares.setdefault(share, share)  # one tuple per distinct share
                held.append((on_card.ordinal, uuid))
            if held:
                uuids = (held[0][1],) if len(held) == 1 else tuple(uuid for _, uuid in sorted(held))
                self.pods[key] = PodSlot(plan_pod, node_name, uuids)  # its cards in card order
        self.counting = any(plan_pod.counts for plan_pod, _ in counted)
        """Whether any pod's placement counts other pods (`PlanPod.counts`): only then may a move tie another's."""
        self.min_devmem = min((s.card.devmem for s in self.cards if s.open), default=0)
        self.smallest = Card(uuid="", devmem=self.min_devmem)
        """A card of the least memory an open card has: a pod's share of it is the least it takes of any."""
        self.in_use: list[tuple[int, int]] = []
        self.unused: list[tuple[int, int]] = []
        for slot in self.cards:
            if slot.open:
                (self.in_use if slot.used else self.unused).append((slot.card.devmem - slot.mem, slot.ordinal))
        self.in_use.sort()
        self.unused.sort()
        self.budgets = dict(snapshot.budgets)
        self.moves: list[Move] = []
        self.per_node: dict[str, int] = {}
        self.per_namespace: dict[str, int] = {}
        self._log: list[_Step] = []
        self._shares: dict[tuple[int, int], Share] = {}
        self._empty: dict[tuple[object, ...], tuple[FitResult, Card]] = {}
        self._empty_fits: dict[tuple[object, ...], bool] = {}
        self._verdicts: dict[tuple[object, ...], bool] = {}
        self._fit_kinds: dict[tuple[object, ...], int] = {}
        self._fit_kind: dict[int, tuple[int, UuidLists | None]] = {}
        self._serial = 0
        self.steps = 0
        self._kept: dict[int, _Kept] = {}
        self._shapes: dict[tuple[int, Resources], int] = {}
        self._shape: dict[int, int] = {}

    # Verdicts -------------------------------------------------------------------------------------------------

    def verdict(self, pod: PlanPod, slot: CardSlot, released: Share = (0, 0, 0)) -> FitResult:
        """HAMi's verdict for the pod's GPU containers on the card, once `released` (slots, MiB, cores) has left it."""
        usage = CardUsage(
            uuid=slot.card.uuid,
            used_slots=slot.slots - released[0],
            used_mem=slot.mem - released[1],
            used_cores=slot.cores - released[2],
        )
        result = sequence_fit(
            slot.card,
            usage,
            pod.gpu_requests,
            init_containers=pod.init_containers,
            annotations=pod.fit_annotations,
            cordoned=slot.cordoned,
            default_policy=pod.default_policy,
        )
        if result.reason is FitReason.CardCordoned and slot.card.uuid in self.barred:
            return FitResult(False, FitReason.CardCordoned, f"{slot.card.label()} {self.barred[slot.card.uuid]}")
        return result

    def fits(self, pod: PlanPod, slot: CardSlot, released: Share = (0, 0, 0)) -> bool:
        """`verdict(...).ok`, skipping HAMi's fit when slots, memory or cores are plainly short (each is necessary),
        and kept per pod kind, card kind and usage (`fit_kind`, `CardSlot.kind`): a walk meets the same few often."""
        card = slot.card
        share = self.share(pod, card)
        slots, mem, cores = slot.slots - released[0], slot.mem - released[1], slot.cores - released[2]
        if slots >= card.count or card.devmem - mem < share[1] or card.devcore - cores < share[2]:
            return False
        kind, uuids = self.fit_kind(pod)
        key = (kind, slot.kind, uuids is None or uuid_allowed(uuids, card.uuid), slots, mem, cores)
        ok = self._verdicts.get(key)
        if ok is None:
            ok = self._verdicts[key] = self.verdict(pod, slot, released).ok
        return ok

    def fit_kind(self, pod: PlanPod) -> tuple[int, UuidLists | None]:
        """A number shared by the pods HAMi's fit cannot tell apart (GPU requests, init containers, fit annotations,
        default policy), and the card UUIDs the pod names to use and not to use, None when it names none: a card's
        UUID then matters to its verdicts only as allowed or not (`fit.uuid_lists`)."""
        found = self._fit_kind.get(id(pod))
        if found is None:
            annotations = pod.fit_annotations
            key = (pod.gpu_requests, pod.init_containers, tuple(sorted(annotations.items())), pod.default_policy)
            kind = self._fit_kinds.setdefault(key, len(self._fit_kinds))
            pinned = annotations.get(USE_UUID) or annotations.get(NOUSE_UUID)
            found = self._fit_kind[id(pod)] = (kind, uuid_lists(annotations) if pinned else None)
        return found

    def refused_empty(self, pod: PlanPod, slot: CardSlot) -> FitResult | None:
        """HAMi's refusal of the pod on the card were nobody on it, None when it would fit; whether it fits is kept per
        card kind (and the UUID allowed or not), a refusal across cards that look the same to fit (a pod naming UUIDs:
        per card), its message naming the card asked about."""
        card = slot.card
        uuids = self.fit_kind(pod)[1]
        allowed = uuids is None or uuid_allowed(uuids, card.uuid)
        fits = self._empty_fits.get((id(pod), slot.kind, allowed))
        if fits:
            return None
        key = (id(pod), slot.kind, "" if uuids is None else card.uuid)
        found = self._empty.get(key)
        if found is None:
            found = self._empty[key] = (self.verdict(pod, slot, (slot.slots, slot.mem, slot.cores)), card)
            self._empty_fits[(id(pod), slot.kind, allowed)] = found[0].ok
        verdict, first = found
        if verdict.ok:
            return None
        if first is card:
            return verdict
        return FitResult(False, verdict.reason, verdict.message.replace(first.label(), card.label()))

    def hami_cards(
        self, pod: PlanPod, node: str, cards: list[CardSlot], exclude: Iterable[str] = (), avoid_empty: bool = False
    ) -> list[CardSlot]:
        """The cards HAMi picks on the node for a pod under `topology-aware` (by the node's pair scores, as
        `fit.fit_pod` models its Fit: the best-scoring combination, or for one card the one scoring lowest with the
        others, `computeWorstSingleCard`, pkg/device/nvidia/device.go:858 and :927, not a best fit), of its open
        cards outside `exclude` (in use only, if `avoid_empty`); `cards` for any other pod, or when HAMi's pick does
        not fit every container (a pin then names the planner's own)."""
        if not cards or not topology_aware(pod.fit_annotations, pod.default_policy):
            return cards
        barred = set(exclude)
        picked = self.hami_pick(
            pod,
            node,
            frozenset(
                slot.card.uuid
                for slot in self.by_node[node]
                if slot.card.uuid in barred or (avoid_empty and not slot.used)
            ),
        )
        if picked is None or len(picked) != len(cards) or not all(self.fits(pod, slot) for slot in picked):
            return cards
        return picked

    def hami_pick(
        self, pod: PlanPod, node: str, barred: frozenset[str] = frozenset(), released: frozenset[str] = frozenset()
    ) -> list[CardSlot] | None:
        """The open cards outside `barred` HAMi's Fit gives the pod's first GPU container on the node once the
        `released` pods have left it (`hami_fit`), in card order; None when HAMi refuses the node."""
        verdict = self.hami_fit(
            pod,
            node,
            pod.fit_annotations,
            barred | frozenset(slot.card.uuid for slot in self.by_node[node] if not slot.open),
            HAMI_DEFAULTS.with_policy(pod.default_policy or HAMI_DEFAULTS.gpu_scheduler_policy),
            released=released,
        )
        if not verdict.ok or not verdict.devices:
            return None
        return sorted((self.by_uuid[uuid] for uuid in verdict.devices[0]), key=lambda slot: slot.ordinal)

    def topology_numa(self, pod: PlanPod, node: str, otherwise: int) -> int:
        """The NUMA node HAMi's topology-aware Fit under numa-bind can give the pod cards from on the node
        (`fit.topology_numa`), `otherwise` when the pod is not both."""
        slots = self.by_node[node]
        cordoned = [slot.card.uuid for slot in slots if slot.cordoned]
        kept = topology_numa([slot.card for slot in slots], pod.fit_annotations, cordoned, pod.default_policy)
        return otherwise if kept is None else kept

    def hami_fit(
        self,
        pod: PlanPod,
        node: str,
        annotations: Mapping[str, str],
        cordoned: frozenset[str],
        config: HamiConfig,
        *,
        released: frozenset[str] = frozenset(),
    ) -> PodFit:
        """HAMi's fit of the whole pod on the node's cards as this state has them (`fit.fit_pod`, the node's pair
        scores included), with `cordoned` cards left out and the shares of the `released` pods (by key) taken off."""
        slots = self.by_node[node]
        return fit_pod(
            [slot.card for slot in slots],
            {slot.card.uuid: slot.usage(released) for slot in slots},
            pod.requests,
            pod.init_containers,
            annotations,
            cordoned=cordoned,
            config=config,
            pair_scores=self.pair_scores.get(node),
        )

    def share(self, pod: PlanPod, card: Card) -> Share:
        """`pod_share`, cached per pod and card memory."""
        key = (id(pod), card.devmem)
        share = self._shares.get(key)
        if share is None:
            share = self._shares[key] = pod_share(card, pod.gpu_requests, pod.init_containers)
        return share

    def holds(self, node: str, pod: PlanPod, own: str = "") -> bool:
        """Whether kube-scheduler would let the pod onto the node for its CPU, memory and pod count: a node not
        counted, or `own` (the node the pod is on, whose count holds it already), always does."""
        room = self.room.get(node)
        return room is None or node == own or room.holds(pod.needs)

    def refused_for_room(self, key: str, exclude: frozenset[str] | set[str]) -> tuple[str, tuple[str, ...]] | None:
        """The first node refusing the pod for its CPU, memory or pod count that has an open card outside `exclude`
        the pod fits, with the counts it lacks (`Resources.short`); None when there is none: why a move found no
        card, in words."""
        entry = self.pods[key]
        needs, allowed = entry.pod.needs, entry.pod.nodes

        def short() -> Iterator[str]:
            """The nodes the pod may run on whose room does not hold it (remembered: a plan's failures ask again)."""
            for node, room in self.room.items():
                if not room.holds(needs) and (allowed is None or node in allowed):
                    yield node

        for node in self._remembered(("short", needs, allowed), short):
            slots = self.by_node.get(node, ())
            if (
                node != entry.node
                and node not in entry.pod.kept_off
                and any(s.open and s.card.uuid not in exclude and self.fits(entry.pod, s) for s in slots)
            ):
                return node, tuple(map(count_name, self.room[node].short(needs)))
        return None

    def node_of(self, pod: PlanPod) -> str:
        """The node the pod is on in this state ("" for a pod not placed)."""
        entry = self.pods.get(pod.key)
        return entry.node if entry is not None and entry.pod is pod else ""

    def node_bound(self, node: str) -> int:
        """Moves off `node` this plan may make: the per-node bound, lowered by moves made earlier in its window."""
        bound = self.limits.max_moves_per_node
        return min(bound, self.limits.node_moves_left.get(node, bound))

    def may_move(self, key: str) -> str | None:
        """Why this pod cannot be moved now (never, budget spent, a bound reached), or None."""
        entry = self.pods[key]
        if entry.blocked is not None:
            return entry.blocked
        for budget in entry.pod.budgets:
            if self.budgets.get(budget, 0) <= 0:
                return f"is protected by PodDisruptionBudget {budget}, which allows no more disruptions"
        if len(self.moves) >= self.limits.max_moves:
            return f"would exceed the plan's {self.limits.max_moves} move(s)"
        node_bound = self.node_bound(entry.node)
        if self.per_node.get(entry.node, 0) >= node_bound:
            return f"would exceed {node_bound} moves off node {entry.node}"
        limits = self.limits
        namespace = entry.pod.namespace
        bound = limits.max_moves_per_namespace
        left = limits.namespace_moves_left.get(namespace)
        if left is not None and (bound is None or left < bound):
            bound = left
        if bound is not None and self.per_namespace.get(namespace, 0) >= bound:
            return f"would exceed {bound} moves of namespace {namespace}'s pods"
        return None

    def tied_away(self, key: str) -> str:
        """A pod this plan moved to another node that the pod's placement counts or that counts the pod's
        (`PlanPod.counts`), "" when none: kube-scheduler's verdict on either, read from the pods as they were, would
        not hold once both left their nodes, so the pod may then move only between its own node's cards."""
        if not self.counting:
            return ""
        pod = self.pods[key].pod
        for move in self.moves:
            other = self.pods[move.pod]
            if move.pod == key or other.pod.allocation is None or other.node == other.pod.allocation.node:
                continue
            theirs = other.pod
            if counts_any(pod.counts, theirs.namespace, theirs.labels) or counts_any(
                theirs.counts, pod.namespace, pod.labels
            ):
                return move.pod
        return ""

    # Moves ----------------------------------------------------------------------------------------------------

    def step(self, count: int = 1) -> None:
        """Count search work against `Limits.max_steps`; raise `SearchSpent` once it is used up."""
        self.steps += count
        if self.steps > self.limits.max_steps:
            self._kept.clear()
            raise SearchSpent(f"the search stopped after {self.limits.max_steps} steps (its bound)")

    def forget(self) -> None:
        """Drop what the search kept per state: its walks' generators refer back to this state, a cycle that would
        leave the whole working copy to the garbage collector once the plan is made."""
        self._kept.clear()

    def checkpoint(self) -> int:
        """A point to roll back to."""
        return len(self._log)

    def rollback(self, point: int) -> None:
        """Undo every move made after `point`."""
        while len(self._log) > point:
            step = self._log.pop()
            self._kept.pop(step.serial, None)
            entry = self.pods[step.key]
            for uuid in entry.cards:
                self._take(self.by_uuid[uuid], step.key)
            for uuid, share in step.shares:
                self._give(self.by_uuid[uuid], step.key, share)
            self._transfer(entry.pod, entry.node, step.node)
            entry.node, entry.cards, entry.moved = step.node, step.cards, step.moved
            move = self.moves.pop()
            self.per_node[move.from_node] -= 1
            self.per_namespace[entry.pod.namespace] -= 1
            for budget in entry.pod.budgets:
                self.budgets[budget] = self.budgets.get(budget, 0) + 1

    def relocate(
        self,
        key: str,
        reason: str,
        exclude: frozenset[str] | set[str],
        *,
        scope: frozenset[str] | None = None,
        avoid_empty: bool = False,
        chain: bool = True,
        owed: int = 0,
    ) -> Move | None:
        """Move the pod to the best-fitting cards outside `exclude` (and within `scope` nodes), or None if none fit.

        Best fit: the cards with the least free memory that still fit, so the moves fill cards already in use
        before they touch emptier ones; `avoid_empty` never uses a card nobody holds. When no card fits, `chain`
        first moves one smaller pod aside (see `_chain`), unless the caller's trial would then exceed the plan's
        moves with the `owed` moves it must still make after this one. A pod this plan already
        moved is not moved twice (its replacement has another name): its earlier move is re-aimed instead.
        """
        self.step()
        if self.pods[key].moved:
            return self._retarget(key, exclude, scope, avoid_empty)
        entry = self.pods[key]
        if self.tied_away(key):
            scope = frozenset({entry.node}) if scope is None else scope & {entry.node}
        target = self._target(entry.pod, set(exclude) | set(entry.cards), scope, avoid_empty)
        if target is None:
            if not chain or len(self.moves) + 2 + owed > self.limits.max_moves:
                return None
            return self._chain(key, reason, set(exclude) | set(entry.cards), scope, avoid_empty)
        old = tuple((uuid, self._take(self.by_uuid[uuid], key)) for uuid in entry.cards)
        return self._record(key, reason, old, *target)

    def _chain(
        self, key: str, reason: str, exclude: set[str], scope: frozenset[str] | None, avoid_empty: bool
    ) -> Move | None:
        """Make room for a one-card pod on a card in use by first moving one smaller pod off it (one more move).

        The cards tried are the `CHAIN_CARDS` fullest that could hold the pod once a pod left them, then, when none
        did, the `CHAIN_CARDS` fullest of its own node not tried yet (a pod free to go to any node would otherwise
        never try the cards beside it, which one kept to its node does); under numa-bind and `topology-aware`, only
        cards of the NUMA node HAMi's walk keeps (`topology_numa`), as in `_target`.
        """
        entry = self.pods[key]
        if entry.pod.gpu_requests[0][1].nums != 1:
            return None
        allowed = entry.pod.nodes if scope is None else scope if entry.pod.nodes is None else scope & entry.pod.nodes
        home = frozenset({entry.node})
        tried: set[str] = set()
        moved = self._chain_on(key, reason, exclude, scope, avoid_empty, allowed, tried)
        if moved is None and allowed != home and (allowed is None or entry.node in allowed):
            moved = self._chain_on(key, reason, exclude, scope, avoid_empty, home, tried)
        return moved

    def _chain_on(  # noqa: PLR0917 - `_chain`'s own, and the nodes and cards of this walk
        self,
        key: str,
        reason: str,
        exclude: set[str],
        scope: frozenset[str] | None,
        avoid_empty: bool,
        nodes: frozenset[str] | None,
        tried: set[str],
    ) -> Move | None:
        """`_chain` over the `CHAIN_CARDS` fullest cards of `nodes` (None: all) not in `tried`, which it adds to."""
        entry = self.pods[key]
        bind = numa_bind(entry.pod.fit_annotations)
        count = 0
        kept = self._here()
        for slot, room in self._rooms(entry.pod, nodes):
            if slot.card.uuid in exclude or slot.card.uuid in tried or slot.node in entry.pod.kept_off:
                continue
            if bind and slot.card.numa != self.topology_numa(entry.pod, slot.node, slot.card.numa):
                continue  # under topology-aware HAMi gives a numa-bind pod cards of one NUMA node only
            count += 1
            if count > CHAIN_CARDS:
                return None
            tried.add(slot.card.uuid)
            for other in room:
                if self._dead_end(other, scope, avoid_empty, kept):
                    self.step()  # the step `relocate` counts before it finds no card
                    continue
                point = self.checkpoint()
                if self.relocate(
                    other, reason, exclude | {slot.card.uuid}, scope=scope, avoid_empty=avoid_empty, chain=False
                ):
                    old = tuple((uuid, self._take(self.by_uuid[uuid], key)) for uuid in entry.cards)
                    holds = self.holds(slot.node, entry.pod, entry.node)
                    tied = slot.node != entry.node and self.tied_away(key)
                    if holds and not tied and self.fits(entry.pod, slot) and self.may_move(key) is None:
                        return self._record(key, reason, old, slot.node, [slot])
                    for uuid, share in old:
                        self._give(self.by_uuid[uuid], key, share)
                self.rollback(point)
        return None

    def _rooms(self, pod: PlanPod, nodes: frozenset[str] | None) -> Iterable[tuple[CardSlot, list[str]]]:
        """The cards in use on `nodes` (None: all), least free first, that a one-card pod of the pod's memory could
        move off to leave room for it, each with those of its pods whose leaving lets the pod fit, smallest first.

        Remembered for this state and the pod's shape (`_remembered`), each such walk counting its steps; the cards
        and pods themselves depend on HAMi's fit only, so they are found once per state and `fit_kind` (`_Passed`).
        """
        need = self.share(pod, self.smallest)[1]

        def rooms(order: Iterator[tuple[int, CardSlot | None]]) -> Iterator[tuple[int, Room | None]]:
            """The walk itself: each card's steps, and the card with its pods when any could leave it."""
            for steps, slot in order:
                room = (
                    []
                    if slot is None
                    else [q for q in slot.pods if slot.free + slot.pods[q][1] >= need and self._chainable(q)]
                )
                if slot is None or not room:
                    yield steps, None
                    continue
                ordered = sorted(room, key=lambda q: (slot.pods[q][1], q))
                yield steps, (slot, [q for q in ordered if self.fits(pod, slot, slot.pods[q])])

        def walk() -> Iterator[Room]:
            """This shape's walk over the rooms found for its fit kind."""
            found = self._pass(("rooms", self.fit_kind(pod)[0], nodes), (nodes, 0, True), rooms)
            return self._counted(found, _every)

        return self._remembered(("rooms", self.shape(pod), nodes), walk)

    def _chainable(self, other: str) -> bool:
        """Whether a one-card pod may be moved aside to make room for another (never one on the other's cards, which
        the chain excludes)."""
        if other not in self.pods or self.pods[other].moved:
            return False
        return self.may_move(other) is None and self.pods[other].pod.gpu_requests[0][1].nums == 1

    def _remembered(self, key: tuple[object, ...], walk: Callable[[], Iterator[T]]) -> Iterable[T]:
        """`walk()` at this state, kept for the next caller with the same key until a rollback leaves the state.

        A state is named by the serial of its last move; rollback drops the walks of the states it leaves, which
        the search never reaches again (a move made anew gets a new serial).
        """
        walks = self._here().walks
        found = walks.get(key)
        if found is None:
            found = walks[key] = _Remembered(walk())
        return found  # type: ignore[return-value]

    def _retarget(
        self, key: str, exclude: frozenset[str] | set[str], scope: frozenset[str] | None, avoid_empty: bool
    ) -> Move | None:
        """Re-aim the pod's earlier move outside `exclude`: undo the moves since, move it anew, replay the others.

        Cards empty now stay empty. Each replayed move is checked with HAMi's fit again; if one no longer fits, or the
        search is spent meanwhile (`SearchSpent`, raised on), the history is restored.
        """
        position = next(i for i, move in enumerate(self.moves) if move.pod == key)
        later = self.moves[position:]
        keep = set(exclude) | ({s.card.uuid for s in self.cards if not s.used} if avoid_empty else set())
        self.rollback(position)
        try:
            move = self.relocate(key, later[0].reason, keep, scope=scope, avoid_empty=avoid_empty, chain=False)
            if move is not None and all(self._replay(step) for step in later[1:]):
                return move
        except SearchSpent:
            self._restore(position, later)
            raise
        self._restore(position, later)
        return None

    def _restore(self, position: int, later: list[Move]) -> None:
        """Undo the moves since `position` and make `later`, the moves made from there before, again."""
        self.rollback(position)
        for step in later:
            self._replay(step)

    def carry_out(self, move: Move) -> bool:
        """Make a planned move again on the working copy (apply checks a plan so) if its target cards fit the pod."""
        return self._replay(move)

    def _replay(self, move: Move) -> bool:
        """Make a recorded move again if its target cards still fit the pod."""
        entry = self.pods[move.pod]
        old = tuple((uuid, self._take(self.by_uuid[uuid], move.pod)) for uuid in entry.cards)
        slots = [self.by_uuid[uuid] for uuid in move.to_cards]
        tied = move.to_node != entry.node and self.tied_away(move.pod)
        if not tied and self.holds(move.to_node, entry.pod, entry.node) and all(self.fits(entry.pod, s) for s in slots):
            self._record(move.pod, move.reason, old, move.to_node, slots)
            return True
        for uuid, share in old:
            self._give(self.by_uuid[uuid], move.pod, share)
        return False

    def _record(
        self, key: str, reason: str, old: tuple[tuple[str, Share], ...], node: str, slots: list[CardSlot]
    ) -> Move:
        """Place the pod (already taken off its cards) on `slots` and log the move."""
        entry = self.pods[key]
        for slot in slots:
            self._give(slot, key, self.share(entry.pod, slot.card))
        move = Move(
            pod=key,
            uid=entry.pod.uid,
            from_node=entry.node,
            from_cards=entry.cards,
            to_node=node,
            to_cards=tuple(slot.card.uuid for slot in slots),
            reason=reason,
        )
        self._serial += 1
        self._log.append(_Step(key, entry.node, entry.cards, old, entry.moved, self._serial))
        self.moves.append(move)
        self.per_node[entry.node] = self.per_node.get(entry.node, 0) + 1
        self.per_namespace[entry.pod.namespace] = self.per_namespace.get(entry.pod.namespace, 0) + 1
        for budget in entry.pod.budgets:
            self.budgets[budget] = self.budgets.get(budget, 0) - 1
        self._transfer(entry.pod, entry.node, node)
        entry.node, entry.cards, entry.moved = node, move.to_cards, True
        return move

    def _transfer(self, pod: PlanPod, source: str, target: str) -> None:
        """Count the pod's CPU, memory and pod off its source node and onto its target (nodes counted only)."""
        if source == target:
            return
        if source in self.room:
            self.room[source] += pod.needs
        if target in self.room:
            self.room[target] -= pod.needs

    def _target(
        self, pod: PlanPod, exclude: set[str], scope: frozenset[str] | None, avoid_empty: bool
    ) -> tuple[str, list[CardSlot]] | None:
        """The node and cards the pod would move to, best fit first.

        Under `nvidia.com/numa-bind` and `topology-aware` only cards of the one NUMA node HAMi's walk keeps count
        (`topology_numa`). A multi-card pod goes to the first node that has enough fitting cards, walking cards from
        the least free; under numa-bind enough on one NUMA node of it (HAMi refuses cards of two). Under
        `topology-aware` a pod of one card or more gets the cards HAMi picks on that node by its pair scores
        (`hami_cards`).
        """
        nums = pod.gpu_requests[0][1].nums
        bind = numa_bind(pod.fit_annotations)
        fitting_cards = (
            slot
            for slot in self._fitting(pod, scope, avoid_empty)
            if slot.card.uuid not in exclude
            and not (bind and slot.card.numa != self.topology_numa(pod, slot.node, slot.card.numa))
        )
        if nums == 1:
            slot = next(fitting_cards, None)
            return None if slot is None else (slot.node, self.hami_cards(pod, slot.node, [slot], exclude, avoid_empty))
        fitting: dict[tuple[str, int], list[CardSlot]] = {}
        for slot in fitting_cards:
            cards = fitting.setdefault((slot.node, slot.card.numa if bind else 0), [])
            cards.append(slot)
            if len(cards) == nums:
                chosen = sorted(cards, key=lambda s: s.ordinal)
                return slot.node, self.hami_cards(pod, slot.node, chosen, exclude, avoid_empty)
        return None

    def _fitting(self, pod: PlanPod, scope: frozenset[str] | None, avoid_empty: bool) -> Iterable[CardSlot]:
        """The open cards the pod fits as they are now (on its nodes within `scope`, whose CPU, memory and pods hold
        it), least free first.

        Remembered for this state and the pod's shape (`_remembered`): the evicted pods of one node after another
        are mostly of a few shapes, so a search that fails for one is not walked again for the next; the cards HAMi
        fits it on are found once per state and `fit_kind` (`_Passed`).
        """
        key, allowed, home = self._fitting_key(pod, scope, avoid_empty)
        floor = self.share(pod, self.smallest)[1]

        def fitting(order: Iterator[tuple[int, CardSlot | None]]) -> Iterator[tuple[int, CardSlot | None]]:
            """The walk itself (`_by_free` keeps to the allowed nodes and, if asked, to cards in use): each card's
            steps, and the card when HAMi fits the pod on it."""
            for steps, slot in order:
                yield steps, (slot if slot is not None and self.fits(pod, slot) else None)

        def walk() -> Iterator[CardSlot]:
            """This pod's walk: the cards found for its fit kind on nodes whose CPU, memory and pod count hold it (or
            its own node)."""
            found = self._pass(
                ("fitting", self.fit_kind(pod)[0], allowed, avoid_empty), (allowed, floor, avoid_empty), fitting
            )
            kept = pod.kept_off
            return self._counted(
                found,
                lambda slot: (
                    slot if slot.node not in kept and (slot.node == home or self.holds(slot.node, pod)) else None
                ),
            )

        return self._remembered(key, walk)

    def _fitting_key(
        self, pod: PlanPod, scope: frozenset[str] | None, avoid_empty: bool
    ) -> tuple[tuple[object, ...], frozenset[str] | None, str]:
        """The key `_fitting` remembers its walk by, with the nodes it keeps to and the pod's own node ("" when no
        node's CPU and memory are counted): the walk depends on the pod only through its shape, node and the nodes
        other filters keep it off."""
        allowed = pod.nodes if scope is None else scope if pod.nodes is None else scope & pod.nodes
        home = self.node_of(pod) if self.room else ""
        return ("fitting", self.shape(pod), home, allowed, pod.kept_key, avoid_empty), allowed, home

    def _dead_end(self, key: str, scope: frozenset[str] | None, avoid_empty: bool, kept: _Kept) -> bool:
        """Whether moving the pod (without a chain) finds no card at this state (`kept`) whatever it excludes: its
        walk (`_fitting`) was remembered here and ended without a card, so `relocate` would only count its step."""
        if (key, scope, avoid_empty) in kept.dead:
            return True
        walk = kept.walks.get(self._fitting_key(self.pods[key].pod, scope, avoid_empty)[0])
        if walk is None or walk.source is not None or walk.found:
            return False
        kept.dead.add((key, scope, avoid_empty))  # for good: the walk stays as it ended while the state lasts
        return True

    def _here(self) -> _Kept:
        """What the search keeps for the state it is at, named by the serial of its last move."""
        state = self._log[-1].serial if self._log else 0
        kept = self._kept.get(state)
        if kept is None:
            kept = self._kept[state] = _Kept()
        return kept

    def shape(self, pod: PlanPod) -> int:
        """A number shared by the pods a target search cannot tell apart: their GPU requests, init containers, fit
        annotations and default policy (HAMi's fit), and what they ask of a node (kube-scheduler's), which the walk
        checks so that every card it steps over counts against the search bound (docs/performance.md has the
        checked-after variant's cost). A number, so a walk's key is hashed without the requests' dataclasses."""
        shape = self._shape.get(id(pod))
        if shape is None:
            key = (self.fit_kind(pod)[0], pod.needs)
            shape = self._shape[id(pod)] = self._shapes.setdefault(key, len(self._shapes))
        return shape

    def _by_free(
        self, nodes: frozenset[str] | None, least: int, avoid_empty: bool
    ) -> tuple[bool, Iterator[tuple[int, CardSlot | None]]]:
        """Open cards with at least `least` MiB free on `nodes` (None: all), least free first; in use only if asked.

        Each with the steps a walk counts for it: every card of the free-memory index it passes, one at a time
        (`unit`; a card of another node with no card given), or, for a few nodes, all of theirs at once first.
        """
        if nodes is not None and len(nodes) * 8 < len(self.cards):
            slots = (s for n in sorted(nodes) for s in self.by_node.get(n, ()) if s.open and s.free >= least)
            ordered = sorted((s for s in slots if s.used or not avoid_empty), key=lambda s: (s.free, s.ordinal))
            return False, iter([(len(ordered), None), *((0, slot) for slot in ordered)])
        lists = [self.in_use] if avoid_empty else [self.in_use, self.unused]
        cards = self.cards
        merged = merge(*(islice(entries, bisect_left(entries, (least, -1)), None) for entries in lists))
        if nodes is None:
            return True, ((1, cards[ordinal]) for _, ordinal in merged)
        return True, ((1, cards[ordinal] if cards[ordinal].node in nodes else None) for _, ordinal in merged)

    def _pass(
        self,
        key: tuple[object, ...],
        cards: tuple[frozenset[str] | None, int, bool],
        walk: Callable[[Iterator[tuple[int, CardSlot | None]]], Iterator[tuple[int, T | None]]],
    ) -> _Passed[T]:
        """The shared walk at this state (`_Passed`): `walk` over the cards `_by_free(*cards)` gives, kept until a
        rollback leaves the state."""
        passed = self._here().passed
        found = passed.get(key)
        if found is None:
            unit, order = self._by_free(*cards)
            found = passed[key] = _Passed(unit, walk(order))
        return found  # type: ignore[return-value]

    def _counted(self, passed: _Passed[T], keep: Callable[[T], U | None]) -> Iterator[U]:
        """The items of a shared walk that `keep` keeps, counting the steps a walk of its own would: the search bound
        stops it at the same card, whichever walk found the items first."""
        bound = self.limits.max_steps
        found = passed.found
        index = 0
        while index < len(found) or passed.advance():
            steps, item = found[index]
            index += 1
            self.steps += steps
            if self.steps > bound:
                self._spent(passed.unit)
            kept = keep(item)
            if kept is not None:
                yield kept
        self.steps += passed.tail
        if self.steps > bound:
            self._spent(passed.unit)

    def _spent(self, unit: bool) -> None:
        """Stop the search, the count where a walk counting one card at a time would have stopped it."""
        if unit:
            self.steps = self.limits.max_steps + 1
        self.step(0)

    def _take(self, slot: CardSlot, key: str) -> Share:
        """Remove the pod's share from the card and return it."""
        share = slot.pods[key]
        self._change(slot, key, share, -1)
        return share

    def _give(self, slot: CardSlot, key: str, share: Share) -> None:
        """Add the pod's share to the card."""
        self._change(slot, key, share, 1)

    def _change(self, slot: CardSlot, key: str, share: Share, sign: int) -> None:
        """Add (sign 1) or remove (-1) a pod's share, keeping the free-memory indexes sorted."""
        if slot.open:
            entries = self.in_use if slot.used else self.unused
            del entries[bisect_left(entries, (slot.free, slot.ordinal))]
        if sign > 0:
            slot.pods[key] = share
        else:
            del slot.pods[key]
        slot.slots += sign * share[0]
        slot.mem += sign * share[1]
        slot.cores += sign * share[2]
        if slot.open:
            insort(self.in_use if slot.used else self.unused, (slot.free, slot.ordinal))

    # Reports --------------------------------------------------------------------------------------------------

    def summary(self, slots: Iterable[CardSlot]) -> Summary:
        """Fragmentation over the open cards among `slots`."""
        open_cards = whole = free = largest = 0
        for slot in slots:
            if not slot.open or slot.slots >= slot.card.count:
                continue
            if slot.card.devcore != 0 and slot.cores >= slot.card.devcore:
                continue
            open_cards += 1
            whole += not slot.used
            free += max(slot.free, 0)
            largest = max(largest, slot.free)
        return Summary(open_cards=open_cards, whole_cards_free=whole, free_mib=free, largest_free_mib=largest)

    def card_states(self, nodes: Iterable[str]) -> tuple[CardState, ...]:
        """The card map of these nodes, node by node, card by card."""
        return tuple(
            CardState(
                node=slot.node,
                uuid=slot.card.uuid,
                index=slot.card.index,
                type=slot.card.type,
                mem_total=slot.card.devmem,
                mem_used=slot.mem,
                cores_total=slot.card.devcore,
                cores_used=slot.cores,
                slots_total=slot.card.count,
                slots_used=slot.slots,
                pods=tuple(slot.pods),
            )
            for node in sorted(set(nodes))
            for slot in self.by_node.get(node, ())
        )
