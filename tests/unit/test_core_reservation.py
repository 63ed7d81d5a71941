"""Room kept for a rescued pod: the annotation written and read back, what it does to the pod's own HAMi
annotations, and which reservations a new pod is kept off (pure, on plain data)."""

from __future__ import annotations

import hashlib
import hmac
import json
from datetime import UTC, datetime, timedelta

import pytest

from kubectl_hami_place.core.names import NOUSE_GPUUUID_ANNOTATION, ROOM_RESERVED_ANNOTATION, USE_GPUUUID_ANNOTATION
from kubectl_hami_place.core.reservation import (
    MAX_CARDS,
    MAX_RESERVE,
    LeftRoom,
    Reservation,
    RoomKey,
    barred_cards,
    kept_off,
    left_room,
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
UID = "uid-rescued"
KEY = RoomKey(b"k" * 32)


def pending(annotations: dict[str, str], **spec: str) -> dict[str, object]:
    """A stored pod waiting unscheduled, carrying these annotations."""
    return {
        "metadata": {"namespace": "ml", "name": "rescued", "uid": UID, "annotations": annotations},
        "spec": dict(spec),
        "status": {"phase": "Pending"},
    }


def value(cards: list[str], until: datetime = UNTIL, use: str | None = None) -> str:
    """The annotation's value a server writes on POD."""
    return reservation_value(cards, until, use, key=KEY, pod=POD, uid=UID)


def parsed(text: object) -> Reservation | None:
    """The reservation read back from POD."""
    return parse_reservation(POD, UID, text, KEY)


def keep(annotations: dict[str, str], cards: list[str]) -> tuple[dict[str, str], str]:
    """POD's annotations keeping `cards` until UNTIL."""
    return reserve(annotations, POD, cards, UNTIL, uid=UID, key=KEY)


def give_back(annotations: dict[str, str]) -> dict[str, str]:
    """POD's annotations without its reservation."""
    return release(annotations, POD, UID)


def sealed(document: dict[str, object]) -> str:
    """A document sealed with the servers' key for POD, whatever it holds."""
    return json.dumps({**document, "seal": KEY.seal(POD, UID, document)})


def test_a_reservation_written_reads_back_the_same() -> None:
    text = value(["GPU-a", "GPU-b"], UNTIL + timedelta(microseconds=5), "GPU-a,GPU-b,GPU-c")
    assert parsed(text) == Reservation(POD, ("GPU-a", "GPU-b"), UNTIL, "GPU-a,GPU-b,GPU-c")
    assert parsed(value(["GPU-a"])) == Reservation(POD, ("GPU-a",), UNTIL)


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        '["GPU-a"]',
        sealed({"cards": [], "until": "2026-12-02T04:01:00Z"}),
        sealed({"cards": ["GPU-a,GPU-b"], "until": "2026-12-02T04:01:00Z"}),
        sealed({"cards": ["../../x y"], "until": "2026-12-02T04:01:00Z"}),
        sealed({"cards": ["GPU-a"], "until": "tomorrow"}),
        sealed({"cards": ["GPU-a"], "until": 1796184060}),
        sealed({"cards": ["GPU-a"]}),
        sealed({"cards": ["GPU-a"], "until": "2026-12-02T04:01:00Z", "use": 7}),
        sealed({"cards": ["GPU-a"], "until": "2026-12-02T04:01:00Z", "extra": 1}),
        sealed({"cards": [f"GPU-{i}" for i in range(MAX_CARDS + 1)], "until": "2026-12-02T04:01:00Z"}),
        None,
    ],
)
def test_a_malformed_annotation_is_no_reservation(text: str | None) -> None:
    assert parsed(text) is None


def test_a_reservation_no_server_sealed_for_this_pod_is_none() -> None:
    """Anyone who may edit a pod can write the annotation: unsealed, sealed with another key, for another pod or
    for an earlier pod of the same name, or changed after sealing, it keeps no card from anyone."""
    good = value(["GPU-a"])
    assert parsed(good) == Reservation(POD, ("GPU-a",), UNTIL)
    assert parsed(json.dumps({"cards": ["GPU-a"], "until": "2026-12-02T04:01:00Z"})) is None, "unsealed"
    assert parse_reservation(POD, UID, good, RoomKey(b"x" * 32)) is None, "another key"
    assert parse_reservation("ml/other", UID, good, KEY) is None, "carried to another pod"
    assert parse_reservation(POD, "uid-earlier", good, KEY) is None, "carried to a new pod of the name"
    document = json.loads(good)
    document["cards"] = ["GPU-a", "GPU-b"]
    assert parsed(json.dumps(document)) is None, "cards added after sealing"
    document = json.loads(good)
    document["seal"] = 7
    assert parsed(json.dumps(document)) is None
    document["seal"] = "\u00e9"
    assert parsed(json.dumps(document)) is None, "a seal compare_digest would refuse (not ASCII) is no seal"
    assert parsed("[" * 4000 + "]" * 4000) is None, "nested past the JSON reader's recursion, within the length"


def test_only_a_pod_waiting_unscheduled_holds_a_reservation() -> None:
    text = value(["GPU-a"])
    assert reservation_of(pending({ROOM_RESERVED_ANNOTATION: text}), KEY) == Reservation(POD, ("GPU-a",), UNTIL)
    assert reservation_of(pending({ROOM_RESERVED_ANNOTATION: text}, nodeName="n1"), KEY) is None
    assert reservation_of(pending({}), KEY) is None
    forged = pending({ROOM_RESERVED_ANNOTATION: text})
    forged["metadata"]["name"] = "../x"  # type: ignore[index]
    assert reservation_of(forged, KEY) is None
    renewed = pending({ROOM_RESERVED_ANNOTATION: text})
    renewed["metadata"]["uid"] = "uid-new"  # type: ignore[index]
    assert reservation_of(renewed, KEY) is None, "the pod's UID is sealed in"


def test_a_reservation_holds_until_its_deadline_and_not_one_too_far_ahead() -> None:
    kept = Reservation(POD, ("GPU-a",), UNTIL)
    assert kept.holds(NOW) and not kept.holds(UNTIL) and not kept.holds(UNTIL + timedelta(seconds=1))
    assert not Reservation(POD, ("GPU-a",), NOW + timedelta(minutes=11)).holds(NOW)


def test_reserve_narrows_use_to_the_planned_cards_and_release_gives_back_none() -> None:
    wanted, why = keep({"other": "x"}, ["GPU-b", "GPU-a"])
    assert why == "" and wanted["other"] == "x"
    assert wanted[USE_GPUUUID_ANNOTATION] == "GPU-b,GPU-a"
    assert parsed(wanted[ROOM_RESERVED_ANNOTATION]) == Reservation(POD, ("GPU-b", "GPU-a"), UNTIL)
    assert give_back(wanted) == {"other": "x"}


def test_a_pod_s_own_use_list_is_intersected_recorded_and_given_back() -> None:
    own = {USE_GPUUUID_ANNOTATION: "GPU-a, GPU-b,GPU-c"}
    wanted, why = keep(own, ["GPU-b"])
    assert why == "" and wanted[USE_GPUUUID_ANNOTATION] == "GPU-b"
    assert give_back(wanted) == own
    again, _ = keep(wanted, ["GPU-c"])
    assert give_back(again) == own, "a second reservation records the pod's own list, not the first one's"


@pytest.mark.parametrize(
    "own",
    [{USE_GPUUUID_ANNOTATION: "GPU-a"}, {NOUSE_GPUUUID_ANNOTATION: "GPU-b"}, {USE_GPUUUID_ANNOTATION: "G" * 5000}],
)
def test_a_pod_whose_own_choice_excludes_a_planned_card_is_not_reserved(own: dict[str, str]) -> None:
    wanted, why = keep(own, ["GPU-b"])
    assert wanted == {} and "its choice is kept" in why


def test_release_leaves_a_use_list_someone_changed_since() -> None:
    wanted, _ = keep({}, ["GPU-a"])
    wanted[USE_GPUUUID_ANNOTATION] = "GPU-z"
    assert give_back(wanted) == {USE_GPUUUID_ANNOTATION: "GPU-z"}
    assert give_back({ROOM_RESERVED_ANNOTATION: "junk", USE_GPUUUID_ANNOTATION: "GPU-a"}) == {
        USE_GPUUUID_ANNOTATION: "GPU-a"
    }


def test_a_scheduled_pod_loses_the_annotation_and_keeps_its_cards() -> None:
    wanted, _ = keep({}, ["GPU-a"])
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


OTHER_KEY = RoomKey(b"o" * 32)


@pytest.mark.parametrize("in_policy", [True, False])
def test_a_room_the_key_sealed_is_kept_then_given_back_and_settled_in_any_namespace(in_policy: bool) -> None:
    """Its own room is the controller's to undo wherever the pod is, its policy's namespaces or not."""
    ours = pending({ROOM_RESERVED_ANNOTATION: value(["GPU-a"])})
    assert left_room(ours, KEY, NOW, in_policy=in_policy) == (LeftRoom.keep, UNTIL)
    assert left_room(ours, KEY, UNTIL, in_policy=in_policy) == (LeftRoom.release, None)
    scheduled = pending({ROOM_RESERVED_ANNOTATION: value(["GPU-a"])}, nodeName="n1")
    assert left_room(scheduled, KEY, NOW, in_policy=in_policy) == (LeftRoom.settle, None)


def test_its_own_room_on_a_pod_that_no_longer_waits_is_given_back_before_its_deadline() -> None:
    """A pod being deleted, or one that failed unscheduled, waits for no room: the room is not kept to its deadline."""
    room = {ROOM_RESERVED_ANNOTATION: value(["GPU-a"])}
    metadata = {"namespace": "ml", "name": "rescued", "uid": UID, "annotations": room}
    deleted = {**pending(room), "metadata": {**metadata, "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    failed = {**pending(room), "status": {"phase": "Failed"}}
    for pod in (deleted, failed):
        assert left_room(pod, KEY, NOW, in_policy=False) == (LeftRoom.release, None)


@pytest.mark.parametrize("annotation", [value(["GPU-a"]), "not json", ""])
def test_a_room_the_key_did_not_seal_is_given_back_in_the_policy_and_left_alone_outside(annotation: str) -> None:
    """Another key's room, or a malformed one: released (or, once scheduled, settled) where the policy reaches, never
    written outside it (kube-system, another install's namespaces)."""
    foreign = pending({ROOM_RESERVED_ANNOTATION: annotation})
    assert left_room(foreign, OTHER_KEY, NOW, in_policy=True) == (LeftRoom.release, None)
    assert left_room(foreign, OTHER_KEY, NOW, in_policy=False) == (LeftRoom.leave, None)
    scheduled = pending({ROOM_RESERVED_ANNOTATION: annotation}, nodeName="n1")
    assert left_room(scheduled, OTHER_KEY, NOW, in_policy=True) == (LeftRoom.settle, None)
    assert left_room(scheduled, OTHER_KEY, NOW, in_policy=False) == (LeftRoom.leave, None)


def test_release_gives_the_pods_own_choice_back_under_another_key_too() -> None:
    # A replica restarted without --room-key-file, or a rotated key, no longer checks the seal: the pod must not stay
    # narrowed to the kept cards for good.
    written = reservation_value(["GPU-b"], UNTIL, "GPU-a,GPU-b,GPU-c", key=OTHER_KEY, pod=POD, uid=UID)
    annotations = {ROOM_RESERVED_ANNOTATION: written, USE_GPUUUID_ANNOTATION: "GPU-b"}
    assert parsed(written) is None, "not this key's room: admission keeps nothing for it"
    assert give_back(annotations) == {USE_GPUUUID_ANNOTATION: "GPU-a,GPU-b,GPU-c"}
    written = reservation_value(["GPU-b"], UNTIL, None, key=OTHER_KEY, pod=POD, uid=UID)
    assert give_back({ROOM_RESERVED_ANNOTATION: written, USE_GPUUUID_ANNOTATION: "GPU-b"}) == {}


def test_the_annotation_and_its_seal_keep_their_exact_form() -> None:
    """Replicas of two versions check each other's seals during an upgrade: the value is compact JSON, and the seal
    an HMAC-SHA256 over the sorted compact JSON of the pod, its UID and the document."""
    signed = json.dumps(
        {"cards": ["GPU-a"], "pod": POD, "uid": UID, "until": "2026-12-02T04:01:00Z", "use": "GPU-a,GPU-b"},
        separators=(",", ":"),
    )
    mac = hmac.new(b"k" * 32, signed.encode(), hashlib.sha256).hexdigest()
    assert value(["GPU-a"], use="GPU-a,GPU-b") == (
        f'{{"cards":["GPU-a"],"until":"2026-12-02T04:01:00Z","use":"GPU-a,GPU-b","seal":"{mac}"}}'
    )


def test_a_room_holds_to_a_deadline_exactly_the_longest_ahead() -> None:
    assert Reservation(POD, ("GPU-a",), NOW + MAX_RESERVE).holds(NOW)


def test_a_room_of_the_most_cards_and_the_longest_own_list_is_written_and_read_back() -> None:
    cards = [f"GPU-{i}" for i in range(MAX_CARDS)]
    own = ",".join(cards) + "," + "G" * (4096 - len(",".join(cards)) - 1)
    assert len(own) == 4096
    wanted, why = keep({USE_GPUUUID_ANNOTATION: own}, cards)
    assert why == ""
    assert parsed(wanted[ROOM_RESERVED_ANNOTATION]) == Reservation(POD, tuple(cards), UNTIL, own)
    assert give_back(wanted) == {USE_GPUUUID_ANNOTATION: own}


@pytest.mark.parametrize("cards", [[], [f"GPU-{i}" for i in range(MAX_CARDS + 1)], ["GPU-a", "GPU-b,GPU-c"]])
def test_a_plan_of_no_cards_too_many_or_a_malformed_one_keeps_nothing(cards: list[str]) -> None:
    assert keep({}, cards) == ({}, "the plan names no card to keep")


def test_a_pod_whose_own_list_is_exactly_the_planned_cards_is_reserved() -> None:
    own = {USE_GPUUUID_ANNOTATION: "GPU-a,GPU-b"}
    wanted, why = keep(own, ["GPU-b", "GPU-a"])
    assert why == "" and wanted[USE_GPUUUID_ANNOTATION] == "GPU-b,GPU-a"
    assert give_back(wanted) == own


def test_a_second_reservation_of_several_cards_records_the_pod_s_own_list() -> None:
    own = {USE_GPUUUID_ANNOTATION: "GPU-a,GPU-b,GPU-c,GPU-d"}
    first, _ = keep(own, ["GPU-a", "GPU-b"])
    again, why = keep(first, ["GPU-c", "GPU-d"])
    assert why == "" and give_back(again) == own


def test_a_room_another_key_sealed_does_not_widen_the_pod_s_own_list_on_reserve() -> None:
    """A room written under another key (or by a tenant) is not the server's record of the pod's own choice."""
    forged = reservation_value(["GPU-a"], UNTIL, "GPU-a,GPU-b", key=OTHER_KEY, pod=POD, uid=UID)
    annotations = {ROOM_RESERVED_ANNOTATION: forged, USE_GPUUUID_ANNOTATION: "GPU-a"}
    assert keep(annotations, ["GPU-b"]) == (
        {},
        f"the pod's own {USE_GPUUUID_ANNOTATION} excludes a planned card; its choice is kept",
    )


def test_release_of_a_pod_without_a_room_changes_nothing() -> None:
    assert give_back({USE_GPUUUID_ANNOTATION: "GPU-a"}) == {USE_GPUUUID_ANNOTATION: "GPU-a"}


def test_a_room_sealed_for_a_pod_name_no_pod_can_have_is_none() -> None:
    bad = pending(
        {ROOM_RESERVED_ANNOTATION: reservation_value(["GPU-a"], UNTIL, None, key=KEY, pod="ml/Bad_Name", uid=UID)}
    )
    bad["metadata"]["name"] = "Bad_Name"  # type: ignore[index]
    assert reservation_of(bad, KEY) is None


def test_an_annotation_of_exactly_the_read_limit_is_read_and_one_character_longer_is_not() -> None:
    """Every replica parses this annotation on pods anyone may annotate: the limit caps that work at exactly 8 KiB."""
    text = value(["GPU-a"])
    at_limit = text + " " * (8192 - len(text))
    assert parsed(at_limit) == Reservation(POD, ("GPU-a",), UNTIL)
    assert parsed(at_limit + " ") is None


def test_a_room_whose_deadline_is_no_text_is_no_reservation_even_for_release() -> None:
    """`release` reads the annotation whatever its seal, and anyone may write one: a number or no deadline at all is
    no reservation, and the annotation is only removed."""
    for document in ({"cards": ["GPU-a"], "until": 1796184060}, {"cards": ["GPU-a"], "until": None}):
        forged = json.dumps({**document, "seal": "0" * 64})
        assert parse_reservation(POD, UID, forged, None) is None
        assert give_back({ROOM_RESERVED_ANNOTATION: forged, USE_GPUUUID_ANNOTATION: "GPU-a"}) == {
            USE_GPUUUID_ANNOTATION: "GPU-a"
        }


def test_a_plan_naming_a_card_twice_keeps_it_once_and_release_still_gives_the_pods_choice_back() -> None:
    """The kept cards are written once each: the pod's narrowed list must read as the room's cards for `release` to
    know it as the server's own and give the pod's choice back."""
    own = {USE_GPUUUID_ANNOTATION: "GPU-a,GPU-b,GPU-c"}
    wanted, why = keep(own, ["GPU-a", "GPU-b", "GPU-a"])
    assert why == ""
    assert wanted[USE_GPUUUID_ANNOTATION] == "GPU-a,GPU-b"
    assert json.loads(wanted[ROOM_RESERVED_ANNOTATION])["cards"] == ["GPU-a", "GPU-b"]
    assert give_back(wanted) == own


def test_a_plan_naming_sixteen_cards_with_one_named_again_keeps_the_sixteen() -> None:
    cards = [f"GPU-{i}" for i in range(MAX_CARDS)]
    wanted, why = keep({}, [*cards, "GPU-0"])
    assert why == "" and wanted[USE_GPUUUID_ANNOTATION] == ",".join(cards)


def test_a_pods_own_list_too_long_to_record_is_kept_even_when_it_holds_the_planned_card() -> None:
    """A list one character over 4096 could not be read back from the room, so the pod would never get it back: the
    room is not kept, and the pod keeps its choice."""
    own = "GPU-b," + "G" * 4091
    assert len(own) == 4097
    assert keep({USE_GPUUUID_ANNOTATION: own}, ["GPU-b"]) == (
        {},
        "the pod's own nvidia.com/use-gpuuuid is too long to record; its choice is kept",
    )
