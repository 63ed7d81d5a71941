"""The -o formatters and the presentation helpers, on plain results: no cluster involved."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
import yaml

from kubectl_hami_place.cli._common import OutputFormat
from kubectl_hami_place.cli._present import age, bar, placement_columns, placement_row, selector_text
from kubectl_hami_place.cli.output import FORMATS, Block, Table, Text, formatter_for
from kubectl_hami_place.cli.output.printable import printable


@dataclass(frozen=True)
class Sample:
    """A result with one text block and one table carrying a wide column and a markup column."""

    def to_data(self) -> Any:
        return {"b": 1, "a": [{"x": "é"}]}

    def to_blocks(self) -> list[Block]:
        return [
            Text(("hello",)),
            Table(
                columns=("Name", "Used", "Extra"),
                rows=(("gpu-0", "[green]██[/] 10%", "more"),),
                wide=frozenset({"Extra"}),
                styles={"Used": "markup"},
            ),
        ]


def test_json_keeps_key_order_and_unicode() -> None:
    text = formatter_for("json", color=False).render(Sample())
    assert json.loads(text) == {"b": 1, "a": [{"x": "é"}]}
    assert text.index('"b"') < text.index('"a"')
    assert "é" in text


def test_yaml_round_trips() -> None:
    text = formatter_for("yaml", color=False).render(Sample())
    assert yaml.safe_load(text) == {"b": 1, "a": [{"x": "é"}]}
    assert text.startswith("b: 1")


def test_table_hides_wide_columns_and_wide_shows_them() -> None:
    table = formatter_for("table", color=False).render(Sample())
    wide = formatter_for("wide", color=False).render(Sample())
    assert "EXTRA" not in table and "more" not in table
    assert "EXTRA" in wide and "more" in wide
    assert table.splitlines()[0] == "hello"
    assert table.splitlines()[1] == ""
    assert table.splitlines()[2].split() == ["NAME", "USED"]


def test_table_without_color_has_no_escape_codes_and_renders_markup_as_text() -> None:
    text = formatter_for("table", color=False).render(Sample())
    assert "\x1b[" not in text
    assert "██ 10%" in text and "[green]" not in text


def test_table_with_color_emits_ansi() -> None:
    assert "\x1b[" in formatter_for("table", color=True).render(Sample())


def test_empty_table_prints_its_empty_line_or_nothing() -> None:
    @dataclass(frozen=True)
    class Empty:
        empty: str

        def to_data(self) -> Any:
            return []

        def to_blocks(self) -> list[Block]:
            return [Table(columns=("A",), rows=(), empty=self.empty)]

    assert formatter_for("table", color=False).render(Empty("No placements.")) == "No placements.\n"
    assert formatter_for("table", color=False).render(Empty("")) == ""


def test_every_format_of_o_has_its_own_formatter() -> None:
    assert [choice.value for choice in OutputFormat] == list(FORMATS)
    rendered = {name: formatter_for(name, color=False).render(Sample()) for name in FORMATS}
    assert json.loads(rendered["json"]) == Sample().to_data()
    assert yaml.safe_load(rendered["yaml"]) == Sample().to_data() and not rendered["yaml"].startswith("{")
    assert rendered["table"].splitlines()[2].split() == ["NAME", "USED"]
    assert rendered["wide"].splitlines()[2].split() == ["NAME", "USED", "EXTRA"]


def test_an_unknown_format_is_refused_not_rendered_as_a_table() -> None:
    with pytest.raises(ValueError, match="unknown output format 'xml'; use one of table, wide, json, yaml"):
        formatter_for("xml", color=False)


def test_age_reads_like_kubectl() -> None:
    now = datetime(2026, 1, 2, 12, 0, 0, tzinfo=UTC)
    assert age("2026-01-02T11:59:15Z", now) == "45s"
    assert age("2026-01-02T11:30:00Z", now) == "30m"
    assert age("2026-01-02T09:30:00Z", now) == "2h30m"
    assert age("2026-01-01T00:00:00Z", now) == "36h"
    assert age("2025-12-20T12:00:00Z", now) == "13d"
    assert age(None, now) == "<unknown>"
    assert age("yesterday", now) == "<unknown>"


def test_bar_fill_and_percentage() -> None:
    assert bar(0, 40960).endswith("  0%")
    assert bar(40960, 40960).endswith("100%")
    assert bar(1, 40960).count("█") == 1
    assert bar(20480, 40960, width=10).count("█") == 5
    assert "[red]" in bar(39000, 40960)
    assert "[green]" in bar(100, 40960)
    assert bar(5, 0).endswith("  0%")


def test_selector_text_uses_kubectl_syntax() -> None:
    selector = {
        "matchLabels": {"app": "train"},
        "matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["a", "b"]},
            {"key": "legacy", "operator": "DoesNotExist"},
        ],
    }
    assert selector_text(selector) == "app=train,tier in (a,b),!legacy"
    assert selector_text(None) == ""


def test_placement_row_matches_columns() -> None:
    obj = {
        "metadata": {"name": "pin-x", "namespace": "team-a", "creationTimestamp": None},
        "spec": {
            "reqID": "abcdefgh",
            "nodeName": "gpu-a100-0",
            "gpuDevices": ["gpu-0", "gpu-1"],
            "evictPod": "old",
            "podSelector": {"matchLabels": {"app": "x"}},
        },
        "status": {"phase": "Evicting", "eviction": {"pod": "old", "result": "Blocked"}},
    }
    row = placement_row(obj, with_namespace=True)
    assert len(row) == len(placement_columns(True))
    values = dict(zip(placement_columns(True), row, strict=True))
    assert values["Namespace"] == "team-a"
    assert values["GPUs"] == "gpu-0,gpu-1"
    assert values["Phase"] == "Evicting"
    assert values["Evict"] == "old (Blocked)"
    assert values["Selector"] == "app=x"
    assert placement_row({"metadata": {"name": "p"}, "spec": {}}, with_namespace=False)[4] == "Pending"


@dataclass(frozen=True)
class FromTheCluster:
    """Names, a title and a text line as the cluster may send them: with escape sequences and newlines."""

    def to_data(self) -> Any:
        return {}

    def to_blocks(self) -> list[Block]:
        return [
            Text(("Leader: \x1b]0;PWNED\x07evil",)),
            Table(
                columns=("Name", "Used"),
                rows=(("abcde\x1b[2J\nFAKE", "[green]x\x9b31m[/]"),),
                styles={"Used": "markup"},
                title="Node \x1b[31mred",
            ),
        ]


@pytest.mark.parametrize("color", [False, True])
def test_a_table_writes_the_clusters_control_characters_as_escapes_never_raw(color: bool) -> None:
    """rich passes ESC, CSI and OSC through: a pod name or an annotation could clear the screen or fake a line."""
    text = formatter_for("wide", color=color).render(FromTheCluster())
    shown = text.replace("\x1b[0m", "").replace("\x1b[1m", "").replace("\x1b[32m", "")  # our own styles
    assert "\x1b]" not in shown and "\x1b[2J" not in shown and "\x9b" not in shown and "\x07" not in shown
    assert "\x1b[31mred" not in shown
    assert "abcde\\x1b[2J\\nFAKE" in text and "Leader: \\x1b]0;PWNED\\x07evil" in text
    assert len(text.splitlines()) == 5, "text, blank, title, header, the row: a newline in a name makes no line"
    assert printable("plain é 日本") == "plain é 日本"
