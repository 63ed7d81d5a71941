"""The device-plugin stand-in's completion of a bind, against a fake API: a failure between the pod's write and the
lock's release is what a real API server cannot produce on demand."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from sandbox.device_plugin import BIND_PHASE, BIND_TIME, LOCK_TIMEOUT_SECONDS, NODE_LOCK, TO_ALLOCATE, complete

NOW = 1_764_687_600.0


class FakeApi:
    """One node's annotations and the pods' annotations; `fail_reads` node reads fail first."""

    def __init__(self, lock: str | None) -> None:
        self.node_annotations: dict[str, str] = {NODE_LOCK: lock} if lock is not None else {}
        self.pod_patches: list[dict[str, Any]] = []
        self.fail_reads = 0
        self.reads = 0
        self.node_gone = False

    def patch_namespaced_pod(self, name: str, namespace: str, body: dict[str, Any]) -> None:
        self.pod_patches.append(body)

    def read_node(self, name: str) -> Any:
        self.reads += 1
        if self.node_gone:
            raise ApiException(status=404, reason="Not Found")
        if self.fail_reads:
            self.fail_reads -= 1
            raise ApiException(status=503, reason="the API server is away")
        return SimpleNamespace(metadata=SimpleNamespace(annotations=dict(self.node_annotations)))

    def patch_node(self, name: str, body: dict[str, Any]) -> None:
        for key, value in body["metadata"]["annotations"].items():
            if value is None:
                self.node_annotations.pop(key, None)


def bound(phase: str, name: str = "trainer", ago: float = 1) -> Any:
    annotations = {BIND_PHASE: phase, TO_ALLOCATE: "GPU-0,NVIDIA,20000,0:;", BIND_TIME: str(int(NOW - ago))}
    return SimpleNamespace(
        metadata=SimpleNamespace(namespace="team-a", name=name, annotations=annotations),
        spec=SimpleNamespace(node_name="gpu-0"),
    )


def test_a_lock_left_by_a_failed_release_is_released_on_the_pods_next_event() -> None:
    api = FakeApi("2026-12-02T15:00:00Z,team-a,trainer")
    api.fail_reads = 1
    with pytest.raises(ApiException):
        complete(api, bound("allocating"), NOW)  # type: ignore[arg-type]
    assert api.pod_patches and NODE_LOCK in api.node_annotations, "the pod was completed, the lock left"
    assert complete(api, bound("success"), NOW)  # type: ignore[arg-type]
    assert NODE_LOCK not in api.node_annotations


def test_a_completed_pod_leaves_another_binds_lock_alone() -> None:
    for lock in ("2026-12-02T15:00:00Z,team-a,other", "2026-12-02T15:00:00Z"):
        api = FakeApi(lock)
        assert not complete(api, bound("success"), NOW)  # type: ignore[arg-type]
        assert api.node_annotations == {NODE_LOCK: lock} and api.pod_patches == []


def test_a_bind_is_completed_and_its_lock_released() -> None:
    api = FakeApi("2026-12-02T15:00:00Z,team-a,trainer")
    assert complete(api, bound("allocating"), NOW)  # type: ignore[arg-type]
    assert api.pod_patches == [{"metadata": {"annotations": {BIND_PHASE: "success", TO_ALLOCATE: ";"}}}]
    assert NODE_LOCK not in api.node_annotations


def test_a_pod_bound_longer_ago_than_a_lock_lives_or_on_a_deleted_node_costs_no_error() -> None:
    api = FakeApi("2026-12-02T15:00:00Z,team-a,trainer")
    assert not complete(api, bound("success", ago=LOCK_TIMEOUT_SECONDS + 1), NOW)  # type: ignore[arg-type]
    assert api.reads == 0, "HAMi breaks a lock that old itself: no read"
    api.node_gone = True
    assert not complete(api, bound("success"), NOW)  # type: ignore[arg-type]
    assert complete(api, bound("allocating"), NOW)  # type: ignore[arg-type]
