"""`status` against the sandbox: per-card usage exactly as HAMi counts it, pods per card, placements, the source.

Uses gpu-h100-0's gpu-3 and gpu-4, which no other plugin test touches.
"""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from kubectl_hami_place.kube import client as kube_client
from kubectl_hami_place.kube import cluster_reads, list_body
from kubectl_hami_place.kube.client import connect
from kubectl_hami_place.kube.cluster_reads import list_nodes, list_pods
from sandbox import gpu_nodes
from sandbox.cluster import Sandbox, primary_address, wait_for
from tests.cluster.cli_harness import (
    PLUGIN,
    allocated_pod,
    apply,
    node_register_uuids,
    plugin,
    read_until,
    route_webhook_service,
)
from tests.cluster_views import build_cluster_info
from tests.http_stand_in import answering_gets

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
        # No webhook runs here to acknowledge the placement: pin need not wait for one (5 s).
        "--ack-timeout",
        "0",
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


def test_status_shows_only_the_nodes_with_the_labels_and_their_placements(cluster: Sandbox, namespace: str) -> None:
    """On a cluster of several pools an operator looks at one: the API server picks the nodes by label, as `kubectl
    get nodes -l` does, and the placements and fragmentation shown are that pool's."""
    pool = "test.hami-place/pool"
    for name, node in (("in-pool", H100), ("elsewhere", "gpu-a100-0")):
        pinned = plugin(
            cluster,
            *("pin", "-n", namespace, "-l", f"app={name}", "--node", node, "--gpu", "gpu-0"),
            *("--request-memory", "1024", "--name", name, "--ack-timeout", "0"),
        )
        assert pinned.code == 0, pinned.err
    cluster.kubectl("label", "node", H100, f"{pool}={namespace}")
    try:
        run = plugin(cluster, "status", "-n", namespace, "-l", f"{pool}={namespace}", "-o", "json")
        assert run.code == 0, run.err
        result = run.json()
        assert [n["name"] for n in result["nodes"]] == [H100]
        assert [n["name"] for n in result["fragmentation"]["nodes"]] == [H100]
        assert [p["metadata"]["name"] for p in result["placements"]] == ["in-pool"]
        others = plugin(cluster, "status", "-n", namespace, "-l", f"{pool}!={namespace}", "-o", "json").json()
        assert H100 not in [n["name"] for n in others["nodes"]] and "gpu-a100-0" in [n["name"] for n in others["nodes"]]
        assert [p["metadata"]["name"] for p in others["placements"]] == ["elsewhere"]
        none = plugin(cluster, "status", "-n", namespace, "-l", f"{pool}=nothing")
        assert none.code == 0, none.err
        assert none.out.splitlines()[0] == f"No HAMi GPU node has the labels {pool}=nothing."
    finally:
        cluster.kubectl("label", "node", H100, f"{pool}-")


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
    assert run.error_lines == ["error: node gpu-none not found; check the name (kubectl get nodes)"]


@pytest.fixture
def cluster_info_server() -> Iterator[tuple[str, int, dict[str, Any]]]:
    """A stand-in for the webhook's HTTP API serving one fixed cluster-info document on a non-loopback address."""
    address = primary_address()
    if address is None:
        pytest.skip("no non-loopback IPv4 address to serve on; the API server does not proxy to loopback")
    document = build_cluster_info(
        [
            {
                "metadata": {
                    "name": "gpu-remote-0",
                    "annotations": {
                        gpu_nodes.REGISTER_ANNOTATION: gpu_nodes.register(
                            [
                                {
                                    "id": "GPU-remote-0",
                                    "index": 0,
                                    "count": 4,
                                    "devmem": 24576,
                                    "devcore": 100,
                                    "type": "NVIDIA-L4",
                                    "numa": 0,
                                    "mode": "hami-core",
                                    "health": True,
                                }
                            ]
                        )
                    },
                },
                "status": {"allocatable": {"nvidia.com/gpu": "4"}, "conditions": [{"type": "Ready", "status": "True"}]},
            }
        ],
        [],
        datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
    ).to_dict()
    body = json.dumps(document).encode()
    with answering_gets(lambda path: (200, body) if path == "/api/v1/cluster-info" else (404, b"{}"), address) as url:
        yield address, urlsplit(url).port or 0, document


def test_status_reads_the_webhook_through_the_service_proxy(
    cluster: Sandbox, namespace: str, cluster_info_server: tuple[str, int, dict[str, Any]]
) -> None:
    address, port, document = cluster_info_server
    route_webhook_service(cluster, namespace, address, port)
    run = plugin(cluster, "status", "-o", "json")
    assert run.code == 0, run.err
    result = run.json()
    assert result["fromWebhook"] is True, result["source"]
    assert result["source"] == f"webhook {namespace}/hami-place:8083 (/api/v1/cluster-info)"
    assert result["nodes"] == document["nodes"]
    assert result["generatedAt"] == "2026-01-02T03:04:05Z"
    table = plugin(cluster, "status")
    assert table.out.splitlines()[-1] == f"Source: webhook {namespace}/hami-place:8083 (/api/v1/cluster-info)"
    assert "gpu-remote-0" in table.out and "NVIDIA-L4" in table.out


def test_status_computed_from_the_api_reads_pods_batch_by_batch_and_counts_them_all(
    cluster: Sandbox, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    uuids = node_register_uuids(cluster, H100)
    apply(
        cluster,
        *(allocated_pod(f"paged-{i}", namespace, H100, f"{uuids[3]},NVIDIA,100,0:;") for i in range(3)),
    )
    kube = connect(str(cluster.kubeconfig))
    batches: list[int] = []

    def counted(*args: Any, **kwargs: Any) -> Iterator[list[dict[str, Any]]]:
        for batch in kube_client.list_batches(*args, **kwargs):
            if kwargs["what"] == "list pods in all namespaces":
                batches.append(len(batch))
            yield batch

    def whole() -> tuple[Any, int]:
        pods = list_pods(kube, None)
        return build_cluster_info(list_nodes(kube), pods, datetime.now(UTC)), len(pods)

    def quiet_read() -> tuple[Any, Any, int] | None:
        """The paged read and the whole one, when the cluster did not change around the paged read (these pods may
        still be starting, and earlier tests' pods still going)."""
        batches.clear()
        before, count = whole()
        with monkeypatch.context() as patched:
            patched.setattr(list_body, "LIST_BATCH_BYTES", 1)
            patched.setattr(cluster_reads, "list_batches", counted)
            patched.setattr(cluster_reads, "find_webhook_services", lambda _kube: [])
            paged = cluster_reads.read_cluster_info(kube).info
        after, count_after = whole()
        same = (before.nodes, before.warnings, count) == (after.nodes, after.warnings, count_after)
        return (paged, before, count) if same else None

    paged, read_whole, pod_count = wait_for(quiet_read, "a paged read with nothing changed around it", 120)
    assert paged.nodes == read_whole.nodes and paged.warnings == read_whole.warnings
    assert {"paged-0", "paged-1", "paged-2"} <= {p.name for p in paged.node(H100).card(uuids[3]).pods}  # type: ignore[union-attr]
    assert len(batches) > 1 and sum(batches) == pod_count, batches


def test_status_as_a_user_who_may_not_list_pods_says_which_permission_is_missing(cluster: Sandbox) -> None:
    run = plugin(cluster, "status", "--as", "hami-place-nobody")
    assert run.code == 1, (run.code, run.err)
    assert "forbidden" in run.err and "list pods in all namespaces" in run.err, run.err


def test_summary_counts_what_the_per_node_view_shows(cluster: Sandbox, namespace: str) -> None:
    uuids = node_register_uuids(cluster, H100)
    apply(cluster, allocated_pod("summed", namespace, H100, f"{uuids[3]},NVIDIA,4096,0:;"))

    def quiet_read() -> tuple[dict[str, Any], dict[str, Any]] | None:
        """The per-node view and the summary, when the view did not change around the summary's read (earlier
        tests' namespaces are still being deleted, and their pods with them)."""
        before = plugin(cluster, "status", "-o", "json").json()
        run = plugin(cluster, "status", "--summary", "-o", "json")
        assert run.code == 0, run.err
        after = plugin(cluster, "status", "-o", "json").json()
        same = before["fragmentation"] == after["fragmentation"] and before["nodes"] == after["nodes"]
        return (before, run.json()["summary"]) if same else None

    detail, summary = wait_for(quiet_read, "two reads of status -o json with nothing changed between", 120)
    types: dict[str, int] = {}
    for node in detail["nodes"]:
        for found in node["cards"]:
            types[found["type"]] = types.get(found["type"], 0) + 1
    assert {row["type"]: row["cards"] for row in summary["cardTypes"]} == types
    fragmentation = detail["fragmentation"]
    assert (summary["total"]["freeMiB"], summary["total"]["strandedMiB"]) == (
        fragmentation["freeMiB"],
        fragmentation["strandedMiB"],
    )
    assert summary["total"]["wholeCardsFree"] == fragmentation["wholeCardsFree"]
    worst = {node["name"]: node["strandedMiB"] for node in summary["mostFragmented"]}
    assert worst[H100] == next(n["strandedMiB"] for n in fragmentation["nodes"] if n["name"] == H100) > 0
    table = plugin(cluster, "status", "--summary")
    assert table.out.splitlines()[0].startswith(f"{len(detail['nodes'])} GPU nodes (")
    assert "Most fragmented nodes" in table.out and table.out.splitlines()[-1].startswith("Source: ")


def _watch(cluster: Sandbox, *args: str, stdout: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            str(PLUGIN),
            "status",
            "--summary",
            "--watch",
            "--interval",
            "1",
            *args,
            "--kubeconfig",
            str(cluster.kubeconfig),
        ],
        stdout=stdout,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        # A test run started in the background by a non-interactive shell inherits SIGINT ignored; Ctrl-C on a
        # terminal is what this stands for.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # noqa: PLW1509
    )


def test_watch_streams_documents_and_ends_cleanly_on_ctrl_c(cluster: Sandbox) -> None:
    proc = _watch(cluster, "-o", "yaml", stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    seen = read_until(proc.stdout.fileno(), lambda out: out.count(b"\n---\n") >= 2)
    proc.send_signal(signal.SIGINT)
    code = proc.wait(timeout=30)
    err = proc.stderr.read().decode()
    assert code == 0 and "Traceback" not in err and "error" not in err, (code, err)
    documents = [doc for doc in yaml.safe_load_all(seen.decode().rsplit("\n---\n", 1)[0]) if doc]
    assert len(documents) >= 2 and all(doc["summary"]["nodes"] >= 3 for doc in documents)


def test_watch_redraws_in_place_on_a_terminal(cluster: Sandbox) -> None:
    main, terminal = pty.openpty()
    proc = _watch(cluster, stdout=terminal)
    os.close(terminal)
    assert proc.stderr is not None
    seen = read_until(main, lambda out: out.count(b"Every 1s: kubectl hami-place status") >= 2)
    proc.send_signal(signal.SIGINT)
    code = proc.wait(timeout=30)
    os.close(main)
    err = proc.stderr.read().decode()
    assert code == 0 and "Traceback" not in err, (code, err)
    assert seen.count(b"Every 1s: kubectl hami-place status") >= 2
    # The second frame moves the cursor back up over the first instead of printing below it.
    assert b"\x1b[1A" in seen or b"\x1b[2K" in seen
    assert seen.count(b"Card types") >= 2
