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


def test_the_bounds_and_switches_default_to_the_cautious_side() -> None:
    """A plain `plan` changes nothing, asks before an --apply, waits 300 s and moves at most 20 pods (8 off a node);
    a plain `status` reads once, across namespaces, and lists the 10 most fragmented nodes."""
    verbs = get_command(app).commands  # type: ignore[attr-defined]
    plan = {param.name: param.default for param in verbs["plan"].params}
    assert {name: plan[name] for name in ("compact", "max_moves", "max_moves_per_node", "then_apply", "timeout")} == {
        "compact": False,
        "max_moves": 20,
        "max_moves_per_node": 8,
        "then_apply": False,
        "timeout": 300,
    }
    assert (plan["wait_pod"], plan["yes"]) == (False, False)
    status = {param.name: param.default for param in verbs["status"].params}
    assert {name: status[name] for name in ("top", "watch", "interval", "all_namespaces")} == {
        "top": 10,
        "watch": False,
        "interval": 2.0,
        "all_namespaces": False,
    }
