"""`make test`'s runner (`tests/run.py`): lint, the build and the unit tests run beside the cluster tests only on the
CPU those leave idle."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import pytest

from tests.run import background
from tests.unit.test_packaging import ROOT


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="SCHED_IDLE is Linux's")
def test_the_background_work_runs_only_on_cpu_left_idle() -> None:
    """A background child, and what it starts, run under SCHED_IDLE: the cluster tests, which set the run's length,
    are never kept waiting for it."""
    probe = "import os, subprocess, sys; print(os.sched_getscheduler(0) == os.SCHED_IDLE); sys.stdout.flush(); "
    probe += "subprocess.run([sys.executable, '-c', 'import os; print(os.sched_getscheduler(0) == os.SCHED_IDLE)'])"
    with tempfile.TemporaryFile() as log:
        name, process, _ = background("probe", [sys.executable, "-c", probe], log)
        assert (name, process.wait()) == ("probe", 0)
        log.seek(0)
        assert log.read().decode().split() == ["True", "True"], "the child and its own child"


def test_where_scheduling_policies_cannot_be_set_the_background_runs_at_nice_19() -> None:
    """Not Linux, or a seccomp profile that refuses sched_setscheduler: the lowest nice, not a run that cannot start."""
    probe = (
        "import os\n"
        "def refused(*args):\n"
        "    raise PermissionError(1, 'refused')\n"
        "os.sched_setscheduler = refused\n"
        "from tests.run import yield_cpu\n"
        "yield_cpu()\n"
        "print(os.nice(0))\n"
    )
    ran = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT)
    assert ran.stdout.split() == ["19"]
