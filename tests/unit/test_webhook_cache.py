"""The cache's derived views: nodes read through by name, placements parsed once per stored version."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client import ApiClient

from kubectl_hami_place.core import placement as placement_module
from webhook.cache import ClusterCache


def placement(name: str, version: str, namespace: str = "team", node: str = "gpu-0") -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.hami.placement.com/v1alpha1",
        "kind": "HamiPodPlacement",
        "metadata": {"name": name, "namespace": namespace, "resourceVersion": version},
        "spec": {
            "reqID": f"req-{name}",
            "podSelector": {"matchLabels": {"app": "x"}},
            "nodeName": node,
            "gpuDevices": ["gpu-0"],
        },
    }


@pytest.fixture
def cache() -> ClusterCache:
    # Nothing is listed: the reflectors are filled by hand with what a list or a watch would store.
    return ClusterCache(ApiClient(), "hami-scheduler")


def test_nodes_by_name_reads_the_store_as_it_is(cache: ClusterCache) -> None:
    nodes = cache.nodes_by_name()
    cache.nodes.upsert({"metadata": {"name": "gpu-0", "resourceVersion": "1"}})
    assert nodes["gpu-0"]["metadata"]["name"] == "gpu-0"
    assert "gpu-1" not in nodes and nodes.get("gpu-1") is None
    assert list(nodes) == ["gpu-0"] and len(nodes) == 1
    cache.nodes.remove("", "gpu-0")
    assert "gpu-0" not in nodes


def test_placements_are_parsed_once_per_version_and_follow_the_store(
    cache: ClusterCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    parsed: list[str] = []
    real = placement_module.placement_from_object

    def counting(obj: object) -> Any:
        parsed.append(obj["metadata"]["name"])  # type: ignore[index]
        return real(obj)

    monkeypatch.setattr("webhook.cache.placement_from_object", counting)
    broken = placement("broken", "3")
    del broken["spec"]["nodeName"]
    for obj in (placement("a", "1"), placement("b", "2", "other"), broken):
        cache.placements.upsert(obj)
    assert [p.name for p in cache.parsed_placements("team")] == ["a"]
    assert [p.name for p in cache.parsed_placements("team")] == ["a"]
    assert sorted(parsed) == ["a", "broken"]
    cache.placements.upsert(placement("a", "5", node="gpu-9"))
    assert [(p.name, p.spec.node_name) for p in cache.parsed_placements("team")] == [("a", "gpu-9")]
    assert sorted(p.name for p in cache.parsed_placements()) == ["a", "b"]
    assert sorted(parsed) == ["a", "a", "b", "broken"]
    cache.placements.remove("team", "a")
    assert cache.parsed_placements("team") == []
    assert [p.name for p in cache.parsed_placements()] == ["b"]


def claimed_pod(name: str, version: str, token: str | None, namespace: str = "team") -> dict[str, Any]:
    notes = {"scheduling.hami.placement.com/claim": token} if token else {}
    return {"metadata": {"name": name, "namespace": namespace, "resourceVersion": version, "annotations": notes}}


def scan(cache: ClusterCache) -> dict[tuple[str, str], dict[str, Any]]:
    """What a pass over every stored pod finds: the index must always agree with it."""
    found = {}
    for pod in cache.pods.items():
        token = pod["metadata"]["annotations"].get("scheduling.hami.placement.com/claim")
        if token:
            found[(pod["metadata"]["namespace"], token)] = pod
    return found


def test_pods_by_claim_follows_every_pod_event(cache: ClusterCache) -> None:
    steps: list[Any] = [
        claimed_pod("a", "1", "t1"),
        claimed_pod("b", "2", None),
        claimed_pod("c", "3", "t1", "other"),
        claimed_pod("a", "4", "t2"),  # the token changes
        claimed_pod("d", "5", "t2"),  # a copy carrying the same token
        ("team", "d"),
        claimed_pod("b", "6", "t3"),
        claimed_pod("b", "7", None),  # the token goes
        ("team", "a"),
    ]
    seen = []
    for step in steps:
        if isinstance(step, tuple):
            cache.pods.remove(*step)
        else:
            cache.pods.upsert(step)
        assert cache.pods_by_claim() == scan(cache)
        seen.append(sorted((ns, token, pod["metadata"]["name"]) for (ns, token), pod in cache.pods_by_claim().items()))
    assert seen[4] == [("other", "t1", "c"), ("team", "t2", "d")]
    assert seen[5] == [("other", "t1", "c"), ("team", "t2", "a")]
    assert seen[6] == [("other", "t1", "c"), ("team", "t2", "a"), ("team", "t3", "b")]
    assert seen[-1] == [("other", "t1", "c")]
