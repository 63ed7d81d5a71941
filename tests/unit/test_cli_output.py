"""The -o formatters and the presentation helpers, on plain results: no cluster involved."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
import yaml

from kubectl_hami_place.cli._common import OutputFormat
from kubectl_hami_place.cli._list import PlacementList
from kubectl_hami_place.cli._present import age, bar, examples, placement_columns, placement_row, selector_text
from kubectl_hami_place.cli._version import Versions
from kubectl_hami_place.cli.output import FORMATS, Block, Table, Text, formatter_for
from kubectl_hami_place.cli.output.printable import printable
from kubectl_hami_place.core.versions import ServerVersion


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


LONG_MESSAGE = " ".join(["retrying"] * 35)
LONG_LINE = " ".join(["waiting"] * 60)


@dataclass(frozen=True)
class Styled:
    """Indented styled text, an empty table with no empty line, a titled table with a styled column, a markup column,
    cluster text that looks like markup, a long message, then plain text with a number."""

    def to_data(self) -> Any:
        return {}

    def to_blocks(self) -> list[Block]:
        return [
            Text(("  2 of 4 cards free :x:",), style="yellow"),
            Table(columns=("A",), rows=()),
            Table(
                columns=("Card", "Used", "Message"),
                rows=(("gpu-0", "[green]█[/] 10%", "[red] stays text"), ("gpu-10", "", LONG_MESSAGE)),
                title="Node n1",
                styles={"Card": "cyan", "Used": "markup"},
            ),
            Text(("plain 42", LONG_LINE)),
        ]


def test_a_table_renders_exactly_as_kubectl_columns_with_and_without_color() -> None:
    """Scripts cut these columns with awk and people read the colors: three spaces between columns, a long message
    not wrapped at a terminal's 80 columns nor a text line at any width, indentation kept, `:x:` and `[red]` from
    the cluster printed as typed, and color only where a block or a column asks for it."""
    plain = (
        "  2 of 4 cards free :x:\n"
        "\n"
        "Node n1\n"
        "CARD     USED    MESSAGE\n"
        "gpu-0    █ 10%   [red] stays text\n"
        f"gpu-10           {LONG_MESSAGE}\n"
        "\n"
        f"plain 42\n{LONG_LINE}\n"
    )
    colored = (
        "\x1b[33m  2 of 4 cards free :x:\x1b[0m\n"
        "\n"
        "\x1b[1mNode n1\x1b[0m\n"
        "CARD     USED    MESSAGE\n"
        "\x1b[36mgpu-0\x1b[0m    \x1b[32m█\x1b[0m 10%   [red] stays text\n"
        f"\x1b[36mgpu-10\x1b[0m           {LONG_MESSAGE}\n"
        "\n"
        f"plain 42\n{LONG_LINE}\n"
    )
    assert formatter_for("wide", color=False).render(Styled()) == plain
    assert formatter_for("wide", color=True).render(Styled()) == colored
    assert formatter_for("table", color=True).render(Styled()) == colored


def test_a_row_wider_than_the_render_width_keeps_every_column() -> None:
    """A placement's status message can run past 400 characters; the other columns must still show, at their own
    widths, not shrink to nothing beside it."""
    message = "m" * 420
    block = Table(columns=("Card", "Used", "Message"), rows=(("gpu-0", "10%", message), ("gpu-1", "", "short")))

    class Wide:
        def to_data(self) -> Any:
            return {}

        def to_blocks(self) -> list[Block]:
            return [block]

    assert formatter_for("wide", color=False).render(Wide()) == (
        f"CARD    USED   MESSAGE\ngpu-0   10%    {message}\ngpu-1          short\n"
    )


def test_yaml_is_block_style_in_the_results_order_with_unicode_as_written() -> None:
    """`-o yaml` reads like `kubectl get -o yaml`: keys in the order the result built them, nested lists as blocks,
    and a model or a message with non-ASCII letters as written, not as escapes."""
    assert formatter_for("yaml", color=False).render(Sample()) == "b: 1\na:\n- x: é\n"


def test_age_at_each_unit_boundary() -> None:
    """An age flips unit exactly where kubectl's does, so `list` and `kubectl get` agree on the same object; a clock
    a little behind the server's shows 0s, not a negative age."""
    now = datetime(2026, 1, 2, 12, 0, 0, tzinfo=UTC)
    cases = {
        "2026-01-02T12:00:05Z": "0s",
        "2026-01-02T12:00:00Z": "0s",
        "2026-01-02T11:58:01Z": "119s",
        "2026-01-02T11:58:00Z": "2m",
        "2026-01-02T11:00:01Z": "59m",
        "2026-01-02T11:00:00Z": "1h",
        "2026-01-02T10:00:00Z": "2h",
        "2026-01-02T04:30:00Z": "7h30m",
        "2026-01-02T03:30:00Z": "8h",
        "2025-12-31T12:00:01Z": "47h",
        "2025-12-31T12:00:00Z": "2d",
        "2024-01-04T12:00:00Z": "729d",
        "2024-01-03T12:00:00Z": "2y",
        "2023-04-08T12:00:00Z": "2y",
        "2022-12-31T12:00:00Z": "3y",
    }
    assert {stamp: age(stamp, now) for stamp in cases} == cases
    assert age("2999-01-01T00:00:00Z") == "0s", "without `now`, the age is taken from the current UTC time"


def test_bar_whole_markup_at_each_fill_level() -> None:
    """The color turns yellow at 70% and red at 90% used, a card used beyond its size shows full (not a longer
    bar), and an unused card shows no filled cell."""
    assert bar(0, 10, width=10) == "[green][/][dim]░░░░░░░░░░[/]   0%"
    assert bar(7, 10, width=10) == "[yellow]███████[/][dim]░░░[/]  70%"
    assert bar(9, 10, width=10) == "[red]█████████[/][dim]░[/]  90%"
    assert bar(50000, 40960, width=10) == "[red]██████████[/][dim][/] 100%"
    assert bar(1, 1, width=4) == "[red]████[/][dim][/] 100%"


def test_examples_paragraph_keeps_one_command_a_paragraph() -> None:
    """Click rewraps a help paragraph: each command alone in its paragraph is what keeps it on its own line."""
    assert examples("kubectl hami-place list", "kubectl hami-place status") == (
        "\n\nExamples:\n\n  kubectl hami-place list\n\n  kubectl hami-place status"
    )


def test_a_selector_that_does_not_parse_is_shown_raw() -> None:
    """A stored selector this version cannot read is still shown, not hidden or replaced by 'None'."""
    selector = {"matchExpressions": [{"key": "tier", "operator": "Near"}]}
    assert selector_text(selector) == str(selector)


def test_placement_row_whole_rows() -> None:
    """`list` prints these cells under fixed headers: each must come from its own field, and a field the object
    lacks shows as empty or '-', never as 'None'."""
    obj = {
        "metadata": {"name": "pin-x", "namespace": "team-a", "creationTimestamp": "2999-01-01T00:00:00Z"},
        "spec": {
            "reqID": "abcdefgh",
            "nodeName": "gpu-a100-0",
            "gpuDevices": ["gpu-0"],
            "podSelector": {"matchLabels": {"app": "x"}},
        },
        "status": {"phase": "Bound", "consumedBy": {"name": "train-0"}, "message": "bound to train-0"},
    }
    assert placement_row(obj, with_namespace=True) == (
        "team-a",
        "pin-x",
        "abcdefgh",
        "gpu-a100-0",
        "gpu-0",
        "Bound",
        "train-0",
        "-",
        "0s",
        "app=x",
        "bound to train-0",
    )
    assert placement_row({}, with_namespace=True) == ("", "", "", "", "", "Pending", "-", "-", "<unknown>", "", "")
    pending = {"spec": {"evictPod": "old"}}
    assert placement_row(pending, with_namespace=False) == ("", "", "", "", "Pending", "-", "old", "<unknown>", "", "")
    assert placement_columns(False) == (
        "Name",
        "ReqID",
        "Node",
        "GPUs",
        "Phase",
        "Pod",
        "Evict",
        "Age",
        "Selector",
        "Message",
    )


def rendered(result: Any, output: str = "table") -> str:
    """`result` as `-o output` prints it, without colour."""
    return formatter_for(output, color=False).render(result)


def test_list_prints_a_kubectl_list_and_says_where_it_found_nothing() -> None:
    """`list -o yaml` is fed back to kubectl, so it is a v1 List of the placements as stored; the table has the
    namespace column only across namespaces, and an empty answer names where it looked (namespace, -l)."""
    placement = {
        "metadata": {"name": "pin-x", "namespace": "team-a"},
        "spec": {"reqID": "abcdefgh", "nodeName": "gpu-a100-0", "gpuDevices": ["gpu-0"]},
        "status": {"phase": "Bound", "consumedBy": {"name": "train-0"}},
    }
    across = PlacementList((placement,), all_namespaces=True, namespace="")
    assert across.to_data() == {"apiVersion": "v1", "kind": "List", "items": [placement]}
    assert rendered(across) == (
        "NAMESPACE   NAME    REQID      NODE         GPUS    PHASE   POD       EVICT   AGE\n"
        "team-a      pin-x   abcdefgh   gpu-a100-0   gpu-0   Bound   train-0   -       <unknown>\n"
    )
    assert rendered(PlacementList((placement,), all_namespaces=False, namespace="team-a"), "wide") == (
        "NAME    REQID      NODE         GPUS    PHASE   POD       EVICT   AGE         SELECTOR   MESSAGE\n"
        "pin-x   abcdefgh   gpu-a100-0   gpu-0   Bound   train-0   -       <unknown>\n"
    )
    assert [
        rendered(PlacementList((), all_namespaces=every, namespace=namespace, labels=labels))
        for every, namespace, labels in ((False, "team-a", ""), (False, "team-a", "team=a"), (True, "", ""))
    ] == [
        "No placements in namespace team-a.\n",
        "No placements in namespace team-a with labels team=a.\n",
        "No placements in any namespace.\n",
    ]


def test_version_prints_both_versions_or_why_the_servers_is_unknown() -> None:
    """A user compares the two lines; a script reads -o json, where an unknown server is null and the reason is said.
    When the cluster did not answer, the table keeps the plugin's line alone (the error goes to stderr)."""
    answered = Versions("0.2.0", ServerVersion("0.3.0", "webhook hami-place/hami-place-webhook"), "")
    missing = Versions("0.2.0", None, "not found")
    unasked = Versions("0.2.0", None, "unknown: cannot reach the API server", asked=False)
    assert [versions.to_data() for versions in (answered, missing, unasked)] == [
        {"plugin": "0.2.0", "server": {"version": "0.3.0", "source": "webhook hami-place/hami-place-webhook"}},
        {"plugin": "0.2.0", "server": None, "problem": "not found"},
        {"plugin": "0.2.0", "server": None, "problem": "unknown: cannot reach the API server"},
    ]
    assert [rendered(versions) for versions in (answered, missing, unasked)] == [
        "Plugin version: 0.2.0\nServer version: 0.3.0 (webhook hami-place/hami-place-webhook)\n",
        "Plugin version: 0.2.0\nServer version: not found\n",
        "Plugin version: 0.2.0\n",
    ]
