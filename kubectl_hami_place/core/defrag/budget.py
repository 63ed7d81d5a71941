"""Budget accounting from the history of moves: how many moves a run may still make now, and which pods rest.

A move counts against the budgets once it may have evicted a pod: every result but `DryRun` (nothing done),
`Blocked` (a PodDisruptionBudget refused the eviction) and `NotEvicted` (its placement failed or expired before
any eviction). The hour is a rolling window ending now;
the run's own earlier moves (a run resumed after a leader change) count against `movesPerRun`.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from kubectl_hami_place.core.defrag.policy import Budgets, format_duration
from kubectl_hami_place.core.defrag.seal import move_sealed
from kubectl_hami_place.core.errors import ModelError
from kubectl_hami_place.core.fields import as_mapping
from kubectl_hami_place.core.k8s_names import is_namespaced_name
from kubectl_hami_place.core.names import (
    DEFRAG_FROM_CARDS_ANNOTATION,
    DEFRAG_FROM_NODE_ANNOTATION,
    DEFRAG_POD_ANNOTATION,
    DEFRAG_RUN_LABEL,
    DEFRAG_TO_CARDS_ANNOTATION,
    Phase,
)
from kubectl_hami_place.core.placement import Placement, placement_from_object
from kubectl_hami_place.core.refs import place
from kubectl_hami_place.core.reservation import MAX_CARDS, RoomKey
from kubectl_hami_place.core.selectors import LabelSelector, matches

HOUR = timedelta(hours=1)
NOT_SPENT = frozenset({"DryRun", "Blocked", "NotEvicted"})
_CARD_NAME = re.compile(r"gpu-(0|[1-9][0-9]{0,5})")


@dataclass(frozen=True)
class MoveRecord:
    """One move a run made (or, in dry-run, would have made): the pod moved and, once known, its replacement.

    `pod` and `replacement` are `namespace/name` keys; `result` is the placement's eviction result (`Pending`,
    `Evicted`, `NotFound`, `Blocked`, `Failed`), `NotEvicted`, or `DryRun`; `placement` names the move's placement
    and `workload` its pod selector, which matches the pods the moved pod's controller makes. `from_cards` and
    `to_cards` name the cards by register index (`gpu-1`); () when the placement does not say (made before they were
    written).
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
    workload: LabelSelector | None = None
    from_cards: tuple[str, ...] = ()
    to_cards: tuple[str, ...] = ()

    @property
    def source(self) -> str:
        """Where the pod was, as the tables show it: `gpu-a100-0/gpu-1,gpu-2`, the node alone, or `-`."""
        return place(self.from_node, self.from_cards)

    @property
    def target(self) -> str:
        """Where its replacement is pinned, as `source` says it."""
        return place(self.to_node, self.to_cards)

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
    # No upper bound: a move stamped by an API server whose clock runs ahead of this one's was still made.
    recent = [record for record in spent if now - HOUR < record.time]
    by_node = Counter(record.from_node for record in recent)
    by_namespace = Counter(record.namespace for record in recent)
    run_left = max(budgets.moves_per_run - in_run, 0)
    hour_left = max(budgets.moves_per_hour - len(recent), 0)
    moves = min(run_left, hour_left)
    reason = ""
    if budgets.moves_per_run == 0 or budgets.moves_per_hour == 0:
        field = "movesPerRun" if budgets.moves_per_run == 0 else "movesPerHour"
        reason = f"budget: budgets.{field} is 0, so no pod is moved; raise it to let the controller move pods"
    elif run_left == 0:
        reason = f"budget: this run made {in_run} of its {budgets.moves_per_run} move(s) (budgets.movesPerRun)"
    elif hour_left == 0:
        # The next move is allowed once enough of the hour's moves have left it to bring them under the budget (a
        # budget lowered below the moves already made waits for more than the oldest).
        freed = sorted(record.time for record in recent)[len(recent) - budgets.moves_per_hour]
        reason = (
            f"budget: {len(recent)} of {budgets.moves_per_hour} move(s) made in the last hour (budgets.movesPerHour); "
            f"the next is allowed after {(freed + HOUR).strftime('%H:%M:%S')} UTC"
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


def history_shortfall(budgets: Budgets, kept: timedelta | None) -> str:
    """Which budget cannot hold as written when the server deletes a finished move's placement after `kept` (None:
    never), since the budgets count the moves from those placements; "" when all hold."""
    if kept is None or kept >= max(budgets.cooldown, HOUR):
        return ""
    short = []
    if kept < HOUR:
        short.append(f"budgets.movesPerHour counts only the moves of the last {format_duration(kept)}")
    if kept < budgets.cooldown:
        short.append(f"a moved pod's budgets.cooldown ({format_duration(budgets.cooldown)}) ends after that")
    needed = max(budgets.cooldown, HOUR)
    return (
        f"finished placements are deleted after {format_duration(kept)} (--finished-ttl), so {' and '.join(short)}; "
        f"set the server's finishedTTL to {int(needed.total_seconds())} ({format_duration(needed)}) or more, or 0 "
        "to keep them"
    )


def _cooling(budgets: Budgets, history: Iterable[MoveRecord], now: datetime) -> Iterator[tuple[MoveRecord, datetime]]:
    """The moves whose cooldown still runs at `now`, each with when it ends. Dry-run moves never start a cooldown; a
    Blocked one does not either, since the pod stayed."""
    for record in history:
        until = record.time + budgets.cooldown
        if record.spent and until > now:
            yield record, until


def cooldowns(budgets: Budgets, history: Iterable[MoveRecord], now: datetime) -> dict[str, datetime]:
    """Every pod resting at `now` (a moved pod and its replacement) and until when."""
    resting: dict[str, datetime] = {}
    for record, until in _cooling(budgets, history, now):
        for pod in filter(None, (record.pod, record.replacement)):
            resting[pod] = max(until, resting.get(pod, until))
    return resting


@dataclass(frozen=True)
class WorkloadRest:
    """A moved pod's workload at rest: the pods of `namespace` its move's selector matches that were created after
    the move (`since`) rest until `until`."""

    namespace: str
    workload: LabelSelector
    since: datetime
    until: datetime


def workload_rests(budgets: Budgets, history: Iterable[MoveRecord], now: datetime) -> tuple[WorkloadRest, ...]:
    """The workloads resting at `now`: a pod its controller made after a move within the cooldown rests with the
    moved pod, whatever its name. That covers the pod made for a given-up move's replacement once it is evicted, which
    no move names, so a workload is not moved again within its cooldown through a pod the move left it to make."""
    return tuple(
        WorkloadRest(record.namespace, record.workload, record.time, until)
        for record, until in _cooling(budgets, history, now)
        if record.workload is not None and not record.workload.empty
    )


def workload_rest_until(
    rests: Iterable[WorkloadRest], namespace: str, labels: Mapping[str, str], created: datetime | None
) -> datetime | None:
    """Until when a pod of `namespace` with `labels`, created at `created`, rests with its workload; None: it does
    not (a pod whose creation is unknown is taken as older than every move). Creation times are whole seconds, so a
    pod made in the move's second rests too: the moved pod itself rests by name anyway."""
    if created is None:
        return None
    ends = [
        rest.until
        for rest in rests
        if rest.namespace == namespace and created >= rest.since and matches(rest.workload, labels)
    ]
    return max(ends, default=None)


def workload_cooldown_reason(until: datetime) -> str:
    """Why a pod its workload made after a recent move may not move now."""
    return (
        "was made by a workload one of whose pods was moved recently; the cooldown (budgets.cooldown) ends at "
        f"{until.strftime('%H:%M:%S')} UTC"
    )


def card_names_value(names: Iterable[str]) -> str:
    """A move's cards as its placement's annotation holds them: `gpu-1,gpu-2`."""
    return ",".join(names)


def card_names_of(value: object) -> tuple[str, ...]:
    """The cards a move's annotation names, as `card_names_value` writes them (1 to MAX_CARDS names `gpu-N`); () for
    any other value, so that a name the controller did not write never reaches a table."""
    if not isinstance(value, str):
        return ()
    names = tuple(value.split(","))
    return names if card_names_read(names) else ()


def card_names_read(names: Sequence[object]) -> bool:
    """Whether `names` are at most MAX_CARDS card names `gpu-N`, as a move's cards are written."""
    return len(names) <= MAX_CARDS and all(isinstance(name, str) and _CARD_NAME.fullmatch(name) for name in names)


def cooldown_reason(until: datetime) -> str:
    """Why a pod resting until `until` may not move now."""
    return f"was moved recently; its cooldown (budgets.cooldown) ends at {until.strftime('%H:%M:%S')} UTC"


def history_from_placements(objects: Iterable[Mapping[str, Any]], key: RoomKey | None = None) -> tuple[MoveRecord, ...]:
    """The moves of the placements the controller made (labelled with their run and, with `key`, sealed by it:
    `core.defrag.seal`), newest first.

    A move's time is its placement's creation and its pod the one its annotation names (the controller pins the
    replacement, then evicts the pod itself), else the placement's `evictPod`. Its result is the eviction's when the
    webhook evicted; a controller's move whose placement was consumed evicted its pod (`Evicted`), one whose
    placement failed or expired did too (`Failed`: the controller deletes the placement of a move it could not
    evict); an `evictPod` placement that ended unclaimed evicted nothing (`NotEvicted`); else `Pending`. A placement
    that does not parse, or whose pod annotation names no pod of its own namespace, is left out.
    """
    records = []
    for obj in objects:
        metadata = as_mapping(obj.get("metadata"))
        labels, annotations = as_mapping(metadata.get("labels")), as_mapping(metadata.get("annotations"))
        run = labels.get(DEFRAG_RUN_LABEL)
        if not run or not move_sealed(obj, key):
            continue
        try:
            placement = placement_from_object(obj)
        except ModelError:
            continue
        named = str(annotations.get(DEFRAG_POD_ANNOTATION, ""))
        if named and not names_own_pod(named, placement.namespace):
            continue
        pod = named or (f"{placement.namespace}/{placement.spec.evict_pod}" if placement.spec.evict_pod else "")
        if placement.created is None or not pod:
            continue
        records.append(
            MoveRecord(
                run_id=str(run),
                pod=pod,
                namespace=pod.split("/", 1)[0],
                from_node=str(annotations.get(DEFRAG_FROM_NODE_ANNOTATION, "")),
                time=placement.created,
                result=_result(placement, evicted_by_controller=bool(named)),
                to_node=placement.spec.node_name,
                replacement=(
                    f"{placement.namespace}/{placement.status.consumed_by_name}"
                    if placement.status.consumed_by_name
                    else ""
                ),
                placement=placement.name,
                workload=placement.spec.pod_selector,
                from_cards=card_names_of(annotations.get(DEFRAG_FROM_CARDS_ANNOTATION)),
                to_cards=card_names_of(annotations.get(DEFRAG_TO_CARDS_ANNOTATION)),
            )
        )
    return tuple(sorted(records, key=lambda record: (record.time, record.placement), reverse=True))


def names_own_pod(named: str, namespace: object) -> bool:
    """Whether a move's pod annotation names a pod of the placement's own namespace, as the controller writes it: a
    placement that names another namespace's pod was not a move, and spends no budget or cooldown there."""
    pod_namespace, _, name = named.partition("/")
    return pod_namespace == namespace and is_namespaced_name(pod_namespace, name)


def _result(placement: Placement, *, evicted_by_controller: bool) -> str:
    """A move's result as its placement tells it (see history_from_placements)."""
    status = placement.status
    if status.eviction is not None:
        return status.eviction.result.value
    if status.phase is Phase.Consumed and evicted_by_controller:
        return "Evicted"
    if status.phase in (Phase.Failed, Phase.Expired):
        return "Failed" if evicted_by_controller else "NotEvicted"
    return "Pending"
