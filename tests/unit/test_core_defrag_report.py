"""What `defrag status` reports: the leader from the Lease, the runs, and the budgets used in the last hour."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from kubectl_hami_place.core.defrag.budget import MoveRecord
from kubectl_hami_place.core.defrag.report import leader_of, runs_of, used_in_hour

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def lease(holder: str, renewed_ago: float, duration: int = 15) -> dict:
    """A leader Lease renewed `renewed_ago` seconds before NOW."""
    renewed = (NOW - timedelta(seconds=renewed_ago)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {"spec": {"holderIdentity": holder, "renewTime": renewed, "leaseDurationSeconds": duration}}


def test_the_leader_holds_the_lease_until_it_lapses() -> None:
    assert leader_of(lease("server-a", 5), NOW).describe() == "server-a"
    lapsed = leader_of(lease("server-a", 20), NOW)
    assert not lapsed.current
    assert lapsed.describe() == "none; last server-a (lease lapsed at 11:59:55 UTC)"
    assert leader_of(None, NOW).describe() == "none"


def record(run: str, minutes_ago: float, result: str = "Evicted", node: str = "n1", ns: str = "a") -> MoveRecord:
    """A move."""
    return MoveRecord(run, f"{ns}/p{minutes_ago}", ns, node, NOW - timedelta(minutes=minutes_ago), result)


def test_runs_newest_first_with_their_results() -> None:
    history = [record("r1", 90), record("r2", 10), record("r2", 9, "Blocked"), record("r1", 89, "Pending")]
    runs = runs_of(history)
    assert [(r.run_id, r.moves) for r in runs] == [("r2", 2), ("r1", 2)]
    assert runs[0].describe_results() == "Blocked: 1, Evicted: 1"


def test_used_counts_only_spent_moves_of_the_last_hour() -> None:
    history = [record("r1", 90), record("r2", 10), record("r2", 9, "Blocked"), record("r3", 5, node="n2", ns="b")]
    used = used_in_hour(history, NOW)
    assert used.hour == 2 and used.per_node == {"n1": 1, "n2": 1} and used.per_namespace == {"a": 1, "b": 1}
