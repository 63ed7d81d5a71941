"""The plugin's typer apps and their command classes, built so the prompt does not wait for what it does not show.

typer processes a parameter's value through a pydantic adapter it builds on first use, even for a value that is
None; building the first one imports pydantic (~0.13 s of CPU). `VERB --help` paid it for the group's unset help
flag, and every TAB for every parameter of the command line so far. The help is click's plain help (as kubectl's):
typer's rich help loads rich, its markdown and pygments (`--help` 0.36 s of CPU on a terminal against 0.20 s plain,
docs/performance.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer
from typer._click.core import ParameterSource
from typer._click.exceptions import UsageError
from typer.core import TyperCommand, TyperGroup

if TYPE_CHECKING:
    from typer._click.core import Command as _ClickCommand
    from typer._click.core import Context
    from typer.core import TyperOption
else:
    _ClickCommand = object


class _Quick(_ClickCommand):
    """What Command and Group change in typer's classes (a mixin: both are click commands)."""

    def get_help_option(self, ctx: Context) -> TyperOption | None:
        """The help flag, unset False rather than None: typer passes a bool flag's bool through without pydantic."""
        option = super().get_help_option(ctx)
        if option is not None:
            option.default = False
        return option

    def parse_args(self, ctx: Context, args: list[str]) -> list[str]:
        """Completing (click parses resiliently only then) keeps the words typed as they are: the completers read
        --kubeconfig, --context, -n and --node as strings, and coercing them would load pydantic."""
        if not ctx.resilient_parsing:
            try:
                return super().parse_args(ctx, args)
            except UsageError as exc:
                # click's parser raises an option's missing value without the command's context, so the error
                # would point at the plugin's help rather than this verb's.
                exc.ctx = exc.ctx or ctx
                raise
        parser = self.make_parser(ctx)
        opts, rest, _ = parser.parse_args(args=args)
        for param in self.get_params(ctx):
            if param.expose_value:
                ctx.params[param.name] = opts.get(param.name)
                typed = ParameterSource.DEFAULT if opts.get(param.name) is None else ParameterSource.COMMANDLINE
                ctx.set_parameter_source(param.name, typed)
        ctx._opt_prefixes.update(parser._opt_prefixes)
        ctx.args = rest  # a group's subcommand among them: click's completion resolves it from ctx.args
        return rest


class Command(_Quick, TyperCommand):
    """Every verb's click command."""


class Group(_Quick, TyperGroup):
    """The plugin's and defrag's click group."""


def typer_app(name: str, help_text: str) -> typer.Typer:
    """A typer app with the plugin's settings: plain help, -h, no typer completion or pretty tracebacks."""
    return typer.Typer(
        name=name,
        help=help_text,
        cls=Group,
        rich_markup_mode=None,
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
