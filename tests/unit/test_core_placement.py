"""HamiPodPlacement objects: parsing from and rendering to the CRD's dict form, and the rules beyond the schema."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from core_strategies import UUIDS, json_values, outcome
from hypothesis import given
from hypothesis import strategies as st

from kubectl_hami_place.core.crd_schema import EVERY_STATUS
from kubectl_hami_place.core.errors import PlacementError
from kubectl_hami_place.core.fields import rfc3339
from kubectl_hami_place.core.names import API_VERSION, KIND
from kubectl_hami_place.core.placement import (
    Placement,
    PlacementSpec,
    PlacementStatus,
    parse_time,
    pin_differs,
    placement_from_object,
    placement_object,
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


@pytest.mark.parametrize(
    ("changes", "devices", "reason"),
    [
        ({"req_id": "abcd"}, ("gpu-0",), "reqID 'abcd' is shorter than 5 characters"),
        ({"pod_selector": parse_selector_string("")}, ("gpu-0",), "podSelector is empty"),
        ({}, (), "gpuDevices is empty"),
        ({}, ("gpu-0/50", "gpu-1/60"), "mix memory percents"),
        ({}, ("gpu-0/50", "gpu-1"), "mix memory percents"),
        ({}, ("gpu-0", "gpu-0"), "names gpu-0 twice"),
        ({}, ("GPU-a", "GPU-a"), "names GPU-a twice"),
        ({"evict_pod": "Bad_Name"}, ("gpu-0",), "evictPod 'Bad_Name' is not a valid pod name"),
        ({"node_name": ""}, ("gpu-0",), "nodeName is empty"),
        # A tenant's own text would reach the placement's status and Events: refused, shown quoted.
        ({"node_name": "gpu-a\nWarning  Evicted"}, ("gpu-0",), "nodeName 'gpu-a\\nWarning  Evicted' is not a valid"),
    ],
)
def test_validate_spec_gives_the_reason(changes: dict[str, Any], devices: tuple[str, ...], reason: str) -> None:
    result = validate_spec(spec(devices, **changes))
    assert result is not None and reason in result


def test_validate_spec_accepts_a_valid_spec() -> None:
    assert validate_spec(spec()) is None
    assert validate_spec(spec(("GPU-a", "gpu-1"), evict_pod=None)) is None


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
