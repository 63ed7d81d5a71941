"""What happens to a placement after its creation, decided on plain data: consumedBy, release, eviction, expiry."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import tracemalloc
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from kubectl_hami_place.core import lifecycle
from kubectl_hami_place.core.lifecycle import (
    EVICTION_RETRY_FIRST_SECONDS,
    EVICTION_RETRY_MAX_SECONDS,
    FollowUp,
    StatusWrite,
    finished_at,
)
from kubectl_hami_place.core.names import (
    CLAIM_ANNOTATION,
    PLACEMENT_ANNOTATION,
    ROOM_ANNOTATION,
    ROOM_GATE,
    USE_GPUUUID_ANNOTATION,
    EvictionResult,
    Phase,
)
from kubectl_hami_place.core.pin_check import problems_on
from kubectl_hami_place.core.placement import (
    Condition,
    EvictionStatus,
    Placement,
    PlacementStatus,
    merge_condition,
    placement_from_object,
    placements_from_objects,
    status_to_object,
)

NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
TTL = 3600
GRACE = 60
NS = "team-a"


def follow_up(obj: dict[str, Any], claimed_pods: Any, now: datetime, ttl: int, grace: int, **kw: Any) -> Any:
    """lifecycle.follow_up on the placement as the server parses it."""
    return lifecycle.follow_up(placement_from_object(obj), claimed_pods, now, ttl, grace, **kw)


def consumed_req_ids(items: list[dict[str, Any]]) -> dict[tuple[str, str], str]:
    return lifecycle.consumed_req_ids(placements_from_objects(items))


def eviction_outcome(obj: dict[str, Any], result: str, message: str, now: datetime) -> StatusWrite:
    return lifecycle.eviction_outcome(placement_from_object(obj), EvictionResult(result), message, now)


def written(write: StatusWrite) -> dict[str, Any]:
    """The status the write puts, in the CRD's dict form."""
    return status_to_object(write.status)


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


PLACED = pods(stored_pod())


def test_nothing_to_do_for_a_fresh_pending_placement() -> None:
    assert follow_up(placement(), {}, NOW, TTL, GRACE) is None


def test_an_unclaimed_placement_expires_after_the_ttl() -> None:
    step = follow_up(placement({"phase": "Pending"}, created_ago=TTL + 1), {}, NOW, TTL, GRACE)
    assert step is not None and not step.evict
    assert written(step.write)["phase"] == "Expired"
    assert step.write.resource_version == "7"
    assert step.write.reason == "Expired"
    assert f"{TTL}s" in written(step.write)["message"]


def test_finished_placements_never_expire() -> None:
    for phase in ("Failed", "Expired"):
        assert follow_up(placement({"phase": phase}, created_ago=TTL * 2), {}, NOW, TTL, GRACE) is None


def test_the_stored_pod_carrying_the_token_fills_consumed_by() -> None:
    step = follow_up(placement(claimed()), pods(stored_pod()), NOW, TTL, GRACE)
    assert step is not None
    assert written(step.write)["consumedBy"] == {"name": "trainer-abc", "uid": "uid-9"}
    assert written(step.write)["phase"] == "Consumed"
    assert written(step.write)["claim"]["token"] == "tok"


def test_filling_consumed_by_says_on_the_placed_pod_which_placement_pinned_it_where() -> None:
    pod = stored_pod()
    pod["metadata"]["annotations"][USE_GPUUUID_ANNOTATION] = "GPU-aaaa"
    step = follow_up(placement(claimed()), pods(pod), NOW, TTL, GRACE)
    assert step is not None and step.pod_event is not None
    assert step.pod_event.involved == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"namespace": NS, "name": "trainer-abc", "uid": "uid-9"},
    }
    assert step.pod_event.reason == "Pinned"
    assert step.pod_event.message == "pinned by placement p1 to node n, cards gpu-0 (GPU-aaaa)"
    later = follow_up(placement(claimed(uid="uid-9", phase="Evicting"), evict="v"), pods(pod), NOW, TTL, GRACE)
    assert later is not None and later.pod_event is None, "the pin is said once, when the pod is first seen"


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
    status = written(step.write)
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
    step = follow_up(placement(status, evict="old"), PLACED, NOW, TTL, GRACE)
    assert step is not None and step.evict == "old" and step.evict_uid == ""
    assert written(step.write)["eviction"]["attempts"] == 1
    assert written(step.write)["eviction"]["time"] == at(0)
    assert written(step.write)["phase"] == "Evicting"


def test_a_blocked_eviction_is_retried_with_backoff() -> None:
    blocked = {"pod": "old", "result": "Blocked", "attempts": 3, "time": at(1)}
    status = claimed(phase="Evicting", uid="uid-9", eviction=blocked)
    assert follow_up(placement(status, evict="old"), PLACED, NOW, TTL, GRACE) is None
    wait = min(EVICTION_RETRY_FIRST_SECONDS * 4, EVICTION_RETRY_MAX_SECONDS)
    status["eviction"] = dict(blocked, time=at(wait))
    step = follow_up(placement(status, evict="old"), PLACED, NOW, TTL, GRACE)
    assert step is not None and step.evict == "old"
    assert written(step.write)["eviction"]["attempts"] == 4


def test_the_backoff_is_capped() -> None:
    blocked = {"pod": "old", "result": "Blocked", "attempts": 30, "time": at(EVICTION_RETRY_MAX_SECONDS)}
    status = claimed(phase="Evicting", uid="uid-9", eviction=blocked)
    assert follow_up(placement(status, evict="old"), PLACED, NOW, TTL, GRACE) is not None


def test_a_count_of_attempts_near_int32s_end_builds_no_number_of_its_size() -> None:
    """`status.eviction.attempts` is whatever the status's writer wrote (the CRD's `format: int32` is not checked by
    the API server): 2^31 - 1 made the backoff a number of 2^31 bits, 256 MiB and 17 s of CPU every pass while the
    reconciler holds the GIL /mutate needs (2^33 ran a minute into a MemoryError)."""
    blocked = {"pod": "old", "result": "Blocked", "attempts": 2**31 - 1, "time": at(EVICTION_RETRY_MAX_SECONDS)}
    status = claimed(phase="Evicting", uid="uid-9", eviction=blocked)
    tracemalloc.start()
    try:
        assert follow_up(placement(status, evict="old"), PLACED, NOW, TTL, GRACE) is not None
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, f"{peak} bytes at the peak"


def test_eviction_gives_up_after_the_ttl_since_the_claim() -> None:
    blocked = {"pod": "old", "result": "Blocked", "attempts": 9, "time": at(5), "message": "PDB web allows 0"}
    status = claimed(ago=TTL + 1, phase="Evicting", uid="uid-9", eviction=blocked)
    step = follow_up(placement(status, evict="old"), PLACED, NOW, TTL, GRACE)
    assert step is not None and not step.evict
    assert written(step.write)["phase"] == "Failed"
    assert written(step.write)["eviction"]["result"] == "Failed"
    assert "PDB web allows 0" in written(step.write)["message"]


def test_an_eviction_outcome_ends_or_retries() -> None:
    status = claimed(phase="Evicting", uid="uid-9", eviction={"pod": "old", "result": "Pending", "attempts": 1})
    evicted = eviction_outcome(placement(status, evict="old"), "Evicted", "evicted pod old", NOW)
    assert written(evicted)["phase"] == "Consumed"
    assert written(evicted)["eviction"]["result"] == "Evicted"
    assert written(evicted)["eviction"]["attempts"] == 1
    assert {"type": "Evicted", "status": "True"}.items() <= written(evicted)["conditions"][-1].items()
    assert not evicted.warning
    gone = eviction_outcome(placement(status, evict="old"), "NotFound", "pod old was already gone", NOW)
    assert written(gone)["phase"] == "Consumed" and gone.reason == "EvictionNotNeeded"
    blocked = eviction_outcome(placement(status, evict="old"), "Blocked", "blocked by PodDisruptionBudget web", NOW)
    assert written(blocked)["phase"] == "Evicting"
    assert written(blocked)["eviction"]["result"] == "Blocked"
    assert "will retry" in written(blocked)["message"]
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
    assert written(step.write)["phase"] == "Failed"
    assert written(step.write)["message"] == "reqID already consumed by placement first"
    assert follow_up(first, {}, NOW, TTL, GRACE, consumed=consumed) is None


def test_an_open_placement_on_a_node_that_is_gone_or_a_card_that_is_missing_fails_from_the_reconciler() -> None:
    node = NODE_N
    assert follow_up(placement({"phase": "Pending"}), {}, NOW, TTL, GRACE, problems=problems_on({"n": node})) is None
    gone = follow_up(placement({"phase": "Pending"}), {}, NOW, TTL, GRACE, problems=problems_on({}))
    assert isinstance(gone, FollowUp) and written(gone.write)["phase"] == "Failed"
    assert written(gone.write)["message"] == "node n not found"
    missing = placement({"phase": "Pending"})
    missing["spec"]["gpuDevices"] = ["gpu-3"]
    step = follow_up(missing, {}, NOW, TTL, GRACE, problems=problems_on({"n": node}))
    assert step is not None and "no card with index 3" in written(step.write)["message"]


def test_a_card_that_is_unhealthy_or_a_node_without_register_only_waits() -> None:
    cards = [{**CARD_A, "health": False}]
    sick = {"metadata": {"name": "n", "annotations": {"hami.io/node-nvidia-register": json.dumps(cards)}}}
    assert follow_up(placement({"phase": "Pending"}), {}, NOW, TTL, GRACE, problems=problems_on({"n": sick})) is None
    bare = {"metadata": {"name": "n"}}
    assert follow_up(placement({"phase": "Pending"}), {}, NOW, TTL, GRACE, problems=problems_on({"n": bare})) is None


def test_merge_condition_keeps_transition_time_when_status_is_unchanged() -> None:
    t0, t1 = NOW - timedelta(hours=1), NOW
    old = (Condition("Evicted", "False", "Pending", "m", t0),)
    new = Condition("Evicted", "False", "Blocked", "pdb", t1)
    assert merge_condition(old, new) == (Condition("Evicted", "False", "Blocked", "pdb", t0),)
    flipped = Condition("Evicted", "True", "Evicted", "done", t1)
    assert merge_condition(old, flipped) == (flipped,)


def evicting_status(target_uid: str = "uid-old") -> dict[str, Any]:
    eviction = {"pod": "old", "uid": target_uid, "result": "Pending", "attempts": 0}
    return claimed(phase="Evicting", uid="uid-9", eviction=eviction)


def test_the_eviction_carries_the_uid_recorded_at_the_claim() -> None:
    step = follow_up(placement(evicting_status(), evict="old"), PLACED, NOW, TTL, GRACE)
    assert step is not None and (step.evict, step.evict_uid) == ("old", "uid-old")
    assert written(step.write)["eviction"]["uid"] == "uid-old"


def test_the_placed_pod_itself_is_never_evicted() -> None:
    for target_uid, name in (("uid-9", "old"), ("", "trainer-abc")):
        status = evicting_status(target_uid)
        status["eviction"]["pod"] = name
        step = follow_up(placement(status, evict=name), PLACED, NOW, TTL, GRACE)
        assert step is not None and not step.evict
        assert written(step.write)["phase"] == "Consumed"
        assert written(step.write)["eviction"]["result"] == "NotFound"
        assert "is the placed pod itself" in written(step.write)["message"]


def test_evicting_stops_when_the_placed_pod_is_gone_or_ended() -> None:
    deleting = stored_pod()
    deleting["metadata"]["deletionTimestamp"] = at(1)
    failed = dict(stored_pod(), status={"phase": "Failed"})
    recreated = stored_pod()
    recreated["metadata"]["uid"] = "uid-other"
    for stored in ({}, pods(deleting), pods(failed), pods(recreated)):
        step = follow_up(placement(evicting_status(), evict="old"), stored, NOW, TTL, GRACE)
        assert step is not None and not step.evict, stored
        assert written(step.write)["phase"] == "Failed"
        assert written(step.write)["eviction"]["result"] == "Failed"
        assert "placed pod trainer-abc is gone" in written(step.write)["message"]
        assert step.write.reason == "PlacedPodGone" and step.write.warning


def test_a_claim_records_the_evict_target_uid_or_reports_it_missing() -> None:
    obj = placement(evict="old")
    present = lifecycle.claimed(placement_from_object(obj), "trainer-abc", "tok", NOW, "uid-old")
    assert written(present)["phase"] == "Evicting"
    assert written(present)["eviction"] == {
        "pod": "old",
        "uid": "uid-old",
        "result": "Pending",
        "attempts": 0,
        "message": "waiting for the placed pod to be stored",
        "time": at(0),
    }
    missing = lifecycle.claimed(placement_from_object(obj), "trainer-abc", "tok", NOW)
    assert written(missing)["phase"] == "Consumed"
    assert written(missing)["eviction"]["result"] == "NotFound"
    assert "pod old did not exist when the placement was claimed" in written(missing)["message"]
    assert missing.warning
    assert "Evicted" not in {c["reason"] for c in written(missing)["conditions"]}


def generation(obj: dict[str, Any], value: int) -> dict[str, Any]:
    """The placement at metadata.generation `value`."""
    obj["metadata"]["generation"] = value
    return obj


def test_a_new_generation_is_acknowledged_once_and_not_rewritten() -> None:
    step = follow_up(generation(placement(), 1), {}, NOW, TTL, GRACE)
    assert step is not None and not step.evict
    assert written(step.write) == {"phase": "Pending", "observedGeneration": 1}
    assert step.write.resource_version == "7"
    assert not step.write.event
    assert (
        follow_up(generation(placement({"phase": "Pending", "observedGeneration": 1}), 1), {}, NOW, TTL, GRACE) is None
    )
    behind = follow_up(generation(placement({"phase": "Pending", "observedGeneration": 1}), 2), {}, NOW, TTL, GRACE)
    assert behind is not None and written(behind.write)["observedGeneration"] == 2


def test_every_later_status_keeps_the_observed_generation() -> None:
    def acked(status: dict[str, Any], **kw: Any) -> dict[str, Any]:
        return generation(placement({**status, "observedGeneration": 3}, **kw), 3)

    claim = lifecycle.claimed(placement_from_object(acked({"phase": "Pending"}, evict="old")), "p", "tok", NOW, "u")
    consumed = follow_up(acked(claimed()), PLACED, NOW, TTL, GRACE)
    released = follow_up(acked(claimed(ago=GRACE + 1)), {}, NOW, TTL, GRACE)
    expired = follow_up(acked({"phase": "Pending"}, created_ago=TTL + 1), {}, NOW, TTL, GRACE)
    failed = lifecycle.failed(placement_from_object(acked({"phase": "Pending"})), "node gone", NOW)
    evicting = acked(claimed(phase="Evicting", uid="uid-9", eviction={"pod": "old", "result": "Pending"}))
    lease = follow_up(evicting, PLACED, NOW, TTL, GRACE)
    outcome = eviction_outcome(evicting, "Evicted", "evicted pod old", NOW)
    steps = [consumed, released, expired, lease]
    assert all(step is not None for step in steps)
    writes = [claim, failed, outcome, *(step.write for step in steps if step is not None)]
    assert [written(write).get("observedGeneration") for write in writes] == [3] * len(writes)


def test_a_claim_acknowledges_the_generation_it_was_decided_on() -> None:
    claim = lifecycle.claimed(placement_from_object(generation(placement(), 4)), "p", "tok", NOW)
    assert written(claim)["observedGeneration"] == 4


CARD_A = {
    "id": "GPU-a",
    "index": 0,
    "count": 10,
    "devmem": 40960,
    "devcore": 100,
    "type": "NVIDIA-A100",
    "health": True,
}
NODE_N = {"metadata": {"name": "n", "annotations": {"hami.io/node-nvidia-register": json.dumps([CARD_A])}}}


def pod_carrying(token: str, uid: str, *, finished: bool) -> dict[str, Any]:
    pod = stored_pod(token)
    pod["metadata"]["uid"] = uid
    if finished:
        pod["status"] = {"phase": "Succeeded"}
    return pod


@st.composite
def placements_any_step(draw: st.DrawFn) -> dict[str, Any]:
    """A placement at any point of its life: open, claimed in flight, consumed, evicting, ended, being deleted."""
    phase = draw(st.sampled_from(["Pending", "Pending", "Pending", "Consumed", "Evicting", "Failed", "Expired"]))
    status: dict[str, Any] = {"phase": phase, "observedGeneration": draw(st.integers(0, 2))}
    if draw(st.booleans()):
        status["claim"] = {"token": "tok", "claimedAt": at(draw(st.integers(0, 2 * TTL)))}
    if draw(st.booleans()):
        status["consumedBy"] = {"name": "trainer-abc", "uid": draw(st.sampled_from(["uid-9", "uid-8"]))}
    if draw(st.booleans()):
        status["eviction"] = {
            "pod": "old",
            "result": draw(st.sampled_from(["Pending", "Blocked", "Failed"])),
            "attempts": draw(st.integers(0, 4)),
            "time": at(draw(st.integers(0, 120))),
        }
    obj = placement(status, created_ago=draw(st.integers(0, 2 * TTL)), evict=draw(st.sampled_from(["", "old"])))
    obj["metadata"]["generation"] = draw(st.integers(0, 1))
    if draw(st.integers(0, 3)) == 0:
        obj["metadata"]["deletionTimestamp"] = at(1)
    return obj


claimed_pods_any = st.lists(
    st.builds(
        pod_carrying, st.sampled_from(["tok", "other"]), st.sampled_from(["uid-9", "uid-8"]), finished=st.booleans()
    ),
    max_size=2,
).map(lambda items: pods(*items))


@settings(max_examples=500, deadline=None)
@given(
    obj=placements_any_step(),
    first_pods=claimed_pods_any,
    later_pods=claimed_pods_any,
    first_age=st.floats(0, 3 * GRACE),
    later_age=st.floats(0, 3 * GRACE),
    owner=st.sampled_from(["", "p1", "other"]),
    node_there=st.booleans(),
    later=st.floats(0, 1),
)
def test_a_placement_quiet_until_a_time_has_no_step_before_it_whatever_the_pods_and_claim_ages(
    *,
    obj: dict[str, Any],
    first_pods: dict[tuple[str, str], dict[str, Any]],
    later_pods: dict[tuple[str, str], dict[str, Any]],
    first_age: float,
    later_age: float,
    owner: str,
    node_there: bool,
    later: float,
) -> None:
    parsed = placement_from_object(obj)
    consumed = {(NS, "req-1"): owner} if owner else {}
    problems = problems_on({"n": NODE_N} if node_there else {})

    def step(now: datetime, claimed_pods: Any, age: float) -> Any:
        ages = {(NS, "tok"): age}
        return lifecycle.follow_up(
            parsed, claimed_pods, now, TTL, GRACE, consumed=consumed, problems=problems, claim_ages=ages
        )

    if step(NOW, first_pods, first_age) is not None:
        return
    until = lifecycle.quiet_until(parsed, TTL)
    if until is None:
        return
    event("quiet for ever" if until == lifecycle.FOREVER else "quiet until a deadline")
    horizon = min(until, NOW + timedelta(seconds=3 * TTL))
    when = NOW + (horizon - NOW) * later if horizon > NOW else NOW
    assert step(when, later_pods, later_age) is None
    if until != lifecycle.FOREVER:
        assert step(until + timedelta(seconds=1), later_pods, later_age) is not None, "quiet past its deadline"


def test_a_placement_is_finished_only_once_it_can_do_nothing_more_and_at_its_latest_time() -> None:
    at = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
    later = at + timedelta(minutes=5)
    consumed = PlacementStatus(
        phase=Phase.Consumed, claim_token="t", claimed_at=at, consumed_at=at, consumed_by_name="p", consumed_by_uid="u"
    )
    expired = PlacementStatus(phase=Phase.Expired, conditions=(Condition("Claimed", "False", "Expired", "", later),))
    base = placement_from_object(_finished_base())
    assert finished_at(dataclasses.replace(base, status=consumed)) == at
    assert finished_at(dataclasses.replace(base, status=expired)) == later
    waiting_for_its_pod = dataclasses.replace(consumed, consumed_by_uid=None)
    assert finished_at(dataclasses.replace(base, status=waiting_for_its_pod)) is None, "its claim may be released"
    evicting = dataclasses.replace(consumed, phase=Phase.Evicting)
    assert finished_at(dataclasses.replace(base, status=evicting)) is None
    assert finished_at(base) is None, "open"
    assert finished_at(dataclasses.replace(base, status=PlacementStatus(phase=Phase.Failed))) is None, "no time: kept"


def _finished_base() -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "uid-p", "resourceVersion": "1"},
        "spec": {
            "reqID": "req-p1",
            "podSelector": {"matchLabels": {"a": "b"}},
            "nodeName": "n",
            "gpuDevices": ["gpu-0"],
        },
    }


# The room gate ------------------------------------------------------------------------------------------------


def evicted_pod(uid: str = "uid-old", **extra: Any) -> dict[str, Any]:
    """The evicted pod as the store holds it: metadata (with `deletionTimestamp` when given) and a phase."""
    metadata: dict[str, Any] = {"name": "old", "namespace": NS, "uid": uid}
    if "deletionTimestamp" in extra:
        metadata["deletionTimestamp"] = extra["deletionTimestamp"]
    return {"metadata": metadata, "status": {"phase": extra.get("phase", "Running")}}


def room_made(status: dict[str, Any] | None, evicted: dict[str, Any] | None, token: str = "tok") -> str | None:
    found = placement_from_object(placement(status, evict="old")) if status is not None else None
    return lifecycle.room_made(found, token, evicted)


def test_a_gated_pod_waits_while_its_placement_evicts_and_while_the_evicted_pod_is_stored() -> None:
    evicted = {"pod": "old", "uid": "uid-old", "result": "Evicted", "message": "evicted pod old"}
    done = claimed(phase="Consumed", uid="uid-9", eviction=evicted)
    evicting = claimed(phase="Evicting", uid="uid-9", eviction={"pod": "old", "uid": "uid-old", "result": "Blocked"})
    assert room_made(evicting, None) is None, "an eviction still being retried"
    assert room_made(done, evicted_pod()) is None
    assert room_made(done, evicted_pod(deletionTimestamp=at(1))) is None, "HAMi counts a terminating pod"
    assert room_made(done, None) == "pod old is gone"
    assert room_made(done, evicted_pod(phase="Succeeded")) == "pod old is gone"
    assert room_made(done, evicted_pod(uid="uid-new")) == "pod old is gone", "a new pod under the name"


def test_a_gated_pod_goes_to_the_scheduler_when_nothing_is_left_to_wait_for() -> None:
    missing = {"pod": "old", "result": "NotFound", "message": "pod old was already gone"}
    assert room_made(claimed(phase="Consumed", uid="uid-9", eviction=missing), evicted_pod()) == "pod old is gone"
    failed = {**claimed(phase="Failed", uid="uid-9"), "message": "eviction of pod old did not succeed within 3600s"}
    assert room_made(failed, evicted_pod()) == "placement p1 is Failed"
    forged = {"pod": "old\nFORGED", "result": "Evicted", "message": "evicted"}
    assert room_made(claimed(phase="Consumed", uid="uid-9", eviction=forged), None) == "the evicted pod is gone"
    assert room_made(None, evicted_pod()) == "its placement is gone"
    evicting = claimed(phase="Evicting", uid="uid-9")
    assert room_made(evicting, evicted_pod(), token="other") == "placement p1 is no longer claimed by it"
    assert room_made(evicting, evicted_pod(), token="") == "placement p1 is no longer claimed by it"


def test_gated_reads_our_gate_only() -> None:
    assert lifecycle.gated({"spec": {"schedulingGates": [{"name": "x.io/a"}, {"name": ROOM_GATE}]}})
    assert not lifecycle.gated({"spec": {"schedulingGates": [{"name": "x.io/a"}]}})
    assert not lifecycle.gated({"spec": {"schedulingGates": "forged"}}) and not lifecycle.gated({})


def test_a_pod_waits_for_its_room_by_our_gate_or_by_our_annotation_alone() -> None:
    """The annotation alone is a pod whose gate the API server dropped (before 1.27)."""
    assert lifecycle.waits_for_room({"spec": {"schedulingGates": [{"name": ROOM_GATE}]}})
    assert lifecycle.waits_for_room({"metadata": {"annotations": {ROOM_ANNOTATION: "waiting for pod a to go"}}})
    assert not lifecycle.waits_for_room({"metadata": {"annotations": {"x.io/room": "1"}}, "spec": {}})
    assert not lifecycle.waits_for_room({"metadata": {"annotations": "forged"}}) and not lifecycle.waits_for_room({})


# Whole steps: the status each step writes and the Event that tells it ------------------------------------------


@pytest.mark.parametrize(
    ("pod", "message"),
    [("trainer-abc", "claimed by pod trainer-abc"), ("", "claimed by a pod (name given at creation)")],
)
def test_a_claim_with_nothing_to_evict_is_consumed_at_once_by_the_pod_and_says_which(pod: str, message: str) -> None:
    """A pod named only at its creation (generateName) has no name yet: the claim says so and records none."""
    p = placement_from_object(placement())
    status = PlacementStatus(
        phase=Phase.Consumed,
        message=message,
        claim_token="tok",
        claimed_at=NOW,
        consumed_by_name=pod or None,
        consumed_at=NOW,
        conditions=(Condition("Claimed", "True", "Claimed", message, NOW),),
    )
    assert lifecycle.claimed(p, pod, "tok", NOW) == StatusWrite(p, status, "Claimed", message)


def test_a_claim_that_must_make_room_writes_evicting_with_a_pending_eviction() -> None:
    p = placement_from_object(placement(evict="old"))
    message = "claimed by pod trainer-abc; evicting pod old"
    status = PlacementStatus(
        phase=Phase.Evicting,
        message=message,
        claim_token="tok",
        claimed_at=NOW,
        consumed_by_name="trainer-abc",
        consumed_at=NOW,
        eviction=EvictionStatus(
            pod="old",
            uid="uid-old",
            result=EvictionResult.Pending,
            message="waiting for the placed pod to be stored",
            time=NOW,
        ),
        conditions=(
            Condition("Claimed", "True", "Claimed", "claimed by pod trainer-abc", NOW),
            Condition("Evicted", "False", "Pending", "pod old not evicted yet", NOW),
        ),
    )
    assert lifecycle.claimed(p, "trainer-abc", "tok", NOW, "uid-old") == StatusWrite(p, status, "Claimed", message)


def test_a_claim_whose_evict_pod_did_not_exist_is_consumed_with_a_warning_naming_evict_pod() -> None:
    p = placement_from_object(placement(evict="old"))
    missing = "pod old did not exist when the placement was claimed; nothing was evicted (check evictPod)"
    message = f"claimed by pod trainer-abc; {missing}"
    status = PlacementStatus(
        phase=Phase.Consumed,
        message=message,
        claim_token="tok",
        claimed_at=NOW,
        consumed_by_name="trainer-abc",
        consumed_at=NOW,
        eviction=EvictionStatus(pod="old", result=EvictionResult.NotFound, message=missing, time=NOW),
        conditions=(
            Condition("Claimed", "True", "Claimed", "claimed by pod trainer-abc", NOW),
            Condition("Evicted", "False", "NotFound", missing, NOW),
        ),
    )
    expected = StatusWrite(p, status, "Claimed", message, warning=True)
    assert lifecycle.claimed(p, "trainer-abc", "tok", NOW) == expected


def test_an_acknowledgement_writes_only_the_observed_generation_and_no_event() -> None:
    p = placement_from_object(generation(placement({"phase": "Pending", "message": "m"}), 2))
    status = PlacementStatus(phase=Phase.Pending, message="m", observed_generation=2)
    expected = StatusWrite(p, status, "Observed", "generation 2 observed", event=False)
    assert lifecycle.acknowledgement(p) == expected


def test_guard_and_claim_digest_names_are_stable_across_versions() -> None:
    """A replica of another version must find the guard Lease and the label value this one wrote."""
    assert lifecycle.req_id_guard_name(NS, "req-1") == "hami-place-reqid-" + _sha(f"{NS}/req-1")[:32]
    assert len(lifecycle.req_id_guard_name(NS, "req-1")) == len("hami-place-reqid-") + 32
    assert lifecycle.claim_digest("tok") == _sha("tok")[:40]
    assert len(lifecycle.claim_digest("tok")) == 40


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_a_finished_placement_counts_its_eviction_time_when_it_is_the_latest() -> None:
    early, late = NOW - timedelta(minutes=10), NOW
    status = PlacementStatus(
        phase=Phase.Failed,
        claim_token="t",
        claimed_at=early,
        consumed_at=early,
        eviction=EvictionStatus(pod="old", result=EvictionResult.Failed, time=late),
    )
    base = placement_from_object(_finished_base())
    assert finished_at(dataclasses.replace(base, status=status)) == late


def test_a_placement_that_can_never_be_honoured_fails_with_its_reason() -> None:
    p = placement_from_object(placement({"phase": "Pending", "message": "m"}))
    status = PlacementStatus(
        phase=Phase.Failed,
        message="node n not found",
        conditions=(Condition("Claimed", "False", "CannotHonour", "node n not found", NOW),),
    )
    expected = StatusWrite(p, status, "CannotHonour", "node n not found", warning=True)
    assert lifecycle.failed(p, "node n not found", NOW) == expected


def test_a_placement_with_no_creation_time_sorts_as_the_oldest() -> None:
    p = dataclasses.replace(placement_from_object(placement()), created=None)
    assert lifecycle.age_key(p) == ("", "p1")


def test_every_problem_of_the_placement_is_in_its_failure_message() -> None:
    obj = placement({"phase": "Pending"})
    obj["spec"]["gpuDevices"] = ["gpu-3", "gpu-4"]
    step = follow_up(obj, {}, NOW, TTL, GRACE, problems=problems_on({"n": NODE_N}))
    assert step is not None
    messages = [problem.message for problem in problems_on({"n": NODE_N})(placement_from_object(obj).spec)]
    assert len(messages) == 2
    assert written(step.write)["message"] == "; ".join(messages)


def test_a_claim_this_replica_has_not_timed_yet_is_not_released() -> None:
    """A claim missing from `claim_ages` was just seen: its age is 0, whatever the grace."""
    obj = placement(claimed(ago=TTL))
    assert follow_up(obj, {}, NOW, TTL, 0, claim_ages={}) is None
    assert follow_up(obj, {}, NOW, TTL, 0, claim_ages={(NS, "tok"): 0.5}) is not None


def test_the_placed_pod_is_never_evicted_even_when_no_eviction_was_recorded() -> None:
    status = claimed(phase="Evicting", uid="uid-9")
    step = follow_up(placement(status, evict="trainer-abc"), PLACED, NOW, TTL, GRACE)
    assert step is not None and not step.evict
    assert written(step.write)["eviction"]["result"] == "NotFound"


def _evicting(eviction: dict[str, Any] | None, *, ago: float = 5, evict: str = "old") -> Placement:
    stored = claimed(ago=ago, phase="Evicting", uid="uid-9", eviction=eviction)
    return placement_from_object(placement(stored, evict=evict))


def test_an_eviction_outcome_writes_the_whole_result() -> None:
    earlier = {"pod": "old", "uid": "uid-old", "result": "Pending", "attempts": 2, "time": at(30)}
    p = _evicting(earlier)
    evicted = lifecycle.eviction_outcome(p, EvictionResult.Evicted, "evicted pod old", NOW)
    assert evicted == StatusWrite(
        p,
        dataclasses.replace(
            p.status,
            phase=Phase.Consumed,
            message="consumed by pod trainer-abc; evicted pod old",
            eviction=EvictionStatus(
                pod="old", uid="uid-old", result=EvictionResult.Evicted, message="evicted pod old", time=NOW, attempts=2
            ),
            conditions=(Condition("Evicted", "True", "Evicted", "evicted pod old", NOW),),
        ),
        "Evicted",
        "evicted pod old",
    )
    failed = lifecycle.eviction_outcome(p, EvictionResult.Failed, "server error", NOW)
    assert failed == StatusWrite(
        p,
        dataclasses.replace(
            p.status,
            message="eviction of pod old failed: server error; will retry",
            eviction=EvictionStatus(
                pod="old", uid="uid-old", result=EvictionResult.Failed, message="server error", time=NOW, attempts=2
            ),
            conditions=(Condition("Evicted", "False", "Failed", "server error", NOW),),
        ),
        "EvictionFailed",
        "server error",
        warning=True,
    )


def test_an_eviction_outcome_without_a_recorded_eviction_names_the_evict_pod() -> None:
    p = _evicting(None)
    blocked = lifecycle.eviction_outcome(p, EvictionResult.Blocked, "pdb", NOW)
    assert blocked.status.eviction == EvictionStatus(pod="old", result=EvictionResult.Blocked, message="pdb", time=NOW)
    assert blocked.status.message == "eviction of pod old blocked: pdb; will retry"


def test_giving_up_an_eviction_writes_the_whole_failure() -> None:
    recorded = {"pod": "old", "uid": "uid-old", "result": "Blocked", "attempts": 9, "time": at(5)}
    p = _evicting(recorded, ago=TTL + 1)
    step = lifecycle.follow_up(p, PLACED, NOW, TTL, GRACE)
    reason = f"eviction of pod old did not succeed within {TTL}s: no attempt succeeded"
    gave_up = dataclasses.replace(
        p.status,
        phase=Phase.Failed,
        message=reason,
        eviction=EvictionStatus(
            pod="old", uid="uid-old", result=EvictionResult.Failed, message=reason, time=NOW, attempts=9
        ),
        conditions=(Condition("Evicted", "False", "GaveUp", reason, NOW),),
    )
    assert step == FollowUp(StatusWrite(p, gave_up, "EvictionGaveUp", reason, warning=True))


def test_eviction_is_still_tried_at_exactly_the_ttl_since_the_claim() -> None:
    step = lifecycle.follow_up(_evicting({"pod": "old", "attempts": 0}, ago=TTL), PLACED, NOW, TTL, GRACE)
    assert step is not None and step.evict == "old"


def test_each_retry_waits_its_doubled_backoff_and_not_a_second_less() -> None:
    for attempts, wait in ((1, 5), (2, 10), (3, 20), (4, 40), (5, 60)):
        recorded = {"pod": "old", "result": "Blocked", "attempts": attempts}
        early = lifecycle.follow_up(_evicting({**recorded, "time": at(wait - 1)}), PLACED, NOW, TTL, GRACE)
        due = lifecycle.follow_up(_evicting({**recorded, "time": at(wait)}), PLACED, NOW, TTL, GRACE)
        assert early is None, attempts
        assert due is not None and due.evict == "old", attempts


def test_an_eviction_lease_writes_the_next_attempt() -> None:
    recorded = {"pod": "old", "uid": "uid-old", "result": "Blocked", "attempts": 1, "time": at(60), "message": "pdb"}
    p = _evicting(recorded)
    lease = dataclasses.replace(
        p.status,
        eviction=EvictionStatus(
            pod="old", uid="uid-old", result=EvictionResult.Blocked, message="pdb", time=NOW, attempts=2
        ),
    )
    expected = FollowUp(StatusWrite(p, lease, "EvictionAttempt", "evicting pod old"), evict="old", evict_uid="uid-old")
    assert lifecycle.follow_up(p, PLACED, NOW, TTL, GRACE) == expected


def test_the_pod_to_evict_is_the_spec_s_else_the_one_the_status_recorded() -> None:
    unnamed = lifecycle.follow_up(_evicting({"result": "Pending", "attempts": 0}), PLACED, NOW, TTL, GRACE)
    assert unnamed is not None and unnamed.evict == "old"
    assert unnamed.write.status.eviction is not None and unnamed.write.status.eviction.pod == "old"
    no_spec = lifecycle.follow_up(_evicting({"pod": "old", "attempts": 0}, evict=""), PLACED, NOW, TTL, GRACE)
    assert no_spec is not None and no_spec.evict == "old"
    assert no_spec.write.status.eviction is not None and no_spec.write.status.eviction.pod == "old"


def test_gating_placement_reads_the_placement_and_claim_annotations() -> None:
    pod = {"metadata": {"annotations": {PLACEMENT_ANNOTATION: "p1", CLAIM_ANNOTATION: "tok"}}}
    assert lifecycle.gating_placement(pod) == ("p1", "tok")
    assert lifecycle.gating_placement({"metadata": {"annotations": {PLACEMENT_ANNOTATION: "p1"}}}) == ("p1", "")
    assert lifecycle.gating_placement({"metadata": {"annotations": {CLAIM_ANNOTATION: "tok"}}}) == ("", "tok")
    assert lifecycle.gating_placement({}) == ("", "")


def test_a_gated_pod_of_a_consumed_placement_that_recorded_no_eviction_goes_to_the_scheduler() -> None:
    assert room_made(claimed(phase="Consumed", uid="uid-9"), evicted_pod()) == "placement p1 is Consumed"


def test_the_placed_pod_gone_writes_the_whole_stop() -> None:
    recorded = {"pod": "old", "uid": "uid-old", "result": "Blocked", "attempts": 2, "time": at(30), "message": "pdb"}
    p = _evicting(recorded)
    reason = "placed pod trainer-abc is gone (deleted or ended); eviction of pod old stopped"
    stopped = dataclasses.replace(
        p.status,
        phase=Phase.Failed,
        message=reason,
        eviction=EvictionStatus(
            pod="old", uid="uid-old", result=EvictionResult.Failed, message=reason, time=NOW, attempts=2
        ),
        conditions=(Condition("Evicted", "False", "PlacedPodGone", reason, NOW),),
    )
    assert lifecycle.follow_up(p, {}, NOW, TTL, GRACE) == FollowUp(
        StatusWrite(p, stopped, "PlacedPodGone", reason, warning=True)
    )
    unrecorded = lifecycle.follow_up(_evicting(None), {}, NOW, TTL, GRACE)
    assert unrecorded is not None
    assert unrecorded.write.message == reason


def test_the_stored_pod_fills_consumed_by_with_the_whole_status() -> None:
    for phase, eviction, message in (
        ("Consumed", None, "consumed by pod trainer-abc"),
        ("Evicting", {"pod": "old", "result": "Pending"}, "claimed by pod trainer-abc; evicting pod old"),
    ):
        p = placement_from_object(placement(claimed(phase=phase, eviction=eviction), evict="old" if eviction else ""))
        step = lifecycle.follow_up(p, PLACED, NOW, TTL, GRACE)
        assert step is not None
        updated = dataclasses.replace(
            p.status, consumed_by_name="trainer-abc", consumed_by_uid="uid-9", message=message
        )
        assert step.write == StatusWrite(p, updated, "Consumed", "pod trainer-abc (uid-9) is stored carrying the claim")


def test_the_pin_names_every_card_and_no_empty_uuids() -> None:
    obj = placement(claimed())
    obj["spec"]["gpuDevices"] = ["gpu-0", "gpu-1"]
    pod = stored_pod()
    pod["metadata"]["annotations"][USE_GPUUUID_ANNOTATION] = ""
    pin = lifecycle.pinned(placement_from_object(obj), pod)
    assert pin == lifecycle.PodEvent(
        NS, "trainer-abc", "uid-9", "Pinned", "pinned by placement p1 to node n, cards gpu-0, gpu-1"
    )


def test_a_released_claim_writes_a_fresh_pending_status() -> None:
    recorded = {"pod": "old", "result": "Pending", "attempts": 0}
    status = claimed(ago=GRACE + 1, phase="Evicting", eviction=recorded)
    status["observedGeneration"] = 3
    status["conditions"] = [
        {"type": "Claimed", "status": "True", "reason": "Claimed", "message": "c", "lastTransitionTime": at(GRACE + 1)},
        {
            "type": "Evicted",
            "status": "False",
            "reason": "Pending",
            "message": "e",
            "lastTransitionTime": at(GRACE + 1),
        },
    ]
    p = placement_from_object(generation(placement(status, evict="old"), 3))
    reason = "claim released: no pod carrying it was stored (its creation failed or was interrupted)"
    released = PlacementStatus(
        phase=Phase.Pending,
        message=reason,
        conditions=(Condition("Claimed", "False", "ClaimReleased", reason, NOW),),
        observed_generation=3,
    )
    expected = FollowUp(StatusWrite(p, released, "ClaimReleased", reason, warning=True), release=True)
    assert lifecycle.follow_up(p, {}, NOW, TTL, GRACE) == expected


def test_an_expired_placement_writes_the_whole_expiry() -> None:
    p = placement_from_object(placement({"phase": "Pending", "message": "m"}, created_ago=TTL + 1))
    message = f"not claimed within {TTL}s"
    expired = PlacementStatus(
        phase=Phase.Expired,
        message=message,
        conditions=(Condition("Claimed", "False", "Expired", message, NOW),),
    )
    expected = FollowUp(StatusWrite(p, expired, "Expired", message, warning=True))
    assert lifecycle.follow_up(p, {}, NOW, TTL, GRACE) == expected


def test_an_evicting_placement_that_names_no_pod_to_evict_ends_consumed_without_an_attempt() -> None:
    """A hand-written status may name no pod to evict: leasing attempts of no pod would loop until the TTL."""
    p = _evicting(None, evict="")
    message = "no pod to evict is named (spec.evictPod and status.eviction.pod are empty)"
    ended = dataclasses.replace(
        p.status,
        phase=Phase.Consumed,
        message=f"consumed by pod trainer-abc; {message}",
        eviction=EvictionStatus(pod="", result=EvictionResult.NotFound, message=message, time=NOW),
        conditions=(Condition("Evicted", "True", "NotFound", message, NOW),),
    )
    expected = FollowUp(StatusWrite(p, ended, "EvictionNotNeeded", message))
    assert lifecycle.follow_up(p, PLACED, NOW, TTL, GRACE) == expected


def test_giving_up_an_eviction_that_recorded_none_names_the_evict_pod() -> None:
    """A status with no eviction recorded still evicts `spec.evictPod`: giving up must name that pod, not none."""
    p = _evicting(None, ago=TTL + 1)
    reason = f"eviction of pod old did not succeed within {TTL}s: no attempt succeeded"
    gave_up = dataclasses.replace(
        p.status,
        phase=Phase.Failed,
        message=reason,
        eviction=EvictionStatus(pod="old", result=EvictionResult.Failed, message=reason, time=NOW),
        conditions=(Condition("Evicted", "False", "GaveUp", reason, NOW),),
    )
    expected = FollowUp(StatusWrite(p, gave_up, "EvictionGaveUp", reason, warning=True))
    assert lifecycle.follow_up(p, PLACED, NOW, TTL, GRACE) == expected


def test_the_placed_pod_gone_with_no_pod_to_evict_named_anywhere_records_no_made_up_name() -> None:
    """A hand-written status may name no pod to evict: the stop says `a pod` and records the empty name, no other."""
    p = _evicting(None, evict="")
    reason = "placed pod trainer-abc is gone (deleted or ended); eviction of a pod stopped"
    stopped = dataclasses.replace(
        p.status,
        phase=Phase.Failed,
        message=reason,
        eviction=EvictionStatus(pod="", result=EvictionResult.Failed, message=reason, time=NOW),
        conditions=(Condition("Evicted", "False", "PlacedPodGone", reason, NOW),),
    )
    expected = FollowUp(StatusWrite(p, stopped, "PlacedPodGone", reason, warning=True))
    assert lifecycle.follow_up(p, {}, NOW, TTL, GRACE) == expected


def test_a_status_recording_the_placed_pods_uid_but_not_its_name_names_no_pod() -> None:
    """The CRD does not require `consumedBy.name`: a status written without it says `a pod`, no made-up name."""
    status = claimed(phase="Evicting", eviction={"pod": "old", "uid": "uid-old", "result": "Pending", "attempts": 1})
    status["consumedBy"] = {"uid": "uid-9"}
    p = placement_from_object(placement(status, evict="old"))
    evicted = lifecycle.eviction_outcome(p, EvictionResult.Evicted, "evicted pod old", NOW)
    assert evicted == StatusWrite(
        p,
        dataclasses.replace(
            p.status,
            phase=Phase.Consumed,
            message="consumed by a pod; evicted pod old",
            eviction=EvictionStatus(
                pod="old", uid="uid-old", result=EvictionResult.Evicted, message="evicted pod old", time=NOW, attempts=1
            ),
            conditions=(Condition("Evicted", "True", "Evicted", "evicted pod old", NOW),),
        ),
        "Evicted",
        "evicted pod old",
    )
    reason = "the placed pod is gone (deleted or ended); eviction of pod old stopped"
    stopped = dataclasses.replace(
        p.status,
        phase=Phase.Failed,
        message=reason,
        eviction=EvictionStatus(
            pod="old", uid="uid-old", result=EvictionResult.Failed, message=reason, time=NOW, attempts=1
        ),
        conditions=(Condition("Evicted", "False", "PlacedPodGone", reason, NOW),),
    )
    expected = FollowUp(StatusWrite(p, stopped, "PlacedPodGone", reason, warning=True))
    assert lifecycle.follow_up(p, {}, NOW, TTL, GRACE) == expected


@pytest.mark.parametrize(
    ("evict", "message"),
    [("", "claimed by pod trainer-abc"), ("old", "claimed by pod trainer-abc; evicting pod old")],
)
def test_an_evicting_placement_fills_consumed_by_naming_the_pod_it_will_evict(evict: str, message: str) -> None:
    """Evicting with no eviction recorded yet (a status written by hand): the pod named is `spec.evictPod`, the one
    the next step evicts, and none when the placement names none."""
    p = placement_from_object(placement(claimed(phase="Evicting"), evict=evict))
    updated = dataclasses.replace(p.status, consumed_by_name="trainer-abc", consumed_by_uid="uid-9", message=message)
    step = lifecycle.follow_up(p, PLACED, NOW, TTL, GRACE)
    assert step is not None
    assert step.write == StatusWrite(p, updated, "Consumed", "pod trainer-abc (uid-9) is stored carrying the claim")


def test_a_status_naming_no_pod_to_evict_by_a_pod_name_ends_consumed_and_evicts_nothing() -> None:
    """status.eviction.pod is what the status's writer wrote (the API server checks no name there): a value that is no
    pod name is evicted at no API path; the placement ends as if no pod were named."""
    forged = "a/../b" + "z" * 300
    p = _evicting({"pod": forged, "result": "Pending", "attempts": 0}, evict="")
    message = "status.eviction.pod is no pod name; nothing is evicted"
    ended = dataclasses.replace(
        p.status,
        phase=Phase.Consumed,
        message=f"consumed by pod trainer-abc; {message}",
        eviction=EvictionStatus(pod=forged, result=EvictionResult.NotFound, message=message, time=NOW),
        conditions=(Condition("Evicted", "True", "NotFound", message, NOW),),
    )
    assert lifecycle.follow_up(p, PLACED, NOW, TTL, GRACE) == FollowUp(
        StatusWrite(p, ended, "EvictionNotNeeded", message)
    )


def test_giving_up_quotes_the_last_attempts_message_cut() -> None:
    """The last attempt's message is what the status holds, of any length: the condition the give-up writes (which
    the CRD holds to 32768 characters) quotes it cut, so the write is not refused at every pass."""
    p = _evicting({"pod": "old", "result": "Failed", "attempts": 3, "message": "x" * 40_000}, ago=TTL + 1)
    written = lifecycle.follow_up(p, PLACED, NOW, TTL, GRACE)
    assert written is not None and written.write is not None
    reason = written.write.status.message
    assert reason.startswith(f"eviction of pod old did not succeed within {TTL}s: xxx") and reason.endswith("...")
    assert len(reason) < lifecycle.LAST_MESSAGE_MAX + 100
