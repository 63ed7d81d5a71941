"""The server's JSON log lines: a client's strings stay inside their JSON string, on one line."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

import pytest

from webhook.logs import JsonFormatter, log_json

# A pod name as an attacker would send it: a line break, a forged next entry, quotes, a non-ASCII line separator.
HOSTILE = 'x"\n{"level": "ERROR", "message": "forged"}\u2028\\'


def formatted(message: str, *args: object, **fields: object) -> str:
    record = logging.LogRecord("webhook.admit", logging.INFO, __file__, 1, message, args, None)
    record.fields = fields
    return JsonFormatter().format(record)


def test_a_hostile_string_stays_inside_its_field_on_one_line() -> None:
    line = formatted("claim of %s not written", HOSTILE, pod=HOSTILE, level="DEBUG")
    assert "\n" not in line and "\u2028" not in line, "one line, in ASCII"
    entry = json.loads(line)
    assert entry["message"] == f"claim of {HOSTILE} not written"
    assert entry["pod"] == HOSTILE
    assert entry["level"] == "INFO", "a field cannot replace the record's own"
    assert set(entry) == {"time", "level", "logger", "message", "pod"}


def test_an_exception_is_one_field_of_the_same_line() -> None:
    try:
        raise ValueError("boom\nsecond line")
    except ValueError:
        record = logging.LogRecord("webhook", logging.ERROR, __file__, 1, "failed", (), exc_info=True)
        record.exc_info = __import__("sys").exc_info()
    line = JsonFormatter().format(record)
    assert len(line.splitlines()) == 1
    assert "ValueError: boom\nsecond line" in json.loads(line)["exception"]


def test_the_time_is_utc_to_the_millisecond_and_a_field_json_cannot_encode_is_written_as_text() -> None:
    record = logging.LogRecord("webhook", logging.INFO, __file__, 1, "moved", (), None)
    record.created = 1_700_000_000.1234
    record.fields = {"at": datetime(2026, 12, 7, tzinfo=UTC), "cards": {"gpu-1"}}
    entry = json.loads(JsonFormatter().format(record))
    assert entry["time"] == "2023-11-14T22:13:20.123+00:00", "UTC with its offset, whatever the host's zone"
    assert entry["at"] == "2026-12-07 00:00:00+00:00"
    assert entry["cards"] == "{'gpu-1'}"


def test_log_json_makes_every_logger_write_json_lines_to_stderr_from_its_level_up(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The server calls it once at start, when the root logger may have a handler already: it goes. (conftest's
    root_logging_restored puts the root logger back afterwards.)"""
    logging.getLogger().addHandler(logging.NullHandler())
    log_json(logging.DEBUG)
    logging.getLogger("webhook.admit").debug("pod %s pinned", "team-a/x")
    log_json(logging.WARNING)
    logging.getLogger("webhook.admit").info("not written")
    logging.getLogger("webhook.defrag").warning("run %s blocked", "r-1")
    lines = capsys.readouterr().err.splitlines()
    assert [(e["level"], e["logger"], e["message"]) for e in map(json.loads, lines)] == [
        ("DEBUG", "webhook.admit", "pod team-a/x pinned"),
        ("WARNING", "webhook.defrag", "run r-1 blocked"),
    ]
