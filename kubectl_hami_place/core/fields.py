"""Fields of API objects and annotations: read leniently (objects may carry nulls anywhere, and what a user wrote may
not have the shape the API documents, so a malformed part reads as missing), times written as Kubernetes writes them."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any


def as_mapping(value: object) -> Mapping[str, Any]:
    """The value when it is a mapping, else an empty one (missing or malformed metadata reads as empty)."""
    # A decoded object is a dict: checked first, as the ABC check costs several times more (40,000 pods a status).
    return value if type(value) is dict or isinstance(value, Mapping) else {}


def comma_list(value: str) -> list[str]:
    """A comma-separated annotation value as HAMi reads its card and policy lists: entries trimmed, blanks dropped."""
    return [item.strip() for item in value.split(",") if item.strip()]


def rfc3339(moment: datetime) -> str:
    """A time as Kubernetes writes metav1.Time: UTC, seconds, `Z` (naive times are taken as UTC)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
