"""chart/README.md is generated from values.yaml's `# --` comments (packaging/chart_readme.py): the committed one must
be what the generator writes now, and every `# --` comment must document a key."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def generator() -> ModuleType:
    """packaging/chart_readme.py by path (packaging/ is not a package: the name would shadow the PyPI `packaging`)."""
    spec = importlib.util.spec_from_file_location("hami_place_chart_readme", ROOT / "packaging" / "chart_readme.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_chart_readme_is_generated_from_values() -> None:
    assert (ROOT / "chart" / "README.md").read_text() == generator().render(), (
        "chart/README.md is stale: run `make chart-readme`"
    )


def test_every_doc_comment_documents_a_key() -> None:
    values = (ROOT / "chart" / "values.yaml").read_text()
    comments = [line for line in values.splitlines() if line.strip() == "# --" or line.strip().startswith("# -- ")]
    keys = generator().documented_keys(values)
    assert len(keys) == len(comments)
    assert (
        "image.digest",
        "The image by digest (sha256:...), e.g. from the release notes; when set it is used instead of the tag.",
    ) in keys


def test_a_description_spans_its_continuation_lines_and_nests_under_its_parents() -> None:
    text = "a:\n  # -- first\n  # second\n  b: 1\n\n  # not documented\n  c: 2\n# -- top\nd: [1]\n"
    assert generator().documented_keys(text) == [("a.b", "first second"), ("d", "top")]


def test_a_typed_description_names_the_type_a_null_default_does_not() -> None:
    assert generator().typed(None, "(int) Pods of this priority stay.") == ("int", "Pods of this priority stay.")
    assert generator().typed(None, "A name (or none).") == ("string", "A name (or none).")
    assert generator().typed(3, "Moves (per hour).") == ("int", "Moves (per hour).")
