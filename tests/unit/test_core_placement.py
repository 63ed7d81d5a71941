"""HamiPodPlacement objects: parsing from and rendering to the CRD's dict form, and the rules beyond the schema."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from core_strategies import UUIDS, json_values, outcome
from hypothesis import given
from hypothesis import strategies as st

from kubectl_hami_place.core.crd_schema import EVERY_STATUS
from kubectl_hami_place.core.errors import PlacementError
from kubectl_hami_place.core.fields import rfc3339
from kubectl_hami_place.core.names import API_VERSION, KIND, EvictionResult, Phase
from kubectl_hami_place.core.placement import (
    Condition,
    EvictionStatus,
    Placement,
    PlacementSpec,
    PlacementStatus,
    condition,
    merge_condition,
    parse_time,
    pin_differs,
    placement_from_object,
    placement_object,
    placements_from_objects,
    spec_from_object,
    spec_to_object,
    status_from_object,
    status_to_object,
    validate_spec,
)
from kubectl_hami_place.core.refs import CardRef, parse_card_ref
from kubectl_hami_place.core.selectors import parse_selector_string

T0 = datetime(2026, 11, 29, 17, 0, tzinfo=UTC)


def spec(devices: tuple[str, ...] = ("gpu-0/50", "gpu-1/50"), **changes: Any) -> PlacementSpec:
    """A valid spec, with changes."""
    values: dict[str, Any] = {
        "req_id": "req-0001",
        "pod_selector": parse_selector_string("app=train"),
        "node_name": "gpu-a100-0",
        "gpu_devices": tuple(parse_card_ref(d) for d in devices),
        "evict_pod": "old-0",
    }
    values.update(changes)
    return PlacementSpec(**values)


def stored(status: dict[str, Any] | None = None) -> dict[str, Any]:
    """A stored placement object as the API server returns it."""
    obj: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": "pin-1",
            "namespace": "team",
            "uid": "u-1",
            "resourceVersion": "42",
            "generation": 1,
            "creationTimestamp": "2026-11-29T17:00:00Z",
        },
        "spec": spec_to_object(spec()),
    }
    if status is not None:
        obj["status"] = status
    return obj


def test_a_stored_placement_without_status_is_pending() -> None:
    placement = placement_from_object(stored())
    assert placement.key == "team/pin-1"
    assert (placement.uid, placement.resource_version, placement.generation) == ("u-1", "42", 1)
    assert placement.created == T0
    assert placement.spec == spec()
    assert placement.status == PlacementStatus()
    assert placement.unclaimed
    assert placement.spec.percent == 50


def test_full_status_round_trips() -> None:
    # The status with every field set, the one the server's CRD check writes against the installed schema.
    rendered = status_to_object(EVERY_STATUS)
    assert rendered["claim"] == {"token": "t", "claimedAt": "2026-01-01T00:00:00Z"}
    assert (rendered["eviction"]["result"], rendered["eviction"]["uid"]) == ("Evicted", "uid")
    assert status_from_object(rendered) == EVERY_STATUS
    assert not placement_from_object(stored(rendered)).unclaimed


def test_spec_renders_the_crd_camel_case() -> None:
    assert spec_to_object(spec()) == {
        "reqID": "req-0001",
        "podSelector": {"matchLabels": {"app": "train"}},
        "nodeName": "gpu-a100-0",
        "gpuDevices": ["gpu-0/50", "gpu-1/50"],
        "evictPod": "old-0",
    }
    assert "evictPod" not in spec_to_object(spec(evict_pod=None))


def test_a_stored_placement_asking_the_same_pin_differs_in_nothing_else_counts() -> None:
    """Status and labels are not the pin: only the spec's fields."""
    wanted = placement_object("move-a", "team", spec(), labels={"run": "r-1"})
    assert pin_differs(stored({"phase": "Consumed"}), wanted) == ""


@pytest.mark.parametrize(
    ("changes", "differ"),
    [
        ({"node_name": "gpu-a100-1"}, "nodeName"),
        ({"gpu_devices": (parse_card_ref("gpu-1/50"), parse_card_ref("gpu-0/50"))}, "gpuDevices"),
        ({"pod_selector": parse_selector_string("app=other")}, "podSelector"),
        ({"req_id": "req-0002", "evict_pod": None}, "reqID, evictPod"),
    ],
)
def test_a_stored_placement_asking_another_pin_names_the_fields(changes: dict[str, Any], differ: str) -> None:
    wanted = placement_object("move-a", "team", spec(**changes))
    assert pin_differs(stored(), wanted) == f"it asks another {differ}"


@pytest.mark.parametrize(
    "garbage", [None, {}, {"spec": {"nodeName": 7}}, {"spec": {**spec_to_object(spec()), "gpuDevices": "x"}}]
)
def test_a_stored_placement_whose_spec_does_not_parse_is_never_the_same_pin(garbage: object) -> None:
    assert pin_differs(garbage, placement_object("move-a", "team", spec())).startswith("its spec does not parse (")


def test_placement_object_is_ready_to_create() -> None:
    obj = placement_object("pin-1", "team", spec(), labels={"app.kubernetes.io/managed-by": "kubectl-hami_place"})
    assert obj["apiVersion"] == "scheduling.hami.placement.com/v1"
    assert obj["kind"] == "HamiPodPlacement"
    assert obj["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "kubectl-hami_place"}
    assert "status" not in obj


def test_placement_object_carries_name_namespace_labels_and_annotations() -> None:
    obj = placement_object("pin-1", "team", spec(), labels={"run": "r-1"}, annotations={"note": "n"})
    assert obj == {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": "pin-1", "namespace": "team", "labels": {"run": "r-1"}, "annotations": {"note": "n"}},
        "spec": spec_to_object(spec()),
    }


LONG_UUID = "GPU-" + "a" * 125  # 129 characters, one more than the CRD takes


@pytest.mark.parametrize(
    ("changes", "devices", "reason"),
    [
        ({"req_id": "abcd"}, ("gpu-0",), "reqID 'abcd' is shorter than 5 characters"),
        ({"req_id": "r" * 129}, ("gpu-0",), "reqID is 129 characters; the CRD takes at most 128"),
        (
            {"pod_selector": parse_selector_string("")},
            ("gpu-0",),
            "podSelector is empty and would match every pod; give at least one label",
        ),
        ({}, (), "gpuDevices is empty; name at least one card"),
        (
            {},
            ("gpu-0/50", "gpu-1/60"),
            "gpuDevices gpu-0/50, gpu-1/60 mix memory percents; every entry must carry the same /P "
            "(HAMi gives every card of a container the same memory)",
        ),
        (
            {},
            ("gpu-0/50", "gpu-1"),
            "gpuDevices gpu-0/50, gpu-1 mix memory percents; every entry must carry the same /P "
            "(HAMi gives every card of a container the same memory)",
        ),
        ({}, ("gpu-0", "gpu-0"), "gpuDevices names gpu-0 twice; a card can be given once"),
        ({}, ("GPU-a", "GPU-a"), "gpuDevices names GPU-a twice; a card can be given once"),
        (
            {},
            (LONG_UUID,),
            f"gpuDevices entry {LONG_UUID[:40]!r}... is 129 characters; the CRD takes at most 128",
        ),
        ({"evict_pod": "Bad_Name"}, ("gpu-0",), "evictPod 'Bad_Name' is not a valid pod name"),
        ({"node_name": ""}, ("gpu-0",), "nodeName is empty"),
        # A tenant's own text would reach the placement's status and Events: refused, shown quoted.
        (
            {"node_name": "gpu-a\nWarning  Evicted"},
            ("gpu-0",),
            "nodeName 'gpu-a\\nWarning  Evicted' is not a valid node name",
        ),
        ({"node_name": "N" * 100}, ("gpu-0",), f"nodeName '{'N' * 77}...' is not a valid node name"),
    ],
)
def test_validate_spec_gives_the_reason(changes: dict[str, Any], devices: tuple[str, ...], reason: str) -> None:
    """The reason lands in the placement's status and Events as one line: the whole of it is what a user reads."""
    assert validate_spec(spec(devices, **changes)) == reason


def test_validate_spec_accepts_a_valid_spec() -> None:
    assert validate_spec(spec()) is None
    assert validate_spec(spec(("GPU-a", "gpu-1"), evict_pod=None)) is None


def test_validate_spec_accepts_a_req_id_and_a_card_of_exactly_the_crd_s_length() -> None:
    assert validate_spec(spec((LONG_UUID[:-1],), req_id="r" * 128)) is None


@pytest.mark.parametrize(
    ("mutate", "fragment"),
    [
        (lambda o: o.pop("metadata"), "placement has no metadata"),
        (lambda o: o["spec"].pop("reqID"), "spec.reqID is required"),
        (lambda o: o["spec"].__setitem__("gpuDevices", "gpu-0"), "gpuDevices must be a list"),
        (lambda o: o["spec"].__setitem__("gpuDevices", ["gpu-x"]), "'gpu-x' is not a card reference"),
        (lambda o: o.__setitem__("status", {"phase": "Done"}), "status.phase 'Done' is not one of"),
        (lambda o: o.__setitem__("status", {"consumedAt": "yesterday"}), "status.consumedAt 'yesterday'"),
        (lambda o: o.__setitem__("status", {"eviction": {"attempts": -1}}), "attempts must be a non-negative"),
        (lambda o: o.__setitem__("status", {"conditions": [{"type": "Claimed"}]}), "conditions[0].status"),
    ],
)
def test_garbage_objects_name_the_placement_and_the_field(mutate: Any, fragment: str) -> None:
    obj = stored()
    mutate(obj)
    with pytest.raises(PlacementError) as caught:
        placement_from_object(obj)
    assert fragment in str(caught.value)
    if "metadata" in obj:
        assert str(caught.value).startswith("placement team/pin-1: ")


RFC3339 = "must be an RFC 3339 time such as 2026-01-02T03:04:05Z"
NOT_RFC3339 = "is not an RFC 3339 time such as 2026-01-02T03:04:05Z"
CONDITION = {"type": "Claimed", "status": "True", "lastTransitionTime": "2026-11-29T17:00:00Z"}


def _set(path: str, value: object) -> Any:
    """A change to a stored placement: the field at the dotted path set to value."""

    def change(obj: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target = obj
        for key in parents:
            target = target.setdefault(key, {})
        target[last] = value

    return change


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda o: o.pop("metadata"), "placement has no metadata"),
        (_set("metadata.name", 7), "metadata.name must be a string"),
        (_set("metadata.namespace", 7), "metadata.namespace must be a string"),
        (_set("metadata.uid", 7), "placement team/pin-1: metadata.uid must be a string"),
        (_set("metadata.resourceVersion", 7), "placement team/pin-1: metadata.resourceVersion must be a string"),
        (_set("metadata.generation", "1"), "placement team/pin-1: metadata.generation must be an integer"),
        (
            _set("metadata.creationTimestamp", "noon"),
            f"placement team/pin-1: metadata.creationTimestamp 'noon' {NOT_RFC3339}",
        ),
        (_set("spec", "x"), "placement team/pin-1: spec must be an object"),
        (_set("spec.reqID", ""), "placement team/pin-1: spec.reqID is required and must be a non-empty string"),
        (_set("spec.nodeName", 7), "placement team/pin-1: spec.nodeName is required and must be a non-empty string"),
        (lambda o: o["spec"].pop("podSelector"), "placement team/pin-1: spec.podSelector is required"),
        (_set("spec.gpuDevices", "gpu-0"), "placement team/pin-1: spec.gpuDevices must be a list of card references"),
        (_set("spec.evictPod", 7), "placement team/pin-1: spec.evictPod must be a string"),
        (_set("status", "x"), "placement team/pin-1: status must be an object"),
        (_set("status.phase", 7), "placement team/pin-1: status.phase must be a string"),
        (
            _set("status.phase", "Done"),
            "placement team/pin-1: status.phase 'Done' is not one of Pending, Evicting, Consumed, Failed, Expired",
        ),
        (_set("status.message", 7), "placement team/pin-1: status.message must be a string"),
        (_set("status.claim", "x"), "placement team/pin-1: status.claim must be an object"),
        (_set("status.claim.token", 7), "placement team/pin-1: status.claim.token must be a string"),
        (_set("status.claim.claimedAt", "noon"), f"placement team/pin-1: status.claim.claimedAt 'noon' {NOT_RFC3339}"),
        (_set("status.consumedBy", "x"), "placement team/pin-1: status.consumedBy must be an object"),
        (_set("status.consumedBy.name", 7), "placement team/pin-1: status.consumedBy.name must be a string"),
        (_set("status.consumedBy.uid", 7), "placement team/pin-1: status.consumedBy.uid must be a string"),
        (_set("status.conditions", "x"), "placement team/pin-1: status.conditions must be a list"),
        (_set("status.observedGeneration", "1"), "placement team/pin-1: status.observedGeneration must be an integer"),
        (_set("status.eviction", "x"), "placement team/pin-1: status.eviction must be an object"),
        (_set("status.eviction.result", 7), "placement team/pin-1: status.eviction.result must be a string"),
        (
            _set("status.eviction.result", "Gone"),
            "placement team/pin-1: status.eviction.result 'Gone' is not one of "
            "Pending, Evicted, NotFound, Blocked, Failed",
        ),
        (
            _set("status.eviction.attempts", "1"),
            "placement team/pin-1: status.eviction.attempts must be a non-negative integer",
        ),
        (_set("status.eviction.pod", 7), "placement team/pin-1: status.eviction.pod must be a string"),
        (_set("status.eviction.uid", 7), "placement team/pin-1: status.eviction.uid must be a string"),
        (_set("status.eviction.message", 7), "placement team/pin-1: status.eviction.message must be a string"),
        (_set("status.eviction.time", "noon"), f"placement team/pin-1: status.eviction.time 'noon' {NOT_RFC3339}"),
        (_set("status.conditions", ["x"]), "placement team/pin-1: status.conditions[0] must be an object"),
        (
            _set("status.conditions", [CONDITION, {**CONDITION, "observedGeneration": "1"}]),
            "placement team/pin-1: status.conditions[1].observedGeneration must be an integer",
        ),
        (
            _set("status.conditions", [{**CONDITION, "type": None}]),
            "placement team/pin-1: status.conditions[0].type is required and must be a non-empty string",
        ),
        (
            _set("status.conditions", [{**CONDITION, "reason": 7}]),
            "placement team/pin-1: status.conditions[0].reason must be a string",
        ),
        (
            _set("status.conditions", [{**CONDITION, "message": 7}]),
            "placement team/pin-1: status.conditions[0].message must be a string",
        ),
        (
            _set("status.conditions", [{**CONDITION, "lastTransitionTime": None}]),
            f"placement team/pin-1: status.conditions[0].lastTransitionTime {RFC3339}",
        ),
    ],
)
def test_a_broken_stored_placement_is_refused_with_the_whole_reason(mutate: Any, message: str) -> None:
    """A placement broken by hand is skipped with this line in the log: it names the placement and the field."""
    obj = stored()
    mutate(obj)
    with pytest.raises(PlacementError) as caught:
        placement_from_object(obj)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("metadata", "where"),
    [({"namespace": "team"}, "placement"), ({"name": "pin-1"}, "placement /pin-1")],
)
def test_a_broken_placement_without_a_name_or_namespace_is_named_by_what_it_has(
    metadata: dict[str, Any], where: str
) -> None:
    with pytest.raises(PlacementError) as caught:
        placement_from_object({"metadata": metadata, "spec": "x"})
    assert str(caught.value) == f"{where}: spec must be an object"


def test_a_placement_that_is_no_object_is_refused_naming_its_type() -> None:
    with pytest.raises(PlacementError) as caught:
        placement_from_object(["x"])
    assert str(caught.value) == "a placement must be an object, got list"


def test_a_stored_placement_without_identity_or_times_parses_to_empty_values() -> None:
    obj = stored()
    obj["metadata"] = {"name": "pin-1", "namespace": "team"}
    assert placement_from_object(obj) == Placement(
        name="pin-1", namespace="team", uid="", resource_version="", created=None, spec=spec()
    )


def test_an_empty_eviction_and_a_bare_condition_parse_to_their_defaults() -> None:
    status = status_from_object({"eviction": {}, "conditions": [CONDITION]})
    assert status == PlacementStatus(
        eviction=EvictionStatus(pod="", uid="", result=EvictionResult.Pending, message="", time=None, attempts=0),
        conditions=(Condition(type="Claimed", status="True", reason="", message="", last_transition_time=T0),),
    )


def test_a_broken_placement_is_left_out_and_the_ones_after_it_still_count() -> None:
    assert [p.name for p in placements_from_objects([{"metadata": "x"}, stored()])] == ["pin-1"]


def test_a_claim_token_without_a_time_renders_alone() -> None:
    assert status_to_object(PlacementStatus(claim_token="t")) == {"phase": "Pending", "claim": {"token": "t"}}


def test_condition_is_built_as_asked() -> None:
    assert condition("Evicted", False, "Blocked", "a PDB refused", T0) == Condition(
        type="Evicted", status="False", reason="Blocked", message="a PDB refused", last_transition_time=T0
    )
    assert condition("Claimed", True, "Claimed", "by pod p", T0).status == "True"


def test_merge_condition_keeps_the_transition_time_of_an_unchanged_status_behind_another_type() -> None:
    claimed = condition("Claimed", True, "Claimed", "", T0)
    evicted = condition("Evicted", False, "Blocked", "", T0)
    later = datetime(2026, 11, 29, 18, 0, tzinfo=UTC)
    again = condition("Evicted", False, "Blocked", "still", later)
    assert merge_condition((claimed, evicted), again) == (
        claimed,
        Condition("Evicted", "False", "Blocked", "still", T0),
    )


@pytest.mark.parametrize(
    ("selector", "reason"),
    [
        (
            {"matchExpressions": [{"key": "app", "operator": "NotIn", "values": []}]},
            "label selector: app NotIn needs at least one value",
        ),
        ({"matchExpressions": [{"key": "app", "operator": "In"}]}, "label selector: app In needs at least one value"),
        (
            {"matchExpressions": [{"key": "app", "operator": "Exists", "values": ["x"]}]},
            "label selector: app Exists takes no values",
        ),
        ({"matchLabels": {"a": 1}}, "matchLabels 'a': the value must be a string, got int"),
    ],
)
def test_a_stored_selector_that_cannot_be_read_matches_no_pod_and_is_the_placement_s_failure(
    selector: dict[str, Any], reason: str
) -> None:
    """Kubernetes 1.24 stores what the CRD's CEL rules refuse from 1.25: the placement parses, so the server can fail
    it with the reason, and its selector is empty, so it selects no pod until then."""
    obj = stored()
    obj["spec"]["podSelector"] = selector
    parsed = placement_from_object(obj)
    assert parsed.spec.pod_selector.empty
    assert validate_spec(parsed.spec) == f"podSelector: {reason}"


def test_times() -> None:
    assert rfc3339(datetime(2026, 1, 2, 3, 4, 5, 999)) == "2026-01-02T03:04:05Z"
    assert parse_time("2026-01-02T04:04:05+01:00") == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert parse_time("2026-01-02T03:04:05.123456Z").microsecond == 123456
    with pytest.raises(PlacementError):
        parse_time("0001-01-01T00:00:00+01:00")


def test_a_time_without_an_offset_is_utc() -> None:
    moment = parse_time("2026-01-02T03:04:05")
    assert moment == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert moment.tzinfo is UTC


@pytest.mark.usefixtures("east_of_utc")
def test_a_time_without_an_offset_is_utc_whatever_the_machine_s_zone() -> None:
    """The CLI and every replica may run in any local zone: a stored time must name the same instant on each."""
    moment = parse_time("2026-01-02T03:04:05")
    assert moment == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (7, f"time {RFC3339}"),
        ("", f"time {RFC3339}"),
        ("x" * 65, f"time {RFC3339}"),
        ("x" * 64, f"time {'x' * 64!r} {NOT_RFC3339}"),
    ],
)
def test_a_time_that_is_no_string_or_longer_than_64_characters_is_refused_unread(value: object, message: str) -> None:
    with pytest.raises(PlacementError) as caught:
        parse_time(value)
    assert str(caught.value) == message


refs = st.builds(CardRef, index=st.integers(min_value=0, max_value=64), percent=st.none()) | st.builds(
    CardRef, uuid=UUIDS
)


@given(
    req_id=st.from_regex(r"[a-z0-9-]{5,20}", fullmatch=True),
    devices=st.lists(refs, min_size=1, max_size=4, unique=True),
    evict=st.none() | st.from_regex(r"[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?", fullmatch=True),
)
def test_specs_round_trip(req_id: str, devices: list[CardRef], evict: str | None) -> None:
    original = spec(req_id=req_id, gpu_devices=tuple(devices), evict_pod=evict)
    assert spec_from_object(spec_to_object(original)) == original


@given(json_values)
def test_object_garbage_raises_only_placement_errors(data: object) -> None:
    result = outcome(lambda: placement_from_object(data), PlacementError)
    assert isinstance(result, PlacementError | Placement)


@given(st.sampled_from(["metadata", "spec", "status"]), json_values)
def test_field_garbage_raises_only_placement_errors(key: str, value: object) -> None:
    obj = stored()
    obj[key] = value
    result = outcome(lambda: placement_from_object(obj), PlacementError)
    assert isinstance(result, PlacementError | Placement)


@given(st.sampled_from(["reqID", "podSelector", "nodeName", "gpuDevices", "evictPod"]), json_values)
def test_spec_field_garbage_raises_only_placement_errors(key: str, value: object) -> None:
    obj = stored()
    obj["spec"][key] = value
    result = outcome(lambda: placement_from_object(obj), PlacementError)
    assert isinstance(result, PlacementError | Placement)


@given(
    st.sampled_from(["phase", "message", "claim", "consumedBy", "consumedAt", "eviction", "conditions"]), json_values
)
def test_status_field_garbage_raises_only_placement_errors(key: str, value: object) -> None:
    obj = stored({key: value})
    result = outcome(lambda: placement_from_object(obj), PlacementError)
    assert isinstance(result, PlacementError | Placement)


def test_why_a_placement_is_closed_is_said_exactly_when_it_is_not_open() -> None:
    """`pin_then_evict` names why it stops before an eviction; the words and the rule cannot drift apart."""
    pending = placement_from_object(stored())
    cases = {
        "": pending,
        "it is being deleted": replace(pending, deleting=True),
        "a pod claimed it": replace(pending, status=PlacementStatus(claim_token="t")),
        "it is Expired": replace(pending, status=PlacementStatus(phase=Phase.Expired)),
    }
    for why, placement in cases.items():
        assert (placement.why_closed, placement.open) == (why, not why)
