"""One run's decision: the planner's moves toward the trigger's goal within the policy's budgets, or why none.

The planner already refuses DaemonSet, static, controller-less, `do-not-move` and system-critical pods and spends each
PodDisruptionBudget's allowance. A run also keeps where they are: pods of namespaces the policy leaves out, pods on
nodes its `nodeSelector` does not select (whose cards take no moved pod either, `in_scope`), pods its `labelSelector`
does not select, pods in their cooldown, with its `ignorePodsWithoutPDB` pods no PodDisruptionBudget covers, with
`evictLocalStoragePods: false` pods with an emptyDir or hostPath volume, with `ignorePvcPods` pods that mount a
PersistentVolumeClaim, a Job's pods unless the policy's `moveJobPods` lets them move, pods of the policy's
`priorityThreshold` or above, pods whose controller has fewer running pods than its `minReplicas`, pods placed on their
card less than its `minPodAge` ago, and, for a rescue, pods of a higher priority than the rescued pod; it bounds the
moves by what the run's, the hour's, each node's and each namespace's budgets still allow. A rescue that needs more
moves than the budgets allow does nothing (half a rescue frees no room for the pod and still evicts); one that only
PodDisruptionBudgets stop says so (`blocked: `, naming each budget and the pods it would have to let go). The cards kept
for a rescued pod (`core.reservation`) take no moved pod and no other rescue while kept (`keep_off`), and so do the
cards HAMi refused a given-up move's replacement on, for the cooldown (`refuse`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from kubectl_hami_place.core.cards import node_cards
from kubectl_hami_place.core.defrag.budget import (
    Allowance,
    MoveRecord,
    allowance,
    cooldown_reason,
    cooldowns,
    workload_cooldown_reason,
    workload_rest_until,
    workload_rests,
)
from kubectl_hami_place.core.defrag.policy import DefragPolicy, Mode, format_duration
from kubectl_hami_place.core.errors import ModelError
from kubectl_hami_place.core.fields import as_mapping
from kubectl_hami_place.core.planner import FitGoal, Goal, Limits, Move, Plan, PlanNode, PlanPod, Snapshot, plan
from kubectl_hami_place.core.planner.objects import keep_counted_on_node
from kubectl_hami_place.core.refs import place, where
from kubectl_hami_place.core.reservation import Reservation, barring
from kubectl_hami_place.core.selectors import matches
from kubectl_hami_place.core.usage import pod_allocation


@dataclass(frozen=True)
class RescueTrigger:
    """Make room for a Pending pod HAMi refused; `reason` is HAMi's (see `triggers.rescue_reason`), `unread` the
    refusals of other nodes the plan does not read (`triggers.unread_refusals`). The pods where it may go depends on
    (`PlanPod.counts`, and those whose own terms count it) the run moves only within their node."""

    pod: PlanPod
    reason: str = ""
    unread: tuple[str, ...] = ()

    def describe(self) -> str:
        """The trigger in words."""
        return f"rescue {self.pod.key}" + (f" ({self.reason})" if self.reason else "")


@dataclass(frozen=True)
class RoomTrigger:
    """Plan toward a keep-room goal (see `triggers.room_goal`)."""

    goal: Goal

    def describe(self) -> str:
        """The trigger in words."""
        return f"keep room: {self.goal.describe()}"


Trigger = RescueTrigger | RoomTrigger


@dataclass(frozen=True)
class RunDecision:
    """What a run does: the moves (none when `reason` says why), whether only as a dry-run, and the plan behind them.

    `held` lists the pods the policy kept in place (`ns/name: why`); `message` is the outcome in one line, the text
    of the Events, and `moves_words` its moves alone (the Lease keeps the trigger apart); `card_names` names the cards
    of the moves and of the plan's target by register index (UUID -> `gpu-N`), as the snapshot had them.
    """

    run_id: str
    trigger: str
    goal: Goal | None
    moves: tuple[Move, ...]
    dry_run: bool
    reason: str = ""
    plan: Plan | None = None
    held: tuple[str, ...] = ()
    message: str = ""
    card_names: Mapping[str, str] = field(default_factory=dict)
    moves_words: str = ""

    @property
    def acts(self) -> bool:
        """Whether the run carries moves out (not a dry-run, not nothing)."""
        return bool(self.moves) and not self.dry_run

    @property
    def fits_now(self) -> bool:
        """Whether the plan found the rescue's pod room as the cards are, no move needed: kube-scheduler has not tried
        it since that room was made (before 1.29 it may not for 5 minutes after the pod that held it went)."""
        return isinstance(self.goal, FitGoal) and self.plan is not None and self.plan.complete and not self.plan.moves


def decide_run(  # noqa: PLR0917 - the controller's loop passes the run's six parts in this order
    policy: DefragPolicy,
    snapshot: Snapshot,
    trigger: Trigger,
    history: Iterable[MoveRecord],
    now: datetime,
    run_id: str,
) -> RunDecision:
    """The run's moves toward the trigger's goal on `snapshot`, within the policy and the budgets left at `now`."""
    history = tuple(history)
    goal: Goal = FitGoal(trigger.pod) if isinstance(trigger, RescueTrigger) else trigger.goal
    dry_run = policy.mode is Mode.dry_run

    def nothing(reason: str, result: Plan | None = None, held: tuple[str, ...] = ()) -> RunDecision:
        """A decision that moves nothing, and why."""
        return RunDecision(run_id, trigger.describe(), goal, (), dry_run, reason, result, held, reason)

    if policy.mode is Mode.off:
        return nothing("the policy's mode is off")
    if isinstance(trigger, RescueTrigger):
        if not policy.rescue.enabled:
            return nothing("rescue is off in the policy (rescue.enabled: false)")
        if not policy.namespaces.allows(trigger.pod.namespace):
            return nothing(f"namespace {trigger.pod.namespace} is out of the policy's namespaces")
    elif not policy.keep_room.enabled:
        return nothing("keep-room is off in the policy (keepRoom.enabled: false)")
    left = allowance(policy.budgets, history, now, run_id)
    if left.moves == 0:
        return nothing(left.reason)
    outside = _outside(snapshot, policy)
    ceiling = trigger.pod.priority if isinstance(trigger, RescueTrigger) else None
    held_snapshot, held = _hold(policy, _barred_outside(snapshot, outside), ceiling, history, now, outside=outside)
    if isinstance(trigger, RescueTrigger):
        held_snapshot = keep_counted_on_node(held_snapshot, trigger.pod)
    limits = Limits(
        max_moves=min(left.moves, policy.max_moves_per_plan),
        max_moves_per_node=policy.budgets.moves_per_node,
        max_moves_per_namespace=policy.budgets.moves_per_namespace,
        node_moves_left=left.node_left,
        namespace_moves_left=left.namespace_left,
    )
    result = plan(held_snapshot, goal, limits)
    if isinstance(trigger, RescueTrigger):
        if not result.complete:
            unbounded = plan(held_snapshot, goal, _unbounded(policy))
            if unbounded.complete and unbounded.moves:
                return nothing(_over_budget(unbounded.moves, left), result, held)
            blocked = _blocked_by_disruption_budgets(held_snapshot, goal, policy)
            if blocked:
                return nothing(blocked, result, held)
            return nothing(f"no plan: {result.why}", result, held)
        if not result.moves:
            where = f" on {result.target[0]}" if result.target else ""
            return nothing(f"no move needed: {trigger.pod.key} fits{where} now", result, held)
        if trigger.unread:
            return nothing(
                f"no plan: kube-scheduler keeps the pod off nodes for reasons the plan does not read "
                f"({'; '.join(trigger.unread)}), so the room its moves make could be where the pod may not go; "
                f"run `kubectl hami-place plan --for {trigger.pod.name} -n {trigger.pod.namespace}` and apply it if "
                "its target suits the pod",
                result,
                held,
            )
    elif not result.moves:
        return nothing(f"no plan: {result.why or 'nothing to gain'}", result, held)
    names = _card_names(result, snapshot)
    words = _words(result.moves, names, dry_run)
    message = f"{words} to {trigger.describe()}"
    return RunDecision(run_id, trigger.describe(), goal, result.moves, dry_run, "", result, held, message, names, words)


def _card_names(found: Plan, snapshot: Snapshot) -> dict[str, str]:
    """The cards of the plan's moves and target by register index on the snapshot: UUID -> `gpu-N`."""
    uuids = {uuid for move in found.moves for uuid in (*move.from_cards, *move.to_cards)}
    uuids.update(found.target[1] if found.target is not None else ())
    return {uuid: name for uuid, name in snapshot.card_names().items() if uuid in uuids}


def fits_as_is(snapshot: Snapshot, pod: PlanPod) -> bool:
    """Whether HAMi would place the pod as the cards are, no move (a kept room is made once the pods on it have
    gone): the planner's plan for it with no move allowed."""
    found = plan(snapshot, FitGoal(pod), Limits(max_moves=0))
    return found.complete and not found.moves


def in_scope(snapshot: Snapshot, policy: DefragPolicy) -> Snapshot:
    """The snapshot with the cards of the nodes the policy's nodeSelector does not select taking no new pod, as a
    device cordon: no plan moves a pod onto them or makes room there, and keep-room counts no room there."""
    return _barred_outside(snapshot, _outside(snapshot, policy))


def _outside(snapshot: Snapshot, policy: DefragPolicy) -> frozenset[str]:
    """The nodes the policy's nodeSelector does not select (none without one)."""
    selector = policy.node_selector
    if selector is None:
        return frozenset()
    return frozenset(node.name for node in snapshot.nodes if not matches(selector, node.labels))


def _barred_outside(snapshot: Snapshot, outside: frozenset[str]) -> Snapshot:
    """The snapshot with every card of the `outside` nodes taking no new pod (`in_scope`)."""
    if not outside:
        return snapshot
    why = "is on a node the policy's nodeSelector does not select"
    return replace(
        snapshot,
        nodes=tuple(
            _bar(node, dict.fromkeys((card.uuid for card in node.cards), why)) if node.name in outside else node
            for node in snapshot.nodes
        ),
    )


def keep_off(
    snapshot: Snapshot,
    reservations: Sequence[Reservation],
    now: datetime,
    pod: str = "",
    refused: Mapping[str, datetime] | None = None,
) -> Snapshot:
    """The snapshot with the cards kept at `now` for pods other than `pod` (`namespace/name`), and the `refused`
    cards until their time (see `refuse`), taking no new pod, as HAMi's device cordon: a plan moves no pod onto them
    and makes no room for another pod there. Each node's `barred` says why, for the plan's reasons."""
    why: dict[str, str] = {}
    for card, until in (refused or {}).items():
        if until > now:
            why[card] = f"is left out of plans until {until:%H:%M:%S} UTC: HAMi refused a given-up move's pod there"
    for kept in barring(reservations, now, pod):
        for card in kept.cards:
            why[card] = f"is kept for {kept.pod}, whose rescue freed it, until {kept.until:%H:%M:%S} UTC"
    if not why:
        return snapshot
    return replace(snapshot, nodes=tuple(_bar(node, why) for node in snapshot.nodes))


def _bar(node: PlanNode, why: Mapping[str, str]) -> PlanNode:
    """The node with those of its cards `why` names taking no new pod, and why."""
    barred = {card.uuid: why[card.uuid] for card in node.cards if card.uuid in why}
    if not barred:
        return node
    return replace(node, cordoned=node.cordoned | frozenset(barred), barred={**node.barred, **barred})


def refuse(
    refused: Mapping[str, datetime], cards: Iterable[str], now: datetime, cooldown: timedelta
) -> dict[str, datetime]:
    """`refused` (card UUID: until when no plan uses it) with `cards` added until `now + cooldown` and the entries past
    their time dropped. The cards are those HAMi did not give a given-up move's pinned replacement: HAMi may count a
    pod there that no longer exists, and each plan onto such a card would cost two more evictions."""
    kept = {card: until for card, until in refused.items() if until > now}
    return {**kept, **dict.fromkeys(cards, now + cooldown)}


def held_now(  # noqa: PLR0917 - the policy read again, the cluster now, the history, when, the run and its move
    policy: DefragPolicy,
    snapshot: Snapshot,
    history: Iterable[MoveRecord],
    now: datetime,
    run_id: str,
    move: Move,
) -> str:
    """Why the policy, read again while the run `run_id` is under way, now keeps the move's pod in place or its
    target node out of reach, in words; "" when it does not. A pod the operator's policy leaves out after the plan
    (its labelSelector, priorityThreshold, nodeSelector, ...) is not evicted. The run's own moves start no cooldown
    here, and the rescued pod's priority, which no one can change, was weighed by the plan."""
    outside = _outside(snapshot, policy)
    if move.to_node in outside:
        return f"its target node {move.to_node} is no longer selected by the policy's nodeSelector"
    earlier = tuple(record for record in history if record.run_id != run_id)
    held_snapshot, _ = _hold(policy, snapshot, None, earlier, now, outside=outside)
    pod = next((pod for pod in held_snapshot.pods if pod.key == move.pod), None)
    return f"{move.pod} {pod.held}" if pod is not None and pod.held else ""


def _hold(
    policy: DefragPolicy,
    snapshot: Snapshot,
    ceiling: int | None,
    history: tuple[MoveRecord, ...],
    now: datetime,
    *,
    outside: frozenset[str],
) -> tuple[Snapshot, tuple[str, ...]]:
    """The snapshot with the pods the policy keeps in place marked `held`, and those pods with why; `outside` the
    nodes its nodeSelector does not select (`_outside`); `ceiling` the priority above which no pod moves (a rescued
    pod's), None for no bound."""
    resting = cooldowns(policy.budgets, history, now)
    rests = workload_rests(policy.budgets, history, now)
    # A terminating pod of the controller serves nothing (a pod of the snapshot is placed: its allocation is set).
    # Counted only when the policy asks (6 ms a run at 34,000 pods); with minReplicas 0 no count is below it.
    replicas: Counter[str] = Counter()
    if policy.min_replicas:
        replicas.update(
            pod.owner_uid for pod in snapshot.pods if pod.owner_uid and pod.allocation and not pod.allocation.deleting
        )
    pods = []
    held = []
    for pod in snapshot.pods:
        why = None
        if not policy.namespaces.allows(pod.namespace):
            why = f"is in namespace {pod.namespace}, which the policy leaves out"
        elif pod.allocation is not None and pod.allocation.node in outside:
            why = f"is on node {pod.allocation.node}, which the policy's nodeSelector does not select"
        elif policy.label_selector is not None and not matches(policy.label_selector, pod.labels):
            # Not the selector itself: a key's prefix (`example.com/movable`) reads as a pod of another namespace, which
            # the tenant's Event hides (`audience`); `defrag status` shows it.
            why = "is not selected by the policy's labelSelector"
        elif pod.key in resting:
            why = cooldown_reason(resting[pod.key])
        elif (until := workload_rest_until(rests, pod.namespace, pod.labels, pod.created)) is not None:
            why = workload_cooldown_reason(until)
        elif policy.ignore_pods_without_budget and not pod.budgets:
            # The operator moves only the workloads that said how much disruption they take.
            why = (
                "is covered by no PodDisruptionBudget, and the policy moves only pods one covers (ignorePodsWithoutPDB)"
            )
        elif pod.local_storage and not policy.evict_local_storage:
            # What the pod wrote there (a scratch dataset, a checkpoint) stays on the node a move takes it off.
            why = (
                f"mounts local storage ({pod.local_storage}), and the policy keeps such pods in place "
                "(evictLocalStoragePods: false)"
            )
        elif pod.mounts_claim and policy.ignore_claim_pods:
            why = "mounts a PersistentVolumeClaim, and the policy keeps such pods in place (ignorePvcPods: true)"
        elif pod.owner_kind == "Job" and not policy.move_job_pods:
            # Kubernetes counts an eviction toward the Job's backoffLimit (unless its podFailurePolicy ignores
            # DisruptionTarget): one with backoffLimit 0 fails at its first move, and the pod's work starts over.
            why = "is a Job's pod, which the policy keeps in place (moveJobPods: false)"
        elif policy.priority_class and policy.priority_threshold is None:
            why = f"the policy's priorityThreshold names PriorityClass {policy.priority_class}, whose value is not read"
        elif policy.priority_threshold is not None and pod.priority >= policy.priority_threshold:
            why = f"has priority {pod.priority}, at or above the policy's priorityThreshold {policy.priority_threshold}"
            why += f" (PriorityClass {policy.priority_class})" if policy.priority_class else ""
        elif pod.owner_uid and replicas[pod.owner_uid] < policy.min_replicas:
            # A move evicts the pod before its replacement starts: the controller's only running pod stops its service.
            why = (
                f"its {pod.owner_kind} has {replicas[pod.owner_uid]} running pod(s), fewer than the policy's "
                f"minReplicas {policy.min_replicas}"
            )
        elif policy.min_pod_age and (young := _younger(pod, now, policy.min_pod_age)):
            why = young
        elif ceiling is not None and pod.priority > ceiling:
            why = f"has priority {pod.priority}, above the rescued pod's {ceiling}"
        if why is None:
            pods.append(pod)
            continue
        pods.append(replace(pod, held=why))
        held.append(f"{pod.key}: {why}")
    return replace(snapshot, pods=tuple(pods)), tuple(held)


def _younger(pod: PlanPod, now: datetime, min_age: timedelta) -> str:
    """Why a pod placed less than `min_age` ago stays ("" when older): one that just started (loading its model,
    warming its cache) loses that work at a move. Its age counts from its binding, else its creation; with neither
    known it stays, as the descheduler keeps a pod with no start time."""
    since = pod.scheduled or pod.created
    limit = format_duration(min_age)
    if since is None:
        return f"has no time it was placed, so its age is unknown against the policy's minPodAge {limit}"
    age = now - since
    if age >= min_age:
        return ""
    return f"was placed {format_duration(max(age, timedelta(0)))} ago, less than the policy's minPodAge {limit}"


def _unbounded(policy: DefragPolicy) -> Limits:
    """Limits with only the plan's own bound: how many moves a rescue would need were the budgets untouched."""
    return Limits(max_moves=policy.max_moves_per_plan, max_moves_per_node=policy.max_moves_per_plan)


def _blocked_by_disruption_budgets(snapshot: Snapshot, goal: Goal, policy: DefragPolicy) -> str:
    """Which PodDisruptionBudgets alone stop a rescue, in words (`blocked: ...`), when the plan they would allow is
    complete; "" when the rescue has no plan either way."""
    lifted = {budget: len(snapshot.pods) for pod in snapshot.pods for budget in pod.budgets}
    unguarded = plan(replace(snapshot, budgets=lifted), goal, _unbounded(policy))
    if not (unguarded.complete and unguarded.moves):
        return ""
    protected = {pod.key: pod.budgets for pod in snapshot.pods}
    evicted = Counter(budget for move in unguarded.moves for budget in protected.get(move.pod, ()))
    spent = [
        f"PodDisruptionBudget {budget} allows {snapshot.budgets.get(budget, 0)} disruption(s), the rescue needs {count}"
        for budget, count in sorted(evicted.items())
        if count > snapshot.budgets.get(budget, 0)
    ]
    if not spent:
        return ""
    pods = ", ".join(move.pod for move in unguarded.moves)
    return f"blocked: the rescue must evict {pods}; " + "; ".join(spent)


def still_allowed(  # noqa: PLR0917 - the run's policy, history, its moves made and left, and when
    policy: DefragPolicy,
    history: Iterable[MoveRecord],
    done: Sequence[Move],
    rest: Sequence[Move],
    now: datetime,
    run_id: str,
) -> str:
    """Why the policy, read again while the run `run_id` is under way, no longer allows its `rest` moves after the
    `done` ones, in words; "" when it does. A namespace taken out or a budget lowered mid-run binds from the run's
    next move."""
    for move in rest:
        namespace = move.pod.split("/", 1)[0]
        if not policy.namespaces.allows(namespace):
            return f"namespace {namespace} is now out of the policy's namespaces"
    made = [MoveRecord(run_id, m.pod, m.pod.split("/", 1)[0], m.from_node, now, "Evicted") for m in done]
    return _overrun(tuple(rest), allowance(policy.budgets, (*history, *made), now, run_id))


def _over_budget(moves: tuple[Move, ...], left: Allowance) -> str:
    """Which budget a rescue needing `moves` overruns, in words: `budget: 1 move left this hour, the rescue needs 2`."""
    return _overrun(moves, left) or (
        f"budget: the rescue needs {len(moves)} moves and the budgets allow them only in another order"
    )


def _overrun(moves: tuple[Move, ...], left: Allowance) -> str:
    """Which budget `moves` overrun in all, off a node or in a namespace, in words; "" when none does."""
    need = len(moves)
    if need > left.moves:
        return f"budget: {_moves(left.moves)} left {left.binding()}, the rescue needs {need}"
    for node, count in Counter(move.from_node for move in moves).items():
        if count > left.for_node(node):
            return f"budget: {_moves(left.for_node(node))} left off node {node} this hour, the rescue needs {count}"
    for namespace, count in Counter(move.pod.split("/", 1)[0] for move in moves).items():
        if count > left.for_namespace(namespace):
            return (
                f"budget: {_moves(left.for_namespace(namespace))} left in namespace {namespace} this hour, "
                f"the rescue needs {count}"
            )
    return ""


def _moves(count: int) -> str:
    """`1 move`, `2 moves`."""
    return f"{count} move" + ("" if count == 1 else "s")


def scheduled_where(pod: Mapping[str, Any], node: Mapping[str, Any]) -> str:
    """Where a scheduled pod runs, in words: `node/gpu-0,gpu-1`, the cards HAMi allocated it by the node's register;
    the node alone when the allocation or the register does not read, or names another node or an unknown card."""
    name = str(as_mapping(pod.get("spec")).get("nodeName") or "")
    try:
        allocation = pod_allocation(pod)
        cards = node_cards(node)
    except ModelError:
        return name
    if allocation is None or allocation.node != name:
        return name
    names = {card.uuid: card.index for card in cards}
    uuids = dict.fromkeys(device.uuid for container in allocation.containers for device in container)
    if not uuids.keys() <= names.keys():
        return name
    return place(name, [f"gpu-{index}" for index in sorted(names[uuid] for uuid in uuids)])


def _words(moves: tuple[Move, ...], names: Mapping[str, str], dry_run: bool) -> str:
    """The moves in one line: `would move a/x from n/gpu-1 to m/gpu-0 (dry-run)`."""
    each = "; ".join(
        f"{move.pod} from {where(move.from_node, move.from_cards, names)} "
        f"to {where(move.to_node, move.to_cards, names)}"
        for move in moves
    )
    return f"would move {each} (dry-run)" if dry_run else f"moving {each}"
