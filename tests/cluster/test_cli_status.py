"""`status` against the sandbox: per-card usage exactly as HAMi counts it, pods per card, placements, the source.

Uses gpu-h100-0's gpu-3 and gpu-4, which no other plugin test touches.
"""

from __future__ import annotations

from typing import Any

import pytest

from sandbox.cluster import Sandbox
from tests.cluster.cli_harness import allocated_pod, apply, node_register_uuids, plugin

pytestmark = pytest.mark.cluster
H100 = "gpu-h100-0"


def card(result: dict[str, Any], node: str, index: int) -> dict[str, Any]:
    [node_info] = [n for n in result["nodes"] if n["name"] == node]
    [found] = [c for c in node_info["cards"] if c["index"] == index]
    return found


def mine(card_info: dict[str, Any], namespace: str) -> dict[str, tuple[int, int, int]]:
    return {p["name"]: (p["memory"], p["cores"], p["slots"]) for p in card_info["pods"] if p["namespace"] == namespace}


def test_status_json_counts_usage_as_hami_does(cluster: Sandbox, namespace: str) -> None:
    uuids = node_register_uuids(cluster, H100)
    u3, u4 = uuids[3], uuids[4]
    apply(
        cluster,
        allocated_pod("one", namespace, H100, f"{u3},NVIDIA,3000,30:;"),
        allocated_pod(
            "two", namespace, H100, f"{u3},NVIDIA,2000,10:;{u3},NVIDIA,1000,0:{u4},NVIDIA,1000,0:;", containers=2
        ),
    )
    run = plugin(cluster, "status", H100, "-o", "json")
    assert run.code == 0, run.err
    result = run.json()
    assert [n["name"] for n in result["nodes"]] == [H100]
    assert result["source"].startswith(("computed from the API server (", "webhook "))

    third, fourth = card(result, H100, 3), card(result, H100, 4)
    assert third["uuid"] == u3 and fourth["uuid"] == u4
    # Per card, HAMi sums the app containers: memory and cores add up, each container takes a slot.
    assert mine(third, namespace) == {"one": (3000, 30, 1), "two": (3000, 10, 2)}
    assert mine(fourth, namespace) == {"two": (1000, 0, 1)}
    for info in (third, fourth):
        pods = info["pods"]
        assert info["memory"]["used"] == sum(p["memory"] for p in pods)
        assert info["cores"]["used"] == sum(p["cores"] for p in pods)
        assert info["slots"]["used"] == sum(p["slots"] for p in pods)
        assert info["memory"]["total"] == 81920 and info["slots"]["total"] == 10 and info["cores"]["total"] == 100
        assert info["memory"]["free"] == 81920 - info["memory"]["used"]
    others3 = [p for p in third["pods"] if p["namespace"] != namespace]
    assert third["memory"]["used"] == 6000 + sum(p["memory"] for p in others3)
    fragmentation = result["fragmentation"]
    assert fragmentation["nodes"][0]["name"] == H100
    assert fragmentation["largestRequestMiB"] <= 81920


def test_status_table_shows_cards_pods_placements_and_source(cluster: Sandbox, namespace: str) -> None:
    u4 = node_register_uuids(cluster, H100)[4]
    apply(cluster, allocated_pod("viewer", namespace, H100, f"{u4},NVIDIA,4096,25:;"))
    pinned = plugin(
        cluster,
        "pin",
        "-n",
        namespace,
        "-l",
        "app=next",
        "--node",
        H100,
        "--gpu",
        "gpu-4",
        "--request-memory",
        "1024",
        "--name",
        "shown",
    )
    assert pinned.code == 0, pinned.err
    run = plugin(cluster, "status", H100, "-n", namespace)
    assert run.code == 0, run.err
    lines = run.out.splitlines()
    assert lines[0].startswith(f"Node {H100}: Ready, schedulable, nvidia.com/gpu 80, 8 cards")
    assert lines[1].split()[:6] == ["GPU", "MODEL", "UUID", "NUMA", "HEALTH", "MEMORY"]
    [row] = [line for line in lines if line.startswith("gpu-4 ")]
    assert u4 in row and "healthy" in row and f"{namespace}/viewer (4096 MiB, 25%)" in row
    [placement_row] = [line for line in lines if line.startswith("shown ")]
    assert H100 in placement_row and "Pending" in placement_row and "gpu-4" in placement_row
    assert any(line.startswith("Fragmentation") for line in lines)
    assert lines[-1].startswith("Source: ")
    assert "\x1b[" not in run.out


def test_unreachable_webhook_falls_back_to_the_api_and_says_so(cluster: Sandbox, namespace: str) -> None:
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "hami-place-webhook",
            "namespace": namespace,
            "labels": {"app.kubernetes.io/name": "gpu-descheduler-webhook"},
        },
        "spec": {"ports": [{"name": "api", "port": 8083, "targetPort": 8083}]},
    }
    apply(cluster, service)
    run = plugin(cluster, "status", H100, "-o", "json")
    assert run.code == 0, run.err
    result = run.json()
    assert result["fromWebhook"] is False
    assert result["source"].startswith("computed from the API server (webhook ")
    assert "did not answer" in result["source"]
    assert card(result, H100, 0)["memory"]["total"] == 81920


def test_unknown_node_is_an_error(cluster: Sandbox) -> None:
    run = plugin(cluster, "status", "gpu-none")
    assert run.code == 1
    assert run.error_lines == [
        "error: gpu-none: not a HAMi GPU node (no card register and no nvidia.com/gpu); "
        "list the GPU nodes with kubectl hami-place status"
    ]
