"""The server's log: one JSON object a line, so a string a client sent (a pod name, a user) is escaped by JSON and
can neither start a line of its own nor pass for another field."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime


class JsonFormatter(logging.Formatter):
    """time, level, logger and message, then the record's `fields` (passed as `extra={"fields": {...}}`), then the
    exception's traceback when there is one; non-ASCII and control characters as JSON escapes."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            entry.update((str(key), value) for key, value in fields.items() if key not in entry)
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def log_json(level: int = logging.INFO) -> None:
    """The root logger writes JSON lines to stderr at `level` and above."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    logging.basicConfig(level=level, handlers=[handler], force=True)
