"""The run of `apply -f` and `plan --apply` as plain data: its report (-o json|yaml and the table), the exit code and
words of each failure, and what a dry run reports. The moves themselves need a cluster (tests/cluster)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, cast

import pytest
from test_cli_pin_report import verdict

from kubectl_hami_place.cli._errors import EXIT_BLOCKED, EXIT_ERROR, EXIT_REFUSED
from kubectl_hami_place.cli._moves_runner import (
    _CHANGED_HINT,
    _REPLAN_HINT,
    ApplyReport,
    Outcome,
    _changed,
    _dry_run,
    _moved_uids,
    _outcomes,
    _rolled_back,
    _stop,
    _stopped,
)
from kubectl_hami_place.cli._pin_check import refusal_lines
from kubectl_hami_place.cli.output import Table, Text
from kubectl_hami_place.core.planner import Move
from kubectl_hami_place.core.planner.apply import MoveCheck, PlanFile, Step, placement_for
from kubectl_hami_place.kube.errors import (
    BlockedByDisruptionBudget,
    KubeError,
    KubeForbidden,
    NoReplacement,
    NotAcknowledged,
    PinRefused,
    PlacementTaken,
    PodGone,
    PodProtected,
    PodReplaced,
)
from kubectl_hami_place.kube.move_values import RolledBack, Stage

if TYPE_CHECKING:
    from kubectl_hami_place.kube.client import Kube

NAMES = {"GPU-a0": "gpu-0", "GPU-b0": "gpu-0"}
FIRST = Move("ns/small", "u1", "a", ("GPU-a0",), "b", ("GPU-b0",), "frees a/gpu-0")
SECOND = Move("ns/other", "u2", "a", ("GPU-a1", "GPU-a0"), "b", ("GPU-b0",), "packs b")
THIRD = Move("ns/last", "u3", "c", ("GPU-c0",), "b", ("GPU-b0",), "packs b")
PLAN = PlanFile("fit ns/big", (FIRST, SECOND, THIRD), pod="ns/big")
REPORT = ApplyReport(goal="fit ns/big", dry_run="none", outcomes=(), names=NAMES)
COLUMNS = ("#", "Pod", "From", "To", "Status", "Detail")


def test_a_finished_run_reports_each_move_and_the_pods_state() -> None:
    """-o json is what a program reads to resume or audit a run: each move with its placement, and the pod's fate."""
    report = ApplyReport(
        "fit ns/big", "none", (Outcome(1, FIRST, "done", "on b"),), NAMES, pod="ns/big", scheduled=True, pod_detail="ok"
    )
    assert report.to_data() == {
        "goal": "fit ns/big",
        "dryRun": "none",
        "complete": True,
        "failure": None,
        "moves": [
            {"number": 1, **FIRST.to_dict(), "placement": placement_for(FIRST), "status": "done", "detail": "on b"}
        ],
        "pod": {"key": "ns/big", "scheduled": True, "detail": "ok"},
    }
    assert report.to_blocks() == [
        Text(("apply: fit ns/big",), style="bold"),
        Table(columns=COLUMNS, rows=(("1", "ns/small", "a/gpu-0", "b/gpu-0", "done", "on b"),), empty="  no moves"),
        Text(("ok",), style="green"),
    ]


def test_a_stopped_run_says_what_stopped_it_and_exits_with_its_code() -> None:
    """The failure line and the exit code are what a script acts on (3 refused, 4 blocked by a budget)."""
    outcomes = (Outcome(1, FIRST, "failed", "blocked"), Outcome(2, SECOND, "not run", ""))
    stop = _stop(BlockedByDisruptionBudget("ns", "small", ("pdb",), "the budget allows no disruption"))
    report = _stopped(replace(REPORT, dry_run="server"), outcomes, 1, FIRST, stop)
    assert {key: report.to_data()[key] for key in ("dryRun", "complete", "failure")} == {
        "dryRun": "server",
        "complete": False,
        "failure": "move 1 (ns/small): the budget allows no disruption",
    }
    assert report.to_blocks() == [
        Text(("apply: fit ns/big (server dry run)",), style="bold"),
        Table(
            columns=COLUMNS,
            rows=(
                ("1", "ns/small", "a/gpu-0", "b/gpu-0", "failed", "blocked"),
                ("2", "ns/other", "a/GPU-a1,gpu-0", "b/gpu-0", "not run", ""),
            ),
            empty="  no moves",
        ),
        Text(("stopped: move 1 (ns/small): the budget allows no disruption",), style="red"),
    ]
    error = report.error()
    assert (error.lines(), error.exit_code) == (
        [
            "move 1 (ns/small): the budget allows no disruption; retry once more replicas are ready, or relax the "
            "budget (kubectl get pdb -n ns)"
        ],
        EXIT_BLOCKED,
    )
    pending = ApplyReport("fit ns/big", "none", (), NAMES, pod="ns/big", scheduled=False, pod_detail="still Pending")
    assert pending.to_blocks()[2:] == [Text(("still Pending",), style="yellow")]


def test_each_failure_of_a_move_has_its_words_hint_and_exit_code() -> None:
    """A refused pin or a pod nothing recreates needs a new plan (exit 3); a budget is waited out (exit 4); a pod gone
    means the cluster moved on; an unacknowledged pin or a taken placement is retried (exit 1)."""
    refused = PinRefused(verdict("gpu-2", "gpu-1", memory=30000), "flags", None)
    errors: list[tuple[KubeError, tuple[str, str, int]]] = [
        (PodGone("pod ns/small is gone"), ("pod ns/small is gone", _CHANGED_HINT, EXIT_ERROR)),
        (PodReplaced("pod ns/small is re-created"), ("pod ns/small is re-created", _CHANGED_HINT, EXIT_ERROR)),
        (PodProtected("pod ns/small is annotated"), ("pod ns/small is annotated", _CHANGED_HINT, EXIT_ERROR)),
        (refused, ("; ".join(refusal_lines(refused)), _REPLAN_HINT, EXIT_REFUSED)),
        (
            NoReplacement("nothing recreates ns/small"),
            (
                "nothing recreates ns/small; use kubectl hami-place pin -l for the pod you will create",
                _REPLAN_HINT,
                EXIT_REFUSED,
            ),
        ),
        (
            BlockedByDisruptionBudget("ns", "small", (), "no disruption allowed"),
            ("no disruption allowed", "retry once more replicas are ready, or relax the budget", EXIT_BLOCKED),
        ),
        (
            NotAcknowledged("no acknowledgement in 10 s"),
            (
                "no acknowledgement in 10 s",
                "check that it runs (kubectl get pods -A -l app.kubernetes.io/name=gpu-descheduler-webhook), "
                "then retry",
                EXIT_ERROR,
            ),
        ),
        (
            PlacementTaken("placement p is taken"),
            (
                "placement p is taken",
                "read it (kubectl hami-place list); delete it if no one needs it (kubectl hami-place delete), re-run",
                EXIT_ERROR,
            ),
        ),
        (
            KubeForbidden("cannot evict", status=403, action="create pods/eviction"),
            ("cannot evict; ask your cluster admin for RBAC permission to create pods/eviction", "", EXIT_ERROR),
        ),
    ]
    for error, expected in errors:
        stop = _stop(error)
        assert (stop.cause, stop.hint, stop.code) == expected, error


def test_a_run_the_cluster_no_longer_matches_stops_before_the_move_and_lists_the_rest_not_run() -> None:
    """A move made on cards that changed since the plan would undo someone else's work: nothing after it runs."""
    checks = ((FIRST, MoveCheck(Step.done, "on b")), (SECOND, MoveCheck(Step.changed, "ns/other moved to c")))
    outcomes = _outcomes(PLAN, checks, stop=2)
    assert outcomes == (
        Outcome(1, FIRST, "already done", "on b"),
        Outcome(2, SECOND, "failed", "ns/other moved to c"),
        Outcome(3, THIRD, "not run", ""),
    )
    report = _changed(REPORT, outcomes, 2, checks[1][1])
    assert (report.outcomes, report.failure, report.hint, report.exit_code) == (
        outcomes,
        "move 2: ns/other moved to c",
        _CHANGED_HINT,
        EXIT_ERROR,
    )
    assert _outcomes(PLAN, checks, stop=1) == (
        Outcome(1, FIRST, "already done", "on b"),
        Outcome(2, SECOND, "not run", ""),
        Outcome(3, THIRD, "not run", ""),
    )


def test_a_client_dry_run_reports_each_moves_step_and_the_first_change() -> None:
    """--dry-run=client touches nothing: it says which moves are ready, done or settling, and stops at a change."""
    kube = cast("Kube", None)
    settled = ((FIRST, MoveCheck(Step.ready, "fits b")), (SECOND, MoveCheck(Step.waiting, "replacement Pending")))
    assert _dry_run(kube, PLAN, settled, REPORT, server=False) == ApplyReport(
        "fit ns/big",
        "none",
        (
            Outcome(1, FIRST, "ready", "fits b"),
            Outcome(2, SECOND, "in progress", "replacement Pending"),
            Outcome(3, THIRD, "not run", ""),
        ),
        NAMES,
    )
    changed = (*settled, (THIRD, MoveCheck(Step.changed, "ns/last is gone")))
    report = _dry_run(kube, PLAN, changed, REPORT, server=False)
    assert (report.failure, report.outcomes[2]) == (
        "move 3: ns/last is gone",
        Outcome(3, THIRD, "failed", "ns/last is gone"),
    )


def test_the_moved_pods_are_read_by_name_until_each_is_seen_gone() -> None:
    """The send-back waits until every moved pod's UID is gone from this map (a wrong key would never settle); a pod
    seen gone, or replaced under its name, is not read again."""
    stored = {("ns", "small"): {"metadata": {"uid": "u1"}}, ("ns", "other"): {"metadata": {"uid": "u9"}}}
    reads: list[tuple[str, str]] = []

    def read(namespace: str, name: str) -> dict | None:
        reads.append((namespace, name))
        return stored.get((namespace, name))

    gone: set[str] = set()
    assert _moved_uids(read, PLAN, gone) == {"ns/small": "u1", "ns/other": "u9", "ns/last": ""}
    assert gone == {"ns/other", "ns/last"}
    reads.clear()
    del stored[("ns", "small")]
    assert _moved_uids(read, PLAN, gone) == {"ns/small": ""}
    assert reads == [("ns", "small")] and gone == {"ns/small", "ns/other", "ns/last"}


def test_a_placement_left_behind_is_warned_about(capsys: pytest.CaptureFixture[str]) -> None:
    """A placement that outlives a move not made pins the next pod of the workload: the operator must delete it."""
    _rolled_back(RolledBack("ns", "move-small", Stage.eviction))
    assert capsys.readouterr().err == ""
    _rolled_back(RolledBack("ns", "move-small", Stage.eviction, KubeForbidden("forbidden")))
    assert capsys.readouterr().err == (
        "warning: could not delete placement move-small after the pod was not evicted: forbidden\n"
    )
