"""The plugin as a process: colour only on a terminal and never with NO_COLOR, Ctrl-C exits 130 with one line."""

from __future__ import annotations

import io
import json
import os
import pty
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kubectl_hami_place import __version__
from kubectl_hami_place.cli._common import OutputFormat, color_enabled, emit, error_line, note, stderr_console, warn
from tests.unit.test_cli_output import Sample

# The console script's entry point run by this interpreter: no venv's bin/ needs to be on PATH or on disk.
PLUGIN = [sys.executable, "-c", "import sys; from kubectl_hami_place.entry import main; sys.exit(main())"]
BAD = ["pin", "-l", "a b", "--node", "n", "--gpu", "gpu-0"]


def on_terminal(extra_env: dict[str, str]) -> tuple[int, bytes]:
    """Runs the plugin with stdout and stderr on a pseudo-terminal; returns the exit code and what it printed."""
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"} | extra_env
    leader, follower = pty.openpty()
    proc = subprocess.Popen([*PLUGIN, *BAD], stdin=follower, stdout=follower, stderr=follower, env=env)
    os.close(follower)
    output = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:
            break
        if not chunk:
            break
        output += chunk
    os.close(leader)
    return proc.wait(timeout=60), output


def test_errors_are_red_on_a_terminal() -> None:
    code, output = on_terminal({})
    assert code == 2
    assert b"\x1b[31m" in output and b"error: bad selector" in output


def test_no_color_turns_colour_off() -> None:
    code, output = on_terminal({"NO_COLOR": "1"})
    assert code == 2
    assert b"\x1b[" not in output and b"error: bad selector" in output


def test_piped_output_has_no_colour() -> None:
    proc = subprocess.run([*PLUGIN, *BAD], capture_output=True, check=False)
    assert proc.returncode == 2
    assert b"\x1b[" not in proc.stderr


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def loopback_kubeconfig(tmp_path: Path, port: int) -> Path:
    """A kubeconfig whose one context talks plain HTTP to 127.0.0.1:`port`."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    return kubeconfig


def test_ctrl_c_exits_130_without_a_traceback(tmp_path: Path) -> None:
    """A local server that accepts connections and never answers keeps the plugin waiting until it is interrupted."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        server.settimeout(60)
        port = server.getsockname()[1]
        kubeconfig = loopback_kubeconfig(tmp_path, port)
        # A job started in the background by a non-interactive shell (as CI may run us) inherits SIGINT ignored;
        # give the plugin the default disposition a terminal's foreground command has, or Ctrl-C cannot reach it.
        proc = subprocess.Popen(
            [*PLUGIN, "list", "--kubeconfig", str(kubeconfig)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            preexec_fn=_default_sigint,  # noqa: PLW1509 (single-threaded test process)
        )
        connection, _ = server.accept()
        with connection:
            time.sleep(0.5)
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert out == b""
    assert err == b"error: interrupted\n"


def test_version_with_no_server_prints_the_plugins_line_and_the_error_apart(tmp_path: Path) -> None:
    """As `kubectl version` does: stdout keeps what is known, stderr says why the server's version is not."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    kubeconfig = loopback_kubeconfig(tmp_path, port)
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    asked = [*PLUGIN, "version", "--kubeconfig", str(kubeconfig)]
    table = subprocess.run(asked, check=False, capture_output=True, env=env)
    assert table.returncode == 1
    assert table.stdout.decode().splitlines() == [f"Plugin version: {__version__}"]
    [error] = table.stderr.decode().splitlines()
    assert (
        error.startswith("error: ") and f"127.0.0.1:{port}" in error and error.endswith("check --kubeconfig/--context")
    )
    data = subprocess.run([*asked, "-o", "json"], check=False, capture_output=True, env=env)
    assert data.returncode == 1 and len(data.stderr.decode().splitlines()) == 1
    shown = json.loads(data.stdout)
    assert (shown["plugin"], shown["server"]) == (__version__, None) and shown["problem"].startswith("unknown: ")


class Terminal(io.StringIO):
    """A stream that says it is a terminal, as a pseudo-terminal's file does."""

    def isatty(self) -> bool:
        return True


def test_colour_is_for_a_terminal_only_and_never_with_no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    """A file, a pipe, a stream replaced by something without isatty, or a closed one (None) gets no escape codes;
    NO_COLOR set to anything but the empty string turns colour off (https://no-color.org)."""
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert [color_enabled(stream) for stream in (Terminal(), io.StringIO(), object(), None)] == [
        True,
        False,
        False,
        False,
    ]
    monkeypatch.setenv("NO_COLOR", "")
    assert color_enabled(Terminal()) is True
    monkeypatch.setenv("NO_COLOR", "1")
    assert color_enabled(Terminal()) is False


def test_errors_warnings_and_notes_each_have_their_colour_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Red stops the command, yellow goes on, dim only informs: the user tells them apart at a glance. A name from the
    cluster stays one inert line, coloured or not."""
    monkeypatch.delenv("NO_COLOR", raising=False)
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    error_line("node no\nde not found")
    warn("the server is 0.2.0")
    note("placement team-a/pin-x created")
    assert terminal.getvalue() == (
        "\x1b[31merror: node no\\nde not found\x1b[0m\n"
        "\x1b[33mwarning: the server is 0.2.0\x1b[0m\n"
        "\x1b[2mplacement team-a/pin-x created\x1b[0m\n"
    )


def test_a_pipe_gets_plain_lines_and_no_spinner_even_when_colour_is_forced(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Colour only on a terminal, whatever FORCE_COLOR (which CI systems set, and rich alone would obey) says: a CI log
    gets plain lines, and the console is no terminal there, so a wait draws no spinner frames into the log."""
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("FORCE_COLOR", "1")
    error_line("node gpu-a not found")
    warn("the server is 0.2.0")
    note("placement team-a/pin-x created")
    assert capsys.readouterr() == (
        "",
        "error: node gpu-a not found\nwarning: the server is 0.2.0\nplacement team-a/pin-x created\n",
    )
    console = stderr_console()
    assert (console.is_terminal, console.color_system) == (False, None)


def test_with_stderr_closed_errors_go_nowhere_not_to_stdout(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`list -o json 2>&-`: Python has no sys.stderr then; a warning written to stdout instead would corrupt the JSON
    a script reads there."""
    monkeypatch.setattr(sys, "stderr", None)
    warn("the server is 0.2.0")
    error_line("node gpu-a not found")
    assert capsys.readouterr() == ("", "")


def test_the_result_is_coloured_on_a_terminal_and_plain_in_a_pipe(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """status's bars are coloured markup: on a terminal they show in colour, in a pipe as plain text a script reads."""
    monkeypatch.delenv("NO_COLOR", raising=False)
    emit(Sample(), OutputFormat.table)
    assert capsys.readouterr().out == "hello\n\nNAME    USED\ngpu-0   ██ 10%\n"
    terminal = Terminal()
    monkeypatch.setattr(sys, "stdout", terminal)
    emit(Sample(), OutputFormat.table)
    assert terminal.getvalue() == "hello\n\nNAME    USED\ngpu-0   \x1b[32m██\x1b[0m 10%\n"
