"""Card registers (`hami.io/node-nvidia-register`) in both HAMi encodings, decoded as HAMi v2.10 decodes them."""

from __future__ import annotations

import functools
import json
from typing import Any

import pytest
from core_strategies import cards, json_text, outcome
from hypothesis import given
from hypothesis import strategies as st

from kubectl_hami_place.core.cards import (
    Card,
    _json_card,
    encode_register,
    is_legacy_register,
    node_cards,
    pair_scores,
    parse_register,
)
from kubectl_hami_place.core.errors import ModelError, RegisterError

A100 = (
    '[{"id":"GPU-mock-0","index":0,"count":10,"devmem":40960,"devcore":100,'
    '"type":"NVIDIA-A100-SXM4-40GB","health":true,"numa":0,"mode":"hami-core"}]'
)


def test_json_register_from_the_protocol_doc() -> None:
    assert parse_register(A100) == (
        Card("GPU-mock-0", 0, 10, 40960, 100, "NVIDIA-A100-SXM4-40GB", 0, True, "hami-core"),
    )


def test_json_omitempty_missing_index_numa_health_are_zero_values() -> None:
    """Go omits zero values: a missing index/numa is 0, a missing health is unhealthy."""
    (card,) = parse_register('[{"id":"GPU-1","count":10,"devmem":16384,"devcore":100,"type":"NVIDIA-T4"}]')
    assert (card.index, card.numa, card.health, card.mode) == (0, 0, False, "")


def test_json_keys_match_case_insensitively_and_unknown_keys_are_ignored() -> None:
    text = '[{"ID":"GPU-2","Index":3,"COUNT":4,"devmem":1,"devcore":2,"Type":"NVIDIA-X","Health":true,"extra":[1]}]'
    (card,) = parse_register(text)
    assert (card.uuid, card.index, card.count, card.health) == ("GPU-2", 3, 4, True)


def test_json_null_values_keep_zero_values() -> None:
    (card,) = parse_register('[{"id":"GPU-3","index":null,"health":null,"count":2}]')
    assert (card.index, card.health, card.count) == (0, False, 2)


def test_legacy_seven_fields_from_the_protocol_doc() -> None:
    (card,) = parse_register("GPU-0055,10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,0,true:")
    assert card == Card("GPU-0055", 0, 10, 32768, 100, "NVIDIA-Tesla V100-PCIE-32GB", 0, True, "hami-core")


def test_legacy_nine_fields_as_hami_v2_7_wrote_them() -> None:
    text = (
        "GPU-40c0923a-6172-5f3c-d299-4f6eaf218ad5,10,258787,500,NVIDIA-NVIDIA H20-3e,0,true,1,mig:"
        "GPU-22e5bae0-3938-7cc7-cab3-3f2b91e20774,10,258787,500,NVIDIA-NVIDIA H20-3e,1,false,2,hami-core:"
    )
    first, second = parse_register(text)
    assert (first.index, first.mode, first.devcore, first.health) == (1, "mig", 500, True)
    assert (second.index, second.numa, second.health, second.mode) == (2, 1, False, "hami-core")


def test_legacy_without_trailing_colon_and_go_booleans() -> None:
    first, second = parse_register("GPU-a,1,2,3,NVIDIA,0,T:GPU-b,1,2,3,NVIDIA,0,0")
    assert (first.health, second.health) == (True, False)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "empty"),
        ("[]", "no cards"),
        ("null", "no ':'"),
        ("[1]", "must be an object"),
        ('{"id":"GPU-1"}', "must be a list of cards, got an object"),
        ('[{"id":5}]', "id must be a string"),
        ('[{"id":"GPU","count":1.5}]', "count must be an integer"),
        ('[{"id":"GPU","count":1.0}]', "count must be an integer"),
        ('[{"id":"GPU","count":true}]', "count must be an integer"),
        ('[{"id":"GPU","count":4294967296}]', "out of range"),
        ('[{"id":"GPU","index":-1}]', "out of range"),
        ('[{"id":"GPU","health":"true"}]', "health must be true or false"),
        ('[{"id":"GPU","devmem":NaN}]', "not valid JSON"),
        ("[{", "not valid JSON"),
        ("GPU-a,1,2,3,NVIDIA,0:", "6 fields"),
        ("GPU-a,x,2,3,NVIDIA,0,true:", "count 'x' is not an integer"),
        ("GPU-a,1,2,3,NVIDIA,0,yes:", "health 'yes'"),
        ("GPU-a,1,2,3,NVIDIA,0,true,-1,mig:", "index -1 is out of range"),
        ("GPU-a,1,2,3,NVIDIA,0,true,٣,mig:", "index '٣' is not an integer"),
    ],
)
def test_garbage_registers_give_a_register_error_naming_the_fault(text: str, fragment: str) -> None:
    with pytest.raises(RegisterError, match=None) as caught:
        parse_register(text)
    assert fragment in str(caught.value)
    assert "\n" not in str(caught.value)


def test_node_cards_reads_the_annotation_and_names_the_node_on_errors() -> None:
    node = {"metadata": {"name": "gpu-a100-0", "annotations": {"hami.io/node-nvidia-register": A100}}}
    assert node_cards(node)[0].uuid == "GPU-mock-0"
    with pytest.raises(RegisterError, match=r"node gpu-a100-0 has no hami\.io/node-nvidia-register"):
        node_cards({"metadata": {"name": "gpu-a100-0"}})
    with pytest.raises(RegisterError, match="node cpu-0: card register"):
        node_cards({"metadata": {"name": "cpu-0", "annotations": {"hami.io/node-nvidia-register": "junk"}}})
    for not_a_node in (["gpu-a100-0"], {"metadata": ["gpu-a100-0"]}):
        with pytest.raises(RegisterError, match=r"node <unnamed> has no hami\.io/node-nvidia-register"):
            node_cards(not_a_node)  # type: ignore[arg-type]


def test_a_legacy_register_is_displayed_but_has_no_cards_hami_v2_10_schedules_on() -> None:
    legacy = "GPU-0055,10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,0,true:"
    assert is_legacy_register(legacy) and not is_legacy_register(A100)
    assert parse_register(legacy)[0].uuid == "GPU-0055"
    node = {"metadata": {"name": "gpu-old", "annotations": {"hami.io/node-nvidia-register": legacy}}}
    with pytest.raises(RegisterError, match=r"node gpu-old: .* legacy colon format .* reports the node unregistered"):
        node_cards(node)


def test_is_nvidia_follows_hamis_case_insensitive_type_check() -> None:
    assert Card("GPU-1", type="nvidia-a10").is_nvidia
    assert not Card("GPU-1", type="Ascend910").is_nvidia


@given(st.lists(cards(), min_size=1, max_size=5))
def test_json_encoding_round_trips(register: list[Card]) -> None:
    assert parse_register(encode_register(register)) == tuple(register)


@given(st.lists(cards(legacy_safe=True), min_size=1, max_size=5))
def test_legacy_encoding_round_trips(register: list[Card]) -> None:
    assert parse_register(encode_register(register, legacy=True)) == tuple(register)


def test_json_encoding_omits_zero_values_like_go() -> None:
    encoded = encode_register([Card("GPU-1", count=10, devmem=1024, type="NVIDIA-T4")])
    assert json.loads(encoded) == [{"id": "GPU-1", "count": 10, "devmem": 1024, "type": "NVIDIA-T4"}]


@given(st.text() | json_text | st.builds(lambda s: "[" + s, st.text()))
def test_garbage_text_raises_only_register_errors(text: str) -> None:
    result = outcome(lambda: parse_register(text), RegisterError)
    assert isinstance(result, RegisterError) or all(isinstance(card, Card) for card in result)


@given(st.lists(st.sampled_from(["GPU-a", "1", "-2", "x", "", "true", "NVIDIA", "٣", "99999999999"]), max_size=10))
def test_legacy_shaped_garbage_raises_only_register_errors(fields: list[str]) -> None:
    result = outcome(lambda: parse_register(",".join(fields) + ":"), RegisterError)
    assert isinstance(result, RegisterError) or all(isinstance(card, Card) for card in result)


@given(st.none() | st.integers() | st.lists(st.integers()))
def test_non_string_registers_are_refused(value: object) -> None:
    with pytest.raises(ModelError):
        parse_register(value)


def test_a_register_is_decoded_once_per_text_and_a_bad_one_fails_every_time() -> None:
    # The webhook checks each open placement's node on every pass: the same text must give the same cards.
    text = encode_register([Card("GPU-memo", 0, 10, 40960, 100, "NVIDIA-A100-SXM4-40GB", 0, True, "hami-core")])
    first = parse_register(text)
    assert parse_register(str(text)) is first
    assert parse_register(text + " ") == first
    for _ in range(2):
        with pytest.raises(RegisterError):
            parse_register("[]")


_CARD_KEYS = ["id", "index", "count", "devmem", "devcore", "type", "numa", "mode", "health", "ID", "devMem", "other"]
_CARD_VALUES = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**66), max_value=2**66)
    | st.sampled_from([2**31, -(2**31) - 1, 2**63, -(2**63) - 1, 2**64, 1.0, -0.0])
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6)
)


@st.composite
def _card_objects(draw: st.DrawFn) -> dict[str, object]:
    """A card object as HAMi writes it, with some keys left out and maybe one key set to an odd value."""
    card = draw(cards())
    full: dict[str, object] = {
        "id": card.uuid,
        "index": card.index,
        "count": card.count,
        "devmem": card.devmem,
        "devcore": card.devcore,
        "type": card.type,
        "numa": card.numa,
        "mode": card.mode,
        "health": card.health,
    }
    dropped = draw(st.sets(st.sampled_from(list(full))))
    item = {key: value for key, value in full.items() if key not in dropped}
    if draw(st.booleans()):
        item[draw(st.sampled_from(_CARD_KEYS))] = draw(_CARD_VALUES)
    return item


def _reference(text: str) -> tuple[Card, ...]:
    """The register as the json module and the field-by-field checks read it, entry by entry."""
    data = json.loads(text)
    cards = tuple(_json_card(item, position) for position, item in enumerate(data))
    if not cards:
        raise RegisterError("card register lists no cards")
    return cards


@given(st.lists(_card_objects() | st.none() | st.integers() | st.text(max_size=3), max_size=4))
def test_a_register_read_by_orjson_gives_the_cards_and_errors_the_json_module_gives(register: list[object]) -> None:
    # Registers as HAMi writes them are read by orjson (status at 5,000 nodes); anything odd must still decode or
    # fail exactly as the field-by-field reading does, with the same message.
    text = json.dumps(register)
    got, want = outcome(lambda: parse_register(text), RegisterError), outcome(lambda: _reference(text), RegisterError)
    assert type(got) is type(want)
    assert (str(got), repr(got)) == (str(want), repr(want))


_ODD_VALUES = [None, True, False, 0, 1, -1, 1.0, 1.5, -0.0, "", "x", 2**31 - 1, 2**31, -(2**31), -(2**31) - 1]
_ODD_VALUES += [2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64 - 1, 2**64, 2**70, -(2**70)]


@pytest.mark.parametrize(
    "key", ["id", "index", "count", "devmem", "devcore", "type", "numa", "mode", "health", "Count"]
)
def test_every_field_of_every_type_reads_as_the_json_module_reads_it(key: str) -> None:
    base = {"id": "GPU-1", "index": 1, "count": 10, "devmem": 81920, "devcore": 100, "type": "NVIDIA", "health": True}
    for value in _ODD_VALUES:
        text = json.dumps([base, {**base, key: value}])
        got = outcome(functools.partial(parse_register, text), RegisterError)
        want = outcome(functools.partial(_reference, text), RegisterError)
        assert (type(got), str(got), repr(got)) == (type(want), str(want), repr(want)), value


def test_cards_of_different_registers_share_their_model_and_mode_words() -> None:
    first, second = (
        parse_register(json.dumps([{"id": uuid, "type": "NVIDIA-" + "H100", "mode": "hami-" + "core", "health": True}]))
        for uuid in ("GPU-a", "GPU-b")
    )
    assert first[0].type is second[0].type
    assert first[0].mode is second[0].mode


def test_a_lone_surrogate_escape_in_a_register_is_read_as_go_reads_it() -> None:
    """orjson refuses the text and json keeps the surrogate, which no UTF-8 encoder (cluster-info, an admission's
    answer) then takes; Go's json.Unmarshal reads U+FFFD, so HAMi registers the node."""
    card = {"id": "GPU-\\ud800", "index": 0, "count": 10, "devmem": 40960, "devcore": 100, "type": "NVIDIA-\\udfff"}
    text = json.dumps([card]).replace("\\\\", "\\")
    [read] = parse_register(text)
    assert (read.uuid, read.type) == ("GPU-\ufffd", "NVIDIA-\ufffd")
    scores = pair_scores('[{"uuid": "GPU-\\ud800", "score": {"GPU-\\udbff": 50}}]')
    assert scores == {"GPU-\ufffd": {"GPU-\ufffd": 50}}


_ENTRY = "card register entry 0"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (5, "card register must be a string, got int"),
        ('[{"id":"GPU","devmem":NaN}]', "card register is not valid JSON: NaN is not JSON"),
        ("[null]", f"{_ENTRY} is null"),
        ("[5]", f"{_ENTRY} must be an object, got the number 5"),
        ('{"id":"GPU-1"}', "card register JSON must be a list of cards, got an object"),
        ('[{"id":5}]', f"{_ENTRY}: id must be a string, got the number 5"),
        ('[{"id":"GPU","type":[]}]', f"{_ENTRY}: type must be a string, got a list"),
        ('[{"id":"GPU","mode":{}}]', f"{_ENTRY}: mode must be a string, got an object"),
        ('[{"id":"GPU","count":1.5}]', f"{_ENTRY}: count must be an integer, got the number 1.5"),
        ('[{"id":"GPU","count":1e400}]', f"{_ENTRY}: count must be an integer, got a number"),
        ('[{"id":"GPU","devmem":2147483648}]', f"{_ENTRY}: devmem 2147483648 is out of range"),
        ('[{"id":"GPU","devcore":"1"}]', f"{_ENTRY}: devcore must be an integer, got a string"),
        ('[{"id":"GPU","numa":true}]', f"{_ENTRY}: numa must be an integer, got a boolean"),
        ('[{"id":"GPU","numa":9223372036854775808}]', f"{_ENTRY}: numa 9223372036854775808 is out of range"),
        ('[{"id":"GPU","index":null,"Index":-1}]', f"{_ENTRY}: index -1 is out of range"),
        (
            '[{"id":"GPU","health":null},{"id":"G2","health":"yes"}]',
            "card register entry 1: health must be true or false, got a string",
        ),
        ('[{"id":"GPU","devicevendor":5}]', f"{_ENTRY}: devicevendor cannot be the number 5 (Go reads it as a string)"),
        ('[{"id":"GPU","migProfiles":{}}]', f"{_ENTRY}: migProfiles cannot be an object (Go reads it as a list)"),
        (
            '[{"id":"GPU","migProfiles":[5]}]',
            f"{_ENTRY}: migProfiles[0] cannot be the number 5 (Go reads it as an object)",
        ),
        (
            '[{"id":"GPU","migProfiles":[{"memoryMB":"x"}]}]',
            f"{_ENTRY}: migProfiles[0].memoryMB cannot be a string (Go reads it as an integer)",
        ),
        (
            '[{"id":"GPU","migProfiles":[{"memoryMB":2147483648}]}]',
            f"{_ENTRY}: migProfiles[0].memoryMB cannot be the number 2147483648 (Go reads it as an integer)",
        ),
        ('[{"id":"GPU","customInfo":[]}]', f"{_ENTRY}: customInfo cannot be a list (Go reads it as an object)"),
        (
            '[{"id":"GPU","migtemplate":[[{"count":true}]]}]',
            f"{_ENTRY}: migtemplate[0][0].count cannot be a boolean (Go reads it as an integer)",
        ),
    ],
)
def test_a_bad_json_register_is_refused_with_its_whole_reason(text: object, message: str) -> None:
    """HAMi reports such a node unregistered; the line `status` and the placement show must say which entry, which
    key and what it holds, since a broken or hostile device plugin wrote it."""
    with pytest.raises(RegisterError) as caught:
        parse_register(text)
    assert str(caught.value) == message


def test_every_value_at_the_limit_of_its_go_type_is_read() -> None:
    """Go's json.Unmarshal stores each of these, so HAMi registers the node: refusing one would call it broken."""
    card = (
        '{"id":"GPU","index":18446744073709551615,"count":-2147483648,"devmem":2147483647,"devcore":-2147483648,'
        '"numa":-9223372036854775808,"migProfiles":[{"memoryMB":2147483647,"Core":-2147483648,'
        '"sliceCount":4294967295,"placements":[{"start":0,"size":null}]}],"customInfo":{"a":[1]},"deviceVendor":null}'
    )
    assert parse_register(f'[{card},{{"id":"GPU-2","numa":9223372036854775807}}]') == (
        Card("GPU", 2**64 - 1, -(2**31), 2**31 - 1, -(2**31), numa=-(2**63)),
        Card("GPU-2", numa=2**63 - 1),
    )


_SIXTY = "GPU-" + "a" * 37 + ",1,2,3,NVIDIA,0,tru"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("no colon", "card register is neither JSON nor the legacy 'UUID,count,...:' string (no ':')"),
        ("GPU-a,1,2,3,NVIDIA,0:", "card register entry 0 'GPU-a,1,2,3,NVIDIA,0' has 6 fields, expected 7 or 9"),
        (
            "GPU-a,x,2,3,NVIDIA,0,true:",
            "card register entry 0 'GPU-a,x,2,3,NVIDIA,0,true': count 'x' is not an integer",
        ),
        (
            "GPU-a,1,x,3,NVIDIA,0,true:",
            "card register entry 0 'GPU-a,1,x,3,NVIDIA,0,true': devmem 'x' is not an integer",
        ),
        (
            "GPU-a,1,2,x,NVIDIA,0,true:",
            "card register entry 0 'GPU-a,1,2,x,NVIDIA,0,true': devcore 'x' is not an integer",
        ),
        ("GPU-a,1,2,3,NVIDIA,x,true:", "card register entry 0 'GPU-a,1,2,3,NVIDIA,x,true': numa 'x' is not an integer"),
        (
            "GPU-a,1,2,3,NVIDIA,0,yes:",
            "card register entry 0 'GPU-a,1,2,3,NVIDIA,0,yes': health 'yes' is not a boolean",
        ),
        (
            "GPU-a,1,2,3,NVIDIA,0,true,x,mig:",
            "card register entry 0 'GPU-a,1,2,3,NVIDIA,0,true,x,mig': index 'x' is not an integer",
        ),
        (
            "GPU-a,1,2,3,NVIDIA,0,true:GPU-b,1,2,3,NVIDIA,0,true,-1,mig:",
            "card register entry 1 'GPU-b,1,2,3,NVIDIA,0,true,-1,mig': index -1 is out of range",
        ),
        (
            "GPU-a,1,2,3,NVIDIA,0,true,9223372036854775808,mig:",
            "card register entry 0 'GPU-a,1,2,3,NVIDIA,0,true,9223372036854775808,mig': index 9223372036854775808 "
            "is out of range",
        ),
        (_SIXTY + ":", f"card register entry 0 {_SIXTY!r}: health 'tru' is not a boolean"),
        (
            "GPU-a" + _SIXTY + ":",
            f"card register entry 0 'GPU-aGPU-{'a' * 37},1,2,3,NVID...': health 'tru' is not a boolean",
        ),
        (
            "GPU-a,1," + "9" * 44 + "x,3,NVIDIA,0,true:",
            f"card register entry 0 'GPU-a,1,{'9' * 44}x,3,N...': devmem '{'9' * 40}' is not an integer",
        ),
        (
            "GPU-a,1," + "9" * 45 + ",3,NVIDIA,0,true:",
            f"card register entry 0 'GPU-a,1,{'9' * 45},3,N...': devmem {'9' * 40} is out of range",
        ),
    ],
)
def test_a_bad_legacy_register_is_refused_naming_the_entry_and_the_field(text: str, message: str) -> None:
    """`status` shows why an old node's cards cannot be read: the entry quoted (clipped at 60 characters, so a
    broken plugin cannot flood the line), the field and its value (clipped at 40)."""
    with pytest.raises(RegisterError) as caught:
        parse_register(text)
    assert str(caught.value) == message


def test_a_legacy_index_is_read_as_hamis_atoi_reads_it_up_to_the_int64_limit() -> None:
    """HAMi's legacy decoder reads the index with Atoi: one past int64 is refused there, unlike the JSON form's uint."""
    [card] = parse_register("GPU-a,1,2,3,NVIDIA,0,true,9223372036854775807,mig:")
    assert card.index == 2**63 - 1


def test_an_empty_legacy_entry_is_skipped_and_the_cards_after_it_read() -> None:
    """HAMi's DecodeNodeDevices skips an empty segment: `::` must not hide the cards behind it."""
    assert parse_register("GPU-a,1,2,3,NVIDIA,0,true::GPU-b,1,2,3,NVIDIA,1,false:") == (
        Card("GPU-a", 0, 1, 2, 3, "NVIDIA", 0, True, "hami-core"),
        Card("GPU-b", 0, 1, 2, 3, "NVIDIA", 1, False, "hami-core"),
    )


@pytest.mark.parametrize(
    ("text", "legacy"),
    [
        (A100, False),
        ("[\n  " + A100[1:-1] + "\n]", False),
        ("  " + A100[1:-1], False),
        ("GPU-0055,10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,0,true:", True),
        (" XPU-0,10,32768,100,NVIDIA,0,true:", True),
        ("", False),
        (None, False),
    ],
)
def test_a_register_is_legacy_exactly_when_it_does_not_open_as_json(text: object, legacy: bool) -> None:
    """A legacy register parses but HAMi v2.10 cannot schedule on it: a pretty-printed JSON one must not be refused,
    and a colon one with any first card ID must not be taken for schedulable."""
    assert is_legacy_register(text) is legacy


def test_a_legacy_register_is_refused_with_the_whole_reason() -> None:
    """The user must learn both that HAMi ignores the node and what to do about it."""
    node = {"metadata": {"name": "gpu-old", "annotations": {"hami.io/node-nvidia-register": "GPU-0,1,2,3,N,0,true:"}}}
    with pytest.raises(RegisterError) as caught:
        node_cards(node)
    assert str(caught.value) == (
        "node gpu-old: its hami.io/node-nvidia-register is in the legacy colon format of HAMi up to v2.7, which HAMi "
        "v2.10's scheduler does not read (it reports the node unregistered): update HAMi's device plugin there"
    )


@pytest.mark.parametrize(
    ("node", "name"),
    [
        ({"metadata": None}, "<unnamed>"),
        ({"metadata": {"name": 5}}, "<unnamed>"),
        ({"metadata": {"name": ""}}, "<unnamed>"),
        ({"metadata": {"name": "n", "annotations": None}}, "n"),
    ],
)
def test_a_node_object_of_odd_shape_has_no_register_rather_than_crashing(node: dict[str, Any], name: str) -> None:
    """Node objects also come from files and cluster-info documents: a null or odd metadata reads as no register."""
    with pytest.raises(RegisterError) as caught:
        node_cards(node)
    assert str(caught.value) == (
        f"node {name} has no hami.io/node-nvidia-register annotation: HAMi's device plugin is not on it"
    )


def test_pair_scores_are_read_as_go_reads_them_or_refused_whole() -> None:
    """HAMi reads a missing uuid as "" and the first entry of a UUID; one it cannot read unregisters the node."""
    text = '[{"score":{"GPU-a":1}},{"uuid":"GPU-b"},{"UUID":"GPU-b","score":{"GPU-a":2}}]'
    assert pair_scores(text) == {"": {"GPU-a": 1}, "GPU-b": {}}
    limits = '[{"uuid":"GPU-a","score":{"GPU-b":9223372036854775807,"GPU-c":-9223372036854775808}}]'
    assert pair_scores(limits) == {"GPU-a": {"GPU-b": 2**63 - 1, "GPU-c": -(2**63)}}
    for bad, message in [
        (5, "hami.io/node-nvidia-score must be a string, got int"),
        ('[{"uuid":"GPU-a","score":{"GPU-b":NaN}}]', "hami.io/node-nvidia-score is not valid JSON: NaN is not JSON"),
        (
            '[{"uuid":"GPU-a","score":[]}]',
            "hami.io/node-nvidia-score[0].score cannot be a list (Go reads it as an object)",
        ),
    ]:
        with pytest.raises(RegisterError) as caught:
            pair_scores(bad)
        assert str(caught.value) == message


def test_both_encodings_write_exactly_what_hami_writes() -> None:
    """Tests feed these strings to HAMi's own scheduler: compact JSON in struct order, or FormatBool's true/false."""
    full = Card("GPU-1", 1, 10, 40960, 100, "NVIDIA-A100", 1, True, "hami-core")
    assert encode_register([full]) == (
        '[{"id":"GPU-1","index":1,"count":10,"devmem":40960,"devcore":100,"type":"NVIDIA-A100","numa":1,'
        '"mode":"hami-core","health":true}]'
    )
    sick = Card("GPU-2", 2, 10, 40960, 100, "NVIDIA-A100", 0, False, "")
    assert encode_register([full, sick], legacy=True) == (
        "GPU-1,10,40960,100,NVIDIA-A100,1,true,1,hami-core:GPU-2,10,40960,100,NVIDIA-A100,0,false,2,:"
    )


@pytest.mark.parametrize(
    ("card", "message"),
    [
        (Card("GPU:a"), "card 'GPU:a': uuid 'GPU:a' cannot be written in the legacy encoding"),
        (
            Card("GPU-a", type="NVIDIA,A100"),
            "card 'GPU-a': type 'NVIDIA,A100' cannot be written in the legacy encoding",
        ),
        (Card("GPU-a", mode="mig:1"), "card 'GPU-a': mode 'mig:1' cannot be written in the legacy encoding"),
    ],
)
def test_the_legacy_encoding_refuses_a_separator_in_any_text_field(card: Card, message: str) -> None:
    """A comma or a colon alone would shift every field after it: each is refused, naming the field."""
    with pytest.raises(RegisterError) as caught:
        encode_register([card], legacy=True)
    assert str(caught.value) == message
