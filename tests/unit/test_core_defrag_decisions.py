"""The leader's last decisions on its Lease: kept newest first and few, cut to an Event's length, and read back by
`defrag status` only as the leader writes them (anyone who may write the Lease may write the annotation)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest

from kubectl_hami_place.core.defrag.decisions import (
    Decision,
    decided,
    decisions_of,
    decisions_value,
    rescue_ended,
    with_decision,
)
from kubectl_hami_place.core.defrag.runs import RunDecision

NOW = datetime(2026, 12, 1, 12, 0, 5, tzinfo=UTC)
WOULD = Decision(NOW, "20261201-120005-ab12", "rescue team-a/big", 2, True, "would move team-a/q (dry-run)")
ENTRY = {
    "time": "2026-12-01T12:00:05Z",
    "run": "20261201-120005-ab12",
    "trigger": "rescue team-a/big",
    "moves": 2,
    "dryRun": True,
    "outcome": "would move team-a/q (dry-run)",
}


def numbered(n: int) -> Decision:
    """A decision told apart by its run."""
    return Decision(NOW, f"run-{n}", "keep room", n, False, f"outcome {n}")


def test_the_newest_five_are_kept_newest_first() -> None:
    kept: tuple[Decision, ...] = ()
    for n in range(7):
        kept = with_decision(kept, numbered(n))
    assert [decision.run_id for decision in kept] == ["run-6", "run-5", "run-4", "run-3", "run-2"]


def test_a_decision_is_the_runs_trigger_and_its_events_words_cut_to_an_events_length() -> None:
    run = RunDecision("20261201-120005-ab12", "rescue team-a/big", None, (), True, "no plan: x")
    assert decided(NOW, run, 0, "no plan: x") == Decision(
        NOW, "20261201-120005-ab12", "rescue team-a/big", 0, True, "no plan: x"
    )
    long = decided(NOW, RunDecision("r-1", "t" * 1024, None, (), False), 3, "o" * 2000)
    assert (long.trigger, long.moves, long.dry_run) == ("t" * 1024, 3, False), "1,024 characters are kept whole"
    assert long.outcome == "o" * 1023 + "…"


@pytest.mark.usefixtures("east_of_utc")
def test_a_decisions_time_is_said_in_utc_whatever_the_local_zone() -> None:
    """Read by `defrag status` on another machine, in another zone: the Lease says UTC, as its `Z` claims."""
    ist = timezone(timedelta(hours=5, minutes=30))
    moment = datetime(2026, 12, 1, 17, 30, 5, tzinfo=ist)
    assert Decision(moment, "r-1", "rescue", 0, False, "o").to_data()["time"] == "2026-12-01T12:00:05Z"
    assert decisions_of(decisions_value((WOULD,)))[0].time == NOW


def test_a_rescues_end_names_the_pod_and_its_run_as_carried_out() -> None:
    ended = rescue_ended(NOW, "r-1", "team-a/big", 2, "rescued by 2 move(s): scheduled on n")
    assert ended == Decision(NOW, "r-1", "rescue team-a/big", 2, False, "rescued by 2 move(s): scheduled on n")
    assert rescue_ended(NOW, "r-1", "team-a/big", 2, "o" * 1100).outcome == "o" * 1023 + "…"


def test_the_lease_says_them_as_compact_json_read_back_whole() -> None:
    assert decisions_value((WOULD,)) == (
        '[{"time":"2026-12-01T12:00:05Z","run":"20261201-120005-ab12","trigger":"rescue team-a/big","moves":2,'
        '"dryRun":true,"outcome":"would move team-a/q (dry-run)"}]'
    )
    assert decisions_of(decisions_value((WOULD, numbered(1)))) == (WOULD, numbered(1))
    assert decisions_of(decisions_value(())) == ()
    cut = Decision(NOW, "r-1", "rescue", 0, False, "o" * 1023 + "…")
    assert decisions_of(decisions_value((cut,))) == (cut,), "a cut outcome is read back: its ellipsis is one character"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("time", "yesterday"),
        ("time", None),
        ("run", "../../api"),
        ("run", "Run\x1b[2J"),
        ("run", 7),
        ("trigger", ""),
        ("trigger", "t" * 1025),
        ("trigger", ["rescue"]),
        ("outcome", ""),
        ("outcome", "o" * 1025),
        ("outcome", None),
        ("moves", -1),
        ("moves", 10_001),
        ("moves", True),
        ("moves", "2"),
        ("dryRun", "true"),
        ("dryRun", 1),
    ],
)
def test_an_entry_not_as_the_leader_writes_it_is_passed_over(field: str, value: object) -> None:
    """The others are still read: one forged entry hides nothing else."""
    forged = ENTRY | {field: value}
    assert decisions_of(json.dumps([forged, ENTRY])) == (WOULD,)


def test_the_edges_of_what_is_read() -> None:
    assert decisions_of(json.dumps([ENTRY | {"moves": 0}]))[0].moves == 0
    assert decisions_of(json.dumps([ENTRY | {"moves": 10_000}]))[0].moves == 10_000
    assert decisions_of(json.dumps([ENTRY | {"outcome": "o" * 1024}]))[0].outcome == "o" * 1024
    assert decisions_of(json.dumps([ENTRY | {"trigger": "t"}]))[0].trigger == "t"


@pytest.mark.parametrize(
    "value",
    [None, 7, "", "not json", "{}", '"a string"', "[" * 100_000 + "]" * 100_000, json.dumps([1, "x", None, []])],
)
def test_a_value_that_is_not_a_list_of_entries_says_nothing(value: object) -> None:
    assert decisions_of(value) == ()


def test_at_most_five_entries_are_read() -> None:
    entries = [ENTRY | {"run": f"run-{n}"} for n in range(8)]
    assert [decision.run_id for decision in decisions_of(json.dumps(entries))] == [f"run-{n}" for n in range(5)]
