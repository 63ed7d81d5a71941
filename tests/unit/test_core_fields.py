"""The readers and writers of API object fields the core shares."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from types import MappingProxyType

import pytest

from kubectl_hami_place.core.fields import as_mapping, comma_list, rfc3339


def test_a_mapping_is_read_as_itself() -> None:
    decoded = {"name": "train-0"}
    proxied = MappingProxyType(decoded)
    assert as_mapping(decoded) is decoded
    assert as_mapping(proxied) is proxied


@pytest.mark.parametrize("value", [None, [], ["a"], "metadata", 0])
def test_a_missing_or_malformed_part_reads_as_empty(value: object) -> None:
    assert as_mapping(value) == {}


@pytest.mark.parametrize(
    ("value", "items"),
    [
        ("", []),
        ("GPU-a", ["GPU-a"]),
        (" GPU-a , GPU-b ,,", ["GPU-a", "GPU-b"]),
        (", ,", []),
        ("GPU-b,GPU-a,GPU-b", ["GPU-b", "GPU-a", "GPU-b"]),
    ],
)
def test_a_comma_list_is_trimmed_and_drops_blanks(value: str, items: list[str]) -> None:
    assert comma_list(value) == items


def test_times_are_written_in_utc_to_the_second() -> None:
    assert rfc3339(datetime(2026, 1, 2, 3, 4, 5, 999_999, tzinfo=UTC)) == "2026-01-02T03:04:05Z"
    assert rfc3339(datetime(2026, 1, 2, 4, 4, 5, tzinfo=timezone(timedelta(hours=1)))) == "2026-01-02T03:04:05Z"
    assert rfc3339(datetime(2026, 1, 2, 3, 4, 5)) == "2026-01-02T03:04:05Z"
