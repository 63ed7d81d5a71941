"""The seal on a move's placement: made by the controller, checked by the budgets, a new leader and an open move."""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from kubectl_hami_place.core.defrag.budget import allowance, history_from_placements
from kubectl_hami_place.core.defrag.keys import open_move
from kubectl_hami_place.core.defrag.policy import Budgets
from kubectl_hami_place.core.defrag.seal import SEAL_WINDOW, move_sealed, refusal, refused_by, seal_move
from kubectl_hami_place.core.names import (
    DEFRAG_FROM_CARDS_ANNOTATION,
    DEFRAG_FROM_NODE_ANNOTATION,
    DEFRAG_POD_ANNOTATION,
    DEFRAG_POD_UID_ANNOTATION,
    DEFRAG_RUN_LABEL,
    DEFRAG_SEAL_ANNOTATION,
    DEFRAG_TO_CARDS_ANNOTATION,
    PLACEMENT_ANNOTATION,
)
from kubectl_hami_place.core.placement import DefragRefusal, PlacementStatus, status_from_object, status_to_object
from kubectl_hami_place.core.reservation import MAX_CARDS, RoomKey

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
KEY = RoomKey(b"k" * 32)


def move(name: str = "move-x-1", pod: str = "team-a/x", **annotations: str) -> dict[str, Any]:
    """A move's placement as the controller builds it, before it is created (no creationTimestamp yet)."""
    return {
        "apiVersion": "scheduling.hami.placement.com/v1",
        "kind": "HamiPodPlacement",
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "labels": {DEFRAG_RUN_LABEL: "run-1"},
            "annotations": {
                DEFRAG_POD_ANNOTATION: pod,
                DEFRAG_POD_UID_ANNOTATION: "uid-x",
                DEFRAG_FROM_NODE_ANNOTATION: "gpu-a",
                **annotations,
            },
        },
        "spec": {
            "reqID": "abcdef",
            "podSelector": {"matchLabels": {"app": "x"}},
            "nodeName": "gpu-b",
            "gpuDevices": ["gpu-0"],
        },
    }


def stored(obj: dict[str, Any], created: datetime = NOW) -> dict[str, Any]:
    """The placement as the API server stores it, created at `created`."""
    return {**obj, "metadata": {**obj["metadata"], "creationTimestamp": created.isoformat()}}


def test_a_sealed_move_checks_and_its_seal_covers_who_what_and_where() -> None:
    sealed = stored(seal_move(move(), KEY, NOW))
    assert move_sealed(sealed, KEY)
    assert sealed["spec"] == move()["spec"], "only an annotation is added"
    assert not move_sealed(stored(move()), KEY), "labelled by hand, no seal"
    assert not move_sealed(sealed, RoomKey(b"o" * 32)), "another cluster's key"
    for path, value in (
        (("spec", "nodeName"), "gpu-team-b"),
        (("spec", "gpuDevices"), ["gpu-0", "gpu-1"]),
        (("metadata", "namespace"), "team-b"),
        (("metadata", "name"), "move-y-1"),
        (("metadata", "labels", DEFRAG_RUN_LABEL), "run-2"),
        (("metadata", "annotations", DEFRAG_POD_ANNOTATION), "team-a/y"),
        (("metadata", "annotations", DEFRAG_POD_UID_ANNOTATION), "uid-y"),
        (("metadata", "annotations", DEFRAG_FROM_NODE_ANNOTATION), "gpu-c"),
    ):
        changed = stored(seal_move(move(), KEY, NOW))
        *parents, last = path
        holder = changed
        for part in parents:
            holder = holder[part]
        assert holder[last] != value
        holder[last] = value
        assert not move_sealed(changed, KEY), f"{'.'.join(path)} changed after sealing"


def mac(document: dict[str, Any]) -> str:
    """HMAC-SHA256 under KEY of the document as compact JSON with sorted keys: the seal's documented form."""
    return hmac.new(
        b"k" * 32, json.dumps(document, sort_keys=True, separators=(",", ":")).encode(), hashlib.sha256
    ).hexdigest()


def test_the_sealed_documents_keep_their_form_so_replicas_of_two_versions_check_each_others_seals() -> None:
    """In a rolling upgrade the old leader's seals are checked by the new version: the documents they sign are
    written out here field by field, so a change to either form fails this test rather than the upgrade."""
    at = int(NOW.timestamp())
    covered = {
        "namespace": "team-a",
        "name": "move-x-1",
        "run": "run-1",
        "pod": "team-a/x",
        "uid": "uid-x",
        "from": "gpu-a",
        "node": "gpu-b",
        "cards": ["gpu-0"],
        "at": at,
    }
    sealed = seal_move(move(), KEY, NOW)
    assert sealed["metadata"]["annotations"][DEFRAG_SEAL_ANNOTATION] == f"{at}:{mac({'move': covered})}"
    found = refusal(stored(sealed), ["GPU-b", "GPU-a"], REFUSED_UNTIL, KEY)
    refused = {
        "namespace": "team-a",
        "name": "move-x-1",
        "move": f"{at}:{mac({'move': covered})}",
        "cards": ["GPU-a", "GPU-b"],
        "until": "2026-12-03T12:30:00Z",
    }
    assert found == DefragRefusal(("GPU-a", "GPU-b"), REFUSED_UNTIL, mac({"refused": refused}))


def test_the_cards_named_are_outside_the_seal_so_a_replica_of_the_version_before_checks_it() -> None:
    """In a rolling upgrade a leader of the version before checks this version's seals over the document written out
    in the test above: a move naming its cards seals (and checks) exactly as one that names none."""
    named = move(**{DEFRAG_FROM_CARDS_ANNOTATION: "gpu-1", DEFRAG_TO_CARDS_ANNOTATION: "gpu-0"})
    sealed = seal_move(named, KEY, NOW)
    assert (
        sealed["metadata"]["annotations"][DEFRAG_SEAL_ANNOTATION]
        == (seal_move(move(), KEY, NOW)["metadata"]["annotations"][DEFRAG_SEAL_ANNOTATION])
    )
    assert move_sealed(stored(sealed), KEY)


def test_a_sealed_move_created_again_long_after_is_not_a_new_move() -> None:
    sealed = seal_move(move(), KEY, NOW)
    assert move_sealed(stored(sealed, NOW + SEAL_WINDOW), KEY), "the leader's and the API server's clocks apart"
    assert move_sealed(stored(sealed, NOW - SEAL_WINDOW), KEY)
    assert not move_sealed(stored(sealed, NOW + SEAL_WINDOW + timedelta(seconds=1)), KEY), "created again later"
    assert not move_sealed(seal_move(move(), KEY, NOW), KEY), "not created: no creation time"


AT = int(NOW.timestamp())


@pytest.mark.parametrize(
    "value",
    [
        "",
        "x",
        "12:ab",
        "abc:def",
        "-5:00",
        "1" * 12 + ":00",
        f"{AT}",
        "\u00b2:" + "0" * 64,  # '²' is a digit to str.isdigit, not to int()
        f"{AT}:\u00e9",  # compare_digest refuses a str that is not ASCII
        f"{AT}:" + "A" * 64,
    ],
)
def test_a_seal_that_does_not_parse_is_no_seal_and_raises_nothing(value: str) -> None:
    forged = stored(move(**{DEFRAG_SEAL_ANNOTATION: value}))
    assert not move_sealed(forged, KEY)
    assert history_from_placements([forged], KEY) == ()


def test_without_a_shared_key_every_run_placement_counts_as_before() -> None:
    """A server without --room-key-file cannot check another replica's seals: it forgets none of their moves."""
    assert move_sealed(stored(move()), RoomKey(b"s" * 32, shared=False))
    assert move_sealed(stored(move()), None)


def test_the_budgets_count_only_sealed_moves() -> None:
    budgets = Budgets(moves_per_run=4, moves_per_hour=2, moves_per_node=4, moves_per_namespace=4)
    sealed = [stored(seal_move(move(f"move-x-{i}", f"team-a/x{i}"), KEY, NOW)) for i in range(2)]
    forged = [stored(move(f"move-f-{i}", f"team-a/f{i}")) for i in range(5)]
    history = history_from_placements([*sealed, *forged], KEY)
    assert sorted(record.placement for record in history) == ["move-x-0", "move-x-1"]
    assert allowance(budgets, history, NOW, "run-2").hour_left == 0
    assert allowance(budgets, history_from_placements(forged, KEY), NOW, "run-2").hour_left == 2, "forged: none"
    assert len(history_from_placements(forged)) == 5, "the verb, without the key, lists every run placement"


def test_only_a_sealed_runs_placement_makes_an_open_move() -> None:
    pinned = {
        "metadata": {"namespace": "team-a", "name": "x-2", "annotations": {PLACEMENT_ANNOTATION: "move-x-1"}},
        "status": {"phase": "Pending"},
        "spec": {},
    }
    after = timedelta(seconds=185)
    sealed = stored(seal_move(move(), KEY, NOW - timedelta(seconds=60)), NOW - timedelta(seconds=60))
    opened = open_move(pinned, sealed, NOW, after, KEY)
    assert opened is not None and opened.wait == timedelta(seconds=125)
    assert open_move(pinned, stored(move()), NOW, after, KEY) is None, "labelled by hand: a person's pin"


COOLDOWN = timedelta(hours=1)
REFUSED_UNTIL = NOW + timedelta(minutes=30)


def given_up(obj: dict[str, Any], refused: DefragRefusal | dict[str, Any]) -> dict[str, Any]:
    """The placement, consumed, with `status.defragRefused` written as the controller (or anyone) wrote it."""
    written = status_to_object(PlacementStatus(defrag_refused=refused)) if isinstance(refused, DefragRefusal) else {}
    return {**obj, "status": {"phase": "Consumed", "defragRefused": written.get("defragRefused", refused)}}


def test_a_given_up_moves_refused_cards_read_back_until_their_time_and_no_longer() -> None:
    """What one leader wrote in its given-up move's status a new leader reads: each card until the time, then none."""
    sealed = stored(seal_move(move(), KEY, NOW))
    marked = given_up(sealed, refusal(sealed, ["GPU-b", "GPU-a", "GPU-b"], REFUSED_UNTIL, KEY))
    assert refused_by(marked, KEY, NOW, COOLDOWN) == {"GPU-a": REFUSED_UNTIL, "GPU-b": REFUSED_UNTIL}
    assert refused_by(marked, KEY, REFUSED_UNTIL, COOLDOWN) == {}
    short = timedelta(minutes=5)
    assert refused_by(marked, KEY, NOW, short) == dict.fromkeys(["GPU-a", "GPU-b"], NOW + short)
    assert refused_by(sealed, KEY, NOW, COOLDOWN) == {}, "a move not given up leaves nothing out"
    every = [f"GPU-{n}" for n in range(MAX_CARDS)]
    assert refused_by(
        given_up(sealed, refusal(sealed, every, REFUSED_UNTIL, KEY)), KEY, NOW, COOLDOWN
    ) == dict.fromkeys(every, REFUSED_UNTIL), "as many cards as a node has"


def test_a_refusal_no_run_sealed_for_this_placement_leaves_nothing_out() -> None:
    """Written by anyone else, copied from another placement (or from the placement the name held before: another
    move), changed after sealing, under another key, on a placement no run sealed, or malformed: nothing is left out
    of plans."""
    sealed = stored(seal_move(move(), KEY, NOW))
    found = refusal(sealed, ["GPU-a"], REFUSED_UNTIL, KEY)
    other = stored(seal_move(move(name="move-y-1", pod="team-a/y"), KEY, NOW))
    unsealed_move = stored(move())
    forged = DefragRefusal(("GPU-a",), REFUSED_UNTIL, "0" * 64)
    for obj, refused in [
        (sealed, forged),
        (other, found),
        (sealed, replace(found, cards=("GPU-z",))),
        (sealed, replace(found, until=REFUSED_UNTIL + timedelta(minutes=1))),
        (sealed, refusal(sealed, ["GPU-a"], REFUSED_UNTIL, RoomKey(b"o" * 32))),
        (unsealed_move, refusal(unsealed_move, ["GPU-a"], REFUSED_UNTIL, KEY)),
        (sealed, refusal(sealed, ["a,b"], REFUSED_UNTIL, KEY)),
        (sealed, refusal(sealed, [f"GPU-{n}" for n in range(17)], REFUSED_UNTIL, KEY)),
        (sealed, {"cards": "GPU-a", "until": "2026-12-03T12:30:00Z", "seal": found.seal}),
        (sealed, {"cards": ["GPU-a"], "until": "soon", "seal": found.seal}),
        (sealed, {"cards": ["GPU-a"], "until": "2026-12-03T12:30:00Z"}),
        (sealed, replace(found, seal="\u00e9" * 64)),
        (stored(seal_move(move(), KEY, NOW + timedelta(seconds=1))), found),
    ]:
        assert refused_by(given_up(obj, refused), KEY, NOW, COOLDOWN) == {}, refused
    unshared = RoomKey(b"s" * 32, shared=False)
    assert refused_by(given_up(sealed, forged), unshared, NOW, COOLDOWN) == {"GPU-a": REFUSED_UNTIL}, (
        "without a key that checks, any that parses, as move_sealed takes every run placement"
    )


def test_a_refusal_survives_the_status_round_trip_and_a_malformed_one_is_none() -> None:
    """The status model keeps `defragRefused` through every status write (a claim's, the reconciler's) and reads a
    value of another shape as none rather than failing the placement."""
    status = PlacementStatus(defrag_refused=DefragRefusal(("GPU-a",), REFUSED_UNTIL, "f" * 64))
    assert status_from_object(status_to_object(status)) == status
    assert status_from_object({"phase": "Consumed", "defragRefused": {"cards": 3}}).defrag_refused is None
