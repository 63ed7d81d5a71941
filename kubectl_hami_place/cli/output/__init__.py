"""One formatter per `-o` format behind one interface: commands build a `Result`, a formatter renders it.

Each formatter's module (rich's tables, yaml, orjson) is imported when its format is asked for, not when the CLI
loads: `--help` and TAB completion never render a result.
"""

from __future__ import annotations

from kubectl_hami_place.cli.output.base import Block, Formatter, Result, Table, Text

FORMATS = ("table", "wide", "json", "yaml")


def formatter_for(name: str, color: bool) -> Formatter:
    """The formatter for an `-o` value; ValueError for a format that has none (never a silent fallback)."""
    if name == "table":
        from kubectl_hami_place.cli.output.table import TableFormatter

        return TableFormatter(color=color)
    if name == "wide":
        from kubectl_hami_place.cli.output.wide import WideFormatter

        return WideFormatter(color=color)
    if name == "json":
        from kubectl_hami_place.cli.output.json import JsonFormatter

        return JsonFormatter()
    if name == "yaml":
        from kubectl_hami_place.cli.output.yaml import YamlFormatter

        return YamlFormatter()
    raise ValueError(f"unknown output format {name!r}; use one of {', '.join(FORMATS)}")


__all__ = ["FORMATS", "Block", "Formatter", "Result", "Table", "Text", "formatter_for"]
