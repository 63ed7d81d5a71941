"""The planner counts node CPU, memory and pods as kube-scheduler does: no move lands a pod on a node that would
refuse it, and room for a pod is made by moving pods off its node when the node's CPU is what it lacks."""

from __future__ import annotations

from dataclasses import replace

from kubectl_hami_place.core.node_resources import Resources
from kubectl_hami_place.core.planner import FitGoal, Limits, Move, PlanNode, Snapshot, plan
from kubectl_hami_place.core.planner.state import State
from tests.unit.test_core_planner import GIB, card, pending, placed

PLENTY = Resources(64_000, 256 * GIB * 2**20, 110)
CPU = Resources(4000, 0, 0)


def node(name: str, cards: int, room: Resources | None = PLENTY) -> PlanNode:
    """A node of `cards` 40 GiB cards with `room` left for kube-scheduler."""
    return PlanNode(name=name, cards=tuple(card(f"GPU-{name}-{i}", i) for i in range(cards)), room=room)


def test_a_moved_pod_skips_the_best_fitting_card_on_a_node_without_its_cpu() -> None:
    pods = (
        replace(placed("x", "a", ["GPU-a-0"], 20 * GIB), needs=CPU),
        placed("full-b", "b", ["GPU-b-0"], 15 * GIB, held="kept"),
        placed("full-c", "c", ["GPU-c-0"], 5 * GIB, held="kept"),
    )
    nodes = (node("a", 1), node("b", 1, Resources(1000, PLENTY.memory, 100)), node("c", 1))
    goal = FitGoal(pending(40 * GIB))
    counted = plan(Snapshot(nodes=nodes, pods=pods), goal)
    assert counted.complete
    assert [(m.pod, m.to_node) for m in counted.moves] == [("ns/x", "c")]
    uncounted = plan(Snapshot(nodes=tuple(replace(n, room=None) for n in nodes), pods=pods), goal)
    assert [(m.pod, m.to_node) for m in uncounted.moves] == [("ns/x", "b")]


def test_room_for_a_pod_is_made_by_moving_a_pod_off_its_node_when_cpu_is_short() -> None:
    pods = (
        replace(placed("x", "a", ["GPU-a-1"], 10 * GIB), needs=CPU),
        placed("fill-a", "a", ["GPU-a-2"], 25 * GIB, held="kept"),
        placed("fill-b", "b", ["GPU-b-0"], 20 * GIB),
    )
    nodes = (node("a", 3, Resources(1000, PLENTY.memory, 100)), node("b", 1))
    goal = FitGoal(pending(40 * GIB, needs=Resources(2000, GIB, 1)))
    counted = plan(Snapshot(nodes=nodes, pods=pods), goal)
    assert counted.complete, counted.reasons
    # x would fit GPU-a-2 (15 GiB free, the best fit), but moving it within node a frees none of a's CPU.
    assert [(m.pod, m.to_node, m.to_cards) for m in counted.moves] == [("ns/x", "b", ("GPU-b-0",))]
    assert counted.target == ("a", ("GPU-a-0",))
    uncounted = plan(Snapshot(nodes=tuple(replace(n, room=None) for n in nodes), pods=pods), goal)
    assert uncounted.moves == ()
    assert uncounted.target == ("a", ("GPU-a-0",))


def test_a_node_whose_cpu_no_move_can_free_is_refused_with_the_count_it_lacks() -> None:
    pods = (replace(placed("x", "a", ["GPU-a-1"], 10 * GIB), needs=CPU),)
    nodes = (node("a", 2, Resources(1000, PLENTY.memory, 100)), node("b", 1))
    goal = FitGoal(pending(40 * GIB, needs=Resources(8000, GIB, 1), nodes=frozenset({"a"})))
    result = plan(Snapshot(nodes=nodes, pods=pods), goal)
    assert not result.complete
    assert any("a: the node's cpu would not hold the pod" in reason for reason in result.reasons), result.reasons


def test_a_move_is_undone_with_its_cpu_and_a_replayed_move_needs_room() -> None:
    pods = (replace(placed("x", "a", ["GPU-a-0"], 10 * GIB), needs=CPU),)
    nodes = (node("a", 1, Resources(0, 0, 0)), node("b", 1, Resources(5000, 0, 10)), node("c", 1, Resources()))
    state = State(Snapshot(nodes=nodes, pods=pods), Limits())
    point = state.checkpoint()
    move = state.relocate("ns/x", "test", frozenset())
    assert move is not None
    assert move.to_node == "b"
    assert state.room["a"] == Resources(4000, 0, 0)
    assert state.room["b"] == Resources(1000, 0, 10)
    state.rollback(point)
    assert state.room == {"a": Resources(0, 0, 0), "b": Resources(5000, 0, 10), "c": Resources()}
    to_c = Move("ns/x", "uid-x", "a", ("GPU-a-0",), "c", ("GPU-c-0",), "test")
    assert not state.carry_out(to_c)
    assert state.room["c"] == Resources()


def test_the_snapshot_counts_every_pod_on_a_node_and_each_pod_asks_its_requests() -> None:
    """From API objects: a node's room is its allocatable less every bound pod's requests, GPU or not."""
    from datetime import UTC, datetime

    from kubectl_hami_place.core.planner.objects import snapshot_from_objects
    from tests.unit.test_core_planner import node_object, pod_object

    node = node_object("a")
    node["status"]["allocatable"].update({"cpu": "8", "memory": "16Gi", "pods": "20"})
    web = pod_object("web", "a")
    web["spec"]["nodeName"] = "a"
    web["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "3", "memory": "4Gi"}
    plain = {
        "metadata": {"name": "plain", "namespace": "ns"},
        "spec": {"nodeName": "a", "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
        "status": {"phase": "Running"},
    }
    snapshot, warnings = snapshot_from_objects([node, node_object("b")], [web, plain], [], datetime.now(UTC))
    assert warnings == ()
    rooms = {n.name: n.room for n in snapshot.nodes}
    assert rooms == {"a": Resources(4000, 12 * 2**30, 18), "b": None}
    assert [p.needs for p in snapshot.pods] == [Resources(3000, 4 * 2**30, 1)]


def test_why_says_kube_scheduler_refuses_a_node_whose_cpu_is_taken() -> None:
    from kubectl_hami_place.core.planner import why

    nodes = (node("a", 1, Resources(1000, PLENTY.memory, 0)), node("b", 1))
    verdicts = {v.node: v for v in why(Snapshot(nodes=nodes, pods=()), pending(GIB, needs=Resources(2000, GIB, 1)))}
    assert not verdicts["a"].fits
    assert verdicts["a"].reason == "NodeResourcesFit"
    assert verdicts["a"].message.startswith("kube-scheduler: Insufficient cpu, Too many pods (the node has 1000m CPU")
    assert verdicts["b"].fits


def test_a_move_whose_only_fitting_cards_are_on_a_node_without_its_cpu_names_that_node_and_the_cpu() -> None:
    pods = (
        replace(placed("x", "a", ["GPU-a-0"], 20 * GIB), needs=CPU),
        placed("full-b", "b", ["GPU-b-0"], 15 * GIB, held="kept"),
    )
    nodes = (node("a", 1), node("b", 1, Resources(1000, PLENTY.memory, 100)))
    result = plan(Snapshot(nodes=nodes, pods=pods), FitGoal(pending(40 * GIB)))
    assert not result.complete
    assert (
        "a: moving ns/x would make room on gpu-0, but ns/x fits no other card except on b, whose cpu would not hold "
        "it (kube-scheduler's count)"
    ) in result.reasons, result.reasons
    roomy = plan(Snapshot(nodes=(nodes[0], replace(nodes[1], room=PLENTY)), pods=pods), FitGoal(pending(40 * GIB)))
    assert [(m.pod, m.to_node) for m in roomy.moves] == [("ns/x", "b")]
    on_a = FitGoal(pending(40 * GIB, nodes=frozenset({"a"})))
    whole = (replace(pods[0], needs=Resources(4000, GIB, 1)),)
    tiny = plan(Snapshot(nodes=(node("a", 1), node("b", 1, Resources())), pods=whole), on_a)
    assert "ns/x fits no other card except on b, whose cpu and memory and pods would not hold" in " ".join(tiny.reasons)


def test_every_failure_a_plan_shows_still_names_the_node_that_refused_the_pod_for_its_cpu() -> None:
    # Seven nodes, each with one card whose 25 GiB pod must move for a 40 GiB pod; it fits no other node's card but
    # z's, whose CPU is taken. The planner explains only the failures a plan can show (the first 5 nodes tried, as
    # `_ranked` shows them): each of the 5 shown must still name z and the CPU it lacks.
    pods = tuple(replace(placed(f"x{n}", f"n{n}", [f"GPU-n{n}-0"], 25 * GIB), needs=CPU) for n in range(7))
    pods += (placed("held-z", "z", ["GPU-z-0"], 10 * GIB, held="kept"),)
    nodes = (*(node(f"n{n}", 1) for n in range(7)), node("z", 1, Resources(1000, PLENTY.memory, 100)))
    result = plan(Snapshot(nodes=nodes, pods=pods), FitGoal(pending(40 * GIB)))
    assert not result.complete
    head, *shown = result.reasons
    assert head == "no node can make room within the bounds:"
    assert len(shown) == 5, result.reasons
    for n, reason in enumerate(shown):
        assert reason == (
            f"n{n}: moving ns/x{n} would make room on gpu-0, but ns/x{n} fits no other card except on z, whose cpu "
            "would not hold it (kube-scheduler's count)"
        ), result.reasons


def test_the_node_named_as_refusing_a_pod_for_its_cpu_has_a_card_the_move_may_take() -> None:
    """A failure names the node whose CPU stopped a move only if a card there was open to it: naming a node whose
    only fitting card the move must leave alone sends the user to free CPU where it would not help."""
    pods = (replace(placed("x", "a", ["GPU-a-0"], 20 * GIB), needs=CPU),)
    short = Resources(1000, PLENTY.memory, 100)
    nodes = (node("a", 1), node("b", 1, short), node("c", 1, short))
    state = State(Snapshot(nodes=nodes, pods=pods), Limits())
    assert [state.refused_for_room("ns/x", exclude) for exclude in ({"GPU-b-0"}, set(), {"GPU-b-0", "GPU-c-0"})] == [
        ("c", ("cpu",)),
        ("b", ("cpu",)),
        None,
    ]
