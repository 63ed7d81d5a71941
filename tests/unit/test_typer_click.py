"""The CLI leans on typer's private `typer._click` (the click typer vendors from 0.26; typer exports no public name for
a usage error or a completer): the names it uses must exist with the shape it uses, and be what typer itself raises.
This fails first when a typer release moves them; pyproject.toml caps typer below the next untested minor."""

from __future__ import annotations

import inspect
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version
from typer._click import exceptions, shell_completion

from kubectl_hami_place.cli import _completion, _typer_app, app

ROOT = Path(__file__).resolve().parents[2]


def typer_requirement() -> Requirement:
    lines = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    (typer_line,) = [req for req in map(Requirement, lines) if req.name == "typer"]
    return typer_line


def test_the_installed_typer_is_in_the_tested_range() -> None:
    requirement = typer_requirement()
    assert requirement.specifier.contains(metadata.version("typer"))
    assert Version("0.26") in requirement.specifier, "typer._click exists from 0.26: the floor may not go lower"
    assert not requirement.specifier.contains("1.0"), "a private module needs a ceiling"


def test_the_cli_catches_the_exceptions_typer_raises() -> None:
    """A bad option and a bare command that wants arguments, raised by typer, caught as the classes app.py names."""
    with pytest.raises(exceptions.UsageError) as bad_option:
        app.app(args=["status", "--no-such-option"], prog_name="kubectl hami-place", standalone_mode=False)
    assert type(bad_option.value).__module__.startswith("typer._click")
    assert app.UsageError is exceptions.UsageError
    with pytest.raises(exceptions.NoArgsIsHelpError):
        app.app(args=["pin"], prog_name="kubectl hami-place", standalone_mode=False)
    assert app.NoArgsIsHelpError is exceptions.NoArgsIsHelpError


def test_the_completer_base_has_the_shape_the_word_completer_overrides() -> None:
    assert _completion.ShellComplete is shell_completion.ShellComplete
    assert list(inspect.signature(shell_completion.ShellComplete.__init__).parameters) == [
        "self",
        "cli",
        "ctx_args",
        "prog_name",
        "complete_var",
    ]
    for method in ("source_vars", "get_completion_args", "format_completion", "complete", "get_completions"):
        assert callable(getattr(shell_completion.ShellComplete, method)), method
    item = shell_completion.CompletionItem("gpu-a100-0", help="a node")
    assert (item.value, item.help) == ("gpu-a100-0", "a node")


def test_completion_runs_through_typer_click() -> None:
    """The whole path: typer's command, the vendored completer, our formatting."""
    words = _completion.complete_words(app.app, "kubectl hami-place", ["sta"])
    assert words.splitlines()[0].startswith("status\t")


def test_the_quick_parse_marks_typed_words_as_click_completion_reads_them() -> None:
    """_typer_app parses the words of a completion itself: the parameter source it records is the enum click's
    completion compares with (a given argument is not offered again)."""
    assert _typer_app.ParameterSource is shell_completion.ParameterSource
