"""This repo's console scripts run as processes forked from one that has imported them, for the tests: each run is
still a process of its own (its argv, environment, standard streams, signals and exit code, the script's own entry
point), without an interpreter start and the imports, a second or more of CPU a run that `make test` paid about 160
times (the plugin) and 100 times (the server).

multiprocessing's forkserver imports them once (`forked_preload`) in a process of its own, single-threaded, and
forks that for each run; the caller, a pytest worker running threads, is never forked. A run that must load a library
at exec (libfaketime's LD_PRELOAD) or outlive its starter is not for this: start it with subprocess.
"""

from __future__ import annotations

import contextlib
import faulthandler
import functools
import importlib
import importlib.metadata
import io
import multiprocessing
import os
import signal
import subprocess
import sys
import traceback
from pathlib import Path

_FORKS = multiprocessing.get_context("forkserver")
# the fork server imports it (and through it every module of the plugin and the server), not this module's importers
_FORKS.set_forkserver_preload(["sandbox.forked_preload"])


def _stream(fd: int, errors: str, *, write_through: bool) -> io.TextIOWrapper:
    """A text stream on `fd` as the interpreter opens a standard stream on a pipe or a file."""
    raw = io.FileIO(fd, "r" if fd == 0 else "w", closefd=False)
    return io.TextIOWrapper(raw, encoding="utf-8", errors=errors, write_through=write_through)


def _child(entry: str, argv: list[str], env: dict[str, str], out: str, err: str) -> None:
    """In the forked process: stdin from /dev/null, stdout and stderr into the files (the same file when the paths
    are), the environment and argv set, then the console script's entry point; its code is the process's."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    for fd, path in ((1, out), (2, err)):
        if fd == 2 and err == out:
            os.dup2(1, 2)
            continue
        target = os.open(path, os.O_WRONLY | os.O_APPEND)
        os.dup2(target, fd)
        os.close(target)
    unbuffered = bool(env.get("PYTHONUNBUFFERED"))
    sys.stdin = _stream(0, "strict", write_through=False)
    sys.stdout = _stream(1, "strict", write_through=unbuffered)
    sys.stderr = _stream(2, "backslashreplace", write_through=True)
    if env.get("PYTHONFAULTHANDLER"):
        faulthandler.enable()
    os.environ.clear()
    os.environ.update(env)
    sys.argv = argv
    signal.signal(signal.SIGINT, signal.default_int_handler)
    module, function = entry.split(":")
    try:
        code = getattr(importlib.import_module(module), function)()
    except SystemExit as leaving:
        # as the interpreter ends on SystemExit: None is 0, a number the code, anything else printed, then code 1
        code = leaving.code if isinstance(leaving.code, int) else 0 if leaving.code is None else 1
        if not isinstance(leaving.code, int | None):
            sys.stderr.write(f"{leaving.code}\n")
    except BaseException:  # the interpreter prints any other exception's traceback and exits 1
        traceback.print_exc()
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code or 0)


class Forked:
    """A forked run, with as much of subprocess.Popen as the tests use of it."""

    def __init__(self, process: multiprocessing.process.BaseProcess, argv: list[str]) -> None:
        self._process = process
        self.args = argv

    @property
    def pid(self) -> int:
        assert self._process.pid is not None, "started"
        return self._process.pid

    @property
    def returncode(self) -> int | None:
        """The exit code, or minus the signal that ended it (as Popen's), None while it runs."""
        return self._process.exitcode

    def poll(self) -> int | None:
        return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        """The exit code once the process ended; subprocess.TimeoutExpired after `timeout`, as Popen.wait."""
        self._process.join(timeout)
        code = self._process.exitcode
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return code

    def send_signal(self, sig: int) -> None:
        """Signals the run unless it ended. Its parent is the fork server, which reaps it before this process hears its
        exit code: a run that has just ended may be gone (ESRCH) while `exitcode` still says None."""
        if self._process.exitcode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


@functools.cache
def _entry(script: str) -> str:
    """The entry point ("module:function") of the installed console script named `script`, as pyproject.toml gives it:
    what exec'ing it would run."""
    found = importlib.metadata.entry_points(group="console_scripts", name=script)
    if not found:
        raise LookupError(f"{script} is no installed console script; run pip install -e . (make does)")
    return next(iter(found)).value


def start(argv: list[str], env: dict[str, str], out: str, err: str | None = None) -> Forked:
    """Runs the console script argv[0] names, through its entry point, as exec'ing it would, its output appended to
    `out` (and `err`, else `out` too); a daemon: one still running when the caller exits is ended with it."""
    entry = _entry(Path(argv[0]).name)
    process = _FORKS.Process(target=_child, args=(entry, argv, env, out, err or out), daemon=True)
    process.start()
    return Forked(process, argv)


def run(argv: list[str], env: dict[str, str], out: str, err: str, *, timeout: float) -> int:
    """Runs the console script argv[0] names to its end, its output appended to the files `out` and `err`; its exit
    code, or subprocess.TimeoutExpired, the process killed, after `timeout` seconds."""
    forked = start(argv, env, out, err)
    try:
        return forked.wait(timeout)
    except subprocess.TimeoutExpired:
        forked.kill()
        forked.wait()
        raise
