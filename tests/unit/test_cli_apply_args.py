"""`apply -f` and `plan --apply` arguments that fail before any API call: one line, exit 2, never a traceback."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from kubectl_hami_place.cli.app import run

MOVE = {
    "pod": "ns/p",
    "uid": "u",
    "from": {"node": "a", "cards": ["GPU-0"]},
    "to": {"node": "a", "cards": ["GPU-1"]},
}


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert "Traceback" not in captured.err
    return lines[0]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("{not: [valid", "line 1 column 2 is not JSON: Expecting property name enclosed in double quotes"),
        (
            "goal: x\nmoves:\n  - pod: ns/p\n    from: {node: a\n",
            "line 5 is not JSON or YAML: expected ',' or '}', but got '<stream end>'",
        ),
        ('"a string"', "is not a plan: the plan is not an object"),
        (json.dumps({"goal": "x", "moves": [{**MOVE, "uid": ""}]}), "is not a plan: move 1: uid must be"),
    ],
)
def test_a_bad_plan_file_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, expected: str
) -> None:
    path = tmp_path / "plan.json"
    path.write_text(text)
    assert run(["apply", "-f", str(path)]) == 2
    line = one_error_line(capsys)
    assert line.startswith(f"error: {path} {expected}"), line
    assert line.endswith("; write one with kubectl hami-place plan ... -o json > plan.json")


def test_a_missing_plan_file_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.json"
    assert run(["apply", "-f", str(missing)]) == 2
    assert (
        one_error_line(capsys)
        == f"error: cannot read {missing}: No such file or directory; give the file plan -o json wrote"
    )


def test_a_plan_file_that_is_not_utf8_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    binary = tmp_path / "plan.json"
    binary.write_bytes(b"\xff\xfe\x00plan")
    assert run(["apply", "-f", str(binary)]) == 2
    assert one_error_line(capsys) == f"error: {binary} is not UTF-8 text; give the file plan -o json wrote"


def test_the_plan_is_read_from_stdin_with_dash(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("moves: 3\n"))
    assert run(["apply", "-f", "-"]) == 2
    line = one_error_line(capsys)
    assert line.startswith("error: stdin is not a plan: the plan has no moves list; write one"), line


def test_apply_needs_a_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["apply", "--yes"]) == 2
    assert "missing option '--filename'" in one_error_line(capsys)


def test_a_truncated_json_plan_names_the_file_the_line_and_what_to_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    whole = json.dumps({"goal": "x", "moves": [MOVE, MOVE]}, indent=2)
    path = tmp_path / "plan.json"
    path.write_text(whole[: len(whole) // 2])
    assert run(["apply", "-f", str(path)]) == 2
    line = one_error_line(capsys)
    lines = whole[: len(whole) // 2].count("\n") + 1
    assert line == (
        f"error: {path} ends at line {lines} before the JSON document does (truncated?); "
        "write one with kubectl hami-place plan ... -o json > plan.json"
    )


def test_apply_takes_n_and_refuses_a_plan_of_another_namespace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"goal": "x", "moves": [MOVE, {**MOVE, "pod": "other/q"}]}))
    assert run(["apply", "-n", "ns", "-f", str(path)]) == 2
    assert one_error_line(capsys) == (
        f"error: {path} moves pods of namespace other, not only of ns; "
        "drop -n (each move names its pod's namespace) or plan for that namespace"
    )


def test_plan_takes_dry_run_only_with_apply(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["plan", "--free-cards", "1", "--dry-run=server"]) == 2
    assert one_error_line(capsys) == (
        "error: --dry-run goes with --apply; plan alone changes nothing; add --apply to check the run"
    )


def closed_kubeconfig(tmp_path: Path) -> Path:
    """A kubeconfig whose server is a closed port: what reaches it fails with 'cannot reach the API server'."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    return kubeconfig


@pytest.mark.parametrize(
    "argv",
    [
        ["why", "big"],
        ["plan", "--for", "big"],
        ["plan", "--free-cards", "1", "--apply", "--yes", "--ack-timeout", "3"],
        ["apply", "-f", "PLAN", "--yes"],
    ],
)
def test_the_verbs_that_read_pods_as_hami_does_take_its_config_as_pin_does(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Their warning says `give it with --hami-config NS/NAME` / `give --gpu-scheduler-policy` when neither is found,
    but why and plan refused --hami-config, apply both, and plan --apply had no --ack-timeout, as apply has: exit 2
    for the flag the advice named. Here they reach the (closed) server."""
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"goal": "x", "moves": [MOVE]}))
    kubeconfig = closed_kubeconfig(tmp_path)
    hami = ["--hami-config", "kube-system/hami-scheduler-device", "--gpu-scheduler-policy", "binpack"]
    argv = [str(plan) if word == "PLAN" else word for word in argv]
    assert run([*argv, *hami, "--kubeconfig", str(kubeconfig)]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("error: cannot reach the API server at https://127.0.0.1:1"), err


@pytest.mark.parametrize(("flag", "value"), [("--wait-for-pod", None), ("--timeout", "600"), ("--ack-timeout", "3")])
def test_plan_takes_the_runs_waits_only_with_apply(
    flag: str, value: str | None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`plan --for big --wait-for-pod` printed the plan and ended at once: the waits bound the run --apply makes, and
    plan alone dropped them as it did not --dry-run."""
    kubeconfig = closed_kubeconfig(tmp_path)
    assert run(["plan", "--for", "big", flag, *([value] if value else []), "--kubeconfig", str(kubeconfig)]) == 2
    assert one_error_line(capsys) == (
        f"error: {flag} goes with --apply; plan alone waits for nothing; add --apply, or drop it"
    )


def test_an_empty_plan_path_is_named_empty(capsys: pytest.CaptureFixture[str]) -> None:
    """`apply -f ""` (an unset shell variable) read the current directory: 'cannot read : Is a directory'."""
    assert run(["apply", "-f", ""]) == 2
    assert one_error_line(capsys) == "error: -f is empty; give the plan file's path, or - for stdin"


def test_apply_waits_for_a_pod_only_with_a_plan_made_for_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`apply -f free-cards.json --wait-for-pod` ended at once and exit 0, as if a pod had been scheduled: a
    --free-cards or --compact plan has no pod to wait for."""
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"goal": "free 1 card", "moves": [MOVE]}))
    kubeconfig = closed_kubeconfig(tmp_path)
    assert run(["apply", "-f", str(path), "--wait-for-pod", "--yes", "--kubeconfig", str(kubeconfig)]) == 2
    assert one_error_line(capsys) == (
        f"error: --wait-for-pod waits for the pod of a --for plan; {path} makes room for no pod; drop --wait-for-pod"
    )


@pytest.mark.parametrize("goal", [["--free-cards", "1"], ["--compact", "n1"]])
def test_plan_waits_for_a_pod_only_with_for(
    goal: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig = closed_kubeconfig(tmp_path)
    assert run(["plan", *goal, "--apply", "--wait-for-pod", "--yes", "--kubeconfig", str(kubeconfig)]) == 2
    assert one_error_line(capsys) == (
        "error: --wait-for-pod waits for the pod of --for; --free-cards and --compact make room for no pod; drop it"
    )


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["--free-cards", "1", "--for", "big"],
            "give exactly one goal; use --for POD, --free-cards N or --compact NODE...",
        ),
        ([], "give exactly one goal; use --for POD, --free-cards N or --compact NODE..."),
        (["--for", "big", "--type", "A100"], "--type goes with --free-cards; add --free-cards N"),
        (["--compact"], "--compact takes the node names; kubectl hami-place plan --compact NODE..."),
        (["--free-cards", "1", "n1"], "--compact takes the node names; kubectl hami-place plan --compact NODE..."),
        (
            ["--compact", "n1", "-n", "team-a"],
            "-n goes with --for: --free-cards and --compact move pods of every namespace; drop -n (apply -n NS refuses "
            "a plan that moves pods of another namespace)",
        ),
    ],
)
def test_plan_names_the_goal_flag_to_fix_before_any_request(
    argv: list[str], line: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A plan for no goal, two goals, or a flag its goal ignores would move pods the operator did not mean to."""
    kubeconfig = closed_kubeconfig(tmp_path)
    assert run(["plan", *argv, "--kubeconfig", str(kubeconfig)]) == 2
    assert one_error_line(capsys) == f"error: {line}"
