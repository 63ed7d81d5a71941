"""The best placement found for workload inflation's tasks at 100% asked, checked from scratch: where the packing
bound leaves issue 22's inflation target open, a placement under it shows the target within reach of a placement.

The full repack (bench/repack.py) treats every card model alike. On a list where the tasks bound to some models ask
more GPUs than those models have (a *scarce* model, as `T4` on `gpuspec33`), some of them stay unplaced whatever
happens, and every GPU of those cards another task takes adds to them. The search places the tasks bound to scarce
models first, their shares of over three quarters of a card last among them (the rest of such a card fits few
shares), then the others; multi-card tasks as large as the largest node go first in each group, the repack's order
within it, each on the repack's balanced node (`balanced_choice`). Then, for each task left, smallest first, the
controller's planner (`plan`, moves of placed tasks onto cards HAMi's fit accepts, no eviction budget: a placement,
not a defragmenter's run) makes room, pass after pass until one places nothing (a shape whose plan failed is planned
again only after a move). The end placement is checked by placing every task again on an empty
cluster on its node and cards, each by kube-scheduler's CPU and memory and HAMi's fit on exactly those cards.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.repack import REPORT, balanced_choice, drawn, repack_order, report_figures
from bench.trace_replay import (
    NODE_FILE,
    SPREAD_BINPACK,
    TASK_FILES,
    TRACE_DIR,
    Cluster,
    Controller,
    ControllerPolicy,
    Task,
    TraceNode,
    read_nodes,
    read_tasks,
    unplaced_by_models,
)

WIDE_SHARE_MILLI = 750
"""A share over this (thousandths of a card) leaves a rest of the card few other shares fit."""
MOVES = 8
"""The planner's moves for one task left: a placement's search, no defragmenter's budget."""
SEARCH_STEPS = 400_000
"""The planner's search bound for one task left: four times the controller's, as it is run once."""


def scarce_models(nodes: Sequence[TraceNode], tasks: Iterable[Task]) -> frozenset[str]:
    """The card models whose tasks bound to them alone ask more GPUs than their cards."""
    cards: dict[str, int] = defaultdict(int)
    for node in nodes:
        cards[node.model] += node.gpus
    asked: dict[str, float] = defaultdict(float)
    for task in tasks:
        if len(set(task.gpu_spec)) == 1:
            asked[task.gpu_spec[0]] += task.gpus
    return frozenset(model for model, gpus in asked.items() if gpus > cards[model])


def search_order(tasks: Iterable[Task], scarce: frozenset[str], largest: int) -> list[Task]:
    """Tasks bound to scarce models (their wide shares last), then the others; in each, tasks of `largest` cards
    first, then the repack's order."""

    def bound(task: Task) -> bool:
        return bool(task.gpu_spec) and set(task.gpu_spec) <= scarce

    def wide(task: Task) -> bool:
        return task.num_gpu == 1 and WIDE_SHARE_MILLI < task.gpu_milli < 1000

    ordered = sorted(repack_order(tasks), key=lambda task: task.num_gpu < largest)
    return sorted(ordered, key=lambda task: (not bound(task), bound(task) and wide(task)))


def improve(cluster: Cluster, left: list[Task], moves: int, steps: int) -> tuple[list[Task], int, int]:
    """The planner's room for each task left, smallest first, pass after pass until one places none: the tasks still
    left, the passes and the moves made."""
    policy = ControllerPolicy(
        moves_per_run=moves,
        moves_per_node=moves,
        moves_per_hour=sys.maxsize,
        cooldown=0.0,
        max_moves_per_plan=moves,
        search_steps=steps,
    )
    controller = Controller(cluster, policy)
    made, passes = 0, 0
    while left:
        passes += 1
        still = []
        for task in sorted(left, key=lambda task: task.gpus):
            moved = controller.rescue(task, None)
            if task.name in cluster.running:
                made += moved or 0
            else:
                still.append(task)
        if len(still) == len(left):
            break
        left = still
    return left, passes, made


def problems(nodes: Sequence[TraceNode], cluster: Cluster) -> list[str]:
    """Every running task placed again, in turn, on an empty cluster on its node and cards: where kube-scheduler's
    CPU and memory or HAMi's fit on exactly those cards refuses it."""
    fresh = Cluster(nodes, cluster.policy, resources=cluster.resources)
    found = []
    for entry in cluster.running.values():
        task, node, cards = entry.task, entry.node, entry.cards
        if not fresh.resources_fit(task, node):
            found.append(f"{task.name}: {nodes[node].name} has not its CPU and memory")
        elif fresh.hami_fit_on(task, node, cards) != cards:
            found.append(f"{task.name}: HAMi's fit refuses cards {cards} of {nodes[node].name}")
        fresh.put(task, node, cards)
    return found


def search(
    nodes: Sequence[TraceNode], tasks: Sequence[Task], policy: str, moves: int = MOVES, steps: int = SEARCH_STEPS
) -> dict[str, Any]:
    """The greedy placement, the planner's passes after it, and the check: unplaced shares of the asked GPUs."""
    tasks = drawn(nodes, tasks, resources=True)
    asked = sum(task.gpus for task in tasks)
    scarce = scarce_models(nodes, tasks)
    cluster = Cluster(nodes, policy, resources=True)
    left = []
    for task in search_order(tasks, scarce, max(node.gpus for node in nodes)):
        choice = balanced_choice(cluster, task)
        if choice is None:
            left.append(task)
        else:
            cluster.put(task, *choice)
    greedy = sum(task.gpus for task in left) / asked
    start = time.process_time()
    left, passes, made = improve(cluster, left, moves, steps)
    return {
        "policy": policy,
        "scarce": sorted(scarce),
        "tasks": len(tasks),
        "asked": asked,
        "greedy": greedy,
        "unplaced": sum(task.gpus for task in left) / asked,
        "tasks_unplaced": len(left),
        "unplaced_by_models": unplaced_by_models(left, asked),
        "passes": passes,
        "moves": made,
        "planner_cpu_seconds": time.process_time() - start,
        "problems": problems(nodes, cluster),
    }


def main(argv: list[str] | None = None) -> None:
    """Search each list and print what the placement found leaves unplaced beside issue 22's target (from
    bench/repack.py's report, whose arrival rows are HAMi alone)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--trace-dir", type=Path, default=TRACE_DIR)
    parser.add_argument("--files", default=",".join(TASK_FILES), help="task lists")
    parser.add_argument("--policy", default=SPREAD_BINPACK, help="HAMi's policy pair for the cards on a node")
    parser.add_argument("--moves", type=int, default=MOVES, help="the planner's moves for one task left")
    parser.add_argument("--search-steps", type=int, default=SEARCH_STEPS, help="the planner's search bound")
    parser.add_argument("--repack", type=Path, default=REPORT, help="bench/repack.py's --json report")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)
    targets = {name: wanted for name, (wanted, _best) in report_figures(args.repack).items()}
    nodes = read_nodes(args.trace_dir / NODE_FILE)
    report = {}
    print(f"{len(nodes)} nodes; unplaced share of the asked GPUs at 100% asked, node CPU and memory counted")
    for name in filter(None, args.files.split(",")):
        tasks = read_tasks(args.trace_dir / f"openb_pod_list_{name}.csv")
        row = report[name] = search(nodes, tasks, args.policy, args.moves, args.search_steps)
        print(
            f"{name:<11} scarce {','.join(row['scarce']) or '-':<6} greedy {100 * row['greedy']:.4f}% "
            f"then the planner {100 * row['unplaced']:.4f}% ({row['passes']} passes, {row['moves']} moves, "
            f"{row['planner_cpu_seconds']:.0f} s CPU); checked: {len(row['problems'])} problems; target "
            f"{100 * targets[name]:.4f}%: {'under' if row['unplaced'] <= targets[name] else 'over'}",
            flush=True,
        )
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
