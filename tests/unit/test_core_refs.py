"""Card references `gpu-N`, `gpu-N/P`, `GPU-...`, and their resolution through a node's register."""

from __future__ import annotations

import re
from typing import Any

import pytest
from core_strategies import UUIDS, outcome
from hypothesis import given
from hypothesis import strategies as st

from kubectl_hami_place.core.cards import Card
from kubectl_hami_place.core.errors import CardRefError
from kubectl_hami_place.core.refs import GPU_DEVICE_PATTERN, CardRef, parse_card_ref, resolve, uuids_named

CARDS = (Card("GPU-aaa", index=0, type="NVIDIA-A100"), Card("GPU-bbb", index=1, type="NVIDIA-A100"))


def test_the_three_forms() -> None:
    assert parse_card_ref("gpu-0") == CardRef(index=0)
    assert parse_card_ref("gpu-12/70") == CardRef(index=12, percent=70)
    assert parse_card_ref("GPU-0fc3e0a1-1b2c") == CardRef(uuid="GPU-0fc3e0a1-1b2c")


@pytest.mark.parametrize("text", ["gpu-", "gpu-1/0", "gpu-1/101", "gpu-1/", "GPU-", "gpu-a", "1", "gpu-1\n", "MIG-1"])
def test_malformed_references_are_refused_with_the_accepted_forms(text: str) -> None:
    with pytest.raises(CardRefError, match="use gpu-<index>"):
        parse_card_ref(text)


def test_the_crd_pattern_accepts_exactly_what_the_parser_accepts() -> None:
    pattern = re.compile(GPU_DEVICE_PATTERN)
    for text in ["gpu-0", "gpu-3/100", "GPU-x-1", "gpu-1/0", "gpu-1/101", "GPU-a_b"]:
        accepted = isinstance(outcome(lambda t=text: parse_card_ref(t), CardRefError), CardRef)
        assert accepted == bool(pattern.fullmatch(text)), text


def test_resolve_by_index_and_uuid() -> None:
    assert resolve(parse_card_ref("gpu-1/50"), CARDS, "n") is CARDS[1]
    assert resolve(parse_card_ref("GPU-aaa"), CARDS, "n") is CARDS[0]


def test_resolve_names_the_cards_the_node_has() -> None:
    with pytest.raises(CardRefError) as caught:
        resolve(parse_card_ref("gpu-3"), CARDS, "gpu-a100-0")
    assert str(caught.value) == "node gpu-a100-0 has no card with index 3; it has gpu-0, gpu-1"
    with pytest.raises(CardRefError, match="has no card with UUID GPU-zzz; it has GPU-aaa, GPU-bbb"):
        resolve(parse_card_ref("GPU-zzz"), CARDS, "n")
    with pytest.raises(CardRefError) as caught:
        resolve(parse_card_ref("gpu-0"), (), "cpu-0")
    assert str(caught.value) == "node cpu-0 has no card with index 0; it has no cards"


def test_legacy_seven_field_registers_give_every_card_index_0() -> None:
    """gpu-0 is ambiguous then: the user must name the card by UUID."""
    cards = (Card("GPU-aaa"), Card("GPU-bbb"))
    with pytest.raises(CardRefError, match="2 cards registered as gpu-0: GPU-aaa, GPU-bbb; name the card by UUID"):
        resolve(parse_card_ref("gpu-0"), cards, "n")


def test_a_ref_cannot_be_built_inconsistent() -> None:
    with pytest.raises(CardRefError):
        CardRef()
    with pytest.raises(CardRefError):
        CardRef(index=1, uuid="GPU-a")
    with pytest.raises(CardRefError):
        CardRef(uuid="GPU-a", percent=10)


@given(
    st.builds(
        CardRef,
        index=st.integers(min_value=0, max_value=2**32),
        percent=st.none() | st.integers(min_value=1, max_value=100),
    )
    | st.builds(CardRef, uuid=UUIDS)
)
def test_str_round_trips_and_matches_the_crd_pattern(ref: CardRef) -> None:
    assert parse_card_ref(str(ref)) == ref
    assert re.fullmatch(GPU_DEVICE_PATTERN, str(ref))


@given(st.text(max_size=30) | st.from_regex(r"gpu-[0-9]{0,3}(/[0-9]{0,4})?", fullmatch=True))
def test_garbage_raises_only_card_ref_errors(text: str) -> None:
    result = outcome(lambda: parse_card_ref(text), CardRefError)
    assert isinstance(result, CardRefError | CardRef)


@given(st.none() | st.integers() | st.lists(st.text()))
def test_non_strings_are_refused(value: object) -> None:
    with pytest.raises(CardRefError):
        parse_card_ref(value)


def test_an_index_of_thousands_of_digits_is_a_card_ref_error_not_a_crash() -> None:
    """The CRD's pattern allows any run of digits; Python refuses int() of more than 4,300 of them."""
    with pytest.raises(CardRefError) as caught:
        parse_card_ref("gpu-" + "9" * 5000)
    quoted = repr("gpu-" + "9" * 53 + "...")  # cut to 60 characters
    assert str(caught.value).startswith(f"{quoted} names a card index no node has"), str(caught.value)
    assert parse_card_ref("gpu-" + "0" * 5000 + "7") == CardRef(index=7), "leading zeros are no digits"


_FORMS = "use gpu-<index>, gpu-<index>/<percent 1..100> or a card UUID (GPU-...)"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (5, "card reference must be a string, got int"),
        ("gpu-x", f"'gpu-x' is not a card reference: {_FORMS}"),
        ("x" * 60, f"'{'x' * 60}' is not a card reference: {_FORMS}"),
        ("x" * 61, f"'{'x' * 57}...' is not a card reference: {_FORMS}"),
        ("gpu-18446744073709551616", "card index 18446744073709551616 is out of range"),
    ],
)
def test_a_bad_reference_is_refused_with_its_whole_reason(text: object, message: str) -> None:
    """The line `pin` and the placement's status show: it quotes what was written, clipped at 60 characters so a
    pasted manifest cannot flood it, and says what is accepted."""
    with pytest.raises(CardRefError) as caught:
        parse_card_ref(text)
    assert str(caught.value) == message


def test_the_largest_index_a_register_can_hold_is_a_reference() -> None:
    """HAMi's index is a Go uint: gpu-18446744073709551615 names a card a register may list, one more names none."""
    assert parse_card_ref("gpu-18446744073709551615") == CardRef(index=2**64 - 1)
    assert parse_card_ref("gpu-018446744073709551615") == CardRef(index=2**64 - 1)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({}, "a card reference names either an index or a UUID"),
        ({"index": 1, "uuid": "GPU-a"}, "a card reference names either an index or a UUID"),
        ({"index": 1, "percent": 0}, "card memory percent 0 is outside 1..100"),
        ({"index": 1, "percent": 101}, "card memory percent 101 is outside 1..100"),
        ({"uuid": "GPU-a", "percent": 10}, "GPU-a: a percent can only follow gpu-N, not a UUID"),
        ({"index": -1}, "card index -1 is out of range"),
        ({"index": 2**64}, "card index 18446744073709551616 is out of range"),
        ({"uuid": "MIG-1"}, "'MIG-1' is not a card UUID (GPU-...)"),
    ],
)
def test_a_ref_built_in_code_is_checked_with_the_same_reasons(fields: dict[str, Any], message: str) -> None:
    """The CLI builds references from flags as well as from text: each must still render to what the CRD accepts."""
    with pytest.raises(CardRefError) as caught:
        CardRef(**fields)
    assert str(caught.value) == message


def test_a_reference_to_a_card_the_node_lacks_does_not_hide_the_next_ones() -> None:
    """Pending placements are compared by the cards they name: a stale gpu-7 must not stop gpu-1 being counted."""
    refs = [parse_card_ref("gpu-7"), parse_card_ref("gpu-1"), parse_card_ref("GPU-aaa")]
    assert uuids_named(refs, CARDS) == {"GPU-bbb", "GPU-aaa"}
    legacy = (Card("GPU-aaa"), Card("GPU-bbb"))
    assert uuids_named([parse_card_ref("gpu-0")], legacy) == set(), "an index two legacy cards share names neither"
