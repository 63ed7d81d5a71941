"""`kubectl hami-place apply -f FILE` and a flag that is no name: bad input is a usage error naming it (exit 2), never
"unexpected <Error> ...; report it". A plan nested deep (RecursionError), with an integer of more than 4,300 digits
(ValueError, JSON or YAML), a date-shaped YAML value that is no date (ValueError), or a `\\ud800` escape (a
surrogate no encoder takes) is not a plan."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kubectl_hami_place.cli._apply import load_plan
from kubectl_hami_place.cli._errors import UsageProblem

MOVE = {"pod": "a/b", "uid": "u", "from": {"node": "n", "cards": ["GPU-1"]}, "to": {"node": "m", "cards": ["GPU-2"]}}
TEXTS = {
    "deep.json": '{"moves": ' + "[" * 100_000 + "]" * 100_000 + "}",
    "digits.json": '{"moves": [], "goal": ' + "1" * 5000 + "}",
    "digits.yaml": "moves: []\ngoal: " + "1" * 5000 + "\n",
    "no-such-date.yaml": "moves: []\ngoal: 2024-02-30\n",
    "surrogate.json": json.dumps({"moves": [{**MOVE, "uid": "\ud800"}]}),
}


@pytest.mark.parametrize("name", TEXTS)
def test_a_plan_file_that_is_not_a_plan_is_a_usage_problem(name: str, tmp_path: Path) -> None:
    path = tmp_path / name
    path.write_text(TEXTS[name], encoding="utf-8")
    with pytest.raises(UsageProblem) as caught:
        load_plan(str(path))
    assert caught.value.lines()[0].startswith(str(path)), caught.value.lines()


def test_a_namespace_flag_that_is_not_utf8_is_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """argv bytes that are not UTF-8 reach Python as surrogates (`-n $'\\xff'`): `list` ends in "unexpected
    UnicodeEncodeError ... report it" (exit 1), not the PathError usage error (exit 2) a bad namespace gets."""
    from kubectl_hami_place.cli.app import run

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {token: x}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n"
        "current-context: c\n"
    )
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.delenv("HAMI_PLACE_DEBUG", raising=False)
    assert run(["list", "-n", "\udcff"]) == 2
