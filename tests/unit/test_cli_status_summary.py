"""`status`'s fleet summary as each -o format prints it, and when it is chosen instead of one table per node."""

from __future__ import annotations

import json

import yaml
from test_core_fleet import NOW, fleet

from kubectl_hami_place.cli._status import SUMMARY_ABOVE, StatusSummary, shows_summary
from kubectl_hami_place.cli.output import formatter_for
from kubectl_hami_place.core.fleet import summarize_fleet


def result() -> StatusSummary:
    return StatusSummary(summarize_fleet(fleet(), top=1), {"Consumed": 2}, NOW, "computed from the API server", False)


def test_the_summary_is_chosen_above_the_node_count_unless_nodes_are_named_or_the_flag_says() -> None:
    assert not shows_summary(None, False, SUMMARY_ABOVE)
    assert shows_summary(None, False, SUMMARY_ABOVE + 1)
    assert not shows_summary(None, True, SUMMARY_ABOVE + 1)
    assert shows_summary(True, True, 1)
    assert not shows_summary(False, False, 5000)


def test_table_has_a_row_per_card_type_a_total_and_the_most_fragmented_nodes() -> None:
    lines = formatter_for("table", color=False).render(result()).splitlines()
    assert lines[0] == "4 GPU nodes (3 usable), 7 cards (6 open, 3 whole free)"
    [h100] = [line for line in lines if line.startswith("NVIDIA-H100-80GB ")]
    assert h100.split()[1:4] == ["2", "3", "2"] and "121,856 MiB" in h100
    [total] = [line for line in lines if line.startswith("all ")]
    assert total.split()[1:3] == ["4", "7"]
    assert "Most fragmented nodes (1 of 2 with stranded memory)" in lines
    [worst] = [line for line in lines if line.startswith("h0 ")]
    assert "80,896 MiB" in worst
    assert "Placements: 2 Consumed (kubectl hami-place list -A)" in lines
    assert lines[-1] == "Source: computed from the API server"


def test_json_and_yaml_carry_the_same_document() -> None:
    document = json.loads(formatter_for("json", color=False).render(result()))
    assert yaml.safe_load(formatter_for("yaml", color=False).render(result())) == document
    assert document["generatedAt"] == "2026-12-01T12:00:00Z"
    assert document["summary"]["total"]["strandedMiB"] == 30720 + 121856
    assert [node["name"] for node in document["summary"]["mostFragmented"]] == ["h0"]
    assert document["placements"] == {"Consumed": 2}
