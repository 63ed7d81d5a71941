"""`make test`: lint, the plugin's build, the tests that need no cluster, and the cluster tests, side by side.

The cluster tests (xdist workers, each with its own sandbox, one test file at a time) mostly wait on the control
plane, and two of them leave about one core idle; lint, the other tests (one process) and the plugin's PyInstaller
build (`make dist`, cached by source digest, which the krew tests then find) use it meanwhile rather than run before
them or take turns on the workers. The cluster run streams to the terminal; the others are printed once they end.
The exit code is the first failure's (lint, the build, the other tests, the cluster tests), 0 when none.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import IO

REPO = Path(__file__).resolve().parent.parent
CLUSTER_TESTS = "tests/cluster"


def yield_cpu() -> None:
    """In a background child: run only on CPU the cluster tests leave idle (Linux's SCHED_IDLE), else at nice 19.

    The cluster tests set the run's length: some of them (the differential tests against HAMi's scheduler) are
    CPU-bound, and took up to twice as long beside lint and the unit tests at equal nice. Even at nice 19 the
    background cost them about 30 s (cluster tests 606 s beside it, 574 s alone); under SCHED_IDLE the whole run took
    564 s against 626 s at nice 19, the background still ending minutes before the cluster tests (338 s)."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):  # not Linux, or a seccomp profile that forbids it
        os.nice(19)


def background(name: str, command: list[str], log: IO[bytes]) -> tuple[str, subprocess.Popen[bytes], IO[bytes]]:
    """`command` started in the repo at the lowest priority (`yield_cpu`), with its output in `log`."""
    # This script starts no thread: the children are forked before anything else runs.
    process = subprocess.Popen(
        command,
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
        preexec_fn=yield_cpu,  # noqa: PLW1509
    )
    return name, process, log


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2, help="xdist workers (sandboxes) for the cluster tests; 0: none")
    parser.add_argument("pytest_args", nargs="*", help="more arguments for the cluster tests' pytest")
    args = parser.parse_args()
    workers = ["-n", str(args.jobs), "--dist", "loadfile", "--no-loadscope-reorder"] if args.jobs else []
    cluster = [sys.executable, "-m", "pytest", *workers, CLUSTER_TESTS, *args.pytest_args]
    with (
        tempfile.TemporaryFile() as lint_log,
        tempfile.TemporaryFile() as other_log,
        tempfile.TemporaryFile() as build_log,
    ):
        others = [
            background("lint", ["make", "--no-print-directory", "lint"], lint_log),
            background("the plugin's build for the krew tests", ["make", "--no-print-directory", "dist"], build_log),
            background(
                "tests outside tests/cluster",
                [sys.executable, "-m", "pytest", "-q", f"--ignore={CLUSTER_TESTS}"],
                other_log,
            ),
        ]
        try:
            cluster_code = subprocess.run(cluster, cwd=REPO, check=False).returncode
        except KeyboardInterrupt:
            for _name, process, _log in others:
                process.terminate()
            raise
        codes = []
        for name, process, log in others:
            codes.append(process.wait())
            log.seek(0)
            print(f"\n===== {name}: exit {codes[-1]} =====", flush=True)
            sys.stdout.buffer.write(log.read())
            sys.stdout.flush()
    return next((code for code in (*codes, cluster_code) if code), 0)


if __name__ == "__main__":
    sys.exit(main())
