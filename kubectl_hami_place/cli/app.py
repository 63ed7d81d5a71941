"""`kubectl hami-place`: registers the verbs and turns every failure into one red line and an exit code.

Exit codes: 0 ok, 1 error, 2 usage, 3 refused by validation, 4 blocked by a PodDisruptionBudget, 130 interrupted.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings

import typer
from typer._click.exceptions import NoArgsIsHelpError, UsageError

from kubectl_hami_place.cli import (
    _apply,
    _completion,
    _defrag,
    _delete,
    _evict,
    _list,
    _pin,
    _plan,
    _status,
    _version,
    _why,
)
from kubectl_hami_place.cli._common import StdoutClosed, error_line
from kubectl_hami_place.cli._errors import (
    EXIT_BLOCKED,
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_REFUSED,
    EXIT_USAGE,
    WORD_MAX,
    CliError,
    clip_words,
    kube_line,
)
from kubectl_hami_place.cli._typer_app import Command, typer_app
from kubectl_hami_place.core.errors import ModelError, clip
from kubectl_hami_place.kube.errors import BlockedByDisruptionBudget, KubeError, KubeInvalid, PathError

PROG = "kubectl hami-place"
SENTENCE_MAX = 240
"""The most of a click message kept (a value with spaces, many extra arguments): the hint after it stays in sight."""

app = typer_app(PROG, "Pin HAMi GPU pods to exact nodes and cards, evict to make room, and see every card's state.")
app.command("pin", cls=Command, help=_pin.HELP, no_args_is_help=True)(_pin.pin)
app.command("evict", cls=Command, help=_evict.HELP, no_args_is_help=True)(_evict.evict)
app.command("status", cls=Command, help=_status.HELP)(_status.status)
app.command("list", cls=Command, help=_list.HELP)(_list.list_placements)
app.command("delete", cls=Command, help=_delete.HELP, no_args_is_help=True)(_delete.delete)
app.command("why", cls=Command, help=_why.HELP, no_args_is_help=True)(_why.why)
app.command("plan", cls=Command, help=_plan.HELP, no_args_is_help=True)(_plan.plan)
app.command("apply", cls=Command, help=_apply.HELP, no_args_is_help=True)(_apply.apply)
app.add_typer(_defrag.app, name="defrag", help=_defrag.HELP)
app.command("version", cls=Command, help=_version.HELP)(_version.version)
app.command("completion", cls=Command, help=_completion.HELP, no_args_is_help=True)(_completion.completion)


def run(argv: list[str]) -> int:
    """Runs one command line and returns the exit code; never raises, never prints a traceback. typer turns Ctrl-C
    inside a verb into the return value 130."""
    try:
        result = app(args=argv, prog_name=PROG, standalone_mode=False)
    except NoArgsIsHelpError as exc:
        # As kubectl and click 8.2: a verb missing its arguments is a usage error, its help the message on stderr.
        sys.stderr.write(exc.format_message().rstrip("\n") + "\n")
        return EXIT_USAGE
    except UsageError as exc:
        command = exc.ctx.command_path if exc.ctx is not None else PROG
        return _fail([f"{_sentence(exc.format_message())}; see '{command} --help'"], EXIT_USAGE)
    except typer.Abort as exc:
        if isinstance(exc.__context__, KeyboardInterrupt):
            return _fail(["interrupted"], EXIT_INTERRUPTED)  # click's prompt turns Ctrl-C into Abort
        return _fail(["aborted"], EXIT_ERROR)
    except CliError as exc:
        return _fail(exc.lines(), exc.exit_code)
    except BlockedByDisruptionBudget as exc:
        return _fail([kube_line(exc)], EXIT_BLOCKED)
    except PathError as exc:
        return _fail([kube_line(exc)], EXIT_USAGE)  # refused here, before any request: a name that is no name
    except KubeInvalid as exc:
        return _fail([kube_line(exc)], EXIT_REFUSED)
    except KubeError as exc:
        return _fail([kube_line(exc)], EXIT_ERROR)
    except ModelError as exc:
        return _fail([str(exc)], EXIT_ERROR)
    except KeyboardInterrupt:
        return _fail(["interrupted"], EXIT_INTERRUPTED)
    except (BrokenPipeError, StdoutClosed):
        _silence_stdout()
        return EXIT_OK
    except Exception as exc:
        if os.environ.get("HAMI_PLACE_DEBUG"):
            raise
        detail = clip_words(" ".join(str(exc).split()), WORD_MAX) or type(exc).__name__
        return _fail(
            [f"unexpected {type(exc).__name__}: {detail}; rerun with HAMI_PLACE_DEBUG=1 and report it"], EXIT_ERROR
        )
    if result == EXIT_INTERRUPTED:
        return _fail(["interrupted"], EXIT_INTERRUPTED)
    return result if isinstance(result, int) else EXIT_OK


def main() -> int:
    """Console entry point `kubectl-hami_place` (kubectl runs it for `kubectl hami-place`)."""
    quiet_libraries()
    try:
        return run(sys.argv[1:])
    except KeyboardInterrupt:
        return _fail(["interrupted"], EXIT_INTERRUPTED)


def quiet_libraries() -> None:
    """The libraries' own log records and warnings stay off the terminal (the client logs a failed exec credential
    plugin with `logging.error`, urllib3 its retries and a server URL without a scheme): what went wrong reaches
    the user as the one `error:` line the failure becomes. HAMI_PLACE_DEBUG=1 keeps them."""
    if os.environ.get("HAMI_PLACE_DEBUG"):
        return
    logging.getLogger().addHandler(logging.NullHandler())
    logging.getLogger().setLevel(logging.CRITICAL + 1)
    warnings.simplefilter("ignore")


def complete_main() -> int:
    """Console entry point `kubectl_complete-hami_place`: kubectl 1.26+ passes the words typed after the verb."""
    try:
        sys.stdout.write(_completion.complete_words(app, PROG, sys.argv[1:]))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception:
        return EXIT_OK
    return EXIT_OK


def _fail(lines: list[str], code: int) -> int:
    """Prints `error: ...` lines in red on stderr and returns the exit code."""
    for line in lines:
        error_line(line)
    return code


def _sentence(message: str) -> str:
    """Click's messages are sentences ("No such option: --x."); ours are clauses joined by '; '."""
    text = clip(clip_words(" ".join(message.split()).replace("Value error, ", "").rstrip(".")), SENTENCE_MAX)
    return text[:1].lower() + text[1:]


def _silence_stdout() -> None:
    """After the reader of a pipe went away, further writes (at exit) must not raise again."""
    if sys.stdout is None:
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    finally:
        os.close(devnull)
