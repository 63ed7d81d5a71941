"""`why` and `plan` against the sandbox: HAMi's reason per card, and the moves that make room, read from the API.

Uses gpu-a100-1 (two 40 GiB cards). Pods HAMi "placed" are created as HAMi leaves them (bound, with allocation
annotations). Their controller is a ConfigMap: the sandbox runs a garbage collector, which keeps a dependent whose
owner exists, and no controller that would adopt or delete the pods; the planner only needs a controller owner.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from sandbox.cluster import Sandbox
from tests.cluster.cli_harness import allocated_pod, apply, get, node_register_uuids, plugin

pytestmark = pytest.mark.cluster
A100 = "gpu-a100-1"


def wait_alone(cluster: Sandbox, namespace: str) -> None:
    """Wait until no other namespace's pod is left on the node (earlier tests' namespaces are deleted lazily)."""
    deadline = time.monotonic() + 60
    while True:
        found = get(cluster, "pods", "-A", "--field-selector", f"spec.nodeName={A100}") or {}
        others = [p for p in found.get("items", []) if p["metadata"]["namespace"] != namespace]
        if not others:
            return
        assert time.monotonic() < deadline, [p["metadata"]["name"] for p in others]
        time.sleep(1)


def owner(cluster: Sandbox, namespace: str) -> dict[str, Any]:
    """A ConfigMap standing in for the pods' controller (see the module docstring)."""
    apply(cluster, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner", "namespace": namespace}})
    found = get(cluster, "configmap", "owner", "-n", namespace)
    assert found is not None
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "owner",
        "uid": found["metadata"]["uid"],
        "controller": True,
    }


def placed(name: str, namespace: str, uuid: str, mem: int, controller: dict[str, Any]) -> dict[str, Any]:
    """A pod holding `mem` MiB of one card, its spec asking the same, owned by `controller`."""
    pod = allocated_pod(name, namespace, A100, f"{uuid},NVIDIA,{mem},0:;")
    pod["metadata"]["ownerReferences"] = [controller]
    pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"] = str(mem)
    return pod


def pending(namespace: str, mem: int) -> dict[str, Any]:
    """A pod no scheduler picks up, asking one A100 card of `mem` MiB on gpu-a100-1."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "new",
            "namespace": namespace,
            "labels": {"hami.io/webhook": "ignore"},
            "annotations": {"nvidia.com/use-gputype": "A100"},
        },
        "spec": {
            "schedulerName": "hami-place-test-unscheduled",
            "nodeSelector": {"kubernetes.io/hostname": A100},
            "containers": [
                {
                    "name": "c",
                    "image": "registry.invalid/gpu-job:1",
                    "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(mem)}},
                }
            ],
        },
    }


@pytest.fixture
def fragmented(cluster: Sandbox, namespace: str) -> dict[int, str]:
    """gpu-a100-1 with 20000 MiB held on gpu-0 (p1) and 10000 MiB on gpu-1 (p2), and a Pending pod asking 32000."""
    wait_alone(cluster, namespace)
    uuids = node_register_uuids(cluster, A100)
    controller = owner(cluster, namespace)
    apply(
        cluster,
        placed("p1", namespace, uuids[0], 20000, controller),
        placed("p2", namespace, uuids[1], 10000, controller),
        pending(namespace, 32000),
    )
    return uuids


def test_why_gives_hamis_reason_for_every_card(cluster: Sandbox, namespace: str, fragmented: dict[int, str]) -> None:
    run = plugin(cluster, "why", "new", "-n", namespace, "-o", "json")
    assert run.code == 0, run.err
    result = run.json()
    assert result["pod"] == f"{namespace}/new" and result["fits"] is False
    nodes = {node["node"]: node for node in result["nodes"]}
    assert [(c["name"], c["reason"]) for c in nodes[A100]["cards"]] == [
        ("gpu-0", "CardInsufficientMemory"),
        ("gpu-1", "CardInsufficientMemory"),
    ]
    assert nodes[A100]["reason"] == "NodeFitFailed"
    assert nodes[A100]["message"] == "HAMi: 2/2 CardInsufficientMemory"
    h100 = nodes["gpu-h100-0"]
    assert h100["reason"] == "NodeNotSelected"
    assert {c["reason"] for c in h100["cards"]} == {"CardTypeMismatch"}

    table = plugin(cluster, "why", "new", "-n", namespace)
    assert table.code == 0, table.err
    assert f"{namespace}/new fits no node today" in table.out
    assert "CardInsufficientMemory" in table.out and "has 20960 MiB free, the pod asks 32000 MiB" in table.out


def test_plan_for_a_pending_pod_moves_the_smaller_pod(
    cluster: Sandbox, namespace: str, fragmented: dict[int, str]
) -> None:
    run = plugin(cluster, "plan", "--for", "new", "-n", namespace, "-o", "json")
    assert run.code == 0, run.err
    result = run.json()
    assert result["complete"] is True
    assert [(m["pod"], m["from"]["cards"], m["to"]["cards"]) for m in result["moves"]] == [
        (f"{namespace}/p2", [fragmented[1]], [fragmented[0]])
    ]
    assert result["target"] == {"node": A100, "cards": [fragmented[1]]}
    assert [c["reason"] for c in next(n for n in result["why"] if n["node"] == A100)["cards"]] == [
        "CardInsufficientMemory",
        "CardInsufficientMemory",
    ]

    table = plugin(cluster, "plan", "--for", "new", "-n", namespace)
    assert table.code == 0, table.err
    assert f"{namespace}/new fits {A100}/gpu-1 after 1 move(s)" in table.out
    assert f"{namespace}/p2" in table.out and f"{A100}/gpu-0" in table.out and "Fragmentation" in table.out


def test_plan_keeps_a_pod_its_disruption_budget_protects(
    cluster: Sandbox, namespace: str, fragmented: dict[int, str]
) -> None:
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "keep-p2", "namespace": namespace},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "p2"}}},
    }
    apply(cluster, budget)
    run = plugin(cluster, "plan", "--for", "new", "-n", namespace, "-o", "json")
    assert run.code == 0, run.err
    result = run.json()
    assert [(m["pod"], m["to"]["cards"]) for m in result["moves"]] == [(f"{namespace}/p1", [fragmented[1]])]
    assert result["target"] == {"node": A100, "cards": [fragmented[0]]}

    protect_both = json.loads(json.dumps(budget))
    protect_both["metadata"]["name"] = "keep-p1"
    protect_both["spec"]["selector"] = {"matchLabels": {"app": "p1"}}
    apply(cluster, protect_both)
    refused = plugin(cluster, "plan", "--for", "new", "-n", namespace, "-o", "json")
    assert refused.code == 1, refused.err
    assert refused.json()["complete"] is False and refused.json()["moves"] == []
    assert "PodDisruptionBudget" in " ".join(refused.json()["reasons"])


def test_plan_compact_frees_a_card_of_the_node(cluster: Sandbox, namespace: str, fragmented: dict[int, str]) -> None:
    other = node_register_uuids(cluster, "gpu-a100-0")
    controller = owner(cluster, namespace)
    spread = [placed(f"o{i}", namespace, other[i], 1000, controller) for i in (0, 1)]
    for pod in spread:
        pod["metadata"]["annotations"]["hami.io/vgpu-node"] = pod["spec"]["nodeName"] = "gpu-a100-0"
    apply(cluster, *spread)
    run = plugin(cluster, "plan", "--compact", A100, "-o", "yaml")
    assert run.code == 0, run.err
    assert f"- {fragmented[1]}" in run.out.split("freed:")[1].split(":")[0]
    result = plugin(cluster, "plan", "--compact", A100, "-o", "json").json()
    assert result["freed"] == [fragmented[1]]
    assert all(m["from"]["node"] == A100 and m["to"]["node"] == A100 for m in result["moves"])


def test_plan_and_why_refuse_bad_requests(cluster: Sandbox, namespace: str) -> None:
    no_goal = plugin(cluster, "plan", "--max-moves", "3")
    assert no_goal.code == 2 and "give exactly one goal" in no_goal.err
    two_goals = plugin(cluster, "plan", "--free-cards", "1", "--compact", A100)
    assert two_goals.code == 2
    unknown = plugin(cluster, "plan", "--compact", "no-such-node")
    assert (unknown.code, unknown.error_lines) == (
        1,
        ["error: node no-such-node not found; check the name (kubectl get nodes)"],
    ), "a name that is not found is exit 1, as status says it"
    missing = plugin(cluster, "why", "absent", "-n", namespace)
    assert (missing.code, missing.error_lines) == (
        1,
        [f"error: pod absent not found in namespace {namespace}; check the name (kubectl get pods -n {namespace})"],
    )
    # A namespace that does not exist is named as the cause (issue 25 item 10), for why and plan --for alike.
    for verb in (["why", "absent"], ["plan", "--for", "absent"]):
        elsewhere = plugin(cluster, *verb, "-n", "nope-ns")
        assert (elsewhere.code, elsewhere.error_lines) == (
            1,
            ["error: namespace nope-ns not found; check -n (kubectl get namespaces)"],
        ), verb
    plain = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "cpu", "namespace": namespace, "labels": {"hami.io/webhook": "ignore"}},
        "spec": {"schedulerName": "hami-place-test-unscheduled", "containers": [{"name": "c", "image": "x:1"}]},
    }
    apply(cluster, plain)
    cpu = plugin(cluster, "why", "cpu", "-n", namespace)
    assert cpu.code == 1 and "asks for no NVIDIA card" in cpu.err
    uuid = node_register_uuids(cluster, A100)[0]
    apply(cluster, placed("running", namespace, uuid, 1000, owner(cluster, namespace)))
    running = plugin(cluster, "plan", "--for", "running", "-n", namespace)
    assert running.code == 1 and f"already holds cards on {A100}" in running.err
