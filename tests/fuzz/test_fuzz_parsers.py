"""Fuzz targets: HAMi's register and allocation annotations, shaped like HAMi's but wrong anywhere."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from kubectl_hami_place.core.allocations import parse_allocation
from kubectl_hami_place.core.cards import parse_register
from kubectl_hami_place.core.errors import ModelError
from kubectl_hami_place.core.reviews import nests_deeper
from tests.fuzz.strategies import FUZZ, either, json_values

REGISTER_FIELDS = {
    "id": "GPU-d66f8818-d420-5068-879c-852329dc277d",
    "index": 0,
    "count": 10,
    "devmem": 40960,
    "devcore": 100,
    "type": "NVIDIA-A100-SXM4-40GB",
    "numa": 0,
    "health": True,
    "mode": "hami-core",
    "mignum": 0,
    "customInfo": {},
}
json_cards = st.fixed_dictionaries({}, optional={key: either(value) for key, value in REGISTER_FIELDS.items()})
legacy_fields = st.sampled_from(
    [
        "GPU-a",
        "0",
        "1",
        "-1",
        "10",
        "40960",
        "100",
        "true",
        "false",
        "NVIDIA",
        "x",
        "",
        "1e3",
        "٣",
        "99999999999999999999",
    ]
)
device_fields = st.sampled_from(["GPU-a", "NVIDIA", "3000", "30", "0", "-1", "", "x", "1.5", "99999999999999999999"])


def parsed_or_refused(call: Any) -> None:
    """The parser returns, or raises a ModelError with a one-line message; anything else fails the target."""
    try:
        call()
    except ModelError as error:
        assert str(error) and "\n" not in str(error)


@FUZZ
@given(st.lists(json_cards, max_size=4) | json_values)
def test_register_json(register: Any) -> None:
    parsed_or_refused(lambda: parse_register(json.dumps(register)))


@FUZZ
@given(
    st.lists(st.lists(legacy_fields, max_size=11).map(",".join), max_size=4).map(lambda cards: ":".join(cards) + ":")
)
def test_register_legacy(text: str) -> None:
    parsed_or_refused(lambda: parse_register(text))


@FUZZ
@given(json_values | st.text(max_size=200))
def test_register_anything(value: Any) -> None:
    parsed_or_refused(lambda: parse_register(value))


@FUZZ
@given(
    st.lists(
        st.lists(st.lists(device_fields, max_size=6).map(",".join), max_size=3).map(
            lambda devices: "".join(d + ":" for d in devices)
        ),
        max_size=4,
    ).map(lambda entries: "".join(e + ";" for e in entries))
    | st.text(alphabet="GPU-aNVIDA0123,:;x ", max_size=80)
)
def test_allocation_shaped(text: str) -> None:
    parsed_or_refused(lambda: parse_allocation(text))


@FUZZ
@given(json_values | st.text(max_size=200))
def test_allocation_anything(value: Any) -> None:
    parsed_or_refused(lambda: parse_allocation(value))


def _depth(value: Any) -> int:
    """The levels of lists and objects in a value, counted the plain recursive way: the reference the walk matches."""
    children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else None
    return 0 if children is None else 1 + max(map(_depth, children), default=0)


@FUZZ
@given(st.recursive(json_values, lambda children: st.lists(children, max_size=3), max_leaves=40), st.integers(0, 12))
def test_nests_deeper_is_the_depth_past_the_limit(value: Any, limit: int) -> None:
    """The review's depth check walks a level at a time; it answers as the recursive count does, at every limit."""
    assert nests_deeper(value, limit) is (_depth(value) > max(limit, 1))
