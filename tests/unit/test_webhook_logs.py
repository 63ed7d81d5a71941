"""The server's JSON log lines: a client's strings stay inside their JSON string, on one line."""

from __future__ import annotations

import json
import logging

from webhook.logs import JsonFormatter

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
