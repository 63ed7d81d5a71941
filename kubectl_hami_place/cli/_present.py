"""Small presentation helpers shared by the verbs: ages, memory bars, selector text, placement rows."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from kubectl_hami_place.core.errors import ModelError

BAR_WIDTH = 20


def examples(*commands: str) -> str:
    """A help text's Examples paragraph: one command a paragraph, so the help keeps each on its own line."""
    return "\n\nExamples:\n\n" + "\n\n".join(f"  {command}" for command in commands)


def age(timestamp: str | None, now: datetime | None = None) -> str:
    """kubectl's short age ("45s", "12m", "3h", "4d") of an RFC 3339 timestamp; "<unknown>" when absent."""
    if not timestamp:
        return "<unknown>"
    try:
        then = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return "<unknown>"
    seconds = int(((now or datetime.now(UTC)) - then).total_seconds())
    if seconds < 0:
        return "0s"
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 48:
        return f"{hours}h{minutes % 60}m" if hours < 8 and minutes % 60 else f"{hours}h"
    days = hours // 24
    return f"{days}d" if days < 365 * 2 else f"{days // 365}y"


def clock(moment: datetime) -> str:
    """A time as `2026-12-01 12:00:00Z`: in UTC, as the server's logs and other replicas say it."""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def bar(used: int, total: int, width: int = BAR_WIDTH) -> str:
    """A memory bar as rich markup: filled share in green/yellow/red by fill level, then the percentage."""
    share = 0.0 if total <= 0 else min(max(used / total, 0.0), 1.0)
    filled = round(share * width)
    if used > 0 and filled == 0:
        filled = 1
    percent = f"{round(share * 100):>3d}%"
    style = "green" if share < 0.7 else "yellow" if share < 0.9 else "red"
    return f"[{style}]{'█' * filled}[/][dim]{'░' * (width - filled)}[/] {percent}"


def selector_text(selector: dict[str, Any] | None) -> str:
    """A stored label selector in kubectl's `-l` syntax; the raw form when it does not parse."""
    from kubectl_hami_place.core.selectors import selector_from_dict

    try:
        return str(selector_from_dict(selector))
    except ModelError:
        return str(selector)


def placement_row(obj: dict[str, Any], with_namespace: bool) -> tuple[str, ...]:
    """One row for the placement columns (see PLACEMENT_COLUMNS)."""
    metadata = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    eviction = status.get("eviction") or {}
    evict = spec.get("evictPod") or ""
    if evict and eviction.get("result"):
        evict = f"{evict} ({eviction['result']})"
    row = (
        str(metadata.get("name", "")),
        str(spec.get("reqID", "")),
        str(spec.get("nodeName", "")),
        ",".join(spec.get("gpuDevices") or []),
        str(status.get("phase") or "Pending"),
        str((status.get("consumedBy") or {}).get("name", "")) or "-",
        evict or "-",
        age(metadata.get("creationTimestamp")),
        selector_text(spec.get("podSelector")),
        str(status.get("message", "")),
    )
    return (str(metadata.get("namespace", "")), *row) if with_namespace else row


PLACEMENT_COLUMNS = ("Name", "ReqID", "Node", "GPUs", "Phase", "Pod", "Evict", "Age", "Selector", "Message")
PLACEMENT_WIDE = frozenset({"Selector", "Message"})


def placement_columns(with_namespace: bool) -> tuple[str, ...]:
    """Column names matching `placement_row`."""
    return ("Namespace", *PLACEMENT_COLUMNS) if with_namespace else PLACEMENT_COLUMNS
