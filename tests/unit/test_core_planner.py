"""The defragmentation planner on plain data: goals, bounds, what must never move, `why`, and sequence feasibility.

Feasibility is checked independently of the planner: each move is replayed with `fit.fit_pod` (HAMi's whole-pod
verdict, the pod pinned to the move's cards by use-gpuuuid as a placement pins it) against the usage
`usage.card_usage` counts from the allocations as the moves before it left them.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kubectl_hami_place.core import usage as usage_module
from kubectl_hami_place.core.allocations import ContainerDevice
from kubectl_hami_place.core.cards import Card
from kubectl_hami_place.core.fit import GPU_SCHEDULER_POLICY, USE_UUID, FitReason, fit_pod
from kubectl_hami_place.core.hami_config import HAMI_DEFAULTS
from kubectl_hami_place.core.node_resources import Resources
from kubectl_hami_place.core.planner import (
    DO_NOT_MOVE,
    CardWhy,
    CompactGoal,
    FitGoal,
    FreeCardsGoal,
    Limits,
    Move,
    Plan,
    PlanNode,
    PlanPod,
    Snapshot,
    Summary,
    plan,
    why,
)
from kubectl_hami_place.core.planner.goals import _make_room
from kubectl_hami_place.core.planner.model import PLACED_BY, CardState
from kubectl_hami_place.core.planner.state import State, _Remembered, sequence_fit
from kubectl_hami_place.core.requests import card_request, memory_for
from kubectl_hami_place.core.usage import CardUsage, PodAllocation, card_usage

GIB = 1024
A100 = "NVIDIA-A100-SXM4-40GB"


def card(uuid: str, index: int = 0, mem: int = 40 * GIB, count: int = 10, **kw: object) -> Card:
    """A healthy NVIDIA card."""
    fields: dict = {"devcore": 100, "type": A100, "health": True, "mode": "hami-core", **kw}
    return Card(uuid=uuid, index=index, count=count, devmem=mem, **fields)


def gpu_node(name: str, cards: int = 2, **kw: object) -> PlanNode:
    """A node with `cards` 40 GiB cards named GPU-<name>-<i>."""
    return PlanNode(name=name, cards=tuple(card(f"GPU-{name}-{i}", i) for i in range(cards)), **kw)  # type: ignore[arg-type]


def placed(name: str, node: str, uuids: list[str], mem: int, cores: int = 0, **kw: object) -> PlanPod:
    """A pod of one GPU container holding `mem` MiB and `cores` % on each of `uuids`, owned by a ReplicaSet."""
    devices = tuple(ContainerDevice(uuid, "NVIDIA", mem, cores) for uuid in uuids)
    fields: dict = {"owner_kind": "ReplicaSet", **kw}
    return PlanPod(
        namespace="ns",
        name=name,
        uid=f"uid-{name}",
        requests=(card_request(len(uuids), memreq=mem, coresreq=cores),),
        allocation=PodAllocation("ns", name, f"uid-{name}", node, "Running", (devices,)),
        **fields,
    )


def pending(mem: int, nums: int = 1, cores: int = 0, **kw: object) -> PlanPod:
    """A Pending pod asking `nums` cards of `mem` MiB each."""
    return PlanPod(namespace="ns", name="new", requests=(card_request(nums, memreq=mem, coresreq=cores),), **kw)  # type: ignore[arg-type]


def pinned_fit(snapshot: Snapshot, allocations: dict, pod: PlanPod, node_name: str, uuids: tuple[str, ...]) -> None:
    """Assert HAMi places the pod, pinned to `uuids` of the node, on exactly those cards."""
    node = next(n for n in snapshot.nodes if n.name == node_name)
    others = [a for key, a in allocations.items() if key != pod.key and a is not None]
    usage = card_usage(node.cards, others, node=node.name)
    annotations = {**pod.fit_annotations, USE_UUID: ",".join(uuids)}
    config = HAMI_DEFAULTS.with_policy(pod.default_policy or HAMI_DEFAULTS.gpu_scheduler_policy)
    verdict = fit_pod(
        node.cards, usage, pod.requests, pod.init_containers, annotations, cordoned=node.cordoned, config=config
    )
    assert verdict.ok, (pod.key, node_name, uuids, verdict.reason)
    assert all(set(cards) == set(uuids) for cards in verdict.devices)


def replay(snapshot: Snapshot, result: Plan) -> None:
    """Assert each move fits its target cards after the moves before it, and the fit goal's pod fits at the end."""
    cards = {c.uuid: c for n in snapshot.nodes for c in n.cards}
    pods = {p.key: p for p in snapshot.pods if p.allocation is not None}
    allocations = {key: p.allocation for key, p in pods.items()}
    for move in result.moves:
        pod = pods[move.pod]
        held = allocations[move.pod]
        assert held is not None
        assert set(move.from_cards) == {d.uuid for c in held.containers for d in c}
        pinned_fit(snapshot, allocations, pod, move.to_node, move.to_cards)
        devices = tuple(
            tuple(ContainerDevice(uuid, "NVIDIA", memory_for(r, cards[uuid]), r.coresreq) for uuid in move.to_cards)
            for r in pod.requests
            if r is not None
        )
        allocations[move.pod] = PodAllocation("ns", pod.name, pod.uid, move.to_node, "Running", devices)
    goal_pod = pending_of(result)
    if result.target is not None and goal_pod is not None:
        pinned_fit(snapshot, allocations, goal_pod, *result.target)


_PENDING: dict[int, PlanPod] = {}


def pending_of(result: Plan) -> PlanPod | None:
    """The fit goal's pod registered for a plan by `fit_plan`."""
    return _PENDING.get(id(result))


def fit_plan(snapshot: Snapshot, pod: PlanPod, limits: Limits | None = None) -> Plan:
    """plan() for a fit goal, remembering the pod so `replay` can check it fits the target at the end."""
    result = plan(snapshot, FitGoal(pod), limits)
    _PENDING[id(result)] = pod
    return result


# fit ----------------------------------------------------------------------------------------------------------


def test_fit_needs_no_move_when_a_card_has_room() -> None:
    """A pod that fits today gets an empty plan and the card it fits."""
    snapshot = Snapshot(nodes=(gpu_node("a"),), pods=(placed("p", "a", ["GPU-a-0"], 30 * GIB),))
    result = fit_plan(snapshot, pending(20 * GIB))
    assert result.complete and result.moves == ()
    assert result.target == ("a", ("GPU-a-1",))


def test_fit_moves_the_one_pod_that_makes_room() -> None:
    """Two half-full cards: one move joins the small pods and frees a card for the big one."""
    snapshot = Snapshot(
        nodes=(gpu_node("a"),),
        pods=(placed("p", "a", ["GPU-a-0"], 24 * GIB), placed("q", "a", ["GPU-a-1"], 10 * GIB)),
    )
    result = fit_plan(snapshot, pending(32 * GIB))
    assert result.complete
    assert [(m.pod, m.from_cards, m.to_cards) for m in result.moves] == [("ns/q", ("GPU-a-1",), ("GPU-a-0",))]
    assert result.target == ("a", ("GPU-a-1",))
    replay(snapshot, result)


def test_a_plan_prints_as_the_json_apply_reads_back() -> None:
    """`plan -o json` is what `apply` and operators' scripts read: every key and value of a plan, its moves and its
    card map is part of the interface (here a compact plan: no target, one card freed, the cards left as they were)."""
    snapshot = Snapshot(
        nodes=(gpu_node("a"), gpu_node("b", cards=1)),
        pods=(
            placed("x", "a", ["GPU-a-0"], 10 * GIB, 20),
            placed("y", "a", ["GPU-a-1"], 12 * GIB, 30),
            placed("z", "b", ["GPU-b-0"], 30 * GIB, 40),
        ),
    )

    def card_after(node: str, index: int, used: int, cores: int, pods: list[str]) -> dict:
        return {
            "node": node,
            "uuid": f"GPU-{node}-{index}",
            "name": f"gpu-{index}",
            "type": A100,
            "memory": {"total": 40 * GIB, "used": used},
            "cores": {"total": 100, "used": cores},
            "slots": {"total": 10, "used": len(pods)},
            "pods": pods,
        }

    assert plan(snapshot, CompactGoal(("a", "b"))).to_dict() == {
        "goal": "compact a, b",
        "complete": True,
        "gain": "1 whole card(s) freed with 1 move(s): 0 -> 1 whole cards free",
        "reasons": ["a/gpu-1: ns/y fits no other card in use", "b/gpu-0: ns/z fits no other card in use"],
        "target": None,
        "freed": ["GPU-a-0"],
        "before": {"openCards": 3, "wholeCardsFree": 0, "freeMiB": 68 * GIB, "largestFreeMiB": 30 * GIB},
        "after": {"openCards": 3, "wholeCardsFree": 1, "freeMiB": 68 * GIB, "largestFreeMiB": 40 * GIB},
        "moves": [
            {
                "pod": "ns/x",
                "uid": "uid-x",
                "from": {"node": "a", "cards": ["GPU-a-0"]},
                "to": {"node": "b", "cards": ["GPU-b-0"]},
                "reason": "frees a/gpu-0",
            }
        ],
        "cardsAfter": [
            card_after("a", 0, 0, 0, []),
            card_after("a", 1, 12 * GIB, 30, ["ns/y"]),
            card_after("b", 0, 40 * GIB, 60, ["ns/z", "ns/x"]),
        ],
    }


def test_fit_prefers_the_node_with_fewest_moves() -> None:
    """Node b needs one move where node a needs two."""
    snapshot = Snapshot(
        nodes=(gpu_node("a"), gpu_node("b")),
        pods=(
            placed("a1", "a", ["GPU-a-0"], 12 * GIB),
            placed("a2", "a", ["GPU-a-0"], 12 * GIB),
            placed("a3", "a", ["GPU-a-1"], 12 * GIB),
            placed("a4", "a", ["GPU-a-1"], 12 * GIB),
            placed("b1", "b", ["GPU-b-0"], 30 * GIB),
            placed("b2", "b", ["GPU-b-1"], 16 * GIB),
        ),
    )
    result = fit_plan(snapshot, pending(32 * GIB))
    assert result.complete and len(result.moves) == 1
    assert result.target is not None and result.target[0] == "b"
    replay(snapshot, result)


def test_fit_never_moves_what_must_not_move() -> None:
    """DaemonSet, static, system-critical, do-not-move and uncontrolled pods stay; the planner says why."""
    blockers = {
        "ds": {"owner_kind": "DaemonSet"},
        "static": {"owner_kind": "Node"},
        "crit": {"priority_class": "system-node-critical"},
        "pinned": {"annotations": {DO_NOT_MOVE: "true"}},
        "bare": {"owner_kind": ""},
    }
    for name, fields in blockers.items():
        snapshot = Snapshot(
            nodes=(gpu_node("a"),),
            pods=(placed(name, "a", ["GPU-a-0"], 10 * GIB, **fields), placed("big", "a", ["GPU-a-1"], 35 * GIB)),
        )
        result = fit_plan(snapshot, pending(32 * GIB))
        assert not result.complete and result.moves == (), name
        text = " ".join(result.reasons)
        assert f"ns/{name}" in text and "CardInsufficientMemory" in text, text


def test_why_not_further_names_the_card_each_blocker_is_on() -> None:
    """Issue 25 item 10 said plan --for's 'Why not further' named the wrong card: each line names the card the
    unmovable pod holds, with its register index, and the node (cards listed out of index order here)."""
    node = PlanNode("a", (card("GPU-a-1", 1), card("GPU-a-0", 0)))
    snapshot = Snapshot(
        nodes=(node,),
        pods=(
            placed("bare", "a", ["GPU-a-0"], 10 * GIB, owner_kind=""),
            placed("ds", "a", ["GPU-a-1"], 35 * GIB, owner_kind="DaemonSet"),
        ),
    )
    result = fit_plan(snapshot, pending(32 * GIB))
    assert not result.complete
    [line] = [reason for reason in result.reasons if reason.startswith("a: ")]
    blocks = dict(part.split(": ", 1) for part in line.removeprefix("a: ").split("; "))
    assert "ns/bare" in blocks["gpu-0"] and "ns/ds" in blocks["gpu-1"], line


def test_fit_respects_a_disruption_budget() -> None:
    """A budget that allows no disruption steers the planner to another pod, and to a refusal when none is left."""
    pods = (placed("p", "a", ["GPU-a-0"], 20 * GIB, budgets=("ns/pdb",)), placed("q", "a", ["GPU-a-1"], 10 * GIB))
    snapshot = Snapshot(nodes=(gpu_node("a"),), pods=pods, budgets={"ns/pdb": 0})
    result = fit_plan(snapshot, pending(32 * GIB))
    assert [m.pod for m in result.moves] == ["ns/q"]
    replay(snapshot, result)
    blocked = replace(snapshot, pods=(pods[0], replace(pods[1], budgets=("ns/pdb",))))
    refused = fit_plan(blocked, pending(32 * GIB))
    assert not refused.complete and "PodDisruptionBudget ns/pdb" in " ".join(refused.reasons)
    unknown = fit_plan(replace(blocked, budgets={}), pending(32 * GIB))
    assert not unknown.complete, "a budget whose disruptions allowed are not known allows none"


def test_fit_keeps_a_pod_on_the_cards_its_constraints_allow() -> None:
    """A pod pinned by use-gpuuuid, or by use-gputype to a type only its card has, is not moved elsewhere."""
    t4 = PlanNode("b", (card("GPU-b-0", 0, mem=16 * GIB, type="NVIDIA-Tesla-T4"),))
    for constraint in ({"nvidia.com/use-gpuuuid": "GPU-a-1"}, {"nvidia.com/use-gputype": "A100"}):
        snapshot = Snapshot(
            nodes=(gpu_node("a"), t4),
            pods=(
                placed("big", "a", ["GPU-a-0"], 36 * GIB),
                placed("p", "a", ["GPU-a-1"], 8 * GIB, annotations=constraint),
            ),
        )
        result = fit_plan(snapshot, pending(36 * GIB, annotations={"nvidia.com/use-gputype": "A100"}))
        assert not result.complete, constraint
        assert "fits no other card" in " ".join(result.reasons)
        free = replace(snapshot, pods=(snapshot.pods[0], replace(snapshot.pods[1], annotations={})))
        moved = fit_plan(free, pending(36 * GIB, annotations={"nvidia.com/use-gputype": "A100"}))
        assert [(m.pod, m.to_node) for m in moved.moves] == [("ns/p", "b")]
        replay(free, moved)


def test_a_use_gpuuuid_written_by_an_earlier_placement_does_not_pin() -> None:
    """hami-place's own use-gpuuuid (the pod carries its placement annotation) is not a constraint of the pod."""
    annotations = {"nvidia.com/use-gpuuuid": "GPU-a-1", "scheduling.hami.placement.com/placement": "x"}
    snapshot = Snapshot(
        nodes=(gpu_node("a"), gpu_node("b", cards=1)),
        pods=(
            placed("big", "a", ["GPU-a-0"], 36 * GIB),
            placed("p", "a", ["GPU-a-1"], 8 * GIB, annotations=annotations),
        ),
    )
    result = fit_plan(snapshot, pending(36 * GIB, nodes=frozenset({"a"})))
    assert [(m.pod, m.to_node) for m in result.moves] == [("ns/p", "b")]


def test_multi_card_pods_move_as_one() -> None:
    """A two-card pod moves with both cards to one node."""
    snapshot = Snapshot(
        nodes=(gpu_node("a"), gpu_node("b")),
        pods=(
            placed("duo", "a", ["GPU-a-0", "GPU-a-1"], 10 * GIB),
            placed("b0", "b", ["GPU-b-0"], 20 * GIB),
            placed("b1", "b", ["GPU-b-1"], 20 * GIB),
        ),
    )
    result = fit_plan(snapshot, pending(40 * GIB, nums=2, nodes=frozenset({"a"})))
    assert result.complete
    assert [(m.pod, m.from_cards, m.to_node, m.to_cards) for m in result.moves] == [
        ("ns/duo", ("GPU-a-0", "GPU-a-1"), "b", ("GPU-b-0", "GPU-b-1"))
    ]
    replay(snapshot, result)


def test_fit_that_cannot_be_done_says_why_node_by_node() -> None:
    """Unschedulable nodes, wrong types and immovable pods each get their reason."""
    snapshot = Snapshot(
        nodes=(gpu_node("a", schedulable=False), gpu_node("b", cordoned=frozenset({"GPU-b-0", "GPU-b-1"}))),
        pods=(),
    )
    result = fit_plan(snapshot, pending(8 * GIB))
    text = " ".join(result.reasons)
    assert not result.complete and "a: the node takes no new pods" in text and "CardCordoned" in text


@pytest.mark.parametrize(
    ("requests", "reason"),
    [
        ((None,), "the pod asks for no NVIDIA card"),
        (
            (card_request(1, memreq=GIB), card_request(2, memreq=GIB)),
            "the pod's GPU containers ask different card counts; the planner pins one set",
        ),
    ],
    ids=["no GPU", "one and two cards"],
)
def test_a_pod_the_planner_cannot_pin_gets_an_empty_plan_that_says_why(requests: tuple, reason: str) -> None:
    """No node is tried for a pod no placement can pin: the plan moves nothing, and its reason is all a person is
    shown."""
    summary = Summary(open_cards=2, whole_cards_free=2, free_mib=80 * GIB, largest_free_mib=40 * GIB)
    pod = PlanPod(namespace="ns", name="p", requests=requests)
    assert plan(Snapshot(nodes=(gpu_node("a"),), pods=()), FitGoal(pod)) == Plan(
        goal="make room for ns/p",
        moves=(),
        complete=False,
        reasons=(reason,),
        before=summary,
        after=summary,
        cards_after=(),
    )


def test_each_card_refused_alike_is_named_in_its_own_refusal() -> None:
    """Refusals are worked out once per kind of card, but each card's reason must name that card: a person reads
    which card is short, and gpu-1's line named gpu-0."""
    result = plan(Snapshot(nodes=(gpu_node("a"),), pods=()), FitGoal(pending(50 * GIB)))
    assert result.reasons == (
        "no node can make room within the bounds:",
        "a: gpu-0: CardInsufficientMemory: gpu-0 (GPU-a-0) has 40960 MiB free, the pod asks 51200 MiB; "
        "gpu-1: CardInsufficientMemory: gpu-1 (GPU-a-1) has 40960 MiB free, the pod asks 51200 MiB",
    )


def test_a_node_without_cards_is_named_among_those_that_cannot_make_room() -> None:
    """The reasons cover every node of the snapshot, one without a card too: none is silently left out of why the
    pod has no room."""
    snapshot = Snapshot(nodes=(gpu_node("a", cards=1), PlanNode("bare", ())), pods=())
    assert plan(snapshot, FitGoal(pending(50 * GIB))).reasons == (
        "no node can make room within the bounds:",
        "a: gpu-0: CardInsufficientMemory: gpu-0 (GPU-a-0) has 40960 MiB free, the pod asks 51200 MiB",
        "bare: the node has no cards",
    )


def test_why_is_the_reasons_in_one_line_each_set_apart_by_a_full_stop() -> None:
    """An Event's message is one line: a node's reasons (which join its cards' with semicolons) end in a full stop
    so the next node's do not run on from them; a heading keeps its colon, the last line gets no stop."""
    snapshot = Snapshot(nodes=(gpu_node("a", cards=1), PlanNode("bare", ()), PlanNode("bare-2", ())), pods=())
    assert plan(snapshot, FitGoal(pending(50 * GIB))).why == (
        "no node can make room within the bounds: "
        "a: gpu-0: CardInsufficientMemory: gpu-0 (GPU-a-0) has 40960 MiB free, the pod asks 51200 MiB. "
        "bare: the node has no cards. bare-2: the node has no cards"
    )
    no_card = PlanPod(namespace="ns", name="p", requests=(None,))
    assert plan(snapshot, FitGoal(no_card)).why == "the pod asks for no NVIDIA card"
    fits = plan(Snapshot(nodes=(gpu_node("a", cards=1),), pods=()), FitGoal(pending(GIB)))
    assert (fits.reasons, fits.why) == ((), "")


def test_fit_frees_the_card_that_takes_fewest_moves_not_the_one_whose_pods_hold_least() -> None:
    """Freeing gpu-1 evicts 8 GiB, but that pod may only stay on a and fits no other card there until gpu-0's filler
    leaves too: two moves. Freeing gpu-0 evicts 29 GiB in one move: every eviction stops a workload, so the plan is
    the one move."""
    a_only = frozenset({"a"})
    snapshot = Snapshot(
        nodes=(gpu_node("a"), gpu_node("b", cards=1)),
        pods=(
            placed("filler", "a", ["GPU-a-0"], 29 * GIB),
            placed("batch-1", "a", ["GPU-a-0"], 8 * GIB, nodes=a_only),
            placed("batch-2", "a", ["GPU-a-1"], 8 * GIB, nodes=a_only),
            placed("eval", "a", ["GPU-a-1"], 18 * GIB, owner_kind=""),
        ),
    )
    result = fit_plan(snapshot, pending(16 * GIB, nodes=a_only))
    assert [(m.pod, m.from_cards, m.to_node, m.to_cards) for m in result.moves] == [
        ("ns/filler", ("GPU-a-0",), "b", ("GPU-b-0",))
    ]
    assert (result.complete, result.target) == (True, ("a", ("GPU-a-0",)))
    tight = fit_plan(snapshot, pending(16 * GIB, nodes=a_only), Limits(max_moves=1))
    assert [m.pod for m in tight.moves] == ["ns/filler"], "found under a bound the two-move plan breaks too"


def test_fit_stays_within_max_moves() -> None:
    """A plan needing two moves is refused under --max-moves 1."""
    snapshot = Snapshot(
        nodes=(gpu_node("a", cards=1), gpu_node("b", cards=1)),
        pods=(placed("p", "a", ["GPU-a-0"], 10 * GIB), placed("q", "a", ["GPU-a-0"], 10 * GIB)),
    )
    assert len(fit_plan(snapshot, pending(40 * GIB, nodes=frozenset({"a"}))).moves) == 2
    refused = fit_plan(snapshot, pending(40 * GIB, nodes=frozenset({"a"})), Limits(max_moves=1))
    assert not refused.complete and "would exceed the plan's 1 move(s)" in " ".join(refused.reasons)


def test_a_node_whose_evictions_exceed_the_move_bounds_is_not_tried() -> None:
    """a needs two moves off it but one is left there: it is skipped, so its trial spends none of the search bound
    that b's plan needs, and a plan that fails names the bound for it."""
    others = (
        placed("b0", "b", ["GPU-b-0"], 12 * GIB),
        placed("b1", "b", ["GPU-b-0"], 12 * GIB),
        placed("b2", "b", ["GPU-b-0"], 12 * GIB),
        placed("c0", "c", ["GPU-c-0"], 4 * GIB),
    )
    without_a = Snapshot(nodes=(gpu_node("b", cards=1), gpu_node("c", cards=1)), pods=others)
    pod = pending(40 * GIB, nodes=frozenset({"a", "b"}))
    needed = next(n for n in range(1, 1000) if fit_plan(without_a, pod, Limits(max_steps=n)).complete)
    snapshot = Snapshot(
        nodes=(gpu_node("a", cards=1), *without_a.nodes),
        pods=(placed("a0", "a", ["GPU-a-0"], 20 * GIB), placed("a1", "a", ["GPU-a-0"], 20 * GIB), *others),
    )
    result = fit_plan(snapshot, pod, Limits(node_moves_left={"a": 1}, max_steps=needed))
    assert result.complete and result.target == ("b", ("GPU-b-0",)) and len(result.moves) == 3
    replay(snapshot, result)
    held = replace(
        snapshot, pods=tuple(replace(p, held="is resting") if p.name.startswith("b") else p for p in snapshot.pods)
    )
    refused = fit_plan(held, pod, Limits(node_moves_left={"a": 1}))
    assert "a: making room evicts 2 pods, which would exceed 1 moves off node a" in refused.reasons


def test_a_pod_limited_to_a_few_nodes_of_many_cards_moves_to_the_fullest_of_their_cards_that_fits() -> None:
    """A pod that may run on few nodes of many cards is walked over those nodes' cards alone, by the same rules: p
    (on a, c, the unschedulable d, or the GPU-less cpu-0) goes to c's fullest card that still fits it (20 GiB free,
    exactly its share), or to an empty one of c when c's cards in use are too full, never to d."""

    def cluster(t: int, u: int) -> Snapshot:
        return Snapshot(
            nodes=(
                gpu_node("a", cards=9),
                gpu_node("b", cards=9),
                gpu_node("c", cards=9),
                gpu_node("d", cards=9, schedulable=False),
            ),
            pods=(
                placed("p", "a", ["GPU-a-0"], 20 * GIB, nodes=frozenset({"a", "c", "d", "cpu-0"})),
                *(placed(f"f{i}", "a", [f"GPU-a-{i}"], 36 * GIB, held="is resting") for i in range(1, 9)),
                placed("r", "b", ["GPU-b-0"], 8 * GIB),
                placed("s", "d", ["GPU-d-0"], 18 * GIB),
                placed("t", "c", ["GPU-c-2"], t * GIB),
                placed("u", "c", ["GPU-c-3"], u * GIB),
            ),
        )

    for (t, u), fullest in (((20, 12), "GPU-c-2"), ((30, 24), "GPU-c-0")):
        snapshot = cluster(t, u)
        result = fit_plan(snapshot, pending(40 * GIB, nodes=frozenset({"a"})))
        assert [(m.pod, m.to_node, m.to_cards) for m in result.moves] == [("ns/p", "c", (fullest,))]
        assert result.target == ("a", ("GPU-a-0",))
        replay(snapshot, result)


def test_room_whose_moves_bring_another_pod_s_cpu_onto_the_node_is_refused() -> None:
    """x can leave a only by pushing y aside onto a's small card, and y's CPU then leaves a too little for the pod:
    kube-scheduler would refuse the pod there, so the moves would evict two pods for nothing."""
    room = Resources(1500, 256 * GIB * 2**20, 100)
    a = PlanNode("a", (card("GPU-a-0", 0), card("GPU-a-1", 1), card("GPU-a-2", 2, mem=15 * GIB)), room=room)
    pods = (
        placed("x", "a", ["GPU-a-0"], 20 * GIB),
        placed("z", "a", ["GPU-a-1"], 35 * GIB, held="kept"),
        replace(placed("y", "b", ["GPU-b-0"], 15 * GIB), needs=Resources(1000, 0, 1)),
        placed("w", "b", ["GPU-b-0"], 10 * GIB, held="kept"),
    )
    snapshot = Snapshot(nodes=(a, PlanNode("b", (card("GPU-b-0"),), room=room)), pods=pods)
    result = plan(snapshot, FitGoal(pending(40 * GIB, needs=Resources(1000, 0, 1))))
    assert (result.complete, result.moves, result.reasons) == (
        False,
        (),
        (
            "no node can make room within the bounds:",
            "a: the node's CPU, memory or pod count would not hold the pod after the moves; gpu-1: "
            "CardInsufficientMemory, and ns/z kept; gpu-2: CardInsufficientMemory: gpu-2 (GPU-a-2) has 15360 MiB "
            "free, the pod asks 40960 MiB",
            "b: gpu-0: CardInsufficientMemory, and ns/w kept",
        ),
    )


def test_a_node_whose_room_fails_after_its_moves_leaves_no_move_behind_for_the_next() -> None:
    """As above on a, tried first (its pod holds less memory than c's), then c, where moving v to d's empty card makes
    room: the plan is that one move, none of those a's attempt made and undid."""
    room = Resources(1500, 256 * GIB * 2**20, 100)
    a = PlanNode("a", (card("GPU-a-0", 0), card("GPU-a-1", 1), card("GPU-a-2", 2, mem=15 * GIB)), room=room)
    pods = (
        placed("x", "a", ["GPU-a-0"], 20 * GIB, nodes=frozenset({"a", "b"})),
        placed("z", "a", ["GPU-a-1"], 35 * GIB, held="kept"),
        replace(placed("y", "b", ["GPU-b-0"], 15 * GIB), needs=Resources(1000, 0, 1)),
        placed("w", "b", ["GPU-b-0"], 10 * GIB, held="kept"),
        placed("v", "c", ["GPU-c-0"], 25 * GIB, nodes=frozenset({"c", "d"})),
    )
    nodes = (
        a,
        PlanNode("b", (card("GPU-b-0"),), room=room),
        PlanNode("c", (card("GPU-c-0"),), room=room),
        PlanNode("d", (card("GPU-d-0"),), room=room),
    )
    asked = pending(40 * GIB, needs=Resources(1000, 0, 1), nodes=frozenset({"a", "b", "c"}))
    result = plan(Snapshot(nodes=nodes, pods=pods), FitGoal(asked))
    assert result.complete, result.reasons
    assert [(m.pod, m.to_node) for m in result.moves] == [("ns/v", "d")]
    assert result.target == ("c", ("GPU-c-0",))


def test_of_two_pods_either_of_which_makes_room_the_one_holding_least_memory_moves() -> None:
    """The least memory moved is the cheapest eviction (the fewest cores is no measure of it): p1's 15 GiB go, and
    p2's 20 GiB, holding fewer cores, stay."""
    pods = (placed("p1", "a", ["GPU-a-0"], 15 * GIB, 30), placed("p2", "a", ["GPU-a-0"], 20 * GIB, 10))
    snapshot = Snapshot(nodes=(gpu_node("a", cards=1), gpu_node("spare", cards=1)), pods=pods)
    result = fit_plan(snapshot, pending(20 * GIB, nodes=frozenset({"a"})))
    assert ([(m.pod, m.to_node, m.to_cards) for m in result.moves], result.target) == (
        [("ns/p1", "spare", ("GPU-spare-0",))],
        ("a", ("GPU-a-0",)),
    )
    replay(snapshot, result)


@pytest.mark.parametrize(("mem", "cores"), [(30 * GIB + 1, 0), (10 * GIB, 71)], ids=["memory", "cores"])
def test_room_made_by_several_pods_counts_exactly_what_they_release(mem: int, cores: int) -> None:
    """Two of the three pods release 30 GiB and 60% cores, one MiB or one core short of the ask: a plan moving
    only two would leave the pod unplaceable, so all three move."""
    pods = tuple(placed(f"p{i}", "a", ["GPU-a-0"], 10 * GIB, 30) for i in range(3))
    snapshot = Snapshot(nodes=(gpu_node("a", cards=1), gpu_node("spare", cards=1)), pods=pods)
    result = fit_plan(snapshot, pending(mem, cores=cores, nodes=frozenset({"a"})))
    assert ([(m.pod, m.to_node, m.to_cards) for m in result.moves], result.target) == (
        [(f"ns/p{i}", "spare", ("GPU-spare-0",)) for i in range(3)],
        ("a", ("GPU-a-0",)),
    )
    replay(snapshot, result)


def test_room_no_single_pod_makes_is_made_by_the_pods_holding_most_memory_first() -> None:
    """Two moves where HAMi's memory is what the pod lacks: A's 18 GiB and B's 10 GiB, not B and C first for their
    cores (which free less memory and take a third move)."""
    pods = (
        placed("A", "a", ["GPU-a-0"], 18 * GIB, 5),
        placed("B", "a", ["GPU-a-0"], 10 * GIB, 40),
        placed("C", "a", ["GPU-a-0"], 10 * GIB, 30),
    )
    snapshot = Snapshot(nodes=(gpu_node("a", cards=1), gpu_node("spare", cards=1)), pods=pods)
    result = fit_plan(snapshot, pending(30 * GIB, nodes=frozenset({"a"})))
    assert ([(m.pod, m.to_node, m.to_cards) for m in result.moves], result.target) == (
        [("ns/A", "spare", ("GPU-spare-0",)), ("ns/B", "spare", ("GPU-spare-0",))],
        ("a", ("GPU-a-0",)),
    )
    replay(snapshot, result)


def test_room_for_a_pod_of_three_gpu_containers_on_one_card_is_three_slots_released() -> None:
    """HAMi counts a slot per GPU container: on a full card of four slots the pod needs three pods gone, where the
    memory they hold is no measure of the slots they free."""
    three = PlanPod(namespace="ns", name="new", requests=(card_request(1, memreq=5 * GIB),) * 3, nodes=frozenset({"a"}))
    pods = tuple(placed(f"p{i}", "a", ["GPU-a-0"], 5 * GIB) for i in range(4))
    snapshot = Snapshot(nodes=(PlanNode("a", (card("GPU-a-0", count=4),)), gpu_node("spare", cards=1)), pods=pods)
    result = fit_plan(snapshot, three)
    assert ([(m.pod, m.to_node, m.to_cards) for m in result.moves], result.target) == (
        [(f"ns/p{i}", "spare", ("GPU-spare-0",)) for i in range(3)],
        ("a", ("GPU-a-0",)),
    )
    replay(snapshot, result)


def test_the_pods_making_room_move_largest_memory_first_so_the_largest_gets_the_tightest_card() -> None:
    """Best fit, largest first: A's 20 GiB fill b's gpu-0 exactly and B's 10 GiB take gpu-1; B first (it holds more
    cores) would take gpu-0 and leave A the roomier card, wasting the exact fit."""
    pods = (
        placed("A", "a", ["GPU-a-0"], 20 * GIB, 10),
        placed("B", "a", ["GPU-a-0"], 10 * GIB, 50),
        placed("f0", "b", ["GPU-b-0"], 20 * GIB, held="kept"),
        placed("f1", "b", ["GPU-b-1"], 15 * GIB, held="kept"),
    )
    snapshot = Snapshot(nodes=(gpu_node("a", cards=1), gpu_node("b")), pods=pods)
    result = fit_plan(snapshot, pending(40 * GIB, nodes=frozenset({"a"})))
    assert ([(m.pod, m.to_node, m.to_cards) for m in result.moves], result.target) == (
        [("ns/A", "b", ("GPU-b-0",)), ("ns/B", "b", ("GPU-b-1",))],
        ("a", ("GPU-a-0",)),
    )
    replay(snapshot, result)


def test_a_node_short_of_cpu_and_memory_names_both() -> None:
    """The reason names every count the node lacks, so a person knows what must be freed (not only the first)."""
    room = Resources(1000, GIB * 2**20, 100)
    pods = (replace(placed("x", "a", ["GPU-a-1"], 10 * GIB), needs=Resources(1000, GIB * 2**20, 1)),)
    snapshot = Snapshot(nodes=(PlanNode("a", (card("GPU-a-0", 0), card("GPU-a-1", 1)), room=room),), pods=pods)
    result = plan(snapshot, FitGoal(pending(40 * GIB, needs=Resources(8000, 8 * GIB * 2**20, 1))))
    assert result.reasons == (
        "no node can make room within the bounds:",
        "a: the node's cpu and memory would not hold the pod even with every pod that may move moved off",
    )


def test_fit_pushes_one_smaller_pod_aside_when_an_evicted_pod_fits_nowhere() -> None:
    """p fits no other card until q steps aside; that chain is two moves, so --max-moves 1 refuses it."""
    snapshot = Snapshot(
        nodes=(gpu_node("a"), gpu_node("b")),
        pods=(
            placed("p", "a", ["GPU-a-0"], 20 * GIB),
            placed("big", "a", ["GPU-a-1"], 30 * GIB),
            placed("q", "b", ["GPU-b-0"], 8 * GIB),
            placed("s", "b", ["GPU-b-0"], 16 * GIB),
            placed("r", "b", ["GPU-b-1"], 22 * GIB),
        ),
    )
    result = fit_plan(snapshot, pending(32 * GIB, nodes=frozenset({"a"})))
    assert [(m.pod, m.to_cards) for m in result.moves] == [("ns/q", ("GPU-a-1",)), ("ns/p", ("GPU-b-0",))]
    assert result.target == ("a", ("GPU-a-0",))
    replay(snapshot, result)
    refused = fit_plan(snapshot, pending(32 * GIB, nodes=frozenset({"a"})), Limits(max_moves=1))
    assert not refused.complete and refused.moves == ()


def test_the_pod_pushed_aside_is_the_one_holding_least_memory() -> None:
    """Either q or s leaving gpu-0 of b makes room for p; the chain pushes aside q, which holds less memory (the
    planner's cost is MiB moved), though it holds more cores. Both moves say what they are for, and a numa-bind p
    (one card is always of one NUMA node) is pushed in the same way."""
    snapshot = Snapshot(
        nodes=(gpu_node("a"), gpu_node("b")),
        pods=(
            placed("p", "a", ["GPU-a-0"], 20 * GIB),
            placed("big", "a", ["GPU-a-1"], 30 * GIB),
            placed("q", "b", ["GPU-b-0"], 8 * GIB, 60),
            placed("s", "b", ["GPU-b-0"], 14 * GIB),
            placed("r", "b", ["GPU-b-1"], 24 * GIB),
        ),
    )
    bound = replace(
        snapshot, pods=tuple(replace(p, annotations=NUMA_BIND) if p.name == "p" else p for p in snapshot.pods)
    )
    for cluster in (snapshot, bound):
        result = fit_plan(cluster, pending(32 * GIB, nodes=frozenset({"a"})))
        assert [(m.pod, m.to_cards, m.reason) for m in result.moves] == [
            ("ns/q", ("GPU-a-1",), "makes room on a/gpu-0"),
            ("ns/p", ("GPU-b-0",), "makes room on a/gpu-0"),
        ]
        assert result.target == ("a", ("GPU-a-0",))
        replay(cluster, result)


def test_a_room_of_two_cards_is_named_once_by_its_node() -> None:
    """Each move's reason names the room as the controller's Events do, `node/gpu-0,gpu-1`: a pod asking two cards
    of 30 GiB fits neither node, until both of b's cards are cleared onto a's (their 15 GiB pods move least)."""
    snapshot = Snapshot(
        nodes=(gpu_node("a"), gpu_node("b")),
        pods=(
            placed("p", "a", ["GPU-a-0"], 20 * GIB),
            placed("q", "a", ["GPU-a-1"], 20 * GIB),
            placed("r", "b", ["GPU-b-0"], 15 * GIB),
            placed("s", "b", ["GPU-b-1"], 15 * GIB),
        ),
    )
    result = fit_plan(snapshot, pending(30 * GIB, nums=2))
    assert [(m.pod, m.reason) for m in result.moves] == [
        ("ns/r", "makes room on b/gpu-0,gpu-1"),
        ("ns/s", "makes room on b/gpu-0,gpu-1"),
    ]
    assert result.target == ("b", ("GPU-b-0", "GPU-b-1"))
    replay(snapshot, result)


# free-cards and compact ---------------------------------------------------------------------------------------


def scattered() -> Snapshot:
    """Two nodes of four cards, each card a quarter full: three cards per node can be freed."""
    nodes = (gpu_node("a", cards=4), gpu_node("b", cards=4))
    pods = tuple(placed(f"{n}{i}", n, [f"GPU-{n}-{i}"], 10 * GIB) for n in "ab" for i in range(4))
    return Snapshot(nodes=nodes, pods=pods)


def test_free_cards_frees_as_many_as_asked() -> None:
    """free-cards 2 frees two cards with two moves, and the card map shows them empty."""
    snapshot = scattered()
    result = plan(snapshot, FreeCardsGoal(2))
    assert result.complete and len(result.freed) == 2 and len(result.moves) == 2
    # N counts cards the plan empties, not cards already free, and the goal says so (issue 25 item 10).
    assert result.goal == "free 2 more whole cards (cards already free do not count)"
    with_idle = replace(snapshot, nodes=(*snapshot.nodes, gpu_node("idle")))
    assert len(plan(with_idle, FreeCardsGoal(2)).freed) == 2
    assert FreeCardsGoal(1, "A100").describe() == "free 1 more whole A100 card (cards already free do not count)"
    assert result.after.whole_cards_free == result.before.whole_cards_free + 2
    empty = {c.uuid for c in result.cards_after if not c.pods}
    assert set(result.freed) <= empty
    replay(snapshot, result)


def test_a_pod_moved_onto_a_card_the_plan_then_frees_is_moved_once_from_where_it_was() -> None:
    """p0 first goes to gpu-1 to free gpu-0, then gpu-1 is freed too: p0's move is re-aimed at gpu-2 (one eviction,
    not two, since a replacement has another name), keeping the reason it was evicted for."""
    snapshot = Snapshot(
        nodes=(gpu_node("a", cards=3),),
        pods=(
            placed("p0", "a", ["GPU-a-0"], 4 * GIB),
            placed("p1", "a", ["GPU-a-1"], 10 * GIB),
            placed("p2", "a", ["GPU-a-2"], 10 * GIB),
        ),
    )
    result = plan(snapshot, FreeCardsGoal(2))
    assert result.complete and result.freed == ("GPU-a-0", "GPU-a-1")
    assert [(m.pod, m.from_cards, m.to_cards, m.reason) for m in result.moves] == [
        ("ns/p0", ("GPU-a-0",), ("GPU-a-2",), "frees a/gpu-0"),
        ("ns/p1", ("GPU-a-1",), ("GPU-a-2",), "frees a/gpu-1"),
    ]
    replay(snapshot, result)


def test_a_pod_of_two_gpu_containers_on_one_card_moves_both_of_its_slots() -> None:
    """HAMi counts a slot per GPU container: the pod's two slots leave gpu-0 with it, all of them, and land on
    gpu-1, whose slots bound how many more pods it takes."""
    share = (ContainerDevice("GPU-a-0", "NVIDIA", 5 * GIB, 10),)
    two = PlanPod(
        namespace="ns",
        name="two",
        uid="uid-two",
        requests=(card_request(1, memreq=5 * GIB, coresreq=10),) * 2,
        allocation=PodAllocation("ns", "two", "uid-two", "a", "Running", (share, share)),
        owner_kind="ReplicaSet",
    )
    result = plan(
        Snapshot(nodes=(gpu_node("a"),), pods=(two, placed("x", "a", ["GPU-a-1"], 20 * GIB, 30))), FreeCardsGoal(1)
    )
    assert [(m.pod, m.to_cards) for m in result.moves] == [("ns/two", ("GPU-a-1",))]

    def card_after(index: int, mem: int, cores: int, slots: int, pods: tuple[str, ...]) -> CardState:
        return CardState("a", f"GPU-a-{index}", index, A100, 40 * GIB, mem, 100, cores, 10, slots, pods)

    assert result.cards_after == (card_after(0, 0, 0, 0, ()), card_after(1, 30 * GIB, 50, 3, ("ns/x", "ns/two")))


def test_free_cards_as_many_as_possible_says_what_it_reached() -> None:
    """Asking for more than can be freed frees the most it can and says so."""
    snapshot = scattered()
    result = plan(snapshot, FreeCardsGoal(8), Limits(max_moves=100))
    assert not result.complete and len(result.freed) == 6
    assert result.reasons[0].startswith("freed 6 of 8")
    replay(snapshot, result)


def test_free_cards_of_a_type() -> None:
    """--type frees only cards whose type contains the word, even when other cards are easier to free."""
    t4 = PlanNode("t", (card("GPU-t-0", 0, type="NVIDIA-T4"), card("GPU-t-1", 1, type="NVIDIA-T4")))
    t4_pods = [placed(f"t{i}", "t", [f"GPU-t-{i % 2}"], 1 * GIB) for i in range(4)]
    snapshot = Snapshot(nodes=(*scattered().nodes, t4), pods=(*scattered().pods, *t4_pods))
    assert not any(uuid.startswith("GPU-t-") for uuid in plan(snapshot, FreeCardsGoal(1)).freed)
    result = plan(snapshot, FreeCardsGoal(1, card_type="t4"))
    assert result.freed and all(uuid.startswith("GPU-t-") for uuid in result.freed)
    none_used = plan(scattered(), FreeCardsGoal(1, card_type="t4"))
    assert (none_used.complete, none_used.reasons) == (
        False,
        ("freed 0 of 1 card(s): no card in use that may be emptied (none, or cordoned, kept or unschedulable)",),
    )


def test_free_cards_respects_moves_per_node() -> None:
    """At most one move off each node frees at most one card per node."""
    result = plan(scattered(), FreeCardsGoal(8), Limits(max_moves=100, max_moves_per_node=1))
    assert len(result.freed) == 2
    assert sorted(m.from_node for m in result.moves) == ["a", "b"]


def half_free() -> Snapshot:
    """a: two free cards and two with an 8 GiB pod each; b: one card with a 2 GiB pod (the easiest card to free
    anywhere) and three with 20 GiB each."""
    pods = (
        placed("x", "a", ["GPU-a-2"], 8 * GIB),
        placed("y", "a", ["GPU-a-3"], 8 * GIB),
        placed("t", "b", ["GPU-b-0"], 2 * GIB),
        *(placed(f"b{i}", "b", [f"GPU-b-{i}"], 20 * GIB) for i in (1, 2, 3)),
    )
    return Snapshot(nodes=(gpu_node("a", cards=4), gpu_node("b", cards=4)), pods=pods)


def test_free_cards_on_one_node_gathers_them_where_fewest_pods_must_move() -> None:
    """Four whole free cards on one node: a's two busy cards are emptied onto b's, where freeing two cards anywhere
    would start with b's easiest card and leave no node four."""
    snapshot = half_free()
    assert "GPU-b-0" in plan(snapshot, FreeCardsGoal(2)).freed
    result = plan(snapshot, FreeCardsGoal(4, on_one_node=True))
    assert result.complete and result.freed == ("GPU-a-2", "GPU-a-3")
    assert sorted((m.pod, m.to_node) for m in result.moves) == [("ns/x", "b"), ("ns/y", "b")]
    assert all(not c.pods for c in result.cards_after if c.node == "a")
    assert result.goal == "have 4 whole free cards on one node"
    replay(snapshot, result)
    already = plan(snapshot, FreeCardsGoal(2, on_one_node=True))
    assert already.complete and already.moves == ()


def test_free_cards_on_one_node_moves_a_whole_card_pod_to_a_free_card_elsewhere() -> None:
    """a and b have one free card each; b's other card holds a pod that must stay, so a's whole-card pod takes b's
    free card: two free cards on a, where free-cards anywhere would gain nothing."""
    snapshot = Snapshot(
        nodes=(gpu_node("a"), gpu_node("b")),
        pods=(placed("w", "a", ["GPU-a-1"], 40 * GIB), placed("h", "b", ["GPU-b-1"], 8 * GIB, held="is resting")),
    )
    result = plan(snapshot, FreeCardsGoal(2, on_one_node=True))
    assert result.complete and result.freed == ("GPU-a-1",)
    assert [(m.pod, m.to_cards) for m in result.moves] == [("ns/w", ("GPU-b-0",))]
    replay(snapshot, result)


def test_free_cards_on_one_node_within_the_bounds_and_never_moving_a_held_pod() -> None:
    """A node whose pods exceed the moves off it, or whose busy card holds a pod that must stay, is not emptied."""
    snapshot = half_free()
    bounded = plan(snapshot, FreeCardsGoal(4, on_one_node=True), Limits(max_moves_per_node=1))
    assert not bounded.complete and bounded.moves == ()
    assert "a: making room evicts 2 pods, which would exceed 1 moves off node a" in bounded.reasons
    held = replace(snapshot, pods=tuple(replace(p, held="is resting") if p.name == "x" else p for p in snapshot.pods))
    elsewhere = plan(held, FreeCardsGoal(4, on_one_node=True))
    assert elsewhere.complete and {c[: len("GPU-b")] for c in elsewhere.freed} == {"GPU-b"}
    assert "ns/x" not in {m.pod for m in elsewhere.moves}
    replay(held, elsewhere)
    refused = plan(held, FreeCardsGoal(4, on_one_node=True), Limits(max_moves=3))
    assert not refused.complete and refused.moves == ()
    assert "a: fewer than 4 open cards of the type whose pods may move" in refused.reasons


def test_free_cards_on_one_node_of_a_type_is_read_in_any_case_and_passes_over_other_types() -> None:
    """--type a100 names the A100s however it is spelled: t's four free T4 cards meet the untyped goal at once (t's
    card map the only one shown, as nothing moves), and the A100s are gathered on a."""
    t4 = PlanNode("t", tuple(card(f"GPU-t-{i}", i, type="NVIDIA-T4") for i in range(4)))
    snapshot = replace(half_free(), nodes=(*half_free().nodes, t4))
    untyped = plan(snapshot, FreeCardsGoal(4, on_one_node=True))
    summary = Summary(open_cards=12, whole_cards_free=6, free_mib=402 * GIB, largest_free_mib=40 * GIB)
    assert untyped == Plan(
        goal="have 4 whole free cards on one node",
        moves=(),
        complete=True,
        reasons=(),
        before=summary,
        after=summary,
        cards_after=tuple(
            CardState("t", f"GPU-t-{i}", i, "NVIDIA-T4", 40 * GIB, 0, 100, 0, 10, 0, ()) for i in range(4)
        ),
    )
    for word in ("a100", "A100"):
        typed = plan(snapshot, FreeCardsGoal(4, word, on_one_node=True))
        assert (typed.complete, typed.freed, typed.before, typed.after) == (
            True,
            ("GPU-a-2", "GPU-a-3"),
            summary,
            replace(summary, whole_cards_free=8),
        )
        assert [(c.uuid, c.pods) for c in typed.cards_after] == [
            ("GPU-a-0", ()),
            ("GPU-a-1", ()),
            ("GPU-a-2", ()),
            ("GPU-a-3", ()),
            ("GPU-b-0", ("ns/t",)),
            ("GPU-b-1", ("ns/b1", "ns/x", "ns/y")),
            ("GPU-b-2", ("ns/b2",)),
            ("GPU-b-3", ("ns/b3",)),
        ], "the card map shows the node freed and every node the moves reach"
        replay(snapshot, typed)


def test_free_cards_on_one_node_that_no_node_reaches_says_why_for_every_node_in_the_order_tried() -> None:
    """The reasons are what a person reads to change the bounds or the cluster: every node, the nodes tried first
    (a, b: equal pods and MiB, by name), then those never tried (c over the bound, e too small), and a move that
    fits a card only on a node whose CPU refuses it names that node and count."""
    cpu = Resources(1000, 0, 0)
    shares = (("c0", "c", 0, 30), ("c1", "c", 1, 12), ("c2", "c", 1, 1))
    shares += (("p", "a", 0, 30), ("q", "a", 1, 30), ("r", "b", 0, 30), ("s", "b", 1, 30))
    pods = tuple(replace(placed(key, n, [f"GPU-{n}-{i}"], mem * GIB), needs=cpu) for key, n, i, mem in shares)
    e = PlanNode("e", (card("GPU-e-0"),), room=Resources(500, GIB * 2**20, 10))
    snapshot = Snapshot(nodes=(gpu_node("c"), gpu_node("a"), gpu_node("b"), e), pods=pods)
    refused = "fits no other card except on e, whose cpu would not hold it (kube-scheduler's count)"
    summary = Summary(open_cards=7, whole_cards_free=1, free_mib=117 * GIB, largest_free_mib=40 * GIB)
    assert plan(snapshot, FreeCardsGoal(2, on_one_node=True), Limits(max_moves=2)) == Plan(
        goal="have 2 whole free cards on one node",
        moves=(),
        complete=False,
        reasons=(
            "no node can free the cards within the bounds:",
            f"a: moving ns/p, ns/q would free gpu-0, gpu-1, but ns/p {refused}",
            f"b: moving ns/r, ns/s would free gpu-0, gpu-1, but ns/r {refused}",
            "c: making room evicts 3 pods, which would exceed the plan's 2 move(s)",
            "e: fewer than 2 open cards of the type whose pods may move",
        ),
        before=summary,
        after=summary,
        cards_after=(),
    )


def test_compact_moves_only_among_its_nodes() -> None:
    """compact a packs node a's four quarter-full cards onto one and never touches node b."""
    snapshot = scattered()
    result = plan(snapshot, CompactGoal(("a",)), Limits(max_moves=100))
    assert len(result.freed) == 3
    assert all(m.from_node == "a" and m.to_node == "a" for m in result.moves)
    replay(snapshot, result)


def test_compact_never_moves_a_pod_off_its_nodes_nor_where_it_may_not_run_even_by_a_chain() -> None:
    """A chain making room for p may only use compact's nodes, and p's own: p may not run on b, and room on c or
    a pod sent to c would move pods off or onto nodes the operator did not name. In the second cluster r could
    make room on b for p only by leaving for c."""
    pinned = Snapshot(
        nodes=(gpu_node("a"), gpu_node("b", cards=1), gpu_node("c", cards=1)),
        pods=(
            placed("p", "a", ["GPU-a-0"], 20 * GIB, nodes=frozenset({"a", "c"})),
            placed("q", "a", ["GPU-a-1"], 30 * GIB, held="is resting"),
            placed("r", "b", ["GPU-b-0"], 8 * GIB),
            placed("s", "b", ["GPU-b-0"], 16 * GIB),
            placed("t", "c", ["GPU-c-0"], 8 * GIB),
            placed("u", "c", ["GPU-c-0"], 16 * GIB),
        ),
    )
    result = plan(pinned, CompactGoal(("a", "b")))
    assert [(m.pod, m.to_node, m.to_cards) for m in result.moves] == [
        ("ns/s", "a", ("GPU-a-0",)),
        ("ns/r", "a", ("GPU-a-1",)),
    ]
    assert result.freed == ("GPU-b-0",)
    assert result.reasons == ("a/gpu-0: ns/p fits no other card in use", "a/gpu-1: ns/q is resting")
    replay(pinned, result)
    outside = Snapshot(
        nodes=(gpu_node("a"), gpu_node("b", cards=1), gpu_node("c", cards=1)),
        pods=(
            placed("p", "a", ["GPU-a-0"], 20 * GIB),
            placed("q", "a", ["GPU-a-1"], 36 * GIB, held="is resting"),
            placed("r", "b", ["GPU-b-0"], 8 * GIB),
            placed("s", "b", ["GPU-b-0"], 16 * GIB),
            placed("t", "c", ["GPU-c-0"], 10 * GIB),
        ),
    )
    kept = plan(outside, CompactGoal(("a", "b")))
    assert (kept.moves, kept.freed) == ((), ())
    assert kept.reasons == (
        "a/gpu-0: ns/p fits no other card in use",
        "a/gpu-1: ns/q is resting",
        "b/gpu-0: ns/r fits no other card in use",
    )


def test_compact_moves_a_pod_only_to_those_of_its_nodes_it_may_run_on() -> None:
    """p may run on a and c only: compact a, b leaves it on a though b's card has room (kube-scheduler would not
    bind its replacement there) and never sends it to c, outside the nodes named; r moves onto p's card instead."""
    snapshot = Snapshot(
        nodes=(gpu_node("a"), gpu_node("b", cards=1), gpu_node("c", cards=1)),
        pods=(
            placed("p", "a", ["GPU-a-0"], 12 * GIB, nodes=frozenset({"a", "c"})),
            placed("q", "a", ["GPU-a-1"], 36 * GIB, held="is resting"),
            placed("r", "b", ["GPU-b-0"], 16 * GIB),
            placed("t", "c", ["GPU-c-0"], 8 * GIB),
        ),
    )
    result = plan(snapshot, CompactGoal(("a", "b")))
    assert [(m.pod, m.to_node, m.to_cards) for m in result.moves] == [("ns/r", "a", ("GPU-a-0",))]
    assert result.freed == ("GPU-b-0",)
    replay(snapshot, result)


def test_plans_are_deterministic_whatever_the_input_order() -> None:
    """The same cluster listed in another order gives the same plan."""
    snapshot = scattered()
    shuffled = list(snapshot.pods)
    random.Random(3).shuffle(shuffled)
    other = Snapshot(nodes=tuple(reversed(snapshot.nodes)), pods=tuple(shuffled))
    assert plan(snapshot, FreeCardsGoal(4)) == plan(other, FreeCardsGoal(4))


# why ----------------------------------------------------------------------------------------------------------


def test_why_names_hamis_reasons_card_by_card() -> None:
    """Each card gets HAMi's reason; nodes get theirs."""
    a = PlanNode(
        "a",
        (card("GPU-a-0", 0), card("GPU-a-1", 1, health=False), card("GPU-a-2", 2), card("GPU-a-3", 3, count=1)),
        cordoned=frozenset({"GPU-a-2"}),
    )
    snapshot = Snapshot(
        nodes=(a, gpu_node("b", schedulable=False)),
        pods=(placed("p", "a", ["GPU-a-0"], 30 * GIB), placed("q", "a", ["GPU-a-3"], 1 * GIB)),
    )
    verdicts = why(snapshot, pending(20 * GIB))
    assert [v.node for v in verdicts] == ["a", "b"]
    assert [c.reason for c in verdicts[0].cards] == [
        FitReason.CardInsufficientMemory,
        FitReason.CardUnhealthy,
        FitReason.CardCordoned,
        FitReason.CardTimeSlicingExhausted,
    ]
    assert not verdicts[0].fits and verdicts[0].reason == "NodeFitFailed"
    assert verdicts[0].message == (
        "HAMi: 1/4 CardCordoned, 1/4 CardInsufficientMemory, 1/4 CardNotHealth, 1/4 CardTimeSlicingExhausted"
    )
    assert verdicts[1].reason == "NodeUnschedulable" and all(c.ok for c in verdicts[1].cards)
    [free] = why(Snapshot(nodes=(gpu_node("c"),), pods=(placed("p", "c", ["GPU-c-0"], 30 * GIB),)), pending(20 * GIB))
    assert free.fits and free.message == "HAMi places it on gpu-1"


def test_why_says_each_card_s_refusal_in_full_for_a_pod_of_two_gpu_containers() -> None:
    """`why` is what a user reads to see what keeps a pod out: a card barred by a caller says why in HAMi's cordon
    reason (a `false` in the JSON, never a null), and a card short of cores or memory for the second container names
    that container and counts what the first takes."""
    a = PlanNode(
        "a",
        tuple(card(f"GPU-a-{i}", i) for i in range(4)),
        cordoned=frozenset({"GPU-a-0"}),
        barred={"GPU-a-0": "is kept for ns/other's placement"},
    )
    pods = (placed("busy", "a", ["GPU-a-1"], 10 * GIB, cores=50), placed("full", "a", ["GPU-a-3"], 32 * GIB))
    snapshot = Snapshot(nodes=(a,), pods=pods)
    two = PlanPod(namespace="ns", name="new", requests=(card_request(1, memreq=5 * GIB, coresreq=30),) * 2)

    def refused(index: int, reason: str, message: str) -> dict[str, object]:
        uuid = f"GPU-a-{index}"
        return {"uuid": uuid, "name": f"gpu-{index}", "fits": False, "reason": reason, "message": message}

    assert [verdict.to_dict() for verdict in why(snapshot, two)] == [
        {
            "node": "a",
            "fits": True,
            "reason": None,
            "message": "HAMi places it on gpu-2",
            "cards": [
                refused(0, "CardCordoned", "gpu-0 (GPU-a-0) is kept for ns/other's placement"),
                refused(1, "CardInsufficientCore", "container 1: gpu-1 (GPU-a-1) has 20% cores free, the pod asks 30%"),
                {
                    "uuid": "GPU-a-2",
                    "name": "gpu-2",
                    "fits": True,
                    "reason": None,
                    "message": "gpu-2 (GPU-a-2) fits: the pod asks 5120 MiB and 30% cores; 35840 MiB, 70% cores and "
                    "9 of 10 slots free",
                },
                refused(
                    3, "CardInsufficientMemory", "container 1: gpu-3 (GPU-a-3) has 3072 MiB free, the pod asks 5120 MiB"
                ),
            ],
        }
    ]


def test_why_as_json_gives_each_nodes_whole_verdict_and_each_cards() -> None:
    """`why -o json` is read by scripts: a node the pod's selection excludes, one kube-scheduler refuses (the counts in
    whole MiB), and one HAMi places it on with its MIG caveat each say so in full, card by card."""
    nodes = (
        PlanNode("a", (card("GPU-a-0", 0),), room=Resources(1500, 1536 * 2**20, 0)),
        PlanNode("b", (card("GPU-b-0", 0),)),
        PlanNode("c", (card("GPU-c-0", 0), card("GPU-c-1", 1, mode="mig"), card("GPU-c-2", 2, mode="mig"))),
    )
    pod = pending(20 * GIB, nums=2, needs=Resources(2000, 1536 * 2**20, 1), nodes=frozenset({"a", "c"}))

    def fits(uuid: str, index: int) -> dict:
        """A free card's verdict for the pod."""
        return {
            "uuid": uuid,
            "name": f"gpu-{index}",
            "fits": True,
            "reason": None,
            "message": f"gpu-{index} ({uuid}) fits: the pod asks 20480 MiB and 0% cores; 40960 MiB, 100% cores and "
            "10 of 10 slots free",
        }

    def mig(uuid: str, index: int) -> dict:
        """A MIG card's verdict."""
        message = f"gpu-{index} ({uuid}) is in MIG mode (not modelled)"
        return {"uuid": uuid, "name": f"gpu-{index}", "fits": False, "reason": "CardMigMode", "message": message}

    assert [verdict.to_dict() for verdict in why(Snapshot(nodes=nodes, pods=()), pod)] == [
        {
            "node": "a",
            "fits": False,
            "reason": "NodeResourcesFit",
            "message": "kube-scheduler: Insufficient cpu, Too many pods (the node has 1500m CPU, 1536 MiB memory and "
            "0 pod(s) left; the pod asks 2000m, 1536 MiB)",
            "cards": [fits("GPU-a-0", 0)],
        },
        {
            "node": "b",
            "fits": False,
            "reason": "NodeNotSelected",
            "message": "the pod's node selection excludes the node",
            "cards": [fits("GPU-b-0", 0)],
        },
        {
            "node": "c",
            "fits": True,
            "reason": None,
            "message": "HAMi places it on gpu-2, gpu-1 (gpu-2, gpu-1 in MIG mode, which hami-place does not model: "
            "HAMi may decide otherwise)",
            "cards": [fits("GPU-c-0", 0), mig("GPU-c-1", 1), mig("GPU-c-2", 2)],
        },
    ]


def test_why_of_a_running_pod_counts_its_own_node_as_holding_it() -> None:
    """The node a pod runs on already counts its CPU and memory: asked why of a running pod, that node is judged by
    HAMi, not refused for the room the pod itself takes."""
    pod = placed("p", "a", ["GPU-a-0"], 8 * GIB, needs=Resources(1000, GIB * 2**20, 1))
    node = PlanNode("a", (card("GPU-a-0", 0),), room=Resources(0, 0, 0))
    [verdict] = why(Snapshot(nodes=(node,), pods=(pod,)), pod)
    assert (verdict.fits, verdict.reason, verdict.message) == (True, None, "HAMi places it on gpu-0")


# properties ---------------------------------------------------------------------------------------------------

FORBIDDEN = ({"owner_kind": "DaemonSet"}, {"owner_kind": ""}, {"annotations": {DO_NOT_MOVE: "yes"}})


@st.composite
def clusters(draw: st.DrawFn) -> Snapshot:
    """Small clusters of 40 GiB cards with one- and two-card pods, some of which must never move."""
    nodes = tuple(gpu_node(f"n{i}", cards=draw(st.integers(1, 3))) for i in range(draw(st.integers(1, 3))))
    free = {c.uuid: 40 * GIB for n in nodes for c in n.cards}
    pods = []
    for i in range(draw(st.integers(0, 12))):
        node = draw(st.sampled_from(nodes))
        mem = draw(st.sampled_from([2, 4, 8, 12, 20])) * GIB
        nums = draw(st.integers(1, min(2, len(node.cards))))
        uuids = [c.uuid for c in node.cards if free[c.uuid] >= mem][:nums]
        if len(uuids) < nums:
            continue
        for uuid in uuids:
            free[uuid] -= mem
        extra = draw(st.sampled_from([{}, {}, {}, *FORBIDDEN]))
        pods.append(placed(f"p{i}", node.name, uuids, mem, draw(st.sampled_from([0, 10, 30])), **extra))
    return Snapshot(nodes=nodes, pods=tuple(pods))


goals = st.one_of(
    st.builds(lambda m, n: FitGoal(pending(m * GIB, nums=n)), st.sampled_from([8, 20, 30, 40]), st.integers(1, 2)),
    st.builds(FreeCardsGoal, st.integers(1, 6)),
    st.builds(lambda: CompactGoal(("n0", "n1"))),
)


@settings(max_examples=300, deadline=None)
@given(clusters(), goals, st.integers(1, 10))
def test_every_plan_is_feasible_in_sequence_deterministic_and_leaves_forbidden_pods(
    snapshot: Snapshot, goal: FitGoal | FreeCardsGoal | CompactGoal, max_moves: int
) -> None:
    """Each move fits after those before it; no pod moves twice or breaks a rule; the same input, the same plan."""
    limits = Limits(max_moves=max_moves)
    result = fit_plan(snapshot, goal.pod, limits) if isinstance(goal, FitGoal) else plan(snapshot, goal, limits)
    replay(snapshot, result)
    assert len(result.moves) <= max_moves
    moved = [m.pod for m in result.moves]
    assert len(moved) == len(set(moved))
    forbidden = {p.key for p in snapshot.pods if p.owner_kind in ("", "DaemonSet") or DO_NOT_MOVE in p.annotations}
    assert not forbidden & set(moved)
    assert plan(snapshot, goal, limits) == result
    if isinstance(goal, FitGoal) and result.complete:
        assert result.target is not None


# from API objects ---------------------------------------------------------------------------------------------


def node_object(name: str, ready: bool = True) -> dict:
    """A GPU node as the API server returns it, with one 40 GiB card in its register."""
    register = f'[{{"id":"GPU-{name}","count":10,"devmem":40960,"devcore":100,"type":"{A100}","health":true}}]'
    return {
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name},
            "annotations": {"hami.io/node-nvidia-register": register},
        },
        "status": {
            "allocatable": {"nvidia.com/gpu": "10"},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def runs_on(pod: PlanPod, nodes: Iterable[str]) -> frozenset[str]:
    """The nodes of `nodes` kube-scheduler lets the pod onto, by its node selection, taints and other filters."""
    return frozenset(node for node in nodes if pod.runs_on(node))


def pod_object(name: str, node: str | None, owner: str = "ReplicaSet", **spec: object) -> dict:
    """A pod asking 1 card x 8 GiB; placed on `node` by HAMi when given."""
    annotations = {}
    if node is not None:
        annotations = {"hami.io/vgpu-node": node, "hami.io/vgpu-devices-allocated": f"GPU-{node},NVIDIA,8192,0:;"}
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "labels": {"app": name},
            "annotations": annotations,
            "ownerReferences": [{"kind": owner, "name": "o", "controller": True}] if owner else [],
        },
        "spec": {
            "containers": [
                {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8192"}}}
            ],
            **spec,
        },
        "status": {"phase": "Running" if node else "Pending"},
    }


@pytest.mark.parametrize(
    ("volumes", "local", "claim"),
    [
        ([{"name": "shm", "emptyDir": {"medium": "Memory"}}], "emptyDir", False),
        ([{"name": "cm", "configMap": {}}, {"name": "models", "hostPath": {"path": "/m"}}], "hostPath", False),
        ([{"name": "data", "persistentVolumeClaim": {"claimName": "ckpt-0"}}], "", True),
        (
            [
                {"name": "b", "hostPath": {}},
                {"name": "c", "persistentVolumeClaim": {}},
                {"name": "a", "emptyDir": {}},
            ],
            "hostPath",
            True,
        ),
        ([{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {}}}], "", False),
        ([{"name": "cm", "configMap": {}}, "emptyDir", None], "", False),
        ({"name": "shm", "emptyDir": {}}, "", False),
        (None, "", False),
    ],
    ids=["emptyDir", "hostPath", "claim", "the first of each", "ephemeral", "odd", "a map", "none"],
)
def test_a_pods_local_storage_and_claim_are_read_for_the_policy(volumes: object, local: str, claim: bool) -> None:
    """What the policy's evictLocalStoragePods and ignorePvcPods hold a pod by: the kind of its first emptyDir or
    hostPath volume and whether it mounts a PersistentVolumeClaim; an ephemeral volume's claim goes with its pod, and
    a pod without cards is not read (the planner moves none)."""
    from kubectl_hami_place.core.node_selection import NodeMarks
    from kubectl_hami_place.core.planner.objects import pod_for_plan

    planned = pod_for_plan(pod_object("p", "a", volumes=volumes), NodeMarks({}))
    assert (planned.local_storage, planned.mounts_claim) == (local, claim)
    cpu_only = pod_object("cpu", "a", volumes=volumes)
    cpu_only["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1"}}
    unread = pod_for_plan(cpu_only, NodeMarks({}))
    assert (unread.local_storage, unread.mounts_claim) == ("", False)


def test_snapshot_from_objects_reads_nodes_pods_owners_and_budgets() -> None:
    """Readiness, allocations, controllers, priority and the PodDisruptionBudgets that select each pod."""
    from datetime import UTC, datetime

    from kubectl_hami_place.core.node_selection import NodeMarks, node_marks
    from kubectl_hami_place.core.planner.objects import pod_for_plan, snapshot_from_objects

    nodes = [node_object("a"), node_object("b", ready=False)]
    pods = [
        pod_object("web", "a"),
        pod_object("agent", "a", owner="DaemonSet", priorityClassName="system-node-critical"),
        pod_object("waiting", None),
    ]
    budget = {
        "metadata": {"name": "pdb", "namespace": "ns"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}},
        "status": {"disruptionsAllowed": 0},
    }
    snapshot, warnings = snapshot_from_objects(nodes, pods, [budget], datetime.now(UTC))
    assert warnings == ()
    assert [(n.name, n.schedulable) for n in snapshot.nodes] == [("a", True), ("b", False)]
    assert [n.labels for n in snapshot.nodes] == [{"kubernetes.io/hostname": name} for name in "ab"], "nodeSelector"
    by_name = {p.name: p for p in snapshot.pods}
    assert set(by_name) == {"web", "agent"}
    assert by_name["web"].budgets == ("ns/pdb",) and by_name["web"].owner_kind == "ReplicaSet"
    assert by_name["web"].labels == {"app": "web"} and by_name["web"].created is None
    made = pod_for_plan(
        {**pod_object("made", "a"), "metadata": {"creationTimestamp": "2026-12-01T12:00:00Z"}}, NodeMarks({})
    )
    assert made.created == datetime(2026, 12, 1, 12, 0, tzinfo=UTC), "the workload cooldown compares it"
    assert by_name["web"].scheduled is None, "no PodScheduled condition"
    conditions = [
        {"type": "Ready", "status": "True", "lastTransitionTime": "2026-12-01T12:09:00Z"},
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-12-01T12:05:00Z"},
    ]
    bound = pod_for_plan({**pod_object("bound", "a"), "status": {"conditions": conditions}}, NodeMarks({}))
    assert bound.scheduled == datetime(2026, 12, 1, 12, 5, tzinfo=UTC), "minPodAge counts from the binding"
    refused = [{"type": "PodScheduled", "status": "False", "lastTransitionTime": "2026-12-01T12:05:00Z"}]
    for status in ({"conditions": refused}, {"conditions": 5}, {"conditions": ["x", None]}, "x"):
        assert pod_for_plan({**pod_object("odd", "a"), "status": status}, NodeMarks({})).scheduled is None, status
    assert by_name["agent"].owner_kind == "DaemonSet" and by_name["agent"].priority_class == "system-node-critical"
    assert snapshot.budgets == {"ns/pdb": 0}
    waiting = pod_for_plan(pod_object("waiting", None, nodeSelector={"kubernetes.io/hostname": "b"}), node_marks(nodes))
    assert waiting.allocation is None and waiting.nodes == frozenset({"b"})
    assert waiting.gpu_requests[0][1].memreq == 8192
    result = plan(snapshot, FitGoal(replace(waiting, nodes=None)))
    assert result.target == ("a", ("GPU-a",))


@pytest.fixture
def decoded(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the pods whose allocation is decoded, for the cluster view or the planner, in order."""
    from kubectl_hami_place.core import cluster_info
    from kubectl_hami_place.core.planner import objects

    names: list[str] = []
    original = objects.pod_allocation

    def counting(pod: dict) -> PodAllocation | None:
        names.append(pod["metadata"]["name"])
        return original(pod)

    monkeypatch.setattr(cluster_info, "pod_allocation", counting)
    monkeypatch.setattr(objects, "pod_allocation", counting)
    return names


def test_a_snapshot_decodes_each_pod_s_allocation_once(decoded: list[str]) -> None:
    """The cluster view and the planner's pods read the same allocation (decoding it was a fifth of a snapshot at
    1,213 nodes, done twice); a pod HAMi cannot decode is still left out with both warnings."""
    from datetime import UTC, datetime

    from kubectl_hami_place.core.planner import objects

    original = usage_module.pod_allocation  # not the fixture's count
    broken = pod_object("broken", "a")
    broken["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"] = "GPU-a,NVIDIA,lots,0:;"
    pods = [pod_object("web", "a"), pod_object("waiting", None), broken]
    snapshot, warnings = objects.snapshot_from_objects([node_object("a")], pods, [], datetime.now(UTC))
    assert sorted(decoded) == ["broken", "broken", "waiting", "web"], "once each; the broken one again for its warning"
    assert [p.name for p in snapshot.pods] == ["web"]
    assert snapshot.pods[0].allocation == original(pods[0])
    assert [w.split(": ", 1)[0] for w in warnings] == ["pod ns/broken", "pod ns/broken"], warnings
    assert "HAMi cannot decode it either" in warnings[0] and "the planner leaves the pod where it is" in warnings[1]


def test_a_snapshot_takes_the_allocations_a_cache_decoded_from_the_very_pods_it_is_given(decoded: list[str]) -> None:
    """The server's cache decodes each stored pod version once; a snapshot of those pods reads that, and decodes a
    pod the cache holds another object of (a newer version came between the two reads)."""
    from datetime import UTC, datetime

    from kubectl_hami_place.core.planner import objects

    original = usage_module.pod_allocation  # not the fixture's count
    web, db, moved = pod_object("web", "a"), pod_object("db", "a"), pod_object("moved", "a")
    stale = pod_object("moved", "b")
    allocations = {("ns", "web"): (web, original(web)), ("ns", "db"): (db, original(db))}
    allocations[("ns", "moved")] = (stale, original(stale))
    nodes = [node_object("a"), node_object("b")]
    snapshot, warnings = objects.snapshot_from_objects(
        nodes, [web, db, moved], [], datetime.now(UTC), allocations=allocations
    )
    assert warnings == () and decoded == ["moved"], "only the pod the cache holds another object of"
    by_name = {p.name: p.allocation for p in snapshot.pods}
    assert by_name["web"] is allocations[("ns", "web")][1] and by_name["moved"] == original(moved)
    assert by_name["moved"] is not None and by_name["moved"].node == "a"


def test_a_budget_without_a_selector_protects_no_pod_and_an_empty_one_every_pod_of_its_namespace() -> None:
    """As policy/v1 reads them (the Eviction API: a null selector selects nothing, `{}` everything): a budget written
    without a selector allowing 0 disruptions must not freeze every pod of its namespace in the plans."""
    from datetime import UTC, datetime

    from kubectl_hami_place.core.planner.objects import snapshot_from_objects

    pods = [pod_object("web", "a"), pod_object("db", "a")]
    budgets = [
        {"metadata": {"name": "none", "namespace": "ns"}, "spec": {"maxUnavailable": 0}, "status": {}},
        {"metadata": {"name": "all", "namespace": "ns"}, "spec": {"selector": {}}, "status": {"disruptionsAllowed": 1}},
    ]
    snapshot, warnings = snapshot_from_objects([node_object("a")], pods, budgets, datetime.now(UTC))
    assert warnings == ()
    assert [(p.key, p.budgets) for p in snapshot.pods] == [("ns/web", ("ns/all",)), ("ns/db", ("ns/all",))]
    assert snapshot.budgets == {"ns/all": 1}


def test_a_pod_reads_whole_as_the_planner_sees_it() -> None:
    """Every field steers a plan (who may move, what it asks of a node, HAMi's policy for it); a pod from a file,
    never created, has no uid, owner or priority and must read as the empty values, not as text like 'None'."""
    from kubectl_hami_place.core.node_selection import NodeMarks
    from kubectl_hami_place.core.planner.objects import pod_for_plan

    pod = pod_object("p", None, initContainers=[{"name": "i"}], priority=1000)
    pod["metadata"]["uid"] = "uid-p"
    pod["metadata"]["ownerReferences"] = [
        {"kind": "Job", "name": "j", "controller": False},
        {"kind": "ReplicaSet", "name": "o", "controller": True},
    ]
    pod["metadata"]["annotations"] = {"team": "x", "replicas": 3}
    pod["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "500m", "memory": "1536Mi"}
    request = card_request(1, memreq=8192)
    assert pod_for_plan(pod, NodeMarks({}), HAMI_DEFAULTS.with_policy("binpack")) == PlanPod(
        namespace="ns",
        name="p",
        uid="uid-p",
        requests=(None, request),
        init_containers=1,
        annotations={"team": "x"},
        owner_kind="ReplicaSet",
        priority=1000,
        default_policy="binpack",
        needs=Resources(500, 1536 * 2**20, 1),
        labels={"app": "p"},
    )
    assert pod_for_plan(pod_object("f", None, owner=""), NodeMarks({})) == PlanPod(
        namespace="ns",
        name="f",
        requests=(request,),
        default_policy="spread",
        needs=Resources(0, 0, 1),
        labels={"app": "f"},
    )
    unread = pod_object("u", None)
    unread["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "lots"}
    assert pod_for_plan(unread, NodeMarks({})).held == (
        "has a CPU or memory request kube-scheduler cannot read (cpu request 'lots' is not a quantity such as 1, 3k "
        "or 1Gi)"
    )


def test_the_snapshot_keeps_what_it_can_read_and_says_what_it_left_out() -> None:
    """One unreadable pod or PodDisruptionBudget must not hide the rest of the cluster from the plan, and a budget
    protects only the pods its selector picks in its own namespace, with the disruptions its status allows."""
    from datetime import UTC, datetime

    from kubectl_hami_place.core.planner.objects import snapshot_from_objects

    a, b, c = node_object("a"), node_object("b"), node_object("c")
    a["metadata"]["annotations"]["hami.io/device-cordon"] = "GPU-a"
    b["metadata"]["annotations"]["hami.io/node-nvidia-score"] = "not json"
    c["metadata"]["annotations"]["hami.io/node-nvidia-score"] = '[{"uuid":"GPU-c","score":{"GPU-c":50}}]'
    bad = pod_object("bad", None)
    bad["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "many"
    on_c = {"kubernetes.io/hostname": "c"}
    on_a_or_c = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["a", "c"]}]}
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [on_a_or_c]}}}
    elsewhere = pod_object("web", "c", affinity=affinity)
    elsewhere["metadata"]["namespace"] = "other"
    pods = [
        bad,
        pod_object("waiting", None),
        pod_object("web", "c", nodeSelector=on_c),
        pod_object("agent", "c", nodeSelector=on_c),
        elsewhere,
    ]
    budgets = [
        {"metadata": {"name": "broken", "namespace": "ns"}, "spec": {"selector": {"matchLabels": {"app": 1}}}},
        {
            "metadata": {"name": "pdb", "namespace": "ns"},
            "spec": {"selector": {"matchLabels": {"app": "web"}}},
            "status": {"disruptionsAllowed": 1},
        },
    ]
    snapshot, warnings = snapshot_from_objects([a, b, c], pods, budgets, datetime.now(UTC))
    assert warnings == (
        "PodDisruptionBudget ns/broken: matchLabels 'app': the value must be a string, got int; it protects no pod "
        "in this plan",
        "pod ns/bad: container c: nvidia.com/gpu 'many' is not a quantity such as 1, 3k or 1Gi; the planner leaves "
        "the pod where it is",
    )
    assert [(n.name, n.cordoned, n.pair_scores) for n in snapshot.nodes] == [
        ("a", frozenset({"GPU-a"}), None),
        ("b", frozenset(), None),
        ("c", frozenset(), {"GPU-c": {"GPU-c": 50}}),
    ]
    assert snapshot.budgets == {"ns/pdb": 1}
    web, agent, _ = snapshot.pods
    assert [(p.key, p.budgets, p.nodes) for p in snapshot.pods] == [
        ("ns/web", ("ns/pdb",), frozenset({"c"})),
        ("ns/agent", (), frozenset({"c"})),
        ("other/web", (), frozenset({"a", "c"})),
    ]
    assert web.nodes is agent.nodes, "pods of one template share one answer"


def test_a_held_pod_stays_and_the_plan_says_why() -> None:
    """A caller's hold (the defragmentation policy's) is a reason never to move, worded by the caller."""
    snapshot = Snapshot(
        nodes=(gpu_node("a"),),
        pods=(placed("p", "a", ["GPU-a-0"], 24 * GIB), placed("q", "a", ["GPU-a-1"], 10 * GIB, held="is resting")),
    )
    result = fit_plan(snapshot, pending(32 * GIB))
    assert [m.pod for m in result.moves] == ["ns/p"]
    both = replace(snapshot, pods=tuple(replace(p, held="is resting") for p in snapshot.pods))
    refused = fit_plan(both, pending(32 * GIB))
    assert not refused.complete and "ns/q is resting" in " ".join(refused.reasons)


def test_namespace_and_per_node_moves_left_bound_the_plan() -> None:
    """Moves of one namespace's pods and moves off a node stop at what the caller says is left."""
    snapshot = Snapshot(
        nodes=(gpu_node("a"), gpu_node("b")),
        pods=(
            placed("p1", "a", ["GPU-a-0"], 8 * GIB),
            placed("p2", "a", ["GPU-a-0"], 8 * GIB),
            placed("q", "a", ["GPU-a-1"], 26 * GIB),
            placed("r", "b", ["GPU-b-0"], 30 * GIB),
            placed("s", "b", ["GPU-b-1"], 30 * GIB),
        ),
    )
    assert len(fit_plan(snapshot, pending(40 * GIB)).moves) == 2
    for limits in (
        Limits(max_moves_per_namespace=1),
        Limits(namespace_moves_left={"ns": 1}),
        Limits(node_moves_left={"a": 1, "b": 0}),
    ):
        result = fit_plan(snapshot, pending(40 * GIB), limits)
        assert not result.complete and result.moves == (), limits
    assert len(fit_plan(snapshot, pending(40 * GIB), Limits(namespace_moves_left={"other": 0})).moves) == 2


def three_on_one_card(**kw: object) -> Snapshot:
    """Node a's one card holds three 8 GiB pods; node b's card is free: a 40 GiB pod for a needs three moves."""
    pods = tuple(placed(f"p{i}", "a", ["GPU-a-0"], 8 * GIB, **kw) for i in range(3))
    return Snapshot(nodes=(gpu_node("a", cards=1), gpu_node("b", cards=1)), pods=pods)


def test_a_namespace_bound_lets_the_plan_move_exactly_that_many_of_its_pods() -> None:
    """--max-moves-per-namespace N is N moves of the namespace's pods, counted move by move: N+1 is refused."""
    pod = pending(40 * GIB, nodes=frozenset({"a"}))
    allowed = fit_plan(three_on_one_card(), pod, Limits(max_moves_per_namespace=3))
    assert allowed.complete and [m.pod for m in allowed.moves] == ["ns/p0", "ns/p1", "ns/p2"]
    refused = fit_plan(three_on_one_card(), pod, Limits(max_moves_per_namespace=2))
    assert (refused.complete, refused.moves) == (False, ())
    assert refused.reasons[1] == (
        "a: moving ns/p0, ns/p1, ns/p2 would make room on gpu-0, but ns/p2 would exceed 2 moves of namespace ns's pods"
    )


def test_a_disruption_budget_lets_the_plan_evict_exactly_as_many_pods_as_it_allows() -> None:
    """A PodDisruptionBudget allowing N disruptions is spent one per evicted pod: N of its pods move, never N+1."""
    pod = pending(40 * GIB, nodes=frozenset({"a"}))
    guarded = three_on_one_card(budgets=("ns/pdb",))
    allowed = fit_plan(replace(guarded, budgets={"ns/pdb": 3}), pod)
    assert allowed.complete and [m.pod for m in allowed.moves] == ["ns/p0", "ns/p1", "ns/p2"]
    refused = fit_plan(replace(guarded, budgets={"ns/pdb": 2}), pod)
    assert (refused.complete, refused.moves) == (False, ())
    assert refused.reasons[1] == (
        "a: moving ns/p0, ns/p1, ns/p2 would make room on gpu-0, but ns/p2 is protected by PodDisruptionBudget "
        "ns/pdb, which allows no more disruptions"
    )


# numa-bind --------------------------------------------------------------------------------------------------

NUMA_BIND = {"nvidia.com/numa-bind": "true"}


def numa_node(name: str, numas: tuple[int, ...]) -> PlanNode:
    """A node whose card i sits on NUMA node numas[i]."""
    return PlanNode(name=name, cards=tuple(card(f"GPU-{name}-{i}", i, numa=n) for i, n in enumerate(numas)))


def test_a_numa_bind_pod_is_given_cards_of_one_numa_node() -> None:
    """HAMi's Fit (pkg/device/nvidia/device.go) refuses a numa-bind pod cards of two NUMA nodes (NumaNotFit): the
    free cards 0 and 2 straddle NUMA nodes, so the plan frees a card beside one of them."""
    snapshot = Snapshot(
        nodes=(numa_node("a", (0, 0, 1, 1)), gpu_node("spare", cards=1)),
        pods=(placed("p", "a", ["GPU-a-1"], 30 * GIB), placed("q", "a", ["GPU-a-3"], 30 * GIB)),
    )
    plain = fit_plan(snapshot, pending(20 * GIB, nums=2))
    assert plain.moves == () and plain.target == ("a", ("GPU-a-0", "GPU-a-2"))
    bound = fit_plan(snapshot, pending(20 * GIB, nums=2, annotations=NUMA_BIND))
    assert bound.complete and len(bound.moves) == 1
    assert bound.target is not None
    assert len({c.numa for c in snapshot.nodes[0].cards if c.uuid in bound.target[1]}) == 1
    replay(snapshot, bound)


def test_a_numa_bind_pod_passes_over_a_node_whose_cards_straddle_numa_nodes_and_says_so() -> None:
    """a's two free cards sit on two NUMA nodes, which HAMi refuses a numa-bind pod (NumaNotFit): the pod goes to b,
    and where a is all it may use, the plan says why a cannot take it."""
    snapshot = Snapshot(nodes=(numa_node("a", (0, 1)), numa_node("b", (1, 1))), pods=())
    anywhere = fit_plan(snapshot, pending(10 * GIB, nums=2, annotations=NUMA_BIND))
    assert (anywhere.complete, anywhere.moves, anywhere.target) == (True, (), ("b", ("GPU-b-0", "GPU-b-1")))
    only_a = fit_plan(snapshot, pending(10 * GIB, nums=2, annotations=NUMA_BIND, nodes=frozenset({"a"})))
    assert (only_a.complete, only_a.reasons) == (
        False,
        (
            "no node can make room within the bounds:",
            "a: no 2 cards of one NUMA node can take the pod, which asks nvidia.com/numa-bind",
            "b: the pod's node selection excludes it",
        ),
    )


def test_a_numa_bind_pod_moves_to_cards_of_one_numa_node() -> None:
    """The moved two-card pod asks numa-bind: its new cards on b share a NUMA node (device.go Fit, NumaNotFit)."""
    duo = placed("duo", "a", ["GPU-a-0", "GPU-a-1"], 10 * GIB, annotations=NUMA_BIND)
    snapshot = Snapshot(nodes=(gpu_node("a"), numa_node("b", (0, 1, 0, 1))), pods=(duo,))
    result = fit_plan(snapshot, pending(40 * GIB, nums=2, nodes=frozenset({"a"})))
    assert result.complete
    assert [(m.pod, m.to_node, m.to_cards) for m in result.moves] == [("ns/duo", "b", ("GPU-b-0", "GPU-b-2"))]
    replay(snapshot, result)


def test_a_two_card_pod_without_numa_bind_moves_to_cards_of_either_numa_node() -> None:
    """Only numa-bind keeps a pod's cards on one NUMA node: duo, asking no such thing, takes b's first two cards,
    which straddle NUMA nodes, as HAMi would give it."""
    duo = placed("duo", "a", ["GPU-a-0", "GPU-a-1"], 10 * GIB)
    snapshot = Snapshot(nodes=(gpu_node("a"), numa_node("b", (0, 1, 0, 1))), pods=(duo,))
    result = fit_plan(snapshot, pending(40 * GIB, nums=2, nodes=frozenset({"a"})))
    assert [(m.pod, m.to_node, m.to_cards) for m in result.moves] == [("ns/duo", "b", ("GPU-b-0", "GPU-b-1"))]
    replay(snapshot, result)


def test_a_numa_bind_pod_frees_the_numa_node_whose_cards_cost_the_least_memory_moved() -> None:
    """Each NUMA node needs one pod moved; moving q's 10 GiB is cheaper than p's 30 GiB, though p's NUMA node holds
    the lower card indexes and the first free card: the fewer MiB a move carries, the more cards it fits."""
    snapshot = Snapshot(
        nodes=(numa_node("a", (0, 0, 1, 1)),),
        pods=(placed("p", "a", ["GPU-a-1"], 30 * GIB), placed("q", "a", ["GPU-a-3"], 10 * GIB)),
    )
    result = fit_plan(snapshot, pending(35 * GIB, nums=2, annotations=NUMA_BIND))
    assert (result.complete, [(m.pod, m.to_node, m.to_cards) for m in result.moves], result.target) == (
        True,
        [("ns/q", "a", ("GPU-a-1",))],
        ("a", ("GPU-a-2", "GPU-a-3")),
    )
    replay(snapshot, result)


def test_a_pod_whose_score_weights_hami_cannot_read_gets_no_plan() -> None:
    """score.go calcScore fails for such a pod on every node: no move can make room for it."""
    snapshot = Snapshot(nodes=(gpu_node("a"),), pods=())
    result = fit_plan(snapshot, pending(GIB, annotations={"hami.io/device-scoring-weights": "slot=1"}))
    assert not result.complete and result.target is None
    assert "HAMi's filter fails for the pod on every node" in " ".join(result.reasons)


def test_the_default_policy_reaches_the_planners_fit_without_a_copy_of_the_annotations() -> None:
    """device.go Fit: GetGPUSchedulerPolicyByPod(device.GPUSchedulerPolicy, pod), the default applying to a pod that
    names no policy; sequence_fit takes it as fit() does, and the pod's annotations stay its own."""
    used = CardUsage("GPU-a-0", used_slots=1, used_mem=GIB)
    gpu = pending(GIB).gpu_requests
    verdict = sequence_fit(
        card("GPU-a-0"), used, gpu, init_containers=0, annotations={}, cordoned=False, default_policy="mutex"
    )
    assert verdict.reason == FitReason.ExclusiveDeviceAllocateConflict
    named = {GPU_SCHEDULER_POLICY: "binpack"}
    kw = {"init_containers": 0, "cordoned": False, "default_policy": "mutex"}
    assert sequence_fit(card("GPU-a-0"), used, gpu, annotations=named, **kw).ok, "the pod's own policy stands"
    assert sequence_fit(card("GPU-a-0"), used, gpu, annotations={}, init_containers=0, cordoned=False).ok
    bare = PlanPod("ns", "b", (None,), annotations={"team": "x"}, default_policy="mutex")
    other = PlanPod("ns", "c", (None,), annotations={"hami.io/vgpu-node": "n"})
    assert bare.fit_annotations == {} and bare.fit_annotations is other.fit_annotations, "one empty mapping for all"


def test_pods_that_differ_only_in_annotations_hami_s_fit_does_not_read_share_one_fit_kind() -> None:
    """HAMi writes each pod's own allocation annotations (vgpu-node, vgpu-devices-allocated, bind-time): keyed by
    them, every placed pod was a fit kind of its own and no verdict or walk was shared between two (a rescue at 1,213
    nodes walked the same cards again for each pod it tried to move)."""
    first = placed("a", "n", ["GPU-n-0"], 8 * GIB, annotations={"hami.io/vgpu-node": "n", "hami.io/bind-time": "1"})
    second = placed("b", "n", ["GPU-n-1"], 8 * GIB, annotations={"hami.io/vgpu-node": "n", "team": "x"})
    bound = placed("c", "n", ["GPU-n-1"], 8 * GIB, annotations={**NUMA_BIND, "hami.io/vgpu-node": "n"})
    placed_by = {PLACED_BY: "p", USE_UUID: "GPU-n-0"}
    pinned = placed("d", "n", ["GPU-n-0"], 8 * GIB, annotations={USE_UUID: "GPU-n-0"})
    repinned = placed("e", "n", ["GPU-n-0"], 8 * GIB, annotations=placed_by)
    state = State(Snapshot(nodes=(gpu_node("n"),), pods=(first, second, bound, pinned, repinned)), Limits())
    kinds = {pod.name: state.fit_kind(pod)[0] for pod in (first, second, bound, pinned, repinned)}
    assert kinds["a"] == kinds["b"] == kinds["e"], "only annotations fit does not read differ (and our own pin)"
    assert len({kinds["a"], kinds["c"], kinds["d"]}) == 3, "numa-bind and a use-gpuuuid of the pod's own are read"
    assert bound.fit_annotations == NUMA_BIND and repinned.fit_annotations == {}


def test_a_mutex_default_policy_keeps_the_planner_off_a_used_card() -> None:
    small = placed("small", "n", ["GPU-n-0"], 1 * GIB)
    big = placed("big", "m", ["GPU-m-0"], 30 * GIB)
    snapshot = Snapshot(nodes=(gpu_node("n", cards=1), gpu_node("m", cards=1)), pods=(small, big))
    shared = fit_plan(snapshot, pending(20 * GIB))
    assert (shared.target, shared.moves) == (("n", ("GPU-n-0",)), ()), "spread shares the card"
    exclusive = fit_plan(snapshot, pending(20 * GIB, default_policy="mutex"))
    assert exclusive.target == ("n", ("GPU-n-0",)) and [m.pod for m in exclusive.moves] == ["ns/small"], (
        "under a mutex default the card must be emptied first"
    )
    replay(snapshot, exclusive)


# Under topology-aware HAMi's Fit (pkg/device/nvidia/device.go) walks every card from the last of the policy's sort,
# then of more fitting cards than asked keeps the combination whose pair scores sum highest (generateCombinations,
# computeBestCombination; the first on ties). With the three cards empty the sort keeps index order, the walk finds
# gpu-2, gpu-1, gpu-0, and (gpu-2, gpu-0) scores 200 against 150 and 100: HAMi picks cards 0 and 2, where the
# planner's own walk (least free, then order) would take 0 and 1.
PAIR_SCORES = {
    "GPU-{n}-0": {"GPU-{n}-1": 100, "GPU-{n}-2": 200},
    "GPU-{n}-1": {"GPU-{n}-0": 100, "GPU-{n}-2": 150},
    "GPU-{n}-2": {"GPU-{n}-0": 200, "GPU-{n}-1": 150},
}
TOPOLOGY = {GPU_SCHEDULER_POLICY: "topology-aware"}


def scored_node(name: str) -> PlanNode:
    """A node of three empty cards whose pair scores make HAMi's topology-aware pick cards 0 and 2."""
    scores = {a.format(n=name): {b.format(n=name): v for b, v in row.items()} for a, row in PAIR_SCORES.items()}
    return gpu_node(name, cards=3, pair_scores=scores)


@pytest.mark.parametrize(
    ("pod_policy", "default_policy"),
    [(TOPOLOGY, ""), ({}, "topology-aware")],
    ids=["the pod's topology-aware", "the default topology-aware"],
)
def test_a_topology_aware_pod_is_targeted_at_the_cards_hamis_pair_scores_pick(
    pod_policy: dict[str, str], default_policy: str
) -> None:
    snapshot = Snapshot(nodes=(scored_node("a"),), pods=())
    pod = pending(10 * GIB, nums=2, annotations=pod_policy, default_policy=default_policy)
    result = fit_plan(snapshot, pod)
    assert (result.target, result.moves) == (("a", ("GPU-a-0", "GPU-a-2")), ())
    [verdict] = why(snapshot, pod, HAMI_DEFAULTS.with_policy(default_policy or "spread"))
    assert verdict.message == "HAMi places it on gpu-2, gpu-0", "why names the same cards"
    replay(snapshot, result)


def test_a_topology_aware_pod_with_an_init_container_is_targeted_at_the_cards_hamis_pair_scores_pick() -> None:
    """HAMi fits an init container alone, its usage gone before the app containers are fitted: 25 GiB then 20 GiB
    on each of two 40 GiB cards fits HAMi's pick of cards 0 and 2, which the target must be (see PAIR_SCORES)."""
    requests = (card_request(2, memreq=25 * GIB), card_request(2, memreq=20 * GIB))
    pod = PlanPod(namespace="ns", name="new", requests=requests, init_containers=1, annotations=TOPOLOGY)
    snapshot = Snapshot(nodes=(scored_node("a"),), pods=())
    result = fit_plan(snapshot, pod)
    assert (result.target, result.moves) == (("a", ("GPU-a-0", "GPU-a-2")), ())
    [verdict] = why(snapshot, pod, HAMI_DEFAULTS)
    assert verdict.message == "HAMi places it on gpu-2, gpu-0"


def test_without_topology_aware_the_pair_scores_do_not_move_the_target() -> None:
    snapshot = Snapshot(nodes=(scored_node("a"),), pods=())
    result = fit_plan(snapshot, pending(10 * GIB, nums=2))
    assert result.target == ("a", ("GPU-a-0", "GPU-a-1"))


def test_a_topology_aware_pod_moved_aside_goes_to_the_cards_hamis_pair_scores_pick() -> None:
    """The two-card pod on a moves to b, whose pair scores make HAMi pick b's cards 0 and 2 (see PAIR_SCORES)."""
    duo = placed("duo", "a", ["GPU-a-0", "GPU-a-1"], 10 * GIB, annotations=TOPOLOGY)
    snapshot = Snapshot(nodes=(gpu_node("a"), scored_node("b")), pods=(duo,))
    result = fit_plan(snapshot, pending(40 * GIB, nums=2, nodes=frozenset({"a"})))
    assert result.complete
    assert [(m.pod, m.to_node, m.to_cards) for m in result.moves] == [("ns/duo", "b", ("GPU-b-0", "GPU-b-2"))]
    replay(snapshot, result)


def test_a_one_card_topology_aware_pod_is_targeted_at_the_card_hamis_pair_scores_pick() -> None:
    """pkg/device/nvidia/device.go:858 (Fit, needTopology, originReq 1): of the fitting cards HAMi keeps the one
    whose pair scores to the others sum lowest (computeWorstSingleCard, :927, the first on ties), not the planner's
    best fit: with PAIR_SCORES card 1 sums 250 against 300 and 350. A one-card pod moved aside goes to that card."""
    snapshot = Snapshot(nodes=(scored_node("a"),), pods=())
    pod = pending(10 * GIB, annotations=TOPOLOGY)
    result = fit_plan(snapshot, pod)
    assert (result.target, result.moves) == (("a", ("GPU-a-1",)), ())
    [verdict] = why(snapshot, pod, HAMI_DEFAULTS)
    assert verdict.message == "HAMi places it on gpu-1", "why names the same card"
    plain = fit_plan(snapshot, pending(10 * GIB))
    assert plain.target == ("a", ("GPU-a-0",)), "without topology-aware the best fit stands"
    solo = placed("solo", "a", ["GPU-a-0"], 10 * GIB, annotations=TOPOLOGY)
    moved = fit_plan(
        Snapshot(nodes=(gpu_node("a", cards=1), scored_node("b")), pods=(solo,)),
        pending(40 * GIB, nodes=frozenset({"a"})),
    )
    assert [(m.pod, m.to_node, m.to_cards) for m in moved.moves] == [("ns/solo", "b", ("GPU-b-1",))]


def test_a_pod_moved_aside_under_the_default_topology_aware_policy_goes_to_the_card_hamis_pair_scores_pick() -> None:
    """HAMi's --gpu-scheduler-policy topology-aware applies to a pod naming no policy: solo, moved aside, goes to the
    card HAMi's pair scores pick on b (gpu-1, see PAIR_SCORES), as one asking topology-aware itself does."""
    solo = placed("solo", "a", ["GPU-a-0"], 10 * GIB, default_policy="topology-aware")
    snapshot = Snapshot(nodes=(gpu_node("a", cards=1), scored_node("b")), pods=(solo,))
    moved = fit_plan(snapshot, pending(40 * GIB, nodes=frozenset({"a"})))
    assert [(m.pod, m.to_node, m.to_cards) for m in moved.moves] == [("ns/solo", "b", ("GPU-b-1",))]
    replay(snapshot, moved)


def test_a_topology_aware_pod_that_fits_a_card_now_is_not_aimed_at_hamis_pick_for_its_first_container() -> None:
    """Two one-card 15 GiB containers fit empty gpu-0 now, and HAMi's pair-score pick for the first container alone
    (gpu-1, where w leaves 20 GiB) cannot take both: aiming there would move w for nothing, the pod needs no move."""
    two = PlanPod(namespace="ns", name="new", requests=(card_request(1, memreq=15 * GIB),) * 2, annotations=TOPOLOGY)
    snapshot = Snapshot(nodes=(scored_node("a"),), pods=(placed("w", "a", ["GPU-a-1"], 20 * GIB),))
    result = fit_plan(snapshot, two)
    assert (result.target, result.moves, result.complete) == (("a", ("GPU-a-0",)), (), True)
    replay(snapshot, result)


def test_a_topology_aware_pod_of_two_containers_moves_to_a_card_that_holds_both() -> None:
    """One placement pins every container to the same card: HAMi's pair-score pick for the first container alone
    (b's gpu-1, where w leaves 20 GiB) cannot take both 15 GiB containers, so the pod goes to the planner's own
    fitting card, which HAMi takes when pinned."""
    share = (ContainerDevice("GPU-a-0", "NVIDIA", 15 * GIB, 0),)
    two = PlanPod(
        namespace="ns",
        name="two",
        uid="uid-two",
        requests=(card_request(1, memreq=15 * GIB),) * 2,
        annotations=TOPOLOGY,
        allocation=PodAllocation("ns", "two", "uid-two", "a", "Running", (share, share)),
        owner_kind="ReplicaSet",
    )
    snapshot = Snapshot(
        nodes=(gpu_node("a", cards=1), scored_node("b")), pods=(two, placed("w", "b", ["GPU-b-1"], 20 * GIB))
    )
    result = fit_plan(snapshot, pending(40 * GIB, nodes=frozenset({"a"})))
    assert [(m.pod, m.to_node, m.to_cards) for m in result.moves] == [("ns/two", "b", ("GPU-b-0",))]
    replay(snapshot, result)


def test_a_topology_aware_pod_moved_to_free_a_card_goes_to_a_card_in_use_outside_it() -> None:
    """HAMi's pair scores would pick gpu-1 itself, or the empty gpu-2: freeing gpu-1 must move t to the one card in
    use left to it (gpu-0), not evict it onto the card being freed nor fill an empty card."""
    snapshot = Snapshot(
        nodes=(scored_node("a"),),
        pods=(placed("x", "a", ["GPU-a-0"], 20 * GIB), placed("t", "a", ["GPU-a-1"], 10 * GIB, annotations=TOPOLOGY)),
    )
    result = plan(snapshot, FreeCardsGoal(1))
    assert result.complete and result.freed == ("GPU-a-1",)
    assert [(m.pod, m.to_node, m.to_cards) for m in result.moves] == [("ns/t", "a", ("GPU-a-0",))]
    replay(snapshot, result)


def test_a_two_card_topology_aware_pod_moved_to_free_cards_stays_off_the_empty_ones() -> None:
    """HAMi's pair scores favour gpu-0 with the empty gpu-4: freeing duo's cards must move it onto the cards in use
    (gpu-0 and gpu-1), or the plan would fill a card as it frees one."""
    scores = {
        f"GPU-a-{i}": {f"GPU-a-{j}": 300 if {i, j} == {0, 4} else 10 for j in range(5) if j != i} for i in range(5)
    }
    snapshot = Snapshot(
        nodes=(PlanNode("a", tuple(card(f"GPU-a-{i}", i) for i in range(5)), pair_scores=scores),),
        pods=(
            placed("x", "a", ["GPU-a-0"], 20 * GIB),
            placed("y", "a", ["GPU-a-1"], 20 * GIB),
            placed("duo", "a", ["GPU-a-2", "GPU-a-3"], 10 * GIB, annotations=TOPOLOGY),
        ),
    )
    result = plan(snapshot, FreeCardsGoal(1))
    assert result.complete and result.freed == ("GPU-a-2", "GPU-a-3")
    assert [(m.pod, m.to_cards) for m in result.moves] == [("ns/duo", ("GPU-a-0", "GPU-a-1"))]
    replay(snapshot, result)


# Four cards where HAMi's pair scores favour 2 with 3: the pod asks three cards of 35 GiB; card 0 is free, p holds
# 10 GiB of card 1 and duo 20 GiB of cards 2 and 3. The cheapest cards one by one are 0, 1 (10 GiB to move) and 2,
# which moves p and duo; once both have left, HAMi's combination of the four (computeBestCombination) is 0, 2, 3
# (50 + 50 + 100 against 70 and 120), so p would have moved for a card HAMi passes over. Freeing 2 and 3 moves duo only.
QUAD_SCORES = {
    "GPU-a-0": {"GPU-a-1": 10, "GPU-a-2": 50, "GPU-a-3": 50},
    "GPU-a-1": {"GPU-a-0": 10, "GPU-a-2": 10, "GPU-a-3": 10},
    "GPU-a-2": {"GPU-a-0": 50, "GPU-a-1": 10, "GPU-a-3": 100},
    "GPU-a-3": {"GPU-a-0": 50, "GPU-a-1": 10, "GPU-a-2": 100},
}


def quad() -> Snapshot:
    """Node a of QUAD_SCORES with p and duo on it, and three empty cards on node spare."""
    return Snapshot(
        nodes=(gpu_node("a", cards=4, pair_scores=QUAD_SCORES), gpu_node("spare", cards=3)),
        pods=(
            placed("p", "a", ["GPU-a-1"], 10 * GIB),
            placed("duo", "a", ["GPU-a-2", "GPU-a-3"], 20 * GIB),
        ),
    )


def test_a_topology_aware_pod_frees_the_cards_hamis_pair_scores_then_pick() -> None:
    pod = pending(35 * GIB, nums=3, annotations=TOPOLOGY, nodes=frozenset({"a"}))
    result = fit_plan(quad(), pod)
    assert result.complete
    assert [m.pod for m in result.moves] == ["ns/duo"], "p is not moved for a card HAMi would pass over"
    assert result.target == ("a", ("GPU-a-0", "GPU-a-2", "GPU-a-3"))
    replay(quad(), result)
    plain = fit_plan(quad(), pending(35 * GIB, nums=3, nodes=frozenset({"a"})))
    assert [m.pod for m in plain.moves] == ["ns/duo", "ns/p"], "other policies keep the cheapest cards one by one"


def test_a_pod_under_the_default_topology_aware_policy_frees_the_cards_hamis_pair_scores_then_pick() -> None:
    """HAMi's --gpu-scheduler-policy topology-aware applies to a pod naming no policy: p is not moved for a card
    HAMi would pass over, as for a pod asking topology-aware itself."""
    pod = pending(35 * GIB, nums=3, nodes=frozenset({"a"}), default_policy="topology-aware")
    result = fit_plan(quad(), pod)
    assert ([m.pod for m in result.moves], result.target) == (["ns/duo"], ("a", ("GPU-a-0", "GPU-a-2", "GPU-a-3")))
    replay(quad(), result)


def test_hamis_topology_aware_pick_is_made_among_the_cards_that_can_take_the_pod() -> None:
    """HAMi's pair-score pick never lands on a cordoned card or one whose cores are taken: the planner aims at the
    card HAMi really picks (gpu-2), where a pick of gpu-1 would evict busy for nothing or pin a card HAMi refuses."""
    pod = pending(10 * GIB, cores=10, annotations=TOPOLOGY)
    cordoned = Snapshot(nodes=(replace(scored_node("a"), cordoned=frozenset({"GPU-a-1"})),), pods=())
    busy = Snapshot(nodes=(scored_node("a"),), pods=(placed("busy", "a", ["GPU-a-1"], 1 * GIB, 100),))
    for snapshot in (cordoned, busy):
        result = fit_plan(snapshot, pod)
        assert (result.target, result.moves) == (("a", ("GPU-a-2",)), ())
        assert why(snapshot, pod, HAMI_DEFAULTS)[0].message == "HAMi places it on gpu-2"


def test_hamis_topology_aware_pick_counts_the_slots_and_cores_the_moves_release() -> None:
    """Cards of two slots, duo holding 60% of cards 2 and 3: once duo leaves them they take the pod, so freeing
    them is room HAMi's pick uses (QUAD_SCORES); counting duo's slot or cores twice would refuse the node."""
    a = PlanNode("a", tuple(card(f"GPU-a-{i}", i, count=2) for i in range(4)), pair_scores=QUAD_SCORES)
    snapshot = Snapshot(
        nodes=(a, gpu_node("spare", cards=3)),
        pods=(placed("p", "a", ["GPU-a-1"], 10 * GIB), placed("duo", "a", ["GPU-a-2", "GPU-a-3"], 20 * GIB, 60)),
    )
    result = fit_plan(snapshot, pending(35 * GIB, nums=3, cores=40, annotations=TOPOLOGY, nodes=frozenset({"a"})))
    assert result.complete
    assert [(m.pod, m.to_node, m.to_cards) for m in result.moves] == [
        ("ns/duo", "spare", ("GPU-spare-0", "GPU-spare-1"))
    ]
    assert result.target == ("a", ("GPU-a-0", "GPU-a-2", "GPU-a-3"))
    replay(snapshot, result)


def test_room_made_on_cards_hamis_pair_scores_pass_over_is_refused() -> None:
    """_make_room's check after the moves: freeing cards 0, 1 and 2 of quad() moves p and duo, after which HAMi picks
    0, 2 and 3 (computeBestCombination), passing over card 1: the room is refused and the moves rolled back."""
    state = State(quad(), Limits())
    pod = pending(35 * GIB, nums=3, annotations=TOPOLOGY)
    chosen = [state.by_uuid[f"GPU-a-{i}"] for i in range(3)]
    failure = _make_room(state, pod, "a", chosen, ["ns/duo", "ns/p"], leave=frozenset(), explain=True)
    assert failure == (
        "HAMi's topology-aware pick after the moves would be gpu-0, gpu-2, gpu-3 (the node's pair scores), "
        "passing over gpu-1, which they free"
    )
    assert state.moves == []
    picked = [state.by_uuid[f"GPU-a-{i}"] for i in (0, 2, 3)]
    assert _make_room(state, pod, "a", picked, ["ns/duo"], leave=frozenset(), explain=True) is None, (
        "HAMi's own pick is room made"
    )


def test_a_remembered_walk_gives_every_walk_at_its_state_all_its_items_in_order_walking_its_source_once() -> None:
    """The search reads a card walk again at the same state: a later reader, or one begun before another read further,
    must see every item once and in order, as a fresh walk would."""
    source_reads: list[int] = []

    def cards() -> Iterator[int]:
        for card in (1, 2, 3, 4):
            source_reads.append(card)
            yield card

    walk = _Remembered(cards())
    early = iter(walk)
    assert next(early) == 1
    assert list(walk) == [1, 2, 3, 4]
    assert list(early) == [2, 3, 4]
    assert list(walk) == [1, 2, 3, 4]
    assert source_reads == [1, 2, 3, 4]


def test_the_planners_cards_stand_where_hamis_topology_aware_pick_is_none_or_another_count() -> None:
    """hami_cards' contract: HAMi's pair-score pick replaces the planner's cards only when it is as many cards and
    each fits; a node HAMi refuses (every card barred here) or a pick of another count leaves the planner's own."""
    state = State(Snapshot(nodes=(scored_node("a"),), pods=()), Limits())
    pod = pending(10 * GIB, nums=2, annotations=TOPOLOGY)
    card = [state.by_uuid[f"GPU-a-{i}"] for i in range(3)]
    assert state.hami_cards(pod, "a", [card[0], card[1]]) == [card[0], card[2]], "HAMi's pick (see PAIR_SCORES)"
    everything = {slot.card.uuid for slot in card}
    assert state.hami_cards(pod, "a", [card[0], card[1]], exclude=everything) == [card[0], card[1]]
    assert state.hami_cards(pod, "a", [card[1]]) == [card[1]]


def test_room_that_still_does_not_fit_after_its_moves_is_refused_and_its_moves_undone() -> None:
    """_make_room's check after the moves: p leaving gpu-0 frees 10 GiB beside q's 25, 15 GiB in all, short of the
    20 GiB asked; the room is refused, saying so, and p's move is undone (the next node starts from the cluster as
    it is)."""
    snapshot = Snapshot(
        nodes=(gpu_node("a", cards=1), gpu_node("spare", cards=1)),
        pods=(placed("p", "a", ["GPU-a-0"], 10 * GIB), placed("q", "a", ["GPU-a-0"], 25 * GIB)),
    )
    state = State(snapshot, Limits())
    failure = _make_room(
        state, pending(20 * GIB), "a", [state.by_uuid["GPU-a-0"]], ["ns/p"], leave=frozenset(), explain=True
    )
    assert failure == "gpu-0 still does not fit after the moves: CardInsufficientMemory"
    assert (state.moves, sorted(state.by_uuid["GPU-a-0"].pods)) == ([], ["ns/p", "ns/q"])


def test_room_refused_for_hamis_pick_names_every_card_the_moves_free_and_only_those() -> None:
    """The refusal tells which evictions would be for nothing: u and v leaving node a free gpu-0 and gpu-1, both
    passed over by HAMi's pick (gpu-2 and gpu-3 score highest in QUAD_SCORES); with u staying, gpu-0 takes the pod
    as it is, so only gpu-1 is named."""
    snapshot = Snapshot(
        nodes=(gpu_node("a", cards=4, pair_scores=QUAD_SCORES), gpu_node("spare", cards=2)),
        pods=(placed("u", "a", ["GPU-a-0"], 10 * GIB), placed("v", "a", ["GPU-a-1"], 30 * GIB)),
    )
    state = State(snapshot, Limits())
    pod = pending(20 * GIB, nums=2, annotations=TOPOLOGY)
    chosen = [state.by_uuid["GPU-a-0"], state.by_uuid["GPU-a-1"]]
    pick = "HAMi's topology-aware pick after the moves would be gpu-2, gpu-3 (the node's pair scores), passing over"
    both = _make_room(state, pod, "a", chosen, ["ns/u", "ns/v"], leave=frozenset({"ns/u", "ns/v"}), explain=True)
    assert both == f"{pick} gpu-0, gpu-1, which they free"
    one = _make_room(state, pod, "a", chosen, ["ns/v"], leave=frozenset({"ns/v"}), explain=True)
    assert one == f"{pick} gpu-1, which they free"
    assert state.moves == []


def test_a_numa_bind_topology_aware_pod_pushed_in_by_a_chain_gets_a_card_of_the_numa_node_hami_keeps() -> None:
    """pkg/device/nvidia/device.go Fit under topology-aware never stops early, and a card of another NUMA node walked
    after the one pinned (its NUMA check comes before CheckUUID) drops it: on b, whose NUMA 0 card is usable, a
    numa-bind pod pinned to the NUMA 1 card is refused (1/2 CardUuidMismatch). The chain that moves one smaller pod
    aside for x must pick b's NUMA 0 card, though its NUMA 1 card is fuller (the chain tries the fullest first)."""
    x = placed("x", "a", ["GPU-a-0"], 35 * GIB, annotations={**NUMA_BIND, **TOPOLOGY})
    v = placed("v", "b", ["GPU-b-0"], 10 * GIB)
    y = placed("y", "b", ["GPU-b-1"], 12 * GIB)
    w = placed("w", "c", ["GPU-c-0"], 20 * GIB, annotations={DO_NOT_MOVE: "true"})
    snapshot = Snapshot(
        nodes=(gpu_node("a", cards=1), numa_node("b", (0, 1)), gpu_node("c", cards=1)), pods=(x, v, y, w)
    )
    result = fit_plan(snapshot, pending(40 * GIB, nodes=frozenset({"a"})))
    assert result.complete
    assert [(m.pod, m.to_node, m.to_cards) for m in result.moves] == [
        ("ns/v", "c", ("GPU-c-0",)),
        ("ns/x", "b", ("GPU-b-0",)),
    ]
    replay(snapshot, result)


def test_a_pod_whose_gpu_containers_ask_different_card_counts_never_moves() -> None:
    # One placement pins one set of cards for every container: a pod whose containers ask 1, 1 and then 2 cards
    # (the odd one last, after two that agree) cannot be pinned; one whose containers all ask 2 can.
    def pod(*counts: int) -> PlanPod:
        requests = tuple(card_request(n, memreq=1024) for n in counts)
        return PlanPod(namespace="ns", name="p", requests=(None, *requests), owner_kind="ReplicaSet")

    assert pod(1, 1, 2).never_moves == "has GPU containers asking different card counts, which one placement cannot pin"
    assert pod(2, 1).never_moves is not None
    assert pod(2, 2, 2).never_moves is None
    assert pod(1).never_moves is None


def test_every_reason_a_pod_may_never_move_is_said_in_full_and_the_first_one_wins() -> None:
    """Each reason is what a plan prints beside the pod that blocks it, so a user knows what to change: a wrong or
    missing one either moves a pod that must stay (a terminating, static or critical pod) or hides the real cause."""
    base = placed("p", "a", ["GPU-a-0"], 10 * GIB)
    terminating = replace(base, allocation=replace(base.allocation, deleting=True))  # type: ignore[arg-type]
    cases = {
        "held": (replace(base, held="is resting"), "is resting"),
        "terminating": (terminating, "is terminating"),
        "do-not-move": (replace(base, annotations={DO_NOT_MOVE: "True"}), f"is annotated {DO_NOT_MOVE}"),
        "do-not-move-false": (replace(base, annotations={DO_NOT_MOVE: "FALSE"}), None),
        "critical": (
            replace(base, priority_class="system-cluster-critical"),
            "is system-critical (system-cluster-critical)",
        ),
        "mirror": (replace(base, annotations={"kubernetes.io/config.mirror": "x"}), "is a static pod"),
        "node-owned": (replace(base, owner_kind="Node"), "is a static pod"),
        "daemonset": (
            replace(base, owner_kind="DaemonSet"),
            "belongs to a DaemonSet, which would not recreate it elsewhere",
        ),
        "bare": (replace(base, owner_kind=""), "has no controller to recreate it"),
        "no-gpu": (replace(base, requests=(None,)), "has no GPU request in its spec"),
        "movable": (base, None),
    }
    assert {name: pod.never_moves for name, (pod, _) in cases.items()} == {
        name: reason for name, (_, reason) in cases.items()
    }
    everything = replace(
        terminating,
        held="is resting",
        annotations={DO_NOT_MOVE: "true", "kubernetes.io/config.mirror": "x"},
        priority_class="system-node-critical",
        owner_kind="",
        requests=(None,),
    )
    steps = (
        ({}, "is resting"),
        ({"held": ""}, "is terminating"),
        ({"allocation": base.allocation}, f"is annotated {DO_NOT_MOVE}"),
        ({"annotations": {"kubernetes.io/config.mirror": "x"}}, "is system-critical (system-node-critical)"),
        ({"priority_class": ""}, "is a static pod"),
        ({"annotations": {}}, "has no controller to recreate it"),
        ({"owner_kind": "ReplicaSet"}, "has no GPU request in its spec"),
    )
    said, expected = [], []
    for change, reason in steps:
        everything = replace(everything, **change)  # type: ignore[arg-type]
        said.append(everything.never_moves)
        expected.append(reason)
    assert said == expected


def test_each_bound_on_moving_a_pod_is_counted_move_by_move_and_undone_by_a_rollback() -> None:
    """The plan's, each node's, each namespace's and each budget's bounds are what a user set to limit disruption:
    a bound read one off, a lower 'moves left' ignored, or a count a rollback leaves behind, evicts too many pods or
    stops a plan that was allowed."""

    def in_namespace(namespace: str, pod: PlanPod) -> PlanPod:
        assert pod.allocation is not None
        return replace(pod, namespace=namespace, allocation=replace(pod.allocation, namespace=namespace))

    pods = (
        placed("p", "a", ["GPU-a-0"], 8 * GIB, budgets=("ns/pdb",)),
        placed("q", "a", ["GPU-a-0"], 8 * GIB),
        in_namespace("other", placed("r", "a", ["GPU-a-1"], 8 * GIB)),
        in_namespace("other", placed("u", "a", ["GPU-a-1"], 8 * GIB)),
        in_namespace("other", placed("v", "b", ["GPU-b-0"], 8 * GIB)),
        in_namespace("other", placed("w", "b", ["GPU-b-0"], 8 * GIB)),
        in_namespace("team", placed("z", "b", ["GPU-b-1"], 8 * GIB)),
        placed("s", "b", ["GPU-b-1"], 8 * GIB, budgets=("ns/spent",)),
        placed("t", "b", ["GPU-b-1"], 8 * GIB, held="is resting"),
    )
    snapshot = Snapshot(
        nodes=(gpu_node("a"), gpu_node("b"), gpu_node("c")), pods=pods, budgets={"ns/pdb": 2, "ns/spent": 0}
    )
    limits = Limits(
        max_moves=4,
        max_moves_per_node=3,
        node_moves_left={"a": 2, "b": 9},
        max_moves_per_namespace=2,
        namespace_moves_left={"ns": 1, "other": 7},
    )
    state = State(snapshot, limits)
    assert {node: state.node_bound(node) for node in ("a", "b", "c")} == {"a": 2, "b": 3, "c": 3}
    away = frozenset(f"GPU-{node}-{i}" for node in "ab" for i in range(2))

    def answers() -> dict[str, str | None]:
        return {key: state.may_move(key) for key in sorted(state.pods)}

    def places() -> tuple[object, ...]:
        pods = {key: (entry.node, entry.cards, entry.moved) for key, entry in state.pods.items()}
        cards = {slot.card.uuid: (slot.slots, slot.mem, slot.cores, sorted(slot.pods.items())) for slot in state.cards}
        return pods, cards, state.in_use, state.unused

    spent = "is protected by PodDisruptionBudget ns/spent, which allows no more disruptions"
    start = {key: None for key in state.pods} | {"ns/s": spent, "ns/t": "is resting"}
    after_p = start | {key: "would exceed 1 moves of namespace ns's pods" for key in ("ns/p", "ns/q")}
    off_a = {"ns/q": "would exceed 2 moves off node a", "other/u": "would exceed 2 moves off node a"}
    other = "would exceed 2 moves of namespace other's pods"
    seen, placed_at = [answers()], [places()]
    for key in ("ns/p", "other/r", "other/v", "team/z"):
        assert state.relocate(key, "test", away) is not None
        seen.append(answers())
        placed_at.append(places())
    full = {key: "would exceed the plan's 4 move(s)" for key in state.pods} | {
        key: start[key] for key in ("ns/s", "ns/t")
    }
    assert seen == [
        start,
        after_p,
        after_p | off_a,
        after_p | off_a | {"other/r": other, "other/v": other, "other/w": other},
        full,
    ]
    state.rollback(1)
    assert (answers(), places(), state.budgets) == (after_p, placed_at[1], {"ns/pdb": 1, "ns/spent": 0})
    state.rollback(0)
    assert (answers(), places(), state.moves, state.budgets) == (start, placed_at[0], [], {"ns/pdb": 2, "ns/spent": 0})
    for key in ("ns/p", "other/r", "other/v", "team/z"):
        assert state.relocate(key, "test", away) is not None
    assert answers() == full, "the counts a rollback undid count again"
    unbounded = State(snapshot, Limits(namespace_moves_left={"ns": 1}))
    assert unbounded.relocate("ns/p", "test", away) is not None
    assert (unbounded.may_move("ns/q"), unbounded.may_move("other/r")) == (
        "would exceed 1 moves of namespace ns's pods",
        None,
    )


def test_a_small_pod_asking_more_cores_than_mib_is_moved_onto_the_fullest_card_that_holds_it() -> None:
    """Best fit keeps empty cards empty: a pod of 50 MiB and 70% of the cores fits the 60 MiB left on a busy card,
    and a check that read its cores as MiB would send it to an empty card instead."""
    snapshot = Snapshot(
        nodes=(gpu_node("a"), gpu_node("b")),
        pods=(placed("big", "a", ["GPU-a-0"], 40 * GIB - 60), placed("x", "b", ["GPU-b-0"], 50, cores=70)),
    )
    state = State(snapshot, Limits())
    move = state.relocate("ns/x", "test", frozenset({"GPU-b-0"}))
    assert move == Move("ns/x", "uid-x", "b", ("GPU-b-0",), "a", ("GPU-a-0",), "test")


def test_the_fragmentation_summary_counts_only_the_cards_a_new_pod_could_land_on() -> None:
    """A plan's before/after summary is how a user judges it: cordoned cards, cards of an unschedulable node and
    cards whose slots or cores are all taken are no room for a new pod, a card counting no cores is never short of
    them, and an over-committed card adds no free memory, wherever such a card stands among the others."""
    a = PlanNode(
        name="a",
        cards=(
            card("GPU-a-0", 0),
            card("GPU-a-1", 1, count=1),
            card("GPU-a-2", 2),
            card("GPU-a-3", 3, devcore=0),
            card("GPU-a-4", 4),
            card("GPU-a-5", 5, mem=10 * GIB),
            card("GPU-a-6", 6),
        ),
        cordoned=frozenset({"GPU-a-0"}),
    )
    b = PlanNode(name="b", cards=(card("GPU-b-0", 0),), schedulable=False)
    pods = (
        placed("one-slot", "a", ["GPU-a-1"], GIB),
        placed("all-cores", "a", ["GPU-a-2"], GIB, cores=100),
        placed("no-cores", "a", ["GPU-a-3"], 10 * GIB),
        placed("over", "a", ["GPU-a-5"], 12 * GIB),
    )
    state = State(Snapshot(nodes=(a, b), pods=pods), Limits())
    assert state.summary(state.cards) == Summary(
        open_cards=4, whole_cards_free=2, free_mib=110 * GIB, largest_free_mib=40 * GIB
    )


def test_hamis_pick_once_pods_leave_counts_the_slots_they_release() -> None:
    """A topology-aware pod's cards to free are HAMi's pick as it will be once the chosen pods have left: a card of
    two slots holding two pods takes a pod of two GPU containers only when both leave, whatever memory they free."""
    node = PlanNode(name="a", cards=(card("GPU-a-0", 0, count=2), card("GPU-a-1", 1, count=2)))
    pods = (
        placed("p", "a", ["GPU-a-0"], 10 * GIB),
        placed("q", "a", ["GPU-a-0"], 10 * GIB),
        placed("r", "a", ["GPU-a-1"], 10 * GIB),
        placed("s", "a", ["GPU-a-1"], GIB),
    )
    state = State(Snapshot(nodes=(node,), pods=pods), Limits())
    two = PlanPod(namespace="ns", name="new", requests=(card_request(1, memreq=GIB), card_request(1, memreq=GIB)))
    released = ((), ("ns/p",), ("ns/r",), ("ns/p", "ns/q"), ("ns/r", "ns/s"))
    picks = {}
    for keys in released:
        picked = state.hami_pick(two, "a", released=frozenset(keys))
        picks[keys] = None if picked is None else [slot.card.uuid for slot in picked]
    assert picks == {
        (): None,
        ("ns/p",): None,
        ("ns/r",): None,
        ("ns/p", "ns/q"): ["GPU-a-0"],
        ("ns/r", "ns/s"): ["GPU-a-1"],
    }


def test_a_pod_asking_more_than_all_the_cores_moves_as_one_asking_all_of_them() -> None:
    """HAMi's Fit counts a request over 100% cores as 100% (device.go fitInDevices): the planner must find the pod
    an empty card and count exactly all its cores there, and the pod's next container must meet a card whose cores
    are all taken, not leave the pod nowhere or say the card has fewer cores than none."""
    over = replace(placed("x", "a", ["GPU-a-0"], GIB, cores=100), requests=(card_request(1, memreq=GIB, coresreq=150),))
    state = State(Snapshot(nodes=(gpu_node("a", 1), gpu_node("b", 1)), pods=(over,)), Limits())
    move = state.relocate("ns/x", "test", frozenset())
    assert (move, state.card_states(["b"])) == (
        Move("ns/x", "uid-x", "a", ("GPU-a-0",), "b", ("GPU-b-0",), "test"),
        (CardState("b", "GPU-b-0", 0, A100, 40 * GIB, GIB, 100, 100, 10, 1, ("ns/x",)),),
    )
    then_none = PlanPod(
        namespace="ns",
        name="new",
        requests=(card_request(1, memreq=GIB, coresreq=150), card_request(1, memreq=GIB, coresreq=0)),
    )
    [verdict] = why(Snapshot(nodes=(gpu_node("a", 1),), pods=()), then_none)
    assert verdict.cards == (
        CardWhy(
            "GPU-a-0",
            0,
            False,
            FitReason.CardComputeUnitsExhausted,
            "container 1: gpu-0 (GPU-a-0) has all its cores taken and the pod asks 0% cores",
        ),
    )


def test_a_card_registered_on_two_nodes_leaves_the_second_node_its_other_cards() -> None:
    """A UUID two nodes' registers both list is counted once, on the first node by name; the other node's own cards
    after it must still be counted and planned for, or pods on them vanish from the card map."""
    a = PlanNode("a", (card("GPU-a-0", 0),))
    b = PlanNode("b", (card("GPU-a-0", 0), card("GPU-b-1", 1)))
    pods = (
        placed("p", "a", ["GPU-a-0"], GIB),
        placed("q", "b", ["GPU-b-1"], GIB),
        placed("r", "b", ["GPU-a-0"], 2 * GIB),
    )
    state = State(Snapshot(nodes=(b, a), pods=pods), Limits())
    assert state.card_states(["b", "a"]) == (
        CardState("a", "GPU-a-0", 0, A100, 40 * GIB, GIB, 100, 0, 10, 1, ("ns/p",)),
        CardState("b", "GPU-b-1", 1, A100, 40 * GIB, GIB, 100, 0, 10, 1, ("ns/q",)),
    )


def test_a_pod_holding_a_card_its_node_no_longer_registers_still_counts_on_its_other_card() -> None:
    """A card can drop out of a node's register while a two-card pod still holds it: HAMi's usage then counts the
    pod on the card that is left, and so must the planner, or it would place a pod on memory already taken."""
    pods = (placed("p", "a", ["GPU-gone", "GPU-a-1"], 30 * GIB),)
    state = State(Snapshot(nodes=(gpu_node("a"),), pods=pods), Limits())
    assert (state.pods["ns/p"].cards, state.card_states(["a"])) == (
        ("GPU-a-1",),
        (
            CardState("a", "GPU-a-0", 0, A100, 40 * GIB, 0, 100, 0, 10, 0, ()),
            CardState("a", "GPU-a-1", 1, A100, 40 * GIB, 30 * GIB, 100, 0, 10, 1, ("ns/p",)),
        ),
    )
