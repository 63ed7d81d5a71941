"""Unit-test fixtures: each test starts with the process's logging as the suite found it and no register decoded."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pytest

from kubectl_hami_place.core import cards


@pytest.fixture(autouse=True)
def root_logging_restored() -> Iterator[None]:
    """`webhook.main` configures the process's logging (`basicConfig(force=True)`) with the stderr of the test that
    ran it; a later test that logs wrote `--- Logging error ---` into its own stderr, once that stream was closed. The
    handlers `force` took away (pytest's own) are put back."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in [h for h in root.handlers if type(h) is logging.StreamHandler]:
        root.removeHandler(handler)
    for handler in handlers:
        if handler not in root.handlers:
            root.addHandler(handler)
    root.setLevel(level)


@pytest.fixture(autouse=True)
def register_decodes_forgotten() -> None:
    """A register's decode is memoised by its text for the life of the process: a test that decodes a text another
    test decoded first would get the first's cards without running the decoder it means to check (mutmut forks
    every mutant from a process whose run of the suite filled the memo, so no mutant of the decoder was run)."""
    cards._parse_register_text.cache_clear()


@pytest.fixture
def east_of_utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The process's local time zone five and a half hours east of UTC (POSIX TZ, no zone database needed): a time
    read or written as local would be off by it."""
    monkeypatch.setenv("TZ", "IST-5:30")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()
