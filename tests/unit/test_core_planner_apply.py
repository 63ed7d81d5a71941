"""Carrying a plan out, on plain data: the plan file read back, and each move's step against the cluster as it is."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kubectl_hami_place.core.names import PLACEMENT_ANNOTATION
from kubectl_hami_place.core.planner import FitGoal, Move, Snapshot, plan
from kubectl_hami_place.core.planner.apply import (
    PlanFile,
    PlanFileError,
    Step,
    check_plan,
    placement_for,
    read_plan,
    req_id_for,
    stranded_replacement,
    target_pod_state,
)
from tests.unit.test_core_planner import gpu_node, pending, placed

GIB = 1024
TWICE = {"pod": "ns/p", "uid": "u", "from": {"node": "a", "cards": ["G0"]}, "to": {"node": "a", "cards": ["G1"]}}


def fragmented() -> Snapshot:
    """gpu-0 and gpu-1 of node a each hold a 10 GiB pod: no card has 35 GiB free."""
    return Snapshot(
        nodes=(gpu_node("a", 2),),
        pods=(placed("x", "a", ["GPU-a-0"], 10 * GIB), placed("y", "a", ["GPU-a-1"], 12 * GIB)),
    )


def planned(snapshot: Snapshot) -> PlanFile:
    """The `--for` plan for a 35 GiB pod, through its JSON form as `plan -o json` prints it."""
    result = plan(snapshot, FitGoal(pending(35 * GIB)))
    assert result.complete and len(result.moves) == 1
    return read_plan({**result.to_dict(), "pod": {"namespace": "ns", "name": "new", "uid": ""}})


def moved(snapshot: Snapshot, move: Move, uuids: tuple[str, ...]) -> Snapshot:
    """The snapshot once the move's pod was evicted and its replacement, pinned by the move's placement, holds `uuids`
    on the move's target node."""
    key = move.pod
    old = next(p for p in snapshot.pods if p.key == key)
    assert old.allocation is not None
    mem = old.allocation.containers[0][0].usedmem
    name = f"{old.name}-2"
    fresh = placed(name, move.to_node, list(uuids), mem, annotations={PLACEMENT_ANNOTATION: placement_for(move)})
    return replace(snapshot, pods=(*(p for p in snapshot.pods if p.key != key), fresh))


def test_read_plan_takes_back_what_plan_prints() -> None:
    snapshot = fragmented()
    result = plan(snapshot, FitGoal(pending(35 * GIB)))
    read = read_plan({**result.to_dict(), "pod": {"namespace": "ns", "name": "new"}})
    assert read.moves == result.moves
    assert read.pod == "ns/new"
    assert read.target == result.target


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ([], "not an object"),
        ({"goal": "x"}, "no moves list"),
        ({"moves": [{"pod": "nons", "uid": "u"}]}, "move 1: pod 'nons' is not namespace/name"),
        ({"moves": [{"pod": "ns/p", "uid": "u", "from": {"node": "a"}}]}, "move 1: needs from and to"),
        (
            {"moves": [{"pod": "ns/p", "uid": "u", "from": {"node": "a", "cards": []}, "to": {"node": "a"}}]},
            "move 1 from: cards must be a non-empty list",
        ),
        ({"moves": [{"pod": "ns/p"}]}, "move 1: uid must be a non-empty string"),
        ({"moves": [], "pod": {"name": "p"}}, "pod: needs namespace and name"),
        ({"moves": [TWICE, TWICE]}, "moves one pod twice"),
    ],
)
def test_read_plan_names_what_is_wrong(data: object, says: str) -> None:
    with pytest.raises(PlanFileError, match=says):
        read_plan(data)


def test_placement_names_are_fixed_by_the_move_and_valid() -> None:
    move = planned(fragmented()).moves[0]
    assert placement_for(move) == placement_for(replace(move, reason="other words"))
    assert placement_for(move) != placement_for(replace(move, uid="another"))
    long = replace(move, pod="ns/" + "p" * 39 + "-" + "q" * 100)
    name = placement_for(long)
    assert name.startswith("move-" + "p" * 39 + "-") and len(name) < 64 and "--" not in name
    assert len(req_id_for(move)) == 12


def test_a_fresh_plan_is_ready_move_by_move() -> None:
    snapshot = fragmented()
    checks = check_plan(planned(snapshot), snapshot, ())
    assert [check.step for _, check in checks] == [Step.ready]


def test_later_moves_are_checked_on_the_cards_the_earlier_ones_leave() -> None:
    """Two moves onto one card: each alone fits, both together do not; the second is checked after the first."""
    snapshot = Snapshot(
        nodes=(gpu_node("a", 3),),
        pods=(
            placed("x", "a", ["GPU-a-0"], 20 * GIB),
            placed("y", "a", ["GPU-a-1"], 20 * GIB),
            placed("z", "a", ["GPU-a-2"], 15 * GIB),
        ),
    )
    base = planned(fragmented())
    first = replace(base.moves[0], pod="ns/x", uid="uid-x", from_cards=("GPU-a-0",), to_cards=("GPU-a-2",))
    second = replace(base.moves[0], pod="ns/y", uid="uid-y", from_cards=("GPU-a-1",), to_cards=("GPU-a-2",))
    checks = check_plan(replace(base, moves=(first, second)), snapshot, ())
    assert [check.step for _, check in checks] == [Step.ready, Step.changed]
    assert "a gpu-2 no longer has room for ns/y: CardInsufficientMemory" in checks[1][1].detail


def test_a_move_whose_replacement_holds_the_target_is_done_and_the_next_runs() -> None:
    snapshot = fragmented()
    plan_file = planned(snapshot)
    move = plan_file.moves[0]
    after = moved(snapshot, move, move.to_cards)
    checks = check_plan(plan_file, after, {f"ns/{placement_for(move)}"})
    assert [check.step for _, check in checks] == [Step.done]


def test_an_evicted_pod_waits_for_its_replacement() -> None:
    snapshot = fragmented()
    plan_file = planned(snapshot)
    move = plan_file.moves[0]
    gone = replace(snapshot, pods=tuple(p for p in snapshot.pods if p.key != move.pod))
    pinned = {f"ns/{placement_for(move)}"}
    assert check_plan(plan_file, gone, pinned)[0][1].step is Step.waiting
    terminating = tuple(
        replace(p, allocation=replace(p.allocation, deleting=True)) if p.key == move.pod and p.allocation else p
        for p in snapshot.pods
    )
    assert check_plan(plan_file, replace(snapshot, pods=terminating), pinned)[0][1].step is Step.waiting
    changed = check_plan(plan_file, replace(snapshot, pods=terminating), ())[0][1]
    assert changed.step is Step.changed and "not because of this plan" in changed.detail


def test_a_pod_deleted_meanwhile_stops_the_plan() -> None:
    snapshot = fragmented()
    plan_file = planned(snapshot)
    move = plan_file.moves[0]
    gone = replace(snapshot, pods=tuple(p for p in snapshot.pods if p.key != move.pod))
    check = check_plan(plan_file, gone, ())[0][1]
    assert check.step is Step.changed
    assert check.detail == (
        f"{move.pod} (uid {move.uid}) is gone and no pod pinned by this plan replaced it: "
        "it was deleted or moved meanwhile"
    )


def test_a_pod_recreated_under_its_name_is_not_the_pod_planned() -> None:
    snapshot = fragmented()
    plan_file = planned(snapshot)
    move = plan_file.moves[0]
    pods = tuple(replace(p, uid="new-uid") if p.key == move.pod else p for p in snapshot.pods)
    assert check_plan(plan_file, replace(snapshot, pods=pods), ())[0][1].step is Step.changed


def test_a_pod_on_other_cards_than_planned_stops_the_plan() -> None:
    snapshot = fragmented()
    plan_file = planned(snapshot)
    move = plan_file.moves[0]
    elsewhere = replace(move, from_cards=move.to_cards)
    check = check_plan(replace(plan_file, moves=(elsewhere,)), snapshot, ())[0][1]
    assert check.step is Step.changed
    assert "the plan found it on" in check.detail


def test_a_target_filled_meanwhile_stops_the_plan() -> None:
    snapshot = fragmented()
    plan_file = planned(snapshot)
    move = plan_file.moves[0]
    filler = placed("filler", "a", list(move.to_cards), 25 * GIB)
    check = check_plan(plan_file, replace(snapshot, pods=(*snapshot.pods, filler)), ())[0][1]
    assert check.step is Step.changed
    assert "no longer has room" in check.detail and "CardInsufficientMemory" in check.detail


def test_a_target_cordoned_or_gone_stops_the_plan() -> None:
    snapshot = fragmented()
    plan_file = planned(snapshot)
    move = plan_file.moves[0]
    closed = replace(snapshot, nodes=(replace(snapshot.nodes[0], cordoned=frozenset(move.to_cards)),))
    assert "takes no new pods" in check_plan(plan_file, closed, ())[0][1].detail
    other = replace(move, to_node="b")
    assert "is no longer on node b" in check_plan(replace(plan_file, moves=(other,)), snapshot, ())[0][1].detail


def test_a_replacement_elsewhere_than_planned_stops_the_plan() -> None:
    snapshot = fragmented()
    plan_file = planned(snapshot)
    move = plan_file.moves[0]
    after = moved(snapshot, move, move.from_cards)
    check = check_plan(plan_file, after, {f"ns/{placement_for(move)}"})[0][1]
    assert check.step is Step.changed and "replacement" in check.detail


def test_the_target_pod_is_reported_where_it_runs() -> None:
    snapshot = fragmented()
    plan_file = planned(snapshot)
    assert plan_file.target is not None
    node, cards = plan_file.target
    names = {"GPU-a-0": "gpu-0", "GPU-a-1": "gpu-1"}
    assert target_pod_state(plan_file, None, names) == (False, "ns/new no longer exists")
    assert target_pod_state(plan_file, pending(35 * GIB), names) == (False, "ns/new is not scheduled yet")
    running = replace(pending(35 * GIB), allocation=placed("new", node, list(cards), 35 * GIB).allocation)
    named = ", ".join(names[uuid] for uuid in cards)
    assert target_pod_state(plan_file, running, names) == (True, f"ns/new holds {named} on {node}")
    other = "GPU-a-1" if cards == ("GPU-a-0",) else "GPU-a-0"
    elsewhere = replace(pending(35 * GIB), allocation=placed("new", node, [other], 35 * GIB).allocation)
    assert target_pod_state(plan_file, elsewhere, names) == (
        True,
        f"ns/new holds {names[other]} on {node} (the plan made room on {named} on {node})",
    )


def replacement_pod(placement: str, *, namespace: str = "ns", node: str = "", deleting: bool = False) -> dict:
    """A pod as the API serves it, pinned by `placement`, bound to `node` when given."""
    metadata: dict = {
        "namespace": namespace,
        "name": "y-2",
        "uid": "u-2",
        "annotations": {PLACEMENT_ANNOTATION: placement},
    }
    if deleting:
        metadata["deletionTimestamp"] = "2026-12-03T05:00:00Z"
    return {"metadata": metadata, "spec": {"nodeName": node} if node else {}}


def test_a_given_up_move_names_its_replacement_only_while_no_node_holds_it() -> None:
    [move] = planned(fragmented()).moves
    name = placement_for(move)

    def stranded(pods: list[dict]) -> tuple[str, str] | None:
        return stranded_replacement(pods, "ns", name, move.uid)

    other = {"metadata": {"namespace": "ns", "name": "z", "uid": "u-z", "annotations": {}}, "spec": {}}
    assert stranded([other, replacement_pod(name)]) == ("y-2", "u-2")
    assert stranded([replacement_pod(name, node="a")]) is None, "HAMi placed it"
    assert stranded([replacement_pod(name, deleting=True)]) is None, "already going"
    assert stranded([replacement_pod(name, namespace="other")]) is None, "another namespace's pod"
    assert stranded([replacement_pod("move-y-000000000000")]) is None, "another move's pod"
    assert stranded([other]) is None
    evicted = {"metadata": {"namespace": "ns", "name": "y", "uid": move.uid}, "spec": {"nodeName": "a"}}
    assert stranded([evicted, replacement_pod(name)]) is None, "it waits for the evicted pod to go"
