"""The differential test's case generator (`tests/hami_cases.py`): the same cases in every process, kept in a cache
that a change to what they depend on misses."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import types
from pathlib import Path

import pytest

from tests import hami_cases

ROOT = Path(__file__).resolve().parent.parent.parent


def _cases_after_importing(tmp_path: Path, module: str | None, cache: Path) -> str:
    """The repr of 30 generated cases, in a fresh interpreter that first imports `module` from `tmp_path`."""
    first = f"import {module}; " if module else ""
    code = (
        f"import sys; sys.path.insert(0, {str(tmp_path)!r}); {first}"
        "from tests.hami_cases import generate; print(repr(generate(30)))"
    )
    env = {**os.environ, "HAMI_PLACE_CACHE": str(cache)}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, check=True, text=True, env=env)
    return done.stdout


def test_the_cases_do_not_depend_on_the_modules_the_process_has_loaded(tmp_path: Path) -> None:
    """Hypothesis draws, now and then, an integer literal (100 or more) from the non-test modules loaded in the process:
    one more module full of them (as another test file or the sandbox brings) must not change the cases. Each process
    has a cache of its own, so both draw."""
    (tmp_path / "literals.py").write_text(f"LITERALS = {tuple(range(100, 10000, 97))!r}\n")
    plain = _cases_after_importing(tmp_path, None, tmp_path / "plain")
    assert plain.startswith("[Case(")
    assert _cases_after_importing(tmp_path, "literals", tmp_path / "literals") == plain
    assert len(list((tmp_path / "literals" / "hami-cases").glob("cases-30-*.pickle"))) == 1


@pytest.fixture
def strategies(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The source of a loaded module of a project of its own (`hami_cases.ROOT`), which a test rewrites."""
    project = tmp_path / "project"
    project.mkdir()
    source = project / "strategies.py"
    source.write_text("LIMIT = 100\n")
    module = types.ModuleType("strategies_under_test")
    module.__file__ = str(source)
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setattr(hami_cases, "ROOT", project)
    return source


def test_a_draw_is_kept_and_a_changed_source_or_count_draws_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, strategies: Path
) -> None:
    """The cache serves what the first draw gave; a project module's new source, or another count, is a miss."""
    draws: list[tuple[str, int]] = []

    def draw(strategy: str, count: int) -> list[str]:
        draws.append((strategy, count))
        return [f"draw {len(draws)}"]

    monkeypatch.setattr(hami_cases, "_draw", draw)
    cache = str(tmp_path / "cache")

    def cached(count: int = 3) -> list[str]:
        result: list[str] = pickle.loads(hami_cases._cached_draw("cases", count, cache))
        return result

    assert cached() == ["draw 1"]
    assert cached() == ["draw 1"]
    assert draws == [("cases", 3)]
    strategies.write_text("LIMIT = 101\n")
    assert cached() == ["draw 2"]
    assert cached(4) == ["draw 3"]
    assert cached() == ["draw 2"]
    assert not list((tmp_path / "cache").glob("*.partial"))


def test_only_the_newest_draws_of_a_strategy_and_count_are_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, strategies: Path
) -> None:
    """Each change to the sources adds a draw; older ones beyond `KEPT_DRAWS` go, so the cache does not grow forever."""
    monkeypatch.setattr(hami_cases, "_draw", lambda strategy, count: [f"{strategy} {count}"])
    cache = tmp_path / "cache"
    written: list[Path] = []
    for version in range(hami_cases.KEPT_DRAWS + 2):
        strategies.write_text(f"LIMIT = {version}\n")
        hami_cases._cached_draw("cases", 3, str(cache))
        (new,) = set(cache.glob("cases-3-*.pickle")) - set(written)
        os.utime(new, (1_000_000 + version, 1_000_000 + version))  # written one after another, a second apart
        written.append(new)
    hami_cases._cached_draw("focused_cases", 3, str(cache))
    assert set(cache.glob("cases-3-*.pickle")) == set(written[-hami_cases.KEPT_DRAWS :])
    assert len(list(cache.glob("focused_cases-3-*.pickle"))) == 1
