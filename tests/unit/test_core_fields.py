"""The readers and writers of API object fields the core shares."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from types import MappingProxyType

import pytest

from kubectl_hami_place.core.fields import as_mapping, comma_list, go_decimal, rfc3339


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


@pytest.mark.usefixtures("east_of_utc")
def test_times_are_written_in_utc_whatever_the_machine_s_zone() -> None:
    """The CLI and every replica may run in any local zone: a written time must name the same instant on each."""
    written = [rfc3339(datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)), rfc3339(datetime(2026, 1, 2, 3, 4, 5))]
    assert written == ["2026-01-02T03:04:05Z", "2026-01-02T03:04:05Z"]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("9223372036854775807", 2**63 - 1),
        ("-9223372036854775808", -(2**63)),
        ("+12", 12),
        ("0" * 30 + "7", 7),
        ("9" * 20, 10**19),
        ("-" + "1" * 5000, -(10**19)),
        ("", None),
        ("-", None),
        ("1_000", None),
        (" 12", None),
        ("\u0661\u0662", None),
    ],
)
def test_a_decimal_reads_as_go_reads_it(text: str, value: int | None) -> None:
    """HAMi parses annotation numbers with strconv: what it refuses, or reads as past int64, must read so here too."""
    assert go_decimal(text) == value
