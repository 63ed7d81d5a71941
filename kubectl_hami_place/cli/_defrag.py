"""`defrag`: the defragmentation controller as the operator sees it (status, history) and steers it (pause, resume).

The controller runs in the server; this verb reads its policy ConfigMap, its leader Lease and the placements its
runs made (labelled with the run), and flips the policy's mode: `pause` writes `off` and keeps the mode it replaced
in an annotation on the ConfigMap, `resume` restores that mode (dry-run when none was kept).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Annotated, Any

import typer

from kubectl_hami_place.cli._common import (
    AsOption,
    ContextOption,
    DryRun,
    DryRunOption,
    KubeconfigOption,
    OutputFormat,
    OutputOption,
    YesOption,
    confirm,
    emit,
    target,
    warn,
)
from kubectl_hami_place.cli._errors import CliError, UsageProblem
from kubectl_hami_place.cli._present import clock, examples
from kubectl_hami_place.cli._typer_app import Command, typer_app
from kubectl_hami_place.cli.output import Block, Table, Text
from kubectl_hami_place.core.errors import clip
from kubectl_hami_place.core.names import (
    COMPONENT_LABEL,
    DEFRAG_LEASE_NAMESPACE_ANNOTATION,
    DEFRAG_POLICY_COMPONENT,
    DEFRAG_POLICY_KEY,
    DEFRAG_RESUME_ANNOTATION,
    WEBHOOK_SERVICE_LABEL,
)

if TYPE_CHECKING:
    from kubectl_hami_place.core.defrag.budget import MoveRecord
    from kubectl_hami_place.core.defrag.policy import DefragPolicy, Mode
    from kubectl_hami_place.core.defrag.report import Leader, RunSummary, Used
    from kubectl_hami_place.kube.client import Kube
    from kubectl_hami_place.kube.defrag import MovesRead


HELP = (
    "The defragmentation controller: its mode, leader, budgets and runs (status, history); pause and resume it."
    + examples(
        "kubectl hami-place defrag status",
        "kubectl hami-place defrag history --run RUN",
        "kubectl hami-place defrag pause --yes",
    )
)
RUNS_SHOWN = 10

app = typer_app("defrag", HELP)

PolicyOption = Annotated[
    str | None,
    typer.Option(
        "--policy",
        metavar="NS/NAME",
        help="The DefragPolicy ConfigMap (default: the one labelled app.kubernetes.io/component=defrag-policy).",
    ),
]

ServerNamespaceOption = Annotated[
    str | None,
    typer.Option(
        "--namespace",
        "-n",
        help="Look for the labelled policy in this namespace only (the server's; default: every namespace).",
    ),
]


@dataclass(frozen=True)
class PolicyView:
    """The policy ConfigMap as read: where, the mode written, the policy when it parses, else why not."""

    ref: str
    mode: Mode | None
    policy: DefragPolicy | None
    problem: str
    resume_mode: str

    def to_data(self) -> dict[str, Any]:
        """The policy part of the status."""
        return {
            "policy": self.ref,
            "mode": self.mode.value if self.mode else None,
            "valid": self.policy is not None,
            "problem": self.problem or None,
            "resumeMode": self.resume_mode or None,
        }


@dataclass(frozen=True)
class Status:
    """Mode, leader, budgets used in the last hour, the last runs, the newest run's moves, and whether the moves'
    seals were checked (a server's answer) or not (read from the placements); `now` when it was read, for how long
    keep-room's window stays closed."""

    view: PolicyView
    leader: Leader
    used: Used
    runs: tuple[RunSummary, ...]
    sealed: bool
    latest: tuple[MoveRecord, ...] = ()
    now: datetime | None = None

    def window_opens_in(self) -> str | None:
        """How long until keep-room's window opens (`9h29m16s`), None while it is open or keep-room has none: why
        keep-room has not run, said before anyone wonders."""
        from kubectl_hami_place.core.defrag.policy import format_duration

        policy = self.view.policy
        if policy is None or not policy.keep_room.enabled or self.now is None:
            return None
        closed = policy.keep_room.closed_for(self.now)
        return format_duration(timedelta(seconds=math.ceil(closed.total_seconds()))) if closed else None

    def to_data(self) -> Any:
        """The status as JSON."""
        from kubectl_hami_place.core.defrag.policy import format_duration
        from kubectl_hami_place.core.defrag.report import move_to_data, policy_says

        policy = self.view.policy
        budgets = None
        says = None
        if policy is not None:
            says = policy_says(policy).to_data()
            b = policy.budgets
            budgets = {
                "movesPerRun": b.moves_per_run,
                "movesPerHour": b.moves_per_hour,
                "movesPerNode": b.moves_per_node,
                "movesPerNamespace": b.moves_per_namespace,
                "cooldown": format_duration(b.cooldown),
            }
        return {
            **self.view.to_data(),
            "leader": {
                "holder": self.leader.holder or None,
                "current": self.leader.current,
                "renewTime": self.leader.renewed.isoformat() if self.leader.renewed else None,
                "forbiddenWatches": list(self.leader.forbidden),
                "lastDecisions": [decision.to_data() for decision in self.leader.decisions],
            },
            "says": says,
            "budgets": budgets,
            "usedLastHour": {
                "moves": self.used.hour,
                "perNode": dict(self.used.per_node),
                "perNamespace": dict(self.used.per_namespace),
            },
            "runs": [_run_data(run) for run in self.runs],
            "latestRunMoves": [move_to_data(record) for record in self.latest],
            "sealsChecked": self.sealed,
            "keepRoomOpensIn": self.window_opens_in(),
        }

    def to_blocks(self) -> list[Block]:
        """The policy lines, the budgets table, the leader's last decisions, the runs table."""
        from kubectl_hami_place.core.defrag.policy import Mode, format_duration
        from kubectl_hami_place.core.defrag.report import policy_says
        from kubectl_hami_place.core.defrag.watches import forbidden_watch_words

        view = self.view
        lines = [
            f"Policy:  {view.ref}",
            f"Mode:    {view.mode.value if view.mode else 'unreadable'}"
            + (f" (resume restores {view.resume_mode})" if view.resume_mode and view.mode is Mode.off else ""),
            f"Leader:  {self.leader.describe()}",
        ]
        lines += [
            f"Unread:  the leader may not watch {kind}: {forbidden_watch_words(kind)}" for kind in self.leader.forbidden
        ]
        if view.problem:
            lines.append(f"Problem: {view.problem} (the controller stays off until it is fixed)")
        if view.mode is Mode.dry_run and not view.problem:
            home = view.ref.split("/", 1)[0]
            logs = f"kubectl logs -n {home} -l {WEBHOOK_SERVICE_LABEL} --tail=-1 | grep DefragDryRun"
            lines += ["Dry-run: nothing moves; the server's log says what would:", f"  {logs}"]
        opens_in = self.window_opens_in()
        if opens_in is not None and view.policy is not None:
            window = view.policy.keep_room.describe_window()
            lines.append(f"Keep-room: outside its window ({window}); it opens in {opens_in}")
        blocks: list[Block] = [Text(tuple(lines))]
        policy = view.policy
        if policy is not None:
            blocks.append(Text(("What the policy lets it do", *(f"  {line}" for line in policy_says(policy).lines()))))
            b = policy.budgets
            busiest_node = max(self.used.per_node.items(), key=lambda item: item[1], default=("", 0))
            busiest_ns = max(self.used.per_namespace.items(), key=lambda item: item[1], default=("", 0))
            blocks.append(
                Table(
                    title="Budgets (rolling hour)",
                    columns=("BUDGET", "LIMIT", "USED"),
                    rows=(
                        ("moves per hour", str(b.moves_per_hour), str(self.used.hour)),
                        ("moves per node", str(b.moves_per_node), _busiest(busiest_node)),
                        ("moves per namespace", str(b.moves_per_namespace), _busiest(busiest_ns)),
                        ("moves per run", str(b.moves_per_run), "-"),
                        ("cooldown", format_duration(b.cooldown), "-"),
                    ),
                )
            )
        if self.leader.decisions:
            decided = ["Last decisions (the leader's, newest first)"]
            for decision in self.leader.decisions:
                decided += [
                    f"  {clock(decision.time)}  run {decision.run_id}: {decision.trigger}",
                    f"    {decision.outcome}",
                ]
            blocks.append(Text(tuple(decided)))
        blocks.append(
            Table(
                title="Last runs",
                columns=("RUN", "STARTED", "MOVES", "RESULTS"),
                rows=tuple(
                    (run.run_id, clock(run.started), str(run.moves), run.describe_results()) for run in self.runs
                ),
                empty="none",
            )
        )
        if self.latest:
            blocks.append(
                Table(
                    title=f"Moves of run {self.latest[0].run_id}",
                    columns=("POD", "FROM", "TO", "RESULT"),
                    rows=tuple((r.pod, r.source, r.target, r.result) for r in self.latest),
                )
            )
        return blocks


@dataclass(frozen=True)
class History:
    """The controller's moves, newest first, and whether their seals were checked."""

    moves: tuple[MoveRecord, ...]
    sealed: bool

    def to_data(self) -> Any:
        """The moves as JSON."""
        from kubectl_hami_place.core.defrag.report import move_to_data

        return {"moves": [move_to_data(record) for record in self.moves], "sealsChecked": self.sealed}

    def to_blocks(self) -> list[Block]:
        """One row per move."""
        return [
            Table(
                columns=("TIME", "RUN", "POD", "FROM", "TO", "RESULT", "REPLACEMENT", "PLACEMENT"),
                rows=tuple(
                    (
                        clock(r.time),
                        r.run_id,
                        r.pod,
                        r.source,
                        r.target,
                        r.result,
                        r.replacement or "-",
                        r.placement,
                    )
                    for r in self.moves
                ),
                wide=frozenset({"REPLACEMENT", "PLACEMENT"}),
                empty="No moves: the controller has made none.",
            )
        ]


@dataclass(frozen=True)
class ModeChange:
    """What pause or resume did (or, under dry-run, would do) to the policy's mode."""

    ref: str
    before: str
    after: str
    changed: bool
    dry_run: DryRun

    def to_data(self) -> Any:
        """The change as JSON."""
        return {
            "policy": self.ref,
            "from": self.before,
            "to": self.after,
            "changed": self.changed,
            "dryRun": self.dry_run.value,
        }

    def to_blocks(self) -> list[Block]:
        """One line."""
        if not self.changed:
            return [Text((f"defrag policy {self.ref}: mode is already {self.after}; nothing changed",))]
        suffix = "" if self.dry_run is DryRun.none else f" ({self.dry_run.value} dry run)"
        return [Text((f"defrag policy {self.ref}: mode {self.before} -> {self.after}{suffix}",))]


@app.command("status", cls=Command, help="Mode, leader, budgets used in the last hour, and the last runs.")
def status(
    *,
    policy: PolicyOption = None,
    namespace: ServerNamespaceOption = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    as_user: AsOption = None,
    output: OutputOption = OutputFormat.table,
) -> None:
    """Show the controller's status."""
    from kubectl_hami_place.core.defrag.report import leader_of, runs_of, used_in_hour
    from kubectl_hami_place.core.k8s_names import is_namespace
    from kubectl_hami_place.kube import defrag

    ref = _policy_ref(policy, namespace)
    kube = target(kubeconfig, context, None, as_user=as_user).kube
    config_map = _policy(kube, ref, namespace)
    view = _with_threshold(_view(config_map), lambda name: defrag.read_priority_value(kube, name))
    metadata = config_map.get("metadata") or {}
    server_namespace = str(metadata.get("namespace", ""))
    named = (metadata.get("annotations") or {}).get(DEFRAG_LEASE_NAMESPACE_ANNOTATION)
    lease_namespace = named if is_namespace(named) else server_namespace
    now = datetime.now(UTC)
    read = _moves(kube, server_namespace)
    history = read.moves
    runs = runs_of(history)[:RUNS_SHOWN]
    emit(
        Status(
            view=view,
            leader=leader_of(defrag.read_leader_lease(kube, lease_namespace), now),
            used=used_in_hour(history, now),
            runs=runs,
            latest=tuple(record for record in history if runs and record.run_id == runs[0].run_id),
            sealed=read.sealed,
            now=now,
        ),
        output,
    )


@app.command(
    "history",
    cls=Command,
    help="The controller's moves, newest first: the node and cards each pod left, and where its replacement is pinned.",
)
def history(
    *,
    run: Annotated[str | None, typer.Option("--run", help="Only this run's moves.")] = None,
    namespace: Annotated[
        str | None, typer.Option("--namespace", "-n", help="Only the moves of pods in this namespace (default: all).")
    ] = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    as_user: AsOption = None,
    output: OutputOption = OutputFormat.table,
) -> None:
    """List the controller's moves."""
    _check_namespace(namespace)
    kube = target(kubeconfig, context, None, as_user=as_user).kube
    read = _moves(kube)
    moves = tuple(
        record
        for record in read.moves
        if (run is None or record.run_id == run) and (namespace is None or record.namespace == namespace)
    )
    emit(History(moves, read.sealed), output)


def _moves(kube: Kube, server_namespace: str | None = None) -> MovesRead:
    """The controller's moves, a server's when one answers (one of `server_namespace` first); a warning says when no
    seal could be checked."""
    from kubectl_hami_place.kube import defrag

    read = defrag.read_moves(kube, server_namespace)
    if not read.sealed:
        warn(
            f"moves read from {read.source} with no seal checked: a placement labelled with a run by hand is "
            "listed as a move too"
        )
    return read


@app.command("pause", cls=Command, help="Set the policy's mode to off, keeping the mode it replaces for resume.")
def pause(
    *,
    policy: PolicyOption = None,
    namespace: ServerNamespaceOption = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    as_user: AsOption = None,
    dry_run: DryRunOption = DryRun.none,
    yes: YesOption = False,
    output: OutputOption = OutputFormat.table,
) -> None:
    """Pause the controller."""
    ref = _policy_ref(policy, namespace)
    kube = target(kubeconfig, context, None, as_user=as_user).kube
    _flip(kube, ref, namespace, dry_run=dry_run, yes=yes, output=output, pausing=True)


@app.command("resume", cls=Command, help="Restore the mode the policy had before pause (dry-run when none was kept).")
def resume(
    *,
    policy: PolicyOption = None,
    namespace: ServerNamespaceOption = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    as_user: AsOption = None,
    dry_run: DryRunOption = DryRun.none,
    yes: YesOption = False,
    output: OutputOption = OutputFormat.table,
) -> None:
    """Resume the controller."""
    ref = _policy_ref(policy, namespace)
    kube = target(kubeconfig, context, None, as_user=as_user).kube
    _flip(kube, ref, namespace, dry_run=dry_run, yes=yes, output=output, pausing=False)


def _flip(
    kube: Kube,
    policy: tuple[str, str] | None,
    namespace: str | None,
    *,
    dry_run: DryRun,
    yes: bool,
    output: OutputFormat,
    pausing: bool,
) -> None:
    """Write the new mode (and the annotation that remembers the old one) on the policy as read."""
    from kubectl_hami_place.core.defrag.policy import Mode, PolicyError, mode_of, read_mode, with_mode
    from kubectl_hami_place.kube import defrag

    config_map = _policy(kube, policy, namespace)
    ref = defrag.policy_ref(config_map)
    text = _text(config_map, ref)
    try:
        before = read_mode(text)
    except PolicyError as err:
        raise CliError(f"policy {ref}: {err}", f"fix the mode in {DEFRAG_POLICY_KEY} first") from None
    annotations = (config_map.get("metadata") or {}).get("annotations") or {}
    remember: dict[str, str | None]
    if pausing:
        after, remember = Mode.off, {DEFRAG_RESUME_ANNOTATION: before.value}
    else:
        kept = mode_of(f"mode: {annotations.get(DEFRAG_RESUME_ANNOTATION, '')!s}")
        after = kept if kept is not None and kept is not Mode.off else Mode.dry_run
        remember = {DEFRAG_RESUME_ANNOTATION: None}
    changed = (before is not Mode.off) if pausing else (before is Mode.off)
    if not changed:
        emit(ModeChange(ref, before.value, before.value, False, dry_run), output)
        return
    if dry_run is DryRun.none and not confirm(
        f"{'pause' if pausing else 'resume'} defragmentation (policy {ref}: mode {before.value} -> {after.value})", yes
    ):
        raise CliError("not confirmed", "the policy was not changed")
    if dry_run is not DryRun.client:
        defrag.patch_policy(
            kube,
            config_map,
            {DEFRAG_POLICY_KEY: with_mode(text, after)},
            remember,
            dry_run=dry_run is DryRun.server,
        )
    emit(ModeChange(ref, before.value, after.value, True, dry_run), output)


def _check_namespace(namespace: str | None) -> None:
    """`-n`, checked before any connection."""
    from kubectl_hami_place.core.k8s_names import is_namespace

    if namespace is not None and not is_namespace(namespace):
        raise UsageProblem(f"-n {clip(namespace)!r} is not a namespace name", "write e.g. -n kube-system")


def _policy_ref(ref: str | None, namespace: str | None) -> tuple[str, str] | None:
    """`--policy NAMESPACE/NAME` split, checked with `-n` before any connection."""
    from kubectl_hami_place.core.k8s_names import is_namespaced_name

    _check_namespace(namespace)
    if ref is None:
        return None
    policy_namespace, _, name = ref.partition("/")
    if not is_namespaced_name(policy_namespace, name):
        raise UsageProblem(
            f"--policy {clip(ref)!r} is not NAMESPACE/NAME", "write e.g. --policy kube-system/gd-defrag-policy"
        )
    if namespace is not None and namespace != policy_namespace:
        raise UsageProblem(f"--policy {ref} is not in namespace {namespace}", "give one of -n and --policy")
    return policy_namespace, name


def _policy(kube: Kube, ref: tuple[str, str] | None, namespace: str | None) -> dict[str, Any]:
    """The policy ConfigMap `--policy` names, else the one the chart labels (in `namespace` when given)."""
    from kubectl_hami_place.kube import defrag
    from kubectl_hami_place.kube.errors import KubeNotFound

    if ref is not None:
        try:
            return defrag.read_policy(kube, *ref).obj
        except KubeNotFound:
            raise CliError(
                f"no ConfigMap {'/'.join(ref)}: a server whose --defrag-policy names it moves nothing until it exists",
                f"create it with the DefragPolicy under {DEFRAG_POLICY_KEY} (helm upgrade renders the chart's), or "
                "pass --policy with the ConfigMap the server reads",
            ) from None
    found = defrag.labelled_policies(kube, namespace)
    if not found:
        where = "any namespace" if namespace is None else f"namespace {namespace}"
        raise CliError(
            f"no DefragPolicy ConfigMap (label {COMPONENT_LABEL}={DEFRAG_POLICY_COMPONENT}) in {where}",
            "install the chart, or pass --policy NAMESPACE/NAME",
        )
    if len(found) > 1:
        names = ", ".join(sorted(defrag.policy_ref(item) for item in found))
        raise CliError(f"several DefragPolicy ConfigMaps: {names}", "pass --policy NAMESPACE/NAME")
    return found[0]


def _text(config_map: dict[str, Any], ref: str) -> str:
    """The DefragPolicy document the ConfigMap holds."""
    text = (config_map.get("data") or {}).get(DEFRAG_POLICY_KEY)
    if not isinstance(text, str):
        raise CliError(f"ConfigMap {ref} has no {DEFRAG_POLICY_KEY}", "pass --policy with the chart's defrag policy")
    return text


def _view(config_map: dict[str, Any]) -> PolicyView:
    """The policy as the server would read it (its namespace is the server's, always left out)."""
    from kubectl_hami_place.core.defrag.policy import PolicyError, mode_of, parse_policy
    from kubectl_hami_place.kube import defrag

    ref = defrag.policy_ref(config_map)
    text = _text(config_map, ref)
    namespace = str((config_map.get("metadata") or {}).get("namespace", ""))
    annotations = (config_map.get("metadata") or {}).get("annotations") or {}
    try:
        policy: DefragPolicy | None = parse_policy(text, namespace)
        problem = ""
    except PolicyError as err:
        policy, problem = None, str(err)
    return PolicyView(ref, mode_of(text), policy, problem, str(annotations.get(DEFRAG_RESUME_ANNOTATION, "")))


def _with_threshold(view: PolicyView, read: Callable[[str], object]) -> PolicyView:
    """The view with the value of the PriorityClass its priorityThreshold names, `read` as the server reads it: a
    class not found (or of a value out of range) is the problem that keeps the server's controller off; one the user
    may not read, or that could not be read, stays shown by its name."""
    from kubectl_hami_place.core.defrag.policy import PolicyError, class_not_found, with_threshold
    from kubectl_hami_place.kube.errors import KubeError, KubeNotFound

    policy = view.policy
    if policy is None or not policy.priority_class:
        return view
    try:
        return replace(view, policy=with_threshold(policy, read(policy.priority_class)))
    except KubeNotFound:
        return replace(view, policy=None, problem=class_not_found(policy.priority_class))
    except PolicyError as err:
        return replace(view, policy=None, problem=str(err))
    except KubeError:
        return view


def _busiest(item: tuple[str, int]) -> str:
    """`2 (gpu-a100-0)`: the most used, and by whom."""
    name, count = item
    return f"{count} ({name})" if name else "0"


def _run_data(run: RunSummary) -> dict[str, Any]:
    """A run as JSON."""
    return {"run": run.run_id, "started": run.started.isoformat(), "moves": run.moves, "results": dict(run.results)}
