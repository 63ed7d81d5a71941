"""Unit-test fixtures: each test starts with the process's logging as the suite found it."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def root_logging_restored() -> Iterator[None]:
    """`webhook.main` configures the process's logging (`basicConfig(force=True)`) with the stderr of the test that
    ran it; a later test that logs wrote `--- Logging error ---` into its own stderr, once that stream was closed."""
    root = logging.getLogger()
    level = root.level
    yield
    for handler in [h for h in root.handlers if type(h) is logging.StreamHandler]:
        root.removeHandler(handler)
    root.setLevel(level)
