"""Planner runs kept from a trace replay, planned again by an earlier tree ("before") and by this one ("after").

`python bench/trace_replay.py ... --corpus DIR --corpus-slower S --corpus-every N` pickles the inputs of planner
runs (snapshot, goal, limits). This script plans each of them with the planner of `--before` (a checkout, such as a
`git worktree` of main, imported in a child process of its own) and with this tree's, one after the other, and
prints per run the CPU seconds (`time.process_time` of `plan`, as the replay times it) of both and whether the plans
are the same (moves, target, completeness, reasons), then median / p95 / max and the plans found by each.
"""

from __future__ import annotations

import argparse
import json
import math
import pickle
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def planner(tree: Path) -> Callable[[Path], dict[str, Any]]:
    """A function planning one kept run with the planner of `tree`: its CPU seconds and its plan."""
    sys.path.insert(0, str(tree))
    import kubectl_hami_place
    from kubectl_hami_place.core.planner import plan

    if not Path(kubectl_hami_place.__file__).resolve().is_relative_to(tree.resolve()):
        raise SystemExit(f"imported {kubectl_hami_place.__file__}, not the planner of {tree}")

    def run(path: Path) -> dict[str, Any]:
        """Plan the run once, timed as the replay times it."""
        record = pickle.loads(path.read_bytes())
        start = time.process_time()
        result = plan(record["snapshot"], record["goal"], record["limits"])
        seconds = time.process_time() - start
        return {
            "file": path.name,
            "recorded": record["seconds"],
            "seconds": seconds,
            "complete": result.complete,
            "moves": [move.to_dict() for move in result.moves],
            "target": None if result.target is None else [result.target[0], list(result.target[1])],
            "stopped": bool(result.reasons) and result.reasons[0].startswith("the search stopped"),
            "reasons": list(result.reasons),
        }

    return run


def serve(tree: Path) -> None:
    """The before's child process: plan each file named on stdin, one JSON line back each."""
    run = planner(tree)
    for line in sys.stdin:
        print(json.dumps(run(Path(line.strip()))), flush=True)


def fastest(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The fastest of a run's timings, after checking every repeat planned the same."""
    if any(_plan_of(result) != _plan_of(results[0]) for result in results):
        raise SystemExit(f"{results[0]['file']}: the same planner planned it differently when repeated")
    return min(results, key=lambda result: result["seconds"])


def spread(values: Sequence[float]) -> str:
    """Median / p95 / max, in seconds."""
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)]
    return f"{statistics.median(ordered):.2f} / {p95:.2f} / {ordered[-1]:.2f} s"


def main(argv: list[str] | None = None) -> None:
    """Plan the corpus before and after, print both side by side."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("corpus", type=Path, nargs="?", default=Path("/tmp/planner-corpus"), help="the pickles' dir")
    parser.add_argument("--before", type=Path, help="a checkout whose planner is the before (none: after only)")
    parser.add_argument("--repeat", type=int, default=1, help="plan each run this many times, keep the fastest")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker is not None:
        serve(args.worker)
        return
    files = sorted(args.corpus.glob("*.pickle")) if args.corpus.is_dir() else []
    if not files:
        print(
            f"no planner runs in {args.corpus}: skipped (record some with python bench/trace_replay.py ... "
            f"--corpus {args.corpus} --corpus-slower 0.4)"
        )
        return
    child = None
    if args.before is not None:
        command = [sys.executable, __file__, "--worker", str(args.before)]
        child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    run = planner(ROOT)
    before: list[dict[str, Any]] | None = [] if child is not None else None
    after = []
    print(f"{len(files)} planner runs from {args.corpus}; CPU seconds of plan (fastest of {args.repeat})")
    print(f"{'run':<40} {'replay':>7} {'before':>7} {'after':>7}  same plan  outcome (before -> after)")
    for path in files:
        # interleaved, run by run, so that the box's load at the moment weighs on both alike
        thens, nows = [], []
        for _ in range(args.repeat):
            if child is not None:
                assert child.stdin is not None and child.stdout is not None
                child.stdin.write(f"{path}\n")
                child.stdin.flush()
                thens.append(json.loads(child.stdout.readline()))
            nows.append(run(path))
        now = fastest(nows)
        after.append(now)
        then = None if before is None else fastest(thens)
        if before is not None and then is not None:
            before.append(then)
        same = "-" if then is None else "yes" if _plan_of(then) == _plan_of(now) else "NO"
        old = "-" if then is None else f"{then['seconds']:7.2f}"
        was = "" if then is None else f"{_outcome(then)} -> "
        print(
            f"{now['file']:<40} {now['recorded']:7.2f} {old:>7} {now['seconds']:7.2f}  {same:<9}  {was}{_outcome(now)}",
            flush=True,
        )
    if child is not None:
        assert child.stdin is not None
        child.stdin.close()
        child.wait()
    for name, results in (("before", before), ("after", after)):
        if results is None:
            continue
        found = sum(result["complete"] for result in results)
        stopped = sum(result["stopped"] for result in results)
        over = sum(result["seconds"] >= 1.0 for result in results)
        print(
            f"{name}: plan CPU median / p95 / max {spread([r['seconds'] for r in results])}; "
            f"{found} plans found, {stopped} stopped at the search bound, {over} runs of 1 s or more"
        )
    if before is not None:
        differ = [now["file"] for then, now in zip(before, after, strict=True) if _plan_of(then) != _plan_of(now)]
        print(f"plans differing: {len(differ)}" + (f" ({', '.join(differ)})" if differ else ""))


def _plan_of(result: dict[str, Any]) -> tuple[Any, ...]:
    """What must stay equal: completeness, moves, target and the reasons given."""
    return result["complete"], result["moves"], result["target"], result["reasons"]


def _outcome(result: dict[str, Any]) -> str:
    """A plan of n moves, no plan, or stopped at the bound."""
    if result["complete"]:
        return f"plan ({len(result['moves'])} moves)"
    return "stopped" if result["stopped"] else "no plan"


if __name__ == "__main__":
    main()
