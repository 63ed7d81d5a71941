"""The FGD paper's placement policy, as a reference beside HAMi's own in the trace replay (not HAMi: HAMi has none).

Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation Gradient Descent" (USENIX
ATC '23), from its description. A node's cards are read as their *free percent*: the largest share of a card (in
percent of its cores and memory) a new task could still take there, as HAMi counts a card (`free_percent`: 0 once
its slots are all taken). For one class m of the target workload, the node's fragmentation F_n(m) is every free
percent on the node when m cannot run there (its model not accepted, its CPU or memory over the node's remainder, or
fewer cards holding its per-card share than it asks), else the free percent of the cards that cannot hold its share
(a whole card: the cards partly used). F_n(M) is the sum over the classes weighted by popularity, and FGD places a
task on the node and cards whose placement raises F_n(M) the least.

Everything here is integers: a class's weight is its task count, so F_n(M) is in percent x tasks and ties are exact.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

WHOLE = 100
"""The per-card share, in percent, of a task asking whole cards."""
MEMO_LIMIT = 100_000
"""Node states remembered per card model before the memo starts again (bounds memory on long replays)."""


@dataclass(frozen=True)
class TaskClass:
    """One class of the target workload: what the fragmentation measure reads of a task, and how many tasks it has."""

    percent: int
    cards: int
    cpu_milli: int
    memory_mib: int
    spec: tuple[str, ...]
    weight: int


def popular_classes(
    asks: Iterable[tuple[int, int, int, int, tuple[str, ...]]], coverage: float = 0.95
) -> tuple[TaskClass, ...]:
    """The workload's classes (asks: per-card percent, cards, CPU, memory, accepted models; one per GPU task), most
    popular first, keeping the fewest that cover `coverage` of the tasks (ties in count by the ask, for a fixed set)."""
    counts: dict[tuple[int, int, int, int, tuple[str, ...]], int] = {}
    for ask in asks:
        counts[ask] = counts.get(ask, 0) + 1
    ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    total = sum(counts.values())
    kept: list[TaskClass] = []
    covered = 0
    for ask, count in ordered:
        if covered >= coverage * total:
            break
        kept.append(TaskClass(*ask, weight=count))
        covered += count
    return tuple(kept)


def free_percent(slots_left: int, cores_left: int, memory_left: int, devmem: int) -> int:
    """The largest share of the card, in percent, HAMi would still fit on it: a free slot, that many cores free and
    the card's `devmem * percent // 100` MiB free (`core.fit.fit`'s checks for a percentage request)."""
    if slots_left <= 0:
        return 0
    by_memory = (100 * (memory_left + 1) - 1) // devmem if devmem > 0 else 0
    return max(0, min(cores_left, by_memory, WHOLE))


class Measure:
    """F_n(M) for the nodes of one card model: the classes it accepts grouped by GPU shape, and a memo by node state.

    F_n(M) = W x free - sum over the shapes that fit the cards of (free - too small) x the weight of that shape's
    classes whose CPU and memory fit, W the weight of all classes (classes of other models count every free percent).
    """

    def __init__(self, classes: Sequence[TaskClass], accepts: Callable[[tuple[str, ...]], bool]) -> None:
        """The tables for a model that `accepts` these `spec`s."""
        self.total_weight = sum(task.weight for task in classes)
        shapes: dict[tuple[int, int], list[tuple[int, int, int]]] = {}
        for task in classes:
            if accepts(task.spec):
                shapes.setdefault((task.percent, task.cards), []).append((task.cpu_milli, task.memory_mib, task.weight))
        self.shapes = tuple((percent, cards, tuple(members)) for (percent, cards), members in sorted(shapes.items()))
        self.memo: dict[tuple[tuple[int, ...], float, float], int] = {}

    def __call__(self, free: Sequence[int], cpu: float, memory: float) -> int:
        """F_n(M) of a node whose cards have these free percents (any order) and this CPU and memory left."""
        key = (tuple(sorted(free)), cpu, memory)
        found = self.memo.get(key)
        if found is not None:
            return found
        total = sum(free)
        frag = self.total_weight * total
        if total:
            for percent, cards, members in self.shapes:
                holding = 0
                small = 0
                for f in free:
                    if f >= percent:
                        holding += 1
                    else:
                        small += f
                if holding < cards:
                    continue
                weight = sum(w for c, m, w in members if c <= cpu and m <= memory)
                frag -= weight * (total - small)
        if len(self.memo) >= MEMO_LIMIT:
            self.memo.clear()
        self.memo[key] = frag
        return frag


def card_choices(free: Sequence[int], slots: Sequence[int], percent: int, cards: int) -> list[tuple[int, ...]]:
    """The card sets worth scoring for a task on a node, in card order: for a share, the first card of each distinct
    (free percent, slots left) that holds it (cards alike leave the node alike); whole cards: the first empty ones."""
    if cards == 0:
        return [()]
    if percent >= WHOLE:
        empty = [c for c, f in enumerate(free) if f >= WHOLE]
        return [tuple(empty[:cards])] if len(empty) >= cards else []
    seen: set[tuple[int, int]] = set()
    choices = []
    for c, f in enumerate(free):
        if f >= percent and (f, slots[c]) not in seen:
            seen.add((f, slots[c]))
            choices.append((c,))
    return choices


def after_placing(free: Sequence[int], slots: Sequence[int], chosen: Sequence[int], percent: int) -> list[int]:
    """The free percents once a task's share is on the chosen cards (a card whose last slot it takes has none)."""
    left = list(free)
    for c in chosen:
        left[c] = 0 if percent >= WHOLE or slots[c] <= 1 else left[c] - percent
    return left


def best_choice(
    measure: Measure,
    free: Sequence[int],
    slots: Sequence[int],
    room: tuple[float, float],
    ask: tuple[int, int, int, int],
) -> tuple[int, tuple[int, ...]] | None:
    """FGD on one node: the cards whose placement raises F_n(M) least (ties: the first in card order) and by how much;
    None when no card set holds the task. `room` is the node's CPU and memory left, `ask` the task's per-card percent,
    cards, CPU and memory (the caller has checked CPU and memory fit)."""
    percent, cards, cpu, memory = ask
    before = measure(free, *room)
    best: tuple[int, tuple[int, ...]] | None = None
    for chosen in card_choices(free, slots, percent, cards):
        after = measure(after_placing(free, slots, chosen, percent), room[0] - cpu, room[1] - memory)
        if best is None or after - before < best[0]:
            best = (after - before, chosen)
    return best
