"""The console entry points: `--version` of both executables, and Ctrl-C while the CLI is still loading."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

import pytest

from kubectl_hami_place import __version__, entry
from tests.unit.test_packaging import ROOT

APP = "kubectl_hami_place.cli.app"


def test_the_plugin_prints_its_version_without_loading_the_cli() -> None:
    code = (
        "import sys; from kubectl_hami_place.entry import main; sys.argv[1:] = ['--version']; main(); "
        f"print({APP!r} in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert proc.stdout.splitlines() == [f"kubectl-hami_place {__version__}", "False"]


def test_the_server_prints_its_version() -> None:
    code = "import sys; from webhook.main import main; sys.exit(main(['--version']))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, cwd=ROOT)
    assert (proc.returncode, proc.stdout) == (0, f"hami-place-webhook {__version__}\n")


class _Interrupting:
    """A finder that raises KeyboardInterrupt for the CLI's app module, as Ctrl-C during its import does."""

    def find_spec(self, name: str, path: Sequence[str] | None, target: ModuleType | None = None) -> ModuleSpec | None:
        if name == APP:
            raise KeyboardInterrupt
        return None


def test_ctrl_c_while_the_cli_loads_says_interrupted_without_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delitem(sys.modules, APP, raising=False)
    monkeypatch.setattr(sys, "meta_path", [_Interrupting(), *sys.meta_path])
    monkeypatch.setattr(sys, "argv", ["kubectl-hami_place", "status"])
    assert entry.main() == 130
    assert capsys.readouterr().err == "error: interrupted\n"
    assert entry.complete_main() == 130


def test_the_plugin_runs_the_words_after_its_name(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """kubectl runs `kubectl-hami_place list -o xml` for `kubectl hami-place list -o xml`: the verb is the first word
    after the executable's name. (HAMI_PLACE_DEBUG=1 leaves this process's logging and warnings as they are.)"""
    monkeypatch.setenv("HAMI_PLACE_DEBUG", "1")
    monkeypatch.setattr(sys, "argv", ["kubectl-hami_place", "list", "-o", "xml"])
    assert entry.main() == 2
    assert capsys.readouterr() == (
        "",
        "error: invalid value for '--output' / '-o': 'xml' is not one of 'table', 'wide', 'json', 'yaml'; "
        "see 'kubectl hami-place list --help'\n",
    )
