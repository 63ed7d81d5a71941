"""The pooled bound: a timeline without fragments, where only the GPUs of the models a task accepts can hold it up."""

from __future__ import annotations

import pytest

from bench.pooled_bound import inflation_pooled, replay_pooled
from bench.trace_replay import Task, TraceNode

NODES = [TraceNode("node-0", 64000, 262144, 1, "V100M16"), TraceNode("node-1", 64000, 262144, 1, "V100M16")]


def task(name: str, gpu_milli: int, creation: int, deletion: int, spec: tuple[str, ...] = ()) -> Task:
    """A one-card task of the trace."""
    return Task(name, 1000, 1024, 1, gpu_milli, spec, creation, deletion)


def test_halves_on_two_cards_leave_room_for_a_whole_card_at_once() -> None:
    """Fragments do not count: two halves on two cards still leave a whole card's GPUs free for the third task."""
    tasks = [task("a", 500, 0, 100), task("b", 500, 0, 100), task("c", 1000, 10, 60)]
    result = replay_pooled(NODES, tasks, compress=1, rounds=1)
    assert result["pending_gpu_hours"] == 0
    assert result["never_placed"] == 0


def test_a_task_waits_only_for_capacity_and_then_runs() -> None:
    """Two whole cards busy until 100 s: the third whole-card task, arrived at 10 s, waits 90 s."""
    tasks = [task("a", 1000, 0, 100), task("b", 1000, 0, 100), task("c", 1000, 10, 60)]
    result = replay_pooled(NODES, tasks, compress=1, rounds=1)
    assert result["pending_gpu_hours"] == pytest.approx(90 / 3600)
    assert result["never_placed"] == 0


def test_a_model_the_cluster_lacks_never_places() -> None:
    """A task accepting only a model no node has stays Pending to the end."""
    tasks = [task("a", 1000, 0, 100), task("z", 100, 10, 20, ("A100",))]
    result = replay_pooled(NODES, tasks, compress=1, rounds=1)
    assert result["never_placed"] == 1
    assert result["pending_gpu_hours"] == pytest.approx(0.1 * 90 / 3600)


def test_inflation_on_pooled_cards_leaves_unplaced_only_what_no_accepted_model_holds() -> None:
    """Drawn until 2 GPUs are asked: the A100-only tasks find no pool, the half card finds one."""
    tasks = [task("a100", 1000, 0, 0, ("A100",)), task("half", 500, 0, 0)]
    figures = inflation_pooled(NODES, tasks)
    assert figures["asked_gpus"] == pytest.approx(2.5)
    assert figures["unplaced"] == pytest.approx(2 / 2.5)
