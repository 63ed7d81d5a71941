"""Budget accounting from the history of moves: how many moves a run may still make now, and which pods rest.

A move counts against the budgets once it may have evicted a pod: every result but `DryRun` (nothing done),
`Blocked` (a PodDisruptionBudget refused the eviction) and `NotEvicted` (its placement failed or expired before
any eviction). The hour is a rolling window ending now;
the run's own earlier moves (a run resumed after a leader change) count against `movesPerRun`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from kubectl_hami_place.core.defrag.policy import Budgets
from kubectl_hami_place.core.errors import ModelError
from kubectl_hami_place.core.names import DEFRAG_FROM_NODE_ANNOTATION, DEFRAG_POD_ANNOTATION, DEFRAG_RUN_LABEL, Phase
from kubectl_hami_place.core.placement import placement_from_object

HOUR = timedelta(hours=1)
NOT_SPENT = frozenset({"DryRun", "Blocked", "NotEvicted"})


@dataclass(frozen=True)
class MoveRecord:
    """One move a run made (or, in dry-run, would have made): the pod moved and, once known, its replacement.

    `pod` and `replacement` are `namespace/name` keys; `result` is the placement's eviction result (`Pending`,
    `Evicted`, `NotFound`, `Blocked`, `Failed`), `NotEvicted`, or `DryRun`; `placement` names the move's placement.
    """

    run_id: str
    pod: str
    namespace: str
    from_node: str
    time: datetime
    result: str = "Pending"
    to_node: str = ""
    replacement: str = ""
    placement: str = ""

    @property
    def spent(self) -> bool:
        """Whether the move counts against the budgets."""
        return self.result not in NOT_SPENT


@dataclass(frozen=True)
class Allowance:
    """The moves a run may still make now; `reason` says in words what binds when `moves` is 0."""

    moves: int
    run_left: int
    hour_left: int
    node_left: Mapping[str, int] = field(default_factory=dict)
    namespace_left: Mapping[str, int] = field(default_factory=dict)
    per_node: int = 0
    per_namespace: int = 0
    reason: str = ""

    def for_node(self, node: str) -> int:
        """Moves off this node still allowed this hour."""
        return self.node_left.get(node, self.per_node)

    def for_namespace(self, namespace: str) -> int:
        """Moves of this namespace's pods still allowed this hour."""
        return self.namespace_left.get(namespace, self.per_namespace)

    def binding(self) -> str:
        """Which of the run's and the hour's budgets binds, in words: `this run` or `this hour`."""
        return "this run" if self.run_left <= self.hour_left else "this hour"


def allowance(budgets: Budgets, history: Iterable[MoveRecord], now: datetime, run_id: str) -> Allowance:
    """What the budgets still allow a run `run_id` at `now`, given every move made so far."""
    spent = [record for record in history if record.spent]
    in_run = sum(1 for record in spent if record.run_id == run_id)
    recent = [record for record in spent if now - HOUR < record.time <= now]
    by_node = Counter(record.from_node for record in recent)
    by_namespace = Counter(record.namespace for record in recent)
    run_left = max(budgets.moves_per_run - in_run, 0)
    hour_left = max(budgets.moves_per_hour - len(recent), 0)
    moves = min(run_left, hour_left)
    reason = ""
    if run_left == 0:
        reason = f"budget: this run made {in_run} of its {budgets.moves_per_run} move(s) (budgets.movesPerRun)"
    elif hour_left == 0:
        oldest = min(record.time for record in recent) if recent else now
        reason = (
            f"budget: {len(recent)} of {budgets.moves_per_hour} move(s) made in the last hour (budgets.movesPerHour); "
            f"the next is allowed after {(oldest + HOUR).strftime('%H:%M:%S')} UTC"
        )
    return Allowance(
        moves=moves,
        run_left=run_left,
        hour_left=hour_left,
        node_left={node: max(budgets.moves_per_node - count, 0) for node, count in by_node.items()},
        namespace_left={ns: max(budgets.moves_per_namespace - count, 0) for ns, count in by_namespace.items()},
        per_node=budgets.moves_per_node,
        per_namespace=budgets.moves_per_namespace,
        reason=reason,
    )


def cooldowns(budgets: Budgets, history: Iterable[MoveRecord], now: datetime) -> dict[str, datetime]:
    """Every pod resting at `now` (a moved pod and its replacement) and until when.

    Dry-run moves never start a cooldown; a Blocked one does not either, since the pod stayed.
    """
    resting: dict[str, datetime] = {}
    for record in history:
        until = record.time + budgets.cooldown
        if not record.spent or until <= now:
            continue
        for pod in filter(None, (record.pod, record.replacement)):
            resting[pod] = max(until, resting.get(pod, until))
    return resting


def cooldown_until(budgets: Budgets, history: Iterable[MoveRecord], pod: str, now: datetime) -> datetime | None:
    """Until when the pod rests because it (or the pod it replaced) was moved within the cooldown; None: it may move."""
    return cooldowns(budgets, history, now).get(pod)


def cooldown_reason(until: datetime) -> str:
    """Why a pod resting until `until` may not move now."""
    return f"was moved recently; its cooldown (budgets.cooldown) ends at {until.strftime('%H:%M:%S')} UTC"


def history_from_placements(objects: Iterable[Mapping[str, Any]]) -> tuple[MoveRecord, ...]:
    """The moves of the placements the controller made (labelled with their run), newest first.

    A move's pod is the placement's `evictPod`, else its `defrag-pod` annotation (the controller evicts the pod
    itself, through the shared pin-then-evict, and then the placement is consumed by the replacement). A move's time
    is its placement's creation; its result the eviction's, else `Evicted` once consumed, `NotEvicted` once the
    placement failed or expired, else `Pending`. A placement that does not parse is left out.
    """
    records = []
    for obj in objects:
        metadata = _mapping(obj.get("metadata"))
        labels, annotations = _mapping(metadata.get("labels")), _mapping(metadata.get("annotations"))
        run = labels.get(DEFRAG_RUN_LABEL)
        if not run:
            continue
        try:
            placement = placement_from_object(obj)
        except ModelError:
            continue
        moved = placement.spec.evict_pod or str(annotations.get(DEFRAG_POD_ANNOTATION, "")).partition("/")[2]
        if placement.created is None or not moved:
            continue
        status = placement.status
        if status.eviction is not None:
            result = status.eviction.result.value
        elif status.phase is Phase.Consumed:
            result = "Evicted"
        elif status.phase in (Phase.Failed, Phase.Expired):
            result = "NotEvicted"
        else:
            result = "Pending"
        consumed = status.consumed_by_name
        records.append(
            MoveRecord(
                run_id=str(run),
                pod=f"{placement.namespace}/{moved}",
                namespace=placement.namespace,
                from_node=str(annotations.get(DEFRAG_FROM_NODE_ANNOTATION, "")),
                time=placement.created,
                result=result,
                to_node=placement.spec.node_name,
                replacement=f"{placement.namespace}/{consumed}" if consumed else "",
                placement=placement.name,
            )
        )
    return tuple(sorted(records, key=lambda record: (record.time, record.placement), reverse=True))


def _mapping(value: object) -> Mapping[str, Any]:
    """The value when it is a mapping, else an empty one."""
    return value if isinstance(value, Mapping) else {}
