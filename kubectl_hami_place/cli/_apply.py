"""`apply -f PLAN`: carry out a plan printed by `plan -o json|yaml`, move by move (see `_moves_runner`).

Re-running the same plan resumes it: moves already done are skipped.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from kubectl_hami_place.cli._common import (
    AsOption,
    ContextOption,
    DryRun,
    DryRunOption,
    GpuPolicyOption,
    HamiConfigOption,
    KubeconfigOption,
    OutputFormat,
    OutputOption,
    YesOption,
    emit,
    target,
)
from kubectl_hami_place.cli._errors import EXIT_OK, UsageProblem
from kubectl_hami_place.cli._moves_runner import TimeoutOption, WaitPodOption, carry_out
from kubectl_hami_place.cli._pin_check import AckTimeoutOption
from kubectl_hami_place.cli._present import examples
from kubectl_hami_place.kube.move_values import ACK_TIMEOUT_SECONDS

if TYPE_CHECKING:
    from kubectl_hami_place.core.planner.apply import PlanFile

HELP = (
    "Carry out a plan printed by `plan -o json|yaml` (-f - reads stdin): for each move, pin the pod's replacement to "
    "the target cards, evict the pod through the Eviction API, and wait until HAMi allocated the replacement. Stops "
    "at the first move the cluster no longer matches or that fails; re-run to resume."
    + examples(
        "kubectl hami-place plan -n team-a --for big-train -o json > plan.json",
        "kubectl hami-place apply -f plan.json --dry-run=server",
        "kubectl hami-place apply -n team-a -f plan.json --yes --wait-for-pod",
    )
)


def load_plan(path: str) -> PlanFile:
    """The plan file (JSON or YAML; `-` is stdin), or a usage error saying what is wrong with it."""
    import yaml

    from kubectl_hami_place.core.planner.apply import PlanFileError, read_plan

    if not path:
        # Path("") is the current directory: the error read "cannot read : Is a directory".
        raise UsageProblem("-f is empty", "give the plan file's path, or - for stdin")
    if path == "-" and sys.stdin is None:
        raise UsageProblem("no standard input to read the plan from", "give the plan file's path, or pipe it in")
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageProblem(f"cannot read {path}: {exc.strerror}", "give the file plan -o json wrote") from exc
    except UnicodeDecodeError as exc:
        raise UsageProblem(f"{path} is not UTF-8 text", "give the file plan -o json wrote") from exc
    source = "stdin" if path == "-" else path
    try:
        data: Any = _parse(text)
    except json.JSONDecodeError as exc:
        raise UsageProblem(_json_problem(source, text, exc), _PLAN_HINT) from exc
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise UsageProblem(f"{source}{where} is not JSON or YAML: {exc.problem or exc.context}", _PLAN_HINT) from exc
    except yaml.YAMLError as exc:
        raise UsageProblem(f"{source} is not JSON or YAML: {' '.join(str(exc).split())}", _PLAN_HINT) from exc
    except (ValueError, RecursionError) as exc:
        problem = (
            "nests deeper than a plan does"
            if isinstance(exc, RecursionError)
            else "holds a number of thousands of digits or a date that is none"
        )
        raise UsageProblem(f"{source} {problem}: it is not a plan", _PLAN_HINT) from exc
    try:
        return read_plan(data)
    except PlanFileError as exc:
        raise UsageProblem(f"{source} is not a plan: {exc}", _PLAN_HINT) from exc


_PLAN_HINT = "write one with kubectl hami-place plan ... -o json > plan.json"


def _parse(text: str) -> Any:
    """JSON when the text starts as JSON does (so its errors name JSON's line and cause), else YAML."""
    from kubectl_hami_place.core.yaml_doc import load_yaml

    if text.lstrip().startswith(("{", "[")):
        return json.loads(text)
    return load_yaml(text)


def _json_problem(source: str, text: str, exc: json.JSONDecodeError) -> str:
    """Where the JSON breaks, in words; a text that ends before its document does is called truncated."""
    if not text[exc.pos :].strip():
        return f"{source} ends at line {exc.lineno} before the JSON document does (truncated?)"
    return f"{source} line {exc.lineno} column {exc.colno} is not JSON: {exc.msg}"


def _only_namespace(plan: PlanFile, namespace: str, source: str) -> None:
    """`-n NS` (a kubectl habit): the plan must move only pods of NS; it names each move's namespace itself."""
    others = sorted({move.pod.split("/", 1)[0] for move in plan.moves} - {namespace})
    if others:
        raise UsageProblem(
            f"{source} moves pods of namespace {', '.join(others)}, not only of {namespace}",
            "drop -n (each move names its pod's namespace) or plan for that namespace",
        )


def apply(
    *,
    filename: Annotated[
        str, typer.Option("--filename", "-f", help="The plan, as `plan -o json|yaml` printed it; - for stdin.")
    ],
    timeout: TimeoutOption = 300,
    ack_timeout: AckTimeoutOption = ACK_TIMEOUT_SECONDS,
    wait_pod: WaitPodOption = False,
    namespace: Annotated[
        str | None,
        typer.Option(
            "--namespace",
            "-n",
            help="Refuse the plan unless every move's pod is in this namespace (each move names its own).",
        ),
    ] = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    as_user: AsOption = None,
    dry_run: DryRunOption = DryRun.none,
    yes: YesOption = False,
    output: OutputOption = OutputFormat.table,
    hami_config_ref: HamiConfigOption = None,
    gpu_policy: GpuPolicyOption = None,
) -> int:
    """Carry out the plan; exit 1 when a move fails or the cluster no longer matches, 4 when a budget blocks."""
    plan = load_plan(filename)
    source = "stdin" if filename == "-" else filename
    if wait_pod and not plan.pod:
        # A --free-cards or --compact plan has no pod: the flag ended the run at once, as if it had been scheduled.
        raise UsageProblem(
            f"--wait-for-pod waits for the pod of a --for plan; {source} makes room for no pod", "drop --wait-for-pod"
        )
    if namespace:
        _only_namespace(plan, namespace, source)
    where = target(kubeconfig, context, None, as_user=as_user)
    report = carry_out(
        where.kube,
        plan,
        dry_run=dry_run,
        timeout=timeout,
        wait_pod=wait_pod,
        yes=yes,
        ack_timeout=ack_timeout,
        hami_config=hami_config_ref or "",
        gpu_policy=gpu_policy or "",
    )
    emit(report, output)
    if report.failure:
        raise report.error()
    return EXIT_OK
