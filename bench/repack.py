"""The full repack: workload inflation's tasks, every one placed again on an empty cluster, hardest first.

What a defragmenter free to evict every running task at once and re-place them all would reach by greedy repacking,
beside HAMi alone in arrival order (the replay's baseline) and issue 22's inflation target (a quarter of HAMi's best
policy alone). Tasks are those `inflate` draws up to 100% asked; each is placed by HAMi's fit and node and GPU policy
(`Cluster.choose`), with or without node CPU and memory, in arrival order and then hardest first: tasks bound to
some card models, then by GPUs asked, cards, CPU and memory, largest first. Hardest first again with the node
chosen otherwise (`balanced`): among the nodes kube-scheduler and HAMi's fit accept, the one whose CPU and memory
left stay most in step with its GPUs left, the cards on it still HAMi's pick; a pin (a placement naming the node
and cards) puts a task there, HAMi's node policy would not. A greedy repack is a point a defragmenter could reach,
not a bound on what one could: the best packing may be better still.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable, Sequence
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
    task_request,
)
from kubectl_hami_place.core.fit import CardRequest

ORDERS = ("arrival", "repack", "balanced")
REPORT = Path(__file__).resolve().parent.parent / "docs" / "performance-trace-repack.json"
"""Where the docs keep this bench's `--json` report, which the packing bound and the placement search read."""
Choice = Callable[[Cluster, Task], tuple[int, tuple[int, ...]] | None]


def drawn(nodes: Sequence[TraceNode], tasks: Sequence[Task], *, resources: bool) -> list[Task]:
    """The tasks workload inflation draws up to 100% asked (GPU tasks only without node resources, as the replay)."""
    capacity = float(sum(node.gpus for node in nodes))
    return [task for task in inflate(tasks, capacity) if resources or task.num_gpu]


def repack_order(tasks: Iterable[Task]) -> list[Task]:
    """The repack's order: tasks that accept only some card models first (placed last, the others have taken those
    cards), then GPUs asked, cards, CPU and memory, each largest first; arrival order breaks ties."""
    return sorted(tasks, key=lambda t: (not t.gpu_spec, -t.gpus, -t.num_gpu, -t.cpu_milli, -t.memory_mib))


def imbalance(cluster: Cluster, task: Task, request: CardRequest, node: int) -> float:
    """How far the node's CPU and its memory left would each be from its GPUs left (shares of the node's own) with
    the task on it: a node whose CPU runs out first strands its cards, one whose cards run out first its CPU."""
    trace_node = cluster.trace_nodes[node]
    cores = 100 * request.nums if request.exclusive else request.coresreq
    gpus_left = 1 - (cluster.sums[node][2] + cores) / (100 * trace_node.gpus)  # sums: slots, memory, cores
    cpu_left = (cluster.free_cpu[node] - task.cpu_milli) / trace_node.cpu_milli
    memory_left = (cluster.free_mem[node] - task.memory_mib) / trace_node.memory_mib
    return abs(cpu_left - gpus_left) + abs(memory_left - gpus_left)


def balanced_choice(cluster: Cluster, task: Task) -> tuple[int, tuple[int, ...]] | None:
    """The node that fits the task (kube-scheduler's CPU and memory, HAMi's fit) with the least `imbalance`, the
    cards on it by HAMi's GPU policy; a task without cards where kube-scheduler puts it."""
    request = task_request(task)
    if request is None:
        return cluster.choose_cpu_only(task)
    candidates = cluster.may_fit_nodes(task, request)
    candidates.sort(key=lambda node: (imbalance(cluster, task, request, node), cluster.rank[node]))
    for node in candidates:
        cards = cluster.hami_fit(task, request, node)
        if cards is not None:
            return node, cards
    return None


def place_all(
    nodes: Sequence[TraceNode], tasks: Iterable[Task], policy: str, *, resources: bool, choose: Choice = Cluster.choose
) -> dict[str, Any]:
    """Each task placed in turn on an empty cluster where `choose` says (HAMi's choice unless given), none moved:
    the inflation figures at the end."""
    cluster = Cluster(nodes, policy, resources=resources)
    ledger = InflationLedger(cluster.capacity)
    for task in tasks:
        choice = choose(cluster, task)
        if choice is not None:
            cluster.put(task, *choice)
        placed = task.name in cluster.running
        ledger.record(task, placed, 0, "" if placed else cluster.unplaced_cause(task))
    return ledger.row(ledger.asked / cluster.capacity)


def replay(nodes: Sequence[TraceNode], tasks: Sequence[Task], policy: str, *, resources: bool) -> dict[str, Any]:
    """Arrival order, the repack and the balanced repack on the same drawn tasks."""
    tasks = drawn(nodes, tasks, resources=resources)
    return {
        "policy": policy,
        "resources": resources,
        "tasks": len(tasks),
        "arrival": place_all(nodes, tasks, policy, resources=resources),
        "repack": place_all(nodes, repack_order(tasks), policy, resources=resources),
        "balanced": place_all(nodes, repack_order(tasks), policy, resources=resources, choose=balanced_choice),
    }


def target(rows: Sequence[dict[str, Any]]) -> float:
    """Issue 22's inflation target for a list: a quarter of HAMi's best policy alone, node resources counted."""
    return min(row["arrival"]["unplaced"] for row in rows if row["resources"]) / 4


def best_repack(rows: Sequence[dict[str, Any]]) -> float:
    """The least share of the asked GPUs a repack (either order) left unplaced, node CPU and memory counted."""
    return min(row[order]["unplaced"] for row in rows if row["resources"] for order in ORDERS[1:])


def report_figures(path: Path) -> dict[str, tuple[float, float]]:
    """(target, best repack with CPU and memory) by list, from this bench's `--json` report."""
    return {name: (target(rows), best_repack(rows)) for name, rows in json.loads(path.read_text()).items()}


def main(argv: list[str] | None = None) -> None:
    """Replay each list and policy in the three orders, with and without node CPU and memory, and print them beside
    the target."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--trace-dir", type=Path, default=TRACE_DIR)
    parser.add_argument("--files", default=",".join(TASK_FILES), help="task lists")
    parser.add_argument("--policies", default=",".join(POLICIES), help="HAMi's policy pairs (trace_replay's names)")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)
    nodes = read_nodes(args.trace_dir / NODE_FILE)
    report: dict[str, list[dict[str, Any]]] = {}
    print(f"{len(nodes)} nodes; unplaced share of asked GPUs at 100% asked (of it: CPU-memory / fragmented)")
    heads = ("arrival (HAMi alone)", "repack (hardest first)", "balanced repack")
    print(f"{'list':<11} {'policy':<15} {'CPU/mem':<8} " + " ".join(f"{head:<26}" for head in heads))
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
            columns = " ".join(f"{cell:<26}" for cell in cells)
            print(f"{name:<11} {row['policy']:<15} {counted:<8} {columns}", flush=True)
        best = best_repack(rows)
        print(f"{name:<11} target {100 * target(rows):.2f}% unplaced; the best repack with CPU/mem {100 * best:.2f}%")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
