"""Fuzz target: the plugin's argument parsing over generated argv: exit 0, 1, 2 or 3 only, never a traceback.

The kubeconfig points at a closed loopback port, so any argv that gets as far as the API server fails fast (exit 1).
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kubectl_hami_place.cli.app import run
from tests.fuzz.strategies import FUZZ

COMMANDS = ["pin", "evict", "status", "list", "delete", "completion", "--help", "-h", "help", ""]
FLAGS = [
    "-l",
    "--selector",
    "--node",
    "--gpu",
    "--req-id",
    "--evict",
    "--name",
    "-n",
    "--namespace",
    "-A",
    "--all-namespaces",
    "-o",
    "--output",
    "--all",
    "--phase",
    "--to-node",
    "--request-cores",
    "--request-memory",
    "--dry-run",
    "--context",
    "--kubeconfig",
    "--yes",
    "-y",
    "--help",
    "--",
    "-",
]
VALUES = [
    "app=x",
    "app in (a,b)",
    "app in (",
    "!app",
    "gpu-0",
    "gpu-1/50",
    "gpu-0/101",
    "GPU-d66f8818",
    "gpu-a100-0",
    "json",
    "yaml",
    "wide",
    "name",
    "table",
    "xml",
    "bash",
    "zsh",
    "fish",
    "Expired",
    "Pending",
    "req-12345",
    "abcd",
    "0",
    "-1",
    "101",
    "1e9",
    "",
    " ",
    "é",
    "a" * 300,
    "client",
    "server",
    "none",
    "true",
]
# What a shell can pass: no NUL, no lone surrogates.
text = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=20)
argvs = st.tuples(
    st.sampled_from(COMMANDS), st.lists(st.sampled_from(FLAGS) | st.sampled_from(VALUES) | text, max_size=8)
).map(lambda parts: [parts[0], *parts[1:][0]] if parts[0] else parts[1])


@pytest.fixture(scope="module")
def nowhere(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A kubeconfig whose server is a closed port on loopback."""
    path = tmp_path_factory.mktemp("fuzz") / "kubeconfig"
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "nowhere",
                "clusters": [{"name": "nowhere", "cluster": {"server": "https://127.0.0.1:9"}}],
                "users": [{"name": "nobody", "user": {"token": "x"}}],
                "contexts": [{"name": "nowhere", "context": {"cluster": "nowhere", "user": "nobody"}}],
            }
        )
    )
    with mock.patch.dict(os.environ, {"KUBECONFIG": str(path)}):
        yield path


@FUZZ
@given(argv=argvs)
def test_generated_argv(nowhere: Path, argv: list[str]) -> None:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = run(argv)
    assert code in (0, 1, 2, 3), (argv, code, err.getvalue()[-500:])
    assert "Traceback" not in out.getvalue() + err.getvalue(), argv
    if code:
        # A verb (or the plugin) run without its arguments is a usage error whose message is its help.
        bare = code == 2 and not out.getvalue() and err.getvalue().startswith("Usage: kubectl hami-place")
        assert bare or err.getvalue().startswith("error: "), (argv, err.getvalue()[:300])
