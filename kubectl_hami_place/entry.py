"""The plugin's console entry points: `--version` without loading the CLI, and Ctrl-C while it loads says so in one
line instead of an import traceback."""

from __future__ import annotations

import sys

from kubectl_hami_place import __version__

EXIT_INTERRUPTED = 130


def main() -> int:
    """`kubectl-hami_place` (kubectl runs it for `kubectl hami-place`)."""
    if sys.argv[1:] == ["--version"]:
        sys.stdout.write(f"kubectl-hami_place {__version__}\n")
        return 0
    try:
        from kubectl_hami_place.cli.app import main as run_cli
    except KeyboardInterrupt:
        return _interrupted()
    return run_cli()


def complete_main() -> int:
    """`kubectl_complete-hami_place`: kubectl 1.26+ calls it with the words typed after the verb."""
    try:
        from kubectl_hami_place.cli.app import complete_main as complete
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    return complete()


def _interrupted() -> int:
    """The line the CLI prints when interrupted later (`error: interrupted`), and the shell's code for SIGINT."""
    sys.stderr.write("error: interrupted\n")
    return EXIT_INTERRUPTED
