"""The nodes a pod may run on, as the planner reads them: nodeSelector, required node affinity and the nodes' taints,
on plain data."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from kubectl_hami_place.core.names import HOSTNAME_LABEL, PLACEMENT_ANNOTATION
from kubectl_hami_place.core.node_selection import NodeMarks, node_allows, node_marks, tolerates
from kubectl_hami_place.core.planner import FitGoal, Snapshot, plan
from kubectl_hami_place.core.planner.objects import (
    keep_counted_on_node,
    pod_for_plan,
    selected_nodes,
    snapshot_from_objects,
)
from kubectl_hami_place.core.planner.why import why
from kubectl_hami_place.core.pod_affinity import CountedPods, counted_pods
from kubectl_hami_place.core.selectors import selector_from_dict
from tests.unit.test_core_planner import node_object, pod_object

LABELS = NodeMarks(
    {
        "a100-0": {HOSTNAME_LABEL: "a100-0", "gpu": "a100", "zone": "z1", "rack": "3"},
        "a100-1": {HOSTNAME_LABEL: "a100-1", "gpu": "a100", "zone": "z2", "rack": "12"},
        "h100-0": {HOSTNAME_LABEL: "h100-0", "gpu": "h100", "zone": "z1"},
    }
)


def required(*terms: dict[str, Any]) -> dict[str, Any]:
    """A pod spec's affinity with these required nodeSelectorTerms."""
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}}


def expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    """One matchExpressions entry."""
    entry: dict[str, Any] = {"key": key, "operator": operator}
    if values:
        entry["values"] = list(values)
    return entry


def allowed(**spec: object) -> frozenset[str] | None:
    """The nodes the planner lets a Pending pod of this spec run on."""
    return pod_for_plan(pod_object("p", None, **spec), LABELS).nodes


@pytest.mark.parametrize(
    ("requirement", "nodes"),
    [
        (expr("gpu", "In", "a100"), {"a100-0", "a100-1"}),
        (expr("gpu", "NotIn", "a100"), {"h100-0"}),
        (expr("rack", "NotIn", "3"), {"a100-1", "h100-0"}),
        (expr("rack", "Exists"), {"a100-0", "a100-1"}),
        (expr("rack", "DoesNotExist"), {"h100-0"}),
        (expr("rack", "Gt", "5"), {"a100-1"}),
        (expr("rack", "Lt", "5"), {"a100-0"}),
        (expr("rack", "Gt", "five"), set()),
        (expr("rack", "Gt", "3"), {"a100-1"}),
        (expr("rack", "Lt", "12"), {"a100-0"}),
        (expr("rack", "Gt", "+2"), {"a100-0", "a100-1"}),
        (expr("rack", "Lt", "-0"), set()),
        (expr("rack", "Lt", "9223372036854775807"), {"a100-0", "a100-1"}),
        (expr("rack", "Lt", "9223372036854775808"), set()),
        (expr("rack", "Gt", "-9223372036854775809"), set()),
        (expr("rack", "Lt", "1_0"), set()),
        (expr("rack", "Lt", " 10"), set()),
        (expr("rack", "Lt", "\u0661\u0660"), set()),
        (expr("gpu", "NotIn", "a b"), set()),
        (expr("gpu", "In", "a100", "a b"), set()),
        (expr("a b", "DoesNotExist"), set()),
        (expr("gpu", "Near", "a100"), set()),
        (expr("rack", "Near", "5"), set()),
    ],
)
def test_each_operator(requirement: dict[str, Any], nodes: set[str]) -> None:
    """Gt and Lt read numbers as kube-scheduler does (strconv.ParseInt, 64 bits): a value it cannot read, past int64,
    with an underscore, a space or Arabic-Indic digits ("10" in them), matches no node, where int() read all four. A
    key or value not in label syntax (stored on 1.24) fails its term there too: NotIn matched every node."""
    assert allowed(affinity=required({"matchExpressions": [requirement]})) == nodes


def test_expressions_of_a_term_are_anded_and_terms_ored() -> None:
    anded = {"matchExpressions": [expr("gpu", "In", "a100"), expr("zone", "In", "z1")]}
    assert allowed(affinity=required(anded)) == {"a100-0"}
    ored = required({"matchExpressions": [expr("gpu", "In", "h100")]}, {"matchExpressions": [expr("zone", "In", "z2")]})
    assert allowed(affinity=ored) == {"h100-0", "a100-1"}


def test_match_fields_name_the_node() -> None:
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["h100-0"]}]}
    assert allowed(affinity=required(term)) == {"h100-0"}


def test_empty_terms_match_no_node_and_no_affinity_allows_every_node() -> None:
    assert allowed(affinity=required({})) == set()
    assert allowed(affinity=required()) == set()
    assert allowed() is None
    assert allowed(affinity={"nodeAffinity": {}}) is None


def test_node_selector_and_affinity_both_hold() -> None:
    both = allowed(nodeSelector={"zone": "z1"}, affinity=required({"matchExpressions": [expr("gpu", "In", "a100")]}))
    assert both == {"a100-0"}


def test_the_hostname_pin_of_our_webhook_is_not_the_pods_own_constraint() -> None:
    """A placed pod's affinity carries `hostname In [its node]`, merged by the webhook into each term: its
    replacement (from the controller's template) is not pinned, so the planner may move the pod elsewhere."""
    pin = expr(HOSTNAME_LABEL, "In", "a100-0")
    placed = pod_object("p", "a100-0", affinity=required({"matchExpressions": [pin]}), nodeName="a100-0")
    placed["metadata"]["annotations"][PLACEMENT_ANNOTATION] = "move-p-123"
    assert pod_for_plan(placed, LABELS).nodes is None
    merged = required({"matchExpressions": [expr("gpu", "In", "a100"), pin]})
    placed["spec"]["affinity"] = merged
    assert pod_for_plan(placed, LABELS).nodes == {"a100-0", "a100-1"}
    del placed["metadata"]["annotations"][PLACEMENT_ANNOTATION]
    assert pod_for_plan(placed, LABELS).nodes == {"a100-0"}, "a pin the user wrote stays"


@pytest.mark.parametrize(
    "volume",
    [
        {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
        {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
    ],
)
def test_a_placed_pod_with_a_volume_claim_moves_only_between_its_nodes_cards(volume: dict[str, Any]) -> None:
    """A local PV or a zonal disk binds the claim to its node or zone, which the plan does not read: kube-scheduler
    would refuse the replacement on another node, so the pod stays on its own (a Pending one is not held)."""
    volumes = [{"name": "token", "projected": {"sources": []}}, volume]
    placed = pod_object("p", "a100-1", volumes=volumes, nodeName="a100-1")
    assert pod_for_plan(placed, LABELS).nodes == {"a100-1"}
    placed["spec"]["nodeSelector"] = {"gpu": "h100"}
    assert pod_for_plan(placed, LABELS).nodes == frozenset(), "its own node no longer selected: nowhere"
    assert allowed(volumes=volumes) is None, "a Pending pod goes where kube-scheduler binds its claim"
    plain = pod_object("p", "a100-1", volumes=volumes[:1], nodeName="a100-1")
    assert pod_for_plan(plain, LABELS).nodes is None


@pytest.mark.parametrize(
    "placement",
    [
        {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "h"}]}}},
        {"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "h"}]}}},
        {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone"}]},
        {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}]},
    ],
)
def test_a_placed_pod_placed_by_other_pods_moves_only_between_its_nodes_cards(placement: dict[str, Any]) -> None:
    """Replicas spread one to a node (required anti-affinity), or kept beside another pod, or in a topology spread
    kube-scheduler must not break: the plan reads none of it, and the replacement would be refused elsewhere."""
    assert pod_for_plan(pod_object("p", "a100-1", nodeName="a100-1", **placement), LABELS).nodes == {"a100-1"}


def test_a_placed_pod_with_resource_claims_moves_only_between_its_nodes_cards() -> None:
    """A claim allocated by dynamic resource allocation names devices of the pod's node (a NIC, another accelerator):
    the replacement would need a claim allocated elsewhere, which the plan does not read."""
    claims = [{"name": "nic", "resourceClaimTemplateName": "rdma"}]
    assert pod_for_plan(pod_object("p", "a100-1", nodeName="a100-1", resourceClaims=claims), LABELS).nodes == {"a100-1"}
    assert pod_for_plan(pod_object("p", "a100-1", nodeName="a100-1", resourceClaims=[]), LABELS).nodes is None


@pytest.mark.parametrize(
    ("ports", "stays"),
    [
        ([{"containerPort": 8080, "hostPort": 8080}], True),
        ([{"containerPort": 8080}, {"containerPort": 9090, "hostPort": 0}], False),
        ([{"containerPort": 8080, "hostPort": "8080"}], False),
    ],
)
def test_a_placed_pod_taking_a_host_port_moves_only_between_its_nodes_cards(
    ports: list[dict[str, Any]], stays: bool
) -> None:
    """Another node's pods may hold the port (kube-scheduler's NodePorts filter), which the plan does not read; a
    containerPort alone takes nothing of the node. An init container's host port counts too."""
    main = pod_object("p", "a100-1", nodeName="a100-1")
    main["spec"]["containers"][0]["ports"] = ports
    assert pod_for_plan(main, LABELS).nodes == ({"a100-1"} if stays else None)
    init = pod_object("p", "a100-1", nodeName="a100-1", initContainers=[{"name": "i", "ports": ports}])
    assert pod_for_plan(init, LABELS).nodes == ({"a100-1"} if stays else None)


@pytest.mark.parametrize(
    "placement",
    [
        {"affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1}]}}},
        {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"}]},
    ],
)
def test_a_pod_that_only_prefers_where_other_pods_run_may_move(placement: dict[str, Any]) -> None:
    """A preference is a score, never a refusal: the replacement lands on the target."""
    assert pod_for_plan(pod_object("p", "a100-1", nodeName="a100-1", **placement), LABELS).nodes is None


def test_node_allows_on_its_own() -> None:
    assert node_allows([{"matchExpressions": [expr("gpu", "In", "a100")]}], "x", {"gpu": "a100"})
    assert not node_allows([{"matchExpressions": [expr("gpu", "In", "a100")]}], "x", {})


def test_nodes_are_worked_out_for_gpu_pods_only_once_per_constraint() -> None:
    """Pods of one template share one answer (a large cluster's pods would otherwise each walk every node); a pod
    without a GPU request is never moved, so its nodes are not worked out."""
    affinity = required({"matchExpressions": [expr("gpu", "In", "a100")]})
    memo: dict[str, Any] = {}
    first = pod_for_plan(pod_object("p1", None, affinity=affinity), LABELS, memo=memo)
    second = pod_for_plan(pod_object("p2", None, affinity=affinity), LABELS, memo=memo)
    assert first.nodes == {"a100-0", "a100-1"} and first.nodes is second.nodes and len(memo) == 1
    plain = pod_object("x", None, affinity=affinity)
    plain["spec"]["containers"][0]["resources"] = {}
    assert pod_for_plan(plain, LABELS).nodes is None


def test_the_nodes_a_spread_counts_are_those_the_pods_selection_allows_whatever_their_taints() -> None:
    """kube-scheduler's nodeAffinityPolicy Honor counts a spread over the nodes the pod's nodeSelector and required
    node affinity allow; its taints are the other policy's (`nodeTaintsPolicy`), so a tainted node still counts.
    Without our webhook's pin of a placed pod; one answer per distinct selection, kept apart from where the pod may
    run in a shared memo."""
    tainted = NodeMarks(LABELS.labels, {"a100-1": ({"key": "maintenance", "effect": "NoSchedule"},)})
    memo: dict[str, Any] = {}
    a100 = {"nodeSelector": {"gpu": "a100"}}
    assert pod_for_plan(pod_object("p", None, nodeSelector={"gpu": "a100"}), tainted, memo=memo).nodes == {"a100-0"}
    assert selected_nodes(a100, tainted, memo=memo) == {"a100-0", "a100-1"}
    z1 = {"affinity": required({"matchExpressions": [expr("zone", "In", "z1")]})}
    assert selected_nodes(z1, tainted, memo=memo) == {"a100-0", "h100-0"}
    assert selected_nodes(a100, tainted, memo=memo) == {"a100-0", "a100-1"}, "each selection its own answer"
    assert selected_nodes({"nodeSelector": {"gpu": "h100"}}, tainted, memo=memo) == {"h100-0"}
    both = {**a100, **z1}
    assert selected_nodes(both, tainted) == {"a100-0"}
    assert selected_nodes({}, tainted) is None, "no selection: every node counts"
    pin = expr(HOSTNAME_LABEL, "In", "a100-0")
    pinned = {"affinity": required({"matchExpressions": [expr("gpu", "In", "a100"), pin]})}
    assert selected_nodes(pinned, tainted) == {"a100-0"}
    assert selected_nodes(pinned, tainted, placed_on="a100-0") == {"a100-0", "a100-1"}, "our pin is not its own"
    only_pin = {"affinity": required({"matchExpressions": [pin]})}
    assert selected_nodes(only_pin, tainted, placed_on="a100-0") is None


def test_an_empty_term_is_passed_over_and_the_next_term_still_counts() -> None:
    """Terms are ORed: one that selects nothing must not hide the term after it that allows a node."""
    assert allowed(affinity=required({}, {"matchExpressions": [expr("gpu", "In", "h100")]})) == {"h100-0"}


def test_a_placed_pods_term_of_only_our_pin_and_match_fields_keeps_its_match_fields() -> None:
    """The webhook merges its pin into every term, one of matchFields alone too: the user's matchFields still bind
    the replacement."""
    pin = expr(HOSTNAME_LABEL, "In", "a100-0")
    fields = [{"key": "metadata.name", "operator": "In", "values": ["a100-0", "h100-0"]}]
    placed = pod_object(
        "p", "a100-0", affinity=required({"matchExpressions": [pin], "matchFields": fields}), nodeName="a100-0"
    )
    placed["metadata"]["annotations"][PLACEMENT_ANNOTATION] = "move-p-123"
    assert pod_for_plan(placed, LABELS).nodes == {"a100-0", "h100-0"}


def taint(key: str, effect: str, value: str = "") -> dict[str, Any]:
    """A node taint as the API server keeps it."""
    return {"key": key, "effect": effect, **({"value": value} if value else {})}


@pytest.mark.parametrize(
    ("toleration", "tolerated"),
    [
        ({"key": "gpu", "operator": "Equal", "value": "a100", "effect": "NoSchedule"}, True),
        ({"key": "gpu", "value": "a100"}, True),
        ({"key": "gpu", "operator": "Equal", "value": "h100"}, False),
        ({"key": "gpu", "operator": "Exists"}, True),
        ({"key": "gpu", "operator": "Exists", "effect": "NoExecute"}, False),
        ({"operator": "Exists"}, True),
        ({"operator": "Exists", "effect": "NoSchedule"}, True),
        ({"key": "zone", "operator": "Exists"}, False),
        ({"key": "gpu", "operator": "Lt", "value": "a100"}, False),
    ],
)
def test_a_toleration_tolerates_a_taint_as_kubernetes_matches_them(toleration: dict[str, Any], tolerated: bool) -> None:
    """Effect and key must match unless the toleration leaves them out; Equal compares values, Exists takes any; an
    operator Kubernetes added later (or a typo) tolerates nothing, so the planner never sends a pod where it might not
    be allowed."""
    assert tolerates(toleration, taint("gpu", "NoSchedule", "a100")) is tolerated


def test_an_equal_toleration_without_a_value_tolerates_a_taint_without_one_only() -> None:
    """Both values left out are equal (empty); either one given is not."""
    assert tolerates({"key": "gpu", "operator": "Equal"}, taint("gpu", "NoSchedule"))
    assert not tolerates({"key": "gpu", "operator": "Equal"}, taint("gpu", "NoSchedule", "a100"))
    assert not tolerates({"key": "gpu", "value": "a100"}, taint("gpu", "NoSchedule"))


def test_a_pod_may_run_only_where_it_tolerates_the_taints_that_keep_pods_off() -> None:
    """kube-scheduler's TaintToleration filter refuses a node with a NoSchedule or NoExecute taint the pod does not
    tolerate; PreferNoSchedule only scores. The plan says which taint kept the pod off each node."""
    nodes = [
        {"metadata": {"name": name, "labels": labels}, "spec": {"taints": taints}}
        for (name, labels), taints in zip(
            LABELS.labels.items(),
            [
                [taint("team", "NoSchedule", "a")],
                [taint("soon", "PreferNoSchedule"), taint("maintenance", "NoExecute")],
                [taint("soon", "PreferNoSchedule")],
            ],
            strict=True,
        )
    ]
    marks = node_marks(nodes)
    memo: dict[str, Any] = {}  # shared, as a snapshot shares it: pods tolerating differently get their own answer
    assert set(marks.taints) == {"a100-0", "a100-1"}
    plain = pod_for_plan(pod_object("p", None), marks, memo=memo)
    assert plain.nodes == {"h100-0"}
    assert plain.untolerated == {"a100-0": "team=a:NoSchedule", "a100-1": "maintenance:NoExecute"}
    team = [{"key": "team", "operator": "Equal", "value": "a", "effect": "NoSchedule"}]
    assert pod_for_plan(pod_object("p", None, tolerations=team), marks, memo=memo).nodes == {"a100-0", "h100-0"}
    both = pod_object("p", None, tolerations=[*team, {"key": "maintenance", "operator": "Exists"}])
    assert (pod_for_plan(both, marks, memo=memo).nodes, pod_for_plan(both, marks, memo=memo).untolerated) == (
        None,
        {},
    ), "any node"
    selected = pod_for_plan(pod_object("p", None, nodeSelector={"gpu": "a100"}, tolerations=team), marks, memo=memo)
    assert (selected.nodes, selected.untolerated) == ({"a100-0"}, {"a100-1": "maintenance:NoExecute"})
    placed = pod_for_plan(
        pod_object("p", "a100-1", nodeName="a100-1", volumes=[{"persistentVolumeClaim": {}}]), marks, memo=memo
    )
    assert placed.nodes == frozenset(), "it stays on a node it no longer tolerates: it does not move"


@pytest.mark.parametrize("tolerated", [False, True])
def test_a_plan_sends_no_pod_to_a_node_whose_taint_it_does_not_tolerate(tolerated: bool) -> None:
    """The empty card on node b is kept for team b by a taint the big pod does not tolerate: room is made for it on
    a instead, by moving the small pod to b when that one tolerates the taint, and not at all when it does not
    (kube-scheduler would refuse either replacement there); `why` names the taint."""
    nodes = [node_object("a"), {**node_object("b"), "spec": {"taints": [taint("team", "NoSchedule", "b")]}}]
    marks = node_marks(nodes)
    whole = [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "40960"}}}]
    big = pod_for_plan(pod_object("big", None, containers=whole), marks)
    small = pod_object("small", "a", tolerations=[{"key": "team", "operator": "Exists"}] if tolerated else [])
    snapshot, _ = snapshot_from_objects(nodes, [small], [], datetime.now(UTC))
    result = plan(snapshot, FitGoal(big))
    if tolerated:
        assert [(m.pod, m.to_node) for m in result.moves] == [("ns/small", "b")]
        assert result.target == ("a", ("GPU-a",))
    else:
        assert not result.complete and not result.moves
        assert "b: the pod does not tolerate its taint team=b:NoSchedule" in result.reasons
    verdict = {node.node: node for node in why(snapshot, big)}["b"]
    assert (verdict.fits, verdict.reason) == (False, "TaintNotTolerated")
    assert verdict.message == "the pod does not tolerate the taint team=b:NoSchedule"


def test_the_pods_a_pending_pods_placement_counts() -> None:
    """Required pod affinity and anti-affinity terms select pods of the namespaces they list (else the pod's own; any
    under a namespaceSelector, whose namespaces' labels the plan does not read); a DoNotSchedule spread, pods of the
    pod's namespace; a null selector counts none, an unreadable one every pod; preferences and ScheduleAnyway count
    nothing."""
    web = {"matchLabels": {"app": "web"}}
    spec = {
        "affinity": {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": web, "topologyKey": HOSTNAME_LABEL},
                    {"labelSelector": web, "namespaces": ["ops", "db"], "topologyKey": "zone"},
                    {"labelSelector": web, "namespaceSelector": {}, "topologyKey": "zone"},
                    {"topologyKey": "zone"},
                ],
                "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "podAffinityTerm": {}}],
            },
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": 7}}, "topologyKey": "zone"}
                ]
            },
        },
        "topologySpreadConstraints": [
            {"maxSkew": 1, "topologyKey": "zone", "labelSelector": {"matchLabels": {"app": "batch"}}},
            {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": web},
            {"maxSkew": 1, "topologyKey": "zone"},
        ],
    }
    found = counted_pods(spec, "team-a")
    assert [(c.namespaces, str(c.selector) if c.selector else None) for c in found] == [
        ({"team-a"}, None),
        ({"team-a"}, "app=web"),
        ({"ops", "db"}, "app=web"),
        (None, "app=web"),
        ({"team-a"}, "app=batch"),
    ]


def test_pods_counted_by_a_pending_pod_move_only_between_their_nodes_cards() -> None:
    placed_web = pod_for_plan(pod_object("web", "a100-0", nodeName="a100-0"), LABELS)
    other = pod_for_plan(pod_object("db", "a100-1", nodeName="a100-1"), LABELS)
    counted = CountedPods(frozenset({"ns"}), selector_from_dict({"matchLabels": {"app": "web"}}))
    pending = pod_for_plan(pod_object("big", None), LABELS)
    kept = keep_counted_on_node(Snapshot((), (placed_web, other)), replace(pending, counts=(counted,)))
    assert [pod.nodes for pod in kept.pods] == [{"a100-0"}, None]
    assert [pod.stays for pod in kept.pods] == ["the Pending pod's required pod affinity or spread counts it", ""]
    elsewhere = CountedPods(frozenset({"team-b"}), None)
    assert (
        keep_counted_on_node(Snapshot((), (placed_web,)), replace(pending, counts=(elsewhere,))).pods[0].nodes is None
    )
    assert CountedPods(None, None).counts(other.namespace, other.labels)
    untolerated = replace(placed_web, nodes=frozenset({"a100-1"}))
    alone = Snapshot((), (untolerated,))
    assert keep_counted_on_node(alone, replace(pending, counts=(counted,))).pods[0].nodes == frozenset(), "nowhere"
    unchanged = Snapshot((), (placed_web,))
    assert keep_counted_on_node(unchanged, pending) is unchanged
