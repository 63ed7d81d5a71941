"""An eviction whose answer is lost (a timeout, a cut connection, a 5xx) may have been carried out: pin-then-evict
reads the pod again before it deletes the placement, so an evicted pod's replacement is not left unpinned (and the
move uncounted). A real API server cannot be made to carry out an eviction and lose its answer on demand, so the
adapter's calls are replaced here; the cluster tests run the same function against a real one."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from kubectl_hami_place.core.pin_check import Workload
from kubectl_hami_place.kube import cluster_reads, evictions, moves, placements
from kubectl_hami_place.kube.errors import KubeError, KubeNotFound
from kubectl_hami_place.kube.move_values import Checked

POD = {"metadata": {"namespace": "team-a", "name": "x", "uid": "u1"}}


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every adapter call pin-then-evict makes, by name; the placement is created and acknowledged, open."""
    made: list[str] = []
    monkeypatch.setattr(
        placements, "create_placement", lambda kube, ns, obj, dry_run=False: made.append("create") or obj
    )
    monkeypatch.setattr(placements, "delete_placement", lambda kube, ns, name: made.append("delete"))
    monkeypatch.setattr(moves, "await_acknowledgement", lambda kube, ns, name, timeout: SimpleNamespace(open=True))
    return made


def evicting(monkeypatch: pytest.MonkeyPatch, failure: KubeError, pod: dict[str, Any] | None) -> None:
    """The dry run passes; the eviction itself fails with `failure`; the pod then reads as `pod` (None: gone)."""

    def evict(kube: object, namespace: str, name: str, dry_run: bool = False, uid: str = "") -> None:
        if not dry_run:
            raise failure

    def get_pod(kube: object, namespace: str, name: str) -> dict[str, Any]:
        if pod is None:
            raise KubeNotFound("gone", status=404)
        return pod

    monkeypatch.setattr(evictions, "evict_pod", evict)
    monkeypatch.setattr(cluster_reads, "get_pod", get_pod)


def checked() -> Checked:
    obj = {"metadata": {"name": "move-x-1", "namespace": "team-a"}}
    return Checked("team-a", obj, "gpu-0", (), Workload((), "the pod"), "x", ())


@pytest.mark.parametrize(
    ("failure", "pod"),
    [
        (KubeError("timed out", status=0), None),
        (KubeError("connection reset", status=0), {"metadata": {"uid": "u1", "deletionTimestamp": "now"}}),
        (KubeError("internal error", status=500), {"metadata": {"uid": "u2"}}),
    ],
)
def test_an_eviction_carried_out_whose_answer_was_lost_keeps_its_placement(
    monkeypatch: pytest.MonkeyPatch, calls: list[str], failure: KubeError, pod: dict[str, Any] | None
) -> None:
    evicting(monkeypatch, failure, pod)
    pinned = moves.pin_then_evict(object(), checked(), POD, ack_timeout=1)  # type: ignore[arg-type]
    assert pinned.created and calls == ["create"], "the placement stays for the evicted pod's replacement"


@pytest.mark.parametrize(
    ("failure", "pod"),
    [
        (KubeError("timed out", status=0), {"metadata": {"uid": "u1"}}),
        (KubeError("forbidden", status=403), None),
    ],
)
def test_an_eviction_not_carried_out_or_refused_deletes_its_placement(
    monkeypatch: pytest.MonkeyPatch, calls: list[str], failure: KubeError, pod: dict[str, Any] | None
) -> None:
    evicting(monkeypatch, failure, pod)
    with pytest.raises(KubeError):
        moves.pin_then_evict(object(), checked(), POD, ack_timeout=1)  # type: ignore[arg-type]
    assert calls == ["create", "delete"]
