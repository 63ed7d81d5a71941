"""The packing bound's certificate, on plain data: whatever the prices, it never says fewer GPUs can be held than a
placement holds, and it counts a card's room, pods and models as HAMi does (the LP that picks the prices needs scipy,
the bench extra, and is not run here)."""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence

import pytest

from bench.packing_bound import CardKind, Share, best_fill, certificate, kinds_of, shares_of
from bench.trace_replay import Task, TraceNode, accepts


def task(name: str, num_gpu: int, gpu_milli: int, spec: tuple[str, ...] = ()) -> Task:
    """A GPU task of the trace without times."""
    return Task(name, 1000, 1024, num_gpu, gpu_milli, spec)


def most_held(shares: Sequence[Share], kinds: Sequence[CardKind]) -> float:
    """The GPUs the best placement holds, by trying every card (or none) for every task."""
    cards = [kind for kind in kinds for _ in range(kind.cards)]
    tasks = [share for share in shares for _ in range(share.count)]
    best = 0.0
    for choice in itertools.product(range(len(cards) + 1), repeat=len(tasks)):
        rooms, pods, held, accepted = [0] * len(cards), [0] * len(cards), 0.0, True
        for share, where in zip(tasks, choice, strict=True):
            if where < len(cards):
                rooms[where] += share.percent
                pods[where] += 1
                held += share.gpus
                accepted = accepted and accepts(share.spec, cards[where].type)
        fits = all(room <= 100 and n <= card.slots for room, n, card in zip(rooms, pods, cards, strict=True))
        if fits and accepted:
            best = max(best, held)
    return best


def test_no_prices_make_the_certificate_hold_fewer_gpus_than_a_placement_holds() -> None:
    """The bound is only worth something if it is one: on small clusters, for random prices, the certificate is
    never below what the best placement, found by trying them all, holds."""
    rng = random.Random(7)
    kinds_seen = ("NVIDIA-V100", "NVIDIA-T4")
    for _ in range(60):
        shares = [
            Share(rng.choice((20, 35, 50, 65, 81, 100)), rng.random(), rng.choice(((), ("T4",))), rng.randint(1, 2))
            for _ in range(3)
        ]
        kinds = [CardKind(kind, rng.randint(0, 1), rng.randint(1, 3)) for kind in kinds_seen]
        prices = [rng.choice((0.0, rng.random(), share.gpus)) for share in shares]
        assert certificate(shares, kinds, prices) >= most_held(shares, kinds) - 1e-9, (shares, kinds, prices)


def test_two_shares_of_81_percent_never_share_a_card() -> None:
    """Priced at their GPUs, four 81% tasks on two cards: each card holds one, so at most 1.62 of 3.24 asked."""
    shares = [Share(81, 0.81, (), 4)]
    assert certificate(shares, [CardKind("NVIDIA-V100", 2, 10)], [0.81]) == pytest.approx(1.62)


def test_a_card_holds_no_more_tasks_than_its_pods() -> None:
    """Ten 5% tasks on a card of 4 pods: the fill is 4 of them, whatever room is left."""
    shares = [Share(5, 0.05, (), 10)]
    assert best_fill(shares, CardKind("NVIDIA-V100", 1, 4), [0.05]) == (pytest.approx(0.2), (4,))


def test_a_task_bound_to_a_model_fills_no_other_models_card() -> None:
    """A T4-only task priced at its GPUs: a V100 card holds nothing of it, a T4 card holds it."""
    shares = [Share(100, 1.0, ("T4",), 1)]
    assert best_fill(shares, CardKind("NVIDIA-V100", 1, 10), [1.0]) == (0.0, (0,))
    assert best_fill(shares, CardKind("NVIDIA-T4", 1, 10), [1.0]) == (1.0, (1,))


def test_the_best_fill_is_the_fill_it_returns() -> None:
    """The LP adds the fill best_fill returns: it must be within the card's room and pods and worth its value."""
    shares = [Share(47, 0.47, (), 9), Share(23, 0.23, (), 9), Share(16, 0.16, (), 9), Share(81, 0.81, (), 9)]
    kind = CardKind("NVIDIA-V100", 1, 3)
    value, fill = best_fill(shares, kind, [0.5, 0.3, 0.2, 0.95])
    assert (value, fill) == (pytest.approx(1.15), (0, 0, 1, 1))
    assert sum(n * share.percent for n, share in zip(fill, shares, strict=True)) <= 100


def test_the_trace_is_read_as_hamis_percent_of_a_card_with_whole_cards_in_pieces() -> None:
    """A share takes ceil(gpu_milli / 10)% of a card (HAMi's count); two whole cards are two whole-card pieces of
    1 GPU each; a CPU task takes no card; cards are counted by model with HAMi's 10 pods each."""
    tasks = [task("a", 1, 235), task("b", 1, 235), task("c", 2, 1000), task("d", 0, 0), task("e", 1, 500, ("T4",))]
    assert shares_of(tasks) == [
        Share(24, 0.235, (), 2),
        Share(50, 0.5, ("T4",), 1),
        Share(100, 1.0, (), 2),
    ]
    nodes = [TraceNode("n0", 1000, 1024, 2, "T4"), TraceNode("n1", 1000, 1024, 4, "V100M16")]
    assert kinds_of(nodes + nodes[:1]) == [CardKind("NVIDIA-T4", 4, 10), CardKind("NVIDIA-V100M16", 4, 10)]
