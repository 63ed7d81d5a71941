"""`--help` and TAB completion load only what they show: a verb imports the Kubernetes client, yaml and the core
modules it computes with when it runs, so the prompt does not wait for them."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.unit.test_packaging import ROOT

# Libraries only a running verb needs; typer and what typer loads itself to parse a verb's options (pydantic) stay.
VERB_LIBRARIES = ("kubernetes", "yaml", "orjson", "msgspec", "jsonpatch")
# What typer loads for its rich help (rich) and to coerce a value (pydantic): neither shows in a help or a completion.
HELP_UNUSED = (*VERB_LIBRARIES, "rich", "pydantic")
# Our core and adapter modules cheap enough to load with the CLI: option values, defaults, error types.
AT_START = (
    "kubectl_hami_place.core",
    "kubectl_hami_place.core.errors",
    "kubectl_hami_place.core.fields",
    "kubectl_hami_place.core.names",
    "kubectl_hami_place.core.versions",
    "kubectl_hami_place.kube",
    "kubectl_hami_place.kube.errors",
    "kubectl_hami_place.kube.move_values",
)


def verb_modules_after(code: str, libraries: tuple[str, ...] = VERB_LIBRARIES) -> list[str]:
    """The verbs' modules (and those of `libraries`) a fresh interpreter holds after running `code` (its output goes
    to /dev/null)."""
    loaded_expression = (
        f"sorted(m for m in sys.modules if m.split('.')[0] in {libraries!r} or "
        f"(m.startswith(('kubectl_hami_place.core', 'kubectl_hami_place.kube')) and m not in {AT_START!r}))"
    )
    script = (
        "import contextlib, io, json, sys\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
        + "".join(f"    {line}\n" for line in code.splitlines())
        + f"print(json.dumps({loaded_expression}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=ROOT)
    loaded: list[str] = json.loads(proc.stdout)
    return loaded


def test_loading_the_cli_leaves_the_verbs_modules_unloaded() -> None:
    assert verb_modules_after("import kubectl_hami_place.cli.app") == []


def test_the_console_entry_point_leaves_the_verbs_modules_unloaded() -> None:
    code = "from kubectl_hami_place import entry\nsys.argv = ['kubectl-hami_place', '--help']\nassert entry.main() == 0"
    assert verb_modules_after(code, HELP_UNUSED) == []


def test_help_of_every_verb_leaves_the_verbs_modules_unloaded() -> None:
    code = (
        "from kubectl_hami_place.cli.app import run\n"
        "for verb in ([], ['pin'], ['evict'], ['status'], ['list'], ['delete'], ['why'], ['plan'], ['apply'],\n"
        "             ['defrag'], ['defrag', 'status'], ['defrag', 'history'], ['defrag', 'pause'],\n"
        "             ['defrag', 'resume'], ['version'], ['completion']):\n"
        "    assert run([*verb, '--help']) == 0, verb"
    )
    assert verb_modules_after(code, HELP_UNUSED) == []


def test_completing_a_verb_or_an_option_leaves_the_verbs_modules_rich_and_pydantic_unloaded() -> None:
    """Completion prints plain candidates: not even rich is needed, nor pydantic for the words typed before."""
    code = (
        "from kubectl_hami_place.cli._completion import complete_words\n"
        "from kubectl_hami_place.cli.app import PROG, app\n"
        "assert 'status' in complete_words(app, PROG, ['st'])\n"
        "assert '--to-node' in complete_words(app, PROG, ['evict', '--to'])\n"
        "assert 'json' in complete_words(app, PROG, ['status', '-o', 'j'])\n"
        "assert 'json' in complete_words(app, PROG, ['pin', '-n', 'team-a', '--dry-run', 'client', '-o', 'j'])"
    )
    assert verb_modules_after(code, HELP_UNUSED) == []


def test_a_usage_error_leaves_the_verbs_modules_unloaded() -> None:
    """A mistyped flag is answered from the options alone."""
    code = "from kubectl_hami_place.cli.app import run\nassert run(['pin', '--no-such-flag']) == 2"
    assert verb_modules_after(code) == []


def test_a_verb_that_reaches_the_cluster_loads_the_kubernetes_client_when_it_runs() -> None:
    """The checks above can fail: the same probe sees the client once a verb connects (to a kubeconfig that is not
    there, which fails before any request)."""
    code = (
        "from kubectl_hami_place.cli.app import run\n"
        "assert run(['status', '--kubeconfig', '/nonexistent/kubeconfig']) == 1"
    )
    assert "kubernetes" in verb_modules_after(code)


def test_a_verb_loads_its_core_modules_when_it_runs() -> None:
    """`apply -f` reads its plan with yaml and the planner's plan file before any connection (here a file that is
    not there: exit 2)."""
    code = "from kubectl_hami_place.cli.app import run\nassert run(['apply', '-f', '/nonexistent/plan.json']) == 2"
    loaded = verb_modules_after(code)
    assert "yaml" in loaded
    assert "kubectl_hami_place.core.planner.apply" in loaded
