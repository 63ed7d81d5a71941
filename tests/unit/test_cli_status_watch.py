"""`status --watch` to a stream (a pipe, a file, -o json|yaml): stdout holds the frames alone, an API failure is an
`error:` line on stderr, and the watch goes on."""

from __future__ import annotations

import io
import json
import re
from typing import Any

import pytest

from kubectl_hami_place.cli import _status
from kubectl_hami_place.cli._common import OutputFormat
from kubectl_hami_place.cli.output import Block
from kubectl_hami_place.kube.errors import KubeError


class Frame:
    """One status frame's data."""

    def to_data(self) -> Any:
        return {"nodes": 1}

    def to_blocks(self) -> list[Block]:
        return []


def interrupted_after(sleeps: int, monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The watch's `time.sleep`: each interval recorded, and Ctrl-C at the `sleeps`-th instead of waiting."""
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        if len(slept) == sleeps:
            raise KeyboardInterrupt

    monkeypatch.setattr(_status.time, "sleep", sleep)
    return slept


def test_a_watch_to_a_stream_writes_frames_on_stdout_and_failures_on_stderr(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    reads = iter([KubeError("cannot reach the API server\x1b[2J"), Frame(), KubeError("timed out"), Frame()])

    def read() -> Frame:
        found = next(reads)
        if isinstance(found, KubeError):
            raise found
        return found

    slept = interrupted_after(4, monkeypatch)
    assert _status._watch(read, OutputFormat.json, 1.0) == 0
    out, err = capsys.readouterr()
    frame = '{\n  "nodes": 1\n}\n'
    assert out == f"{frame}\n{frame}"
    assert json.loads(frame) == {"nodes": 1}
    assert err.splitlines() == ["error: cannot reach the API server\\x1b[2J", "error: timed out"]
    assert slept == [1.0] * 4


class Terminal(io.StringIO):
    """A stdout that is a terminal."""

    def isatty(self) -> bool:
        return True


def test_a_watch_on_a_terminal_redraws_each_frame_with_no_color_set_too(monkeypatch: pytest.MonkeyPatch) -> None:
    # NO_COLOR takes the colour away, not the terminal: the view is drawn at each read, not only at Ctrl-C.
    terminal = Terminal()
    monkeypatch.setattr(_status.sys, "stdout", terminal)
    monkeypatch.setenv("NO_COLOR", "1")
    drawn_before_second_read: list[bool] = []

    def read() -> Frame:
        drawn_before_second_read.append("kubectl hami-place status" in terminal.getvalue())
        return Frame()

    slept = interrupted_after(2, monkeypatch)
    assert _status._watch(read, OutputFormat.table, 1.0) == 0
    assert slept == [1.0, 1.0]
    assert drawn_before_second_read == [False, True]
    heads = re.findall(
        r"Every 1s: kubectl hami-place status  [0-9]{2}:[0-9]{2}:[0-9]{2} UTC  \(Ctrl-C to stop\)", terminal.getvalue()
    )
    assert heads, "each frame opens with the interval, the command and the UTC time of its read"
    assert re.findall(r"\x1b\[[0-9;]*m", terminal.getvalue()) == [], "no colour, no dim: only the redraw's codes"


def test_a_yaml_watch_is_a_stream_of_documents(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`status -w -o yaml | yq` reads one document per frame: they are separated by `---`, the first one is not."""
    interrupted_after(2, monkeypatch)
    assert _status._watch(Frame, OutputFormat.yaml, 1.0) == 0
    assert capsys.readouterr().out == "nodes: 1\n---\nnodes: 1\n"


def test_a_failed_read_on_a_terminal_is_drawn_as_its_inert_error_line() -> None:
    """The redraw goes on after an API failure; its text must not move the cursor or clear the screen."""

    def read() -> Frame:
        raise KubeError("timed out\x1b[2J")

    assert _status._frame(read, str) == "error: timed out\\x1b[2J\n"


def test_a_json_watch_on_a_terminal_streams_documents_instead_of_redrawing(monkeypatch: pytest.MonkeyPatch) -> None:
    """`status -w -o json` read by a person is still JSON, one document per read at the interval, never a redraw."""
    terminal = Terminal()
    monkeypatch.setattr(_status.sys, "stdout", terminal)
    slept = interrupted_after(2, monkeypatch)
    assert _status._watch(Frame, OutputFormat.json, 2.5) == 0
    frame = '{\n  "nodes": 1\n}\n'
    assert (terminal.getvalue(), slept) == (f"{frame}\n{frame}", [2.5, 2.5])
