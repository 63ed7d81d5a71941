"""The full repack: workload inflation's tasks, every one placed again on an empty cluster, hardest first.

What a defragmenter free to evict every running task at once and re-place them all would reach by greedy repacking,
beside HAMi alone in arrival order (the replay's baseline) and issue 22's inflation target (a quarter of HAMi's best
policy alone). Tasks are those `inflate` draws up to 100% asked; each is placed by HAMi's fit and node and GPU policy
(`Cluster.choose`), with or without node CPU and memory, in arrival order and then hardest first: tasks bound to
some card models, then by GPUs asked, cards, CPU and memory, largest first. A greedy repack is a point a
defragmenter could reach, not a bound on what one could: the best packing may be better still.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.trace_replay import (
    NODE_FILE,
    POLICIES,
    TASK_FILES,
    TRACE_DIR,
    Cluster,
    InflationLedger,
    Task,
    TraceNode,
    inflate,
    read_nodes,
    read_tasks,
)

ORDERS = ("arrival", "repack")


def drawn(nodes: Sequence[TraceNode], tasks: Sequence[Task], *, resources: bool) -> list[Task]:
    """The tasks workload inflation draws up to 100% asked (GPU tasks only without node resources, as the replay)."""
    capacity = float(sum(node.gpus for node in nodes))
    return [task for task in inflate(tasks, capacity) if resources or task.num_gpu]


def repack_order(tasks: Iterable[Task]) -> list[Task]:
    """The repack's order: tasks that accept only some card models first (placed last, the others have taken those
    cards), then GPUs asked, cards, CPU and memory, each largest first; arrival order breaks ties."""
    return sorted(tasks, key=lambda t: (not t.gpu_spec, -t.gpus, -t.num_gpu, -t.cpu_milli, -t.memory_mib))


def place_all(nodes: Sequence[TraceNode], tasks: Iterable[Task], policy: str, *, resources: bool) -> dict[str, Any]:
    """Each task placed in turn on an empty cluster by HAMi's choice, none moved: the inflation figures at the end."""
    cluster = Cluster(nodes, policy, resources=resources)
    ledger = InflationLedger(cluster.capacity)
    for task in tasks:
        choice = cluster.choose(task)
        if choice is not None:
            cluster.put(task, *choice)
        placed = task.name in cluster.running
        ledger.record(task, placed, 0, "" if placed else cluster.unplaced_cause(task))
    return ledger.row(ledger.asked / cluster.capacity)


def replay(nodes: Sequence[TraceNode], tasks: Sequence[Task], policy: str, *, resources: bool) -> dict[str, Any]:
    """Arrival order and the repack on the same drawn tasks."""
    tasks = drawn(nodes, tasks, resources=resources)
    return {
        "policy": policy,
        "resources": resources,
        "tasks": len(tasks),
        "arrival": place_all(nodes, tasks, policy, resources=resources),
        "repack": place_all(nodes, repack_order(tasks), policy, resources=resources),
    }


def target(rows: Sequence[dict[str, Any]]) -> float:
    """Issue 22's inflation target for a list: a quarter of HAMi's best policy alone, node resources counted."""
    return min(row["arrival"]["unplaced"] for row in rows if row["resources"]) / 4


def main(argv: list[str] | None = None) -> None:
    """Replay each list and policy both ways, with and without node CPU and memory, and print them beside the target."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--trace-dir", type=Path, default=TRACE_DIR)
    parser.add_argument("--files", default=",".join(TASK_FILES), help="task lists")
    parser.add_argument("--policies", default=",".join(POLICIES), help="HAMi's policy pairs (trace_replay's names)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)
    nodes = read_nodes(args.trace_dir / NODE_FILE)
    report: dict[str, list[dict[str, Any]]] = {}
    print(f"{len(nodes)} nodes; unplaced share of asked GPUs at 100% asked (of it: CPU-memory / fragmented)")
    print(f"{'list':<11} {'policy':<15} {'CPU/mem':<8} {'arrival (HAMi alone)':<26} {'repack (hardest first)':<26}")
    for name in filter(None, args.files.split(",")):
        tasks = read_tasks(args.trace_dir / f"openb_pod_list_{name}.csv")
        rows = report[name] = [
            replay(nodes, tasks, policy, resources=resources)
            for resources in (True, False)
            for policy in filter(None, args.policies.split(","))
        ]
        for row in rows:
            cells = [
                f"{100 * row[order]['unplaced']:5.2f}% ({100 * row[order]['unplaced_cpu_memory']:.2f} / "
                f"{100 * row[order]['unplaced_fragmented']:.2f})"
                for order in ORDERS
            ]
            counted = "yes" if row["resources"] else "no"
            print(f"{name:<11} {row['policy']:<15} {counted:<8} {cells[0]:<26} {cells[1]:<26}", flush=True)
        best = min(row["repack"]["unplaced"] for row in rows if row["resources"])
        print(f"{name:<11} target {100 * target(rows):.2f}% unplaced; the best repack with CPU/mem {100 * best:.2f}%")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
