"""Shell completion: `completion bash|zsh|fish` scripts, and the word completer kubectl 1.26+ calls.

kubectl runs `kubectl_complete-hami_place <words after the plugin name...>` (the last word is the one being
typed, possibly empty) and reads candidates one per line, optionally `value<TAB>description`, then an optional
`:<directive>` line (cobra's ShellCompDirective; 4 = no file completion). The standalone scripts call the same
executable, so there is one completer for every shell.
"""

from __future__ import annotations

import sys
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer._click.shell_completion import CompletionItem, ShellComplete
from typer.main import get_command

from kubectl_hami_place.cli._present import examples
from kubectl_hami_place.core.errors import ModelError
from kubectl_hami_place.kube.errors import KubeError

if TYPE_CHECKING:
    from kubectl_hami_place.kube.client import Kube


HELP = "Print a shell completion script for the standalone kubectl-hami_place (bash, zsh or fish)." + examples(
    "kubectl-hami_place completion bash > ~/.local/share/bash-completion/completions/kubectl-hami_place",
    'kubectl-hami_place completion zsh > "${fpath[1]}/_kubectl-hami_place"',
)
NO_FILE_COMPLETION = ":4"
COMPLETER = "kubectl_complete-hami_place"


class Shell(StrEnum):
    """Shells with a completion script."""

    bash = "bash"
    zsh = "zsh"
    fish = "fish"


SCRIPTS = {
    Shell.bash: f"""# bash completion for kubectl-hami_place; `kubectl hami-place` completes through kubectl itself.
_kubectl_hami_place() {{
    local IFS=$'\\n'
    local candidates
    candidates=$({COMPLETER} "${{COMP_WORDS[@]:1:$COMP_CWORD}}" 2>/dev/null | grep -v '^:' | cut -f1)
    COMPREPLY=($(compgen -W "$candidates" -- "${{COMP_WORDS[COMP_CWORD]}}"))
}}
complete -o default -F _kubectl_hami_place kubectl-hami_place
""",
    Shell.zsh: f"""#compdef kubectl-hami_place
# zsh completion for kubectl-hami_place; `kubectl hami-place` completes through kubectl itself.
_kubectl_hami_place() {{
    local -a lines values
    lines=("${{(@f)$({COMPLETER} "${{(@)words[2,CURRENT]}}" 2>/dev/null)}}")
    lines=(${{lines:#:*}})
    values=(${{lines%%$'\\t'*}})
    compadd -a values
}}
compdef _kubectl_hami_place kubectl-hami_place
""",
    Shell.fish: f"""# fish completion for kubectl-hami_place; `kubectl hami-place` completes through kubectl itself.
function __kubectl_hami_place_complete
    set -l words (commandline -opc)[2..-1] (commandline -ct)
    {COMPLETER} $words 2>/dev/null | string match -v -r '^:'
end
complete -c kubectl-hami_place -f -a '(__kubectl_hami_place_complete)'
""",
}


def completion(
    shell: Annotated[Shell, typer.Argument(help="bash, zsh or fish.", case_sensitive=False)],
) -> None:
    """Print the completion script; see the README for where to put it."""
    sys.stdout.write(SCRIPTS[shell])


class _WordCompleter(ShellComplete):
    """Click's completion resolution driven by a word list instead of shell environment variables."""

    name = "kubectl"
    source_template = ""

    def __init__(self, command: Any, prog: str, words: list[str]) -> None:
        super().__init__(command, {}, prog, "")
        self.words = words

    def source_vars(self) -> dict[str, Any]:
        """No script: kubectl itself is the shell side."""
        return {}

    def get_completion_args(self) -> tuple[list[str], str]:
        """Every word but the last is complete; the last is being typed."""
        if not self.words:
            return [], ""
        return self.words[:-1], self.words[-1]

    def format_completion(self, item: CompletionItem) -> str:
        """`value<TAB>help`, cobra's format."""
        help_text = " ".join((item.help or "").split())
        return f"{item.value}\t{help_text}" if help_text else str(item.value)


def complete_words(app: typer.Typer, prog: str, words: list[str]) -> str:
    """Candidates for the last of `words`, one per line, then the no-file-completion directive."""
    completer = _WordCompleter(get_command(app), prog, words)
    body = completer.complete()
    return (body + "\n" if body else "") + NO_FILE_COMPLETION + "\n"


def _kube(ctx: typer.Context) -> tuple[Kube, str]:
    """The connection and namespace from what was typed so far (`--kubeconfig`, `--context`, `-n`)."""
    from kubectl_hami_place.kube.client import connect

    params = ctx.params
    kube = connect(params.get("kubeconfig"), params.get("context"))
    return kube, params.get("namespace") or kube.namespace


def _starting(names: list[str], incomplete: str) -> list[str]:
    """The names that start with what was typed."""
    return [name for name in names if name.startswith(incomplete)]


def _quietly(fetch: Any) -> list[str]:
    """Completion never fails loudly: an unreachable cluster just offers nothing."""
    try:
        result: list[str] = fetch()
    except (KubeError, ModelError, OSError):
        return []
    return result


def namespaces(ctx: typer.Context, incomplete: str) -> list[str]:
    """Namespace names."""

    def fetch() -> list[str]:
        from kubectl_hami_place.kube.client import request

        kube, _ = _kube(ctx)
        body = request(kube, kube.core().list_namespace, what="list namespaces")
        return [item["metadata"]["name"] for item in body.get("items") or []]

    return _starting(_quietly(fetch), incomplete)


def contexts(ctx: typer.Context, incomplete: str) -> list[str]:
    """Context names of the kubeconfig."""
    from kubernetes import config
    from kubernetes.config.config_exception import ConfigException

    try:
        found, _ = config.list_kube_config_contexts(config_file=ctx.params.get("kubeconfig"))
    except (ConfigException, OSError, ValueError):
        return []
    return _starting([str(c.get("name")) for c in found or []], incomplete)


def node_names(ctx: typer.Context, incomplete: str) -> list[str]:
    """Names of nodes that carry a HAMi card register."""

    def fetch() -> list[str]:
        from kubectl_hami_place.core.cards import node_cards
        from kubectl_hami_place.kube import cluster_reads

        kube, _ = _kube(ctx)
        names = []
        for node in cluster_reads.list_nodes(kube):
            try:
                if node_cards(node):
                    names.append(node["metadata"]["name"])
            except ModelError:
                continue
        return names

    return _starting(_quietly(fetch), incomplete)


def card_refs(ctx: typer.Context, incomplete: str) -> list[str]:
    """`gpu-N` of the node named by --node / --to-node."""
    node = ctx.params.get("node") or ctx.params.get("to_node")
    if not node:
        return []

    def fetch() -> list[str]:
        from kubectl_hami_place.core.cards import node_cards
        from kubectl_hami_place.kube import cluster_reads

        kube, _ = _kube(ctx)
        return [card.name for card in node_cards(cluster_reads.get_node(kube, node))]

    return _starting(_quietly(fetch), incomplete)


def pod_names(ctx: typer.Context, incomplete: str) -> list[str]:
    """Pod names of the namespace."""

    def fetch() -> list[str]:
        from kubectl_hami_place.kube import cluster_reads

        kube, namespace = _kube(ctx)
        return [pod["metadata"]["name"] for pod in cluster_reads.list_pods(kube, namespace)]

    return _starting(_quietly(fetch), incomplete)


def placement_names(ctx: typer.Context, incomplete: str) -> list[str]:
    """Placement names of the namespace."""

    def fetch() -> list[str]:
        from kubectl_hami_place.kube import placements

        kube, namespace = _kube(ctx)
        return [item["metadata"]["name"] for item in placements.list_placements(kube, namespace)]

    return _starting(_quietly(fetch), incomplete)
