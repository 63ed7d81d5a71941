"""Carrying a plan out move by move, shared by `apply -f PLAN` and `plan ... --apply`.

Each move: check the cluster still matches it (`core.planner.apply`), pin the pod's replacement to the target
cards (a placement, checked as `evict --to-node` checks it), evict the pod through the Eviction API with its UID as
precondition, and wait until the old pod is gone and HAMi allocated the replacement the target cards. The first
failure stops the run; the report says which moves were done, which failed and why. A re-run resumes: moves already
done are skipped, a move half done is waited for.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer

from kubectl_hami_place.cli._common import DryRun, confirm, note, stderr_console, warn
from kubectl_hami_place.cli._errors import EXIT_BLOCKED, EXIT_ERROR, EXIT_REFUSED, CliError, kube_hint, kube_line
from kubectl_hami_place.cli._pin_check import MANAGED_BY, refusal_lines
from kubectl_hami_place.cli.output import Block, Table, Text
from kubectl_hami_place.core.errors import ModelError
from kubectl_hami_place.kube.errors import (
    BlockedByDisruptionBudget,
    KubeError,
    NoReplacement,
    NotAcknowledged,
    PinRefused,
    PlacementTaken,
    PodGone,
    PodProtected,
    PodReplaced,
)
from kubectl_hami_place.kube.move_values import ACK_TIMEOUT_SECONDS, RolledBack

if TYPE_CHECKING:
    from kubectl_hami_place.core.hami_config import HamiConfig
    from kubectl_hami_place.core.planner import Move
    from kubectl_hami_place.core.planner.apply import MoveCheck, PlanFile
    from kubectl_hami_place.kube.client import Kube

POLL_SECONDS = 1.0
SEND_BACK_WAIT_SECONDS = 5.0  # without --wait-for-pod: the moves waited until their pods were gone, so about 1 s

TimeoutOption = Annotated[
    float,
    typer.Option(
        "--timeout",
        min=1,
        help="Seconds to wait for each move's replacement to hold its target cards, counted from the eviction, or "
        "from the end of the evicted pod's grace period while it stops (at most 600 s after the eviction).",
    ),
]
WaitPodOption = Annotated[
    bool,
    typer.Option(
        "--wait-for-pod",
        help="With a --for plan: after the last move, wait (up to --timeout) for the pod, sending it back to the "
        "scheduler (an annotation) once the evicted pods are gone.",
    ),
]


@dataclass(frozen=True)
class Outcome:
    """What became of one move in this run."""

    number: int
    move: Move
    status: str
    detail: str


@dataclass(frozen=True)
class ApplyReport:
    """The run: each move's outcome, the failure that stopped it (if any) with its exit code, and for a `--for` plan
    its pod."""

    goal: str
    dry_run: str
    outcomes: tuple[Outcome, ...]
    names: dict[str, str]
    failure: str = ""
    hint: str = ""
    exit_code: int = EXIT_ERROR
    pod: str = ""
    scheduled: bool | None = None
    pod_detail: str = ""

    def error(self) -> CliError:
        """The failure as the error the command exits with."""
        error = CliError(self.failure, self.hint)
        error.exit_code = self.exit_code
        return error

    def to_data(self) -> Any:
        """The run as JSON."""
        from kubectl_hami_place.core.planner.apply import placement_for

        data: dict[str, Any] = {
            "goal": self.goal,
            "dryRun": self.dry_run,
            "complete": not self.failure,
            "failure": self.failure or None,
            "moves": [
                {
                    "number": outcome.number,
                    **outcome.move.to_dict(),
                    "placement": placement_for(outcome.move),
                    "status": outcome.status,
                    "detail": outcome.detail,
                }
                for outcome in self.outcomes
            ],
        }
        if self.pod:
            data["pod"] = {"key": self.pod, "scheduled": self.scheduled, "detail": self.pod_detail}
        return data

    def to_blocks(self) -> list[Block]:
        """One row per move with its outcome, then what stopped the run or the pod's state."""
        from kubectl_hami_place.core.refs import where

        rows = tuple(
            (
                str(outcome.number),
                outcome.move.pod,
                where(outcome.move.from_node, outcome.move.from_cards, self.names),
                where(outcome.move.to_node, outcome.move.to_cards, self.names),
                outcome.status,
                outcome.detail,
            )
            for outcome in self.outcomes
        )
        suffix = "" if self.dry_run == DryRun.none else f" ({self.dry_run} dry run)"
        blocks: list[Block] = [
            Text((f"apply: {self.goal}{suffix}",), style="bold"),
            Table(columns=("#", "Pod", "From", "To", "Status", "Detail"), rows=rows, empty="  no moves"),
        ]
        if self.failure:
            blocks.append(Text((f"stopped: {self.failure}",), style="red"))
        if self.pod:
            blocks.append(Text((self.pod_detail,), style="green" if self.scheduled else "yellow"))
        return blocks


class Progress:
    """Progress on stderr: a spinner while waiting on a terminal, plain lines otherwise."""

    def __init__(self) -> None:
        self.console = stderr_console()

    def line(self, text: str) -> None:
        """One line of progress."""
        note(text)

    @contextmanager
    def waiting(self, text: str) -> Iterator[None]:
        """A spinner on a terminal, one line elsewhere."""
        if self.console.is_terminal:
            with self.console.status(text):
                yield
        else:
            note(text)
            yield


class _Stop(Exception):
    """A move failed: the run stops with this cause, hint and exit code."""

    def __init__(self, cause: str, hint: str = "", code: int = EXIT_ERROR) -> None:
        super().__init__(cause)
        self.cause, self.hint, self.code = cause, hint, code


def carry_out(
    kube: Kube,
    plan: PlanFile,
    *,
    dry_run: DryRun,
    timeout: float,
    wait_pod: bool,
    yes: bool,
    ack_timeout: float = ACK_TIMEOUT_SECONDS,
    hami_config: str = "",
    gpu_policy: str = "",
) -> ApplyReport:
    """Runs the plan (or checks it, under --dry-run) and reports; never raises for a failed move. Pods are read with
    HAMi's device config `hami_config` (NS/NAME, else found) and default GPU policy `gpu_policy` (else read)."""
    from kubectl_hami_place.core.planner.apply import Step, check_plan
    from kubectl_hami_place.kube.snapshot import read_snapshot

    read = read_snapshot(kube, hami_config, gpu_policy)
    for message in read.warnings:
        warn(message)
    names = read.snapshot.card_names()
    checks = check_plan(plan, read.snapshot, _placements(kube, plan))
    report = ApplyReport(goal=plan.goal, dry_run=dry_run.value, outcomes=(), names=names)
    if dry_run is not DryRun.none:
        return _dry_run(kube, plan, checks, report, server=dry_run is DryRun.server)
    first = next(((number, check) for number, (_, check) in enumerate(checks, 1) if check.step is not Step.done), None)
    if first is not None and first[1].step is Step.changed:
        return _changed(report, _outcomes(plan, checks, stop=first[0]), *first)
    todo = [move.pod for move, check in checks if check.step is not Step.done]
    todo += [move.pod for move in plan.moves[len(checks) :]]
    if todo and not confirm(f"carry out {len(todo)} move(s), evicting {', '.join(todo)}", yes):
        raise CliError("not confirmed", "nothing was changed")
    progress = Progress()
    outcomes: list[Outcome] = []
    for number, move in enumerate(plan.moves, start=1):
        was_done = number <= len(checks) and checks[number - 1][1].step is Step.done
        try:
            label = f"move {number}/{len(plan.moves)}: {move.pod}"
            detail = _one_move(
                kube,
                move,
                config=read.config,
                label=label,
                timeout=timeout,
                ack_timeout=ack_timeout,
                progress=progress,
            )
        except _Stop as stop:
            outcomes.append(Outcome(number, move, "failed", stop.cause))
            outcomes += [Outcome(n, m, "not run", "") for n, m in enumerate(plan.moves[number:], start=number + 1)]
            return _stopped(report, outcomes, number, move, stop)
        outcomes.append(Outcome(number, move, "already done" if was_done else "done", detail))
    report = replace(report, outcomes=tuple(outcomes))
    return _target_pod(
        kube,
        plan,
        report,
        wait_pod=wait_pod,
        timeout=timeout,
        progress=progress,
    )


_CHANGED_HINT = "the cluster no longer matches the plan: make a new one (kubectl hami-place plan)"


def _changed(report: ApplyReport, outcomes: Sequence[Outcome], number: int, check: MoveCheck) -> ApplyReport:
    """The report of a run stopped before move `number`, which the cluster no longer matches."""
    return replace(
        report,
        outcomes=tuple(outcomes),
        failure=f"move {number}: {check.detail}",
        hint=_CHANGED_HINT,
        exit_code=EXIT_ERROR,
    )


def _stopped(report: ApplyReport, outcomes: Sequence[Outcome], number: int, move: Move, stop: _Stop) -> ApplyReport:
    """The report of a run stopped by move `number`'s failure."""
    return replace(
        report,
        outcomes=tuple(outcomes),
        failure=f"move {number} ({move.pod}): {stop.cause}",
        hint=stop.hint,
        exit_code=stop.code,
    )


def _one_move(
    kube: Kube,
    move: Move,
    *,
    config: HamiConfig,
    label: str,
    timeout: float,
    ack_timeout: float,
    progress: Progress,
) -> str:
    """Makes one move (or finds it made) and waits until it settled; `_Stop` when it cannot."""
    from kubectl_hami_place.core.planner.apply import Step

    check = _current(kube, move)
    if check.step is Step.done:
        progress.line(f"{label}: already done ({check.detail})")
        return check.detail
    if check.step is Step.changed:
        raise _Stop(check.detail, _CHANGED_HINT)
    if check.step is Step.ready:
        progress.line(f"{label}: pinning its replacement to {move.to_node} and evicting it")
        _make(kube, config, move, ack_timeout)
    from kubectl_hami_place.core.defrag.keys import SettleClock
    from kubectl_hami_place.kube.moves import termination_wait

    clock = SettleClock(time.monotonic(), timeout)
    with progress.waiting(f"{label}: waiting for its replacement on {move.to_node}"):
        while True:
            check = _current(kube, move)
            if check.step is Step.done:
                progress.line(f"{label}: done ({check.detail})")
                return check.detail
            if check.step is Step.changed:
                raise _Stop(check.detail, _CHANGED_HINT)
            now = time.monotonic()
            # Counted from the end of the evicted pod's grace period (a StatefulSet makes the replacement only once
            # the pod is gone, and HAMi counts its cards until then), within a bound, as the controller does.
            clock.saw(now, termination_wait(kube, move))
            if now > clock.deadline:
                raise _Stop(
                    f"not settled within {timeout:g} s: {check.detail}{_placement_state(kube, move)}",
                    "re-run the same apply to resume once the replacement runs, or raise --timeout",
                )
            time.sleep(POLL_SECONDS)


def _make(kube: Kube, config: HamiConfig, move: Move, ack_timeout: float) -> None:
    """Pins the replacement, waits for the webhook to acknowledge the pin, and evicts the pod (`kube.moves`); the
    placement is deleted again when either fails."""
    from kubectl_hami_place.core.placement import pin_differs
    from kubectl_hami_place.kube import moves

    try:
        pod = moves.get_moved_pod(kube, move)
        checked = moves.check_move(kube, move, pod, config=config, labels=MANAGED_BY)
        for message in checked.warnings:
            warn(message)
        moves.pin_then_evict(
            kube,
            checked,
            pod,
            ack_timeout=ack_timeout,
            reuse=lambda stored: pin_differs(stored, checked.obj),
            rolled_back=_rolled_back,
        )
    except KubeError as exc:
        raise _stop(exc) from exc
    except ModelError as exc:
        raise _Stop(str(exc), _REPLAN_HINT, EXIT_REFUSED) from exc


_REPLAN_HINT = "make a new plan (kubectl hami-place plan)"


def _stop(exc: KubeError) -> _Stop:
    """A move's failure in the CLI's words and exit code."""
    if isinstance(exc, PodGone | PodReplaced | PodProtected):
        return _Stop(exc.cause, _CHANGED_HINT)
    if isinstance(exc, PinRefused):
        return _Stop("; ".join(refusal_lines(exc)), _REPLAN_HINT, EXIT_REFUSED)
    if isinstance(exc, NoReplacement):
        return _Stop(kube_line(exc), _REPLAN_HINT, EXIT_REFUSED)
    if isinstance(exc, BlockedByDisruptionBudget):
        return _Stop(exc.cause, kube_hint(exc), EXIT_BLOCKED)
    if isinstance(exc, NotAcknowledged | PlacementTaken):
        return _Stop(exc.cause, kube_hint(exc))
    return _Stop(kube_line(exc))


def _rolled_back(done: RolledBack) -> None:
    """Warns when the placement of a move that was not made could not be deleted again."""
    if done.error is not None:
        warn(f"could not delete placement {done.name} after the pod was not evicted: {done.error}")


def _current(kube: Kube, move: Move) -> MoveCheck:
    """The move's step in the cluster as it is now."""
    from kubectl_hami_place.kube import moves

    return moves.move_state(kube, move)


def _placement_state(kube: Kube, move: Move) -> str:
    """`; placement P is <phase>: <message>` for a timeout report, or nothing when unreadable."""
    from kubectl_hami_place.core.planner.apply import placement_for
    from kubectl_hami_place.kube import placements

    namespace = move.pod.split("/", 1)[0]
    try:
        status = placements.get_placement(kube, namespace, placement_for(move)).get("status") or {}
    except KubeError:
        return ""
    phase = status.get("phase") or "Pending (not claimed by any pod yet)"
    message = f": {status['message']}" if status.get("message") else ""
    return f"; placement {placement_for(move)} is {phase}{message}"


def _target_pod(
    kube: Kube,
    plan: PlanFile,
    report: ApplyReport,
    *,
    wait_pod: bool,
    timeout: float,
    progress: Progress,
) -> ApplyReport:
    """For a `--for` plan: whether its pod now holds cards. Once every moved pod has been gone a moment, a pod still
    Pending is sent back to kube-scheduler (`_send_back`): without `wait_pod` once, within SEND_BACK_WAIT_SECONDS;
    with it again while it waits up to `timeout` (`send_back_again_after`). Each look reads that pod and the moved
    pods not yet seen gone, by name, where it listed the whole cluster every second."""
    from kubectl_hami_place.core.defrag.keys import room_settled, send_back_again_after
    from kubectl_hami_place.core.planner.apply import target_pod_state
    from kubectl_hami_place.kube import moves

    if not plan.pod:
        return report
    namespace, name = plan.pod.split("/", 1)
    deadline = time.monotonic() + (timeout if wait_pod else SEND_BACK_WAIT_SECONDS)
    gone_since: float | None = None
    sends, send_at, given_up = 0, 0.0, False
    gone: set[str] = set()
    with progress.waiting(f"waiting for HAMi to schedule {plan.pod}") if wait_pod else _nothing():
        while True:
            pod = moves.pod_or_none(kube, namespace, name)
            scheduled, detail = target_pod_state(plan, pod, _card_names(kube, plan, pod))
            if scheduled or time.monotonic() > deadline or (not wait_pod and (pod is None or sends)):
                break
            now = time.monotonic()
            if pod is not None and not given_up:
                gone_since, made = room_settled(
                    plan.moves, _moved_uids(functools.partial(moves.pod_or_none, kube), plan, gone), gone_since, now
                )
                if made and now >= send_at:
                    uid = str((pod.get("metadata") or {}).get("uid") or "")
                    given_up = not _send_back(kube, plan.pod, uid, progress, again=sends > 0)
                    sends += 1
                    send_at = now + send_back_again_after(sends)
            time.sleep(POLL_SECONDS)
    report = replace(report, pod=plan.pod, scheduled=scheduled, pod_detail=detail)
    if wait_pod and not scheduled:
        return replace(
            report,
            failure=f"{detail} within {timeout:g} s",
            hint=f"see why with kubectl hami-place why {name} -n {namespace}",
            exit_code=EXIT_ERROR,
        )
    return report


def _card_names(kube: Kube, plan: PlanFile, pod: Mapping[str, Any] | None) -> dict[str, str]:
    """Card names by UUID, of the nodes the words of where the `--for` pod runs name: its node (once HAMi placed it)
    and the plan's target; a node that cannot be read names its cards by UUID."""
    from kubectl_hami_place.core.allocations import NODE_ANNOTATION
    from kubectl_hami_place.core.cards import node_cards
    from kubectl_hami_place.kube.cluster_reads import get_node

    annotations = ((pod or {}).get("metadata") or {}).get("annotations") or {}
    placed = annotations.get(NODE_ANNOTATION) if isinstance(annotations, Mapping) else None
    if not isinstance(placed, str) or not placed:
        return {}
    names: dict[str, str] = {}
    for node in dict.fromkeys((placed, *((plan.target[0],) if plan.target is not None else ()))):
        try:
            names.update((card.uuid, card.name) for card in node_cards(get_node(kube, node)))
        except (KubeError, ModelError):
            continue
    return names


def _moved_uids(
    stored: Callable[[str, str], Mapping[str, Any] | None], plan: PlanFile, gone: set[str]
) -> dict[str, str]:
    """The UID `stored` under each moved pod's name now ("" when none), by `namespace/name`; a moved pod once seen
    gone (`gone`, kept across looks) is not read again, as no pod comes back under its UID."""
    uids = {}
    for move in plan.moves:
        if move.pod in gone:
            continue
        namespace, name = move.pod.split("/", 1)
        pod = stored(namespace, name)
        uids[move.pod] = str(((pod or {}).get("metadata") or {}).get("uid") or "")
        if uids[move.pod] != move.uid:
            gone.add(move.pod)
    return uids


def _send_back(kube: Kube, key: str, uid: str, progress: Progress, *, again: bool) -> bool:
    """Annotates the plan's Pending pod with this apply (`kube.defrag.send_back`): kube-scheduler before
    kubernetes#122019's fix (1.29) may not try it again for 5 minutes after the evictions that made its room. False
    when the write failed (a warning says why, and it is not tried again)."""
    from kubectl_hami_place.kube.defrag import send_back

    namespace, name = key.split("/", 1)
    try:
        sent = send_back(
            kube, namespace, name, uid, f"kubectl hami-place apply at {datetime.now(UTC):%Y-%m-%dT%H:%M:%SZ}"
        )
    except KubeError as error:
        warn(f"{key} was not sent back to the scheduler, which may take up to 5 minutes to try it: {kube_line(error)}")
        return False
    if sent is not None:
        progress.line(
            f"{key} still not scheduled: sent back to the scheduler again"
            if again
            else f"the evicted pods are gone: {key} sent back to the scheduler"
        )
    return True


@contextmanager
def _nothing() -> Iterator[None]:
    """No progress to show."""
    yield


def _dry_run(
    kube: Kube,
    plan: PlanFile,
    checks: tuple[tuple[Move, MoveCheck], ...],
    report: ApplyReport,
    *,
    server: bool,
) -> ApplyReport:
    """Each move checked on the cards as the moves before it would leave them; with `server`, the API server
    also runs each eviction and placement creation without persisting them."""
    from kubectl_hami_place.core.planner.apply import Step

    outcomes = list(_outcomes(plan, checks, stop=len(checks) + 1))
    failure = next(((number, c) for number, (_, c) in enumerate(checks, 1) if c.step is Step.changed), None)
    if failure is not None:
        return _changed(report, outcomes, *failure)
    if server:
        for position, (move, check) in enumerate(checks):
            if check.step is not Step.ready:
                continue
            try:
                _server_dry_run(kube, move)
            except _Stop as stop:
                outcomes[position] = Outcome(position + 1, move, "failed", stop.cause)
                return _stopped(report, outcomes, position + 1, move, stop)
    return replace(report, outcomes=tuple(outcomes))


def _server_dry_run(kube: Kube, move: Move) -> None:
    """The API server checks the eviction and the placement without persisting either."""
    from kubectl_hami_place.kube import moves

    try:
        moves.dry_run_move(kube, move, MANAGED_BY)
    except KubeError as exc:
        raise _stop(exc) from exc
    except ModelError as exc:
        raise _Stop(str(exc), _REPLAN_HINT, EXIT_REFUSED) from exc


def _outcomes(plan: PlanFile, checks: tuple[tuple[Move, MoveCheck], ...], stop: int) -> tuple[Outcome, ...]:
    """Each move's outcome from its check, up to move `stop`; the moves after it are not run."""
    from kubectl_hami_place.core.planner.apply import Step

    words = {Step.ready: "ready", Step.done: "already done", Step.waiting: "in progress", Step.changed: "failed"}
    outcomes = [
        Outcome(number, move, words[check.step], check.detail)
        for number, (move, check) in enumerate(checks, 1)
        if number <= stop
    ]
    outcomes += [Outcome(n, m, "not run", "") for n, m in enumerate(plan.moves, 1) if n > len(outcomes)]
    return tuple(outcomes)


def _placements(kube: Kube, plan: PlanFile) -> set[str]:
    """`namespace/name` of the placements in the namespaces the plan moves pods in."""
    from kubectl_hami_place.kube import moves

    found: set[str] = set()
    for namespace in sorted({move.pod.split("/", 1)[0] for move in plan.moves}):
        found |= moves.placement_names(kube, namespace)
    return found
