"""`plan`: the pod moves that make room for a Pending pod, free whole cards, or compact nodes; nothing is changed.

`--for POD` first says why the pod does not fit today (the `why` table). A plan that cannot reach its goal is
still printed with the nearest it gets and why, and the command exits 1. With `--apply` a complete plan is then
carried out, as `apply -f` would (after a confirmation unless --yes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer._click.core import ParameterSource

from kubectl_hami_place.cli._common import (
    AsOption,
    ContextOption,
    DryRun,
    DryRunOption,
    GpuPolicyOption,
    HamiConfigOption,
    KubeconfigOption,
    NamespaceOption,
    OutputFormat,
    OutputOption,
    YesOption,
    collector_paused,
    complete_nodes,
    complete_pods,
    emit,
    error_line,
    not_found,
    not_gpu_nodes,
    pod_name,
    target,
    warn,
)
from kubectl_hami_place.cli._errors import EXIT_ERROR, EXIT_OK, CliError, UsageProblem
from kubectl_hami_place.cli._moves_runner import TimeoutOption, WaitPodOption, carry_out
from kubectl_hami_place.cli._pin_check import AckTimeoutOption
from kubectl_hami_place.cli._present import examples
from kubectl_hami_place.cli._why import require_gpu, why_blocks
from kubectl_hami_place.cli.output import Block, Table, Text
from kubectl_hami_place.kube.errors import KubeNotFound
from kubectl_hami_place.kube.move_values import ACK_TIMEOUT_SECONDS

if TYPE_CHECKING:
    from kubectl_hami_place.cli._moves_runner import ApplyReport
    from kubectl_hami_place.core.planner import Goal, NodeWhy, Plan, Summary

HELP = (
    "Plan the pod moves that make room for a Pending pod (--for POD), free whole cards (--free-cards N [--type T]) "
    "or compact nodes (--compact NODE...): fragmentation before and after, and each move with its reason. "
    "Nothing is changed."
    + examples(
        "kubectl hami-place plan -n team-a --for big-train",
        "kubectl hami-place plan -n team-a --for big-train -o json > plan.json",
        "kubectl hami-place plan --free-cards 2 --type A100    # 2 more A100s emptied; free ones do not count",
        "kubectl hami-place plan --compact gpu-a100-0 gpu-a100-1 --apply --yes",
    )
)


@dataclass(frozen=True)
class PlanView:
    """A plan, the card names of the snapshot (`gpu-N` by UUID), and for --for the pod's verdict today."""

    plan: Plan
    names: dict[str, str]
    why: tuple[NodeWhy, ...] | None
    pod: str

    def to_data(self) -> Any:
        """The plan as JSON, with the why verdicts for --for."""
        data = self.plan.to_dict()
        if self.why is not None:
            namespace, name = self.pod.split("/", 1)
            data["pod"] = {"namespace": namespace, "name": name}
            data["why"] = [verdict.to_dict() for verdict in self.why]
        return data

    def to_blocks(self) -> list[Block]:
        """Why (for --for), the moves, before and after, and what stands in the way."""
        from kubectl_hami_place.core.refs import where

        blocks: list[Block] = []
        if self.why is not None:
            blocks.extend(why_blocks(self.pod, self.why))
        result = self.plan
        status = "plan" if result.complete else "plan (goal not reached)"
        gain = result.gain
        if result.target is not None:
            gain = f"{self.pod} fits {where(*result.target, self.names)} after {len(result.moves)} move(s)"
        blocks.append(Text((f"{status}: {result.goal}: {gain}",), style="bold"))
        rows = tuple(
            (
                str(number),
                move.pod,
                where(move.from_node, move.from_cards, self.names),
                where(move.to_node, move.to_cards, self.names),
                move.reason,
            )
            for number, move in enumerate(result.moves, start=1)
        )
        blocks.append(Table(columns=("#", "Pod", "From", "To", "Reason"), rows=rows, empty="  no moves"))
        blocks.append(Text(("Fragmentation", *_compare(result.before, result.after))))
        if result.reasons:
            blocks.append(Text(("Why not further:", *(f"  {reason}" for reason in result.reasons)), style="yellow"))
        return blocks


@dataclass(frozen=True)
class PlanApplied:
    """`plan --apply` with -o json|yaml: the plan and the run in one document."""

    view: PlanView
    report: ApplyReport

    def to_data(self) -> Any:
        """`{plan, apply}`."""
        return {"plan": self.view.to_data(), "apply": self.report.to_data()}

    def to_blocks(self) -> list[Block]:
        """The plan, then the run."""
        return [*self.view.to_blocks(), *self.report.to_blocks()]


def _short_of_goal(result: Plan) -> str:
    """The stderr line of a plan that exits 1: a script that keeps stdout (-o json > plan.json) still learns why.
    A first reason that heads a list (ends in a colon) takes the list's first item with it."""
    first, *rest = result.reasons
    if first.endswith(":") and rest:
        first = f"{first} {rest[0]}"
    return f"goal not reached: {first.rstrip(':')}; see the nearest plan printed on stdout"


def _compare(before: Summary, after: Summary) -> tuple[str, ...]:
    """Before -> after lines of the summary."""
    return (
        f"  whole cards free:        {before.whole_cards_free} -> {after.whole_cards_free}",
        f"  free memory:             {before.free_mib} -> {after.free_mib} MiB",
        f"  largest free on a card:  {before.largest_free_mib} -> {after.largest_free_mib} MiB",
    )


def plan(
    ctx: typer.Context,
    *,
    nodes: Annotated[
        list[str] | None, typer.Argument(help="The nodes to compact (with --compact).", autocompletion=complete_nodes)
    ] = None,
    for_pod: Annotated[
        str | None,
        typer.Option(
            "--for", help="Make room for this pod (usually Pending).", autocompletion=complete_pods, callback=pod_name
        ),
    ] = None,
    free_cards: Annotated[
        int | None,
        typer.Option(
            "--free-cards",
            min=1,
            help="Empty this many more cards now in use, so they are whole and free (cards already free do not count).",
        ),
    ] = None,
    card_type: Annotated[
        str | None, typer.Option("--type", help="With --free-cards: only cards whose type contains this word.")
    ] = None,
    compact: Annotated[
        bool, typer.Option("--compact", help="Pack the named nodes' pods onto as few of their cards as possible.")
    ] = False,
    max_moves: Annotated[int, typer.Option("--max-moves", min=1, help="At most this many moves.")] = 20,
    max_moves_per_node: Annotated[
        int, typer.Option("--max-moves-per-node", min=1, help="At most this many pods moved off any one node.")
    ] = 8,
    then_apply: Annotated[
        bool, typer.Option("--apply", help="Then carry the plan out, as apply -f would (confirm unless --yes).")
    ] = False,
    dry_run: DryRunOption = DryRun.none,
    timeout: TimeoutOption = 300,
    ack_timeout: AckTimeoutOption = ACK_TIMEOUT_SECONDS,
    wait_pod: WaitPodOption = False,
    yes: YesOption = False,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    as_user: AsOption = None,
    namespace: NamespaceOption = None,
    output: OutputOption = OutputFormat.table,
    hami_config_ref: HamiConfigOption = None,
    gpu_policy: GpuPolicyOption = None,
) -> int:
    """Print the plan; exit 1 when the goal cannot be reached."""
    from kubectl_hami_place.core.planner import CompactGoal, FitGoal, FreeCardsGoal, Limits
    from kubectl_hami_place.core.planner import plan as make_plan
    from kubectl_hami_place.core.planner import why as explain
    from kubectl_hami_place.core.planner.apply import read_plan
    from kubectl_hami_place.core.planner.objects import keep_counted_on_node
    from kubectl_hami_place.kube.snapshot import read_pending, read_snapshot

    goals = sum((for_pod is not None, free_cards is not None, compact))
    if goals != 1:
        raise UsageProblem("give exactly one goal", "use --for POD, --free-cards N or --compact NODE...")
    if card_type is not None and free_cards is None:
        raise UsageProblem("--type goes with --free-cards", "add --free-cards N")
    if dry_run is not DryRun.none and not then_apply:
        raise UsageProblem("--dry-run goes with --apply", "plan alone changes nothing; add --apply to check the run")
    waits = {"--timeout": "timeout", "--ack-timeout": "ack_timeout", "--wait-for-pod": "wait_pod"}
    given = [flag for flag, name in waits.items() if ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE]
    if given and not then_apply:
        # They bound the run --apply makes: plan alone waits for nothing, and would drop them without a word.
        raise UsageProblem(f"{given[0]} goes with --apply", "plan alone waits for nothing; add --apply, or drop it")
    if wait_pod and for_pod is None:
        # Only a --for plan has a pod to wait for: the flag ended the run at once, as if the pod had been scheduled.
        raise UsageProblem(
            "--wait-for-pod waits for the pod of --for", "--free-cards and --compact make room for no pod; drop it"
        )
    if compact != bool(nodes):
        raise UsageProblem("--compact takes the node names", "kubectl hami-place plan --compact NODE...")
    if namespace is not None and for_pod is None:
        # The other goals move pods of every namespace: a -n they ignored read as if it narrowed the moves.
        raise UsageProblem(
            "-n goes with --for: --free-cards and --compact move pods of every namespace",
            "drop -n (apply -n NS refuses a plan that moves pods of another namespace)",
        )
    where = target(kubeconfig, context, namespace, as_user=as_user)
    with collector_paused():
        read = read_snapshot(where.kube, hami_config_ref or "", gpu_policy or "")
        for message in read.warnings:
            warn(message)
        verdicts = None
        pod_key = ""
        unread: tuple[str, ...] = ()
        snapshot = read.snapshot
        goal: Goal
        if for_pod is not None:
            try:
                found = read_pending(where.kube, where.one_namespace, for_pod, read)
            except KubeNotFound as exc:
                ns = where.one_namespace
                raise not_found(where.kube, ns, f"pod {for_pod}", f"check the name (kubectl get pods -n {ns})") from exc
            pending, unread = found.pod, found.unread
            require_gpu(pending)
            if pending.allocation is not None:
                raise CliError(
                    f"pod {pending.key} already holds cards on {pending.allocation.node}",
                    "plan --for makes room for a pod HAMi has not placed (Pending)",
                )
            verdicts, pod_key, goal = explain(read.snapshot, pending, read.config), pending.key, FitGoal(pending)
            snapshot = keep_counted_on_node(read.snapshot, pending)
        elif free_cards is not None:
            goal = FreeCardsGoal(free_cards, card_type or "")
        else:
            known = {node.name for node in read.snapshot.nodes}
            missing = [name for name in nodes or [] if name not in known]
            if missing:
                raise not_gpu_nodes(where.kube, missing)
            goal = CompactGoal(tuple(dict.fromkeys(nodes or [])))
        result = make_plan(snapshot, goal, Limits(max_moves=max_moves, max_moves_per_node=max_moves_per_node))
        if unread and result.target is not None:
            warn(
                f"kube-scheduler keeps {pod_key} off nodes for reasons the plan does not read ({'; '.join(unread)}): "
                f"check that {result.target[0]} suits the pod"
            )
        view = PlanView(result, read.snapshot.card_names(), verdicts, pod_key)
    structured = output in (OutputFormat.json, OutputFormat.yaml)
    if not then_apply or not result.complete:
        emit(view, output)
        if result.complete:
            return EXIT_OK
        error_line(_short_of_goal(result))
        return EXIT_ERROR
    if not structured:
        emit(view, output)
    report = carry_out(
        where.kube,
        read_plan(view.to_data()),
        dry_run=dry_run,
        timeout=timeout,
        wait_pod=wait_pod,
        yes=yes,
        ack_timeout=ack_timeout,
        hami_config=hami_config_ref or "",
        gpu_policy=gpu_policy or "",
    )
    emit(PlanApplied(view, report) if structured else report, output)
    if report.failure:
        raise report.error()
    return EXIT_OK
