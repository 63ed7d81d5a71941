"""Every verb's --help shows examples of itself (issue 25 item 10: `--help` had none)."""

from __future__ import annotations

import pytest
from typer.main import get_command

from kubectl_hami_place.cli.app import app, run

VERBS = sorted(get_command(app).commands)  # type: ignore[attr-defined]


def test_every_verb_is_listed() -> None:
    assert {"pin", "evict", "status", "list", "delete", "why", "plan", "apply", "defrag", "version"} <= set(VERBS)


@pytest.mark.parametrize("verb", VERBS)
def test_help_has_examples_of_the_verb(verb: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run([verb, "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "Examples:" in text, text
    assert f"kubectl hami-place {verb} " in text or f"kubectl-hami_place {verb} " in text, text
