"""The tests' forked runs (`sandbox/forked.py`): a run that has just ended is not an error to signal."""

from __future__ import annotations

import multiprocessing.process
import subprocess
from dataclasses import dataclass
from typing import cast

from sandbox.forked import Forked


@dataclass
class _JustEnded:
    """Stands for a forked run the fork server has reaped before this process heard its exit code: a window a real
    fork server opens only now and then, so the test makes it with a reaped process's pid (a stand-in, said so)."""

    pid: int
    exitcode: int | None = None


def test_a_run_reaped_before_its_exit_code_arrived_is_signalled_without_an_error() -> None:
    """Stopping such a run raised ProcessLookupError in a fixture's teardown (seen once in a CI run of `make test`)."""
    ended = subprocess.Popen(["true"])
    ended.wait()
    run = Forked(cast("multiprocessing.process.BaseProcess", _JustEnded(ended.pid)), ["hami-place-webhook"])
    run.send_signal(0)  # signal 0: were the pid taken again meanwhile, nothing is sent to that process
    assert run.poll() is None, "its exit code is still on its way: the run is not said to have ended"
