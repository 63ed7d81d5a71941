"""What every verb shares: the kubectl-style options, the connection, printing, warnings and confirmation."""

from __future__ import annotations

import gc
import io
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer

from kubectl_hami_place.cli._errors import CliError, UsageProblem
from kubectl_hami_place.cli.output import Result, formatter_for
from kubectl_hami_place.cli.output.printable import printable
from kubectl_hami_place.core.errors import clip

if TYPE_CHECKING:
    from rich.console import Console

    from kubectl_hami_place.core.selectors import LabelSelector
    from kubectl_hami_place.kube.client import Kube


class OutputFormat(StrEnum):
    """`-o` values."""

    table = "table"
    wide = "wide"
    json = "json"
    yaml = "yaml"


class DryRun(StrEnum):
    """`--dry-run` values, as in kubectl: client sends nothing, server runs every check without persisting."""

    none = "none"
    client = "client"
    server = "server"


def _complete_namespaces(ctx: typer.Context, incomplete: str) -> list[str]:
    """Namespace names for `-n`; the import is late so plain runs never pay for completion code."""
    from kubectl_hami_place.cli._completion import namespaces

    return namespaces(ctx, incomplete)


def _complete_contexts(ctx: typer.Context, incomplete: str) -> list[str]:
    """Context names of the kubeconfig for `--context`."""
    from kubectl_hami_place.cli._completion import contexts

    return contexts(ctx, incomplete)


def _namespace_option(default: str) -> Any:
    """`-n`, its help naming what the verb does without it: most verbs use the context's namespace, status all."""
    return typer.Option(
        "--namespace", "-n", help=f"Namespace (default: {default}).", autocompletion=_complete_namespaces
    )


KubeconfigOption = Annotated[
    str | None, typer.Option("--kubeconfig", help="Path to the kubeconfig file (default: $KUBECONFIG, ~/.kube/config).")
]
ContextOption = Annotated[
    str | None,
    typer.Option("--context", help="The kubeconfig context to use.", autocompletion=_complete_contexts),
]

NamespaceOption = Annotated[str | None, _namespace_option("the context's")]
NamespaceOrAllOption = Annotated[str | None, _namespace_option("all namespaces")]
AsOption = Annotated[
    str | None, typer.Option("--as", help="Username to impersonate for the operation (as kubectl --as).")
]
AllNamespacesOption = Annotated[bool, typer.Option("--all-namespaces", "-A", help="Across all namespaces.")]
OutputOption = Annotated[OutputFormat, typer.Option("--output", "-o", help="Output format.", case_sensitive=False)]
DryRunOption = Annotated[
    DryRun,
    typer.Option(
        "--dry-run",
        help="client: check and print, send nothing; server: let the API server check too, persist nothing.",
        case_sensitive=False,
    ),
]
YesOption = Annotated[bool, typer.Option("--yes", "-y", help="Do it without asking (required without a terminal).")]
PlacementLabelsOption = Annotated[
    str | None,
    typer.Option("--selector", "-l", help="Only the placements with these labels, kubectl syntax (e.g. -l team=a)."),
]


def parse_selector(text: str, what: str = "pod") -> LabelSelector:
    """`-l` as a selector of `what` the verb takes, or a usage error: malformed, or empty (it would take them all)."""
    from kubectl_hami_place.core.errors import SelectorError
    from kubectl_hami_place.core.selectors import parse_selector_string, require_nonempty_selector

    try:
        return require_nonempty_selector(parse_selector_string(text), what)
    except SelectorError as exc:
        raise UsageProblem(
            f"bad selector -l {clip(text)!r}: {exc}", "use kubectl's syntax, e.g. -l app=train,tier=gpu"
        ) from exc


def label_query(text: str | None, what: str) -> str:
    """`-l` of list, delete and status, which select `what`, as the API's labelSelector ("" when not given)."""
    return "" if text is None else str(parse_selector(text, what))


def color_enabled(stream: Any) -> bool:
    """Colour only on a terminal and never when NO_COLOR is set (https://no-color.org)."""
    if os.environ.get("NO_COLOR"):
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def stderr_console() -> Console:
    """The console for errors and warnings; rich is imported here, so completion, which prints none, never loads it."""
    from rich.console import Console

    color = color_enabled(sys.stderr)
    return Console(
        file=sys.stderr if sys.stderr is not None else io.StringIO(),  # closed (2>&-): said to no one, not stdout
        force_terminal=color,
        no_color=not color,
        color_system="standard" if color else None,
        highlight=False,
        soft_wrap=True,
        emoji=False,
    )


def warn(message: str) -> None:
    """One yellow `warning:` line on stderr; the command goes on."""
    from rich.text import Text

    stderr_console().print(Text(f"warning: {printable(message)}", style="yellow"))


def error_line(message: str) -> None:
    """One red `error:` line on stderr (the caller decides whether the command goes on)."""
    from rich.text import Text

    stderr_console().print(Text(f"error: {printable(message)}", style="red"))


def note(message: str) -> None:
    """One plain informational line on stderr, so stdout stays the result alone."""
    from rich.text import Text

    stderr_console().print(Text(printable(message), style="dim"))


class StdoutClosed(Exception):
    """stdout has no reader (`| head -1` read its line and went, or `>&-`): not an OSError, which typer turns into
    exit 1 before the CLI sees it; the CLI ends with 0, as the output was not wanted."""


def write_out(text: str) -> None:
    """Writes the result's text on stdout; `StdoutClosed` when no one reads it any more."""
    if sys.stdout is None:
        raise StdoutClosed
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError as exc:
        raise StdoutClosed from exc


def emit(result: Result, output: OutputFormat) -> None:
    """Renders the result in the chosen format on stdout."""
    write_out(formatter_for(output.value, color=color_enabled(sys.stdout)).render(result))


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic collector off while a command reads the cluster and works on what it read.

    Decoded API objects, the views, a snapshot and a plan's working copy make no reference cycles, and the collector
    walking them again and again was half of `status`'s CPU at 5,000 nodes / 40,000 pods (in-process, 6.4 -> 2.8 s)
    and a quarter to 40% of a snapshot's at 1,213 nodes (docs/performance.md). On again after, if it was on.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@dataclass(frozen=True)
class Target:
    """The connection and the namespace a verb works in (None: all namespaces)."""

    kube: Kube
    namespace: str | None

    @property
    def one_namespace(self) -> str:
        """The namespace of a verb that works in exactly one."""
        return self.namespace or self.kube.namespace


def target(
    kubeconfig: str | None,
    context: str | None,
    namespace: str | None,
    all_namespaces: bool = False,
    as_user: str | None = None,
) -> Target:
    """Connects (as `--as` when given) and settles the namespace: `-A` wins over `-n`, else `-n`, else the context's."""
    from kubectl_hami_place.kube.client import connect

    if all_namespaces and namespace:
        raise UsageProblem("--namespace and --all-namespaces conflict", "pass only one of them")
    if as_user is not None and not (as_user and as_user.isprintable()):
        # It goes into an HTTP header, where a line break would be refused by the client library.
        raise UsageProblem(f"--as {clip(as_user, 60)!r} is not a user name", "give the user to act as, e.g. --as jane")
    kube = connect(kubeconfig, context, impersonate=as_user)
    if all_namespaces:
        return Target(kube, None)
    return Target(kube, namespace or kube.namespace)


def not_found(kube: Kube, namespace: str, what: str, hint: str) -> CliError:
    """`what` is not in the namespace (exit 1, as every not-found); a namespace that does not exist is the cause."""
    from kubectl_hami_place.kube import cluster_reads

    if not cluster_reads.namespace_exists(kube, namespace):
        return CliError(f"namespace {namespace} not found", "check -n (kubectl get namespaces)")
    return CliError(f"{what} not found in namespace {namespace}", hint)


def not_gpu_nodes(kube: Kube, missing: list[str]) -> CliError:
    """Named nodes that are not among the GPU nodes (exit 1, as every not-found): absent ones first, else the rest."""
    from kubectl_hami_place.kube import cluster_reads

    absent = [name for name in missing if not cluster_reads.node_exists(kube, name)]
    if absent:
        return CliError(f"node {', '.join(absent)} not found", "check the name (kubectl get nodes)")
    return CliError(
        f"{', '.join(missing)}: not a HAMi GPU node (no card register and no nvidia.com/gpu)",
        "list the GPU nodes with kubectl hami-place status",
    )


def confirm(action: str, yes: bool, ask: Callable[[str], bool] | None = None) -> bool:
    """True to go ahead. With --yes: yes. Without a terminal: refuse (exit 2). Else ask, default no."""
    if yes:
        return True
    if sys.stdin is None or not sys.stdin.isatty():
        raise UsageProblem(f"refusing to {action} without confirmation", "pass --yes to confirm")
    return (ask or ask_on_stderr)(f"{action[0].upper()}{action[1:]}?")


def ask_on_stderr(question: str) -> bool:
    """y/N asked on stderr and read from stdin, again until it reads; end of input aborts. Not click's confirm, whose
    `input(" ")` wrote a space to stdout: `delete x -o json > f` answered on a terminal left f starting with it."""
    while True:
        sys.stderr.write(f"{question} [y/N]: ")
        sys.stderr.flush()
        line = sys.stdin.readline()
        if not line:
            sys.stderr.write("\n")
            raise typer.Abort
        answer = line.strip().lower()
        if answer in ("y", "yes"):
            return True
        if answer in ("", "n", "no"):
            return False
        sys.stderr.write("Error: invalid input\n")


def complete_nodes(ctx: typer.Context, incomplete: str) -> list[str]:
    """Node names."""
    from kubectl_hami_place.cli._completion import node_names

    return node_names(ctx, incomplete)


def complete_gpus(ctx: typer.Context, incomplete: str) -> list[str]:
    """`gpu-N` of the node given with --node or --to-node."""
    from kubectl_hami_place.cli._completion import card_refs

    return card_refs(ctx, incomplete)


def complete_pods(ctx: typer.Context, incomplete: str) -> list[str]:
    """Pod names of the namespace."""
    from kubectl_hami_place.cli._completion import pod_names

    return pod_names(ctx, incomplete)


NodeOption = Annotated[
    str, typer.Option("--node", help="The node the pod must land on.", autocompletion=complete_nodes)
]
GpuOption = Annotated[
    list[str],
    typer.Option(
        "--gpu",
        help="A card on the node: gpu-N, gpu-N/P (P% of its memory) or its UUID; once per card.",
        autocompletion=complete_gpus,
    ),
]
ReqIdOption = Annotated[
    str | None, typer.Option("--req-id", help="Request id copied onto the pod (at least 5 characters; default random).")
]
NameOption = Annotated[str | None, typer.Option("--name", help="Placement name (default pin-<reqID>).")]
MAX_MEMORY_MIB = 2**31 - 1
"""The most MiB per card HAMi can count (an int32): a larger --request-memory is refused before the cluster is read."""

MemoryOption = Annotated[
    int | None,
    typer.Option(
        "--request-memory",
        min=0,
        max=MAX_MEMORY_MIB,
        help="MiB per card the pod asks (default: from its controller).",
    ),
]


def pod_name(value: str | None) -> str | None:
    """A pod named on the command line, checked before any connection: `why ''` read the whole cluster first."""
    from kubectl_hami_place.core.k8s_names import is_object_name

    if value is not None and not is_object_name(value):
        raise UsageProblem(
            f"{clip(value)!r} is not a pod name", "give the pod's name: lowercase letters, digits, '-' and '.'"
        )
    return value


def _hami_config_ref(value: str | None) -> str | None:
    """`--hami-config` checked before any connection: a malformed one was taken for a ConfigMap that cannot be read,
    and HAMi's defaults went on in its place after a warning. NAME alone is in the context's namespace."""
    from kubectl_hami_place.core.k8s_names import is_namespace, is_object_name

    if value:
        namespace, slash, name = value.rpartition("/")
        if not is_object_name(name) or (slash and not is_namespace(namespace)):
            raise UsageProblem(
                f"--hami-config {clip(value)!r} is not NS/NAME",
                "write e.g. --hami-config kube-system/hami-scheduler-device",
            )
    return value


HamiConfigOption = Annotated[
    str | None,
    typer.Option(
        "--hami-config",
        metavar="NS/NAME",
        help="HAMi's device-config ConfigMap (default: the one named hami-scheduler-device, in any namespace).",
        callback=_hami_config_ref,
    ),
]


def _gpu_policy(value: str | None) -> str | None:
    """`--gpu-scheduler-policy` checked before any connection: HAMi reads a word it does not know as spread."""
    from kubectl_hami_place.core.fit import is_gpu_policy

    if value and not is_gpu_policy(value):
        raise UsageProblem(
            f"--gpu-scheduler-policy {clip(value)!r} is no policy HAMi knows (it would read it as spread)",
            "write binpack, spread, mutex, topology-aware, or a comma list of binpack, spread and numa",
        )
    return value


GpuPolicyOption = Annotated[
    str | None,
    typer.Option(
        "--gpu-scheduler-policy",
        metavar="POLICY",
        help="HAMi's default GPU policy for a pod naming none (default: read from HAMi's scheduler Deployment).",
        callback=_gpu_policy,
    ),
]
CoresOption = Annotated[
    int | None,
    typer.Option("--request-cores", min=0, max=100, help="Percent of each card's cores the pod asks."),
]
