"""The planner's search: greedy, bounded, deterministic; every move is checked with HAMi's fit against the cards as
the moves before it left them.

- `fit`: per node, the cheapest cards for the pod (a card that fits now costs nothing, else the fewest of its pods
  whose release makes it fit, then the least memory moved); nodes are tried in order of that cost until no
  cheaper node is left; a node wins when its evicted pods all find other cards (an evicted pod may first push one
  smaller pod aside, one more move, unless the moves its trial still owes would then exceed the plan's), and once a
  node has won, the nodes after it are tried for a plan of fewer moves only. Under `topology-aware` the cards freed
  are those HAMi would then pick by the node's pair scores (`_aim`), and room whose moves free a card HAMi's pick
  passes over is refused (`_make_room`).
- `free-cards` and `compact`: cards in use are tried from the easiest (fewest pods, least memory); a card is freed
  when every pod on it moves, best fit, onto other cards already in use, else its trial is rolled back.
- Cost: the cards a pod shape fits and the pods that could step aside are walked once per state and kept
  (`State._remembered`), so a search that fails on node after node does not walk the cluster again for each; and
  the search stops after `Limits.max_steps` (relocations tried and cards walked), `fit` keeping the plan it found
  so far, `free-cards` the cards it freed so far, both saying so.
"""

from __future__ import annotations

from dataclasses import replace

from kubectl_hami_place.core.errors import RequestError
from kubectl_hami_place.core.fit import numa_bind, scoring_weights, topology_aware
from kubectl_hami_place.core.node_resources import count_name
from kubectl_hami_place.core.planner.model import (
    CompactGoal,
    FitGoal,
    FreeCardsGoal,
    Goal,
    Limits,
    Move,
    Plan,
    PlanPod,
    Snapshot,
    Summary,
)
from kubectl_hami_place.core.planner.state import CardSlot, SearchSpent, State
from kubectl_hami_place.core.refs import place

_REASONS_SHOWN = 5
_AIM_STEPS = 3
_Option = tuple[int, int, str, list[CardSlot], list[str], frozenset[str]]
"""A node to try: how many pods must move, the MiB they hold, the node, its chosen cards, those pods, and those of
them that must leave the node (for its CPU, memory or pod count) rather than move to another of its cards."""
_Best = tuple[tuple[Move, ...], _Option]
"""The plan of fewest moves found so far, and the option it made room on."""


def plan(snapshot: Snapshot, goal: Goal, limits: Limits | None = None) -> Plan:
    """The moves that reach `goal` on `snapshot` within `limits`, or the nearest the planner finds, and why."""
    state = State(snapshot, limits or Limits())
    try:
        if isinstance(goal, FitGoal):
            return _plan_fit(state, goal)
        if isinstance(goal, FreeCardsGoal) and goal.on_one_node:
            return _plan_gather(state, goal)
        if isinstance(goal, FreeCardsGoal):
            return _plan_free(state, goal.describe(), goal.count, goal.card_type, None)
        return _plan_free(state, goal.describe(), len(state.cards), "", _scope(state, goal))
    finally:
        state.forget()


def _scope(state: State, goal: CompactGoal) -> frozenset[str]:
    """The compact goal's nodes that the snapshot knows."""
    return frozenset(node for node in goal.nodes if node in state.by_node)


# free-cards and compact ---------------------------------------------------------------------------------------


def _plan_free(state: State, goal: str, count: int, card_type: str, scope: frozenset[str] | None) -> Plan:
    """Free up to `count` cards in use (within `scope` nodes), easiest first."""
    slots = [slot for node in sorted(scope) for slot in state.by_node[node]] if scope is not None else state.cards
    before = state.summary(slots)
    word = card_type.upper()
    was_used = {slot.card.uuid for slot in slots if slot.used}
    candidates = sorted(
        (slot for slot in slots if slot.open and slot.used and word in slot.card.type.upper()),
        key=lambda slot: (len(slot.pods), slot.mem, slot.cores, slot.ordinal),
    )
    freed: dict[str, None] = {}
    reasons: list[str] = []
    spent = ""
    for _ in range(2):
        reasons = []
        for slot in candidates:
            if len(freed) >= count or spent:
                break
            if not slot.used:
                continue
            short = _short_of_moves(state, slot)
            if short:
                reasons.append(f"{place(slot.node, [slot.card.name])}: {short}")
                continue
            point = len(state.moves)
            try:
                why = _empty(state, slot, scope)
            except SearchSpent as error:
                state.rollback(point)
                spent = str(error)
                break
            if why is not None:
                reasons.append(f"{place(slot.node, [slot.card.name])}: {why}")
                continue
            for move in state.moves[point:]:
                freed.update(dict.fromkeys(u for u in move.from_cards if u in was_used and not state.by_uuid[u].used))
        if not reasons or len(freed) >= count or spent:
            break
    complete = len(freed) >= count
    if not complete and scope is None:
        reached = f"freed {len(freed)} of {count} card(s)"
        none_open = f"{reached}: no card in use that may be emptied (none, or cordoned, kept or unschedulable)"
        reasons.insert(0, f"{reached}; the others cannot be emptied:" if reasons else none_open)
    if spent and not complete:
        reasons.insert(0, spent)
    nodes = {move.from_node for move in state.moves} | {move.to_node for move in state.moves}
    return Plan(
        goal=goal,
        moves=tuple(state.moves),
        complete=complete or scope is not None,
        reasons=tuple(reasons[: _REASONS_SHOWN + 1]),
        before=before,
        after=state.summary(slots),
        cards_after=state.card_states(nodes),
        freed=tuple(freed),
    )


def _short_of_moves(state: State, slot: CardSlot) -> str:
    """Why emptying the card takes more moves than the plan has left, in all or off its node ("" when it may not):
    each of its pods not moved yet is one more move off the node, so such a card is not tried. A card holding a pod
    that never moves is left to `_empty`, which names that pod at once (the lasting reason, not the bound's)."""
    if any(state.pods[key].blocked is not None for key in slot.pods):
        return ""
    needed = _owed(state, list(slot.pods), [slot])
    left = state.limits.max_moves - len(state.moves)
    if needed > left:
        return (
            f"emptying it moves {needed} pod(s), and the plan has {left} of its {state.limits.max_moves} move(s) left"
        )
    off_node = state.node_bound(slot.node) - state.per_node.get(slot.node, 0)
    if needed > off_node:
        return f"emptying it moves {needed} pod(s) off {slot.node}, which has {off_node} move(s) left off it"
    return ""


def _empty(state: State, slot: CardSlot, scope: frozenset[str] | None) -> str | None:
    """Move every pod off the card, or roll back and say why not."""
    point = state.checkpoint()
    order = sorted(slot.pods, key=lambda k: (-slot.pods[k][1], k))
    for index, key in enumerate(order):
        why = state.may_move(key)
        owed = _owed(state, order[index + 1 :], [slot])
        if why is None and state.relocate(
            key,
            f"frees {place(slot.node, [slot.card.name])}",
            {slot.card.uuid},
            scope=scope,
            avoid_empty=True,
            owed=owed,
        ):
            continue
        state.rollback(point)
        return f"{key} {why or _no_card(state.pods[key].pod, 'fits no other card in use')}"
    return None


def _plan_gather(state: State, goal: FreeCardsGoal) -> Plan:
    """Have `goal.count` whole free cards on one node: nodes are tried by the pods on their easiest cards (fewest
    pods, least memory), and a node wins when those pods all move, best fit, onto other cards."""
    before = state.summary(state.cards)
    word = goal.card_type.upper()
    options: list[_Option] = []
    reasons: dict[str, str] = {}
    for node, slots in state.by_node.items():
        movable = [
            slot
            for slot in slots
            if slot.open
            and word in slot.card.type.upper()
            and all(key in state.pods and state.pods[key].blocked is None for key in slot.pods)
        ]
        if len(movable) < goal.count:
            reasons[node] = f"fewer than {goal.count} open cards of the type whose pods may move"
            continue
        chosen = sorted(movable, key=lambda slot: (len(slot.pods), slot.mem, slot.ordinal))[: goal.count]
        pods = list(dict.fromkeys(key for slot in chosen for key in slot.pods))
        over = _over_bound(state, node, len(pods))
        if over:
            reasons[node] = over
            continue
        options.append((len(pods), sum(slot.mem for slot in chosen), node, chosen, pods, frozenset()))
    options.sort(key=lambda option: option[:3])
    spent = ""
    for position, (_, _, node, chosen, pods, _) in enumerate(options):
        point = state.checkpoint()
        try:
            failure = _vacate(state, node, chosen, pods, explain=position < _REASONS_SHOWN)
        except SearchSpent as error:
            state.rollback(point)
            spent = str(error)
            break
        if failure is not None:
            reasons[node] = failure
            continue
        freed = tuple(slot.card.uuid for slot in chosen if any(slot.card.uuid in m.from_cards for m in state.moves))
        return _reached(state, goal, before, node, freed=freed)
    head = f"{spent}; no node tried could free the cards" if spent else "no node can free the cards within the bounds:"
    return _no_plan(state, goal, (head, *_ranked(options, reasons)))


def _vacate(
    state: State,
    node: str,
    chosen: list[CardSlot],
    pods: list[str],
    *,
    words: tuple[str, str] = ("frees", "free"),
    leave: frozenset[str] = frozenset(),
    explain: bool = True,
) -> str | None:
    """Move the pods off the chosen cards, best fit (cards in use first), those in `leave` off the node; roll back
    and say why not. A whole-card pod may take a free card elsewhere: a free card on another node is of no use to a
    task of several whole cards. `words` say what the moves do, in a move's reason and in the failure; `explain`
    names a node whose CPU or memory refused the pod that fits no card (`State.refused_for_room`, which walks the
    cards of every such node): only for a node whose failure a plan can show (`_ranked`, the first nodes tried)."""
    point = state.checkpoint()
    exclude = {slot.card.uuid for slot in chosen}
    away = exclude | {slot.card.uuid for slot in state.by_node[node]}
    shares = {key: max(slot.pods.get(key, (0, 0, 0))[1] for slot in chosen) for key in pods}
    names = [slot.card.name for slot in chosen]
    does, would = words
    reason = f"{does} {place(node, names)}"
    order = sorted(pods, key=lambda k: (-shares[k], k))
    for index, key in enumerate(order):
        why = state.may_move(key)
        barred = away if key in leave else exclude
        if why is None and state.relocate(key, reason, barred, owed=_owed(state, order[index + 1 :], chosen)):
            continue
        if why is None:
            refused = state.refused_for_room(key, barred) if explain else None
            why = _no_card(state.pods[key].pod, "fits no other card") + (
                f" except on {refused[0]}, whose {' and '.join(refused[1])} would not hold it (kube-scheduler's count)"
                if refused is not None
                else ""
            )
        state.rollback(point)
        return f"moving {', '.join(pods)} would {would} {', '.join(names)}, but {key} {why}"
    return None


def _owed(state: State, later: list[str], cards: list[CardSlot]) -> int:
    """The moves a trial must still make for the later pods on the cards it frees: each not moved yet is one more
    move, and no chain can make it (a chain never takes a pod off the cards being freed)."""
    return sum(1 for key in later if not state.pods[key].moved and any(key in slot.pods for slot in cards))


def _no_card(pod: PlanPod, words: str) -> str:
    """Why a pod found no card to move to, in words: with why it stays on its node when it does, else with the first
    node kube-scheduler would keep its replacement off (`PlanPod.kept_off`) and why."""
    if pod.stays:
        return f"{words} of its node, where it stays ({pod.stays})"
    if not pod.kept_off:
        return words
    node, (_, why) = min(pod.kept_off.items())
    more = f"; {len(pod.kept_off) - 1} more node(s) kept off" if len(pod.kept_off) > 1 else ""
    return f"{words} where kube-scheduler lets it go ({node}: {why}{more})"


# fit ----------------------------------------------------------------------------------------------------------


_Cost = tuple[int, int, int, CardSlot, list[str]]


def _one_numa(costs: list[_Cost], nums: int) -> list[_Cost]:
    """The cheapest `nums` of the sorted costs on one NUMA node (HAMi refuses a numa-bind pod cards of two)."""
    groups: dict[int, list[_Cost]] = {}
    for item in costs:
        groups.setdefault(item[3].card.numa, []).append(item)
    options = [group[:nums] for group in groups.values() if len(group) >= nums]

    def cost(group: list[_Cost]) -> tuple[int, int, int]:
        """Pods evicted, MiB moved, the first card's order."""
        return len({key for item in group for key in item[4]}), sum(item[1] for item in group), group[0][2]

    return min(options, key=cost, default=[])


def _aim(state: State, pod: PlanPod, node: str, costs: list[_Cost], chosen: list[_Cost]) -> list[_Cost]:
    """Under `topology-aware`, the cards HAMi would pick on the node once the chosen cards' pods have left it (by the
    node's pair scores, `State.hami_pick`), as the cards to free: freeing others moves pods for cards HAMi passes
    over. Freeing HAMi's pick instead costs no more (its other cards fit already or were being freed), and leaves
    HAMi picking it again, unless moving other pods frees other cards; `_make_room` checks what HAMi picks after.
    Chosen cards that fit the pod now stay chosen: HAMi's pick for its first container alone may not hold them all,
    and pinned to them HAMi has no other pick."""
    if not topology_aware(pod.fit_annotations, pod.default_policy) or not any(item[4] for item in chosen):
        return chosen
    by_uuid = {item[3].card.uuid: item for item in costs}
    for _ in range(_AIM_STEPS):
        released = frozenset(key for item in chosen for key in item[4])
        picked = state.hami_pick(pod, node, released=released)
        if picked is None or any(slot.card.uuid not in by_uuid for slot in picked):
            return chosen
        aimed = sorted((by_uuid[slot.card.uuid] for slot in picked), key=lambda item: item[:3])
        if aimed == chosen:
            break
        chosen = aimed
    return chosen


def _plan_fit(state: State, goal: FitGoal) -> Plan:
    """Make room for the goal's pod on the node that needs the fewest moves; a `topology-aware` pod's cards to free
    are those HAMi would pick there (`_aim`), and its target the cards HAMi picks after the moves, by the node's pair
    scores (`State.hami_cards`)."""
    pod = goal.pod
    before = state.summary(state.cards)
    gpu = pod.gpu_requests
    if not gpu:
        return _no_plan(state, goal, ("the pod asks for no NVIDIA card",))
    if len({request.nums for _, request in gpu}) > 1:
        return _no_plan(state, goal, ("the pod's GPU containers ask different card counts; the planner pins one set",))
    try:
        scoring_weights(pod.fit_annotations)
    except RequestError as error:
        return _no_plan(state, goal, (f"{error}: HAMi's filter fails for the pod on every node",))
    nums = gpu[0][1].nums
    options: list[_Option] = []
    # For a one-card pod, each node's other cards it may take (worked out only if needed): tried when no plan was found
    # or the best chains moves, since the cheapest card to free may hold pods only a chain makes room for.
    spares: list[tuple[str, _Cost]] = []
    reasons: dict[str, str] = {}
    for node, slots in state.by_node.items():
        if not state.node_open[node]:
            reasons[node] = "the node takes no new pods (not ready, cordoned or without nvidia.com/gpu)"
            continue
        if not pod.runs_on(node):
            taint = pod.untolerated.get(node)
            if taint:
                reasons[node] = f"the pod does not tolerate its taint {taint}"
            elif node in pod.kept_off:
                reasons[node] = pod.kept_off[node][1]
            else:
                reasons[node] = "the pod's node selection excludes it"
            continue
        costs = []
        blocks = []
        for slot in slots:
            evict, blocked = _room(state, pod, slot)
            if evict is None:
                blocks.append(f"{slot.card.name}: {blocked}")
            else:
                costs.append((len(evict), sum(slot.pods[key][1] for key in evict), slot.ordinal, slot, evict))
        if len(costs) < nums:
            reasons[node] = "; ".join(blocks) or "the node has no cards"
            continue
        if blocks:
            reasons[node] = "; ".join(blocks)
        costs.sort(key=lambda item: item[:3])
        bind = numa_bind(pod.fit_annotations)
        if bind:
            # under topology-aware HAMi gives cards of one NUMA node only (State.topology_numa)
            costs = [item for item in costs if item[3].card.numa == state.topology_numa(pod, node, item[3].card.numa)]
        chosen = _aim(state, pod, node, costs, _one_numa(costs, nums) if bind else costs[:nums])
        if len(chosen) < nums:
            reasons[node] = f"no {nums} cards of one NUMA node can take the pod, which asks nvidia.com/numa-bind"
            continue
        option = _option(state, pod, node, chosen)
        if isinstance(option, str):
            reasons[node] = option
            continue
        options.append(option)
        if not option[4]:
            break
        if nums == 1:
            spares += [(node, item) for item in costs if item is not chosen[0]]
    options.sort(key=lambda option: option[:3])
    best, spent = _least_moves(state, pod, options, reasons, None)
    if not spent and (best is None or len(best[0]) > best[1][0]):
        # No plan, or the best chains moves to make room for the pods it evicts: freeing another card of a node may
        # take fewer, or fit the bounds.
        others = (_option(state, pod, node, [item]) for node, item in spares)
        spared = sorted((other for other in others if not isinstance(other, str)), key=lambda option: option[:3])
        best, spent = _least_moves(state, pod, spared, None, best)
    if best is not None:
        moves, (_, _, node, cards, _, _) = best
        for move in moves:
            state.carry_out(move)
        cards = state.hami_cards(pod, node, cards)
        return _reached(state, goal, before, node, target=(node, tuple(slot.card.uuid for slot in cards)))
    head = (
        f"{spent}; no node tried could make room within the bounds:"
        if spent
        else "no node can make room within the bounds:"
    )
    return _no_plan(state, goal, (head, *_ranked(options, reasons)))


def _option(state: State, pod: PlanPod, node: str, chosen: list[_Cost]) -> _Option | str:
    """The node as an option with these cards to free: the pods that must move (those off the cards, and those that
    must leave the node for its CPU, memory or pod count); or why it cannot be one."""
    evicted = list(dict.fromkeys(key for *_, keys in chosen for key in keys))
    leave, short = _leaving(state, pod, node, evicted)
    if short:
        return short
    evicted += sorted(leave - set(evicted))
    over = _over_bound(state, node, len(evicted))
    if over:
        return over
    return (len(evicted), sum(item[1] for item in chosen), node, [item[3] for item in chosen], evicted, leave)


def _least_moves(
    state: State, pod: PlanPod, options: list[_Option], reasons: dict[str, str] | None, best: _Best | None
) -> tuple[_Best | None, str]:
    """The plan of fewest moves over the options, in order, beside `best` so far (only fewer moves replace it: the
    search bound stays lowered below it, as the call that found it left it); and why the search stopped early (""
    when it did not). A node's failure goes into `reasons`, for the first few nodes tried; None: no failure is said,
    nor worked out."""
    limits = state.limits
    for position, option in enumerate(options):
        least, _, node, cards, evicted, leave = option
        if best is not None and least >= len(best[0]):
            break
        point = state.checkpoint()
        explain = reasons is not None and position < _REASONS_SHOWN
        try:
            failure = _make_room(state, pod, node, cards, evicted, leave=leave, explain=explain)
        except SearchSpent as error:
            state.rollback(point)
            return best, str(error)
        if failure is not None:
            if reasons is not None:
                reasons[node] = "; ".join(filter(None, (failure, reasons.get(node))))
            continue
        if best is None or len(state.moves) < len(best[0]):
            best = (tuple(state.moves), option)
            # only a plan of fewer moves replaces it: the nodes left are searched with no chain or move beyond that
            # (the bound stays lowered; the best plan's moves are replayed after, which no bound checks)
            state.limits = replace(limits, max_moves=len(best[0]) - 1)
        state.rollback(point)
    return best, ""


def _over_bound(state: State, node: str, evictions: int) -> str:
    """Why evicting this many pods off the node breaks the limits ("" when it may not): each eviction is a move off
    it, so such a node is not tried and the search bound goes to nodes that can be made room on."""
    per_node = state.node_bound(node)
    if evictions > state.limits.max_moves:
        return f"making room evicts {evictions} pods, which would exceed the plan's {state.limits.max_moves} move(s)"
    if evictions > per_node:
        return f"making room evicts {evictions} pods, which would exceed {per_node} moves off node {node}"
    return ""


def _room(state: State, pod: PlanPod, slot: CardSlot) -> tuple[list[str] | None, str]:
    """The fewest pods to release from the card for the pod to fit it (empty when it fits now), or None and why."""
    if state.fits(pod, slot):
        return [], ""
    refused = state.refused_empty(pod, slot)
    if refused is not None:
        return None, f"{refused.reason}: {refused.message}"
    movable = [key for key in slot.pods if state.may_move(key) is None]
    for key in sorted(movable, key=lambda k: (slot.pods[k][1], k)):
        if state.fits(pod, slot, slot.pods[key]):
            return [key], ""
    released = (0, 0, 0)
    chosen: list[str] = []
    for key in sorted(movable, key=lambda k: (-slot.pods[k][1], k)):
        share = slot.pods[key]
        released = (released[0] + share[0], released[1] + share[1], released[2] + share[2])
        chosen.append(key)
        if state.fits(pod, slot, released):
            return chosen, ""
    verdict = state.verdict(pod, slot)
    stuck = [f"{key} {why}" for key in slot.pods if (why := state.may_move(key)) is not None]
    return None, f"{verdict.reason}, and " + ("; ".join(stuck) or "moving its pods is not enough")


def _leaving(state: State, pod: PlanPod, node: str, evicted: list[str]) -> tuple[frozenset[str], str]:
    """The pods that must leave the node for its CPU, memory and pod count to hold the pod (none when they hold it
    now; else the evicted ones and, largest first, others that may move), or why no such set exists."""
    if state.holds(node, pod, state.node_of(pod)):
        return frozenset(), ""
    leaving = list(evicted)
    freed = state.room[node]
    for key in evicted:
        freed += state.pods[key].pod.needs
    on_node = dict.fromkeys(key for slot in state.by_node[node] for key in slot.pods if key in state.pods)
    others = [key for key in on_node if key not in evicted and state.may_move(key) is None]
    others.sort(key=lambda key: (-state.pods[key].pod.needs.cpu, -state.pods[key].pod.needs.memory, key))
    for key in others:
        if freed.holds(pod.needs):
            break
        leaving.append(key)
        freed += state.pods[key].pod.needs
    if not freed.holds(pod.needs):
        counts = " and ".join(map(count_name, freed.short(pod.needs)))
        return frozenset(), f"the node's {counts} would not hold the pod even with every pod that may move moved off"
    return frozenset(leaving), ""


def _make_room(
    state: State,
    pod: PlanPod,
    node: str,
    chosen: list[CardSlot],
    evicted: list[str],
    *,
    leave: frozenset[str],
    explain: bool,
) -> str | None:
    """Move the evicted pods off the chosen cards (those in `leave` off the node) and check the pod then fits them
    and the node's CPU, memory and pod count hold it, and that under `topology-aware` HAMi's pick by the node's pair
    scores takes every chosen card the moves free (`State.hami_cards`); roll back and say why not (`explain`: as
    `_vacate`)."""
    point = state.checkpoint()
    freed = [slot for slot in chosen if any(key in slot.pods for key in evicted)]
    failure = _vacate(
        state, node, chosen, evicted, words=("makes room on", "make room on"), leave=leave, explain=explain
    )
    if failure is not None:
        return failure
    if not state.holds(node, pod, state.node_of(pod)):
        state.rollback(point)
        return "the node's CPU, memory or pod count would not hold the pod after the moves"
    for slot in chosen:
        verdict = state.verdict(pod, slot)
        if not verdict.ok:
            state.rollback(point)
            return f"{slot.card.name} still does not fit after the moves: {verdict.reason}"
    picked = state.hami_cards(pod, node, chosen)
    passed = [slot for slot in freed if slot not in picked]
    if passed:
        state.rollback(point)
        return (
            f"HAMi's topology-aware pick after the moves would be {', '.join(slot.card.name for slot in picked)} "
            f"(the node's pair scores), passing over {', '.join(slot.card.name for slot in passed)}, which they free"
        )
    return None


def _reached(
    state: State,
    goal: Goal,
    before: Summary,
    node: str,
    *,
    target: tuple[str, tuple[str, ...]] | None = None,
    freed: tuple[str, ...] = (),
) -> Plan:
    """The plan of the moves made so far, which reach the goal on `node`; its card map covers every node they touch."""
    nodes = {node} | {m.from_node for m in state.moves} | {m.to_node for m in state.moves}
    return Plan(
        goal=goal.describe(),
        moves=tuple(state.moves),
        complete=True,
        reasons=(),
        before=before,
        after=state.summary(state.cards),
        cards_after=state.card_states(nodes),
        target=target,
        freed=freed,
    )


def _ranked(options: list[_Option], reasons: dict[str, str]) -> list[str]:
    """Why each node failed, the nodes tried first (in the order tried), then the others; the first few only: a node
    tried after the first `_REASONS_SHOWN` is never shown, as those all failed before it was tried."""
    ranked = dict.fromkeys(f"{node}: {reasons[node]}" for _, _, node, *_ in options if node in reasons)
    ranked.update(dict.fromkeys(f"{node}: {why}" for node, why in reasons.items()))
    return list(ranked)[:_REASONS_SHOWN]


def _no_plan(state: State, goal: Goal, reasons: tuple[str, ...]) -> Plan:
    """An empty plan that says why."""
    summary = state.summary(state.cards)
    return Plan(
        goal=goal.describe(),
        moves=(),
        complete=False,
        reasons=reasons,
        before=summary,
        after=summary,
        cards_after=(),
    )
