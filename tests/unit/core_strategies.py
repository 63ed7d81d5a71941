"""Hypothesis strategies shared by the core model's property tests: valid model values and arbitrary garbage."""

from __future__ import annotations

import json
import string
from collections.abc import Callable
from typing import TypeVar

from hypothesis import strategies as st

from kubectl_hami_place.core.allocations import ContainerDevice
from kubectl_hami_place.core.cards import Card
from kubectl_hami_place.core.errors import ModelError

T = TypeVar("T")

INT32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)
NON_NEGATIVE_INT32 = st.integers(min_value=0, max_value=2**31 - 1)
SAFE_TEXT = st.text(alphabet=string.ascii_letters + string.digits + "-_. ", max_size=30)
UUIDS = st.from_regex(r"GPU-[0-9a-f]{8}(-[0-9a-f]{4}){0,4}", fullmatch=True)


def json_of(integers: st.SearchStrategy[int]) -> st.SearchStrategy[object]:
    """JSON values whose integers come from `integers`."""
    return st.recursive(
        st.none() | st.booleans() | integers | st.floats(allow_nan=False) | st.text(max_size=20),
        lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
        max_leaves=12,
    )


json_values = json_of(st.integers())
"""Any JSON-encodable value: what a garbage annotation or object could decode to."""

json_text = json_values.map(json.dumps)


@st.composite
def cards(draw: st.DrawFn, legacy_safe: bool = False) -> Card:
    """A register card; `legacy_safe` keeps separators out of its text fields."""
    text = SAFE_TEXT.filter(lambda s: "," not in s and ":" not in s) if legacy_safe else st.text(max_size=30)
    return Card(
        uuid=draw(UUIDS if legacy_safe else st.text(max_size=40)),
        index=draw(st.integers(min_value=0, max_value=2**32)),
        count=draw(INT32),
        devmem=draw(INT32),
        devcore=draw(INT32),
        type=draw(text),
        numa=draw(st.integers(min_value=-(2**40), max_value=2**40)),
        health=draw(st.booleans()),
        mode=draw(text),
    )


container_devices = st.builds(
    ContainerDevice,
    uuid=UUIDS,
    vendor=st.sampled_from(["NVIDIA", "Iluvatar", "MLU"]),
    usedmem=NON_NEGATIVE_INT32,
    usedcores=st.integers(min_value=0, max_value=100),
)

allocations = st.lists(st.lists(container_devices, max_size=4).map(tuple), max_size=5).map(tuple)


def outcome(call: Callable[[], T], error_type: type[ModelError]) -> T | ModelError:
    """Run `call`: its result, or the model error it raised, checked to be one non-empty line.

    Any other exception propagates and fails the test: parsers may raise only the model's own errors.
    """
    try:
        return call()
    except error_type as err:
        message = str(err)
        assert message
        assert "\n" not in message
        return err
