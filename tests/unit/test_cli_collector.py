"""The CLI reads the cluster and plans with Python's cyclic collector paused, and carries a plan out with it on.

The reads are replaced here (no API server): whether the collector runs while they build is not something a real
server's answers show. What they return is built as the snapshot's readers build it, from the planner's own model.
"""

from __future__ import annotations

import gc
from types import SimpleNamespace
from typing import Any

import pytest

from kubectl_hami_place.cli import _plan, _status, _why
from kubectl_hami_place.cli._errors import CliError
from kubectl_hami_place.cli.app import run
from kubectl_hami_place.core import planner
from kubectl_hami_place.core.hami_config import HAMI_DEFAULTS
from kubectl_hami_place.core.node_selection import node_marks
from kubectl_hami_place.core.planner import PlanPod, Snapshot
from kubectl_hami_place.core.requests import card_request
from kubectl_hami_place.kube import snapshot as snapshot_reads
from kubectl_hami_place.kube.snapshot import SnapshotRead
from tests.unit.test_core_planner import GIB, gpu_node, placed

WHERE = SimpleNamespace(kube=None, one_namespace="ns", namespace="ns")
SNAPSHOT = Snapshot(
    nodes=(gpu_node("a"),),
    pods=(placed("p1", "a", ["GPU-a-0"], 10 * GIB), placed("p2", "a", ["GPU-a-1"], 10 * GIB)),
)


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bool]]:
    """What was called, each with whether the collector was paused then; the cluster's reads replaced."""
    calls: list[tuple[str, bool]] = []

    def recorded(name: str, result: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            calls.append((name, not gc.isenabled()))
            return result(*args, **kwargs)

        return call

    for verb in (_plan, _why, _status):
        monkeypatch.setattr(verb, "target", lambda *args, **kwargs: WHERE)
    read = SnapshotRead(SNAPSHOT, HAMI_DEFAULTS, (), node_marks([]))
    monkeypatch.setattr(snapshot_reads, "read_snapshot", recorded("read", lambda *args: read))
    pending = PlanPod(namespace="ns", name="big", requests=(card_request(1, memreq=40 * GIB),), owner_kind="Job")
    found = SimpleNamespace(pod=pending, unread=())
    monkeypatch.setattr(snapshot_reads, "read_pending", recorded("pending", lambda *args: found))
    monkeypatch.setattr(planner, "plan", recorded("plan", planner.plan))
    monkeypatch.setattr(planner, "why", recorded("why", planner.why))

    def stop(*args: Any, **kwargs: Any) -> Any:
        raise CliError("stopped here")

    monkeypatch.setattr(_plan, "carry_out", recorded("carry out", stop))
    monkeypatch.setattr(_status, "_read", recorded("status", stop))
    return calls


def test_plan_reads_and_plans_with_the_collector_paused_and_carries_the_plan_out_with_it_on(
    seen: list[tuple[str, bool]],
) -> None:
    assert run(["plan", "--free-cards", "1", "--apply", "--yes"]) == 1
    assert seen == [("read", True), ("plan", True), ("carry out", False)]
    assert gc.isenabled()


def test_why_and_status_read_with_the_collector_paused_and_leave_it_on(seen: list[tuple[str, bool]]) -> None:
    assert run(["why", "big"]) == 0
    assert run(["status"]) == 1
    assert seen == [("read", True), ("pending", True), ("why", True), ("status", True)]
    assert gc.isenabled()
