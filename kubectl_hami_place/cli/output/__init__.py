"""One formatter per `-o` format behind one interface: commands build a `Result`, a formatter renders it."""

from __future__ import annotations

from kubectl_hami_place.cli.output.base import Block, Formatter, Result, Table, Text
from kubectl_hami_place.cli.output.json import JsonFormatter
from kubectl_hami_place.cli.output.table import TableFormatter
from kubectl_hami_place.cli.output.wide import WideFormatter
from kubectl_hami_place.cli.output.yaml import YamlFormatter

FORMATS = ("table", "wide", "json", "yaml")


def formatter_for(name: str, color: bool) -> Formatter:
    """The formatter for an `-o` value (already validated against FORMATS)."""
    if name == "json":
        return JsonFormatter()
    if name == "yaml":
        return YamlFormatter()
    if name == "wide":
        return WideFormatter(color=color)
    return TableFormatter(color=color)


__all__ = ["FORMATS", "Block", "Formatter", "Result", "Table", "Text", "formatter_for"]
