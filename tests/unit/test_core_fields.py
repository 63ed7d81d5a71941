"""The lenient readers of decoded API objects the core shares."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from kubectl_hami_place.core.fields import as_mapping


def test_a_mapping_is_read_as_itself() -> None:
    decoded = {"name": "train-0"}
    proxied = MappingProxyType(decoded)
    assert as_mapping(decoded) is decoded
    assert as_mapping(proxied) is proxied


@pytest.mark.parametrize("value", [None, [], ["a"], "metadata", 0])
def test_a_missing_or_malformed_part_reads_as_empty(value: object) -> None:
    assert as_mapping(value) == {}
