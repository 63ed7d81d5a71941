"""A placed pod kube-scheduler places by other pods (required pod affinity, anti-affinity, a `DoNotSchedule` spread)
moves to another node only where its own terms let its replacement go, judged against the pods placed; and never
beside another move that changes what its terms count."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from kubectl_hami_place.core.defrag.triggers import pending_pod
from kubectl_hami_place.core.hami_config import HAMI_DEFAULTS
from kubectl_hami_place.core.names import HOSTNAME_LABEL
from kubectl_hami_place.core.node_resources import CountedPod, Resources
from kubectl_hami_place.core.node_selection import node_marks
from kubectl_hami_place.core.planner import CompactGoal, FitGoal, FreeCardsGoal, Limits, Move, plan
from kubectl_hami_place.core.planner.model import DO_NOT_MOVE, Snapshot
from kubectl_hami_place.core.planner.objects import keep_counted_on_node, snapshot_from_objects
from kubectl_hami_place.core.planner.state import State
from kubectl_hami_place.core.pod_affinity import CountedPods
from kubectl_hami_place.core.selectors import selector_from_dict
from tests.unit.test_core_planner import node_object, pod_object, runs_on

WEB = {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": HOSTNAME_LABEL}
APART = {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [WEB]}}}
BY_EXPRESSION = {
    "labelSelector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]},
    "topologyKey": HOSTNAME_LABEL,
}
APART_BY_EXPRESSION = {
    "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [BY_EXPRESSION]}}
}


def spread(skew: int) -> dict[str, Any]:
    """A hostname spread of the web pods, kube-scheduler's to keep."""
    return {"topologySpreadConstraints": [{**WEB, "maxSkew": skew, "whenUnsatisfiable": "DoNotSchedule"}]}


def web(name: str, node: str, terms: dict[str, Any]) -> dict[str, Any]:
    """A web replica (8 GiB of `node`'s card) placed by `terms`."""
    pod = pod_object(name, node, nodeName=node, **terms)
    pod["metadata"]["labels"] = {"app": "web"}
    return pod


def fixed(name: str, node: str, app: str) -> dict[str, Any]:
    """A pod labelled `app` that may not move, holding 8 GiB of `node`'s card."""
    pod = pod_object(name, node, nodeName=node)
    pod["metadata"]["labels"] = {"app": app}
    pod["metadata"]["annotations"][DO_NOT_MOVE] = "true"
    return pod


def whole_card() -> dict[str, Any]:
    """A Pending pod asking a whole 40 GiB card."""
    whole = [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "40960"}}}]
    return pod_object("big", None, containers=whole)


def rescue(
    pods: list[dict[str, Any]],
    others: tuple[CountedPod, ...] = (),
    namespace_labels: dict[str, dict[str, str]] | None = None,
) -> tuple[Snapshot, list[tuple[str, str]]]:
    """The snapshot of nodes a, b and c (one 40 GiB card each) and the moves of the plan for the big pod."""
    nodes = [node_object(name) for name in "abc"]
    snapshot, _ = snapshot_from_objects(
        nodes, pods, [], datetime.now(UTC), others=others, namespace_labels=namespace_labels
    )
    big = pending_pod(whole_card(), node_marks(nodes), HAMI_DEFAULTS, pods).pod
    result = plan(keep_counted_on_node(snapshot, big), FitGoal(big))
    return snapshot, [(m.pod, m.to_node) for m in result.moves]


@pytest.mark.parametrize(
    ("terms", "refused"),
    [
        (APART, ("InterPodAffinity", "the pod's anti-affinity (app=web): ns/web-2 runs on the node")),
        (
            APART_BY_EXPRESSION,
            ("InterPodAffinity", "the pod's anti-affinity (app in (web)): ns/web-2 runs on the node"),
        ),
        (
            spread(1),
            (
                "PodTopologySpread",
                "the pod's topology spread (app=web, maxSkew 1): 1 such pod(s) run in its kubernetes.io/hostname=b, "
                "0 where fewest run",
            ),
        ),
    ],
    ids=["anti-affinity", "anti-affinity by expression", "spread"],
)
def test_a_replica_moves_to_the_node_its_terms_let_its_replacement_go(
    terms: dict[str, Any], refused: tuple[str, str]
) -> None:
    """web-1 on a, web-2 on b, a db pod on c: room for the big pod is made by moving a web replica to c, never onto
    the other replica's node (which comes first in the plan's order)."""
    snapshot, moves = rescue([web("web-1", "a", terms), web("web-2", "b", terms), fixed("db", "c", "db")])
    assert moves == [("ns/web-1", "c")]
    [web_1, _, _] = snapshot.pods
    assert (web_1.stays, runs_on(web_1, "abc"), dict(web_1.kept_off)) == ("", {"a", "c"}, {"b": refused})


@pytest.mark.parametrize(("skew", "moves"), [(1, []), (2, [("ns/web-1", "b")])])
def test_a_spread_it_would_break_keeps_a_replica_where_it_is(skew: int, moves: list[tuple[str, str]]) -> None:
    """A web pod on every node: moved anywhere, web-1 would leave a two behind the others, which maxSkew 2 allows."""
    pods = [web("web-1", "a", spread(skew)), web("web-2", "b", spread(skew)), fixed("web-3", "c", "web")]
    snapshot, made = rescue(pods)
    assert made == moves
    assert runs_on(snapshot.pods[0], "abc") == ({"a"} if skew == 1 else {"a", "b", "c"})


@pytest.mark.parametrize(
    ("gone", "moves"),
    [
        ({"metadata": {"deletionTimestamp": "2026-12-07T00:00:00Z"}}, [("ns/web-2", "a")]),
        ({"status": {"phase": "Succeeded"}}, []),
    ],
    ids=["terminating", "succeeded"],
)
def test_a_pod_gone_from_a_spread_alone_on_its_node_is_planned_around(
    gone: dict[str, dict[str, str]], moves: list[tuple[str, str]]
) -> None:
    """web-1 on a is terminating (a finalizer holds it) or a finished Job's, alone in its domain, which kube-scheduler's
    spread does not count: the snapshot is read (it raised KeyError on a's count, stopping every rescue) and web-1 is
    never moved. Terminating, it holds its card (HAMi counts it), so web-2 goes to a, its replacement free to go
    anywhere; finished, a's card is free for the big pod as it is."""
    web_1 = web("web-1", "a", spread(1))
    for part, fields in gone.items():
        web_1[part].update(fields)
    snapshot, made = rescue([web_1, web("web-2", "b", spread(1)), fixed("db", "c", "db")])
    assert made == moves
    assert [(pod.name, dict(pod.kept_off)) for pod in snapshot.pods[:2]] == [("web-1", {}), ("web-2", {})]


def test_a_spread_counts_only_the_nodes_the_replicas_own_selection_allows() -> None:
    """web-1 and a fixed web pod on a, web-2 on b, nothing on c; the replicas select pool=ab (a and b). Under
    nodeAffinityPolicy Honor (the default) c is no domain: a and b hold one each without web-1, so web-1 may go to
    either; counted, c's none would keep its replacement off both, its own node too (Ignore)."""
    nodes = [node_object(name) for name in "abc"]
    for node in nodes[:2]:
        node["metadata"]["labels"]["pool"] = "ab"
    for policy, free in (("Honor", {"a", "b"}), ("Ignore", set())):
        terms = spread(1)
        terms["topologySpreadConstraints"][0]["nodeAffinityPolicy"] = policy
        pods = [web(n, node, {**terms, "nodeSelector": {"pool": "ab"}}) for n, node in (("web-1", "a"), ("web-2", "b"))]
        snapshot, _ = snapshot_from_objects(nodes, [*pods, fixed("web-3", "a", "web")], [], datetime.now(UTC))
        assert runs_on(snapshot.pods[0], "abc") == free, policy


def test_a_pending_pods_spread_counts_only_the_nodes_its_own_selection_allows() -> None:
    """The same for a Pending web pod: a web pod on a and on b, none on c, which its selection leaves out."""
    nodes = [node_object(name) for name in "abc"]
    for node in nodes[:2]:
        node["metadata"]["labels"]["pool"] = "ab"
    placed = [fixed("web-1", "a", "web"), fixed("web-2", "b", "web")]
    for policy, free in (("Honor", {"a", "b"}), ("Ignore", set())):
        terms = spread(1)
        terms["topologySpreadConstraints"][0]["nodeAffinityPolicy"] = policy
        pending = pod_object("web-3", None, **terms, nodeSelector={"pool": "ab"})
        pending["metadata"]["labels"] = {"app": "web"}
        found = pending_pod(pending, node_marks(nodes), HAMI_DEFAULTS, placed)
        assert runs_on(found.pod, "abc") == free, policy


def test_a_replica_stays_where_every_other_node_runs_a_pod_its_anti_affinity_selects() -> None:
    """A third web pod on c, ours or another scheduler's (whose labels the server keeps): no node is left."""
    ours = [web("web-1", "a", APART), web("web-2", "b", APART), fixed("web-3", "c", "web")]
    assert rescue(ours)[1] == []
    other = CountedPod("ns", "web-3", "c", Resources(), labels={"app": "web"})
    snapshot, moves = rescue([*ours[:2], fixed("db", "c", "db")], (other,))
    assert moves == []
    assert snapshot.pods[0].kept_off["c"][1] == "the pod's anti-affinity (app=web): ns/web-3 runs on the node"


def test_a_replica_whose_terms_cannot_be_read_stays_on_its_node() -> None:
    """A namespaceSelector that names labels: the namespaces' labels are not read, nor then where the pod may go."""
    unread = {**WEB, "namespaceSelector": {"matchLabels": {"team": "a"}}}
    terms = {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [unread]}}}
    snapshot, moves = rescue([web("web-1", "a", terms), web("web-2", "b", terms), fixed("db", "c", "db")])
    assert moves == []
    assert [(pod.nodes, pod.stays) for pod in snapshot.pods[:2]] == [
        ({"a"}, "kube-scheduler places it by other pods, by terms the plan does not read"),
        ({"b"}, "kube-scheduler places it by other pods, by terms the plan does not read"),
    ]


@pytest.mark.parametrize(("team", "free"), [("a", [{"a", "c"}, {"b", "c"}]), ("b", [{"a", "b", "c"}] * 2)])
def test_a_replica_whose_terms_pick_namespaces_by_label_moves_where_they_let_it_once_the_labels_are_read(
    team: str, free: list[set[str]]
) -> None:
    """The namespace labelled for the namespaceSelector: each replica may go to c but not beside the other; labelled
    otherwise, its terms select no pod and it may go anywhere."""
    picked = {**WEB, "namespaceSelector": {"matchLabels": {"team": "a"}}}
    terms = {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [picked]}}}
    pods = [web("web-1", "a", terms), web("web-2", "b", terms), fixed("db", "c", "db")]
    snapshot, _ = rescue(pods, namespace_labels={"ns": {"team": team}})
    assert [(runs_on(pod, "abc"), pod.stays) for pod in snapshot.pods[:2]] == [(nodes, "") for nodes in free]


def test_two_replicas_are_never_moved_to_other_nodes_in_one_plan() -> None:
    """Two whole cards are freed only by sending both web replicas to c: each alone may go, both together kube-scheduler
    would refuse (the second finds the first there), so the plan frees one card at most."""
    nodes = [node_object(name) for name in "abc"]
    pods = [web("web-1", "a", APART), web("web-2", "b", APART), fixed("db", "c", "db")]
    snapshot, _ = snapshot_from_objects(nodes, pods, [], datetime.now(UTC))
    assert [runs_on(pod, "abc") for pod in snapshot.pods[:2]] == [{"a", "c"}, {"b", "c"}]
    result = plan(snapshot, FreeCardsGoal(2))
    assert [m.to_node for m in result.moves].count("c") <= 1, result.moves
    assert plan(snapshot, FreeCardsGoal(1)).moves


def test_a_recorded_move_is_refused_once_a_pod_it_counts_has_left_its_node() -> None:
    """Checking a plan again (apply) refuses the second of two moves that each alone kube-scheduler would let be."""
    nodes = [node_object(name) for name in "abc"]
    pods = [web("web-1", "a", APART), web("web-2", "b", APART), fixed("db", "c", "db")]
    snapshot, _ = snapshot_from_objects(nodes, pods, [], datetime.now(UTC))
    state = State(snapshot, Limits())
    moves = [Move(f"ns/web-{n}", "", node, (f"GPU-{node}",), "c", ("GPU-c",), "") for n, node in ((1, "a"), (2, "b"))]
    assert [state.carry_out(move) for move in moves] == [True, False]
    assert state.tied_away("ns/web-2") == "ns/web-1"


def two_card_node(name: str) -> dict[str, Any]:
    """node_object's node with a second card, GPU-<name>2 at index 1: a pod tied to it has a card to go to."""
    node = node_object(name)
    annotations = node["metadata"]["annotations"]
    [card] = json.loads(annotations["hami.io/node-nvidia-register"])
    annotations["hami.io/node-nvidia-register"] = json.dumps([card, {**card, "id": f"GPU-{name}2", "index": 1}])
    return node


def test_a_pod_is_tied_to_a_pod_moved_off_its_node_whose_terms_count_it_or_that_its_terms_count() -> None:
    """Either way round (web-1's anti-affinity counts the web pods, theirs count nothing), and only by a move to
    another node: the pod's own move, or one between a node's cards, changes no domain either's terms read."""
    two_cards = two_card_node("b")
    nodes = [node_object("a"), two_cards, node_object("c"), node_object("d")]
    pods = [web("web-1", "a", APART), web("plain", "b", {}), web("plain-2", "d", {})]
    snapshot, _ = snapshot_from_objects(nodes, pods, [], datetime.now(UTC))

    def tied(key: str, *moves: tuple[str, str, str]) -> str:
        state = State(snapshot, Limits())
        for pod, node, card in moves:
            entry = state.pods[f"ns/{pod}"]
            move = Move(f"ns/{pod}", "", entry.node, tuple(entry.cards), node, (card,), "")
            assert state.carry_out(move), move
        return state.tied_away(f"ns/{key}")

    assert tied("plain", ("web-1", "c", "GPU-c")) == "ns/web-1", "its terms count the pod"
    assert tied("web-1", ("plain", "c", "GPU-c")) == "ns/plain", "the pod's terms count it"
    assert tied("web-1", ("web-1", "c", "GPU-c")) == "", "the pod's own move"
    assert tied("web-1", ("plain", "b", "GPU-b2")) == "", "a move between its node's cards"
    assert tied("web-1", ("plain", "b", "GPU-b2"), ("plain-2", "c", "GPU-c")) == "ns/plain-2", "the next move"


def test_a_tied_pod_moved_within_a_scope_of_other_nodes_stays_where_it_is() -> None:
    """A tied pod may move only between its own node's cards, and a search kept to some nodes only within them: with
    its node outside the scope it has nowhere to go, inside it its node's other card."""
    two_cards = two_card_node("b")
    nodes = [node_object("a"), two_cards, node_object("c"), node_object("d")]
    snapshot, _ = snapshot_from_objects(nodes, [web("web-1", "a", APART), web("plain", "b", {})], [], datetime.now(UTC))

    def relocated(scope: set[str]) -> tuple[str, tuple[str, ...]] | None:
        state = State(snapshot, Limits())
        assert state.carry_out(Move("ns/web-1", "", "a", ("GPU-a",), "c", ("GPU-c",), ""))
        assert state.tied_away("ns/plain") == "ns/web-1"
        move = state.relocate("ns/plain", "test", set(), scope=frozenset(scope), chain=False)
        return None if move is None else (move.to_node, move.to_cards)

    assert relocated({"c", "d"}) is None
    assert relocated({"b", "d"}) == ("b", ("GPU-b2",))


def test_compacting_moves_one_of_two_pods_tied_by_terms_off_its_node() -> None:
    """web-1's anti-affinity counts plain: once either has left for c or d, the other may move only between its own
    node's cards (it has one), though the goal's nodes would take it: one card freed, not two."""
    nodes = [node_object(name) for name in "abcd"]
    pods = [web("web-1", "a", APART), web("plain", "b", {}), fixed("db-c", "c", "db"), fixed("db-d", "d", "db")]
    snapshot, _ = snapshot_from_objects(nodes, pods, [], datetime.now(UTC))
    result = plan(snapshot, CompactGoal(("a", "b", "c", "d")))
    assert [(m.pod in ("ns/web-1", "ns/plain"), m.to_node in "cd") for m in result.moves] == [(True, True)], result


def test_a_pod_whose_terms_count_the_pending_pod_stays_on_its_node() -> None:
    """Its anti-affinity keeps the Pending pod out of its domain: moving it would change where that pod may go."""
    nodes = [node_object(name) for name in "abc"]
    snapshot, _ = snapshot_from_objects(nodes, [web("web-1", "a", APART)], [], datetime.now(UTC))
    big = pending_pod(whole_card(), node_marks(nodes), HAMI_DEFAULTS, []).pod
    assert keep_counted_on_node(snapshot, big).pods[0].nodes is None, "the big pod is no web pod"
    web_big = replace(big, labels={"app": "web"})
    [kept] = keep_counted_on_node(snapshot, web_big).pods
    assert (kept.nodes, kept.stays) == ({"a"}, "its required pod affinity or spread counts the Pending pod")
    counted = CountedPods(frozenset({"ns"}), selector_from_dict({"matchLabels": {"app": "web"}}))
    assert keep_counted_on_node(snapshot, replace(big, counts=(counted,))).pods[0].stays == (
        "the Pending pod's required pod affinity or spread counts it"
    )


def sized(pod: dict[str, Any], mib: int) -> dict[str, Any]:
    """The pod asking and holding `mib` of its card instead."""
    pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"] = str(mib)
    annotations = pod["metadata"]["annotations"]
    annotations["hami.io/vgpu-devices-allocated"] = annotations["hami.io/vgpu-devices-allocated"].replace(
        "8192", str(mib)
    )
    return pod


def test_a_chain_never_moves_aside_a_pod_the_moved_one_counts() -> None:
    """web-1 (20 GiB) must leave a; it fits c only once web-2 (16 GiB) goes to b. Each move alone its spread allows,
    but web-1's counts web-2: the chain that moves both to other nodes is not made, and there is no plan."""
    pods = [
        sized(web("web-1", "a", spread(2)), 20480),
        sized(fixed("db-b", "b", "db"), 22528),
        sized(web("web-2", "c", spread(2)), 16384),
        sized(fixed("db-c", "c", "db"), 20480),
    ]
    snapshot, moves = rescue(pods)
    assert [pod.nodes for pod in snapshot.pods if pod.name.startswith("web")] == [None, None]
    assert moves == []
    untied = [replace(pod, counts=()) for pod in snapshot.pods]
    big = pending_pod(whole_card(), node_marks([node_object(n) for n in "abc"]), HAMI_DEFAULTS, pods).pod
    chained = plan(replace(snapshot, pods=tuple(untied)), FitGoal(big)).moves
    assert [(m.pod, m.to_node) for m in chained] == [("ns/web-2", "b"), ("ns/web-1", "c")], "the chain, untied"
