"""A Pending pod's own required pod affinity and anti-affinity, read as kube-scheduler's InterPodAffinity filter reads
them, and the plan that then makes room only where the pod may go."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from kubectl_hami_place.core.defrag.triggers import pending_pod
from kubectl_hami_place.core.hami_config import HAMI_DEFAULTS
from kubectl_hami_place.core.names import HOSTNAME_LABEL
from kubectl_hami_place.core.node_selection import node_marks
from kubectl_hami_place.core.planner import FitGoal, plan
from kubectl_hami_place.core.planner.objects import snapshot_from_objects
from kubectl_hami_place.core.planner.why import why
from kubectl_hami_place.core.pod_affinity import PlacedPod, kept_off_by_pods, placed_pods, pod_terms
from tests.unit.test_core_planner import node_object, pod_object

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
ZONE = "topology.kubernetes.io/zone"
NODES = {
    "a": {HOSTNAME_LABEL: "a", ZONE: "z1"},
    "b": {HOSTNAME_LABEL: "b", ZONE: "z1"},
    "c": {HOSTNAME_LABEL: "c", ZONE: "z2"},
    "d": {HOSTNAME_LABEL: "d"},
}


def term(app: str | None, key: str = HOSTNAME_LABEL, **extra: Any) -> dict[str, Any]:
    """A required term selecting pods labelled app=`app` (a null selector for None)."""
    return {"labelSelector": None if app is None else {"matchLabels": {"app": app}}, "topologyKey": key, **extra}


def spec(*, affinity: tuple[dict, ...] = (), anti: tuple[dict, ...] = ()) -> dict[str, Any]:
    """A pod spec with these required terms."""
    kinds = {"podAffinity": affinity, "podAntiAffinity": anti}
    return {"affinity": {kind: {REQUIRED: list(terms)} for kind, terms in kinds.items() if terms}}


def kept(pod_spec: dict[str, Any], placed: list[PlacedPod], labels: dict[str, str] | None = None) -> dict[str, str]:
    """The nodes the pod of namespace ns (labelled app=web unless given) is kept off."""
    terms = pod_terms(pod_spec, "ns")
    assert terms is not None
    return kept_off_by_pods(terms, "ns", {"app": "web"} if labels is None else labels, placed, NODES)


def on(node: str, app: str, namespace: str = "ns", name: str = "") -> PlacedPod:
    """A pod labelled app=`app` bound to `node`."""
    return PlacedPod(namespace, name or f"{app}-{node}", node, {"app": app})


def test_anti_affinity_keeps_the_pod_off_the_domain_a_selected_pod_runs_in() -> None:
    """By hostname only that node; by zone every node of the zone; a node without the label passes."""
    by_host = kept(spec(anti=(term("web"),)), [on("a", "web")])
    assert by_host == {"a": "the pod's anti-affinity (app=web): ns/web-a runs on the node"}
    by_zone = kept(spec(anti=(term("web", ZONE),)), [on("a", "web")])
    assert by_zone == {
        "a": f"the pod's anti-affinity (app=web): ns/web-a runs in its {ZONE}=z1",
        "b": f"the pod's anti-affinity (app=web): ns/web-a runs in its {ZONE}=z1",
    }


def test_a_term_selects_pods_of_its_namespaces_only() -> None:
    """The pod's own namespace by default, those listed, or every one under an empty namespaceSelector."""
    elsewhere = [on("a", "web", namespace="other")]
    assert kept(spec(anti=(term("web"),)), elsewhere) == {}
    assert set(kept(spec(anti=(term("web", namespaces=["other"]),)), elsewhere)) == {"a"}
    assert set(kept(spec(anti=(term("web", namespaceSelector={}),)), elsewhere)) == {"a"}
    assert kept(spec(anti=(term("db"),)), [on("a", "web")]) == {}


def test_affinity_keeps_the_pod_where_a_selected_pod_runs() -> None:
    """Only the domains holding a selected pod, and never a node without the topology label."""
    assert set(kept(spec(affinity=(term("db"),)), [on("b", "db")])) == {"a", "c", "d"}
    zoned = kept(spec(affinity=(term("db", ZONE),)), [on("b", "db")])
    assert zoned == {
        "c": f"the pod's affinity (app=db): no such pod runs in its {ZONE}=z2",
        "d": f"the pod's affinity (app=db): the node has no {ZONE} label",
    }


def test_the_first_pod_of_a_group_that_selects_itself_may_go_wherever_the_labels_are() -> None:
    """No pod anywhere matches: a pod its own terms select passes on any node with the topology labels; one they
    do not select passes nowhere; a null selector selects no pod, itself included."""
    assert set(kept(spec(affinity=(term("web", ZONE),)), [])) == {"d"}
    assert set(kept(spec(affinity=(term("web", ZONE),)), [on("d", "web")])) == {"d"}, "d has no zone: not counted"
    assert set(kept(spec(affinity=(term("web"),)), [on("b", "web")])) == {"a", "c", "d"}, "not the first: with b"
    assert set(kept(spec(affinity=(term("db", ZONE),)), [])) == set(NODES)
    assert set(kept(spec(affinity=(term(None),)), [])) == set(NODES)
    assert kept(spec(anti=(term(None),)), [on("a", "web")]) == {}


def test_affinity_is_judged_before_anti_affinity() -> None:
    """A node both refuse is named by its affinity, as kube-scheduler's filter reports it."""
    both = kept(spec(affinity=(term("db"),), anti=(term("web"),)), [on("a", "web"), on("b", "db")])
    assert both["a"] == "the pod's affinity (app=db): no such pod runs on the node"
    assert "b" not in both


@pytest.mark.parametrize(
    "unreadable",
    [
        term("web", namespaceSelector={"matchLabels": {"team": "a"}}),
        {"labelSelector": {"matchLabels": {"app": "web"}}},
        term("web", key=""),
        {"labelSelector": {"matchExpressions": [{"key": "app", "operator": "Near"}]}, "topologyKey": HOSTNAME_LABEL},
        "a term",
    ],
)
def test_a_term_the_plan_cannot_read_leaves_the_whole_verdict_unread(unreadable: Any) -> None:
    """A namespaceSelector that names labels (namespaces' labels are not read), no topology key, a selector that does
    not parse."""
    assert pod_terms(spec(anti=(term("web"), unreadable)), "ns") is None


def test_the_pods_a_term_counts_are_bound_and_not_ended() -> None:
    """kube-scheduler's cache drops Succeeded and Failed pods; a terminating pod still counts; unbound ones do not."""

    def pod(name: str, node: str | None, phase: str, **meta: Any) -> dict[str, Any]:
        return {
            "metadata": {"namespace": "ns", "name": name, "labels": {"app": "web", "n": 1}, **meta},
            "spec": {} if node is None else {"nodeName": node},
            "status": {"phase": phase},
        }

    pods = [
        pod("running", "a", "Running"),
        pod("done", "b", "Succeeded"),
        pod("failed", "b", "Failed"),
        pod("pending", None, "Pending"),
        pod("unbound", "", "Pending"),
        pod("leaving", "c", "Running", deletionTimestamp="2026-12-01T00:00:00Z"),
    ]
    assert placed_pods(pods) == (
        PlacedPod("ns", "running", "a", {"app": "web"}),
        PlacedPod("ns", "leaving", "c", {"app": "web"}),
    )


def fragmented(web_on: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Nodes a and b, one 40 GiB card each, each holding an 8 GiB pod; a web replica on `web_on` (no card)."""
    nodes = [node_object("a"), node_object("b")]
    pods = [
        {**pod_object("small-a", "a"), "spec": {**pod_object("small-a", "a")["spec"], "nodeName": "a"}},
        {**pod_object("small-b", "b"), "spec": {**pod_object("small-b", "b")["spec"], "nodeName": "b"}},
        {
            "metadata": {"namespace": "ns", "name": "web-0", "labels": {"app": "web"}},
            "spec": {"nodeName": web_on, "containers": [{"name": "c"}]},
            "status": {"phase": "Running"},
        },
    ]
    return nodes, pods


def big_web() -> dict[str, Any]:
    """A Pending web replica asking a whole card, kept apart from the other replicas by hostname."""
    whole = [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "40960"}}}]
    big = pod_object("web-1", None, containers=whole, **spec(anti=(term("web"),)))
    big["metadata"]["labels"] = {"app": "web"}
    big["status"]["conditions"] = [
        {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": "0/2 nodes are available: 1 node(s) didn't match pod anti-affinity rules, "
            "1 1/1 CardInsufficientMemory.",
        }
    ]
    return big


@pytest.mark.parametrize("web_on", ["a", "b"])
def test_a_rescue_makes_room_only_on_a_node_the_pods_anti_affinity_allows(web_on: str) -> None:
    """Either node's card is room once its small pod moves to the other; the web replica on one of them leaves only
    the other, and kube-scheduler's refusal of that node is then read, not a reason to do nothing."""
    nodes, pods = fragmented(web_on)
    marks = node_marks(nodes)
    snapshot, _ = snapshot_from_objects(nodes, pods, [], datetime.now(UTC))
    found = pending_pod(big_web(), marks, HAMI_DEFAULTS, pods)
    other = "b" if web_on == "a" else "a"
    assert found.unread == ()
    assert found.pod.nodes == frozenset({other})
    result = plan(snapshot, FitGoal(found.pod))
    assert result.target == (other, (f"GPU-{other}",))
    assert [(m.pod, m.to_node) for m in result.moves] == [(f"ns/small-{other}", web_on)]
    verdict = {node.node: node for node in why(snapshot, found.pod)}[web_on]
    assert (verdict.fits, verdict.reason) == (False, "InterPodAffinity")
    assert verdict.message == "kube-scheduler: the pod's anti-affinity (app=web): ns/web-0 runs on the node"


def test_without_the_selected_pods_the_refusal_stays_unread() -> None:
    """Not given the pods its terms select, the pod may go anywhere by the plan, and kube-scheduler's refusal of
    the node the replica holds is one the plan does not read."""
    nodes, _ = fragmented("a")
    found = pending_pod(big_web(), node_marks(nodes), HAMI_DEFAULTS, None)
    assert found.pod.nodes is None
    assert found.unread == ("1 node(s) didn't match pod anti-affinity rules",)


def test_a_refused_node_stays_unread_when_a_term_cannot_be_read() -> None:
    """An unreadable term: no node is kept off by guess, and the refusal stays unread."""
    nodes, pods = fragmented("a")
    pod = big_web()
    pod["spec"]["affinity"]["podAntiAffinity"][REQUIRED].append(
        term("x", namespaceSelector={"matchLabels": {"t": "a"}})
    )
    found = pending_pod(pod, node_marks(nodes), HAMI_DEFAULTS, pods)
    assert found.pod.nodes is None
    assert found.unread == ("1 node(s) didn't match pod anti-affinity rules",)


def test_no_plan_names_the_replica_that_keeps_the_pod_off_each_node() -> None:
    """Replicas on both nodes: no room to make, and the plan's reasons say which replica keeps it off each node."""
    nodes, pods = fragmented("a")
    pods.append({**pods[2], "metadata": {"namespace": "ns", "name": "web-2", "labels": {"app": "web"}}})
    pods[3]["spec"] = {**pods[3]["spec"], "nodeName": "b"}
    snapshot, _ = snapshot_from_objects(nodes, pods, [], datetime.now(UTC))
    found = pending_pod(big_web(), node_marks(nodes), HAMI_DEFAULTS, pods)
    result = plan(snapshot, FitGoal(found.pod))
    assert not result.complete and not result.moves
    assert "a: the pod's anti-affinity (app=web): ns/web-0 runs on the node" in result.reasons
    assert "b: the pod's anti-affinity (app=web): ns/web-2 runs on the node" in result.reasons
