"""Longest test files first: `make test` hands whole files to its two xdist workers in collection order, and the run
ends when the last long file does; handing out the longest first (LPT) lets the short ones even the workers out.

The seconds per file come from tests/file_durations.json, written by a run with `--store-durations`
(`make test PYTEST_ARGS=--store-durations`); a file it does not know is taken as short.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

DURATIONS = Path(__file__).with_name("file_durations.json")
# Seconds taken for a file the table does not know yet: after the known long ones, among the short ones.
UNKNOWN_SECONDS = 5.0


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--store-durations",
        action="store_true",
        help=f"write each test file's measured seconds to {DURATIONS.name} (the order make test hands files out in)",
    )


def file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def longest_first(nodeids: list[str], seconds: dict[str, float]) -> list[int]:
    """The indices of `nodeids` with whole files ordered by their seconds, longest first; a file's own tests and
    files of equal seconds keep their collection order."""
    return sorted(range(len(nodeids)), key=lambda index: -seconds.get(file_of(nodeids[index]), UNKNOWN_SECONDS))


def read_durations() -> dict[str, float]:
    return json.loads(DURATIONS.read_text()) if DURATIONS.is_file() else {}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    order = longest_first([item.nodeid for item in items], read_durations())
    items[:] = [items[index] for index in order]


class DurationStore:
    """Sums each file's setup, call and teardown seconds from the reports (the xdist controller sees every worker's)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[file_of(report.nodeid)] += report.duration

    @pytest.hookimpl
    def pytest_sessionfinish(self) -> None:
        """Files this run did not run keep their seconds: a run of one file updates that file alone."""
        table = {**read_durations(), **{name: round(total, 1) for name, total in self.seconds.items()}}
        DURATIONS.write_text(json.dumps(dict(sorted(table.items(), key=lambda kv: -kv[1])), indent=1) + "\n")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--store-durations") and not hasattr(config, "workerinput"):
        config.pluginmanager.register(DurationStore(), "file-durations-store")
