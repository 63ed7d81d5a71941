"""The packing bound: how many of workload inflation's asked GPUs no placement at all can hold, whatever it evicts.

Workload inflation draws tasks until their asked GPUs reach the cluster's capacity, so every piece of a card no task
fits is a GPU asked and left unplaced. This bench bounds that from below on the cards alone: each card of a model
holds a multiset of tasks its model accepts whose shares sum to at most 100% (HAMi counts a share as
`ceil(gpu_milli / 10)`% of the card's cores and memory, and at most the card's `count` pods; a whole-card task takes
its cards whole), and node CPU and memory, nodes and multi-card tasks' one-node rule are left out. Each left out
only lowers the bound. The linear relaxation of that packing (Gilmore and Gomory's cutting-stock LP) is solved by
column generation with scipy (the bench extra); its prices are then checked by weak duality in pure Python
(`certificate`): for any prices, the cards' best fills plus what the prices leave of each task's GPUs bound the GPUs
any placement holds, so the bound rests on that sum alone, not on the solver. Prints each list's bound beside issue
22's target and the greedy full repack (read from bench/repack.py's report).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.repack import REPORT, drawn, report_figures
from bench.trace_replay import (
    NODE_FILE,
    TASK_FILES,
    TRACE_DIR,
    Task,
    TraceNode,
    accepts,
    node_cards,
    read_nodes,
    task_request,
)

WHOLE = 100
"""A card's room in HAMi's percent of its cores and memory."""


@dataclass(frozen=True)
class Share:
    """Tasks that take the same room of one card: `percent` of it (100: a whole card of a whole-card task), counted
    as `gpus` asked each, on models `spec` accepts; `count` of them."""

    percent: int
    gpus: float
    spec: tuple[str, ...]
    count: int


@dataclass(frozen=True)
class CardKind:
    """The cards of one model: how many, and how many pods one holds (HAMi's `count`)."""

    type: str
    cards: int
    slots: int


def shares_of(tasks: Sequence[Task]) -> list[Share]:
    """The GPU tasks by the room they take of one card as the replay asks HAMi for it (`task_request`); a task of n
    whole cards is n whole-card pieces (one node's rule left out)."""
    counted: Counter[tuple[int, float, tuple[str, ...]]] = Counter()
    for task in tasks:
        request = task_request(task)
        if request is None:
            continue
        if request.exclusive:
            counted[(WHOLE, task.gpus / request.nums, task.gpu_spec)] += request.nums
        else:
            counted[(request.coresreq, task.gpus, task.gpu_spec)] += 1
    return [Share(percent, gpus, spec, count) for (percent, gpus, spec), count in sorted(counted.items())]


def kinds_of(nodes: Sequence[TraceNode]) -> list[CardKind]:
    """The cluster's cards by model."""
    counted: Counter[tuple[str, int]] = Counter((card.type, card.count) for node in nodes for card in node_cards(node))
    return [CardKind(kind, cards, slots) for (kind, slots), cards in sorted(counted.items())]


def best_fill(shares: Sequence[Share], kind: CardKind, prices: Sequence[float]) -> tuple[float, tuple[int, ...]]:
    """The most a card of `kind` can hold by `prices` (how many of each share, within 100% and its pods), and that
    fill: exact, by dynamic programming over room left and pods left."""
    allowed = [i for i, share in enumerate(shares) if prices[i] > 0 and accepts(share.spec, kind.type)]
    best = [[0.0] * (kind.slots + 1) for _ in range(WHOLE + 1)]
    last: dict[tuple[int, int], int] = {}
    for room in range(1, WHOLE + 1):
        for pods in range(1, kind.slots + 1):
            value = max(best[room - 1][pods], best[room][pods - 1])
            for i in allowed:
                size = shares[i].percent
                if size <= room and best[room - size][pods - 1] + prices[i] > value:
                    value = best[room - size][pods - 1] + prices[i]
                    last[(room, pods)] = i
            best[room][pods] = value
    fill = [0] * len(shares)
    room, pods = WHOLE, kind.slots
    while pods > 0 and room > 0:
        i = last.get((room, pods), -1)
        if i >= 0 and best[room][pods] == best[room - shares[i].percent][pods - 1] + prices[i]:
            fill[i] += 1
            room, pods = room - shares[i].percent, pods - 1
        elif best[room][pods] == best[room - 1][pods]:
            room -= 1
        else:
            pods -= 1
    return best[WHOLE][kind.slots], tuple(fill)


def certificate(shares: Sequence[Share], kinds: Sequence[CardKind], prices: Sequence[float]) -> float:
    """At least the GPUs any placement holds, for any non-negative `prices` (weak duality): every card holds at most
    its best fill by the prices, and each placed task counts at most what its GPUs exceed its price by beyond that."""
    cards = sum(kind.cards * best_fill(shares, kind, prices)[0] for kind in kinds)
    beyond = sum(share.count * max(0.0, share.gpus - price) for share, price in zip(shares, prices, strict=True))
    return cards + beyond


def lp_prices(shares: Sequence[Share], kinds: Sequence[CardKind]) -> list[float]:
    """The cutting-stock LP's prices of the shares, by column generation (scipy): the fills start with one share
    alone, and each round adds every kind's best fill by the prices while it beats the kind's card price."""
    import numpy as np
    from scipy.optimize import linprog

    fills = [
        (k, tuple(min(WHOLE // share.percent, kind.slots) if j == i else 0 for j in range(len(shares))))
        for k, kind in enumerate(kinds)
        for i, share in enumerate(shares)
        if accepts(share.spec, kind.type)
    ]
    while True:
        columns, rows = len(fills), len(kinds) + len(shares)
        matrix = np.zeros((rows, columns + len(shares)))
        for column, (k, fill) in enumerate(fills):
            matrix[k, column] = 1
            matrix[len(kinds) :, column] = [-n for n in fill]
        matrix[len(kinds) :, columns:] = np.eye(len(shares))
        limits = [kind.cards for kind in kinds] + [0] * len(shares)
        cost = [0.0] * columns + [-share.gpus for share in shares]
        bounds = [(0, None)] * columns + [(0, share.count) for share in shares]
        solved = linprog(cost, A_ub=matrix, b_ub=limits, bounds=bounds, method="highs")
        duals = [-value for value in solved.ineqlin.marginals]
        card_prices, prices = duals[: len(kinds)], [max(0.0, value) for value in duals[len(kinds) :]]
        added = [
            (k, fill)
            for k, kind in enumerate(kinds)
            for value, fill in [best_fill(shares, kind, prices)]
            if value > card_prices[k] + 1e-9 and (k, fill) not in fills
        ]
        if not added:
            return prices
        fills += added


def bound(nodes: Sequence[TraceNode], tasks: Sequence[Task]) -> dict[str, Any]:
    """Inflation's tasks (node resources left out) and the least share of their asked GPUs no placement holds."""
    drawn_tasks = drawn(nodes, tasks, resources=False)
    shares, kinds = shares_of(drawn_tasks), kinds_of(nodes)
    asked = sum(share.gpus * share.count for share in shares)
    held = certificate(shares, kinds, lp_prices(shares, kinds))
    return {"tasks": len(drawn_tasks), "asked": asked, "held_at_most": held, "unplaced_at_least": 1 - held / asked}


def main(argv: list[str] | None = None) -> None:
    """The bound per task list, beside the target and the full repack."""
    from bench.trace_replay import read_tasks

    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--trace-dir", type=Path, default=TRACE_DIR)
    parser.add_argument("--files", default=",".join(TASK_FILES), help="task lists")
    parser.add_argument("--repack", type=Path, default=REPORT, help="bench/repack.py's --json report")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)
    nodes = read_nodes(args.trace_dir / NODE_FILE)
    repacked = report_figures(args.repack)
    report: dict[str, dict[str, Any]] = {}
    print("share of asked GPUs left unplaced at 100% asked")
    print(f"{'list':<11} {'target':>7} {'no placement below':>19} {'greedy full repack':>19}")
    for name in filter(None, args.files.split(",")):
        row = report[name] = bound(nodes, read_tasks(args.trace_dir / f"openb_pod_list_{name}.csv"))
        wanted, repack = repacked[name]
        print(
            f"{name:<11} {100 * wanted:6.2f}% {100 * row['unplaced_at_least']:18.2f}% {100 * repack:18.2f}%", flush=True
        )
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
