"""The order make test hands test files out in: longest first, each file's tests together and in their own order."""

from __future__ import annotations

from tests.file_order import UNKNOWN_SECONDS, longest_first


def test_longest_file_first_with_each_files_tests_kept_together_and_in_order() -> None:
    nodeids = ["a.py::one", "a.py::two", "b.py::one", "c.py::one", "c.py::two", "d.py::one"]
    seconds = {"a.py": 1.0, "b.py": 30.0, "c.py": 200.0}
    ordered = [nodeids[index] for index in longest_first(nodeids, seconds)]
    assert ordered == ["c.py::one", "c.py::two", "b.py::one", "d.py::one", "a.py::one", "a.py::two"]


def test_files_of_equal_or_unknown_seconds_keep_their_collection_order() -> None:
    nodeids = ["x.py::t", "y.py::t", "z.py::t"]
    assert longest_first(nodeids, {}) == [0, 1, 2]
    assert longest_first(nodeids, {"y.py": UNKNOWN_SECONDS}) == [0, 1, 2]
