"""How long the plugin takes to answer at the prompt, side by side with kubectl itself.

Runs, interleaved so that a busy box slows each alike, `kubectl version --client` (the sandbox's kubectl),
`kubectl-hami_place --help` and a TAB completion of a verb (`kubectl_complete-hami_place st`), the last two from the
installed package (the console scripts beside this interpreter), N times each, and prints the median and p95 wall
time of each. No cluster is needed: none of the three reaches one.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sandbox import binaries

SCRIPTS = Path(sys.executable).parent


def commands() -> dict[str, list[str]]:
    """The command lines timed, by the label printed."""
    return {
        "kubectl version --client": [str(binaries.resolve("kubectl")), "version", "--client"],
        "kubectl-hami_place --help": [str(SCRIPTS / "kubectl-hami_place"), "--help"],
        "kubectl_complete-hami_place st": [str(SCRIPTS / "kubectl_complete-hami_place"), "st"],
    }


def wall_time(argv: list[str]) -> float:
    """Seconds from start to exit of one run; a failing run stops the bench (it would time an error path)."""
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=True)
    return time.perf_counter() - start


def p95(samples: list[float]) -> float:
    """The 95th percentile (inclusive method, so it stays within what was measured)."""
    return statistics.quantiles(samples, n=20, method="inclusive")[-1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--runs", type=int, default=30, help="runs of each command (default 30)")
    args = parser.parse_args(argv)
    timed = commands()
    for command in timed.values():
        wall_time(command)  # warm the page cache and the bytecode cache before timing
    samples: dict[str, list[float]] = {label: [] for label in timed}
    for _ in range(args.runs):
        for label, command in timed.items():
            samples[label].append(wall_time(command))
    print(f"{'command':<34} {'median':>8} {'p95':>8}   ({args.runs} runs each, interleaved)")
    for label, seconds in samples.items():
        print(f"{label:<34} {statistics.median(seconds):>7.3f}s {p95(seconds):>7.3f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
