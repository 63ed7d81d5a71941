"""YAML documents of bounded size: a "billion laughs" (aliases nested nine deep, about 1 KB) and a node inside
itself are refused where they are read, by the server (the DefragPolicy, HAMi's device config) and the plugin (a plan
file), before anything walks or prints them; aliases that expand a document a little (`<<: *defaults`) are read."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kubectl_hami_place.cli._apply import load_plan
from kubectl_hami_place.cli._errors import UsageProblem
from kubectl_hami_place.core.defrag.policy import PolicyError, parse_policy
from kubectl_hami_place.core.hami_config import HamiConfigError, parse_device_config
from kubectl_hami_place.core.yaml_doc import EXPANDED_NODES_FREE, load_yaml

LEVELS = [
    "&v0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]",
    *(f"&v{level} [{', '.join([f'*v{level - 1}'] * 9)}]" for level in range(1, 12)),
]
LAUGHS = f"[{', '.join(LEVELS)}]"
"""Eleven levels of nine aliases each: 9**12 scalars once expanded, 623 characters as written."""
HEAD = "apiVersion: scheduling.hami.placement.com/v1alpha1\nkind: DefragPolicy\n"


def test_aliases_that_expand_a_document_past_ten_times_its_nodes_are_refused_marking_where_they_are() -> None:
    """One level a line from line 3: the fifth (66,430 nodes once expanded, the fourth 7,381) is the first past the
    bound, the line an operator is sent to; on one line, the column of that level's anchor."""
    levels = [f"  - &v{level} [{', '.join([f'*v{level - 1}'] * 9)}]" for level in range(1, 12)]
    text = "\n".join(["a: 1", "x:", "  - &v0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]", *levels])
    with pytest.raises(yaml.MarkedYAMLError) as caught:
        load_yaml(text)
    assert caught.value.problem == "its aliases expand 26 nodes to 357449882111, more than 10 times as many"
    assert caught.value.problem_mark is not None and caught.value.problem_mark.line + 1 == 7
    with pytest.raises(yaml.MarkedYAMLError, match="line 1, column 209:"):
        load_yaml(f"x: {LAUGHS}")


@pytest.mark.parametrize(("text", "line"), [("&a [*a]", 1), ("x: 1\na: &a {b: [*a]}", 2)])
def test_a_node_inside_itself_is_refused(text: str, line: int) -> None:
    """safe_load builds a list that holds itself; whatever walks it next recurses without end."""
    with pytest.raises(yaml.MarkedYAMLError) as caught:
        load_yaml(text)
    assert caught.value.problem == "an alias refers to a node that contains it"
    assert caught.value.problem_mark is not None and caught.value.problem_mark.line + 1 == line


def test_shared_and_merged_nodes_are_read_as_safe_load_reads_them() -> None:
    text = "base: &base {cpu: 1, gpu: 2}\nrun: {<<: *base, gpu: 3}\nboth: [*base, *base]\n"
    assert load_yaml(text) == yaml.safe_load(text)
    assert load_yaml("") is None


def test_a_document_its_aliases_expand_up_to_the_free_count_is_read() -> None:
    """Past EXPANDED_NODES_FREE only the factor counts: 99 aliases of a 98-item list expand 103 nodes to 9,904, 103 of
    them to 10,300."""
    hundred = "a: &a [" + ", ".join(["x"] * 98) + "]\nb: [" + ", ".join(["*a"] * 99) + "]\n"
    assert len(load_yaml(hundred)["b"]) == 99
    with pytest.raises(yaml.MarkedYAMLError):
        load_yaml(hundred.replace(", ".join(["*a"] * 99), ", ".join(["*a"] * 103)))
    assert EXPANDED_NODES_FREE == 10_000


def _aliased(items: int, aliases: int) -> str:
    """A flow list: a list of `items` scalars anchored, then `aliases` aliases of it (1 + (1 + aliases) x (1 + items)
    nodes once expanded, items + 2 of its own)."""
    return "[&a [" + ", ".join(["x"] * items) + "]" + ", *a" * aliases + "]"


def test_the_bound_is_the_most_nodes_a_document_may_expand_to() -> None:
    """99 lists of 100 scalars in a list expand 102 nodes to exactly 10,000: read; a node more, refused."""
    assert len(load_yaml(_aliased(100, 98))) == 99
    with pytest.raises(yaml.MarkedYAMLError, match="expand 103 nodes to 10001"):
        load_yaml(_aliased(100, 98)[:-1] + ", y]")


def test_a_long_document_may_expand_to_ten_times_its_own_nodes() -> None:
    """2,001 nodes of its own: aliases may take it to 20,010, past EXPANDED_NODES_FREE."""
    assert len(load_yaml(_aliased(1999, 8))) == 9
    with pytest.raises(yaml.MarkedYAMLError, match="expand 2001 nodes to 22001"):
        load_yaml(_aliased(1999, 10))


def test_the_mark_is_on_the_smallest_node_past_the_bound() -> None:
    """The list under `big` expands to exactly the bound, the document to 4 nodes more: the document is marked."""
    with pytest.raises(yaml.MarkedYAMLError) as caught:
        load_yaml(f"extra: 1\nbig: {_aliased(100, 98)}\n")
    assert caught.value.problem_mark is not None and caught.value.problem_mark.line + 1 == 1


def test_a_policy_of_laughs_is_a_policy_mistake_in_one_line() -> None:
    with pytest.raises(PolicyError) as caught:
        parse_policy(f"{HEAD}namespaces: {{include: {LAUGHS}}}\n")
    assert str(caught.value) == (
        "policy: not YAML or JSON at line 3 (its aliases expand 30 nodes to 357449882115, more than 10 times as many);"
        " fix the document's syntax"
    )


def test_a_device_config_of_laughs_is_a_config_error() -> None:
    with pytest.raises(HamiConfigError) as caught:
        parse_device_config(f"nvidia: {{resourceCountName: {LAUGHS}}}\n")
    assert str(caught.value) == "device-config.yaml is not valid YAML at line 1: fix the ConfigMap's text"


def test_a_plan_file_of_laughs_is_a_usage_problem(tmp_path: Path) -> None:
    """The plan's goal and each move's reason go through str(): the file was 1 KB and the plugin grew to 4 GB."""
    path = tmp_path / "plan.yaml"
    path.write_text(f"moves: []\ngoal: {LAUGHS}\n", encoding="utf-8")
    with pytest.raises(UsageProblem) as caught:
        load_plan(str(path))
    assert caught.value.lines()[0].startswith(f"{path} line 2 is not JSON or YAML: its aliases expand ")
