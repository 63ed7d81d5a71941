"""`--help` and TAB completion start without the Kubernetes client: a verb imports it only when it runs."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.unit.test_packaging import ROOT

LOADED = "sorted(m for m in sys.modules if m == 'kubernetes' or m.startswith('kubernetes.'))"


def kubernetes_modules_after(code: str) -> list[str]:
    """The kubernetes modules a fresh interpreter holds after running `code` (its output goes to /dev/null)."""
    script = (
        "import contextlib, io, json, sys\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        + "".join(f"    {line}\n" for line in code.splitlines())
        + f"print(json.dumps({LOADED}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=ROOT)
    loaded: list[str] = json.loads(proc.stdout)
    return loaded


def test_loading_the_cli_leaves_the_kubernetes_client_unloaded() -> None:
    assert kubernetes_modules_after("import kubectl_hami_place.cli.app") == []


def test_help_of_every_verb_leaves_the_kubernetes_client_unloaded() -> None:
    code = (
        "from kubectl_hami_place.cli.app import run\n"
        "for verb in ([], ['pin'], ['evict'], ['status'], ['list'], ['delete'], ['why'], ['plan'], ['apply'],\n"
        "             ['defrag', 'status'], ['version'], ['completion']):\n"
        "    assert run([*verb, '--help']) == 0, verb"
    )
    assert kubernetes_modules_after(code) == []


def test_completing_a_verb_or_an_option_leaves_the_kubernetes_client_unloaded() -> None:
    code = (
        "from kubectl_hami_place.cli._completion import complete_words\n"
        "from kubectl_hami_place.cli.app import PROG, app\n"
        "assert 'status' in complete_words(app, PROG, ['st'])\n"
        "assert '--to-node' in complete_words(app, PROG, ['evict', '--to'])"
    )
    assert kubernetes_modules_after(code) == []


def test_a_verb_that_reaches_the_cluster_loads_the_kubernetes_client_when_it_runs() -> None:
    """The check above can fail: the same probe sees the client once a verb connects (to a kubeconfig that is not
    there, which fails before any request)."""
    code = (
        "from kubectl_hami_place.cli.app import run\n"
        "assert run(['status', '--kubeconfig', '/nonexistent/kubeconfig']) == 1"
    )
    assert "kubernetes" in kubernetes_modules_after(code)
