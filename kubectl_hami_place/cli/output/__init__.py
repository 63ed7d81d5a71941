"""One formatter per `-o` format behind one interface: commands build a `Result`, a formatter renders it."""

from __future__ import annotations

from collections.abc import Callable

from kubectl_hami_place.cli.output.base import Block, Formatter, Result, Table, Text
from kubectl_hami_place.cli.output.json import JsonFormatter
from kubectl_hami_place.cli.output.table import TableFormatter
from kubectl_hami_place.cli.output.wide import WideFormatter
from kubectl_hami_place.cli.output.yaml import YamlFormatter

_FORMATTERS: dict[str, Callable[[bool], Formatter]] = {
    "table": lambda color: TableFormatter(color=color),
    "wide": lambda color: WideFormatter(color=color),
    "json": lambda _color: JsonFormatter(),
    "yaml": lambda _color: YamlFormatter(),
}
FORMATS = tuple(_FORMATTERS)


def formatter_for(name: str, color: bool) -> Formatter:
    """The formatter for an `-o` value; ValueError for a format that has none (never a silent fallback)."""
    make = _FORMATTERS.get(name)
    if make is None:
        raise ValueError(f"unknown output format {name!r}; use one of {', '.join(FORMATS)}")
    return make(color)


__all__ = ["FORMATS", "Block", "Formatter", "Result", "Table", "Text", "formatter_for"]
