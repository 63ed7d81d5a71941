"""`apply -f PLAN`: carry out a plan printed by `plan -o json|yaml`, move by move (see `_applying`).

Re-running the same plan resumes it: moves already done are skipped.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from kubectl_hami_place.cli._applying import TimeoutOption, WaitPodOption, carry_out
from kubectl_hami_place.cli._common import (
    AsOption,
    ContextOption,
    DryRun,
    DryRunOption,
    KubeconfigOption,
    OutputFormat,
    OutputOption,
    YesOption,
    emit,
    target,
)
from kubectl_hami_place.cli._errors import EXIT_OK, UsageProblem
from kubectl_hami_place.cli._placing import AckTimeoutOption
from kubectl_hami_place.core.planner.apply import PlanFile, PlanFileError, read_plan
from kubectl_hami_place.kube.moves import ACK_TIMEOUT_SECONDS

HELP = (
    "Carry out a plan printed by `plan -o json|yaml` (-f - reads stdin): for each move, pin the pod's replacement to "
    "the target cards, evict the pod through the Eviction API, and wait until HAMi allocated the replacement. Stops "
    "at the first move the cluster no longer matches or that fails; re-run to resume."
)


def load_plan(path: str) -> PlanFile:
    """The plan file (JSON or YAML; `-` is stdin), or a usage error saying what is wrong with it."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageProblem(f"cannot read {path}: {exc.strerror}", "give the file plan -o json wrote") from exc
    source = "stdin" if path == "-" else path
    try:
        data: Any = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise UsageProblem(f"{source} is not JSON or YAML: {' '.join(str(exc).split())}", _PLAN_HINT) from exc
    try:
        return read_plan(data)
    except PlanFileError as exc:
        raise UsageProblem(f"{source} is not a plan: {exc}", _PLAN_HINT) from exc


_PLAN_HINT = "write one with kubectl hami-place plan ... -o json > plan.json"


def apply(
    *,
    filename: Annotated[
        str, typer.Option("--filename", "-f", help="The plan, as `plan -o json|yaml` printed it; - for stdin.")
    ],
    timeout: TimeoutOption = 300,
    ack_timeout: AckTimeoutOption = ACK_TIMEOUT_SECONDS,
    wait_pod: WaitPodOption = False,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    as_user: AsOption = None,
    dry_run: DryRunOption = DryRun.none,
    yes: YesOption = False,
    output: OutputOption = OutputFormat.table,
) -> int:
    """Carry out the plan; exit 1 when a move fails or the cluster no longer matches, 4 when a budget blocks."""
    plan = load_plan(filename)
    where = target(kubeconfig, context, None, as_user=as_user)
    report = carry_out(
        where.kube, plan, dry_run=dry_run, timeout=timeout, wait_pod=wait_pod, yes=yes, ack_timeout=ack_timeout
    )
    emit(report, output)
    if report.failure:
        raise report.error()
    return EXIT_OK
