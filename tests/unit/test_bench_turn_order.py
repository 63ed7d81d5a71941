"""The admission bench's turn order: with a baseline beside ours, no server always follows the same other."""

from __future__ import annotations

import pytest

from bench.admission import turn_order


@pytest.mark.parametrize("count", [2, 4, 6])
def test_over_count_turns_each_server_follows_every_other_exactly_once(count: int) -> None:
    turns = [turn_order(count, turn) for turn in range(count)]
    assert all(sorted(order) == list(range(count)) for order in turns)
    pairs = [(order[k - 1], order[k]) for order in turns for k in range(1, count)]
    assert sorted(pairs) == sorted((a, b) for a in range(count) for b in range(count) if a != b)


def test_three_servers_keep_the_rotation_of_the_earlier_tables() -> None:
    assert [turn_order(3, turn) for turn in range(3)] == [[0, 1, 2], [1, 2, 0], [2, 0, 1]]
