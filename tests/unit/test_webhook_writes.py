"""The Admitter's claim loop and the Reconciler's eviction sequence against an in-memory `Writes`.

A fake on purpose, for what a real API server cannot produce on demand: a write that loses its race at an exact
moment, eight races lost in a row, a budget that blocks one eviction. Everything else about these writes runs
against the sandbox in tests/cluster/test_webhook_placement.py.
"""

from __future__ import annotations

import base64
import copy
import itertools
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes.client import ApiClient

from kubectl_hami_place.core.admission import Settings
from kubectl_hami_place.core.lifecycle import ROOM_SETTLE_SECONDS, req_id_guard_name
from kubectl_hami_place.core.names import (
    CLAIM_ANNOTATION,
    CLAIM_DIGEST_LABEL,
    NOUSE_GPUUUID_ANNOTATION,
    PLACEMENT_ANNOTATION,
    ROOM_ANNOTATION,
    ROOM_GATE,
    ROOM_RESERVED_ANNOTATION,
    USE_GPUUUID_ANNOTATION,
)
from kubectl_hami_place.core.placement import (
    Placement,
    PlacementSpec,
    PlacementStatus,
    placement_from_object,
    status_to_object,
)
from kubectl_hami_place.core.reservation import reservation_value
from kubectl_hami_place.core.reviews import parse_review
from kubectl_hami_place.kube.claims import Guard, StaleWrite
from kubectl_hami_place.kube.errors import BlockedByDisruptionBudget, KubeError, PodReplaced
from tests.unit.test_webhook_api import unreachable_kube
from tests.unit.test_webhook_server import sample
from webhook import reconcile as reconcile_module
from webhook.admit import MAX_CLAIM_ATTEMPTS, Admitter
from webhook.cache import ClusterCache
from webhook.logs import JsonFormatter
from webhook.metrics import Metrics
from webhook.reconcile import CACHE_STALE_SECONDS, Reconciler
from webhook.settings import DEFAULTS
from webhook.writes import KubeWrites, QueuedEvents, _carries

NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
NS = "team-a"
CARDS = [
    {"id": f"GPU-{c}", "index": i, "count": 10, "devmem": 40960, "devcore": 100, "type": "NVIDIA-A100", "health": True}
    for i, c in enumerate("ab")
]
NODE = {"metadata": {"name": "gpu-0", "annotations": {"hami.io/node-nvidia-register": json.dumps(CARDS)}}}


class MemoryWrites:
    """The API server's placements in a dict, guarded by resourceVersion like the real status subresource.

    `before_write` runs before each status write and may change the stored placement (another replica's write):
    the write then fails as stale, as a 409 would.
    """

    def __init__(self, *placements: dict[str, Any]) -> None:
        self.stored = {(p["metadata"]["namespace"], p["metadata"]["name"]): copy.deepcopy(p) for p in placements}
        self.before_write: Callable[[Placement], None] = lambda _placement: None
        self.evict_with: list[KubeError | None] = []
        self.writes: list[dict[str, Any]] = []
        self.events: list[str] = []
        self.messages: list[str] = []
        self.event_of: list[tuple[str, bool]] = []
        self.evictions: list[str] = []
        self.evicted_uids: list[str] = []
        self.reads: list[str] = []
        self.pods_carrying: set[str] = set()
        self.carried_asks: list[str] = []
        self.guards: dict[tuple[str, str], Guard] = {}
        self.let_go: list[str] = []
        self.let_go_with: list[KubeError | None] = []

    def read_placement(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.reads.append(name)
        found = self.stored.get((namespace, name))
        return copy.deepcopy(found) if found is not None else None

    def write_status(self, placement: Placement, status: PlacementStatus) -> dict[str, Any]:
        self.before_write(placement)
        current = self.stored.get((placement.namespace, placement.name))
        if current is None or current["metadata"]["resourceVersion"] != placement.resource_version:
            raise StaleWrite(f"placement {placement.name} changed since it was read")
        current["metadata"]["resourceVersion"] = str(int(placement.resource_version) + 1)
        current["status"] = status_to_object(status)
        self.writes.append(copy.deepcopy(current["status"]))
        return copy.deepcopy(current)

    def record_event(self, placement: Mapping[str, Any], reason: str, message: str, *, warning: bool) -> None:
        self.events.append(reason)
        self.messages.append(message)
        self.event_of.append((placement["metadata"]["name"], warning))

    def evict(self, namespace: str, pod: str, uid: str) -> None:
        self.evictions.append(pod)
        self.evicted_uids.append(uid)
        outcome = self.evict_with.pop(0) if self.evict_with else None
        if outcome is not None:
            raise outcome

    def release_room_wait(self, namespace: str, pod: str, uid: str) -> bool:
        outcome = self.let_go_with.pop(0) if self.let_go_with else None
        if outcome is not None:
            raise outcome
        self.let_go.append(f"{pod} {uid}")
        return True

    def claim_carried(self, namespace: str, token: str, *, unlabelled: bool = False) -> bool:
        self.carried_asks.append(f"{token} unlabelled" if unlabelled else token)
        return token in self.pods_carrying

    def delete_placement(self, placement: Placement) -> None:
        """A delete preconditioned on the UID and resourceVersion read, as the server's."""
        stored = self.stored.get((placement.namespace, placement.name))
        meta = (stored or {}).get("metadata") or {}
        if (meta.get("uid"), meta.get("resourceVersion")) == (placement.uid, placement.resource_version):
            del self.stored[(placement.namespace, placement.name)]

    def hold_req_id(self, placement: Placement) -> Guard:
        """A create that succeeds once per (namespace, reqID), as the API server's."""
        name = req_id_guard_name(placement.namespace, placement.spec.req_id)
        new = Guard("server", name, f"lease-{len(self.guards)}", placement.uid, placement.name, placement.namespace)
        return self.guards.setdefault(("server", name), new)

    def list_guards(self) -> list[Guard]:
        return list(self.guards.values())

    def release_guard(self, guard: Guard) -> None:
        if self.guards.get((guard.namespace, guard.name)) == guard:
            del self.guards[(guard.namespace, guard.name)]

    def touch(self, name: str, status: dict[str, Any] | None = None) -> None:
        """Another writer changes the placement: a new resourceVersion, and the status it wrote if any."""
        stored = self.stored[(NS, name)]
        stored["metadata"]["resourceVersion"] = str(int(stored["metadata"]["resourceVersion"]) + 1)
        if status is not None:
            stored["status"] = status


def placement(name: str, device: str, *, created: str, status: dict[str, Any] | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": f"uid-{name}",
            "resourceVersion": "10",
            "creationTimestamp": created,
        },
        "spec": {
            "reqID": f"req-{name}",
            "podSelector": {"matchLabels": {"app": "train"}},
            "nodeName": "gpu-0",
            "gpuDevices": [device],
        },
    }
    if status is not None:
        obj["status"] = status
    return obj


def cache(writes: MemoryWrites, pods: tuple[dict[str, Any], ...] = ()) -> ClusterCache:
    """A synced cache holding the node, the given pods and the stored placements (its reflectors never run)."""
    built = ClusterCache(ApiClient(), "hami-scheduler")
    built.nodes.upsert(NODE)
    for pod in pods:
        built.pods.upsert(copy.deepcopy(pod))
    for obj in writes.stored.values():
        built.placements.upsert(copy.deepcopy(obj))
    for reflector in built.reflectors():
        reflector.synced.set()
        reflector.last_sync = time.time()
    return built


def admitter(writes: MemoryWrites, metrics: Metrics) -> Admitter:
    tokens = iter(f"tok-{n}" for n in range(100))
    return Admitter(
        None, cache(writes), Settings(), metrics, clock=lambda: NOW, new_token=lambda: next(tokens), writes=writes
    )


def review(annotations: dict[str, str] | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "trainer-0", "namespace": NS, "labels": {"app": "train"}}
    if annotations:
        metadata["annotations"] = annotations
    pod = {
        "metadata": metadata,
        "spec": {
            "schedulerName": "hami-scheduler",
            "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": 1}}}],
        },
    }
    request = {"uid": "u1", "kind": {"kind": "Pod"}, "operation": "CREATE", "namespace": NS, "object": pod}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def patch_of(response: dict[str, Any]) -> list[dict[str, Any]]:
    body = response["response"]
    return json.loads(base64.b64decode(body["patch"])) if "patch" in body else []


def counter(metrics: Metrics, name: str) -> float:
    return metrics.registry.get_sample_value(f"{name}_total") or 0.0


def test_a_claim_that_loses_its_race_re_reads_and_claims_the_next_placement() -> None:
    writes = MemoryWrites(
        placement("older", "gpu-0", created="2026-11-29T09:00:00Z"),
        placement("newer", "gpu-1", created="2026-11-29T10:00:00Z"),
    )

    def other_replica_claims_older(target: Placement) -> None:
        if target.name == "older" and not writes.writes:
            writes.touch(
                "older", {"phase": "Consumed", "claim": {"token": "theirs", "claimedAt": "2026-11-29T11:59:59Z"}}
            )

    writes.before_write = other_replica_claims_older
    metrics = Metrics()
    response = admitter(writes, metrics).admit(review())
    annotations = next(op["value"] for op in patch_of(response) if op["path"] == "/metadata/annotations")
    assert annotations[PLACEMENT_ANNOTATION] == "newer"
    assert annotations[USE_GPUUUID_ANNOTATION] == "GPU-b"
    assert writes.reads == ["older"]
    assert writes.stored[(NS, "newer")]["status"]["claim"]["token"] == annotations[CLAIM_ANNOTATION]
    assert writes.stored[(NS, "older")]["status"]["claim"]["token"] == "theirs"
    assert (counter(metrics, "hami_place_claim_conflicts"), counter(metrics, "hami_place_claims")) == (1.0, 1.0)
    assert writes.events == ["Claimed"]


def test_a_claim_that_keeps_losing_gives_up_and_admits_the_pod_unchanged() -> None:
    writes = MemoryWrites(placement("busy", "gpu-0", created="2026-11-29T09:00:00Z"))
    writes.before_write = lambda target: writes.touch(target.name)
    metrics = Metrics()
    response = admitter(writes, metrics).admit(review())
    assert patch_of(response) == []
    assert response["response"]["warnings"] == ["hami-place: too many concurrent claims; the pod is admitted unchanged"]
    assert counter(metrics, "hami_place_claim_conflicts") == MAX_CLAIM_ATTEMPTS
    assert "status" not in writes.stored[(NS, "busy")] and writes.events == []


def test_a_claim_the_api_server_refuses_admits_the_pod_unchanged_with_the_cause(
    caplog: pytest.LogCaptureFixture,
) -> None:
    writes = MemoryWrites(placement("p", "gpu-0", created="2026-11-29T09:00:00Z"))

    def refuse(_target: Placement) -> None:
        raise KubeError("forbidden: update hamipodplacements/status")

    writes.before_write = refuse
    with caplog.at_level(logging.WARNING, logger="webhook.admit"):
        response = admitter(writes, Metrics()).admit(review())
    assert patch_of(response) == []
    assert "forbidden: update hamipodplacements/status" in response["response"]["warnings"][0]
    assert [record.getMessage() for record in caplog.records] == [
        "claim of team-a/p not written: forbidden: update hamipodplacements/status"
    ]


def test_our_annotations_are_checked_against_the_stored_claim_not_the_cache() -> None:
    """The claim was written by another replica a moment ago: this replica's cache has not seen the placement."""
    writes = MemoryWrites()
    run = admitter(writes, Metrics())
    claimed = {"phase": "Consumed", "claim": {"token": "tok-stored", "claimedAt": "2026-11-29T11:59:00Z"}}
    stored = placement("p", "gpu-0", created="2026-11-29T09:00:00Z", status=claimed)
    writes.stored[(NS, "p")] = stored
    response = run.admit(review({CLAIM_ANNOTATION: "tok-stored", PLACEMENT_ANNOTATION: "p"}))
    assert writes.reads == ["p"] and writes.writes == []
    assert any(op["path"] == "/spec/affinity" for op in patch_of(response))
    assert "warnings" not in response["response"]


def test_a_copy_of_a_pinned_pod_carries_a_claim_a_stored_pod_has_and_is_not_pinned_by_it() -> None:
    claimed = {"phase": "Consumed", "claim": {"token": "tok-stored", "claimedAt": "2026-11-29T11:59:00Z"}}
    writes = MemoryWrites(placement("p", "gpu-0", created="2026-11-29T09:00:00Z", status=claimed))
    writes.pods_carrying.add("tok-stored")
    response = admitter(writes, Metrics()).admit(review({CLAIM_ANNOTATION: "tok-stored", PLACEMENT_ANNOTATION: "p"}))
    assert writes.writes == []
    assert sorted(op["path"] for op in patch_of(response) if op["op"] == "remove") == [
        "/metadata/annotations/scheduling.hami.placement.com~1claim",
        "/metadata/annotations/scheduling.hami.placement.com~1placement",
    ]
    assert len(patch_of(response)) == 2, "only our annotations go: no pin"


@pytest.mark.parametrize(
    "forged", ["../../../../../../api/v1/pods", "p/status", "..", "P", "p?watch=true", "x" * 254, "%2e%2e"]
)
def test_a_placement_annotation_that_is_no_name_reaches_no_api_path_and_is_removed(forged: str) -> None:
    claimed = {"phase": "Consumed", "claim": {"token": "tok-stored", "claimedAt": "2026-11-29T11:59:00Z"}}
    writes = MemoryWrites(placement("p", "gpu-0", created="2026-11-29T09:00:00Z", status=claimed))
    body = review({CLAIM_ANNOTATION: "tok-stored", PLACEMENT_ANNOTATION: forged})
    body["request"]["object"]["metadata"]["labels"] = {"app": "other"}
    response = admitter(writes, Metrics()).admit(body)
    assert writes.reads == [] and writes.carried_asks == [], "no read of the named placement, no lookup of the token"
    assert sorted(op["path"] for op in patch_of(response) if op["op"] == "remove") == [
        "/metadata/annotations/scheduling.hami.placement.com~1claim",
        "/metadata/annotations/scheduling.hami.placement.com~1placement",
    ]


def test_a_guard_whose_holder_is_no_name_is_released_without_a_read_of_it() -> None:
    writes = MemoryWrites()
    forged = Guard("server", req_id_guard_name(NS, "req-x"), "lease-forged", "uid-x", "../../../../api/v1/pods", NS)
    writes.guards[("server", forged.name)] = forged
    odd = Guard("server", "hami-place-reqid-odd", "lease-odd", "uid-y", "p", "../../api")  # its namespace no name
    writes.guards[("server", odd.name)] = odd
    reconciler(writes, pods=()).reconcile_once()
    assert writes.reads == [] and writes.guards == {}


def finished(name: str, at: datetime) -> dict[str, Any]:
    """A placement consumed by its pod at `at`."""
    stamp = at.isoformat().replace("+00:00", "Z")
    status = {
        "phase": "Consumed",
        "claim": {"token": f"tok-{name}", "claimedAt": stamp},
        "consumedBy": {"name": f"pod-{name}", "uid": f"pod-uid-{name}"},
        "consumedAt": stamp,
    }
    return placement(name, "gpu-0", created="2026-11-20T09:00:00Z", status=status)


@pytest.mark.parametrize(
    ("finished_ttl", "left"), [(86400, ["recent", "open"]), (1, ["open"]), (0, ["old", "recent", "open"])]
)
def test_placements_finished_longer_than_the_ttl_ago_are_deleted_and_nothing_else(
    finished_ttl: int, left: list[str]
) -> None:
    expired = placement("old", "gpu-0", created="2026-11-20T09:00:00Z")
    expired["status"] = {
        "phase": "Expired",
        "conditions": [
            {
                "type": "Claimed",
                "status": "False",
                "reason": "Expired",
                "message": "",
                "lastTransitionTime": "2026-11-27T11:00:00Z",
            }
        ],
    }
    writes = MemoryWrites(
        expired,
        finished("recent", NOW - timedelta(hours=23)),
        placement("open", "gpu-1", created="2026-11-20T09:00:00Z"),
    )
    loop = Reconciler(None, cache(writes), Metrics(), 10**9, lambda: NOW, writes=writes, finished_ttl=finished_ttl)
    loop.reconcile_once()
    assert sorted(name for _, name in writes.stored) == sorted(left)


def test_a_finished_time_at_the_end_of_the_calendar_keeps_its_placement_and_fails_no_pass() -> None:
    """Anyone who may write a placement's status can record 9999-12-31T23:59:59Z (a date-time the CRD takes); that
    time plus the finished TTL overflowed, so every pass failed there and no other placement was deleted or
    followed. (The in-memory Writes stands in for the API server, which stores such a status as it is.)"""
    far = finished("far", NOW)
    far["status"]["consumedAt"] = "9999-12-31T23:59:59Z"
    writes = MemoryWrites(far, finished("old", NOW - timedelta(days=2)))
    loop = Reconciler(None, cache(writes), Metrics(), 10**9, lambda: NOW, writes=writes, finished_ttl=86400)
    loop.reconcile_once()
    assert [name for _, name in writes.stored] == ["far"]


def test_a_finished_placement_is_deleted_when_its_ttl_ends_not_at_the_next_sweep() -> None:
    """The monotonic clock stands still: no sweep nor full pass after the first, only the queue's deadline."""
    writes = MemoryWrites(finished("recent", NOW - timedelta(seconds=50)))
    now = [NOW]
    loop = Reconciler(
        None, cache(writes), Metrics(), 10**9, lambda: now[0], writes=writes, monotonic=lambda: 0.0, finished_ttl=60
    )
    loop.reconcile_once()
    for seconds in (9, 10):
        now[0] = NOW + timedelta(seconds=seconds)
        loop.reconcile_once()
        assert [name for _, name in writes.stored] == ["recent"], "kept until its TTL ends"
    now[0] = NOW + timedelta(seconds=11)
    loop.reconcile_once()
    assert writes.stored == {}


class RecordedStop(threading.Event):
    """A stop event whose waits return at once and are recorded: the loop's rests, read without a clock."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float | None] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout)
        return self.is_set()


def test_the_rest_after_a_pass_is_four_times_its_cpu_time_not_its_wall_time() -> None:
    """A pass that spent 0.25 s of CPU rests 1 s; one that only waited on the API server (no CPU: a call held up by
    an API server restart) is followed by the next one at once, not after four times its wait."""
    writes = MemoryWrites()
    cpu = [0.0]
    wall = [0.0]
    loop = Reconciler(
        None,
        cache(writes),
        Metrics(),
        3600,
        lambda: NOW,
        writes=writes,
        monotonic=lambda: wall[0],
        cpu_time=lambda: cpu[0],
    )
    stop = RecordedStop()
    spent = iter([(0.25, 0.25), (0.0, 30.0), (0.5, 0.5)])

    passes = [0]

    def a_pass() -> None:
        cpu_spent, wall_spent = next(spent, (0.0, 0.0))
        cpu[0] += cpu_spent
        wall[0] += wall_spent
        loop.wake.set()
        passes[0] += 1
        if passes[0] == 3:
            stop.set()

    loop.pass_once = a_pass  # type: ignore[method-assign]
    loop.wake.set()
    loop.run(stop)
    assert passes == [3]
    assert stop.waits == [1.0, 0.0, 2.0]


def evicting(attempts: int = 0, time: str = "2026-11-29T11:59:00Z") -> dict[str, Any]:
    obj = placement("make-room", "gpu-0", created="2026-11-29T11:00:00Z")
    obj["spec"]["evictPod"] = "old"
    obj["status"] = {
        "phase": "Evicting",
        "claim": {"token": "tok", "claimedAt": "2026-11-29T11:58:00Z"},
        "consumedBy": {"name": "trainer-0", "uid": "uid-1"},
        "eviction": {"pod": "old", "result": "Pending", "attempts": attempts, "time": time},
    }
    return obj


def stored_pod(name: str, uid: str, token: str = "", **status: str) -> dict[str, Any]:
    """A stored pod of HAMi's scheduler, carrying a claim token when given."""
    metadata: dict[str, Any] = {"name": name, "namespace": NS, "uid": uid, "resourceVersion": "1"}
    if token:
        metadata["annotations"] = {CLAIM_ANNOTATION: token}
    return {"metadata": metadata, "spec": {"schedulerName": "hami-scheduler"}, "status": dict(status)}


PLACED = stored_pod("trainer-0", "uid-1", "tok", phase="Running")


def reconciler(
    writes: MemoryWrites, clock: Callable[[], datetime] = lambda: NOW, pods: tuple[dict[str, Any], ...] = (PLACED,)
) -> Reconciler:
    return Reconciler(None, cache(writes, pods), Metrics(), 3600, clock, writes=writes)


def test_a_pass_observes_how_long_it_held_its_thread_full_first_then_queued() -> None:
    """The first pass asks every placement (full), the next only what the queue had ready; each observes its own
    time, no more than the caller saw pass."""
    loop = reconciler(MemoryWrites(evicting()))
    spans = []
    for _ in range(2):
        started = time.perf_counter()
        loop.reconcile_once()
        spans.append(time.perf_counter() - started)
    for kind, span in zip(("full", "queued"), spans, strict=True):
        assert sample(loop.metrics.reconcile_passes, "_count", kind=kind) == 1
        observed = sample(loop.metrics.reconcile_passes, "_sum", kind=kind)
        assert 0 < observed <= span, (kind, observed, span)


def test_an_eviction_is_leased_first_then_attempted_then_its_outcome_recorded() -> None:
    writes = MemoryWrites(evicting())
    writes.evict_with = [BlockedByDisruptionBudget("ns", "old", ("web",), "blocked by PodDisruptionBudget web")]
    now = [NOW]
    loop = reconciler(writes, lambda: now[0])
    loop.reconcile_once()
    lease, outcome = writes.writes
    assert (lease["eviction"]["attempts"], lease["eviction"]["result"]) == (1, "Pending")
    assert (outcome["eviction"]["attempts"], outcome["eviction"]["result"], outcome["phase"]) == (
        1,
        "Blocked",
        "Evicting",
    )
    assert writes.evictions == ["old"]
    assert writes.events == ["EvictionBlocked"]
    loop.reconcile_once()
    assert writes.evictions == ["old"], "the backoff holds the next attempt"
    now[0] = NOW + timedelta(seconds=5)
    loop.reconcile_once()
    assert writes.evictions == ["old", "old"]
    assert writes.writes[-1]["phase"] == "Consumed" and writes.writes[-1]["eviction"]["attempts"] == 2
    assert writes.events == ["EvictionBlocked", "Evicted"]


def test_a_lost_lease_attempts_no_eviction() -> None:
    writes = MemoryWrites(evicting())
    writes.before_write = lambda target: writes.touch(target.name)
    reconciler(writes).reconcile_once()
    assert writes.evictions == [] and writes.writes == [] and writes.events == []


def test_a_claim_records_the_uid_of_the_cached_evict_pod_and_the_eviction_carries_it() -> None:
    obj = placement("make-room", "gpu-0", created="2026-11-29T11:00:00Z")
    obj["spec"]["evictPod"] = "old"
    writes = MemoryWrites(obj)
    run = Admitter(
        None,
        cache(writes, (stored_pod("old", "uid-old", phase="Running"),)),
        Settings(),
        Metrics(),
        clock=lambda: NOW,
        new_token=lambda: "tok",
        writes=writes,
    )
    run.admit(review())
    assert writes.stored[(NS, "make-room")]["status"]["eviction"]["uid"] == "uid-old"
    loop = reconciler(writes)
    loop.reconcile_once()
    loop.reconcile_once()
    assert writes.evictions == ["old"] and writes.evicted_uids == ["uid-old"]


def test_a_pod_re_created_under_the_evicted_name_is_kept_and_the_eviction_reads_as_the_pod_gone() -> None:
    obj = evicting()
    obj["status"]["eviction"]["uid"] = "uid-old"
    writes = MemoryWrites(obj)
    writes.evict_with = [PodReplaced("pod team-a/old is no longer the pod uid-old meant", status=409)]
    reconciler(writes).reconcile_once()
    assert writes.evicted_uids == ["uid-old"]
    final = writes.writes[-1]
    assert (final["phase"], final["eviction"]["result"]) == ("Consumed", "NotFound")
    assert "a newer pod of that name is kept" in final["eviction"]["message"]
    assert writes.events == ["EvictionNotNeeded"]


def clocked(writes: MemoryWrites, pods: tuple[dict[str, Any], ...], clock: list[float]) -> Reconciler:
    """A reconciler of these pods whose monotonic clock the test moves (`clock[0]`)."""
    return Reconciler(
        None, cache(writes, pods), Metrics(), 3600, lambda: NOW, writes=writes, monotonic=lambda: clock[0]
    )


def gated_pod(placement_name: str = "make-room", token: str = "tok") -> dict[str, Any]:
    """The placed pod as admission stored it: pinned by the placement, gated until the evicted pod is gone."""
    pod = stored_pod("trainer-0", "uid-1", token, phase="Pending")
    pod["metadata"]["annotations"][PLACEMENT_ANNOTATION] = placement_name
    pod["spec"]["schedulingGates"] = [{"name": "example.com/other"}, {"name": ROOM_GATE}]
    return pod


def test_the_room_gate_is_lifted_once_the_evicted_pod_is_gone_not_while_it_terminates() -> None:
    obj = evicting()
    obj["status"]["eviction"]["uid"] = "uid-old"
    writes = MemoryWrites(obj)
    old = stored_pod("old", "uid-old", phase="Running")
    clock = [0.0]
    loop = clocked(writes, (gated_pod(), old), clock)
    loop.reconcile_once()
    assert writes.evictions == ["old"] and writes.stored[(NS, "make-room")]["status"]["phase"] == "Consumed"
    assert writes.let_go == [], "HAMi still counts the evicted pod's cards"
    terminating = copy.deepcopy(old)
    terminating["metadata"]["deletionTimestamp"] = "2026-11-29T12:00:01Z"
    loop.cache.pods.upsert(terminating)
    loop.reconcile_once()
    assert writes.let_go == [], "a terminating pod still holds its cards"
    loop.cache.pods.remove(NS, "old")
    loop.reconcile_once()
    clock[0] += ROOM_SETTLE_SECONDS / 2
    loop.reconcile_once()
    assert writes.let_go == [], "HAMi's own watch may not have seen the pod go yet"
    clock[0] += ROOM_SETTLE_SECONDS / 2
    loop.reconcile_once()
    assert writes.let_go == ["trainer-0 uid-1"]
    assert writes.events[-1] == "RoomMade"


def annotated_pod() -> dict[str, Any]:
    """The placed pod as an API server before 1.27 stores it: the gate dropped, the room annotation kept."""
    pod = gated_pod()
    del pod["spec"]["schedulingGates"]
    pod["metadata"]["annotations"][ROOM_ANNOTATION] = "waiting for pod old to go"
    return pod


@pytest.mark.parametrize(
    ("waiting", "message"),
    [
        (gated_pod(), f"scheduling gate {ROOM_GATE} lifted: pod old is gone"),
        (annotated_pod(), f"{ROOM_ANNOTATION} taken off: pod old is gone"),
    ],
)
def test_a_pod_that_waits_by_its_gate_or_by_the_annotation_alone_is_let_go_once_the_evicted_pod_is_gone(
    waiting: dict[str, Any], message: str
) -> None:
    """Where the API server dropped the gate, taking the annotation off is the update that has kube-scheduler try
    the pod again; the Event says which of the two was let go."""
    obj = evicting()
    obj["status"]["eviction"]["uid"] = "uid-old"
    writes = MemoryWrites(obj)
    clock = [0.0]
    loop = clocked(writes, (waiting, stored_pod("old", "uid-old", phase="Running")), clock)
    loop.reconcile_once()
    assert writes.let_go == [], "the evicted pod is still there"
    loop.cache.pods.remove(NS, "old")
    loop.reconcile_once()
    clock[0] += ROOM_SETTLE_SECONDS
    loop.reconcile_once()
    assert writes.let_go == ["trainer-0 uid-1"]
    assert (writes.events[-1], writes.messages[-1]) == ("RoomMade", message)


def test_a_gate_whose_placement_is_gone_or_no_longer_its_claim_is_lifted_and_a_failed_lift_is_tried_again() -> None:
    writes = MemoryWrites(evicting())
    writes.let_go_with = [KubeError("the API server is away")]
    clock = [0.0]
    loop = clocked(writes, (gated_pod("gone"),), clock)
    clock[0] += ROOM_SETTLE_SECONDS
    loop.reconcile_once()
    assert writes.let_go == [], "the room counts as made from the first pass that found it"
    clock[0] += ROOM_SETTLE_SECONDS
    loop.reconcile_once()
    assert writes.let_go == []
    clock[0] += 1
    loop.reconcile_once()
    assert writes.let_go == ["trainer-0 uid-1"]
    other = MemoryWrites(evicting())
    clock[0] = 0.0
    mine = clocked(other, (gated_pod(token="another"),), clock)
    mine.reconcile_once()
    clock[0] += ROOM_SETTLE_SECONDS
    mine.reconcile_once()
    assert other.let_go == ["trainer-0 uid-1"]


def test_no_eviction_once_the_placed_pod_is_gone() -> None:
    writes = MemoryWrites(evicting())
    reconciler(writes, pods=()).reconcile_once()
    assert writes.evictions == []
    assert writes.stored[(NS, "make-room")]["status"]["phase"] == "Failed"
    assert writes.events == ["PlacedPodGone"]


def sharing_req_id() -> MemoryWrites:
    """Two open placements with one reqID, on two cards: "first" for app=train pods, "second" for app=serve."""
    first = placement("first", "gpu-0", created="2026-11-29T09:00:00Z")
    second = placement("second", "gpu-1", created="2026-11-29T10:00:00Z")
    second["spec"]["reqID"] = first["spec"]["reqID"]
    second["spec"]["podSelector"] = {"matchLabels": {"app": "serve"}}
    return MemoryWrites(first, second)


def test_two_placements_sharing_a_req_id_claimed_at_once_by_two_replicas_consume_it_once() -> None:
    """Each replica's cache still shows both placements open: only the guard at the API server tells them apart."""
    writes = sharing_req_id()
    replica_a, replica_b = admitter(writes, Metrics()), admitter(writes, Metrics())
    answer_a = replica_a.admit(review())
    annotations = next(op["value"] for op in patch_of(answer_a) if op["path"] == "/metadata/annotations")
    assert annotations[PLACEMENT_ANNOTATION] == "first"
    serving = review()
    serving["request"]["object"]["metadata"]["labels"] = {"app": "serve"}
    answer_b = replica_b.admit(serving)
    assert patch_of(answer_b) == []
    assert any("reqID already held by placement first (uid-first)" in w for w in answer_b["response"]["warnings"])
    assert "status" not in writes.stored[(NS, "second")], "nothing of the losing claim is written"
    claimed_ones = [name for (_, name), obj in writes.stored.items() if "claim" in obj.get("status", {})]
    assert claimed_ones == ["first"]


def test_a_placement_takes_its_req_id_guard_before_its_claim_and_keeps_it_when_claimed_again() -> None:
    writes = sharing_req_id()
    run = admitter(writes, Metrics())
    run.admit(review())
    (guard,) = writes.guards.values()
    assert (guard.holder_name, guard.holder_uid) == ("first", "uid-first")
    writes.touch("first", {"phase": "Pending"})
    run.cache.placements.upsert(copy.deepcopy(writes.stored[(NS, "first")]))
    annotations = next(op["value"] for op in patch_of(run.admit(review())) if op["path"] == "/metadata/annotations")
    assert annotations[PLACEMENT_ANNOTATION] == "first", "a released claim may be claimed again by its holder"


def test_the_reconciler_releases_guards_of_placements_gone_or_ended_unclaimed_and_keeps_the_others() -> None:
    writes = sharing_req_id()
    writes.stored[(NS, "expired")] = placement(
        "expired", "gpu-0", created="2026-11-29T08:00:00Z", status={"phase": "Expired"}
    )
    for name in ("first", "expired", "deleted"):
        obj = placement(name, "gpu-0", created="2026-11-29T08:00:00Z")
        obj["spec"]["reqID"] = f"req-own-{name}"
        writes.hold_req_id(placement_from_object(obj))
    loop = reconciler(writes, pods=())
    loop.cache.placements.remove(NS, "first")  # created a moment ago: the cache lags, the API server has it
    loop.reconcile_once()
    assert sorted(guard.holder_name for guard in writes.guards.values()) == ["first"]


def stale_claim() -> dict[str, Any]:
    """A claim some replica wrote with claimedAt far in the past (its clock ran ahead), no pod carrying it yet."""
    status = {"phase": "Consumed", "claim": {"token": "tok-far", "claimedAt": "2026-01-01T00:00:00Z"}}
    return placement("p", "gpu-0", created="2026-11-29T09:00:00Z", status=status)


def test_a_claim_is_released_only_after_the_grace_on_this_replicas_monotonic_clock() -> None:
    writes = MemoryWrites(stale_claim())
    ticks = [1000.0]
    loop = Reconciler(None, cache(writes), Metrics(), 3600, lambda: NOW, writes=writes, monotonic=lambda: ticks[0])
    loop.reconcile_once()
    ticks[0] += DEFAULTS.claim_grace
    loop.reconcile_once()
    assert writes.writes == [], "claimedAt months ago does not count: the grace runs from when this replica saw it"
    ticks[0] += 1
    loop.reconcile_once()
    assert writes.writes[-1]["phase"] == "Pending" and writes.events == ["ClaimReleased"]


def test_no_release_when_the_api_server_knows_a_pod_carrying_the_claim_or_the_cache_is_stale() -> None:
    writes = MemoryWrites(stale_claim())
    ticks = [0.0]
    loop = Reconciler(None, cache(writes), Metrics(), 3600, lambda: NOW, writes=writes, monotonic=lambda: ticks[0])
    loop.reconcile_once()
    ticks[0] += DEFAULTS.claim_grace + 1
    writes.pods_carrying.add("tok-far")
    loop.reconcile_once()
    assert writes.writes == [], "a pod of another scheduler carries it: the cache could not know"
    assert writes.carried_asks == ["tok-far unlabelled"], "a pod pinned before pods were labelled counts too"
    writes.pods_carrying.clear()
    for reflector in loop.cache.reflectors():
        reflector.last_sync = time.time() - CACHE_STALE_SECONDS - 1
    loop.reconcile_once()
    assert writes.writes == [], "no release from a stale cache"
    for reflector in loop.cache.reflectors():
        reflector.last_sync = time.time()
    loop.reconcile_once()
    assert writes.writes[-1]["phase"] == "Pending"


def test_a_claims_grace_runs_on_through_passes_that_do_not_ask_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pass that failed backs its keys off: the passes meanwhile do not hold the claim, and its age goes on."""
    writes = MemoryWrites(stale_claim())
    now, ticks = [NOW], [0.0]
    loop = Reconciler(None, cache(writes), Metrics(), 3600, lambda: now[0], writes=writes, monotonic=lambda: ticks[0])
    loop.reconcile_once()
    ask = reconcile_module.follow_up

    def failing(placement: Placement, *args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(reconcile_module, "follow_up", ask)
        raise RuntimeError("a bug")

    monkeypatch.setattr(reconcile_module, "follow_up", failing)
    loop.pass_once()
    loop.pass_once()
    ticks[0] += DEFAULTS.claim_grace + 1
    now[0] += timedelta(seconds=1)
    loop.pass_once()
    assert writes.writes[-1]["phase"] == "Pending", "the grace started over at a pass that did not ask the claim"


class HeldSender:
    """Sends Events into a list, each only once `release` is set: an API server that is slow to answer."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()
        self.sent: list[str] = []

    def __call__(self, _placement: dict[str, Any], reason: str, _message: str, _warning: bool) -> None:
        self.entered.set()
        self.release.wait(10)
        self.sent.append(reason)


def test_an_event_is_queued_without_waiting_for_the_api_server() -> None:
    sender = HeldSender()
    events = QueuedEvents(sender)
    events.put({"metadata": {"name": "p"}}, "Claimed", "claimed by web-0", warning=False)
    assert sender.sent == [], "put waited for the send"
    sender.release.set()
    events.close(10)
    assert sender.sent == ["Claimed"]


def test_events_past_the_queue_size_are_dropped_and_the_queued_ones_sent_in_order(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A dropped Event is logged with its reason: the log is then the only trace of it."""
    sender = HeldSender()
    events = QueuedEvents(sender, size=2)
    events.put({}, "first", "", warning=False)
    assert sender.entered.wait(10), "the events thread did not take the first"
    with caplog.at_level(logging.WARNING, logger="webhook.writes"):
        for reason in ("second", "third", "fourth", "fifth"):
            events.put({}, reason, "", warning=False)
    sender.release.set()
    events.close(10)
    assert sender.sent == ["first", "second", "third"]
    assert [record.getMessage() for record in caplog.records] == [
        "event fourth not recorded: 2 events are already waiting",
        "event fifth not recorded: 2 events are already waiting",
    ]


def test_closing_waits_no_longer_than_its_timeout_for_an_api_server_that_does_not_answer() -> None:
    """A replica shutting down must end within its grace period, whether the queue is full or an Event hangs."""
    hanging = HeldSender()
    events = QueuedEvents(hanging)
    events.put({}, "first", "", warning=False)
    assert hanging.entered.wait(10), "the events thread did not take the first"
    events.close(0.1)
    assert hanging.sent == [], "close waited for the hanging send"
    full = HeldSender()
    crowded = QueuedEvents(full, size=1)
    crowded.put({}, "first", "", warning=False)
    assert full.entered.wait(10), "the events thread did not take the first"
    crowded.put({}, "second", "", warning=False)
    crowded.close(0.1)
    assert full.sent == [], "close waited for room in the queue"
    hanging.release.set()
    full.release.set()


def test_the_events_thread_is_a_daemon_named_events() -> None:
    """An Events thread blocked on the API server must not keep a stopped server's process alive; a thread dump
    names it."""
    events = QueuedEvents(lambda _placement, _reason, _message, _warning: None)
    thread = events._thread
    events.close(10)
    assert (thread.name, thread.daemon) == ("events", True)


def test_placement_and_pod_events_wake_the_reconciler_and_node_events_do_not() -> None:
    loop = reconciler(MemoryWrites())
    loop.wake.clear()
    loop.cache.nodes.upsert({**NODE, "metadata": {**NODE["metadata"], "resourceVersion": "2"}})
    assert not loop.wake.is_set(), "a node's heartbeat woke a pass"
    loop.cache.pods.upsert(stored_pod("trainer-1", "uid-2", phase="Running"))
    assert loop.wake.is_set()
    loop.wake.clear()
    loop.cache.placements.upsert(placement("again", "gpu-0", created="2026-11-29T11:00:00Z"))
    assert loop.wake.is_set()


def problems_worked_out(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The node of each placement whose problems the reconciler works out, in turn (the real `problems_on` still
    answers)."""
    worked: list[str] = []
    work_out = reconcile_module.problems_on

    def counted(nodes: Mapping[str, Mapping[str, Any]]) -> Callable[[PlacementSpec], Any]:
        problems = work_out(nodes)

        def counting(spec: PlacementSpec) -> Any:
            worked.append(spec.node_name)
            return problems(spec)

        return counting

    monkeypatch.setattr(reconcile_module, "problems_on", counted)
    return worked


def test_a_placements_problems_are_worked_out_again_only_when_its_node_changes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    worked = problems_worked_out(monkeypatch)
    writes = MemoryWrites(placement("open", "gpu-0", created="2026-11-29T11:59:00Z"))
    loop = reconciler(writes)
    for _ in range(3):
        loop.reconcile_once()
    assert worked == ["gpu-0"] and not writes.writes
    loop.cache.nodes.upsert({**NODE, "metadata": {**NODE["metadata"], "resourceVersion": "5"}})
    loop.reconcile_once()
    assert worked == ["gpu-0"], "a heartbeat (a new resourceVersion, nothing else) worked the problems out again"
    loop.cache.nodes.upsert(
        {**NODE, "metadata": {**NODE["metadata"], "resourceVersion": "6"}, "spec": {"unschedulable": True}}
    )
    loop.reconcile_once()
    assert worked == ["gpu-0", "gpu-0"] and not writes.writes
    loop.cache.nodes.remove("", "gpu-0")
    loop.reconcile_once()
    assert worked == ["gpu-0"] * 3
    assert writes.writes[-1]["phase"] == "Failed" and "gpu-0 not found" in writes.writes[-1]["message"]


def asking(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the placements the reconciler asks follow_up of, in order."""
    asked: list[str] = []
    ask = reconcile_module.follow_up

    def counted(placement: Placement, *args: Any, **kwargs: Any) -> Any:
        asked.append(placement.name)
        return ask(placement, *args, **kwargs)

    monkeypatch.setattr(reconcile_module, "follow_up", counted)
    return asked


def other_node(name: str) -> dict[str, Any]:
    return {**NODE, "metadata": {**NODE["metadata"], "name": name}}


def test_a_pass_asks_only_what_an_event_or_a_claim_in_flight_points_at(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = asking(monkeypatch)
    on_other = placement("elsewhere", "gpu-0", created="2026-11-29T11:59:00Z")
    on_other["spec"]["nodeName"] = "gpu-1"
    in_flight = placement("in-flight", "gpu-1", created="2026-11-29T11:59:00Z")
    in_flight["status"] = {"phase": "Consumed", "claim": {"token": "tok-9", "claimedAt": "2026-11-29T11:59:30Z"}}
    writes = MemoryWrites(placement("open", "gpu-0", created="2026-11-29T11:59:00Z"), on_other, in_flight)
    loop = reconciler(writes, pods=())
    loop.cache.nodes.upsert(other_node("gpu-1"))
    loop.reconcile_once()
    assert sorted(asked) == ["elsewhere", "in-flight", "open"], "the first pass asks every placement"
    for _ in range(2):
        asked.clear()
        loop.reconcile_once()
        assert asked == ["in-flight"], "a quiet placement was asked with nothing changed"
    heartbeat = {**other_node("gpu-1"), "metadata": {**other_node("gpu-1")["metadata"], "resourceVersion": "3"}}
    asked.clear()
    loop.cache.nodes.upsert(heartbeat)
    loop.reconcile_once()
    assert asked == ["in-flight"], "a node's heartbeat asked the placements on it"
    asked.clear()
    loop.cache.nodes.upsert(
        {**heartbeat, "metadata": {**heartbeat["metadata"], "resourceVersion": "4"}, "spec": {"unschedulable": True}}
    )
    loop.reconcile_once()
    assert sorted(asked) == ["elsewhere", "in-flight"], "a node's cordon did not ask the placements on that node"
    asked.clear()
    writes.touch("open")
    loop.cache.placements.upsert(copy.deepcopy(writes.stored[(NS, "open")]))
    loop.reconcile_once()
    assert sorted(asked) == ["in-flight", "open"], "a placement event asks that placement"
    assert not writes.writes


def test_an_open_placement_expires_at_its_ttl_with_no_event() -> None:
    now = [NOW]
    writes = MemoryWrites(placement("open", "gpu-0", created="2026-11-29T11:00:00Z"))
    loop = reconciler(writes, lambda: now[0])
    loop.reconcile_once()
    assert not writes.writes, "expired at exactly its TTL"
    now[0] = NOW + timedelta(seconds=1)
    loop.reconcile_once()
    assert [w["phase"] for w in writes.writes] == ["Expired"]


def test_an_open_placement_fails_once_another_with_its_req_id_is_claimed() -> None:
    waiting = placement("waiting", "gpu-0", created="2026-11-29T11:59:00Z")
    rival = placement("rival", "gpu-1", created="2026-11-29T11:58:00Z")
    waiting["spec"]["reqID"] = rival["spec"]["reqID"] = "req-shared"
    writes = MemoryWrites(waiting, rival)
    loop = reconciler(writes, pods=())
    loop.reconcile_once()
    assert not writes.writes
    writes.touch("rival", {"phase": "Consumed", "claim": {"token": "tok-r", "claimedAt": "2026-11-29T11:59:30Z"}})
    loop.cache.placements.upsert(copy.deepcopy(writes.stored[(NS, "rival")]))
    loop.reconcile_once()
    assert writes.writes[-1]["phase"] == "Failed"
    assert writes.writes[-1]["message"] == "reqID already consumed by placement rival"


def test_every_placement_is_asked_again_once_a_full_pass_is_due(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = asking(monkeypatch)
    ticks = [0.0]
    writes = MemoryWrites(*(placement(f"open-{n}", "gpu-0", created="2026-11-29T11:59:00Z") for n in range(3)))
    loop = Reconciler(None, cache(writes), Metrics(), 3600, lambda: NOW, writes=writes, monotonic=lambda: ticks[0])
    loop.reconcile_once()
    asked.clear()
    ticks[0] = reconcile_module.FULL_PASS_SECONDS - 1
    loop.reconcile_once()
    assert asked == []
    ticks[0] = reconcile_module.FULL_PASS_SECONDS
    loop.reconcile_once()
    assert sorted(asked) == ["open-0", "open-1", "open-2"]


def test_a_placement_asked_again_and_again_keeps_one_deadline_and_is_asked_at_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked = asking(monkeypatch)
    now = [NOW]
    writes = MemoryWrites(placement("open", "gpu-0", created="2026-11-29T11:59:00Z"))
    loop = reconciler(writes, lambda: now[0])
    for _ in range(50):
        writes.touch("open")
        loop.cache.placements.upsert(copy.deepcopy(writes.stored[(NS, "open")]))
        loop.reconcile_once()
    assert loop.queue.waiting() == 1 and len(loop.queue._deadlines) == 1, "each ask added a deadline to wait for"
    asked.clear()
    now[0] = NOW + timedelta(minutes=58, seconds=59)
    loop.reconcile_once()
    assert asked == [] and not writes.writes
    now[0] = NOW + timedelta(minutes=59, seconds=1)
    loop.reconcile_once()
    assert asked == ["open"] and [w["phase"] for w in writes.writes] == ["Expired"]


def test_the_placements_sharing_a_req_id_are_asked_when_one_of_them_is_deleted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked = asking(monkeypatch)
    waiting = placement("waiting", "gpu-0", created="2026-11-29T11:59:00Z")
    rival = placement("rival", "gpu-1", created="2026-11-29T11:58:00Z")
    waiting["spec"]["reqID"] = rival["spec"]["reqID"] = "req-shared"
    loop = reconciler(MemoryWrites(waiting, rival), pods=())
    loop.reconcile_once()
    asked.clear()
    loop.cache.placements.remove(NS, "rival")
    loop.reconcile_once()
    assert asked == ["waiting"], "a placement sharing the reqID of one deleted was not asked again"


def changed_after_a_pass(now: list[datetime]) -> Reconciler:
    """Two open placements, a pass over them, then both changed: the next pass has both to ask again."""
    writes = MemoryWrites(*(placement(f"open-{n}", "gpu-0", created="2026-11-29T11:59:00Z") for n in range(2)))
    loop = reconciler(writes, lambda: now[0])
    loop.pass_once()
    for name in ("open-0", "open-1"):
        writes.touch(name)
        loop.cache.placements.upsert(copy.deepcopy(writes.stored[(NS, name)]))
    return loop


def test_after_a_failed_pass_its_placements_are_asked_again_once_their_backoff_passed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked = asking(monkeypatch)
    now = [NOW]
    loop = changed_after_a_pass(now)
    ask = reconcile_module.follow_up

    def failing(placement: Placement, *args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(reconcile_module, "follow_up", ask)
        raise RuntimeError("a bug")

    monkeypatch.setattr(reconcile_module, "follow_up", failing)
    loop.pass_once()
    asked.clear()
    loop.pass_once()
    assert asked == [], "a placement of the failed pass was asked again before its backoff"
    now[0] += timedelta(seconds=1)
    loop.pass_once()
    assert sorted(asked) == ["open-0", "open-1"], "a placement the failed pass did not finish was not asked again"
    assert loop.queue.retries(("team-a", "open-0")) == 0, "a placement asked again keeps its backoff"


# A user name as it would look in a forged review: a line break, a forged next log entry, a quote.
HOSTILE_USER = 'eve"\n{"level": "ERROR", "message": "forged"}'


def test_each_claim_is_one_line_naming_the_placement_the_pod_and_the_requesting_user(
    caplog: pytest.LogCaptureFixture,
) -> None:
    writes = MemoryWrites(placement("older", "gpu-0", created="2026-11-29T09:00:00Z"))
    body = review()
    body["request"]["userInfo"] = {"username": HOSTILE_USER, "groups": ["system:authenticated"]}
    body["request"]["object"]["metadata"]["generateName"] = "trainer-"
    with caplog.at_level(logging.INFO, logger="webhook.admit"):
        admitter(writes, Metrics()).admit(body)
    (claim,) = [record for record in caplog.records if getattr(record, "fields", {}).get("event") == "claim"]
    entry = json.loads(JsonFormatter().format(claim))
    assert entry["message"] == "placement claimed"
    assert (entry["placement"], entry["node"], entry["namespace"]) == (f"{NS}/older", "gpu-0", NS)
    assert (entry["generateName"], entry["review"], entry["dryRun"]) == ("trainer-", "u1", False)
    assert entry["user"] == HOSTILE_USER, "the requesting user, escaped by JSON"
    assert len(JsonFormatter().format(claim).splitlines()) == 1


def test_a_claims_log_line_cuts_a_generate_name_the_api_server_would_ignore(caplog: pytest.LogCaptureFixture) -> None:
    """Beside a name the API server takes any generateName unchecked: 3 MB of it made a 3 MB line per claim."""
    body = review()
    body["request"]["object"]["metadata"]["generateName"] = "g" * 3_000_000
    with caplog.at_level(logging.INFO, logger="webhook.admit"):
        admitter(MemoryWrites(placement("older", "gpu-0", created="2026-11-29T09:00:00Z")), Metrics()).admit(body)
    (claim,) = [record for record in caplog.records if getattr(record, "fields", {}).get("event") == "claim"]
    assert json.loads(JsonFormatter().format(claim))["generateName"] == f"{'g' * 250}..."


def test_each_pass_is_timed_by_kind_the_first_full_the_next_queued() -> None:
    loop = reconciler(MemoryWrites(evicting()))
    loop.reconcile_once()
    loop.reconcile_once()
    counts = {
        sample.labels["kind"]: sample.value
        for family in loop.metrics.registry.collect()
        for sample in family.samples
        if sample.name == "hami_place_reconcile_pass_seconds_count"
    }
    assert counts == {"full": 1.0, "queued": 1.0}


def test_a_guard_lease_whose_holder_is_no_name_shows_none_of_it_in_the_pods_warning() -> None:
    """The reqID guard is a Lease in the server's namespace: who may write Leases there could put any text in its
    annotation and holderIdentity, which the losing pod's creator would read in a warning."""
    writes = sharing_req_id()
    forged = "evil\nWarning: x\x1b[2J"
    name = req_id_guard_name(NS, writes.stored[(NS, "first")]["spec"]["reqID"])
    writes.guards[("server", name)] = Guard("server", name, "lease-x", forged, forged, NS)
    serving = review()
    serving["request"]["object"]["metadata"]["labels"] = {"app": "serve"}
    warnings = admitter(writes, Metrics()).admit(serving)["response"]["warnings"]
    assert any("reqID already held by placement ? (?)" in w for w in warnings), warnings
    assert not any("evil" in w for w in warnings)


def test_an_event_whose_send_fails_in_any_way_leaves_the_thread_sending_the_next(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """One failed Event must not end the Events of the replica's whole life; the log says which failed."""
    sent: list[str] = []

    def sender(_placement: dict[str, Any], reason: str, _message: str, _warning: bool) -> None:
        if reason == "first":
            raise RuntimeError("not a KubeError")
        sent.append(reason)

    events = QueuedEvents(sender)
    with caplog.at_level(logging.ERROR, logger="webhook.writes"):
        events.put({}, "first", "", warning=False)
        events.put({}, "second", "", warning=False)
        events.close(10)
    assert sent == ["second"]
    assert [record.getMessage() for record in caplog.records] == ["event first not recorded"]


def test_a_pod_carries_a_claim_only_by_the_claim_annotation_itself() -> None:
    """The claim-digest label is an index anyone may set on a pod: only the token in the annotation proves a claim,
    so that a claim is never kept alive (or released) on a label's word."""
    labelled = {"metadata": {"labels": {CLAIM_DIGEST_LABEL: "0123abcd"}, "annotations": {}}}
    pods = [
        {"metadata": {"annotations": {CLAIM_ANNOTATION: "tok"}}},
        {"metadata": {"annotations": {CLAIM_ANNOTATION: "other"}}},
        labelled,
        {"metadata": {"annotations": None}},
        {"metadata": None},
        {},
    ]
    assert [_carries(pod, "tok") for pod in pods] == [True, False, False, False, False, False]


def admissions(metrics: Metrics) -> dict[str, float]:
    """The admissions counted by result, those counted at all."""
    return {
        sample.labels["result"]: sample.value
        for family in metrics.registry.collect()
        for sample in family.samples
        if sample.name == "hami_place_admissions_total" and sample.value
    }


def test_an_admitter_without_a_kube_or_writes_is_refused_and_one_with_a_kube_writes_through_it() -> None:
    """A server wired without its API client would otherwise fail only at the first claim, inside an admission."""
    with pytest.raises(ValueError, match=r"^an Admitter needs a Kube or its Writes$"):
        Admitter(None, cache(MemoryWrites()), Settings(), Metrics())
    kube = unreachable_kube()
    writes = Admitter(kube, cache(MemoryWrites()), Settings(), Metrics()).writes
    assert isinstance(writes, KubeWrites) and writes.kube is kube


def admitted_unchanged(warning: str) -> dict[str, Any]:
    """The review's answer when the pod is let in as it came, with one warning saying why."""
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": "u1", "allowed": True, "warnings": [warning]},
    }


def test_a_fault_of_ours_admits_the_pod_unchanged_says_so_and_counts_an_error(caplog: pytest.LogCaptureFixture) -> None:
    """A bug in the webhook must never block a pod, and must show in the log and the error count."""
    writes = MemoryWrites(placement("p", "gpu-0", created="2026-11-29T09:00:00Z"))

    def crash(_target: Placement) -> None:
        raise RuntimeError("a bug")

    writes.before_write = crash
    metrics = Metrics()
    with caplog.at_level(logging.ERROR, logger="webhook.admit"):
        response = admitter(writes, metrics).admit(review())
    assert response == admitted_unchanged("hami-place: internal error, the pod is admitted unchanged")
    assert admissions(metrics) == {"error": 1.0}
    assert [record.getMessage() for record in caplog.records] == ["admission u1 failed; admitting the pod unchanged"]


def test_the_latency_observed_runs_from_the_reviews_arrival_to_its_answer() -> None:
    """The histogram takes `started` (when the request came in) to its answer: no more than the caller saw pass."""
    writes = MemoryWrites(placement("p", "gpu-0", created="2026-11-29T09:00:00Z"))
    metrics = Metrics()
    started = time.perf_counter()
    admitter(writes, metrics).admit_review(parse_review(review()), started)
    elapsed = time.perf_counter() - started
    assert sample(metrics.latency, "_count") == 1
    observed = sample(metrics.latency, "_sum")
    assert 0 < observed <= elapsed, (observed, elapsed)


def test_a_cache_not_synced_yet_admits_the_pod_unchanged_with_a_warning() -> None:
    """Deciding from a half-filled cache would pin pods on placements it has not seen yet."""
    writes = MemoryWrites(placement("p", "gpu-0", created="2026-11-29T09:00:00Z"))
    unsynced = ClusterCache(ApiClient(), "hami-scheduler")
    metrics = Metrics()
    response = Admitter(None, unsynced, Settings(), metrics, writes=writes).admit(review())
    assert response == admitted_unchanged(
        "hami-place: the webhook's cache is not synced yet; the pod is admitted unchanged"
    )
    assert admissions(metrics) == {"error": 1.0} and writes.writes == []


def test_only_a_dry_run_that_would_be_pinned_counts_as_a_dry_run() -> None:
    """The dry_run count says how many pins were only tried: a real claim or an unselected pod is not one."""
    writes = MemoryWrites(
        placement("p", "gpu-0", created="2026-11-29T09:00:00Z"),
        placement("q", "gpu-1", created="2026-11-29T10:00:00Z"),
    )
    metrics = Metrics()
    run = admitter(writes, metrics)
    unselected = review()
    unselected["request"]["object"]["metadata"]["labels"] = {"app": "other"}
    unselected["request"]["dryRun"] = True
    run.admit(unselected)
    run.admit(review())
    assert admissions(metrics) == {"no_placement": 1.0, "pinned": 1.0}
    dry = review()
    dry["request"]["dryRun"] = True
    run.admit(dry)
    assert admissions(metrics) == {"no_placement": 1.0, "pinned": 1.0, "dry_run": 1.0}


def test_on_the_event_loop_only_reviews_the_cache_answers_alone_are_answered() -> None:
    """The loop must never wait on the API server: a claim to write or our annotations go to a thread."""
    writes = MemoryWrites(placement("p", "gpu-0", created="2026-11-29T09:00:00Z"))
    run = admitter(writes, Metrics())
    assert run.admit_review(parse_review(review()), 0.0, cache_only=True) is None
    annotated = review({CLAIM_ANNOTATION: "tok-x", PLACEMENT_ANNOTATION: "p"})
    assert run.admit_review(parse_review(annotated), 0.0, cache_only=True) is None
    assert writes.writes == [] and writes.reads == [] and writes.guards == {}
    unselected = review()
    unselected["request"]["object"]["metadata"]["labels"] = {"app": "other"}
    assert run.admit_review(parse_review(unselected), 0.0, cache_only=True) == {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": "u1", "allowed": True},
    }


def test_a_claim_a_cached_pod_carries_is_not_honoured_again_without_asking_the_api_server() -> None:
    """The cache knows HAMi's stored pods: a copy of one of them must not be pinned on its claim."""
    claimed = {"phase": "Consumed", "claim": {"token": "tok-stored", "claimedAt": "2026-11-29T11:59:00Z"}}
    writes = MemoryWrites(placement("p", "gpu-0", created="2026-11-29T09:00:00Z", status=claimed))
    tokens = iter(["tok-new"])
    run = Admitter(
        None,
        cache(writes, (stored_pod("trainer-0", "uid-1", "tok-stored", phase="Running"),)),
        Settings(),
        Metrics(),
        clock=lambda: NOW,
        new_token=lambda: next(tokens),
        writes=writes,
    )
    response = run.admit(review({CLAIM_ANNOTATION: "tok-stored", PLACEMENT_ANNOTATION: "p"}))
    assert writes.carried_asks == []
    assert [op["path"] for op in patch_of(response)] == [
        "/metadata/annotations/scheduling.hami.placement.com~1claim",
        "/metadata/annotations/scheduling.hami.placement.com~1placement",
    ]


class ReadsTimeOut(MemoryWrites):
    """An API server that cannot be read: neither a placement nor which pods carry a claim."""

    def read_placement(self, namespace: str, name: str) -> dict[str, Any] | None:
        raise KubeError("timed out")

    def claim_carried(self, namespace: str, token: str, *, unlabelled: bool = False) -> bool:
        raise KubeError("timed out")


def test_a_claim_that_cannot_be_re_read_nor_its_carriers_looked_up_is_honoured_from_the_cache(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An outage of the reads must not strip the pin from the very pod the claim was written for; the log says why
    the cache decided."""
    claimed = {"phase": "Consumed", "claim": {"token": "tok-stored", "claimedAt": "2026-11-29T11:59:00Z"}}
    writes = ReadsTimeOut(placement("p", "gpu-0", created="2026-11-29T09:00:00Z", status=claimed))
    with caplog.at_level(logging.WARNING, logger="webhook.admit"):
        response = admitter(writes, Metrics()).admit(
            review({CLAIM_ANNOTATION: "tok-stored", PLACEMENT_ANNOTATION: "p"})
        )
    assert any(op["path"] == "/spec/affinity" for op in patch_of(response))
    assert "warnings" not in response["response"]
    assert [record.getMessage() for record in caplog.records] == [
        "re-reading placement team-a/p failed: timed out",
        "looking up pods carrying a claim in team-a failed: timed out",
    ]


def test_a_placement_named_by_a_pod_and_deleted_at_the_api_server_leaves_the_cache() -> None:
    """A deleted placement the cache still holds would be offered to the next pods until its watch event came."""
    writes = MemoryWrites(placement("p", "gpu-0", created="2026-11-29T09:00:00Z"))
    run = admitter(writes, Metrics())
    del writes.stored[(NS, "p")]
    run.admit(review({CLAIM_ANNOTATION: "tok-gone", PLACEMENT_ANNOTATION: "p"}))
    assert run.cache.parsed_placements(NS) == [] and writes.writes == []


def test_a_claim_of_a_pod_without_generate_name_logs_every_field(caplog: pytest.LogCaptureFixture) -> None:
    """The claim line is what an operator searches by pod and user: each field must be there, empty when unknown."""
    writes = MemoryWrites(placement("older", "gpu-0", created="2026-11-29T09:00:00Z"))
    body = review()
    body["request"]["name"] = "trainer-0"
    with caplog.at_level(logging.INFO, logger="webhook.admit"):
        admitter(writes, Metrics()).admit(body)
    (claim,) = [record for record in caplog.records if getattr(record, "fields", {}).get("event") == "claim"]
    assert claim.fields == {  # type: ignore[attr-defined]
        "event": "claim",
        "placement": f"{NS}/older",
        "node": "gpu-0",
        "namespace": NS,
        "pod": "trainer-0",
        "generateName": "",
        "user": "",
        "review": "u1",
        "dryRun": False,
    }


@pytest.mark.parametrize("lost", ["race", "req_id"])
def test_a_copy_of_a_pinned_pod_whose_first_claim_is_lost_claims_the_next_placement(lost: str) -> None:
    """A copy keeps being told apart from the pinned pod on every try of its own claim, whatever the try lost to."""
    claimed = {"phase": "Consumed", "claim": {"token": "tok-stored", "claimedAt": "2026-11-29T11:59:00Z"}}
    writes = MemoryWrites(
        placement("p", "gpu-0", created="2026-11-29T08:00:00Z", status=claimed),
        placement("older", "gpu-1", created="2026-11-29T09:00:00Z"),
        placement("newer", "gpu-1", created="2026-11-29T10:00:00Z"),
    )
    writes.pods_carrying.add("tok-stored")
    if lost == "race":
        writes.before_write = lambda target: writes.touch(target.name) if not writes.reads[1:] else None
    else:
        name = req_id_guard_name(NS, "req-older")
        writes.guards[("server", name)] = Guard("server", name, "lease-x", "uid-other", "other", NS)
    response = admitter(writes, Metrics()).admit(review({CLAIM_ANNOTATION: "tok-stored", PLACEMENT_ANNOTATION: "p"}))
    chosen = "older" if lost == "race" else "newer"
    assert [(op["op"], op["path"], op["value"]) for op in patch_of(response) if "annotations" in op["path"]] == [
        ("add", "/metadata/annotations/nvidia.com~1use-gpuuuid", "GPU-b"),
        ("add", "/metadata/annotations/scheduling.hami.placement.com~1req-id", f"req-{chosen}"),
        ("replace", "/metadata/annotations/scheduling.hami.placement.com~1claim", "tok-0"),
        ("replace", "/metadata/annotations/scheduling.hami.placement.com~1placement", chosen),
    ]
    assert response["response"].get("warnings", []) == (
        []
        if lost == "race"
        else ["hami-place: placement older skipped: reqID already held by placement other (uid-other)"]
    )


def test_a_claim_whose_evict_pod_is_not_stored_evicts_nothing_and_says_so() -> None:
    """An evictPod naming no pod must not become an eviction of whatever pod takes that name later."""
    obj = placement("make-room", "gpu-0", created="2026-11-29T11:00:00Z")
    obj["spec"]["evictPod"] = "old"
    writes = MemoryWrites(obj)
    admitter(writes, Metrics()).admit(review())
    assert writes.stored[(NS, "make-room")]["status"]["eviction"] == {
        "pod": "old",
        "result": "NotFound",
        "attempts": 0,
        "message": "pod old did not exist when the placement was claimed; nothing was evicted (check evictPod)",
        "time": "2026-11-29T12:00:00Z",
    }
    assert (writes.events, writes.event_of) == (["Claimed"], [("make-room", True)])
    assert writes.messages == [
        "claimed by pod trainer-0; pod old did not exist when the placement was claimed; nothing was evicted "
        "(check evictPod)"
    ]


def test_a_gpu_pod_admitted_while_a_room_is_kept_is_kept_off_its_cards() -> None:
    """A rescue's freed card must go to the rescued pod: a pod admitted meanwhile gets it in its nouse-gpuuuid, so
    HAMi places it elsewhere; once the deadline passed, the card is anyone's again."""
    writes = MemoryWrites()
    waiting = {
        "metadata": {"name": "big", "namespace": NS, "uid": "uid-big", "resourceVersion": "3"},
        "spec": {"schedulerName": "hami-scheduler"},
        "status": {"phase": "Pending"},
    }
    kept = cache(writes, (waiting,))
    room = reservation_value(
        ["GPU-b"], NOW + timedelta(minutes=1), None, key=kept.room_key, pod=f"{NS}/big", uid="uid-big"
    )
    waiting["metadata"]["annotations"] = {ROOM_RESERVED_ANNOTATION: room}
    kept.pods.upsert(waiting)
    now = [NOW]
    admitting = Admitter(None, kept, Settings(), Metrics(), clock=lambda: now[0], writes=writes)
    assert patch_of(admitting.admit(review())) == [
        {"op": "add", "path": "/metadata/annotations", "value": {NOUSE_GPUUUID_ANNOTATION: "GPU-b"}}
    ]
    now[0] = NOW + timedelta(minutes=2)
    assert patch_of(admitting.admit(review())) == []


class Noted(MemoryWrites):
    """MemoryWrites noting the namespace of each eviction and each lookup of a claim's carriers; the next
    `lookups_failing` lookups and `deletes_failing` deletes fail as an API server away would."""

    def __init__(self, *placements: dict[str, Any]) -> None:
        super().__init__(*placements)
        self.namespaces: list[str] = []
        self.lookups_failing = 0
        self.deletes_failing = 0
        self.involved: list[str] = []
        self.sweeps = 0

    def evict(self, namespace: str, pod: str, uid: str) -> None:
        self.namespaces.append(f"evict {namespace}/{pod}")
        super().evict(namespace, pod, uid)

    def claim_carried(self, namespace: str, token: str, *, unlabelled: bool = False) -> bool:
        self.namespaces.append(f"carried {namespace} {token}")
        if self.lookups_failing:
            self.lookups_failing -= 1
            raise KubeError("the API server is away")
        return super().claim_carried(namespace, token, unlabelled=unlabelled)

    def release_room_wait(self, namespace: str, pod: str, uid: str) -> bool:
        self.namespaces.append(f"let go {namespace}/{pod}")
        return super().release_room_wait(namespace, pod, uid)

    def record_event(self, placement: Mapping[str, Any], reason: str, message: str, *, warning: bool) -> None:
        meta = placement["metadata"]
        self.involved.append(f"{placement.get('kind', 'placement')} {meta['namespace']}/{meta['name']} {meta['uid']}")
        super().record_event(placement, reason, message, warning=warning)

    def list_guards(self) -> list[Guard]:
        self.sweeps += 1
        return super().list_guards()

    def delete_placement(self, placement: Placement) -> None:
        if self.deletes_failing:
            self.deletes_failing -= 1
            raise KubeError("the API server is away")
        super().delete_placement(placement)


def logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The reconciler's log lines, in order."""
    return [record.getMessage() for record in caplog.records if record.name == "webhook.reconcile"]


def test_a_finished_placement_whose_deletion_failed_is_deleted_a_sweep_later_then_asked_no_more(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A failed delete must neither hammer an API server in trouble every pass nor be forgotten (the placement would
    stay for ever); the log tells each try."""
    asked = asking(monkeypatch)
    writes = Noted(finished("old", NOW - timedelta(days=2)))
    writes.deletes_failing = 1
    now = [NOW]
    loop = Reconciler(
        None, cache(writes), Metrics(), 10**9, lambda: now[0], writes=writes, monotonic=lambda: 0.0, finished_ttl=86400
    )
    with caplog.at_level(logging.INFO, logger="webhook.reconcile"):
        loop.reconcile_once()
        now[0] = NOW + timedelta(seconds=29)
        loop.reconcile_once()
        assert [name for _, name in writes.stored] == ["old"], "asked again before GUARD_SWEEP_SECONDS"
        now[0] = NOW + timedelta(seconds=31)
        loop.reconcile_once()
        assert writes.stored == {}
        now[0] = NOW + timedelta(hours=1)
        loop.reconcile_once()
    assert asked == ["old", "old"]
    assert logged(caplog) == [
        "finished placement team-a/old not deleted: the API server is away",
        "placement team-a/old deleted: finished at 2026-11-27T12:00:00+00:00",
    ]


def test_a_claim_is_released_only_after_a_fresh_lookup_in_its_namespace_and_the_log_says_why_not(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A claim released while a pod may carry it strips that pod's pin: every reason it was kept is logged, and a
    lookup that failed keeps it."""
    writes = Noted(stale_claim())
    writes.lookups_failing = 1
    ticks = [0.0]
    loop = Reconciler(None, cache(writes), Metrics(), 3600, lambda: NOW, writes=writes, monotonic=lambda: ticks[0])
    loop.reconcile_once()
    ticks[0] += DEFAULTS.claim_grace + 1
    with caplog.at_level(logging.WARNING, logger="webhook.reconcile"):
        loop.reconcile_once()
        assert writes.writes == [], "released while the lookup failed"
        for reflector in loop.cache.reflectors():
            reflector.last_sync = time.time() - CACHE_STALE_SECONDS - 1
        loop.reconcile_once()
        for reflector in loop.cache.reflectors():
            reflector.last_sync = time.time()
        loop.reconcile_once()
    assert [w["phase"] for w in writes.writes] == ["Pending"]
    assert writes.namespaces == ["carried team-a tok-far", "carried team-a tok-far"]
    assert logged(caplog) == [
        "claim in team-a not released: looking up pods carrying it failed: the API server is away",
        "claim in team-a not released: the cache is stale",
    ]


def test_an_eviction_is_logged_counted_by_result_and_told_on_its_placement(caplog: pytest.LogCaptureFixture) -> None:
    """An eviction ends someone else's pod: the log, the metric and the Event each say which placement, which pod
    and what became of it."""
    writes = Noted(evicting())
    writes.evict_with = [BlockedByDisruptionBudget("ns", "old", ("web",), "blocked by PodDisruptionBudget web")]
    loop = reconciler(writes)
    with caplog.at_level(logging.INFO, logger="webhook.reconcile"):
        loop.reconcile_once()
    assert writes.namespaces == ["evict team-a/old"]
    assert logged(caplog) == ["placement team-a/make-room: eviction Blocked: blocked by PodDisruptionBudget web"]
    evictions = {
        sample.labels["result"]: sample.value
        for family in loop.metrics.registry.collect()
        for sample in family.samples
        if sample.name == "hami_place_evictions_total" and sample.value
    }
    assert evictions == {"Blocked": 1.0}
    assert (writes.events, writes.messages, writes.event_of) == (
        ["EvictionBlocked"],
        ["blocked by PodDisruptionBudget web"],
        [("make-room", True)],
    )


def test_a_status_or_eviction_result_not_written_is_logged_and_nothing_else_follows(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A write the API server refused leaves no Event claiming it happened and no expiry counted; the log says which
    placement and why."""
    writes = MemoryWrites(placement("open", "gpu-0", created="2026-11-29T10:00:00Z"), evicting())
    calls = itertools.count()

    def refused(_placement: Placement) -> None:
        if next(calls) in (0, 2):
            raise KubeError("the API server is away")

    writes.before_write = refused
    loop = reconciler(writes)
    with caplog.at_level(logging.WARNING, logger="webhook.reconcile"):
        loop.reconcile_once()
    assert sorted(logged(caplog)) == [
        "eviction result of team-a/make-room not recorded: the API server is away",
        "status of team-a/open not written: the API server is away",
    ]
    assert writes.events == [] and counter(loop.metrics, "hami_place_expirations") == 0
    loop.reconcile_once()
    assert counter(loop.metrics, "hami_place_expirations") == 1
    assert (writes.events, writes.messages, writes.event_of) == (
        ["Expired"],
        ["not claimed within 3600s"],
        [("open", True)],
    )


def made_room(name: str, evicted: str) -> dict[str, Any]:
    """A placement whose pod was placed, its eviction of `evicted` done."""
    obj = evicting()
    obj["metadata"]["name"] = name
    obj["spec"]["evictPod"] = evicted
    obj["status"]["phase"] = "Consumed"
    obj["status"]["eviction"] = {
        "pod": evicted,
        "uid": f"uid-{evicted}",
        "result": "Evicted",
        "attempts": 1,
        "time": "2026-11-29T11:59:00Z",
    }
    return obj


def waiting_pod(name: str, placement_name: str) -> dict[str, Any]:
    """A pod named `name` gated on its room, pinned by `placement_name`."""
    pod = gated_pod(placement_name)
    pod["metadata"]["name"], pod["metadata"]["uid"] = name, f"uid-{name}"
    return pod


def test_each_waiting_pod_is_let_go_on_its_own_once_its_room_is_made_and_settled(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """One pod still waiting, one not settled yet or one the API server refused must hold up none of the others;
    a pod whose evicted pod still runs waits however long; the log and the Event on the pod say why it went."""
    writes = Noted(made_room("waits", "old"), made_room("later", "old-2"))
    writes.let_go_with = [KubeError("the API server is away")]
    pods = (
        waiting_pod("waiting-0", "waits"),
        waiting_pod("later-0", "later"),
        waiting_pod("gone-0", "gone"),
        waiting_pod("gone-1", "gone"),
        stored_pod("old", "uid-old", phase="Running"),
        stored_pod("old-2", "uid-old-2", phase="Running"),
    )
    clock = [0.0]
    loop = clocked(writes, pods, clock)
    with caplog.at_level(logging.INFO, logger="webhook.reconcile"):
        loop.reconcile_once()
        clock[0] += ROOM_SETTLE_SECONDS
        loop.cache.pods.remove(NS, "old-2")
        loop.reconcile_once()
        assert writes.let_go == ["gone-1 uid-gone-1"]
        lifted = waiting_pod("gone-1", "gone")
        lifted["spec"]["schedulingGates"] = [{"name": "example.com/other"}]
        loop.cache.pods.upsert(lifted)  # the API server stored the lift
        clock[0] += ROOM_SETTLE_SECONDS
        loop.reconcile_once()
    assert writes.let_go == ["gone-1 uid-gone-1", "later-0 uid-later-0", "gone-0 uid-gone-0"]
    assert writes.namespaces == [f"let go {NS}/{name}" for name in ("gone-0", "gone-1", "later-0", "gone-0")]
    gate = f"scheduling gate {ROOM_GATE} lifted"
    assert logged(caplog) == [
        "pod team-a/gone-0 not let go to the scheduler: the API server is away",
        f"pod team-a/gone-1: {gate}: its placement is gone",
        f"pod team-a/later-0: {gate}: pod old-2 is gone",
        f"pod team-a/gone-0: {gate}: its placement is gone",
    ]
    assert (writes.involved, writes.events, writes.event_of) == (
        [f"Pod {NS}/{name} uid-{name}" for name in ("gone-1", "later-0", "gone-0")],
        ["RoomMade"] * 3,
        [("gone-1", False), ("later-0", False), ("gone-0", False)],
    )


def test_a_claim_tied_to_its_pod_tells_the_pod_and_the_placement() -> None:
    """The pod's Events are where its owner looks (the placement, node and cards it was pinned to), the placement's
    where its author looks (which pod consumed it)."""
    claimed = {"phase": "Consumed", "claim": {"token": "tok", "claimedAt": "2026-11-29T11:59:00Z"}}
    writes = Noted(placement("p", "gpu-1", created="2026-11-29T09:00:00Z", status=claimed))
    loop = reconciler(writes)
    loop.reconcile_once()
    assert writes.writes[-1]["consumedBy"] == {"name": "trainer-0", "uid": "uid-1"}
    assert (writes.involved, writes.events, writes.messages, writes.event_of) == (
        [f"Pod {NS}/trainer-0 uid-1", f"placement {NS}/p uid-p"],
        ["Pinned", "Consumed"],
        ["pinned by placement p to node gpu-0, cards gpu-1", "pod trainer-0 (uid-1) is stored carrying the claim"],
        [("trainer-0", False), ("p", False)],
    )


def test_a_pass_that_fails_is_logged_and_only_the_placements_it_did_not_finish_are_asked_again(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A placement the failed pass settled keeps its own deadline: backing it off too would ask it for nothing."""
    asked = asking(monkeypatch)
    now = [NOW]
    loop = changed_after_a_pass(now)
    ask = reconcile_module.follow_up

    def failing_second(placement: Placement, *args: Any, **kwargs: Any) -> Any:
        if placement.name == "open-1":
            monkeypatch.setattr(reconcile_module, "follow_up", ask)
            raise RuntimeError("a bug")
        return ask(placement, *args, **kwargs)

    monkeypatch.setattr(reconcile_module, "follow_up", failing_second)
    with caplog.at_level(logging.ERROR, logger="webhook.reconcile"):
        loop.pass_once()
    assert logged(caplog) == ["reconcile pass failed"]
    asked.clear()
    now[0] += timedelta(seconds=1)
    loop.pass_once()
    assert asked == ["open-1"]


def test_a_placement_deleted_then_created_again_under_its_name_is_asked() -> None:
    """Its key must leave the queue's hands when found gone, or the new placement would never be followed."""
    writes = MemoryWrites(placement("p", "gpu-0", created="2026-11-29T11:00:00Z"))
    now = [NOW]
    loop = reconciler(writes, lambda: now[0])
    loop.reconcile_once()
    loop.cache.placements.remove(NS, "p")
    loop.reconcile_once()
    again = placement("p", "gpu-0", created="2026-11-29T09:00:00Z")
    again["metadata"]["uid"] = "uid-p-again"
    writes.stored[(NS, "p")] = copy.deepcopy(again)
    loop.cache.placements.upsert(again)
    loop.reconcile_once()
    assert [w["phase"] for w in writes.writes] == ["Expired"]


def test_an_open_placement_whose_req_id_was_consumed_before_the_replica_started_fails_at_the_first_pass() -> None:
    """The first pass is a full one: it must know which reqIDs are consumed as a queued pass does."""
    waiting = placement("waiting", "gpu-0", created="2026-11-29T11:59:00Z")
    rival = placement("rival", "gpu-1", created="2026-11-29T11:58:00Z", status={"phase": "Consumed"})
    rival["status"]["claim"] = {"token": "tok-r", "claimedAt": "2026-11-29T11:59:30Z"}
    rival["status"]["consumedBy"] = {"name": "trainer-9", "uid": "uid-9"}
    waiting["spec"]["reqID"] = rival["spec"]["reqID"] = "req-shared"
    writes = MemoryWrites(waiting, rival)
    reconciler(writes, pods=()).reconcile_once()
    assert [(w["phase"], w["message"]) for w in writes.writes] == [
        ("Failed", "reqID already consumed by placement rival")
    ]


def test_a_claims_grace_runs_on_across_a_full_pass() -> None:
    """A resync every FULL_PASS_SECONDS must not start the grace of a claim in flight over, or a claim grace longer
    than it would never end."""
    writes = MemoryWrites(stale_claim())
    ticks = [0.0]
    loop = Reconciler(
        None, cache(writes), Metrics(), 3600, lambda: NOW, writes=writes, monotonic=lambda: ticks[0], claim_grace=400
    )
    for at in (0.0, reconcile_module.FULL_PASS_SECONDS, 400.0):
        ticks[0] = at
        loop.reconcile_once()
    assert writes.writes == []
    ticks[0] = 401.0
    loop.reconcile_once()
    assert [w["phase"] for w in writes.writes] == ["Pending"]


def test_guards_are_swept_every_guard_sweep_seconds_and_not_between() -> None:
    """Listing every guard is a call to the API server: once per GUARD_SWEEP_SECONDS, whatever the monotonic clock
    reads at start."""
    writes = Noted()
    ticks = [1000.0]
    loop = Reconciler(None, cache(writes), Metrics(), 3600, lambda: NOW, writes=writes, monotonic=lambda: ticks[0])
    swept = []
    for delta in (0.0, 29.0, 1.0, 1.0):
        ticks[0] += delta
        loop.reconcile_once()
        swept.append(writes.sweeps)
    assert swept == [1, 1, 2, 2]


class GuardsUnreadable(MemoryWrites):
    """An API server whose guards cannot be listed."""

    def list_guards(self) -> list[Guard]:
        raise KubeError("timed out")


def test_a_sweep_reads_only_the_guards_the_cache_finds_obsolete_and_logs_what_it_could_not_do(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The cache decides which guards are worth a read at the API server: a guard of a live placement costs none,
    holds up none of the others, and a sweep that failed says why."""
    writes = sharing_req_id()
    live = writes.hold_req_id(placement_from_object(writes.stored[(NS, "second")]))
    gone = placement("gone", "gpu-0", created="2026-11-29T08:00:00Z")
    writes.hold_req_id(placement_from_object(gone))
    reconciler(writes, pods=()).reconcile_once()
    assert writes.reads == ["gone"] and list(writes.guards.values()) == [live]
    unreadable = ReadsTimeOut(gone)
    guard = unreadable.hold_req_id(placement_from_object(gone))
    loop = reconciler(unreadable, pods=())
    loop.cache.placements.remove(NS, "gone")
    with caplog.at_level(logging.WARNING, logger="webhook.reconcile"):
        loop.reconcile_once()
        reconciler(GuardsUnreadable(), pods=()).reconcile_once()
    assert list(unreadable.guards.values()) == [guard]
    assert logged(caplog) == [
        f"reqID guard server/{guard.name} not released: timed out",
        "listing reqID guards failed: timed out",
    ]


def test_a_deleted_node_leaves_nothing_behind_in_what_the_reconciler_remembers_of_nodes() -> None:
    """Nodes come and go for ever on an autoscaled cluster; a node deleted that this reconciler never saw (the
    cache listed it first) is no error either."""
    loop = reconciler(MemoryWrites())
    loop.cache.nodes.upsert(other_node("gpu-1"))
    loop.cache.nodes.remove("", "gpu-1")
    loop.cache.nodes.remove("", "gpu-0")
    assert loop._nodes_seen == {}


def test_a_full_pass_works_out_again_the_problems_of_each_node_that_changed_and_only_those(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Whether a node changed is asked once per pair of node objects: a heartbeat on one node must not stand for the
    deletion of another."""
    worked = problems_worked_out(monkeypatch)
    on_other = placement("elsewhere", "gpu-0", created="2026-11-29T11:59:00Z")
    on_other["spec"]["nodeName"] = "gpu-1"
    writes = MemoryWrites(placement("open", "gpu-0", created="2026-11-29T11:59:00Z"), on_other)
    ticks = [0.0]
    loop = Reconciler(None, cache(writes), Metrics(), 3600, lambda: NOW, writes=writes, monotonic=lambda: ticks[0])
    loop.cache.nodes.upsert(other_node("gpu-1"))
    loop.reconcile_once()
    worked.clear()
    loop.cache.nodes.upsert({**NODE, "metadata": {**NODE["metadata"], "resourceVersion": "5"}})
    loop.cache.nodes.remove("", "gpu-1")
    ticks[0] = reconcile_module.FULL_PASS_SECONDS
    loop.reconcile_once()
    assert worked == ["gpu-1"]
    assert [(w["phase"], w["message"]) for w in writes.writes] == [("Failed", "node gpu-1 not found")]


def test_a_reconciler_without_a_kube_or_writes_is_refused_and_one_with_a_kube_writes_through_it() -> None:
    """A server wired without its API client would otherwise fail only at the first status write, in the loop."""
    with pytest.raises(ValueError, match=r"^a Reconciler needs a Kube or its Writes$"):
        Reconciler(None, cache(MemoryWrites()), Metrics(), 3600)
    kube = unreachable_kube()
    writes = Reconciler(kube, cache(MemoryWrites()), Metrics(), 3600).writes
    assert isinstance(writes, KubeWrites) and writes.kube is kube


def test_a_reconciler_told_no_finished_ttl_keeps_finished_placements() -> None:
    """0, the default, keeps: deleting what an operator did not ask to delete loses the record of a placement."""
    writes = MemoryWrites(finished("old", NOW - timedelta(days=400)))
    Reconciler(None, cache(writes), Metrics(), 3600, lambda: NOW, writes=writes).reconcile_once()
    assert [name for _, name in writes.stored] == ["old"]


def test_the_loop_waits_for_a_synced_cache_and_passes_on_its_own_without_any_event(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A cache not synced yet would release claims and fail placements on what it does not know; and a loop that
    passed only when an event woke it would miss every deadline of a quiet cluster."""
    monkeypatch.setattr(reconcile_module, "PERIOD_SECONDS", 0.01)
    loop = reconciler(MemoryWrites())
    loop.wake.clear()
    stop = threading.Event()
    readiness = [False]
    passes: list[list[bool]] = []

    def ready() -> bool:
        return readiness.pop(0) if readiness else True

    def recorded_pass() -> None:
        passes.append(list(readiness))
        stop.set()

    loop.cache.ready = ready  # type: ignore[method-assign]
    loop.pass_once = recorded_pass  # type: ignore[method-assign]
    runner = threading.Thread(target=loop.run, args=(stop,), daemon=True)
    runner.start()
    runner.join(timeout=10)
    assert passes == [[]], "a pass ran on a cache not synced, or none ran once it was"
