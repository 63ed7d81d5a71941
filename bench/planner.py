"""The planner against an exact MILP, a node-level descheduler and HAMi alone; then the planner at scale.

Small random clusters (3 nodes x 4 cards, 40 GiB cards, 10 slots) are solved exactly with scipy's MILP:
- free-cards: the most whole cards free after any moves (ties: fewest moves); the planner's share of it;
- fit: the fewest moves that let one pod fit whose memory no card has free today; the planner's moves over it.
The descheduler baseline evicts from the least-used cards and lets HAMi's binpack re-place (fullest card first);
HAMi alone moves nothing. The scale run times `plan` on 1,000 nodes x 8 cards with 20,000 pods.
"""

from __future__ import annotations

import os
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import lil_matrix

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._clusters import cluster
from kubectl_hami_place.core.planner import FitGoal, FreeCardsGoal, Limits, PlanPod, Snapshot, plan
from kubectl_hami_place.core.planner.state import State
from kubectl_hami_place.core.requests import card_request

UNBOUNDED = Limits(max_moves=10_000, max_moves_per_node=10_000)
INSTANCES = 30


# The exact model ------------------------------------------------------------------------------------------------


def exact(snapshot: Snapshot, pending: PlanPod | None) -> tuple[int, int] | None:
    """(cards free after, moves) of the optimum: with `pending`, fewest moves that place it; else most free cards."""
    state = State(snapshot, UNBOUNDED)
    cards = state.cards
    pods = [state.pods[key] for key in sorted(state.pods)]
    nodes = sorted(state.by_node)
    members = [(p.pod, p.cards, p.pod.gpu_requests[0][1].nums) for p in pods]
    if pending is not None:
        members.append((pending, (), pending.gpu_requests[0][1].nums))
    nx, nz = len(members) * len(cards), len(members) * len(nodes)
    ny, nm = len(cards), len(members)
    size = nx + nz + ny + nm

    def x(i: int, c: int) -> int:
        return i * len(cards) + c

    def z(i: int, n: int) -> int:
        return nx + i * len(nodes) + n

    def y(c: int) -> int:
        return nx + nz + c

    def m(i: int) -> int:
        return nx + nz + ny + i

    rows: list[tuple[dict[int, float], float, float]] = []
    for i, (_, held, nums) in enumerate(members):
        rows.append(({x(i, c): 1.0 for c in range(len(cards))}, nums, nums))
        rows.append(({z(i, n): 1.0 for n in range(len(nodes))}, 1, 1))
        for c, slot in enumerate(cards):
            rows.append(({x(i, c): 1.0, z(i, nodes.index(slot.node)): -1.0}, -np.inf, 0))
            if slot.card.uuid in held:
                rows.append(({m(i): 1.0, x(i, c): 1.0}, 1, np.inf))
    for c, slot in enumerate(cards):
        mem = {x(i, c): float(state.share(pod, slot.card)[1]) for i, (pod, _, _) in enumerate(members)}
        cores = {x(i, c): float(state.share(pod, slot.card)[2]) for i, (pod, _, _) in enumerate(members)}
        count = {x(i, c): 1.0 for i in range(len(members))}
        for coefficients, capacity in ((mem, slot.card.devmem), (cores, slot.card.devcore), (count, slot.card.count)):
            rows.append(({**coefficients, y(c): -float(capacity)}, -np.inf, 0))
    matrix = lil_matrix((len(rows), size))
    lower, upper = np.empty(len(rows)), np.empty(len(rows))
    for r, (coefficients, low, high) in enumerate(rows):
        for column, value in coefficients.items():
            matrix[r, column] = value
        lower[r], upper[r] = low, high
    objective = np.zeros(size)
    moves_weight = 1.0 if pending is not None else 1.0 / (len(members) + 1)
    for i in range(len(pods)):
        objective[m(i)] = moves_weight
    if pending is None:
        objective[nx + nz : nx + nz + ny] = 1.0
    result = milp(
        objective,
        constraints=LinearConstraint(matrix.tocsr(), lower, upper),
        integrality=np.ones(size),
        bounds=Bounds(np.zeros(size), np.ones(size)),
        options={"time_limit": 60},
    )
    if result.x is None or result.status != 0:
        return None
    values = np.round(result.x).astype(int)
    free = sum(1 for c in range(len(cards)) if values[y(c)] == 0)
    moves = sum(int(values[m(i)]) for i in range(len(pods)))
    return free, moves


# The baselines --------------------------------------------------------------------------------------------------


def descheduler(snapshot: Snapshot, pending: PlanPod | None, threshold: float = 0.4) -> tuple[int, int, bool]:
    """(cards free after, pods evicted, pending placed): evict from the least-used cards, HAMi binpack re-places.

    free-cards: every card under `threshold` of its memory is drained at once. fit: cards are drained one at a
    time, least used first, until the pending pod fits.
    """
    state = State(snapshot, UNBOUNDED)
    order = sorted((s for s in state.cards if s.used), key=lambda s: (s.mem, s.ordinal))
    evicted = 0
    if pending is None:
        drained = [s for s in order if s.mem < threshold * s.card.devmem]
        keys = sorted({key for s in drained for key in s.pods})
        evicted = _evict_and_binpack(state, keys)
        return sum(1 for s in state.cards if not s.used), evicted, False
    for slot in [None, *order]:
        if slot is not None:
            evicted += _evict_and_binpack(state, sorted(slot.pods))
        if _binpack(state, pending) is not None:
            return sum(1 for s in state.cards if not s.used), evicted, True
    return sum(1 for s in state.cards if not s.used), evicted, False


def _evict_and_binpack(state: State, keys: list[str]) -> int:
    """Release the pods, then re-place each where HAMi's binpack would (fullest fitting card); count them."""
    for key in keys:
        for uuid in state.pods[key].cards:
            state._take(state.by_uuid[uuid], key)
    for key in keys:
        entry = state.pods[key]
        slots = _binpack(state, entry.pod)
        if slots is None:
            continue
        for slot in slots:
            state._give(slot, key, state.share(entry.pod, slot.card))
        entry.cards = tuple(slot.card.uuid for slot in slots)
    return len(keys)


def _binpack(state: State, pod: PlanPod) -> list | None:
    """The cards HAMi's binpack policy would give the pod: on the fullest node, its fullest fitting cards."""
    nums = pod.gpu_requests[0][1].nums
    nodes = sorted(state.by_node, key=lambda n: (-sum(s.mem for s in state.by_node[n]), n))
    for node in nodes:
        fitting = [s for s in state.by_node[node] if s.open and state.fits(pod, s)]
        if len(fitting) >= nums:
            return sorted(fitting, key=lambda s: (-s.mem, s.ordinal))[:nums]
    return None


# The runs -------------------------------------------------------------------------------------------------------


def small(seed: int, pods: int = 26) -> Snapshot:
    """A small cluster: 3 nodes x 4 cards, `pods` placed at random, 10 % of them on two cards."""
    return cluster(seed, nodes=3, cards=4, pods=pods, multi=0.1)


def pending_pod(snapshot: Snapshot, seed: int) -> PlanPod | None:
    """A one-card pod asking more memory than any card has free today, or None when a card is empty."""
    state = State(snapshot, UNBOUNDED)
    largest = max(s.free for s in state.cards)
    if largest >= 40960:
        return None
    memory = min(40960, largest + random.Random(seed).choice((2048, 8192, 16384, 24576)))
    return PlanPod("bench", "pending", (card_request(1, memreq=memory, coresreq=0),))


def free_cards_figures() -> None:
    """Freed cards: planner, optimum, descheduler, HAMi alone."""
    rows = []
    unsolved = 0
    for seed in range(INSTANCES):
        snapshot = small(seed)
        state = State(snapshot, UNBOUNDED)
        before = sum(1 for s in state.cards if not s.used)
        optimum = exact(snapshot, None)
        if optimum is None:
            unsolved += 1
            continue
        result = plan(snapshot, FreeCardsGoal(len(state.cards)), UNBOUNDED)
        base_free, base_moves, _ = descheduler(snapshot, None)
        rows.append(
            (optimum[0] - before, optimum[1], len(result.freed), len(result.moves), base_free - before, base_moves)
        )
    opt = sum(r[0] for r in rows)
    print(f"free-cards ({len(rows)} clusters of 3 nodes x 4 cards, 26 pods placed at random; {unsolved} left out:")
    print("  the MILP proved no optimum within its time limit)")
    print(f"  {'':<22}{'cards freed':>12}{'moves':>8}{'% of optimal':>14}")
    print(f"  {'exact MILP':<22}{opt:>12}{sum(r[1] for r in rows):>8}{100.0:>13.1f}%")
    freed, moves = sum(r[2] for r in rows), sum(r[3] for r in rows)
    print(f"  {'planner':<22}{freed:>12}{moves:>8}{100 * freed / opt:>13.1f}%")
    freed, moves = sum(r[4] for r in rows), sum(r[5] for r in rows)
    print(f"  {'descheduler + binpack':<22}{freed:>12}{moves:>8}{100 * freed / opt:>13.1f}%")
    print(f"  {'HAMi alone':<22}{0:>12}{0:>8}{0.0:>13.1f}%")
    short = [r for r in rows if r[2] < r[0]]
    missed = sum(r[0] - r[2] for r in short)
    print(f"  planner below the optimum on {len(short)} of {len(rows)} clusters, by {missed} card(s)")
    print("  target: planner >= 95% of optimal")


def fit_figures() -> None:
    """Moves to make one pod fit: planner, optimum, descheduler, HAMi alone."""
    rows = []
    unsolved = 0
    for seed in range(INSTANCES):
        snapshot = small(1000 + seed, pods=30)
        pending = pending_pod(snapshot, seed)
        if pending is None:
            continue
        optimum = exact(snapshot, pending)
        if optimum is None:
            unsolved += 1
            continue
        result = plan(snapshot, FitGoal(pending), UNBOUNDED)
        _, base_moves, base_ok = descheduler(snapshot, pending)
        rows.append((optimum[1], result.complete, len(result.moves), base_ok, base_moves))
    solved = [r for r in rows if r[1]]
    print(
        f"fit ({len(rows)} clusters, 30 pods, where a pending pod fits no card but can be made to; {unsolved} left out:"
    )
    print("  infeasible even for the MILP, or no optimum proved within its time limit)")
    print(f"  {'':<22}{'placed':>8}{'moves':>8}{'moves vs optimal':>18}")
    opt_all = sum(r[0] for r in rows)
    print(f"  {'exact MILP':<22}{len(rows):>8}{opt_all:>8}{'1.00x':>18}")
    opt, moves = sum(r[0] for r in solved), sum(r[2] for r in solved)
    ratio = f"{moves / opt:.2f}x" if opt else "-"
    print(f"  {'planner':<22}{len(solved):>8}{moves:>8}{ratio:>18}  (on the {len(solved)} it placed)")
    placed = [r for r in rows if r[3]]
    opt, moves = sum(r[0] for r in placed), sum(r[4] for r in placed)
    ratio = f"{moves / opt:.2f}x" if opt else "-"
    print(f"  {'descheduler + binpack':<22}{len(placed):>8}{moves:>8}{ratio:>18}  (on the {len(placed)} it placed)")
    print(f"  {'HAMi alone':<22}{0:>8}{0:>8}{'-':>18}")
    print("  target: planner moves <= optimal + 20%")


def scale_figures() -> None:
    """Planning time on 1,000 nodes x 8 cards with 20,000 pods."""
    snapshot = cluster(7, nodes=1000, cards=8, pods=20_000, multi=0.05)
    pending = pending_pod(snapshot, 7) or PlanPod("bench", "pending", (card_request(1, memreq=40960, coresreq=0),))
    print(f"scale ({len(snapshot.nodes)} nodes x 8 cards, {len(snapshot.pods)} pods; median of 3 runs, wall and CPU)")
    goals = (
        ("fit: one whole-card pod", FitGoal(pending), Limits()),
        ("free-cards 50", FreeCardsGoal(50), Limits(max_moves=200, max_moves_per_node=8)),
        ("free-cards 1000", FreeCardsGoal(1000), UNBOUNDED),
    )
    for label, goal, limits in goals:
        walls, cpus = [], []
        for _ in range(3):
            start, cpu = time.perf_counter(), time.process_time()
            result = plan(snapshot, goal, limits)
            walls.append(time.perf_counter() - start)
            cpus.append(time.process_time() - cpu)
        wall, cpu = statistics.median(walls), statistics.median(cpus)
        print(f"  {label:<26}{wall:>6.2f} s wall {cpu:>6.2f} s CPU {len(result.moves):>5} moves  {result.gain}")
    print(f"  target: < 2 s (load average now {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")


def main() -> None:
    """Print every figure."""
    free_cards_figures()
    fit_figures()
    scale_figures()


if __name__ == "__main__":
    main()
