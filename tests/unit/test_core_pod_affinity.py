"""A Pending pod's own required pod affinity and anti-affinity, read as kube-scheduler's InterPodAffinity filter reads
them, and the plan that then makes room only where the pod may go."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from kubectl_hami_place.core.defrag.triggers import pending_pod
from kubectl_hami_place.core.hami_config import HAMI_DEFAULTS
from kubectl_hami_place.core.names import HOSTNAME_LABEL
from kubectl_hami_place.core.node_resources import bound_pods, counted_pod
from kubectl_hami_place.core.node_selection import node_marks
from kubectl_hami_place.core.planner import FitGoal, plan
from kubectl_hami_place.core.planner.objects import snapshot_from_objects
from kubectl_hami_place.core.planner.why import why
from kubectl_hami_place.core.pod_affinity import (
    EACH_NAMESPACE_UP_TO,
    ByPlacedPods,
    DomainIndex,
    PlacedPod,
    PodList,
    PodTerm,
    PortHolder,
    Repeller,
    Repelling,
    Spread,
    counted_pods,
    host_ports,
    kept_off_by_pods,
    kept_off_by_ports,
    namespace_labels_of,
    picks_namespaces_by_labels,
    placed_pods,
    pod_spreads,
    pod_terms,
    repelling_terms,
    resolved_terms,
    selected_lists,
)
from kubectl_hami_place.core.selectors import selector_from_dict
from tests.unit.test_core_planner import node_object, pod_object, runs_on

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


TEAMS = {"ns": {"team": "a"}, "other": {"team": "b"}, "third": {"team": "a"}}
"""Namespaces' labels by name."""


def picked_by(selector: dict[str, Any], **extra: Any) -> frozenset[str] | None:
    """The namespaces a web anti-affinity term with this namespaceSelector selects pods of, TEAMS read."""
    terms = pod_terms(spec(anti=(term("web", namespaceSelector=selector, **extra),)), "ns", TEAMS)
    assert terms is not None
    (read,) = terms
    return read.namespaces


def test_a_namespace_selector_picks_the_namespaces_its_labels_match_besides_those_listed() -> None:
    """As kube-scheduler merges them: the namespaces the term lists and those whose labels it matches (the pod's own
    only when it matches); every namespace under an empty selector; none when it matches none."""
    assert picked_by({"matchLabels": {"team": "a"}}) == {"ns", "third"}
    assert picked_by({"matchLabels": {"team": "b"}}) == {"other"}
    assert picked_by({"matchLabels": {"team": "b"}}, namespaces=["third"]) == {"other", "third"}
    assert picked_by({"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["a"]}]}) == {"other"}
    assert picked_by({"matchLabels": {"team": "c"}}) == frozenset()
    assert picked_by({}) is None
    assert picked_by({"matchLabels": {}}) is None
    apart = spec(anti=(term("web", namespaceSelector={"matchLabels": {"team": "a"}}),))
    terms = pod_terms(apart, "ns", TEAMS)
    assert terms is not None
    placed = [on("a", "web", namespace="third"), on("b", "web", namespace="other"), on("c", "web", namespace="gone")]
    assert kept_off_by_pods(terms, "ns", {"app": "web"}, placed, NODES) == {
        "a": "the pod's anti-affinity (app=web): third/web-a runs on the node"
    }
    broken = {"matchExpressions": [{"key": "team", "operator": "Near"}]}
    assert pod_terms(spec(anti=(term("web", namespaceSelector=broken),)), "ns", TEAMS) is None


def test_the_namespaces_labels_are_read_only_for_a_term_that_picks_namespaces_by_label() -> None:
    """Not for a term without a namespaceSelector or with an empty one, nor for a preferred term."""
    by_label = term("web", namespaceSelector={"matchLabels": {"team": "a"}})
    assert picks_namespaces_by_labels(spec(anti=(term("web"), by_label)))
    assert picks_namespaces_by_labels(spec(affinity=(by_label,)))
    assert not picks_namespaces_by_labels(spec(anti=(term("web"), term("web", namespaceSelector={}))))
    preferred = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [by_label]}}
    assert not picks_namespaces_by_labels({"affinity": preferred})
    namespaces = [{"metadata": {"name": "a", "labels": {"team": "a", "n": 1}}}, {"metadata": {"name": "b"}}]
    assert namespace_labels_of(namespaces) == {"a": {"team": "a"}, "b": {}}


def test_a_terms_pods_are_listed_namespace_by_namespace_in_a_few_namespaces_else_once_in_every_one() -> None:
    """Up to EACH_NAMESPACE_UP_TO namespaces a list each; more (a namespaceSelector may pick hundreds), or every
    namespace, one list of every namespace; a spread in the pod's own; one selector and namespace listed once; a
    null selector lists nothing."""
    web, db = selector_from_dict({"matchLabels": {"app": "web"}}), selector_from_dict({"matchLabels": {"app": "db"}})
    few = frozenset(f"ns-{i}" for i in range(EACH_NAMESPACE_UP_TO))
    many = frozenset(f"ns-{i}" for i in range(EACH_NAMESPACE_UP_TO + 1))
    terms = [
        PodTerm(True, HOSTNAME_LABEL, web, few),
        PodTerm(True, ZONE, web, frozenset({"ns-0"})),
        PodTerm(False, HOSTNAME_LABEL, db, many),
        PodTerm(True, HOSTNAME_LABEL, db, None),
        PodTerm(True, HOSTNAME_LABEL, None, many),
    ]
    spreads = [Spread(1, ZONE, web)]
    assert selected_lists(terms, spreads, "own") == (
        *(PodList(name, web) for name in sorted(few)),
        PodList(None, db),
        PodList("own", web),
    )


def test_the_pods_a_term_counts_are_of_the_namespaces_it_picks_by_label_once_read() -> None:
    """Not read, a namespaceSelector that names labels counts pods of every namespace (never fewer than kube-scheduler
    counts); read, those of the namespaces it picks. A placed pod's anti-affinity repels alike."""
    apart = spec(anti=(term("web", namespaceSelector={"matchLabels": {"team": "a"}}),))
    (unread,) = counted_pods(apart, "ns")
    assert unread.counts("other", {"app": "web"})
    (read,) = counted_pods(apart, "ns", TEAMS)
    assert [read.counts(where, {"app": "web"}) for where in ("ns", "other", "third")] == [True, False, True]
    assert [t.namespaces for t in repelling_terms(apart, "ns")] == [None]
    assert [t.namespaces for t in repelling_terms(apart, "ns", TEAMS)] == [frozenset({"ns", "third"})]


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
        PlacedPod("ns", "leaving", "c", {"app": "web"}, terminating=True),
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
    assert runs_on(found.pod, "ab") == {other}
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


def test_a_refusal_by_a_term_that_picks_namespaces_by_label_is_read_once_their_labels_are() -> None:
    """The replica's namespace labelled for the term's namespaceSelector: the node it holds is out and the refusal
    read; labelled otherwise, the term selects no replica and no node is out."""
    nodes, pods = fragmented("a")
    pod = big_web()
    pod["spec"]["affinity"]["podAntiAffinity"][REQUIRED] = [term("web", namespaceSelector={"matchLabels": {"t": "x"}})]
    found = pending_pod(pod, node_marks(nodes), HAMI_DEFAULTS, pods, namespace_labels={"ns": {"t": "x"}})
    assert runs_on(found.pod, "ab") == {"b"}
    assert found.unread == ()
    other = pending_pod(pod, node_marks(nodes), HAMI_DEFAULTS, pods, namespace_labels={"ns": {"t": "y"}})
    assert (runs_on(other.pod, "ab"), other.unread) == ({"a", "b"}, ())


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


def spread(app: str | None, key: str = HOSTNAME_LABEL, skew: int = 1, **extra: Any) -> dict[str, Any]:
    """A DoNotSchedule spread of the pods labelled app=`app` (a null selector for None)."""
    selector = None if app is None else {"matchLabels": {"app": app}}
    return {
        "maxSkew": skew,
        "topologyKey": key,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": selector,
        **extra,
    }


def spread_off(
    spreads: list[dict[str, Any]],
    placed: list[PlacedPod],
    *,
    labels: dict[str, str] | None = None,
    selected: frozenset[str] | None = None,
    untolerated: frozenset[str] = frozenset(),
) -> dict[str, str]:
    """The nodes a pod of namespace ns (labelled app=web unless given) with these spreads is kept off."""
    labels = {"app": "web"} if labels is None else labels
    read = pod_spreads({"topologySpreadConstraints": spreads}, labels)
    assert read is not None
    pending = PlacedPod("ns", "pending", "", labels)
    judged = ByPlacedPods(lambda: placed, DomainIndex(NODES)).kept_off(pending, (), read, selected, untolerated)
    return {node: why for node, (_, why) in judged.items()}


def test_a_spread_is_read_as_kube_scheduler_reads_it() -> None:
    """ScheduleAnyway only scores; DoNotSchedule by default; matchLabelKeys add the pod's own values; the node
    inclusion policies default to Honor for node affinity, Ignore for taints; minDomains defaults to 1."""
    soft = {**spread("web"), "whenUnsatisfiable": "ScheduleAnyway"}
    keyed = spread("web", matchLabelKeys=["pod-template-hash", "absent"], nodeTaintsPolicy="Honor")
    del keyed["whenUnsatisfiable"]
    read = pod_spreads({"topologySpreadConstraints": [soft, keyed]}, {"app": "web", "pod-template-hash": "h1"})
    assert read is not None
    [only] = read
    assert str(only.selector) == "app=web,pod-template-hash in (h1)"
    assert (only.max_skew, only.min_domains, only.honor_node_affinity, only.honor_taints) == (1, 1, True, True)
    ignoring = pod_spreads({"topologySpreadConstraints": [spread("web", nodeAffinityPolicy="Ignore")]}, {})
    web = selector_from_dict({"matchLabels": {"app": "web"}})
    assert ignoring == (Spread(1, HOSTNAME_LABEL, web, 1, honor_node_affinity=False, honor_taints=False),)


@pytest.mark.parametrize(
    "unreadable",
    [
        spread("web", skew=0),
        spread("web", key=""),
        spread("web", minDomains=0),
        {**spread("web"), "labelSelector": {"matchExpressions": [{"key": "app", "operator": "Near"}]}},
        "a spread",
    ],
)
def test_a_spread_the_plan_cannot_read_leaves_the_whole_verdict_unread(unreadable: Any) -> None:
    """A skew or minDomains under 1, no topology key, a selector that does not parse."""
    assert pod_spreads({"topologySpreadConstraints": [spread("web"), unreadable]}, {}) is None


def test_a_spread_keeps_the_pod_off_the_domains_it_would_put_too_far_ahead() -> None:
    """One web pod on a: a second there would make a skew of 2 over b, c and d (0 each); by zone, z1 holds 2 and z2
    none, and d, without a zone, is out of a zone spread altogether."""
    assert spread_off([spread("web")], [on("a", "web")]) == {
        "a": f"the pod's topology spread (app=web, maxSkew 1): 1 such pod(s) run in its {HOSTNAME_LABEL}=a, "
        "0 where fewest run"
    }
    zoned = spread_off([spread("web", ZONE)], [on("a", "web"), on("b", "web")])
    assert set(zoned) == {"a", "b", "d"}
    assert zoned["d"] == f"the pod's topology spread (app=web): the node has no {ZONE} label"
    assert spread_off([spread("web", ZONE, skew=2)], [on("a", "web")]) == {"d": zoned["d"]}


def test_a_spread_counts_the_pods_of_the_pods_namespace_that_are_not_leaving() -> None:
    """Another namespace's pod, a terminating one, one it does not select: none counts."""
    leaving = PlacedPod("ns", "web-old", "a", {"app": "web"}, terminating=True)
    assert spread_off([spread("web")], [on("a", "web", namespace="other"), leaving, on("a", "db")]) == {}


def test_the_pod_itself_counts_only_when_its_spread_selects_it() -> None:
    """A db pod spreading apart from web pods adds none of its own: one web pod ahead is within maxSkew 1. A null
    selector counts no pod, the pod itself included; an empty one only the pod itself."""
    assert spread_off([spread(None)], [on("a", "web"), on("a", "web", name="w2")]) == {}
    every = {**spread("web"), "labelSelector": {}}
    assert spread_off([every], [on("a", "web"), on("a", "web", name="w2")]) == {}, "an empty selector counts none"
    assert spread_off([spread("web")], [on("a", "web")], labels={"app": "db"}) == {}
    assert set(spread_off([spread("web")], [on("a", "web"), on("a", "web", name="w2")], labels={"app": "db"})) == {"a"}


def test_fewer_domains_than_min_domains_count_the_fewest_as_none() -> None:
    """Both zones hold a web pod: within maxSkew 1, unless three zones are expected."""
    both = [on("a", "web"), on("c", "web")]
    assert set(spread_off([spread("web", ZONE)], both)) == {"d"}
    assert set(spread_off([spread("web", ZONE, minDomains=3)], both)) == {"a", "b", "c", "d"}


def test_only_the_nodes_the_pod_may_go_to_are_counted_by_default() -> None:
    """Two web pods on b, which the pod's node selection excludes (Honor): z1 counts only a's none; counted
    anyway under Ignore. Taints are ignored unless Honor."""
    on_b = [on("b", "web"), on("b", "web", name="w2")]
    assert set(spread_off([spread("web", ZONE)], on_b, selected=frozenset({"a", "c"}))) == {"d"}
    ignoring = spread("web", ZONE, nodeAffinityPolicy="Ignore")
    assert set(spread_off([ignoring], on_b, selected=frozenset({"a", "c"}))) == {"a", "b", "d"}
    assert set(spread_off([spread("web", ZONE)], on_b, untolerated=frozenset({"b"}))) == {"a", "b", "d"}
    honoring = spread("web", ZONE, nodeTaintsPolicy="Honor")
    assert set(spread_off([honoring], on_b, untolerated=frozenset({"b"}))) == {"d"}


def test_the_pods_a_term_selects_are_gathered_from_every_group_of_alike_pods() -> None:
    """Replicas of two templates (their pod-template-hash differs) are two groups of placed pods, each read once:
    the pod's anti-affinity keeps it off the nodes of both."""
    terms = pod_terms(spec(anti=(term("web"),)), "ns")
    assert terms is not None
    placed = [
        PlacedPod("ns", "web-1", "a", {"app": "web", "pod-template-hash": "h1"}),
        PlacedPod("ns", "web-2", "b", {"app": "web", "pod-template-hash": "h2"}),
        on("c", "db"),
    ]
    pending = PlacedPod("ns", "pending", "", {"app": "web"})
    judged = ByPlacedPods(lambda: placed, DomainIndex(NODES)).kept_off(pending, terms, (), None, frozenset())
    assert {node: why for node, (_, why) in judged.items()} == {
        "a": "the pod's anti-affinity (app=web): ns/web-1 runs on the node",
        "b": "the pod's anti-affinity (app=web): ns/web-2 runs on the node",
    }


def test_exactly_min_domains_domains_are_enough() -> None:
    """Two zones, each with a web pod, and minDomains 2: the global minimum is theirs (1), not 0."""
    both = [on("a", "web"), on("c", "web")]
    assert set(spread_off([spread("web", ZONE, minDomains=2)], both)) == {"d"}


def test_a_node_the_pods_selection_leaves_out_is_no_domain_of_its_hostname_spread() -> None:
    """Web pods on a and c; the pod may go to a or b only (Honor): b's none makes a one ahead, c is not counted.
    Under Ignore every node is a domain, and c is one ahead too."""
    placed = [on("a", "web"), on("c", "web")]
    honoured = spread_off([spread("web")], placed, selected=frozenset({"a", "b"}))
    assert honoured == {
        "a": "the pod's topology spread (app=web, maxSkew 1): 1 such pod(s) run in its "
        f"{HOSTNAME_LABEL}=a, 0 where fewest run"
    }
    ignoring = spread("web", nodeAffinityPolicy="Ignore")
    assert set(spread_off([ignoring], placed, selected=frozenset({"a", "b"}))) == {"a", "c"}


def test_a_node_without_every_spreads_key_is_counted_by_none() -> None:
    """d has no zone: with a zone spread beside the hostname one, d's empty domain is no hostname domain either, so
    one web pod on each of a, b and c is level, not one ahead of d."""
    each = [on("a", "web"), on("b", "web"), on("c", "web")]
    assert set(spread_off([spread("web")], each)) == {"a", "b", "c"}
    assert set(spread_off([spread("web"), spread("db", ZONE)], each)) == {"d"}


def spread_web() -> dict[str, Any]:
    """big_web, kept one to a node by a topology spread instead of anti-affinity."""
    big = big_web()
    del big["spec"]["affinity"]
    big["spec"]["topologySpreadConstraints"] = [spread("web")]
    big["status"]["conditions"][0]["message"] = (
        "0/2 nodes are available: 1 node(s) didn't match pod topology spread constraints, 1 1/1 CardInsufficientMemory."
    )
    return big


@pytest.mark.parametrize("web_on", ["a", "b"])
def test_a_rescue_makes_room_only_on_a_node_the_pods_spread_allows(web_on: str) -> None:
    """As with anti-affinity: the web replica on one node leaves the other, and the refusal is read."""
    nodes, pods = fragmented(web_on)
    snapshot, _ = snapshot_from_objects(nodes, pods, [], datetime.now(UTC))
    found = pending_pod(spread_web(), node_marks(nodes), HAMI_DEFAULTS, pods)
    other = "b" if web_on == "a" else "a"
    assert found.unread == ()
    assert plan(snapshot, FitGoal(found.pod)).target == (other, (f"GPU-{other}",))
    verdict = {node.node: node for node in why(snapshot, found.pod)}[web_on]
    assert (verdict.fits, verdict.reason) == (False, "PodTopologySpread")
    assert pending_pod(spread_web(), node_marks(nodes), HAMI_DEFAULTS, None).unread == (
        "1 node(s) didn't match pod topology spread constraints",
    )


def test_a_pending_pods_spread_that_honours_taints_counts_no_node_it_does_not_tolerate() -> None:
    """Web replicas on a and b, c tainted: under nodeTaintsPolicy Honor c's empty domain is not the fewest, so a and b
    stay open to one more replica; under the default (Ignore) it is, and they are kept off."""
    nodes, pods = fragmented("a")
    tainted = node_object("c")
    tainted["spec"] = {"taints": [{"key": "gpu", "value": "busy", "effect": "NoSchedule"}]}
    nodes.append(tainted)
    pods.append({**pods[2], "metadata": {"namespace": "ns", "name": "web-2", "labels": {"app": "web"}}})
    pods[3]["spec"] = {**pods[3]["spec"], "nodeName": "b"}
    honouring = spread_web()
    honouring["spec"]["topologySpreadConstraints"] = [spread("web", nodeTaintsPolicy="Honor")]
    kept = pending_pod(honouring, node_marks(nodes), HAMI_DEFAULTS, pods).pod
    assert (kept.nodes, dict(kept.kept_off)) == (frozenset({"a", "b"}), {})
    ignoring = pending_pod(spread_web(), node_marks(nodes), HAMI_DEFAULTS, pods).pod
    assert runs_on(ignoring, "abc") == frozenset()
    assert {node: filter_ for node, (filter_, _) in ignoring.kept_off.items()} == {
        "a": "PodTopologySpread",
        "b": "PodTopologySpread",
    }


def repelling(*found: Repeller) -> Repelling:
    """The placed pods' anti-affinity over NODES."""
    return Repelling(found, DomainIndex(NODES))


def apart(node: str, term_spec: dict[str, Any], namespace: str = "ns", name: str = "") -> Repeller:
    """A pod bound to `node` whose required anti-affinity is the one term."""
    terms = repelling_terms(spec(anti=(term_spec,)), namespace)
    return Repeller(namespace, name or f"apart-{node}", node, terms)


def test_a_placed_pods_anti_affinity_keeps_the_pods_it_selects_out_of_its_domain() -> None:
    """By hostname its node, by zone every node of its zone; a pod it does not select, or of another namespace, goes
    anywhere; a pod does not repel its own replacement."""
    by_host = repelling(apart("a", term("web")))
    assert by_host.kept_off("ns", "web-1", {"app": "web"}) == {
        "a": "ns/apart-a's anti-affinity (app=web) keeps it off the node"
    }
    assert by_host.kept_off("ns", "db-1", {"app": "db"}) == {}
    assert by_host.kept_off("other", "web-1", {"app": "web"}) == {}
    assert by_host.kept_off("ns", "apart-a", {"app": "web"}) == {}, "its own replacement"
    by_zone = repelling(apart("b", term("web", ZONE)))
    assert set(by_zone.kept_off("ns", "web-1", {"app": "web"})) == {"a", "b"}
    assert repelling(apart("d", term("web", ZONE))).kept_off("ns", "web-1", {"app": "web"}) == {}, "d has no zone"


def test_a_repelling_term_is_taken_to_select_every_pod_it_might_until_read() -> None:
    """A namespaceSelector that names labels, its namespaces' labels not read: the pods its label selector selects,
    of every namespace, are kept out of its domain, so no plan sends one where the term might refuse it; read
    (`resolved_terms`), those of the namespaces it picks. A selector that does not parse: every pod. No topology key:
    it keeps no domain."""
    by_labels = apart("a", term("web", namespaceSelector={"matchLabels": {"team": "a"}}))
    assert set(repelling(by_labels).kept_off("other", "web-1", {"app": "web"})) == {"a"}
    assert repelling(by_labels).kept_off("other", "db-1", {"app": "db"}) == {}
    read = replace(by_labels, terms=resolved_terms(by_labels.terms, TEAMS))
    assert repelling(read).kept_off("other", "web-1", {"app": "web"}) == {}
    assert set(repelling(read).kept_off("third", "web-1", {"app": "web"})) == {"a"}
    assert resolved_terms(by_labels.terms, None) == by_labels.terms
    broken = apart(
        "a", {"labelSelector": {"matchExpressions": [{"key": "app", "operator": "Near"}]}, "topologyKey": ZONE}
    )
    assert set(repelling(broken).kept_off("other", "db-1", {"app": "db"})) == {"a", "b"}
    assert repelling_terms(spec(anti=({"labelSelector": {"matchLabels": {"app": "web"}}},)), "ns") == ()


def test_a_repeller_is_a_bound_pod_with_required_anti_affinity() -> None:
    """Not a Pending pod, not one that ended, not one without a required anti-affinity term: the snapshot reads the
    repellers from the pods its nodes' rooms count."""
    body = {
        "metadata": {"namespace": "ns", "name": "web-0"},
        "spec": {"nodeName": "a", **spec(anti=(term("web"),))},
        "status": {"phase": "Running"},
    }
    [counted] = bound_pods([body])
    assert counted.repels == pod_terms(body["spec"], "ns") and counted.repels
    assert bound_pods([{**body, "spec": {**body["spec"], "nodeName": ""}}]) == []
    assert bound_pods([{**body, "status": {"phase": "Succeeded"}}]) == []
    assert bound_pods([{**body, "spec": {"nodeName": "a"}}])[0].repels == ()


def test_no_move_and_no_rescue_lands_where_a_placed_pods_anti_affinity_refuses_the_pod() -> None:
    """web-0 on b keeps app=web pods off b: the Pending web replica's room is made on a, though b's is as cheap, and
    small-a (labelled app=web here) is not moved to b, so there is none; kube-scheduler's refusal is read."""
    nodes, pods = fragmented("b")
    pods[2]["spec"] = {**pods[2]["spec"], **spec(anti=(term("web"),))}
    snapshot, _ = snapshot_from_objects(nodes, pods, [], datetime.now(UTC))
    assert snapshot.repellers == (Repeller("ns", "web-0", "b", pod_terms(pods[2]["spec"], "ns") or ()),)
    big = big_web()
    del big["spec"]["affinity"]
    big["status"]["conditions"][0]["message"] = (
        "0/2 nodes are available: 1 node(s) didn't satisfy existing pods anti-affinity rules, "
        "1 1/1 CardInsufficientMemory."
    )
    found = pending_pod(big, node_marks(nodes), HAMI_DEFAULTS, pods, snapshot)
    assert found.unread == ()
    assert runs_on(found.pod, "ab") == {"a"}
    result = plan(snapshot, FitGoal(found.pod))
    assert result.target == ("a", ("GPU-a",))
    assert [(m.pod, m.to_node) for m in result.moves] == [("ns/small-a", "b")]
    unread = pending_pod(big, node_marks(nodes), HAMI_DEFAULTS, pods, None).unread
    assert unread == ("1 node(s) didn't satisfy existing pods anti-affinity rules",)

    pods[0]["metadata"] = {**pods[0]["metadata"], "labels": {"app": "web"}}
    snapshot, _ = snapshot_from_objects(nodes, pods, [], datetime.now(UTC))
    assert not plan(snapshot, FitGoal(found.pod)).complete, "small-a may not go to b"
    [small] = [p for p in snapshot.pods if p.name == "small-a"]
    assert small.kept_off["b"] == ("InterPodAffinity", "ns/web-0's anti-affinity (app=web) keeps it off the node")


def test_another_schedulers_pod_repels_through_the_form_the_server_keeps_of_it() -> None:
    """The controller keeps other schedulers' pods as `counted_pod` reads them: their anti-affinity with them."""
    nodes, pods = fragmented("b")
    other = {**pods[2], "spec": {**pods[2]["spec"], **spec(anti=(term("web"),))}}
    counted = counted_pod(other)
    assert counted.repels == pod_terms(other["spec"], "ns")
    snapshot, _ = snapshot_from_objects(nodes, pods[:2], [], datetime.now(UTC), others=[counted])
    assert snapshot.repellers == (Repeller("ns", "web-0", "b", counted.repels),)


def ports_spec(*ports: dict[str, Any], sidecar: bool = True) -> dict[str, Any]:
    """A pod spec whose one container takes these ports, beside a sidecar and an init container taking 9000."""
    init = [{"name": "init", "ports": [{"containerPort": 9000, "hostPort": 9000}]}]
    if sidecar:
        init.append(
            {"name": "proxy", "restartPolicy": "Always", "ports": [{"containerPort": 15001, "hostPort": 15001}]}
        )
    return {"initContainers": init, "containers": [{"name": "c", "ports": list(ports)}]}


def test_the_host_ports_a_pod_takes_are_its_containers_and_sidecars() -> None:
    """An IP or protocol left out is every IP and TCP; a port without hostPort takes none; a plain init container
    runs before the others and holds nothing."""
    spec_ = ports_spec(
        {"containerPort": 8080, "hostPort": 8080},
        {"containerPort": 53, "hostPort": 53, "protocol": "UDP", "hostIP": "10.0.0.1"},
        {"containerPort": 9090},
        {"containerPort": 1, "hostPort": True},
    )
    assert host_ports(spec_) == {("0.0.0.0", "TCP", 8080), ("10.0.0.1", "UDP", 53), ("0.0.0.0", "TCP", 15001)}
    assert host_ports(ports_spec(sidecar=False)) == frozenset()


@pytest.mark.parametrize(
    ("asked", "held", "conflict"),
    [
        (("0.0.0.0", "TCP", 8080), ("0.0.0.0", "TCP", 8080), True),
        (("0.0.0.0", "TCP", 8080), ("10.0.0.1", "TCP", 8080), True),
        (("10.0.0.1", "TCP", 8080), ("0.0.0.0", "TCP", 8080), True),
        (("10.0.0.1", "TCP", 8080), ("10.0.0.1", "TCP", 8080), True),
        (("10.0.0.1", "TCP", 8080), ("10.0.0.2", "TCP", 8080), False),
        (("0.0.0.0", "UDP", 8080), ("0.0.0.0", "TCP", 8080), False),
        (("0.0.0.0", "TCP", 8081), ("0.0.0.0", "TCP", 8080), False),
    ],
)
def test_a_port_conflicts_as_kube_schedulers_host_port_check_says(
    asked: tuple[str, str, int], held: tuple[str, str, int], conflict: bool
) -> None:
    """The same protocol and port, on the same IP or where either is every IP (HostPortInfo.CheckConflict)."""
    holder = PortHolder("ns", "web", "b", frozenset({held}))
    expected = {"b": f"ns/web holds host port {asked[2]}/{asked[1]} on the node"} if conflict else {}
    assert kept_off_by_ports(frozenset({asked}), [holder]) == expected


def test_a_rescue_makes_room_only_where_the_host_port_the_pod_asks_is_free() -> None:
    """A web pod (another scheduler's, as the server keeps it) holds 8080 on b: the big pod asking 8080 is kept off b,
    its room made on a, and kube-scheduler's refusal of b is read."""
    nodes, pods = fragmented("b")
    web = {**pods[2], "spec": {**pods[2]["spec"], "containers": [{"name": "c", "ports": [{"hostPort": 8080}]}]}}
    snapshot, _ = snapshot_from_objects(nodes, pods[:2], [], datetime.now(UTC), others=[counted_pod(web)])
    assert snapshot.port_holders == (PortHolder("ns", "web-0", "b", frozenset({("0.0.0.0", "TCP", 8080)})),)
    listed, _ = snapshot_from_objects(nodes, [*pods[:2], web], [], datetime.now(UTC))
    assert listed.port_holders == snapshot.port_holders, "the CLI lists every pod whole"
    big = big_web()
    del big["spec"]["affinity"]
    big["spec"]["containers"][0]["ports"] = [{"containerPort": 8080, "hostPort": 8080}]
    big["status"]["conditions"][0]["message"] = (
        "0/2 nodes are available: 1 node(s) didn't have free ports for the requested pod ports, "
        "1 1/1 CardInsufficientMemory."
    )
    found = pending_pod(big, node_marks(nodes), HAMI_DEFAULTS, pods, snapshot)
    assert found.unread == ()
    assert found.pod.kept_off == {"b": ("NodePorts", "ns/web-0 holds host port 8080/TCP on the node")}
    assert plan(snapshot, FitGoal(found.pod)).target == ("a", ("GPU-a",))
    assert pending_pod(big, node_marks(nodes), HAMI_DEFAULTS, pods, None).unread == (
        "1 node(s) didn't have free ports for the requested pod ports",
    )


def test_with_affinity_beside_it_an_anti_affinity_term_still_keeps_the_pod_off_where_its_pods_run() -> None:
    """Terms of both kinds are judged node by node: affinity first, then each anti-affinity term."""
    both = kept(spec(affinity=(term("db", ZONE),), anti=(term("cache"),)), [on("a", "db"), on("a", "cache")])
    assert both == {
        "a": "the pod's anti-affinity (app=cache): ns/cache-a runs on the node",
        "c": f"the pod's affinity (app=db): no such pod runs in its {ZONE}=z2",
        "d": f"the pod's affinity (app=db): the node has no {ZONE} label",
    }


def test_a_moved_pod_is_left_out_of_its_own_domains_count_once() -> None:
    """Three web pods in z1 (the moved one among them), one in z2: without it z1 holds 2, so its replacement back
    in z1 would make 3 against 1, a skew of 2."""
    placed = [on("a", "web"), on("b", "web"), on("b", "web", name="web-b2"), on("c", "web")]
    read = pod_spreads({"topologySpreadConstraints": [spread("web", ZONE)]}, {"app": "web"})
    assert read is not None
    judged = ByPlacedPods(lambda: placed, DomainIndex(NODES)).kept_off(placed[0], (), read, None, frozenset())
    too_many = f"the pod's topology spread (app=web, maxSkew 1): 2 such pod(s) run in its {ZONE}=z1, 1 where fewest run"
    assert {node: why for node, (_, why) in judged.items() if node != "d"} == {"a": too_many, "b": too_many}


def test_a_moved_pod_whose_affinity_selects_only_itself_may_go_anywhere() -> None:
    """Its replacement is then the first of its group (the moved pod is left out of the pods its terms select)."""
    alone = on("a", "web")
    terms = pod_terms(spec(affinity=(term("web"),)), "ns")
    assert terms is not None
    assert ByPlacedPods(lambda: [alone], DomainIndex(NODES)).kept_off(alone, terms, (), None, frozenset()) == {}


def test_a_zone_repeller_is_named_by_its_zone_and_a_replacements_own_verdict_is_not_kept_for_its_kind() -> None:
    """A term of a label its node lacks is passed over, not the end of its pod's terms; its own replacement's
    verdict (its own term left out) is not remembered for the other pods of its kind."""
    both = Repeller("ns", "web-d", "d", repelling_terms(spec(anti=(term("web", ZONE), term("web"))), "ns"))
    found = repelling(both, apart("b", term("web", ZONE), name="web-b"))
    by_zone = f"ns/web-b's anti-affinity (app=web) keeps it off its {ZONE}=z1"
    assert found.kept_off("ns", "web-b", {"app": "web"}) == {
        "d": "ns/web-d's anti-affinity (app=web) keeps it off the node"
    }
    assert found.kept_off("ns", "web-x", {"app": "web"}) == {
        "a": by_zone,
        "b": by_zone,
        "d": "ns/web-d's anti-affinity (app=web) keeps it off the node",
    }


def test_what_is_passed_over_does_not_end_the_look_at_the_rest() -> None:
    """A node already kept off by one pod's port, a container that is not an object, a spread with a null selector:
    each is passed over and the next one still read."""
    held = frozenset({("0.0.0.0", "TCP", 8080)})
    holders = [
        PortHolder("ns", "one", "b", held),
        PortHolder("ns", "two", "b", held),
        PortHolder("ns", "three", "c", held),
    ]
    assert kept_off_by_ports(held, holders) == {
        "b": "ns/one holds host port 8080/TCP on the node",
        "c": "ns/three holds host port 8080/TCP on the node",
    }
    assert host_ports({"containers": ["junk", {"ports": [{"hostPort": 8080}]}]}) == held
    spreads = {"topologySpreadConstraints": [spread(None), spread("web")]}
    assert len(counted_pods(spreads, "ns")) == 1
