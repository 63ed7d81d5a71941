"""What happens to a placement after the claim, decided on plain dicts: consumedBy, release, eviction, expiry."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from kubectl_hami_place.core.admission import (
    CLAIM_ANNOTATION,
    EVICTION_RETRY_FIRST_SECONDS,
    EVICTION_RETRY_MAX_SECONDS,
    consumed_req_ids,
    eviction_outcome,
    follow_up,
)

NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
TTL = 3600
GRACE = 60
NS = "team-a"


def at(seconds_ago: float) -> str:
    return (NOW - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def placement(status: dict[str, Any] | None = None, *, created_ago: float = 10, evict: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "reqID": "req-1",
        "podSelector": {"matchLabels": {"a": "b"}},
        "nodeName": "n",
        "gpuDevices": ["gpu-0"],
    }
    if evict:
        spec["evictPod"] = evict
    obj: dict[str, Any] = {
        "metadata": {"name": "p1", "namespace": NS, "resourceVersion": "7", "creationTimestamp": at(created_ago)},
        "spec": spec,
    }
    if status is not None:
        obj["status"] = status
    return obj


def claimed(
    *, ago: float = 5, phase: str = "Consumed", uid: str = "", eviction: dict[str, Any] | None = None
) -> dict[str, Any]:
    status: dict[str, Any] = {
        "phase": phase,
        "claim": {"token": "tok", "claimedAt": at(ago)},
        "consumedAt": at(ago),
        "message": "claimed",
    }
    if uid:
        status["consumedBy"] = {"name": "trainer-abc", "uid": uid}
    if eviction is not None:
        status["eviction"] = eviction
    return status


def stored_pod(token: str = "tok") -> dict[str, Any]:
    return {
        "metadata": {"name": "trainer-abc", "namespace": NS, "uid": "uid-9", "annotations": {CLAIM_ANNOTATION: token}}
    }


def pods(*items: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(p["metadata"]["namespace"], p["metadata"]["annotations"][CLAIM_ANNOTATION]): p for p in items}


def test_nothing_to_do_for_a_fresh_pending_placement() -> None:
    assert follow_up(placement(), {}, NOW, TTL, GRACE) is None


def test_an_unclaimed_placement_expires_after_the_ttl() -> None:
    step = follow_up(placement({"phase": "Pending"}, created_ago=TTL + 1), {}, NOW, TTL, GRACE)
    assert step is not None and not step.evict
    assert step.write.status["phase"] == "Expired"
    assert step.write.resource_version == "7"
    assert step.write.reason == "Expired"
    assert f"{TTL}s" in step.write.status["message"]


def test_finished_placements_never_expire() -> None:
    for phase in ("Failed", "Expired"):
        assert follow_up(placement({"phase": phase}, created_ago=TTL * 2), {}, NOW, TTL, GRACE) is None


def test_the_stored_pod_carrying_the_token_fills_consumed_by() -> None:
    step = follow_up(placement(claimed()), pods(stored_pod()), NOW, TTL, GRACE)
    assert step is not None
    assert step.write.status["consumedBy"] == {"name": "trainer-abc", "uid": "uid-9"}
    assert step.write.status["phase"] == "Consumed"
    assert step.write.status["claim"]["token"] == "tok"


def test_a_pod_with_another_token_or_namespace_does_not_count() -> None:
    other = stored_pod("tok-other")
    elsewhere = stored_pod()
    elsewhere["metadata"]["namespace"] = "team-b"
    assert follow_up(placement(claimed()), pods(other, elsewhere), NOW, TTL, GRACE) is None


def test_a_claim_no_pod_carried_is_released_after_the_grace_period() -> None:
    step = follow_up(
        placement(
            claimed(ago=GRACE + 1, phase="Evicting", eviction={"pod": "old", "result": "Pending", "attempts": 0})
        ),
        {},
        NOW,
        TTL,
        GRACE,
    )
    assert step is not None
    status = step.write.status
    assert status["phase"] == "Pending"
    for gone in ("claim", "consumedBy", "consumedAt", "eviction"):
        assert gone not in status
    assert "claim released" in status["message"]
    assert step.write.reason == "ClaimReleased"


def test_a_consumed_placement_with_its_pod_known_is_left_alone() -> None:
    assert follow_up(placement(claimed(uid="uid-9")), pods(stored_pod()), NOW, TTL, GRACE) is None


def test_eviction_waits_for_the_placed_pod_to_be_stored() -> None:
    status = claimed(phase="Evicting", eviction={"pod": "old", "result": "Pending", "attempts": 0})
    assert follow_up(placement(status, evict="old"), {}, NOW, TTL, GRACE) is None


def test_the_first_eviction_attempt_is_leased_at_once() -> None:
    status = claimed(phase="Evicting", uid="uid-9", eviction={"pod": "old", "result": "Pending", "attempts": 0})
    step = follow_up(placement(status, evict="old"), {}, NOW, TTL, GRACE)
    assert step is not None and step.evict == "old"
    assert step.write.status["eviction"]["attempts"] == 1
    assert step.write.status["eviction"]["time"] == at(0)
    assert step.write.status["phase"] == "Evicting"


def test_a_blocked_eviction_is_retried_with_backoff() -> None:
    blocked = {"pod": "old", "result": "Blocked", "attempts": 3, "time": at(1)}
    status = claimed(phase="Evicting", uid="uid-9", eviction=blocked)
    assert follow_up(placement(status, evict="old"), {}, NOW, TTL, GRACE) is None
    wait = min(EVICTION_RETRY_FIRST_SECONDS * 4, EVICTION_RETRY_MAX_SECONDS)
    status["eviction"] = dict(blocked, time=at(wait))
    step = follow_up(placement(status, evict="old"), {}, NOW, TTL, GRACE)
    assert step is not None and step.evict == "old"
    assert step.write.status["eviction"]["attempts"] == 4


def test_the_backoff_is_capped() -> None:
    blocked = {"pod": "old", "result": "Blocked", "attempts": 30, "time": at(EVICTION_RETRY_MAX_SECONDS)}
    status = claimed(phase="Evicting", uid="uid-9", eviction=blocked)
    assert follow_up(placement(status, evict="old"), {}, NOW, TTL, GRACE) is not None


def test_eviction_gives_up_after_the_ttl_since_the_claim() -> None:
    blocked = {"pod": "old", "result": "Blocked", "attempts": 9, "time": at(5), "message": "PDB web allows 0"}
    status = claimed(ago=TTL + 1, phase="Evicting", uid="uid-9", eviction=blocked)
    step = follow_up(placement(status, evict="old"), {}, NOW, TTL, GRACE)
    assert step is not None and not step.evict
    assert step.write.status["phase"] == "Failed"
    assert step.write.status["eviction"]["result"] == "Failed"
    assert "PDB web allows 0" in step.write.status["message"]


def test_an_eviction_outcome_ends_or_retries() -> None:
    status = claimed(phase="Evicting", uid="uid-9", eviction={"pod": "old", "result": "Pending", "attempts": 1})
    evicted = eviction_outcome(placement(status, evict="old"), "Evicted", "evicted pod old", NOW)
    assert evicted.status["phase"] == "Consumed"
    assert evicted.status["eviction"]["result"] == "Evicted"
    assert evicted.status["eviction"]["attempts"] == 1
    assert {"type": "Evicted", "status": "True"}.items() <= evicted.status["conditions"][-1].items()
    assert not evicted.warning
    gone = eviction_outcome(placement(status, evict="old"), "NotFound", "pod old was already gone", NOW)
    assert gone.status["phase"] == "Consumed" and gone.reason == "EvictionNotNeeded"
    blocked = eviction_outcome(placement(status, evict="old"), "Blocked", "blocked by PodDisruptionBudget web", NOW)
    assert blocked.status["phase"] == "Evicting"
    assert blocked.status["eviction"]["result"] == "Blocked"
    assert "will retry" in blocked.status["message"]
    assert blocked.warning and blocked.reason == "EvictionBlocked"


def test_a_placement_being_deleted_is_left_alone() -> None:
    obj = placement({"phase": "Pending"}, created_ago=TTL * 2)
    obj["metadata"]["deletionTimestamp"] = at(1)
    assert follow_up(obj, {}, NOW, TTL, GRACE) is None


def test_an_open_placement_whose_req_id_another_consumed_fails() -> None:
    first = placement(claimed(uid="uid-9"))
    first["metadata"]["name"] = "first"
    second = placement({"phase": "Pending"})
    consumed = consumed_req_ids([first, second])
    assert consumed == {(NS, "req-1"): "first"}
    step = follow_up(second, {}, NOW, TTL, GRACE, consumed=consumed)
    assert step is not None
    assert step.write.status["phase"] == "Failed"
    assert step.write.status["message"] == "reqID already consumed by placement first"
    assert follow_up(first, {}, NOW, TTL, GRACE, consumed=consumed) is None
