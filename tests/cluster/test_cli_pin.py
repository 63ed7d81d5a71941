"""`pin` against the sandbox: every refusal with its one line and exit code, and exactly what a success creates.

Cards used here (gpu-h100-0's gpu-1, gpu-2, gpu-5) are not used by other plugin tests, so terminating pods of
another test never change the numbers.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.cluster import Sandbox
from sandbox.webhook import Webhook, start
from tests.cluster.cli_harness import (
    Run,
    allocated_pod,
    apply,
    card_uuids,
    custom_node,
    declining,
    placements,
    plugin,
)

pytestmark = pytest.mark.cluster
H100 = "gpu-h100-0"


@pytest.fixture
def odd_nodes(cluster: Sandbox, namespace: str) -> Iterator[tuple[str, str]]:
    """A node without a register and a node whose only card is unhealthy; removed afterwards."""
    bare, sick = f"{namespace}-bare", f"{namespace}-sick"
    register = json.dumps(
        [{"id": "GPU-sick-0", "index": 0, "count": 10, "devmem": 40960, "devcore": 100, "type": "NVIDIA-A100"}]
    )
    apply(cluster, custom_node(bare, None), custom_node(sick, register))
    yield bare, sick
    cluster.kubectl("delete", "node", bare, sick, "--wait=false", check=False)


def pin(cluster: Sandbox, namespace: str, selector: str, *args: str) -> Run:
    """`kubectl hami-place pin -n NAMESPACE -l SELECTOR ARGS` against the sandbox, where no webhook runs (these
    tests check what pin writes): it does not wait for an acknowledgement, unless ARGS give --ack-timeout."""
    wait = () if "--ack-timeout" in args else ("--ack-timeout", "0")
    return plugin(cluster, "pin", "-n", namespace, "-l", selector, *wait, *args)


def test_unknown_node_is_refused(cluster: Sandbox, namespace: str) -> None:
    run = pin(cluster, namespace, "app=x", "--node", "nope-0", "--gpu", "gpu-0", "--request-memory", "1000")
    assert run.code == 1, "not found exits 1, as the README says (issue 25 item 10)"
    assert run.error_lines == ["error: node nope-0 not found; check the name (kubectl get nodes)"]
    assert placements(cluster, namespace) == []


def test_node_without_register_and_unhealthy_card_are_refused(
    cluster: Sandbox, namespace: str, odd_nodes: tuple[str, str]
) -> None:
    bare, sick = odd_nodes
    run = pin(cluster, namespace, "app=x", "--node", bare, "--gpu", "gpu-0", "--request-memory", "1000")
    assert run.code == 3
    assert run.error_lines == [
        f"error: node {bare} has no hami.io/node-nvidia-register annotation: HAMi's device plugin is not on it; "
        "pin to a node where HAMi's device plugin runs"
    ]

    run = pin(cluster, namespace, "app=x", "--node", sick, "--gpu", "gpu-0", "--request-memory", "1000")
    assert run.code == 3
    assert run.error_lines == [
        f"error: gpu-0 on {sick}: CardUnhealthy: the card is unhealthy in the node's register; "
        f"pick another card (kubectl hami-place status {sick})"
    ]
    assert placements(cluster, namespace) == []


def test_unknown_card_is_refused(cluster: Sandbox, namespace: str) -> None:
    run = pin(
        cluster,
        namespace,
        "app=x",
        "--node",
        "gpu-a100-0",
        "--gpu",
        "gpu-0",
        "--gpu",
        "gpu-7",
        "--request-memory",
        "1000",
    )
    assert run.code == 3
    assert run.error_lines == [
        "error: gpu-7 on gpu-a100-0: UnknownCard: node gpu-a100-0 has no card with index 7; it has gpu-0, gpu-1; "
        "list the node's cards (kubectl hami-place status gpu-a100-0)"
    ]


def test_card_without_room_is_refused_with_the_numbers(cluster: Sandbox, namespace: str) -> None:
    uuid = card_uuids(H100)[1]
    apply(cluster, allocated_pod("filler", namespace, H100, f"{uuid},NVIDIA,79872,50:;"))
    run = pin(
        cluster,
        namespace,
        "app=x",
        "--node",
        H100,
        "--gpu",
        "gpu-1",
        "--request-memory",
        "4096",
        "--request-cores",
        "10",
    )
    assert run.code == 3
    assert run.error_lines == [
        f"error: gpu-1 on {H100}: CardInsufficientMemory: 2048 MiB free, the pod asks 4096 MiB; "
        f"pick another card (kubectl hami-place status {H100}) or add --evict POD"
    ]
    assert placements(cluster, namespace) == []


def test_evict_that_frees_too_little_is_refused_and_one_that_frees_enough_passes(
    cluster: Sandbox, namespace: str
) -> None:
    uuid = card_uuids(H100)[2]
    apply(
        cluster,
        allocated_pod("big", namespace, H100, f"{uuid},NVIDIA,70000,40:;"),
        allocated_pod("small", namespace, H100, f"{uuid},NVIDIA,8000,10:;"),
    )
    args = (
        "-n",
        namespace,
        "-l",
        "app=next",
        "--node",
        H100,
        "--gpu",
        "gpu-2",
        "--request-memory",
        "20000",
        "--request-cores",
        "20",
    )
    run = plugin(cluster, "pin", *args, "--evict", "small")
    assert run.code == 3
    assert run.error_lines == [
        f"error: gpu-2 on {H100}: CardInsufficientMemory: 11920 MiB free, the pod asks 20000 MiB; "
        f"it does not fit even once small is evicted; pick another card (kubectl hami-place status {H100}) "
        "or evict another pod"
    ]
    assert placements(cluster, namespace) == []

    # Arranging an eviction asks first; without a terminal only --yes confirms it, and nothing is written before.
    refused = plugin(cluster, "pin", *args, "--evict", "big")
    assert (refused.code, refused.error_lines) == (
        2,
        [
            f"error: refusing to pin, then evict pod big in namespace {namespace} without confirmation; "
            "pass --yes to confirm"
        ],
    )
    declined = declining(cluster, "pin", *args, "--evict", "big")
    assert (declined.code, declined.error_lines) == (1, ["error: not confirmed; nothing was created"])
    assert placements(cluster, namespace) == []

    run = plugin(cluster, "pin", *args, "--evict", "big", "--yes", "-o", "json")
    assert run.code == 0, run.err
    result = run.json()
    assert result["cards"] == [
        {
            "ref": "gpu-2",
            "uuid": uuid,
            "index": 2,
            "model": "NVIDIA-H100-80GB-HBM3",
            "memoryMiB": 20000,
            "cores": 20,
            "fitsNow": False,
            "fitsAfterEviction": True,
        }
    ]
    [stored] = placements(cluster, namespace)
    assert stored["spec"]["evictPod"] == "big"


def test_missing_evict_pod_is_refused(cluster: Sandbox, namespace: str) -> None:
    run = pin(
        cluster,
        namespace,
        "app=x",
        "--node",
        H100,
        "--gpu",
        "gpu-5",
        "--request-memory",
        "1000",
        "--evict",
        "ghost",
    )
    assert run.code == 1
    assert run.error_lines == [
        f"error: pod ghost (--evict) not found in namespace {namespace}; "
        f"check the name (kubectl get pods -n {namespace})"
    ]
    elsewhere = pin(cluster, "nope-ns", "app=x", "--node", H100, "--gpu", "gpu-5", "--evict", "ghost")
    assert (elsewhere.code, elsewhere.error_lines) == (
        1,
        ["error: namespace nope-ns not found; check -n (kubectl get namespaces)"],
    )


def test_evict_pod_on_another_node_only_warns(cluster: Sandbox, namespace: str) -> None:
    uuid = card_uuids("gpu-a100-1")[0]
    apply(cluster, allocated_pod("elsewhere", namespace, "gpu-a100-1", f"{uuid},NVIDIA,1000,0:;"))
    run = pin(
        cluster,
        namespace,
        "app=x",
        "--node",
        H100,
        "--gpu",
        "gpu-5",
        "--request-memory",
        "1000",
        "--evict",
        "elsewhere",
        "--yes",
    )
    assert run.code == 0, run.err
    assert f"warning: pod elsewhere runs on gpu-a100-1, not on {H100}; evicting it frees nothing there" in (
        run.warning_lines
    )


def test_success_creates_exactly_the_placement(cluster: Sandbox, namespace: str) -> None:
    run = pin(
        cluster,
        namespace,
        "app=train,tier in (gpu)",
        "--node",
        H100,
        "--gpu",
        "gpu-5/25",
        "--request-cores",
        "10",
        "--req-id",
        "req-12345",
        "--name",
        "train-pin",
    )
    assert run.code == 0, run.err
    assert f"hamipodplacement {namespace}/train-pin created (reqID req-12345)" in run.out
    assert "20480 MiB" in run.out
    [stored] = placements(cluster, namespace)
    assert stored["metadata"]["name"] == "train-pin"
    assert stored["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "kubectl-hami-place"}
    assert stored["spec"] == {
        "reqID": "req-12345",
        "podSelector": {
            "matchLabels": {"app": "train"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["gpu"]}],
        },
        "nodeName": H100,
        "gpuDevices": ["gpu-5/25"],
    }
    assert "status" not in stored


def test_generated_req_id_and_name(cluster: Sandbox, namespace: str) -> None:
    run = pin(
        cluster,
        namespace,
        "app=gen",
        "--node",
        H100,
        "--gpu",
        "gpu-5",
        "--request-memory",
        "1000",
        "-o",
        "json",
    )
    assert run.code == 0, run.err
    placement = run.json()["placement"]
    req_id = placement["spec"]["reqID"]
    assert len(req_id) >= 8
    assert placement["metadata"]["name"] == f"pin-{req_id}"
    assert [p["metadata"]["name"] for p in placements(cluster, namespace)] == [f"pin-{req_id}"]


@pytest.mark.parametrize("mode", ["client", "server"])
def test_dry_run_creates_nothing(cluster: Sandbox, namespace: str, mode: str) -> None:
    run = pin(
        cluster,
        namespace,
        "app=dry",
        "--node",
        H100,
        "--gpu",
        "gpu-5",
        "--request-memory",
        "1000",
        f"--dry-run={mode}",
        "-o",
        "json",
    )
    assert run.code == 0, run.err
    assert run.json()["dryRun"] == mode
    assert run.json()["placement"]["spec"]["nodeName"] == H100
    assert placements(cluster, namespace) == []


def test_other_pending_placements_warn(cluster: Sandbox, namespace: str) -> None:
    """A100 node gpu-a100-0 is used by no other plugin test, so every warning here comes from this test."""
    a100 = "gpu-a100-0"

    def pin_to(app: str, card: str, name: str) -> object:
        run = pin(
            cluster,
            namespace,
            app,
            "--node",
            a100,
            "--gpu",
            card,
            "--request-memory",
            "1000",
            "--name",
            name,
        )
        assert run.code == 0, run.err
        return run

    first = pin_to("app=train", "gpu-0", "first")
    assert first.warning_lines == []
    second = pin_to("app in (train,eval)", "gpu-1", "second")
    assert second.warning_lines == [
        "warning: placement first (Pending, -l app=train) may match the same pods as -l app in (eval,train); "
        "the first matching pod claims only one of them"
    ]
    third = pin_to("app=other", "gpu-0", "third")
    assert third.warning_lines == [
        f"warning: placement {namespace}/first (Pending) also pins a pod to gpu-0 on {a100}; that pod does not "
        "exist yet, so its share was not counted"
    ]


def test_bad_selector_and_bad_card_reference_are_usage_errors(cluster: Sandbox, namespace: str) -> None:
    run = pin(cluster, namespace, "app b", "--node", H100, "--gpu", "gpu-0")
    assert run.code == 2
    assert len(run.error_lines) == 1 and run.error_lines[0].startswith("error: bad selector -l 'app b'")
    run = pin(cluster, namespace, "app=x", "--node", H100, "--gpu", "card-0")
    assert run.code == 2
    assert len(run.error_lines) == 1 and run.error_lines[0].startswith("error: bad --gpu 'card-0'")
    assert placements(cluster, namespace) == []


def test_request_comes_from_the_matching_controller(cluster: Sandbox, namespace: str) -> None:
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "trainer", "namespace": namespace},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": "trainer"}},
            "template": {
                "metadata": {"labels": {"app": "trainer"}},
                "spec": {
                    "nodeSelector": {"hami-place.test/pool": "elsewhere"},
                    "containers": [
                        {
                            "name": "main",
                            "image": "registry.invalid/train:1",
                            "resources": {
                                "requests": {"cpu": "1000"},
                                "limits": {
                                    "nvidia.com/gpu": "2",
                                    "nvidia.com/gpumem": "6000",
                                    "nvidia.com/gpucores": "30",
                                },
                            },
                        }
                    ],
                },
            },
        },
    }
    apply(cluster, deployment)
    one_card = pin(cluster, namespace, "app=trainer", "--node", H100, "--gpu", "gpu-5")
    assert one_card.code == 3
    assert one_card.error_lines == [
        "error: Deployment trainer: container main asks 2 card(s) (nvidia.com/gpu) but the placement names 1; "
        "give one --gpu per card"
    ]
    run = pin(
        cluster,
        namespace,
        "app=trainer",
        "--node",
        H100,
        "--gpu",
        "gpu-5",
        "--gpu",
        "gpu-7",
        "-o",
        "json",
    )
    assert run.code == 0, run.err
    assert (
        f"warning: the pods of Deployment trainer: the node selection excludes node {H100}, so the webhook will not "
        "pin them there (kube-scheduler would leave them Pending); pin another node or change the pods' tolerations "
        "or node selection"
    ) in run.err, run.err
    # Nothing is evicted for it, and pods leave nodes: the node's CPU short is a warning, not a refusal.
    assert (
        f"warning: the pods of Deployment trainer: node {H100}: kube-scheduler: Insufficient cpu (the node has "
    ) in run.err, run.err
    assert (
        "the pod asks 1000000m, 0 MiB), so they would wait Pending there until room is freed; pin another node, add "
        "--evict POD, or lower their requests"
    ) in run.err, run.err
    result = run.json()
    assert result["request"] == "Deployment trainer"
    assert [(c["ref"], c["memoryMiB"], c["cores"]) for c in result["cards"]] == [
        ("gpu-5", 6000, 30),
        ("gpu-7", 6000, 30),
    ]


def test_unknown_request_asks_for_flags(cluster: Sandbox, namespace: str) -> None:
    run = pin(cluster, namespace, "app=nobody", "--node", H100, "--gpu", "gpu-5")
    assert run.code == 2
    assert run.error_lines == [
        f"error: no Deployment, ReplicaSet, StatefulSet or Job in namespace {namespace} has pods matching "
        "-l app=nobody, so the pod's GPU request is unknown; pass --request-memory MiB and --request-cores PCT"
    ]


def test_without_a_webhook_pin_warns_that_nothing_acknowledged_it(cluster: Sandbox, namespace: str) -> None:
    # Issue 25 item 10: the placement stayed Pending with no word when no hami-place webhook ran.
    run = pin(
        cluster,
        namespace,
        "app=alone",
        "--node",
        H100,
        "--gpu",
        "gpu-2",
        "--request-memory",
        "1000",
        "--name",
        "alone",
        "--ack-timeout",
        "1",
    )
    assert run.code == 0, run.err
    assert run.warning_lines == [
        f"warning: no hami-place webhook acknowledged placement {namespace}/alone within 1s: it is stored, but no pod "
        "is pinned until the webhook runs (install its chart; kubectl hami-place version shows it)"
    ]
    assert [p["metadata"]["name"] for p in placements(cluster, namespace)] == ["alone"]


def test_with_the_webhook_running_pin_waits_for_its_acknowledgement_and_says_nothing(
    cluster: Sandbox, namespace: str, webhooks: list[Webhook], tmp_path: Path
) -> None:
    webhooks.append(start(cluster, tmp_path))
    run = pin(
        cluster,
        namespace,
        "app=seen",
        "--node",
        H100,
        "--gpu",
        "gpu-2",
        "--request-memory",
        "1000",
        "--name",
        "seen",
        "--ack-timeout",
        "10",
    )
    assert run.code == 0, run.err
    # Other tests' Pending placements on gpu-2 may be warned of (their namespaces go away asynchronously): none of
    # the warnings may be about the acknowledgement.
    assert not [line for line in run.warning_lines if "acknowledged" in line], run.warning_lines
    [stored] = placements(cluster, namespace)
    assert stored["status"]["observedGeneration"] == stored["metadata"]["generation"]
