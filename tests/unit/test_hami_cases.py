"""The differential test's case generator (`tests/hami_cases.py`): the same cases in every process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def _cases_after_importing(tmp_path: Path, module: str | None) -> str:
    """The repr of 30 generated cases, in a fresh interpreter that first imports `module` from `tmp_path`."""
    first = f"import {module}; " if module else ""
    code = (
        f"import sys; sys.path.insert(0, {str(tmp_path)!r}); {first}"
        "from tests.hami_cases import generate; print(repr(generate(30)))"
    )
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, check=True, text=True).stdout


def test_the_cases_do_not_depend_on_the_modules_the_process_has_loaded(tmp_path: Path) -> None:
    """Hypothesis draws, now and then, an integer literal (100 or more) from the non-test modules loaded in the process:
    one more module full of them (as another test file or the sandbox brings) must not change the cases."""
    (tmp_path / "literals.py").write_text(f"LITERALS = {tuple(range(100, 10000, 97))!r}\n")
    plain = _cases_after_importing(tmp_path, None)
    assert plain.startswith("[Case(")
    assert _cases_after_importing(tmp_path, "literals") == plain
