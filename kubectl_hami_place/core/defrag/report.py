"""What `defrag status` reports, from plain data: who leads (the leader Lease), what the policy lets it do, the runs
and the budgets used."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from kubectl_hami_place.core.defrag.budget import HOUR, MoveRecord, card_names_read
from kubectl_hami_place.core.defrag.decisions import Decision, decisions_of
from kubectl_hami_place.core.defrag.policy import DefragPolicy, format_duration
from kubectl_hami_place.core.defrag.watches import forbidden_watches_of
from kubectl_hami_place.core.errors import MovesDocumentError, PlacementError
from kubectl_hami_place.core.names import DEFRAG_DECISIONS_ANNOTATION, DEFRAG_FORBIDDEN_WATCHES_ANNOTATION
from kubectl_hami_place.core.placement import parse_time, time_or_none
from kubectl_hami_place.core.planner.model import DO_NOT_MOVE
from kubectl_hami_place.core.reservation import MAX_CARDS

# The most moves a server's answer may carry: far more than any hour's budget keeps (moves leave with their
# placements), so a longer answer is a broken one.
MAX_MOVES_ANSWERED = 100_000


@dataclass(frozen=True)
class Leader:
    """The leader Lease's holder and until when its claim holds; `current` False once it lapsed. `forbidden`: the
    watches a current holder says the API server forbids it; `decisions`: the last ones the holder said, newest
    first (a lapsed holder's too: each says when)."""

    holder: str
    renewed: datetime | None
    expires: datetime | None
    current: bool
    forbidden: tuple[str, ...] = ()
    decisions: tuple[Decision, ...] = ()

    def describe(self) -> str:
        """The leader in words."""
        if not self.holder:
            return "none"
        if self.current:
            return self.holder
        lapsed = f" (lease lapsed at {self.expires.strftime('%H:%M:%S')} UTC)" if self.expires else " (lease lapsed)"
        return f"none; last {self.holder}{lapsed}"


def leader_of(lease: Mapping[str, Any] | None, now: datetime) -> Leader:
    """Who leads now according to the Lease (None: no replica ever led)."""
    found = (lease or {}).get("spec")
    spec: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    holder = str(spec.get("holderIdentity") or "")
    renewed = time_or_none(spec.get("renewTime")) or time_or_none(spec.get("acquireTime"))
    duration = spec.get("leaseDurationSeconds")
    expires = None
    if renewed is not None and isinstance(duration, int) and not isinstance(duration, bool):
        try:
            expires = renewed + timedelta(seconds=duration)
        except OverflowError:  # a Lease is anyone's to write: renewed in the year 9999, it holds past any date
            expires = (datetime.max if duration > 0 else datetime.min).replace(tzinfo=renewed.tzinfo)
    current = bool(holder) and expires is not None and expires > now
    metadata = (lease or {}).get("metadata")
    found = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    annotations: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    forbidden = forbidden_watches_of(annotations.get(DEFRAG_FORBIDDEN_WATCHES_ANNOTATION)) if current else ()
    decisions = decisions_of(annotations.get(DEFRAG_DECISIONS_ANNOTATION))
    return Leader(holder, renewed, expires, current, forbidden, decisions)


@dataclass(frozen=True)
class PolicySays:
    """What a policy, as the server reads it, lets the controller do, in words: an operator checks there what it
    rescues, which room it keeps and which pods it never moves, the defaults filled in."""

    rescue: str
    keep_room: str
    namespaces: str
    never_moves: tuple[str, ...]

    def lines(self) -> tuple[str, ...]:
        """Each part under its label, as `defrag status` shows them; the pods never moved one kind a line."""
        first, *rest = self.never_moves
        return (
            f"rescue:      {self.rescue}",
            f"keep room:   {self.keep_room}",
            f"namespaces:  {self.namespaces}",
            f"never moves: {first}",
            *(f"             {kind}" for kind in rest),
        )

    def to_data(self) -> dict[str, Any]:
        """The parts as JSON."""
        return {
            "rescue": self.rescue,
            "keepRoom": self.keep_room,
            "namespaces": self.namespaces,
            "neverMoves": list(self.never_moves),
        }


def policy_says(policy: DefragPolicy) -> PolicySays:
    """The policy's parts in words (see PolicySays)."""
    rescue = policy.rescue
    if rescue.enabled:
        kept = f"kept {format_duration(rescue.reserve_for)}" if rescue.reserve_for else "not kept (reserveFor: 0s)"
        rescues = f"pods Pending {format_duration(rescue.pending_for)} or more on HAMi's fit reasons; their room {kept}"
    else:
        rescues = "off (rescue.enabled: false)"
    room = policy.keep_room
    goals = []
    if room.whole_free_cards.count:
        of_type = f" {room.whole_free_cards.type}" if room.whole_free_cards.type else ""
        goals.append(f"at least {room.whole_free_cards.count} whole free{of_type} card(s)")
    if room.max_stranded_share is not None:
        goals.append(f"stranded memory at most {room.max_stranded_share * 100:g}% of free memory")
    if room.enabled:
        described = room.describe_window()
        hours = f" {described}" if described else ""
        keeps = f"every {format_duration(room.interval)}{hours}: " + ("; ".join(goals) or "no goal set")
    else:
        keeps = "off (keepRoom.enabled: false)"
    namespaces = policy.namespaces
    allowed = ", ".join(namespaces.include) or "none"
    if namespaces.exclude:
        allowed += f" but not {', '.join(namespaces.exclude)}"
    allowed += f"; never {', '.join(namespaces.always_out)} or the server's --exclude-namespace ones"
    never = [
        f"DaemonSet, static, system-critical or controller-less pods, pods annotated {DO_NOT_MOVE}",
        "for a rescue, pods of a higher priority than the pod it rescues",
    ]
    if policy.budgets.cooldown:
        never.append(f"a moved pod again within {format_duration(policy.budgets.cooldown)} (budgets.cooldown)")
    if not policy.move_job_pods:
        never.append("a Job's pods (moveJobPods: false)")
    if policy.priority_class:
        value = f" ({policy.priority_threshold})" if policy.priority_threshold is not None else ""
        never.append(f"pods of PriorityClass {policy.priority_class}'s priority{value} or more (priorityThreshold)")
    elif policy.priority_threshold is not None:
        never.append(f"pods of priority {policy.priority_threshold} or more (priorityThreshold)")
    if policy.label_selector is not None:
        never.append(f"pods the labelSelector does not select ({policy.label_selector})")
    if policy.ignore_pods_without_budget:
        never.append("pods no PodDisruptionBudget covers (ignorePodsWithoutPDB)")
    if not policy.evict_local_storage:
        never.append("pods with an emptyDir or hostPath volume (evictLocalStoragePods: false)")
    if policy.ignore_claim_pods:
        never.append("pods that mount a PersistentVolumeClaim (ignorePvcPods)")
    if policy.node_selector is not None:
        never.append(f"pods on, or onto, nodes the nodeSelector does not select ({policy.node_selector})")
    if policy.min_replicas > 1:
        never.append(f"pods whose controller has fewer than {policy.min_replicas} running pods (minReplicas)")
    if policy.min_pod_age:
        never.append(f"pods placed on their card less than {format_duration(policy.min_pod_age)} ago (minPodAge)")
    return PolicySays(rescues, keeps, allowed, tuple(never))


@dataclass(frozen=True)
class RunSummary:
    """One run's moves: when it began, how many, and their results (`Evicted: 2, Pending: 1`)."""

    run_id: str
    started: datetime
    moves: int
    results: Mapping[str, int]

    def describe_results(self) -> str:
        """The results in words."""
        return ", ".join(f"{result}: {count}" for result, count in sorted(self.results.items()))


def runs_of(history: Iterable[MoveRecord]) -> tuple[RunSummary, ...]:
    """The runs in the history, newest first."""
    by_run: dict[str, list[MoveRecord]] = {}
    for record in history:
        by_run.setdefault(record.run_id, []).append(record)
    runs = [
        RunSummary(
            run_id=run,
            started=min(record.time for record in records),
            moves=len(records),
            results=dict(Counter(record.result for record in records)),
        )
        for run, records in by_run.items()
    ]
    return tuple(sorted(runs, key=lambda run: (run.started, run.run_id), reverse=True))


@dataclass(frozen=True)
class Used:
    """Moves that count against the budgets in the last hour: in all, per node moved off, per namespace."""

    hour: int
    per_node: Mapping[str, int]
    per_namespace: Mapping[str, int]


def used_in_hour(history: Iterable[MoveRecord], now: datetime) -> Used:
    """The budgets used in the rolling hour ending now (as `budget.allowance` counts them)."""
    recent = [record for record in history if record.spent and now - HOUR < record.time <= now]
    return Used(
        hour=len(recent),
        per_node=dict(Counter(record.from_node for record in recent if record.from_node)),
        per_namespace=dict(Counter(record.namespace for record in recent)),
    )


def move_to_data(record: MoveRecord) -> dict[str, Any]:
    """A move as JSON: the server's answer and `defrag history -o json` alike."""
    return {
        "time": record.time.isoformat(),
        "run": record.run_id,
        "pod": record.pod,
        "namespace": record.namespace,
        "from": record.from_node or None,
        "fromCards": list(record.from_cards),
        "to": record.to_node or None,
        "toCards": list(record.to_cards),
        "result": record.result,
        "replacement": record.replacement or None,
        "placement": record.placement,
    }


def moves_document(history: Iterable[MoveRecord], *, seals_checked: bool) -> dict[str, Any]:
    """The controller's moves as the server answers them: with `sealsChecked`, only moves whose seal checked with
    the replicas' shared key; without (the server holds no shared key), every placement labelled with a run."""
    return {"sealsChecked": seals_checked, "moves": [move_to_data(record) for record in history]}


def moves_from_document(data: object) -> tuple[tuple[MoveRecord, ...], bool]:
    """The moves of a server's answer and whether their seals were checked; `MovesDocumentError` when it is not
    the answer `moves_document` makes."""
    if not isinstance(data, Mapping) or not isinstance(data.get("sealsChecked"), bool):
        raise MovesDocumentError("the answer is not an object with a boolean sealsChecked")
    moves = data.get("moves")
    if not isinstance(moves, list) or len(moves) > MAX_MOVES_ANSWERED:
        raise MovesDocumentError(f"moves must be a list of at most {MAX_MOVES_ANSWERED} moves")
    return tuple(_move_from_data(item, index) for index, item in enumerate(moves)), data["sealsChecked"]


def _move_from_data(item: object, index: int) -> MoveRecord:
    """One move of the answer (`move_to_data`'s form)."""
    where = f"moves[{index}]"
    if not isinstance(item, Mapping):
        raise MovesDocumentError(f"{where} is not an object")

    def text(key: str, required: bool = True) -> str:
        value = item.get(key)
        if value is None and not required:
            return ""
        if not isinstance(value, str) or (required and not value):
            raise MovesDocumentError(f"{where}.{key} must be a non-empty string")
        return value

    def cards(key: str) -> tuple[str, ...]:
        value = item.get(key, [])
        if not isinstance(value, list) or not card_names_read(value):
            raise MovesDocumentError(f"{where}.{key} must be a list of at most {MAX_CARDS} card names gpu-<index>")
        return tuple(value)

    try:
        moment = parse_time(item.get("time"), f"{where}.time")
    except PlacementError as error:
        raise MovesDocumentError(str(error)) from None
    return MoveRecord(
        run_id=text("run"),
        pod=text("pod"),
        namespace=text("namespace"),
        from_node=text("from", required=False),
        time=moment,
        result=text("result"),
        to_node=text("to", required=False),
        replacement=text("replacement", required=False),
        placement=text("placement", required=False),
        from_cards=cards("fromCards"),
        to_cards=cards("toCards"),
    )
