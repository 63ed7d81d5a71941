"""Carrying a plan out, on plain data: the plan file read back, and each move's step against the cluster as it is."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from kubectl_hami_place.core.names import PLACEMENT_ANNOTATION
from kubectl_hami_place.core.node_resources import Resources
from kubectl_hami_place.core.planner import DO_NOT_MOVE, FitGoal, Move, Snapshot, plan
from kubectl_hami_place.core.planner.apply import (
    MoveCheck,
    PlanFile,
    PlanFileError,
    Step,
    check_plan,
    move_step,
    placement_for,
    read_plan,
    req_id_for,
    settling_nodes,
    settling_pods,
    stranded_replacement,
    target_pod_state,
)
from kubectl_hami_place.core.planner.objects import snapshot_from_objects
from tests.unit.test_core_planner import gpu_node, node_object, pending, placed, pod_object

NOW = datetime(2026, 12, 6, 4, 30, tzinfo=UTC)

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
    """`apply` carries out the plan that was reviewed: its goal, moves, `--for` pod and target, as printed."""
    snapshot = fragmented()
    result = plan(snapshot, FitGoal(pending(35 * GIB)))
    read = read_plan({**result.to_dict(), "pod": {"namespace": "ns", "name": "new"}})
    assert read == PlanFile(goal="make room for ns/new", moves=result.moves, pod="ns/new", target=result.target)


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ([], "the plan is not an object"),
        ({"goal": "x"}, "the plan has no moves list"),
        ({"moves": ["ns/p"]}, "move 1: not an object"),
        ({"moves": [{"uid": "u"}]}, "move 1: pod must be a non-empty string"),
        ({"moves": [{"pod": "nons", "uid": "u"}]}, "move 1: pod 'nons' is not namespace/name"),
        ({"moves": [{"pod": "/p", "uid": "u"}]}, "move 1: pod '/p' is not namespace/name"),
        (
            {"moves": [{"pod": "ns/p", "uid": "u", "from": {"node": "a"}}]},
            "move 1: needs from and to, each with node and cards",
        ),
        (
            {"moves": [{"pod": "ns/p", "uid": "u", "from": {"node": "a", "cards": []}, "to": {"node": "a"}}]},
            "move 1 from: cards must be a non-empty list of card UUIDs",
        ),
        ({"moves": [{**TWICE, "from": {"cards": ["G0"]}}]}, "move 1 from: node must be a non-empty string"),
        ({"moves": [{**TWICE, "to": {"cards": ["G1"]}}]}, "move 1 to: node must be a non-empty string"),
        (
            {"moves": [{**TWICE, "to": {"node": "a", "cards": [1]}}]},
            "move 1 to: cards must be a non-empty list of card UUIDs",
        ),
        (
            {"moves": [{**TWICE, "to": {"node": "a", "cards": ["GPU-\u00e9"]}}]},
            "move 1 to: cards must be card UUIDs (ASCII)",
        ),
        (
            {"moves": [{**TWICE, "uid": "\u00e9" * 100}]},
            "move 1: uid '" + "\u00e9" * 80 + "' is not a Kubernetes name or UID (ASCII)",
        ),
        ({"moves": [{"pod": "ns/p"}]}, "move 1: uid must be a non-empty string"),
        ({"moves": [], "pod": {"name": "p"}}, "pod: needs namespace and name"),
        ({"moves": [], "target": {"cards": ["G0"]}}, "target: node must be a non-empty string"),
        ({"moves": [], "target": {"node": "a", "cards": []}}, "target: cards must be a non-empty list of card UUIDs"),
        ({"moves": [TWICE, TWICE]}, "the plan moves one pod twice"),
    ],
)
def test_read_plan_names_what_is_wrong(data: object, says: str) -> None:
    """A plan file edited by hand is refused with the one line that names the field to fix, never a traceback."""
    with pytest.raises(PlanFileError) as raised:
        read_plan(data)
    assert str(raised.value) == says


def test_a_plan_file_of_moves_alone_reads_as_moves_for_no_pod() -> None:
    """A plan file with only its moves (a free-cards plan, or one written by hand) has no `--for` pod to report."""
    assert read_plan({"moves": [TWICE]}) == PlanFile(
        goal="", moves=(Move("ns/p", "u", "a", ("G0",), "a", ("G1",), ""),), pod="", target=None
    )


def test_placement_names_are_fixed_by_the_move_and_valid() -> None:
    move = planned(fragmented()).moves[0]
    assert placement_for(move) == placement_for(replace(move, reason="other words"))
    assert placement_for(move) != placement_for(replace(move, uid="another"))
    long = replace(move, pod="ns/" + "p" * 39 + "-" + "q" * 100)
    name = placement_for(long)
    assert name.startswith("move-" + "p" * 39 + "-") and len(name) < 64 and "--" not in name
    assert len(req_id_for(move)) == 12


def test_a_placement_name_is_the_same_in_every_release() -> None:
    """A re-run finds the placements an earlier run (perhaps an earlier release) made by name alone: the digest of
    the UID, the node and every target card must not change, or a move would be pinned twice."""
    move = Move("ns/p", "u", "a", ("GPU-a-0",), "a", ("GPU-a-1", "GPU-a-2"), "")
    assert (placement_for(move), req_id_for(move)) == ("move-p-ca4f9902edee", "ca4f9902edee")


def test_a_move_checked_alone_is_where_it_stands_now() -> None:
    """`move_step` judges one move on the cluster as it is: ready before it is made, done once its replacement
    holds the target cards."""
    snapshot = fragmented()
    move = planned(snapshot).moves[0]
    assert move_step(move, snapshot, ()) == MoveCheck(Step.ready, "ns/x is on a/gpu-0; the target has room")
    after = moved(snapshot, move, move.to_cards)
    assert move_step(move, after, ()) == MoveCheck(Step.done, "ns/x-2 holds a/gpu-1")


def test_the_walk_goes_past_done_moves_and_stops_at_the_first_that_is_not() -> None:
    """A re-run skips the moves already made and goes on; a move the cluster no longer matches stops it before any
    later move evicts a pod for a plan that no longer holds."""
    snapshot = Snapshot(
        nodes=(gpu_node("a", 3),),
        pods=(placed("x", "a", ["GPU-a-0"], 10 * GIB), placed("y", "a", ["GPU-a-1"], 10 * GIB)),
    )
    base = planned(fragmented())
    first = replace(base.moves[0], from_cards=("GPU-a-0",), to_cards=("GPU-a-2",))
    second = replace(first, pod="ns/y", uid="uid-y", from_cards=("GPU-a-1",))
    plan_file = replace(base, moves=(first, second))
    after = moved(snapshot, first, first.to_cards)
    checks = check_plan(plan_file, after, {f"ns/{placement_for(first)}"})
    assert [(move.pod, check.step) for move, check in checks] == [("ns/x", Step.done), ("ns/y", Step.ready)]
    gone = replace(snapshot, pods=tuple(p for p in snapshot.pods if p.key != "ns/x"))
    assert [(move.pod, check.step) for move, check in check_plan(plan_file, gone, ())] == [("ns/x", Step.changed)]


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
    assert "a/gpu-2 no longer has room for ns/y: CardInsufficientMemory" in checks[1][1].detail


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
    assert check_plan(plan_file, gone, pinned)[0][1] == MoveCheck(
        Step.waiting, "ns/x is gone; its replacement is not on the target cards yet"
    )
    terminating = tuple(
        replace(p, allocation=replace(p.allocation, deleting=True)) if p.key == move.pod and p.allocation else p
        for p in snapshot.pods
    )
    assert check_plan(plan_file, replace(snapshot, pods=terminating), pinned)[0][1] == MoveCheck(
        Step.waiting, "ns/x is terminating"
    )
    changed = check_plan(plan_file, replace(snapshot, pods=terminating), ())[0][1]
    assert changed == MoveCheck(Step.changed, "ns/x is terminating, but not because of this plan")


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


def test_a_pod_annotated_do_not_move_since_the_plan_stops_it_before_its_eviction() -> None:
    """The plan found the pod movable; its owner protected it since: neither `apply` nor the controller evicts it."""
    snapshot = fragmented()
    plan_file = planned(snapshot)
    move = plan_file.moves[0]
    pods = tuple(
        replace(p, annotations={**p.annotations, DO_NOT_MOVE: "true"}) if p.key == move.pod else p
        for p in snapshot.pods
    )
    check = check_plan(plan_file, replace(snapshot, pods=pods), ())[0][1]
    assert (check.step, check.detail) == (Step.changed, f"{move.pod} is annotated {DO_NOT_MOVE}")


def test_a_pod_on_other_cards_than_planned_stops_the_plan() -> None:
    snapshot = fragmented()
    plan_file = planned(snapshot)
    move = plan_file.moves[0]
    elsewhere = replace(move, from_cards=(*move.to_cards, "GPU-gone"))
    check = check_plan(replace(plan_file, moves=(elsewhere,)), snapshot, ())[0][1]
    assert check == MoveCheck(Step.changed, "ns/x holds a/gpu-0; the plan found it on a/gpu-1,GPU-gone")


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
    assert check_plan(plan_file, closed, ())[0][1] == MoveCheck(
        Step.changed, "a/gpu-1 takes no new pods now (unhealthy, cordoned, or its node is unschedulable)"
    )
    other = replace(move, to_node="b")
    assert check_plan(replace(plan_file, moves=(other,)), snapshot, ())[0][1] == MoveCheck(
        Step.changed, "card GPU-a-1 is no longer on node b"
    )


def test_a_replacement_elsewhere_than_planned_stops_the_plan() -> None:
    snapshot = fragmented()
    plan_file = planned(snapshot)
    move = plan_file.moves[0]
    after = moved(snapshot, move, move.from_cards)
    check = check_plan(plan_file, after, {f"ns/{placement_for(move)}"})[0][1]
    assert check == MoveCheck(Step.changed, "ns/x's replacement ns/x-2 holds a/gpu-0, not a/gpu-1")


def test_a_pod_pinned_by_the_placement_while_the_planned_pod_still_runs_stops_the_plan() -> None:
    """The placement was spent on another pod (a scale-up, say): evicting the planned pod now would leave its
    replacement unpinned, free to land anywhere."""
    snapshot = fragmented()
    plan_file = planned(snapshot)
    move = plan_file.moves[0]
    fresh = placed("x-2", "a", ["GPU-a-1"], 10 * GIB, annotations={PLACEMENT_ANNOTATION: placement_for(move)})
    check = check_plan(plan_file, replace(snapshot, pods=(*snapshot.pods, fresh)), ())[0][1]
    assert check == MoveCheck(
        Step.changed, f"placement {placement_for(move)} already pinned ns/x-2 while ns/x still runs"
    )


def test_a_pod_of_another_namespace_carrying_the_placement_name_is_no_replacement() -> None:
    """Placements are namespaced: a pod elsewhere annotated with the same placement name is not this move's
    replacement, so the move of a pod deleted meanwhile is not taken for done."""
    snapshot = fragmented()
    plan_file = planned(snapshot)
    move = plan_file.moves[0]
    stranger = placed("x-2", "a", ["GPU-a-1"], 10 * GIB, annotations={PLACEMENT_ANNOTATION: placement_for(move)})
    assert stranger.allocation is not None
    elsewhere = replace(stranger, namespace="other", allocation=replace(stranger.allocation, namespace="other"))
    others = tuple(p for p in snapshot.pods if p.key != move.pod)
    cluster = replace(snapshot, pods=(*others, elsewhere))
    assert check_plan(plan_file, cluster, ())[0][1] == MoveCheck(
        Step.changed,
        "ns/x (uid uid-x) is gone and no pod pinned by this plan replaced it: it was deleted or moved meanwhile",
    )


def holding(node: str | None, uuids: list[str], mib: int = 35 * GIB) -> dict:
    """The `--for` pod as stored, placed by HAMi on those cards of `node` (Pending when None)."""
    if node is None:
        return {"metadata": {"namespace": "ns", "name": "new"}}
    devices = "".join(f"{uuid},NVIDIA,{mib},0:" for uuid in uuids)
    annotations = {"hami.io/vgpu-node": node, "hami.io/vgpu-devices-allocated": devices + ";"}
    return {"metadata": {"namespace": "ns", "name": "new", "annotations": annotations}, "spec": {"nodeName": node}}


def test_the_target_pod_is_reported_where_it_runs() -> None:
    snapshot = fragmented()
    plan_file = planned(snapshot)
    assert plan_file.target is not None
    node, cards = plan_file.target
    names = {"GPU-a-0": "gpu-0", "GPU-a-1": "gpu-1"}
    assert target_pod_state(plan_file, None, names) == (False, "ns/new no longer exists")
    assert target_pod_state(plan_file, holding(None, []), names) == (False, "ns/new is not scheduled yet")
    running = holding(node, list(cards))
    named = ",".join(names[uuid] for uuid in cards)
    assert target_pod_state(plan_file, running, names) == (True, f"ns/new holds {node}/{named}")
    other = "GPU-a-1" if cards == ("GPU-a-0",) else "GPU-a-0"
    assert target_pod_state(plan_file, holding(node, [other]), names) == (
        True,
        f"ns/new holds {node}/{names[other]} (the plan made room on {node}/{named})",
    )
    garbled = holding(node, [other])
    garbled["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"] = "no,cards"
    scheduled, detail = target_pod_state(plan_file, garbled, names)
    assert not scheduled and detail.startswith("ns/new is not scheduled yet ("), detail


def test_the_target_pod_s_cards_unknown_by_name_are_named_by_uuid() -> None:
    """A card the cluster no longer registers still shows up, by UUID, in where the `--for` pod runs."""
    plan_file = PlanFile(goal="", moves=(), pod="ns/new", target=("a", ("GPU-a-0", "GPU-a-1")))
    running = holding("a", ["GPU-a-0", "GPU-a-1"])
    assert target_pod_state(plan_file, running, {"GPU-a-0": "gpu-0"}) == (True, "ns/new holds a/gpu-0,GPU-a-1")


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
    later = replacement_pod(name)
    later["metadata"].update(name="y-3", uid="u-3")
    assert stranded([replacement_pod(name, deleting=True), later]) == ("y-3", "u-3"), "the one not going"
    uidless = replacement_pod(name)
    del uidless["metadata"]["uid"]
    assert stranded([uidless]) is None, "no UID to delete it by"
    evicted = {"metadata": {"namespace": "ns", "name": "y", "uid": move.uid}, "spec": {"nodeName": "a"}}
    assert stranded([evicted, replacement_pod(name)]) is None, "it waits for the evicted pod to go"


def test_a_move_whose_uid_is_another_pod_s_stops_the_plan() -> None:
    """A hand-edited plan naming one pod by another's UID is refused in words, never checked as the UID's pod and
    then carried out on a pod the working copy does not hold (a KeyError)."""
    snapshot = fragmented()
    plan_file = planned(snapshot)
    misnamed = replace(plan_file.moves[0], pod="ns/zzz")
    assert check_plan(replace(plan_file, moves=(misnamed,)), snapshot, ()) == (
        (misnamed, MoveCheck(Step.changed, "ns/zzz (uid uid-x): that UID is ns/x's")),
    )


def test_a_move_onto_a_node_whose_cpu_or_memory_no_longer_holds_the_pod_stops_the_plan() -> None:
    """The target node filled up since the plan: kube-scheduler would leave the replacement Pending there, so the
    pod must not be evicted; with the room there, the move is ready."""
    pod = placed("x", "a", ["GPU-a-0"], 10 * GIB, needs=Resources(1000, GIB * 2**20, 1))
    move = Move("ns/x", "uid-x", "a", ("GPU-a-0",), "b", ("GPU-b-0",), "test")

    def on_b(room: Resources) -> Snapshot:
        return Snapshot(nodes=(gpu_node("a", 1), replace(gpu_node("b", 1), room=room)), pods=(pod,))

    assert move_step(move, on_b(Resources(1000, GIB * 2**20, 1)), ()) == MoveCheck(
        Step.ready, "ns/x is on a/gpu-0; the target has room"
    )
    assert move_step(move, on_b(Resources(500, 0, 1)), ()) == MoveCheck(
        Step.changed, "node b no longer has the cpu and memory ns/x asks (kube-scheduler's count)"
    )


def test_a_move_onto_a_node_the_pod_may_no_longer_run_on_stops_the_plan() -> None:
    """Node b was tainted (or relabelled, or a pod whose anti-affinity selects this one came) since the plan:
    kube-scheduler would leave the replacement Pending there, so the pod must not be evicted."""
    pod = placed("x", "a", ["GPU-a-0"], 10 * GIB)
    move = Move("ns/x", "uid-x", "a", ("GPU-a-0",), "b", ("GPU-b-0",), "test")
    nodes = (gpu_node("a", 1), gpu_node("b", 1))
    assert move_step(move, Snapshot(nodes=nodes, pods=(pod,)), ()).step is Step.ready
    tainted = replace(pod, nodes=frozenset({"a"}), untolerated={"b": "drain:NoSchedule"})
    assert move_step(move, Snapshot(nodes=nodes, pods=(tainted,)), ()) == MoveCheck(
        Step.changed,
        "ns/x does not tolerate node b's taint drain:NoSchedule: kube-scheduler would refuse its replacement there",
    )
    unselected = replace(pod, nodes=frozenset({"a"}))
    assert move_step(move, Snapshot(nodes=nodes, pods=(unselected,)), ()) == MoveCheck(
        Step.changed, "ns/x's node selection no longer allows node b: kube-scheduler would refuse its replacement there"
    )
    repelled = replace(pod, nodes=frozenset({"a"}), kept_off={"b": ("InterPodAffinity", "ns/w's anti-affinity")})
    assert move_step(move, Snapshot(nodes=nodes, pods=(repelled,)), ()) == MoveCheck(
        Step.changed,
        "ns/x may not go to node b (ns/w's anti-affinity): kube-scheduler would refuse its replacement there",
    )


# a settling move read from its own pods -----------------------------------------------------------------------


def settle_scene(state: str) -> tuple[Move, list[dict], list[dict]]:
    """A move of ns/x from node a to node b, and the cluster once `state` holds: x running, x terminating, x gone with
    its replacement Pending, on b, or on c, x gone without one, x replaced under its own name (a StatefulSet), or x
    terminating beside its replacement on b. Pods of other namespaces and nodes are there besides."""
    nodes = [node_object(name) for name in "abcd"]
    x = pod_object("x", "a", nodeName="a")
    x["metadata"]["uid"] = "uid-x"
    move = Move("ns/x", "uid-x", "a", ("GPU-a",), "b", ("GPU-b",), "room for ns/big")
    others = [pod_object(f"filler-{n}", n, nodeName=n) for n in "bcd"]
    for index, pod in enumerate(list(others)):
        away = {**pod, "metadata": {**pod["metadata"], "namespace": "other", "uid": f"uid-away-{index}"}}
        away["metadata"]["annotations"] = {**away["metadata"]["annotations"], PLACEMENT_ANNOTATION: placement_for(move)}
        others.append(away)

    def replacement(name: str, node: str | None) -> dict:
        pod = pod_object(name, node, **({"nodeName": node} if node else {}))
        pod["metadata"]["uid"] = f"uid-{name}-new"
        pod["metadata"]["annotations"][PLACEMENT_ANNOTATION] = placement_for(move)
        return pod

    terminating = {**x, "metadata": {**x["metadata"], "deletionTimestamp": "2026-12-06T04:00:00Z"}}
    scene = {
        "running": [x],
        "terminating": [terminating],
        "pending": [replacement("x-2", None)],
        "landed": [replacement("x-2", "b")],
        "elsewhere": [replacement("x-2", "c")],
        "gone": [],
        "same-name": [replacement("x", "b")],
        "both": [terminating, replacement("x-2", "b")],
    }[state]
    return move, nodes, [*others, *scene]


@pytest.mark.parametrize(
    ("state", "step"),
    [
        ("terminating", Step.waiting),
        ("pending", Step.waiting),
        ("landed", Step.done),
        ("elsewhere", Step.changed),
        ("gone", Step.waiting),
        ("same-name", Step.done),
        ("both", Step.waiting),
    ],
)
def test_a_settling_move_read_from_its_own_pods_stands_where_the_whole_cluster_says(state: str, step: Step) -> None:
    """Once its pod was evicted a move's step reads that pod and its replacements alone (and the nodes they name):
    the same step and words as a snapshot of every node and pod, at a poll's fraction of the cost."""
    move, nodes, pods = settle_scene(state)
    named = {f"ns/{placement_for(move)}"}
    whole, _ = snapshot_from_objects(nodes, pods, [], NOW)
    own = settling_pods(move, pods)
    assert own is not None
    wanted = settling_nodes(move, own)
    alone, _ = snapshot_from_objects([n for n in nodes if n["metadata"]["name"] in wanted], own, [], NOW)
    assert move_step(move, alone, named) == move_step(move, whole, named)
    assert move_step(move, alone, named).step is step
    if state == "gone":
        unpinned = move_step(move, alone, set())
        assert unpinned == move_step(move, whole, set()) and unpinned.step is Step.changed
    assert "d" not in wanted and len(own) < len(pods) - 3, "nodes and pods the move does not name are not read"


def test_a_settling_move_reads_the_nodes_its_pods_run_on_or_hami_placed_them_on() -> None:
    """Its source and target, the node a replacement runs on, and the node HAMi's filter chose for one not bound yet
    (HAMi's `hami.io/vgpu-node`): a replacement that landed off the target is seen there."""
    move = Move("ns/x", "uid-x", "a", ("GPU-a",), "b", ("GPU-b",), "room for ns/big")
    bound = pod_object("x-2", None, nodeName="c")
    chosen = pod_object("x-3", None)
    chosen["metadata"]["annotations"]["hami.io/vgpu-node"] = "d"
    unplaced = pod_object("x-4", None)
    unplaced["metadata"]["annotations"]["hami.io/vgpu-node"] = ["e"]
    assert settling_nodes(move, [bound, chosen, unplaced]) == {"a", "b", "c", "d"}


def test_a_move_whose_pod_still_runs_is_read_from_the_whole_cluster() -> None:
    """Before its eviction (or one not yet in effect) the target's cards and room decide: no read of its pods alone."""
    move, _, pods = settle_scene("running")
    assert settling_pods(move, pods) is None
