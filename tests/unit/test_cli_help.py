"""Every verb's --help shows examples of itself (issue 25 item 10: `--help` had none)."""

from __future__ import annotations

import pytest
import typer
from typer.main import get_command
from typer.testing import CliRunner

from kubectl_hami_place.cli._errors import EXIT_USAGE
from kubectl_hami_place.cli._typer_app import Command, Group, typer_app
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


@pytest.mark.parametrize("verb", ["pin", "evict", "delete", "why", "plan", "apply", "completion", "defrag"])
def test_a_verb_run_bare_prints_its_help_on_stderr_and_exits_2(verb: str, capsys: pytest.CaptureFixture[str]) -> None:
    """`kubectl hami-place pin` with nothing after it is a usage error, as in kubectl and click 8.2: the same help,
    byte for byte (no blank line added at its end), on stderr, and exit 2, so a script does not take it for success."""
    assert run([verb, "--help"]) == 0
    asked = capsys.readouterr()
    assert run([verb]) == EXIT_USAGE
    bare = capsys.readouterr()
    assert (bare.out, bare.err) == ("", asked.out)


def test_status_help_says_it_shows_every_namespace_without_n(capsys: pytest.CaptureFixture[str]) -> None:
    """status lists the placements of every namespace unless -n narrows it; the other verbs use the context's."""
    assert run(["status", "--help"]) == 0
    status = " ".join(capsys.readouterr().out.split())
    assert "-n, --namespace <str> Namespace (default: all namespaces)." in status, status
    assert run(["list", "--help"]) == 0
    assert "-n, --namespace <str> Namespace (default: the context's)." in " ".join(capsys.readouterr().out.split())


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


def demo_app() -> typer.Typer:
    """A group built as the plugin builds its own (the plugin, defrag): two verbs (typer runs a lone one as the app
    itself), one of which fails."""
    demo = typer_app("demo", "Demo the plugin's settings.")

    @demo.command("hello", cls=Command)
    def hello() -> None:
        """Say hello."""
        raise RuntimeError("disk full")

    @demo.command("bye", cls=Command)
    def bye() -> None:
        """Say bye."""

    return demo


def test_a_group_answers_h_and_a_bare_call_with_plain_help_and_offers_no_typer_extras() -> None:
    """As kubectl: -h is help, a group run bare shows its help, and the help is click's plain text (typer's rich boxes
    load rich, docs/performance.md); typer's --install-completion would compete with the plugin's completion verb."""
    help_text = (
        "Usage: demo [OPTIONS] COMMAND [ARGS]...\n\n"
        "  Demo the plugin's settings.\n\n"
        "Options:\n"
        "  -h, --help  Show this message and exit.\n\n"
        "Commands:\n"
        "  hello  Say hello.\n"
        "  bye    Say bye.\n"
    )
    runner = CliRunner()
    asked = runner.invoke(demo_app(), ["-h"])
    assert (asked.exit_code, asked.output) == (0, help_text)
    bare = runner.invoke(demo_app(), [])
    assert (bare.exit_code, bare.output) == (2, help_text)


def test_the_help_flag_is_unset_as_false_so_typer_needs_no_pydantic_for_it() -> None:
    """typer passes a bool flag's bool through as it is, but builds a pydantic adapter for None: an unset help flag
    of None loaded pydantic on every `VERB --help` and TAB (docs/performance.md)."""
    group = get_command(demo_app())
    assert isinstance(group, Group)
    ctx = group.make_context("demo", ["hello"])
    verb = group.get_command(ctx, "hello")
    assert verb is not None
    assert [command.get_help_option(ctx).default for command in (group, verb)] == [False, False]  # type: ignore[union-attr]


def test_a_debug_traceback_is_pythons_plain_one(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """With HAMI_PLACE_DEBUG=1 an unexpected error leaves the plugin uncaught: its traceback is Python's own, which a
    bug report pastes whole, not typer's rich box cut to the terminal's width."""
    monkeypatch.delenv("_TYPER_STANDARD_TRACEBACK", raising=False)
    with pytest.raises(RuntimeError) as raised:
        demo_app()(args=["hello"], prog_name="demo", standalone_mode=False)
    typer.main.except_hook(raised.type, raised.value, raised.tb)
    lines = capsys.readouterr().err.splitlines()
    assert (lines[0], lines[-1]) == ("Traceback (most recent call last):", "RuntimeError: disk full")
