"""Room kept for a rescued pod: the annotation written and read back, what it does to the pod's own HAMi
annotations, and which reservations a new pod is kept off (pure, on plain data)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from kubectl_hami_place.core.names import NOUSE_GPUUUID_ANNOTATION, ROOM_RESERVED_ANNOTATION, USE_GPUUUID_ANNOTATION
from kubectl_hami_place.core.reservation import (
    MAX_CARDS,
    Reservation,
    barred_cards,
    kept_off,
    parse_reservation,
    release,
    reservation_of,
    reservation_value,
    reserve,
    settled,
)

NOW = datetime(2026, 12, 2, 4, 0, tzinfo=UTC)
UNTIL = NOW + timedelta(seconds=60)
POD = "ml/rescued"


def pending(annotations: dict[str, str], **spec: str) -> dict[str, object]:
    """A stored pod waiting unscheduled, carrying these annotations."""
    return {
        "metadata": {"namespace": "ml", "name": "rescued", "annotations": annotations},
        "spec": dict(spec),
        "status": {"phase": "Pending"},
    }


def test_a_reservation_written_reads_back_the_same() -> None:
    value = reservation_value(["GPU-a", "GPU-b"], UNTIL + timedelta(microseconds=5), "GPU-a,GPU-b,GPU-c")
    assert parse_reservation(POD, value) == Reservation(POD, ("GPU-a", "GPU-b"), UNTIL, "GPU-a,GPU-b,GPU-c")
    assert parse_reservation(POD, reservation_value(["GPU-a"], UNTIL, None)) == Reservation(POD, ("GPU-a",), UNTIL)


@pytest.mark.parametrize(
    "value",
    [
        "not json",
        '["GPU-a"]',
        '{"cards":[],"until":"2026-12-02T04:01:00Z"}',
        '{"cards":["GPU-a,GPU-b"],"until":"2026-12-02T04:01:00Z"}',
        '{"cards":["../../x y"],"until":"2026-12-02T04:01:00Z"}',
        '{"cards":["GPU-a"],"until":"tomorrow"}',
        '{"cards":["GPU-a"],"until":"2026-12-02T04:01:00Z","use":7}',
        '{"cards":["GPU-a"],"until":"2026-12-02T04:01:00Z","extra":1}',
        json.dumps({"cards": [f"GPU-{i}" for i in range(MAX_CARDS + 1)], "until": "2026-12-02T04:01:00Z"}),
        None,
    ],
)
def test_a_malformed_annotation_is_no_reservation(value: str | None) -> None:
    assert parse_reservation(POD, value) is None


def test_only_a_pod_waiting_unscheduled_holds_a_reservation() -> None:
    value = reservation_value(["GPU-a"], UNTIL, None)
    assert reservation_of(pending({ROOM_RESERVED_ANNOTATION: value})) == Reservation(POD, ("GPU-a",), UNTIL)
    assert reservation_of(pending({ROOM_RESERVED_ANNOTATION: value}, nodeName="n1")) is None
    assert reservation_of(pending({})) is None
    forged = pending({ROOM_RESERVED_ANNOTATION: value})
    forged["metadata"]["name"] = "../x"  # type: ignore[index]
    assert reservation_of(forged) is None


def test_a_reservation_holds_until_its_deadline_and_not_one_too_far_ahead() -> None:
    kept = Reservation(POD, ("GPU-a",), UNTIL)
    assert kept.holds(NOW) and not kept.holds(UNTIL) and not kept.holds(UNTIL + timedelta(seconds=1))
    assert not Reservation(POD, ("GPU-a",), NOW + timedelta(minutes=11)).holds(NOW)


def test_reserve_narrows_use_to_the_planned_cards_and_release_gives_back_none() -> None:
    wanted, why = reserve({"other": "x"}, POD, ["GPU-b", "GPU-a"], UNTIL)
    assert why == "" and wanted["other"] == "x"
    assert wanted[USE_GPUUUID_ANNOTATION] == "GPU-b,GPU-a"
    assert parse_reservation(POD, wanted[ROOM_RESERVED_ANNOTATION]) == Reservation(POD, ("GPU-b", "GPU-a"), UNTIL)
    assert release(wanted, POD) == {"other": "x"}


def test_a_pod_s_own_use_list_is_intersected_recorded_and_given_back() -> None:
    own = {USE_GPUUUID_ANNOTATION: "GPU-a, GPU-b,GPU-c"}
    wanted, why = reserve(own, POD, ["GPU-b"], UNTIL)
    assert why == "" and wanted[USE_GPUUUID_ANNOTATION] == "GPU-b"
    assert release(wanted, POD) == own
    again, _ = reserve(wanted, POD, ["GPU-c"], UNTIL)
    assert release(again, POD) == own, "a second reservation records the pod's own list, not the first one's"


@pytest.mark.parametrize(
    "own",
    [{USE_GPUUUID_ANNOTATION: "GPU-a"}, {NOUSE_GPUUUID_ANNOTATION: "GPU-b"}, {USE_GPUUUID_ANNOTATION: "G" * 5000}],
)
def test_a_pod_whose_own_choice_excludes_a_planned_card_is_not_reserved(own: dict[str, str]) -> None:
    wanted, why = reserve(own, POD, ["GPU-b"], UNTIL)
    assert wanted == {} and "its choice is kept" in why


def test_release_leaves_a_use_list_someone_changed_since() -> None:
    wanted, _ = reserve({}, POD, ["GPU-a"], UNTIL)
    wanted[USE_GPUUUID_ANNOTATION] = "GPU-z"
    assert release(wanted, POD) == {USE_GPUUUID_ANNOTATION: "GPU-z"}
    assert release({ROOM_RESERVED_ANNOTATION: "junk", USE_GPUUUID_ANNOTATION: "GPU-a"}, POD) == {
        USE_GPUUUID_ANNOTATION: "GPU-a"
    }


def test_a_scheduled_pod_loses_the_annotation_and_keeps_its_cards() -> None:
    wanted, _ = reserve({}, POD, ["GPU-a"], UNTIL)
    assert settled(wanted) == {USE_GPUUUID_ANNOTATION: "GPU-a"}


def test_barred_cards_are_the_unexpired_reservations_of_other_pods() -> None:
    reservations = [
        Reservation(POD, ("GPU-a",), UNTIL),
        Reservation("ml/other", ("GPU-c", "GPU-b"), UNTIL),
        Reservation("ml/late", ("GPU-d",), NOW),
    ]
    assert barred_cards(reservations, NOW, "ml/new") == ("GPU-a", "GPU-b", "GPU-c")
    assert barred_cards(reservations, NOW, POD) == ("GPU-b", "GPU-c")
    assert barred_cards(reservations, UNTIL, "ml/new") == ()


def test_kept_off_merges_with_the_pod_s_own_nouse_list() -> None:
    assert kept_off(None, ["GPU-a"]) == "GPU-a"
    assert kept_off("GPU-x, GPU-a", ["GPU-a", "GPU-b"]) == "GPU-x,GPU-a,GPU-b"
