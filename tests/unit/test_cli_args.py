"""Argument handling that fails before any API call: usage errors are one line and exit 2, never a traceback."""

from __future__ import annotations

import contextlib
import json
import os
import re
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes.client.exceptions import ApiException
from kubernetes.config import kube_config

from kubectl_hami_place.cli._common import confirm, parse_selector, target
from kubectl_hami_place.cli._errors import EXIT_USAGE, CliError, Refused, UsageProblem, kube_hint, kube_line
from kubectl_hami_place.cli._pin_check import (
    build_spec,
    flag_workload,
    new_req_id,
    parse_gpus,
    placement_name,
    replacement_warning,
    resolve_workload,
)
from kubectl_hami_place.cli.app import run
from kubectl_hami_place.core.errors import ModelError
from kubectl_hami_place.core.hami_config import HamiConfig
from kubectl_hami_place.core.pin_check import GpuContainer, Workload
from kubectl_hami_place.core.requests import CardRequest
from kubectl_hami_place.kube.client import Kube, translate_api_error, translate_connection_error
from kubectl_hami_place.kube.errors import (
    BlockedByDisruptionBudget,
    KubeConfigError,
    KubeConflict,
    KubeError,
    KubeForbidden,
    KubeInvalid,
    KubeNotFound,
    KubeServerError,
    KubeTypeMissing,
    KubeUnauthorized,
    KubeUnreachable,
    NoReplacement,
    NotAcknowledged,
    PlacementTaken,
    PodReplaced,
    WebhookRefused,
)
from kubectl_hami_place.kube.move_values import Replacement


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("error: ")
    assert "Traceback" not in captured.err
    return lines[0]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["pin", "-l", "app=x", "--node", "n", "--gpu", "gpu-x"], "bad --gpu 'gpu-x'"),
        (["pin", "-l", "app=x", "--node", "n", "--gpu", "gpu-0/101"], "bad --gpu 'gpu-0/101'"),
        (["pin", "-l", "app in (", "--node", "n", "--gpu", "gpu-0"], "bad selector -l 'app in ('"),
        (["pin", "-l", "", "--node", "n", "--gpu", "gpu-0"], "bad selector"),
        (["pin", "-l", "app=x", "--node", "n", "--gpu", "gpu-0", "--req-id", "abcd"], "reqID 'abcd' is shorter"),
        (["pin", "-l", "app=x", "--node", "n", "--gpu", "gpu-0/50", "--gpu", "gpu-1/60"], "mix memory percents"),
        (["pin", "-l", "app=x", "--node", "n", "--gpu", "gpu-0", "--evict", "Bad_Name"], "evictPod 'Bad_Name'"),
        (["pin", "--node", "n", "--gpu", "gpu-0"], "missing option '--selector'"),
        (
            ["pin", "-l", "app=x", "--node", "N1", "--gpu", "gpu-0"],
            "nodeName 'N1' is not a valid node name; fix --node",
        ),
        (["pin", "-l", "app=x", "--node", "n", "--gpu", "gpu-0", "--req-id", "r" * 129], "at most 128; fix --req-id"),
        (["pin", "-l", "app=x", "--node", "n", "--gpu", "GPU-" + "a" * 130], "the CRD takes at most 128; fix --gpu"),
        (["pin", "-l", "app=x", "--node", "n", "--gpu", "gpu-0", "--request-cores", "101"], "--request-cores"),
        (["list", "-o", "xml"], "'xml' is not one of"),
        (["list", "--dry-run", "maybe"], "no such option: --dry-run"),
        (["status", "-n", "a", "-A"], "--namespace and --all-namespaces conflict"),
        (["status", "gpu-a100-0", "-l", "pool=a100"], "name nodes or give -l, not both; drop the node names or -l"),
        (["status", "-l", "pool in ("], "bad selector -l 'pool in ('"),
        (["evict", "p", "--gpu", "gpu-0"], "--gpu needs --to-node"),
        (["evict", "p", "--to-node", "n"], "--to-node needs the cards"),
        (["delete", "a", "--all"], "names and --all or -l conflict"),
        (["delete", "a", "-l", "team=a"], "names and --all or -l conflict"),
        (["delete", "-l", "team in (", "--yes"], "bad selector -l 'team in ('"),
        (["list", "-l", ""], "bad selector -l ''"),
        # Every name checked before the first is deleted: none deleted, not the ones before the bad one.
        (["delete", "pin-aaa", "a/b", "--yes"], "'a/b' is not a placement name"),
        (["delete", "pin-aaa", "Bad_Name", "--dry-run=client"], "'Bad_Name' is not a placement name"),
        (["delete", "--phase", "Expired"], "--phase only narrows --all or -l"),
        (["delete", "--all", "--phase", "Gone"], "unknown phase 'Gone'"),
        (["frobnicate"], "no such command 'frobnicate'"),
        (["pin", "-l", "app=x", "--node"], "option '--node' requires an argument; see 'kubectl hami-place pin --help'"),
        (["defrag", "history", "--run"], "see 'kubectl hami-place defrag history --help'"),
        (["completion", "tcsh"], "'tcsh' is not one of"),
        (["defrag", "status", "--policy", "kube-system"], "--policy 'kube-system' is not NAMESPACE/NAME"),
        (["defrag", "pause", "--policy", "Kube_System/p"], "--policy 'Kube_System/p' is not NAMESPACE/NAME"),
        (["defrag", "resume", "--policy", "ns/../p"], "--policy 'ns/../p' is not NAMESPACE/NAME"),
        (["defrag", "status", "-n", "Kube_System"], "-n 'Kube_System' is not a namespace name; write e.g. -n"),
        (["defrag", "pause", "-n", "a", "--policy", "b/p"], "--policy b/p is not in namespace a; give one of -n and"),
        (["defrag", "history", "-n", "team_a"], "-n 'team_a' is not a namespace name"),
    ],
)
def test_usage_errors_exit_2_with_one_line(argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = run(argv)
    assert code == EXIT_USAGE
    assert expected in one_error_line(capsys)


def test_no_arguments_prints_help_on_stderr_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    """No verb is a usage error, as a bare verb is: the plugin's help on stderr, nothing on stdout."""
    assert run([]) == EXIT_USAGE
    captured = capsys.readouterr()
    assert captured.out == ""
    for verb in ("pin", "evict", "status", "list", "delete", "completion"):
        assert verb in captured.err


@pytest.fixture
def hanging_up() -> Iterator[int]:
    """A local port that accepts each connection, reads what comes and closes it without a word: no TLS, no HTTP."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    stopping = threading.Event()

    def serve() -> None:
        while not stopping.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            with connection:
                connection.settimeout(1)
                with contextlib.suppress(OSError):
                    connection.recv(4096)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stopping.set()
        thread.join()
        listener.close()


@pytest.mark.parametrize(
    ("server", "words"),
    [
        ("https://no-such-host.invalid:6443", "cannot resolve the host name"),
        ("https://127.0.0.1:{port}", "TLS handshake failed ("),
        ("http://127.0.0.1:{port}", "the connection was dropped"),
    ],
)
def test_a_server_that_cannot_be_reached_is_named_with_why_in_words(
    server: str, words: str, hanging_up: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Real failures, no fake: a name that never resolves (.invalid), and a port that hangs up on every connection,
    for TLS and for plain HTTP. Each is one line naming the server and why in words, not urllib3's repr."""
    url = server.format(port=hanging_up)
    kubeconfig = kubeconfig_file(tmp_path / "kubeconfig", "c", server=url)
    assert run(["list", "--kubeconfig", str(kubeconfig)]) == 1
    line = one_error_line(capsys)
    assert line.startswith(f"error: cannot reach the API server at {url}: {words}"), line
    assert line.endswith("; check --kubeconfig/--context"), line
    assert "urllib3" not in line and "object at 0x" not in line, line


def test_unreachable_server_is_one_line_exit_1(tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    """A kubeconfig pointing at a closed port: the real connection error, translated."""
    kubeconfig = kubeconfig_file(Path(str(tmp_path)) / "kubeconfig", "c", 1)
    assert run(["list", "--kubeconfig", str(kubeconfig)]) == 1
    line = one_error_line(capsys)
    assert line == (
        "error: cannot reach the API server at https://127.0.0.1:1: connection refused; check --kubeconfig/--context"
    )
    # pin read HAMi's config first, and said it would use HAMi's defaults before the error.
    pin = ["pin", "-l", "app=a", "--node", "n", "--gpu", "gpu-0", "--request-memory", "10", "-n", "team-a"]
    assert run([*pin, "--kubeconfig", str(kubeconfig)]) == 1
    assert capsys.readouterr().err == f"{line}\n"
    assert run(["list", "--kubeconfig", str(kubeconfig), "--context", "nope"]) == 1
    assert one_error_line(capsys) == (
        f"error: cannot use kubeconfig {kubeconfig}: it has no context 'nope' (its contexts: c); "
        "check --kubeconfig/--context or KUBECONFIG"
    ), "the client library's own words named '<file>/contexts list', a path that is not there"


def kubeconfig_file(path: Path, context: str, port: int = 1, *, server: str = "") -> Path:
    """A kubeconfig of one context, selected, whose server is `server`, else https://127.0.0.1:`port` (closed: the
    error names it)."""
    url = server or f"https://127.0.0.1:{port}"
    path.write_text(
        f"apiVersion: v1\nkind: Config\ncurrent-context: {context}\n"
        f"clusters: [{{name: {context}, cluster: {{server: '{url}'}}}}]\n"
        f"users: [{{name: {context}, user: {{token: t}}}}]\n"
        f"contexts: [{{name: {context}, context: {{cluster: {context}, user: {context}}}}}]\n"
    )
    return path


def test_a_kubeconfig_list_selects_the_first_files_context_as_kubectl_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """KUBECONFIG=a:b: kubectl takes a's current-context (the first file that sets it); the client alone took b's,
    so a write went to another cluster than `kubectl config current-context` names."""
    first = kubeconfig_file(tmp_path / "first", "one", 1)
    second = kubeconfig_file(tmp_path / "second", "two", 2)
    monkeypatch.setenv("KUBECONFIG", f"{first}:{tmp_path / 'missing'}:{second}")
    assert run(["list"]) == 1
    assert "https://127.0.0.1:1" in one_error_line(capsys)
    monkeypatch.setenv("KUBECONFIG", f"{tmp_path / 'missing'}:{second}:{first}")
    assert run(["list"]) == 1
    assert "https://127.0.0.1:2" in one_error_line(capsys)


@pytest.mark.parametrize(
    ("text", "words"),
    [("clusters: [a\n", "not YAML"), ("- a\n- b\n", "it is not a kubeconfig")],
)
def test_a_kubeconfig_that_is_not_one_is_one_line_exit_1(
    text: str, words: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "kubeconfig"
    broken.write_text(text)
    assert run(["list", "--kubeconfig", str(broken)]) == 1
    line = one_error_line(capsys)
    assert line.startswith(f"error: cannot read kubeconfig {broken}: ") and words in line, line


def test_completion_scripts_name_the_completer(capsys: pytest.CaptureFixture[str]) -> None:
    for shell in ("bash", "zsh", "fish"):
        assert run(["completion", shell]) == 0
        script = capsys.readouterr().out
        assert "kubectl_complete-hami_place" in script
        assert "kubectl-hami_place" in script


def test_pure_argument_helpers() -> None:
    assert str(parse_selector("app=x,tier in (a,b)")) == "app=x,tier in (a,b)"
    assert [str(r) for r in parse_gpus(["gpu-0/50", "gpu-1/50"])] == ["gpu-0/50", "gpu-1/50"]
    with pytest.raises(UsageProblem):
        parse_gpus([])
    req_id = new_req_id()
    assert len(req_id) >= 8 and req_id.isalnum() and req_id != new_req_id()
    spec = build_spec(None, parse_selector("app=x"), "n", parse_gpus(["gpu-0"]), None)
    assert placement_name(None, spec) == f"pin-{spec.req_id}"
    assert placement_name("mine", spec) == "mine"
    odd = build_spec("Team_A-Request", parse_selector("app=x"), "n", parse_gpus(["gpu-0"]), None)
    name = placement_name(None, odd)
    assert name.startswith("pin-") and name != "pin-team_a-request"
    assert Refused(["a", "b"]).lines() == ["a", "b"]
    with pytest.raises(UsageProblem, match="is not an object name"):
        placement_name("Bad_Name..", spec)
    with pytest.raises(UsageProblem, match="holds control characters"):
        build_spec("abcde\x1b[2J", parse_selector("app=x"), "n", parse_gpus(["gpu-0"]), None)


def _api_error(status: int, body: dict[str, object]) -> ApiException:
    """Fake client error: an RBAC 403 or a missing CRD cannot be produced on demand by the sandbox admin user."""
    exc = ApiException(status=status, reason="x")
    exc.body = json.dumps(body)
    return exc


def test_api_errors_are_translated_to_typed_one_line_errors() -> None:
    kube = Kube(api=None, namespace="default", server="https://example:6443", context="c")  # type: ignore[arg-type]
    forbidden = translate_api_error(
        _api_error(403, {"message": 'hamipodplacements is forbidden: User "bob" cannot create', "reason": "Forbidden"}),
        kube,
        "create hamipodplacements in namespace team-a",
    )
    assert isinstance(forbidden, KubeForbidden)
    assert str(forbidden) == 'forbidden: hamipodplacements is forbidden: User "bob" cannot create', (
        "the adapter says what happened, in no user's words: the server logs it too"
    )
    assert (forbidden.status, forbidden.reason, forbidden.action) == (
        403,
        "Forbidden",
        "create hamipodplacements in namespace team-a",
    )
    assert kube_line(forbidden) == (
        'forbidden: hamipodplacements is forbidden: User "bob" cannot create; '
        "ask your cluster admin for RBAC permission to create hamipodplacements in namespace team-a"
    )
    missing_crd = translate_api_error(
        _api_error(404, {"message": "the server could not find the requested resource", "reason": "NotFound"}),
        kube,
        "list hamipodplacements in namespace x",
    )
    assert isinstance(missing_crd, KubeTypeMissing) and "install the HamiPodPlacement CRD" in kube_line(missing_crd)
    assert "install" not in str(missing_crd)
    invalid = translate_api_error(
        _api_error(422, {"message": 'spec.reqID: Invalid value: "abcd":\n should be at least 5', "reason": "Invalid"}),
        kube,
        "create hamipodplacements",
    )
    assert isinstance(invalid, KubeInvalid) and "\n" not in str(invalid)
    denied = translate_api_error(
        _api_error(403, {"message": 'admission webhook "x" denied the request: no', "reason": "Forbidden"}), kube, "x"
    )
    assert isinstance(denied, KubeInvalid)


PROXY_PAGE = (
    "<html>\n<head><title>502 Bad Gateway</title></head>\n<body>\n" + "<p>upstream</p>\n" * 200 + "</body></html>"
)


@pytest.mark.parametrize(
    ("status", "reason", "body", "line"),
    [
        (
            429,
            "Too Many Requests",
            '{"kind":"Status","message":"too many requests, please try again later","reason":"TooManyRequests"}',
            "the API server is throttling requests: too many requests, please try again later; retry in a moment",
        ),
        (
            503,
            "Service Unavailable",
            b'{"kind":"Status","message":"etcdserver: leader changed","reason":"ServiceUnavailable"}',
            "the API server failed to list pods (HTTP 503): etcdserver: leader changed; retry, or check the server",
        ),
        (
            502,
            "Bad Gateway",
            PROXY_PAGE,
            "the API server failed to list pods (HTTP 502): <html> <head><title>502 Bad Gateway</title></head> <body> "
            + "<p>upstream</p> " * 8
            + "<p>upstream</p; retry, or check the server",  # cut at 200 characters
        ),
        (
            504,
            "Gateway Timeout",
            "",
            "the API server failed to list pods (HTTP 504): Gateway Timeout; retry, or check the server",
        ),
        (500, None, "[]", "the API server failed to list pods (HTTP 500): HTTP 500; retry, or check the server"),
        (
            0,
            "Connection closed mid-response",
            None,
            "cannot list pods: Connection closed mid-response; check --kubeconfig/--context",
        ),
    ],
    ids=["throttled", "status-as-bytes", "proxy-page", "empty-body", "not-a-status", "no-http-status"],
)
def test_an_error_answer_that_is_no_status_or_a_throttle_is_one_line(
    status: int, reason: str | None, body: str | bytes | None, line: str
) -> None:
    """A 429 (API Priority and Fairness), a proxy's HTML page, an empty or non-Status body: none can be asked of the
    sandbox's API server on demand, so each is an ApiException built here as the client raises it."""
    exc = ApiException(status=status, reason=reason)
    exc.body = body
    kube = Kube(api=None, namespace="default", server="https://example:6443", context="c")  # type: ignore[arg-type]
    error = translate_api_error(exc, kube, "list pods")
    assert isinstance(error, KubeServerError) and error.status == status
    assert kube_line(error) == line


def test_connection_errors_name_the_server() -> None:
    kube = Kube(api=None, namespace="default", server="https://example:6443", context="c")  # type: ignore[arg-type]
    error = translate_connection_error(TimeoutError("Read timed out."), kube)
    assert isinstance(error, KubeUnreachable)
    assert str(error) == "cannot reach the API server at https://example:6443: timed out"
    assert kube_line(error) == f"{error}; check --kubeconfig/--context"


@pytest.mark.parametrize(
    ("error", "words"),
    [
        (KubeConfigError("cannot read kubeconfig k"), "check --kubeconfig/--context or KUBECONFIG"),
        (
            KubeUnauthorized("unauthorized", status=401),
            "refresh the credentials of --context or pass another --kubeconfig",
        ),
        (KubeNotFound("not found: pods x", status=404), "check the name and the namespace (-n)"),
        (KubeTypeMissing("cannot list foos", status=404, action="list foos"), "check that the API server serves"),
        (KubeConflict("conflict", status=409), "pick another name or retry"),
        (KubeInvalid("refused", status=422), "fix the request and retry"),
        (KubeServerError("throttled", status=429), "retry in a moment"),
        (KubeServerError("failed", status=500), "retry, or check the server"),
        (KubeServerError("not JSON", action="get x"), "check --kubeconfig/--context"),
        (BlockedByDisruptionBudget("team-a", "p", ("web",), "blocked"), "relax the budget (kubectl get pdb -n team-a)"),
        (BlockedByDisruptionBudget("team-a", "p", (), "blocked"), "relax the budget"),
        (NotAcknowledged("not acknowledged"), "check that it runs (kubectl get pods -A -l app.kubernetes.io/name="),
        (NoReplacement("no labels"), "use kubectl hami-place pin -l"),
        (PodReplaced("re-created", status=409), "nothing to do: the pod meant is gone"),
    ],
)
def test_the_cli_words_what_to_do_for_each_adapter_error(error: KubeError, words: str) -> None:
    assert words in kube_hint(error), kube_hint(error)
    assert kube_line(error) == f"{error.cause}; {kube_hint(error)}"


def test_a_namespace_that_is_no_kubernetes_name_is_a_usage_error_naming_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Refused before any request (the server here is a closed port, never reached): exit 2, the fix named."""
    kubeconfig = kubeconfig_file(tmp_path / "kubeconfig", "c", 1)
    assert run(["list", "-n", "a/b", "--kubeconfig", str(kubeconfig)]) == 2
    line = one_error_line(capsys)
    assert line.endswith("; give a Kubernetes name: lowercase letters, digits, '-' and '.'"), line


def test_an_error_carrying_control_characters_is_one_inert_line(capsys: pytest.CaptureFixture[str]) -> None:
    """A name the user typed, or one from the cluster, in an error (`node 'no\\nde' not found`) makes no second line
    and sends no escape sequence to the terminal."""
    from kubectl_hami_place.cli.app import _fail

    assert _fail(["node no\nde\x1b[2J not found"], 1) == 1
    assert capsys.readouterr().err == "error: node no\\nde\\x1b[2J not found\n"


@pytest.mark.parametrize(("quiet", "debug"), [(True, ""), (False, ""), (True, "1")])
def test_the_libraries_log_records_and_warnings_stay_off_the_terminal(quiet: bool, debug: str) -> None:
    """The client logs a failed exec credential plugin at ERROR, urllib3 warns of a URL without a scheme and logs its
    retries on a logger the client set to WARNING itself (a record that skips the root's level): a user sees the one
    `error:` line instead (HAMI_PLACE_DEBUG=1 keeps them). In a process of its own: logging and warnings are
    process-wide."""
    import os
    import subprocess
    import sys

    code = (
        "import logging, warnings\n"
        "from kubectl_hami_place.cli.app import quiet_libraries\n"
        f"{'quiet_libraries()' if quiet else ''}\n"
        "logging.getLogger('urllib3').setLevel(logging.WARNING)\n"
        "logging.getLogger('urllib3.connectionpool').warning('Retrying after connection broken')\n"
        "logging.error('exec plugin failed')\n"
        "warnings.warn('URLs without a scheme', FutureWarning)\n"
    )
    env = {**os.environ, "HAMI_PLACE_DEBUG": debug}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    if quiet and not debug:
        assert done.stderr == ""
    else:
        for said in ("Retrying after connection broken", "exec plugin failed", "URLs without a scheme"):
            assert said in done.stderr, done.stderr


def test_a_reader_gone_from_stdout_ends_the_command_with_0_and_nothing_more(monkeypatch: pytest.MonkeyPatch) -> None:
    """`list -o json | head -1`: the write fails with EPIPE, which typer would turn into exit 1 had it seen an
    OSError; the CLI sees StdoutClosed instead and ends quietly with 0."""
    import io
    import sys

    from kubectl_hami_place.cli import app as cli_app
    from kubectl_hami_place.cli._common import StdoutClosed, write_out

    class Gone(io.StringIO):
        def write(self, text: str) -> int:
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(sys, "stdout", Gone())
    with pytest.raises(StdoutClosed):
        write_out("NAME\n")
    monkeypatch.setattr(sys, "stdout", None)
    with pytest.raises(StdoutClosed):
        write_out("NAME\n")

    def verb(**kwargs: object) -> int:
        write_out("NAME\n")
        return 0

    monkeypatch.setattr(sys, "stdout", Gone())
    monkeypatch.setattr(cli_app, "app", verb)
    monkeypatch.setattr(cli_app, "_silence_stdout", lambda: None)
    assert cli_app.run(["list"]) == 0


def test_a_confirmation_with_stdin_closed_is_refused_as_without_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    # `kubectl hami-place delete x <&-`: Python gives no sys.stdin at all.
    monkeypatch.setattr("sys.stdin", None)
    with pytest.raises(UsageProblem, match="refusing to delete x without confirmation"):
        confirm("delete x", False)
    assert confirm("delete x", True)


def test_apply_from_a_closed_stdin_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdin", None)
    assert run(["apply", "-f", "-", "--yes"]) == EXIT_USAGE
    assert "no standard input to read the plan from" in one_error_line(capsys)


def test_an_empty_kubeconfig_variable_or_context_is_unset_as_kubectl_reads_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    kubeconfig_file(home / ".kube" / "config", "mine", 7)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("KUBECONFIG", "")
    # What the client library computed when the variable was already empty as it was imported (a shell's export).
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", "")
    assert run(["list"]) == 1
    assert "https://127.0.0.1:7" in one_error_line(capsys), "~/.kube/config, as kubectl reads it"
    assert run(["list", "--context", ""]) == 1
    assert "https://127.0.0.1:7" in one_error_line(capsys), "the current context"


def test_a_context_namespace_that_is_not_text_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kubeconfig = kubeconfig_file(tmp_path / "kubeconfig", "c", 1)
    kubeconfig.write_text(
        kubeconfig.read_text().replace("{cluster: c, user: c}", "{cluster: c, user: c, namespace: 5}")
    )
    assert run(["list", "--kubeconfig", str(kubeconfig)]) == 1
    assert "its context's namespace 5 is not text" in one_error_line(capsys)


def test_an_impersonated_user_with_a_line_break_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kubeconfig = kubeconfig_file(tmp_path / "kubeconfig", "c", 1)
    assert run(["list", "--kubeconfig", str(kubeconfig), "--as", "a\nb"]) == EXIT_USAGE
    assert "--as 'a\\nb' is not a user name" in one_error_line(capsys)


def test_as_makes_every_request_act_as_that_user(tmp_path: Path) -> None:
    """`--as jane` shows what jane may do, as kubectl's --as: every request carries the header the API server acts on
    (it checks that we may impersonate); without --as, none. Connecting reads only the kubeconfig."""
    kubeconfig = str(kubeconfig_file(tmp_path / "kubeconfig", "c", 1))
    acting = target(kubeconfig, None, "team-a", as_user="jane")
    everywhere = target(kubeconfig, None, None, all_namespaces=True)
    assert [
        (where.namespace, where.kube.api.default_headers.get("Impersonate-User")) for where in (acting, everywhere)
    ] == [
        ("team-a", "jane"),
        (None, None),
    ]


def test_a_bad_node_names_the_flag_the_verb_takes_it_with() -> None:
    # evict takes the node as --to-node (it reads the pod first, so this is checked on the spec it builds).
    with pytest.raises(UsageProblem) as raised:
        build_spec("req-12345", parse_selector("app=x"), "N1", parse_gpus(["gpu-0"]), None, node_flag="--to-node")
    assert raised.value.hint == "fix --to-node"


@pytest.mark.parametrize("plugin", ["missing", "failing"])
def test_a_failing_exec_credential_plugin_is_named_not_taken_for_unauthorized(
    plugin: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The client library only logs a failed exec plugin (an expired cloud login, a helper not installed): without
    it, the error said 'connection refused' or 'Unauthorized'. kubectl stops at the plugin too."""
    command = tmp_path / "no-such-helper"
    if plugin == "failing":
        command.write_text("#!/bin/sh\necho 'the SSO session has expired' >&2\nexit 1\n")
        command.chmod(0o755)
    kubeconfig = kubeconfig_file(tmp_path / "kubeconfig", "c", 1)
    exec_user = f"{{exec: {{apiVersion: client.authentication.k8s.io/v1beta1, command: '{command}'}}}}"
    kubeconfig.write_text(kubeconfig.read_text().replace("{token: t}", exec_user))
    assert run(["list", "--kubeconfig", str(kubeconfig)]) == 1
    line = one_error_line(capsys)
    assert f"cannot use kubeconfig {kubeconfig}: its exec credential plugin failed: " in line, line
    assert ("No such file" if plugin == "missing" else "the SSO session has expired") in line, line


@pytest.mark.parametrize(
    "flags",
    [
        ["--name", "keep-me"],
        ["--req-id", "req-12345"],
        ["--request-memory", "0"],
        ["--request-cores", "30"],
        ["--hami-config", "kube-system/hami-scheduler-device"],
        ["--gpu-scheduler-policy", "binpack"],
        ["--ack-timeout", "10"],
    ],
)
def test_evict_refuses_the_replacements_flags_without_to_node(
    flags: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """They only shape the placement --to-node creates: a plain eviction used to go ahead without them (the server
    here is a closed port, never reached: the refusal comes first)."""
    kubeconfig = kubeconfig_file(tmp_path / "kubeconfig", "c", 1)
    assert run(["evict", "p", *flags, "--yes", "--kubeconfig", str(kubeconfig)]) == EXIT_USAGE
    assert one_error_line(capsys) == f"error: {flags[0]} needs --to-node; add --to-node NODE, or drop {flags[0]}"


@pytest.mark.parametrize("interval", ["inf", "1e10"])
def test_a_watch_interval_time_sleep_refuses_is_a_usage_error(
    interval: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`status -w --interval inf` read once, then ended on an unexpected OverflowError from time.sleep (exit 1)."""
    kubeconfig = kubeconfig_file(tmp_path / "kubeconfig", "c", 1)
    assert run(["status", "-w", "--interval", interval, "--kubeconfig", str(kubeconfig)]) == EXIT_USAGE
    assert "invalid value for '--interval'" in one_error_line(capsys)


@pytest.mark.parametrize("goal", [["--free-cards", "1"], ["--compact", "gpu-a100-0"]])
def test_plan_refuses_a_namespace_its_goal_would_ignore(
    goal: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`plan -n team-a --free-cards 1 --apply --yes` planned (and evicted) pods of every namespace: -n names the --for
    pod's namespace only. Refused before any request (the server is a closed port)."""
    kubeconfig = kubeconfig_file(tmp_path / "kubeconfig", "c", 1)
    assert run(["plan", *goal, "-n", "team-a", "--kubeconfig", str(kubeconfig)]) == EXIT_USAGE
    assert "-n goes with --for" in one_error_line(capsys)
    assert run(["plan", "--for", "big", "-n", "team-a", "--kubeconfig", str(kubeconfig)]) == 1
    assert "cannot reach the API server" in one_error_line(capsys)


@pytest.mark.parametrize(
    "verb", [["pin", "-l", "a=b", "--node", "n", "--gpu", "gpu-0"], ["why", "p"], ["plan", "--for", "p"]]
)
@pytest.mark.parametrize("ref", ["a/b/c", "Bad_NS/x", "ns/", "../x"])
def test_a_malformed_hami_config_is_a_usage_error_not_a_config_that_cannot_be_read(
    verb: list[str], ref: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`pin ... --hami-config a/b/c` warned 'cannot read HAMi's device config', went on with HAMi's defaults, and
    pinned by them. Refused before any request (the server is a closed port)."""
    kubeconfig = kubeconfig_file(tmp_path / "kubeconfig", "c", 1)
    assert run([*verb, "--hami-config", ref, "--kubeconfig", str(kubeconfig)]) == EXIT_USAGE
    assert one_error_line(capsys) == (
        f"error: --hami-config {ref!r} is not NS/NAME; write e.g. --hami-config kube-system/hami-scheduler-device"
    )


@pytest.mark.parametrize(
    ("typed", "expected"), [(KeyboardInterrupt, (130, "interrupted")), ("", (1, "aborted"))], ids=["ctrl-c", "eof"]
)
def test_ctrl_c_at_a_confirmation_is_an_interruption(
    typed: object,
    expected: tuple[int, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """click's prompt turns Ctrl-C into Abort: `delete x` on a terminal, then Ctrl-C, was 'error: aborted', exit 1,
    not 130 as every other interruption. End of input (Ctrl-D) stays an abort. Nothing reaches the (closed) server:
    a named placement is deleted only after the answer."""
    import io

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

        def readline(self, size: int | None = -1) -> str:
            if isinstance(typed, type):
                raise typed
            return str(typed)

    monkeypatch.setattr("sys.stdin", Terminal())
    kubeconfig = kubeconfig_file(tmp_path / "kubeconfig", "c", 1)
    code, said = expected
    assert run(["delete", "x", "--kubeconfig", str(kubeconfig)]) == code
    assert capsys.readouterr().err.endswith(f"error: {said}\n")


def test_a_kubeconfig_that_does_not_exist_is_named_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The client library called it 'Invalid kube-config file. No configuration found.', which sent a user with a
    typo in the path looking for a mistake inside a file that is not there."""
    missing = tmp_path / "nope"
    assert run(["list", "--kubeconfig", str(missing)]) == 1
    assert one_error_line(capsys) == (
        f"error: cannot read kubeconfig {missing}: no such file; check --kubeconfig/--context or KUBECONFIG"
    )
    monkeypatch.setenv("KUBECONFIG", f"{missing}{os.pathsep}{kubeconfig_file(tmp_path / 'kubeconfig', 'c', 1)}")
    assert run(["list"]) == 1
    assert "cannot reach the API server at https://127.0.0.1:1" in one_error_line(capsys), "a list skips it"


@pytest.mark.parametrize(
    "verb", [["pin", "-l", "a=b", "--node", "n", "--gpu", "gpu-0"], ["why", "p"], ["plan", "--for", "p"]]
)
@pytest.mark.parametrize("policy", ["binpak", "binpack,sprad", "Spread"])
def test_a_gpu_policy_hami_does_not_know_is_a_usage_error_not_spread(
    verb: list[str], policy: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """HAMi reads a word it does not know as spread: `--gpu-scheduler-policy binpak` checked every card in spread's
    order without a word. Refused before any request (the server is a closed port); HAMi's own words go on to it."""
    kubeconfig = kubeconfig_file(tmp_path / "kubeconfig", "c", 1)
    assert run([*verb, "--gpu-scheduler-policy", policy, "--kubeconfig", str(kubeconfig)]) == EXIT_USAGE
    assert one_error_line(capsys).startswith(f"error: --gpu-scheduler-policy {policy!r} is no policy HAMi knows")
    for known in ("binpack", "topology-aware", "mutex", "numa,binpack", "binpack, spread"):
        assert run([*verb, "--gpu-scheduler-policy", known, "--kubeconfig", str(kubeconfig)]) == 1
        assert "error: cannot reach the API server" in capsys.readouterr().err


@pytest.mark.parametrize("verb", [["why"], ["plan", "--for"], ["evict", "--yes"]])
@pytest.mark.parametrize("name", ["", "Bad_Name", "../pods"])
def test_a_pod_named_as_no_pod_can_be_is_a_usage_error_before_any_request(
    verb: list[str], name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`why ''` and `plan --for ''` read every node and pod of the cluster before the empty name was refused (exit 1
    on a cluster out of reach, 2 on one in reach). Refused first now (the server is a closed port)."""
    kubeconfig = kubeconfig_file(tmp_path / "kubeconfig", "c", 1)
    args = [*verb, name] if verb[0] != "evict" else ["evict", name, "--yes"]
    assert run([*args, "--kubeconfig", str(kubeconfig)]) == EXIT_USAGE
    assert one_error_line(capsys) == (
        f"error: {name!r} is not a pod name; give the pod's name: lowercase letters, digits, '-' and '.'"
    )


def test_the_whole_hint_for_each_adapter_error_and_none_for_an_unknown_one() -> None:
    """The hint is the one thing the user acts on after a failure: each family gets its own words, and an error the
    CLI has no words for prints its cause alone (no dangling '; ')."""
    missing_crd = KubeTypeMissing("cannot list", status=404, action="list hamipodplacements in namespace a")
    hints = {
        NoReplacement("no labels"): "use kubectl hami-place pin -l for the pod you will create",
        PodReplaced("re-created", status=409): "nothing to do: the pod meant is gone",
        PlacementTaken("taken", status=409): (
            "read it (kubectl hami-place list); delete it if no one needs it (kubectl hami-place delete), re-run"
        ),
        WebhookRefused("refused", status=403): "check your rights with kubectl auth can-i list pods -A",
        missing_crd: (
            "install the HamiPodPlacement CRD: the server's chart, or kubectl apply -f the release's "
            "hamipodplacement-crd.yaml"
        ),
        KubeTypeMissing("cannot list foos", status=404, action="list foos"): (
            "check that the API server serves this resource type"
        ),
        KubeServerError("throttled", status=429): "retry in a moment",
        KubeServerError("failed", status=500): "retry, or check the server",
        BlockedByDisruptionBudget(
            "team-a", "p", (), "blocked"
        ): "retry once more replicas are ready, or relax the budget",
        KubeError("odd"): "",
    }
    assert {error: kube_hint(error) for error in hints} == hints
    assert kube_line(KubeError("odd")) == "odd"
    assert CliError("not confirmed").lines() == ["not confirmed"]
    assert CliError("not confirmed", "the pod was not evicted").lines() == ["not confirmed; the pod was not evicted"]


def test_pin_flag_errors_are_whole_lines_naming_the_flag_to_fix() -> None:
    """Each usage error names the flag and what to give instead: the user fixes the command line from it alone."""
    selector, gpus = parse_selector("app=x"), parse_gpus(["gpu-0"])
    config = HamiConfig()
    failures = {
        "no card": lambda: parse_gpus([]),
        "bad card": lambda: parse_gpus(["gpu-0", "gpu-x"]),
        "bad evict": lambda: build_spec("req-12345", selector, "n", gpus, "Bad_Name"),
        "control": lambda: build_spec("abcde\x1b[2J", selector, "n", gpus, None),
        "bad name": lambda: placement_name("Bad_Name", build_spec("req-12345", selector, "n", gpus, None)),
        "bad memory": lambda: flag_workload(1, -1, None, config),
    }
    lines = {}
    for what, failure in failures.items():
        with pytest.raises(UsageProblem) as raised:
            failure()
        lines[what] = raised.value.lines()
    assert lines == {
        "no card": ["no card given; pass --gpu gpu-N (or gpu-N/P, or a card UUID) once per card"],
        "bad card": [
            "bad --gpu 'gpu-x': 'gpu-x' is not a card reference: use gpu-<index>, gpu-<index>/<percent 1..100> or a "
            "card UUID (GPU-...); see the node's cards with kubectl hami-place status"
        ],
        "bad evict": ["evictPod 'Bad_Name' is not a valid pod name; fix --evict"],
        "control": ["--req-id 'abcde\\x1b[2J' holds control characters; fix --req-id: printable text"],
        "bad name": ["--name 'Bad_Name' is not an object name; fix --name: lowercase letters, digits, '-' and '.'"],
        "bad memory": [
            "bad --request-memory/--request-cores: memory must be a non-negative integer, got -1; "
            "give whole MiB and 0..100"
        ],
    }


def test_the_placement_name_keeps_a_req_id_that_makes_a_valid_name() -> None:
    """`pin-<reqID>` lets the user find the placement of a request; a reqID that would make an invalid object name
    (an underscore, a trailing '-') gets a random name rather than a create the server refuses."""
    selector, gpus = parse_selector("app=x"), parse_gpus(["gpu-0"])

    def name(req_id: str) -> str:
        return placement_name(None, build_spec(req_id, selector, "n", gpus, None))

    assert (name("Req-ABC12"), name("req.v1")) == ("pin-req-abc12", "pin-req.v1")
    for odd in ("team_a-request", "req-12345-"):
        assert re.fullmatch("pin-[a-z0-9]{12}", name(odd)), name(odd)


def test_request_flags_make_the_workload_with_the_clusters_hami_defaults() -> None:
    """--request-memory/--request-cores stand for the pod: what either leaves out comes from the cluster's HAMi
    config, as HAMi's webhook would fill it in, and no controller is read (the connection here reaches nothing)."""
    config = HamiConfig(resource_memory_name="example.com/mem", default_cores=20, default_memory=1000)
    source = "--request-memory/--request-cores"

    def workload(request: CardRequest, own_memory: bool, default_cores: bool = False) -> Workload:
        return Workload((GpuContainer("0", 0, False, request, own_memory, default_cores),), source, config=config)

    assert flag_workload(2, None, None, config) is None
    assert flag_workload(2, 4096, 30, config) == workload(CardRequest(2, 4096, None, 30, False, False), True)
    assert flag_workload(2, None, 30, config) == workload(CardRequest(2, 1000, None, 30, False, True), False)
    assert flag_workload(2, 4096, None, config) == workload(CardRequest(2, 4096, None, 20, False, False), True)
    assert flag_workload(2, 0, None, config) == workload(CardRequest(2, 1000, None, 100, True, True), False, True)
    unreachable = Kube(api=None, namespace="default", server="https://127.0.0.1:1", context="c")  # type: ignore[arg-type]
    assert resolve_workload(
        unreachable, "team-a", parse_selector("app=x"), nums=2, memory=4096, cores=30, config=config
    ) == workload(CardRequest(2, 4096, None, 30, False, False), True)


def test_a_pod_nothing_recreates_is_warned_about() -> None:
    """Evicting a bare pod loses it: the user must learn that the placement waits for a pod they create."""
    selector = parse_selector("app=x")
    assert replacement_warning(Replacement(selector, "ReplicaSet web", {}), "web-1") == ""
    assert replacement_warning(Replacement(selector, "pod web-1", {}, controlled=False), "web-1") == (
        "pod web-1 has no controller: nothing recreates it; the placement waits for the next pod you create with its "
        "labels (app=x)"
    )


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["list", "-l", ""],
            "bad selector -l '': the placement selector is empty and would match every placement; give at least "
            "one label; use kubectl's syntax, e.g. -l app=train,tier=gpu",
        ),
        (["list", "-n", "a", "-A"], "--namespace and --all-namespaces conflict; pass only one of them"),
        (["list", "--as", ""], "--as '' is not a user name; give the user to act as, e.g. --as jane"),
        (
            ["list", "--as", "a" * 70 + "\n"],
            f"--as '{'a' * 57}...' is not a user name; give the user to act as, e.g. --as jane",
        ),
        (
            ["why", "A" * 100],
            f"'{'A' * 77}...' is not a pod name; give the pod's name: lowercase letters, digits, '-' and '.'",
        ),
        (
            ["why", "p", "--hami-config", "X" * 100],
            f"--hami-config '{'X' * 77}...' is not NS/NAME; write e.g. --hami-config kube-system/hami-scheduler-device",
        ),
        (
            ["why", "p", "--gpu-scheduler-policy", "x" * 100],
            f"--gpu-scheduler-policy '{'x' * 77}...' is no policy HAMi knows (it would read it as spread); write "
            "binpack, spread, mutex, topology-aware, or a comma list of binpack, spread and numa",
        ),
        (
            ["list", "-o", "xml"],
            "invalid value for '--output' / '-o': 'xml' is not one of 'table', 'wide', 'json', 'yaml'; "
            "see 'kubectl hami-place list --help'",
        ),
        (["list", "-X"], "no such option: -X; see 'kubectl hami-place list --help'"),
    ],
    ids=["selector", "conflict", "as-empty", "as-long", "pod", "hami-config", "policy", "enum", "option"],
)
def test_a_usage_error_is_the_whole_line_with_the_fix_and_a_long_value_cut(
    argv: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The line is all the user reads before retyping the command: it names what was wrong and what to write, in the
    CLI's own words (not pydantic's 'Value error, '), and a long value pasted by mistake is cut, not echoed whole."""
    assert run(argv) == EXIT_USAGE
    assert one_error_line(capsys) == f"error: {line}"


LONG = "x" * 100_000
PIN = ["pin", "-l", "app=x", "--node", "n", "--gpu", "gpu-0"]
SELECTOR_HINT = "use kubectl's syntax, e.g. -l app=train,tier=gpu"


@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        ([*PIN, "--name", LONG], "fix --name: lowercase letters, digits, '-' and '.'"),
        ([*PIN, "--evict", LONG], "fix --evict"),
        (["pin", "-l", "app=x", "--node", "n", "--gpu", "gpu-" + "1" * 100_000], "kubectl hami-place status"),
        (["pin", "-l", f"a={LONG}", "--node", "n", "--gpu", "gpu-0"], SELECTOR_HINT),
        (["list", "-l", f"a={LONG}"], SELECTOR_HINT),
        (["status", "-l", f"a={LONG}"], SELECTOR_HINT),
        (["delete", "-l", f"a={LONG}", "--yes"], SELECTOR_HINT),
        (["delete", "--all", "--phase", LONG], "use one of Pending, Evicting, Consumed, Failed, Expired"),
        (["defrag", "status", "-n", LONG], "write e.g. -n kube-system"),
        (["defrag", "status", "--policy", LONG], "write e.g. --policy kube-system/gd-defrag-policy"),
        (["list", "-o", LONG], "is not one of 'table', 'wide', 'json', 'yaml'; see 'kubectl hami-place list --help'"),
        (["list", "-o", "a " * 50_000], "see 'kubectl hami-place list --help'"),
        (["list", f"--{LONG}"], "see 'kubectl hami-place list --help'"),
        (["list", *["a"] * 30_000], "see 'kubectl hami-place list --help'"),
        ([LONG], "see 'kubectl hami-place --help'"),
    ],
    ids=[
        "pin-name",
        "pin-evict",
        "pin-gpu",
        "pin-selector",
        "list-selector",
        "status-selector",
        "delete-selector",
        "delete-phase",
        "defrag-namespace",
        "defrag-policy",
        "output",
        "output-with-spaces",
        "option",
        "extra-arguments",
        "command",
    ],
)
def test_a_long_value_is_cut_in_the_one_line_that_still_ends_with_the_fix(
    argv: list[str], hint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A value pasted by mistake (100,000 characters) was echoed whole: one error line of 100 KB, its fix out of
    sight. The line quotes the start of the value and still ends with what to do."""
    assert run(argv) == EXIT_USAGE
    line = one_error_line(capsys)
    assert len(line) < 400, line[:400]
    assert line.endswith(hint)


def test_a_long_context_is_cut_in_the_adapters_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The adapter's words echo --context whole; its paths and names keep up to 256 characters."""
    kubeconfig = kubeconfig_file(tmp_path / "kubeconfig", "c", 1)
    assert run(["list", "--kubeconfig", str(kubeconfig), "--context", LONG]) == 1
    assert one_error_line(capsys) == (
        f"error: cannot use kubeconfig {kubeconfig}: it has no context '{'x' * 253}...' (its contexts: c); "
        "check --kubeconfig/--context or KUBECONFIG"
    )


def test_a_kubeconfigs_many_contexts_are_listed_cut_in_the_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A kubeconfig of a thousand contexts listed them all on the line that says the one asked is not there; the
    list is cut as the clusters' list is, and the line still ends with what to do."""
    kubeconfig = kubeconfig_file(tmp_path / "kubeconfig", "c", 1)
    text = kubeconfig.read_text().replace(
        "contexts: [", "contexts: [" + "".join(f"{{name: ctx-{i:04}-{'y' * 90}}}, " for i in range(1000))
    )
    kubeconfig.write_text(text)
    assert run(["list", "--kubeconfig", str(kubeconfig), "--context", "nope"]) == 1
    line = one_error_line(capsys)
    assert f"it has no context 'nope' (its contexts: ctx-0000-{'y' * 68}..., ctx-0001-" in line, line[:300]
    assert len(line) < 500 and line.endswith("); check --kubeconfig/--context or KUBECONFIG"), line[:600]


@pytest.mark.parametrize(
    ("argv", "what"),
    [
        (["list", "-l", ""], "placement"),
        (["delete", "-l", "", "--yes"], "placement"),
        (["status", "-l", ""], "node"),
        ([*PIN[:1], "-l", "", *PIN[3:]], "pod"),
    ],
)
def test_an_empty_selector_names_what_the_verb_selects(
    argv: list[str], what: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """list and delete select placements, status nodes, pin a pod: 'every pod' misled about what -l '' would take."""
    assert run(argv) == EXIT_USAGE
    assert one_error_line(capsys) == (
        f"error: bad selector -l '': the {what} selector is empty and would match every {what}; give at least one "
        f"label; {SELECTOR_HINT}"
    )


@pytest.mark.parametrize(
    "argv",
    [
        [*PIN, "--request-memory", "99999999999999999999999999", "--dry-run=client"],
        ["evict", "p", "--to-node", "n", "--gpu", "gpu-0", "--request-memory", str(2**31)],
    ],
    ids=["pin", "evict"],
)
def test_a_request_memory_hami_cannot_count_is_refused_before_the_cluster_is_read(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """More MiB than HAMi's int32 was refused only after the cluster was read, behind a warning about that read."""
    from kubectl_hami_place.kube import client

    def connect(*args: object, **kwargs: object) -> object:
        raise AssertionError("the cluster was read")

    monkeypatch.setattr(client, "connect", connect)
    assert run(argv) == EXIT_USAGE
    line = one_error_line(capsys)
    assert line.startswith("error: invalid value for '--request-memory': ") and "2147483647" in line, line


def test_a_confirmation_asks_on_stderr_and_takes_only_yes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A destructive verb on a terminal asks on stderr (stdout stays the result a script reads) and goes ahead only on
    an explicit yes: Enter is no, and an answer it cannot read is asked again. Without a terminal it refuses, naming
    the flag that confirms."""
    import io
    import sys

    class Terminal(io.StringIO):
        """A terminal on which the user types `answers`, then nothing more (end of input)."""

        def __init__(self, answers: list[str]) -> None:
            super().__init__()
            self.answers = answers

        def isatty(self) -> bool:
            return True

        def readline(self, size: int | None = -1) -> str:
            return self.answers.pop(0) if self.answers else ""

    asked = "Delete placement team-a/pin-x? [y/N]: "
    for answers, expected, prompts in (
        (["\n"], False, asked),
        (["y\n"], True, asked),
        (["YES\n"], True, asked),
        (["maybe\n", "n\n"], False, f"{asked}Error: invalid input\n{asked}"),
    ):
        err, out = io.StringIO(), io.StringIO()
        monkeypatch.setattr(sys, "stdin", Terminal(answers))
        monkeypatch.setattr(sys, "stderr", err)
        monkeypatch.setattr(sys, "stdout", out)
        assert confirm("delete placement team-a/pin-x", False) is expected
        assert (err.getvalue(), out.getvalue()) == (prompts, ""), "stdout is the result's alone (click wrote a space)"
    said: list[str] = []

    def ask(text: str) -> bool:
        said.append(text)
        return True

    assert confirm("evict team-a/web-1", False, ask=ask) is True
    assert said == ["Evict team-a/web-1?"]
    monkeypatch.setattr(sys, "stdin", io.StringIO())
    with pytest.raises(UsageProblem) as raised:
        confirm("evict team-a/web-1", False)
    assert raised.value.lines() == ["refusing to evict team-a/web-1 without confirmation; pass --yes to confirm"]


@pytest.mark.parametrize(
    ("outcome", "code", "err"),
    [
        (
            BlockedByDisruptionBudget("team-a", "web-1", ("web",), "cannot evict web-1"),
            4,
            "error: cannot evict web-1; retry once more replicas are ready, or relax the budget (kubectl get pdb -n "
            "team-a)\n",
        ),
        (
            KubeInvalid("refused: spec.reqID too short", status=422),
            3,
            "error: refused: spec.reqID too short; fix the request and retry\n",
        ),
        (ModelError("bad register on node gpu-a"), 1, "error: bad register on node gpu-a\n"),
        (KeyboardInterrupt(), 130, "error: interrupted\n"),
        (
            RuntimeError("disk\n  full"),
            1,
            "error: unexpected RuntimeError: disk full; rerun with HAMI_PLACE_DEBUG=1 and report it\n",
        ),
        (
            RuntimeError(),
            1,
            "error: unexpected RuntimeError: RuntimeError; rerun with HAMI_PLACE_DEBUG=1 and report it\n",
        ),
        (
            OSError(f"File name too long: '{'x' * 100_000}'"),
            1,
            f"error: unexpected OSError: File name too long: '{'x' * 253}...'; rerun with HAMI_PLACE_DEBUG=1 and "
            "report it\n",
        ),
        (130, 130, "error: interrupted\n"),
        (3, 3, ""),
        (None, 0, ""),
    ],
    ids=[
        "pdb",
        "invalid",
        "model",
        "ctrl-c",
        "unexpected",
        "unexpected-empty",
        "unexpected-long",
        "ctrl-c-in-verb",
        "code",
        "none",
    ],
)
def test_each_outcome_of_a_verb_has_its_exit_code_and_one_line(
    outcome: object, code: int, err: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The exit code is what a script branches on (4: wait for the budget and retry, 3: fix the request, 130: the
    user stopped it) and the line is what a person reads; a bug is named as one, with how to report it. typer hands
    back a Ctrl-C inside a verb as the code 130, which prints the same line as one outside it."""
    from kubectl_hami_place.cli import app as cli_app

    def verb(**kwargs: object) -> object:
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    monkeypatch.setattr(cli_app, "app", verb)
    assert cli_app.run(["list"]) == code
    assert capsys.readouterr() == ("", err)


def test_hami_place_debug_lets_an_unexpected_error_out_with_its_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug report needs the traceback the one `unexpected` line hides."""
    from kubectl_hami_place.cli import app as cli_app

    def verb(**kwargs: object) -> int:
        raise RuntimeError("disk full")

    monkeypatch.setattr(cli_app, "app", verb)
    monkeypatch.setenv("HAMI_PLACE_DEBUG", "1")
    with pytest.raises(RuntimeError) as raised:
        cli_app.run(["list"])
    assert str(raised.value) == "disk full"


def test_version_without_a_cluster_prints_the_plugins_version_and_the_connection_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`version` is what a user runs first when something is off: the plugin's own version is known without the
    cluster, and the error names the server of the --context or --kubeconfig given (a closed port, never reached)."""
    from kubectl_hami_place import __version__

    first = kubeconfig_file(tmp_path / "first", "one", 1)
    second = kubeconfig_file(tmp_path / "second", "two", 2)
    monkeypatch.setenv("KUBECONFIG", f"{first}{os.pathsep}{second}")
    unreachable = "cannot reach the API server at https://127.0.0.1:{}: connection refused"
    assert run(["version", "--context", "two"]) == 1
    assert capsys.readouterr() == (
        f"Plugin version: {__version__}\n",
        f"error: {unreachable.format(2)}; check --kubeconfig/--context\n",
    )
    assert run(["version", "-o", "json", "--kubeconfig", str(second)]) == 1
    out, err = capsys.readouterr()
    assert json.loads(out) == {"plugin": __version__, "server": None, "problem": f"unknown: {unreachable.format(2)}"}
    assert err == f"error: {unreachable.format(2)}; check --kubeconfig/--context\n"
    assert run(["version", "--as", ""]) == EXIT_USAGE
    assert one_error_line(capsys) == "error: --as '' is not a user name; give the user to act as, e.g. --as jane"


@pytest.mark.parametrize("where", [["-A"], ["-n", "team-a"], []])
def test_list_in_any_namespace_or_one_asks_the_contexts_server(
    where: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """-A, -n and neither all reach the server of the context (a closed port here: the connection error is the
    proof), rather than failing on the way."""
    kubeconfig = kubeconfig_file(tmp_path / "kubeconfig", "c", 1)
    assert run(["list", *where, "--kubeconfig", str(kubeconfig)]) == 1
    assert one_error_line(capsys) == (
        "error: cannot reach the API server at https://127.0.0.1:1: connection refused; check --kubeconfig/--context"
    )


def test_stdout_after_its_reader_went_away_takes_further_writes_silently(monkeypatch: pytest.MonkeyPatch) -> None:
    """`list | head -1`: Python flushes stdout once more at exit; into the broken pipe that printed 'Exception
    ignored ... BrokenPipeError' after the command had ended quietly."""
    import sys

    from kubectl_hami_place.cli.app import _silence_stdout

    read_end, write_end = os.pipe()
    os.close(read_end)
    with os.fdopen(write_end, "w") as stdout:
        stdout.write("NAME\n")
        with pytest.raises(BrokenPipeError):
            stdout.flush()
        monkeypatch.setattr(sys, "stdout", stdout)
        _silence_stdout()
        stdout.write("pin-x\n")
        stdout.flush()
