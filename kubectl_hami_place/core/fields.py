"""Fields of API objects and annotations: read leniently (objects may carry nulls anywhere, and what a user wrote may
not have the shape the API documents, so a malformed part reads as missing), times written as Kubernetes writes them."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any


def as_mapping(value: object) -> Mapping[str, Any]:
    """The value when it is a mapping, else an empty one (missing or malformed metadata reads as empty)."""
    # A decoded object is a dict, a missing field None: both checked first, as the ABC check costs several times more
    # (40,000 pods a status, a snapshot).
    if type(value) is dict:
        return value
    return {} if value is None or not isinstance(value, Mapping) else value


def comma_list(value: str) -> list[str]:
    """A comma-separated annotation value as HAMi reads its card and policy lists: entries trimmed, blanks dropped."""
    return [item.strip() for item in value.split(",") if item.strip()]


def rfc3339(moment: datetime) -> str:
    """A time as Kubernetes writes metav1.Time: UTC, seconds, `Z` (naive times are taken as UTC)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def go_text(text: str) -> str:
    """Text as Go decodes a JSON or YAML escape of a lone UTF-16 surrogate (`\\ud800`): U+FFFD. Python keeps the
    surrogate, which no UTF-8 encoder (orjson, a log line, an HTTP answer) then takes."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


_BEYOND_INT64 = 10**19
"""Past every int64 (whose largest is 9,223,372,036,854,775,807): what a longer decimal is read as."""


def go_decimal(text: str) -> int | None:
    """A decimal as Go's strconv.ParseInt reads its digits (an optional sign, ASCII digits only), None when it is not
    one. One of more than 19 digits (leading zeros aside) is read as past any int64 without reading the rest: Python
    refuses int() of more than 4,300 digits, and a tenant may write that many."""
    body = text[1:] if text[:1] in ("+", "-") else text
    if not body or not body.isascii() or not body.isdigit():
        return None
    significant = body.lstrip("0") or "0"
    value = _BEYOND_INT64 if len(significant) > len(str(_BEYOND_INT64)) - 1 else int(significant)
    return -value if text.startswith("-") else value
