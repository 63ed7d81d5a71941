"""The cluster-info document served from per-node encoded views is the one built from scratch, after every event."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest
from kubernetes.client import ApiClient

from kubectl_hami_place.core import cluster_info
from kubectl_hami_place.core.usage import PodAllocation
from tests.cluster_views import build_cluster_info
from webhook.cache import ClusterCache, json_pieces

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def node(name: str, version: str, *, cards: int = 2, devmem: int = 40960, cordon: str = "") -> dict[str, Any]:
    register = json.dumps(
        [
            {"id": f"GPU-{name}-{i}", "index": i, "count": 4, "devmem": devmem, "devcore": 100, "type": "NVIDIA-A100"}
            | {"health": True}
            for i in range(cards)
        ]
    )
    annotations = {"hami.io/node-nvidia-register": register, **({"hami.io/device-cordon": cordon} if cordon else {})}
    return {
        "metadata": {"name": name, "resourceVersion": version, "annotations": annotations},
        "status": {
            "allocatable": {"nvidia.com/gpu": str(cards * 4)},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pod(name: str, version: str, node_name: str, devices: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "team",
            "uid": f"uid-{name}",
            "resourceVersion": version,
            "annotations": {"hami.io/vgpu-node": node_name, "hami.io/vgpu-devices-allocated": devices},
        },
        "spec": {"nodeName": node_name, "schedulerName": "hami-scheduler"},
        "status": {"phase": "Running"},
    }


def on(node_name: str, card: int, mem: int, cores: int = 10) -> str:
    return f"GPU-{node_name}-{card},NVIDIA,{mem},{cores}:;"


# Each step is one watch event as the reflector applies it: an object stored, or a (namespace, name) removed.
STEPS: list[tuple[str, Any]] = [
    ("nodes", node("gpu-0", "1")),
    ("nodes", node("gpu-1", "2")),
    ("nodes", {"metadata": {"name": "cpu-0", "resourceVersion": "3"}, "status": {}}),
    ("pods", pod("p1", "10", "gpu-0", on("gpu-0", 0, 8000))),
    ("pods", pod("p2", "11", "gpu-1", on("gpu-1", 0, 4000))),
    ("pods", pod("p3", "12", "gpu-0", on("gpu-0", 0, 2000))),
    # p1 moves to gpu-1: there it comes before p2, as in the whole view's order of pods.
    ("pods", pod("p1", "13", "gpu-1", on("gpu-1", 0, 8000))),
    ("pods", pod("p2", "14", "gpu-1", on("gpu-1", 0, 4000))),
    ("pods", pod("broken", "15", "gpu-0", "GPU-gpu-0-0,NVIDIA,x,10:;")),
    ("nodes", node("gpu-2", "4", devmem=81920)),
    ("pods", pod("broken", "16", "gpu-2", on("gpu-2", 1, 81920, 100))),
    ("pods", pod("p4", "17", "gpu-9", on("gpu-9", 0, 1000))),
    ("pods", ("team", "p3")),
    ("nodes", node("gpu-0", "5", cordon="GPU-gpu-0-1")),
    ("nodes", ("", "gpu-1")),
    ("pods", pod("p4", "18", "gpu-1", on("gpu-1", 1, 1000))),
    ("nodes", node("gpu-1", "6", cards=3)),
    ("pods", ("team", "p1")),
    ("pods", pod("p1", "19", "gpu-0", on("gpu-0", 1, 40960, 100))),
]


def apply(cache: ClusterCache, kind: str, change: Any) -> None:
    reflector = cache.nodes if kind == "nodes" else cache.pods
    if isinstance(change, tuple):
        reflector.remove(*change)
    else:
        reflector.upsert(change)


def from_scratch(cache: ClusterCache) -> bytes:
    return orjson.dumps(build_cluster_info(cache.nodes.items(), cache.pods.items(), NOW).to_dict())


def test_the_served_document_is_the_one_built_from_scratch_after_every_event() -> None:
    cache = ClusterCache(ApiClient(), "hami-scheduler")
    for kind, change in STEPS:
        apply(cache, kind, change)
        expected = from_scratch(cache)
        assert b"".join(json_pieces(cache.cluster_info_document(NOW))) == expected, (kind, change)
        assert b"".join(json_pieces(cache.cluster_info_document(NOW))) == expected, (kind, change)
    document = orjson.loads(b"".join(json_pieces(cache.cluster_info_document(NOW))))
    assert [n["name"] for n in document["nodes"]] == ["gpu-0", "gpu-1", "gpu-2"]
    assert document["warnings"] == [] and document["fragmentation"]["strandedMiB"] == sum(
        node["strandedMiB"] for node in document["fragmentation"]["nodes"]
    )


def test_a_request_builds_again_only_the_nodes_whose_object_or_pods_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[str] = []
    real: Callable[..., Any] = cluster_info.node_info

    def counting(node: dict[str, Any], allocations: Any) -> Any:
        built.append(node["metadata"]["name"])
        return real(node, allocations)

    monkeypatch.setattr("webhook.cache.node_info", counting)
    cache = ClusterCache(ApiClient(), "hami-scheduler")
    for kind, change in STEPS[:6]:
        apply(cache, kind, change)
    cache.cluster_info_document(NOW)
    assert sorted(built) == ["cpu-0", "gpu-0", "gpu-1"]
    built.clear()
    cache.cluster_info_document(NOW)
    assert built == []
    apply(cache, *STEPS[6])  # p1 moves from gpu-0 to gpu-1
    cache.cluster_info_document(NOW)
    assert sorted(built) == ["gpu-0", "gpu-1"]
    built.clear()
    apply(cache, *STEPS[7])  # p2 stored again with the same allocation
    apply(cache, "nodes", node("gpu-0", "7"))
    cache.cluster_info_document(NOW)
    assert built == ["gpu-0"]


def test_a_pod_stored_again_with_the_same_allocation_keeps_only_the_new_allocation() -> None:
    """After a relist every pod is a new object with an equal allocation: the old one must not stay beside it."""
    cache = ClusterCache(ApiClient(), "hami-scheduler")
    apply(cache, "nodes", node("gpu-0", "1"))
    apply(cache, "pods", pod("p1", "10", "gpu-0", on("gpu-0", 0, 8000)))
    apply(cache, "pods", pod("p1", "11", "gpu-0", on("gpu-0", 0, 8000)))
    stored, kept, _ = cache._allocations[("team", "p1")]
    assert cache._on_node["gpu-0"][("team", "p1")][1] is kept
    assert isinstance(kept, PodAllocation) and kept.uid is stored["metadata"]["uid"], "of the pod stored now"
