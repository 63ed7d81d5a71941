"""The plugin run as a process forked from one that has imported it: each `plugin()` call is still a process of its
own (its own argv, environment, standard streams and exit code, `entry.main` as the console script runs it), but
without an interpreter start and the CLI's imports, about a second of CPU a call that `make test` made 150 times.

multiprocessing's forkserver imports this module once (the preload) in a process of its own, single-threaded, and
forks that for each call; the pytest worker, which runs threads, is never forked.
"""

from __future__ import annotations

import importlib
import io
import multiprocessing
import os
import pkgutil
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

import kubectl_hami_place
from kubectl_hami_place import entry


def _import_the_plugin() -> None:
    """Every module of the package: the CLI imports most of them inside the verbs, and a fork inherits them all."""
    for module in pkgutil.walk_packages(kubectl_hami_place.__path__, f"{kubectl_hami_place.__name__}."):
        importlib.import_module(module.name)


_import_the_plugin()


def _stream(fd: int, errors: str) -> io.TextIOWrapper:
    """A text stream on `fd` as the interpreter opens its standard streams on a pipe or a file."""
    return io.TextIOWrapper(io.FileIO(fd, "r" if fd == 0 else "w", closefd=False), encoding="utf-8", errors=errors)


def _run(argv: list[str], env: dict[str, str], out: str, err: str) -> None:
    """In the forked child: stdin from /dev/null, stdout and stderr into the files, then the console script's main."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    for fd, path in ((1, out), (2, err)):
        target = os.open(path, os.O_WRONLY | os.O_TRUNC)
        os.dup2(target, fd)
        os.close(target)
    sys.stdin, sys.stdout, sys.stderr = _stream(0, "strict"), _stream(1, "strict"), _stream(2, "backslashreplace")
    os.environ.clear()
    os.environ.update(env)
    sys.argv = argv
    try:
        code = entry.main()
    except SystemExit as leaving:
        # as the interpreter ends on SystemExit: None is 0, a number is the code, anything else is printed, code 1
        code = leaving.code if isinstance(leaving.code, int) else 0 if leaving.code is None else 1
        if not isinstance(leaving.code, int | None):
            sys.stderr.write(f"{leaving.code}\n")
    except BaseException:  # the interpreter prints any other exception's traceback and exits 1
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


_FORKS = multiprocessing.get_context("forkserver")
_FORKS.set_forkserver_preload([__name__])


def run(argv: list[str], env: dict[str, str] | None, timeout: float) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of the plugin run with `argv` (argv[0] its path) and `env` (this process's when
    None); subprocess.TimeoutExpired, the child killed, after `timeout` seconds."""
    with tempfile.TemporaryDirectory(prefix="plugin-") as tmp:
        out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
        out.touch()
        err.touch()
        child = _FORKS.Process(target=_run, args=(argv, dict(os.environ) if env is None else env, str(out), str(err)))
        child.start()
        child.join(timeout)
        if child.exitcode is None:
            child.kill()
            child.join()
            raise subprocess.TimeoutExpired(argv, timeout, out.read_text(), err.read_text())
        return child.exitcode, out.read_text(), err.read_text()
