"""What no defragmenter can beat on the trace's timeline: the same arrivals and departures on a cluster without
fragments, beside the replay's figures for HAMi alone.

Each card model's cards become one pool of thousandths of a GPU (`gpu_milli`): a task runs when one pool its
`gpu_spec` accepts has its GPUs free, wherever they are, and node CPU and memory are not counted. That is what a
defragmenter free to move every running task at no cost, at every instant, would at best reach; Pending time is
then the trace's queueing for capacity alone. Pending tasks are retried oldest first whenever GPUs come free, the
ones that fit placed, as bench/trace_replay.py's timeline retries them (so the bound shares its queue discipline,
not an optimal order). Prints the pooled cluster's pending GPU-hours, p50 / p95 pending and allocated share beside
the target that issue 22 sets (half of HAMi's best policy alone, read from a trace_replay report).
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.trace_replay import NODE_FILE, TRACE_DIR, Task, TraceNode, arrivals, inflate, read_nodes, read_tasks

ROOT = Path(__file__).resolve().parent.parent


def pools(nodes: Sequence[TraceNode]) -> dict[str, int]:
    """Each card model's GPUs in thousandths."""
    found: dict[str, int] = defaultdict(int)
    for node in nodes:
        found[node.model] += node.gpus * 1000
    return dict(found)


def asked_milli(task: Task) -> int:
    """The task's GPUs in thousandths."""
    return task.num_gpu * task.gpu_milli


def pool_for(task: Task, free: dict[str, int]) -> str | None:
    """The accepted pool with the most GPUs free, when it holds the task."""
    accepted = task.gpu_spec or tuple(free)
    best = max((model for model in accepted if model in free), key=lambda model: free[model], default=None)
    return best if best is not None and free[best] >= asked_milli(task) else None


def replay_pooled(nodes: Sequence[TraceNode], tasks: Sequence[Task], *, compress: float, rounds: int) -> dict[str, Any]:
    """The timeline on pooled cards; figures named and computed as replay_timeline's."""
    free = pools(nodes)
    capacity = sum(free.values())
    events: list[tuple[float, int, int, str, str]] = []
    by_name: dict[str, Task] = {}
    for seq, (arrival, task) in enumerate(arrivals(tasks, compress, rounds)):
        if task.num_gpu:
            events.append((arrival, 1, seq, task.name, ""))
            by_name[task.name] = task
    heapq.heapify(events)
    times = sorted(event[0] for event in events)
    first = times[0] if times else 0.0
    window = (times[len(times) // 10], times[len(times) * 9 // 10]) if times else (0.0, 0.0)
    # Pending tasks by shape (models accepted, GPUs asked), each in arrival order: a shape whose oldest task does
    # not fit has no task that fits.
    pending: dict[tuple[tuple[str, ...], int], dict[str, float]] = {}
    waits: dict[str, float] = {}
    allocated = 0
    allocated_area = 0.0
    clock = first
    seq = len(events)

    def place(task: Task, model: str, now: float, arrived: float) -> None:
        """Take the task's GPUs from the pool until it leaves."""
        nonlocal allocated, seq
        free[model] -= asked_milli(task)
        allocated += asked_milli(task)
        waits[task.name] = now - arrived
        seq += 1
        heapq.heappush(events, (now + task.duration, 0, seq, task.name, model))

    def retry(now: float) -> None:
        """Pending tasks oldest first; each that fits now runs."""
        while True:
            heads = []
            for shape, queue in pending.items():
                name, arrived = next(iter(queue.items()))
                model = pool_for(by_name[name], free)
                if model is not None:
                    heads.append((arrived, name, shape, model))
            if not heads:
                return
            arrived, name, shape, model = min(heads)
            del pending[shape][name]
            if not pending[shape]:
                del pending[shape]
            place(by_name[name], model, now, arrived)

    while events:
        now, kind, _, name, model = heapq.heappop(events)
        lo, hi = max(clock, window[0]), min(now, window[1])
        if hi > lo:
            allocated_area += allocated / 1000 * (hi - lo)
        clock = now
        task = by_name[name]
        if kind == 0:
            free[model] += asked_milli(task)
            allocated -= asked_milli(task)
            retry(now)
            continue
        chosen = pool_for(task, free)
        if chosen is None:
            pending.setdefault((task.gpu_spec, asked_milli(task)), {})[name] = now
        else:
            place(task, chosen, now, now)
    for queue in pending.values():
        for name, arrived in queue.items():
            waits[name] = clock - arrived
    ordered = sorted(waits.values())

    def pct(q: float) -> float:
        """A percentile of the tasks' waits."""
        return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)] if ordered else 0.0

    span = window[1] - window[0]
    return {
        "gpu_tasks": len(waits),
        "never_placed": sum(len(queue) for queue in pending.values()),
        "allocated_share": allocated_area / (span * capacity / 1000) if span > 0 else 0.0,
        "pending_p50_s": pct(0.5),
        "pending_p95_s": pct(0.95),
        "pending_gpu_hours": sum(by_name[name].gpus * wait for name, wait in waits.items()) / 3600,
    }


def inflation_pooled(nodes: Sequence[TraceNode], tasks: Sequence[Task]) -> dict[str, float]:
    """Workload inflation on pooled cards: tasks drawn as `inflate` draws them, no departures, until the GPUs asked
    reach the capacity; the share of asked GPUs no pool could hold (only card-model constraints leave any)."""
    free = pools(nodes)
    asked = unplaced = 0
    for task in inflate(tasks, sum(free.values()) / 1000):
        if not task.num_gpu:
            continue
        asked += asked_milli(task)
        model = pool_for(task, free)
        if model is None:
            unplaced += asked_milli(task)
        else:
            free[model] -= asked_milli(task)
    return {"asked_gpus": asked / 1000, "unplaced": unplaced / asked if asked else 0.0}


def hami_alone(report: dict[str, Any], name: str) -> dict[str, float]:
    """HAMi alone's pending GPU-hours per policy, from a trace_replay report's timeline."""
    return {
        result["setup"]["policy"]: result["pending_gpu_hours"]
        for result in report.get("timeline", {}).get(name, [])
        if not result["setup"]["controller"] and result["setup"]["resources"]
    }


def main(argv: list[str] | None = None) -> None:
    """Replay the pooled timeline and print it beside HAMi alone and the issue's target."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--trace-dir", type=Path, default=TRACE_DIR)
    parser.add_argument("--file", default="default", help="the task list (needs creation and deletion times)")
    parser.add_argument("--compress", type=float, default=5000.0)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--report",
        type=Path,
        nargs="*",
        default=[ROOT / "docs" / "performance-trace.json"],
        help="trace_replay reports whose HAMi-alone timeline rows go beside the bound (same --compress and --rounds)",
    )
    parser.add_argument(
        "--inflation-files", default="default", help="task lists also drawn by workload inflation on pooled cards"
    )
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)
    nodes = read_nodes(args.trace_dir / NODE_FILE)
    tasks = read_tasks(args.trace_dir / f"openb_pod_list_{args.file}.csv")
    pooled = replay_pooled(nodes, tasks, compress=args.compress, rounds=args.rounds)
    alone: dict[str, float] = {}
    for path in args.report:
        report = json.loads(path.read_text())
        if any(
            r.get("compress") != args.compress or r.get("rounds") != args.rounds
            for r in report.get("timeline", {}).get(args.file, [])
        ):
            print(f"{path}: another --compress or --rounds; left out", file=sys.stderr)
            continue
        alone.update(hami_alone(report, args.file))
    print(
        f"{args.file}, {len(nodes)} nodes, arrivals compressed {args.compress:g}x, {args.rounds} rounds, "
        f"{pooled['gpu_tasks']} GPU tasks"
    )
    print(f"{'cluster':<28} {'allocated':>9} {'GPU-hours Pending':>18} {'p50 / p95 pending':>20}")
    print(
        f"{'pooled (no fragments)':<28} {pooled['allocated_share']:>8.1%} {pooled['pending_gpu_hours']:>18,.1f} "
        f"{pooled['pending_p50_s']:>9.0f} / {pooled['pending_p95_s']:.0f} s"
    )
    for policy, hours in sorted(alone.items()):
        print(f"{'HAMi alone, ' + policy:<28} {'':>9} {hours:>18,.1f}")
    if alone:
        target = min(alone.values()) / 2
        verdict = "within reach" if pooled["pending_gpu_hours"] <= target else "out of reach of any defragmenter"
        print(f"target (half of HAMi's best alone): {target:,.1f} GPU-hours; the pooled cluster's: {verdict}")
    inflation = {
        name: inflation_pooled(nodes, read_tasks(args.trace_dir / f"openb_pod_list_{name}.csv"))
        for name in args.inflation_files.split(",")
        if name
    }
    for name, figures in inflation.items():
        print(f"inflation {name} on pooled cards, 100% asked: {figures['unplaced']:.1%} of asked GPUs unplaced")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "pooled": pooled,
                    "inflation": inflation,
                    "hami_alone": alone,
                    "args": vars(args)
                    | {
                        "trace_dir": str(args.trace_dir),
                        "report": [str(p) for p in args.report],
                        "json": str(args.json),
                    },
                },
                indent=1,
            )
            + "\n"
        )


if __name__ == "__main__":
    main()
