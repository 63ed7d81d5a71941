"""The admission bench's per-turn summary: each server's turns over every row, as a distribution of their p99s."""

from __future__ import annotations

from bench.admission import turn_spread


def rows_of(*p99s_by_row: list[float]) -> list[dict[str, object]]:
    return [
        {"path": f"path-{n}", "ours": {"turns": [{"turn": t, "p99": p, "max": p * 2} for t, p in enumerate(p99s)]}}
        for n, p99s in enumerate(p99s_by_row)
    ]


def test_every_rows_turns_count_once() -> None:
    spread = turn_spread(rows_of([1.0, 2.0, 3.0], [4.0, 50.0]), "ours")
    assert spread["turns"] == 5
    assert spread["median"] == 3.0
    assert spread["max"] == 50.0
    assert spread["over 10 ms"] == 1
    assert spread["over 40 ms"] == 1


def test_p90_is_the_turn_at_the_ninetieth_percent() -> None:
    spread = turn_spread(rows_of([float(p) for p in range(1, 21)]), "ours")
    assert spread["p90"] == 18.0
    assert spread["over 10 ms"] == 10


def test_a_side_without_turns_has_no_spread() -> None:
    assert turn_spread(rows_of([1.0]), "baseline") == {}
