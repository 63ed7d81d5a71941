"""Kubeconfigs as users write them, and as they can break: each connects as kubectl would, or fails with one line that
names the cause and prints no token, never a traceback, a hang or an object's repr."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kubectl_hami_place.cli.app import run
from kubectl_hami_place.kube.client import connect
from kubectl_hami_place.kube.errors import KubeConfigError

HINT = "; check --kubeconfig/--context or KUBECONFIG"
LAUGHS = "\n".join(
    [
        "  v0: &v0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]",
        *(f"  v{level}: &v{level} [{', '.join([f'*v{level - 1}'] * 9)}]" for level in range(1, 12)),
    ]
)
"""A "billion laughs" as keys of a user entry: twelve lists, each of nine aliases of the one before; 684 characters
that expand to 9**12 scalars."""
HEAD = "apiVersion: v1\nkind: Config\ncurrent-context: c\nusers:\n- name: u\n"
PAST_BOUNDS = {
    "deep": "a: " + "[" * 100_000 + "]" * 100_000 + "\n",
    "laughs": f"{HEAD}  user: {{token: t}}\n{LAUGHS}\n",
    "itself": f"{HEAD}  user: &u {{token: t, again: *u}}\n",
}
"""What the client library could not read: a document nested 100,000 deep, a billion laughs, a node inside itself."""


def kubeconfig(path: Path, user: str = "{token: t}", cluster: str = "{server: 'https://127.0.0.1:1'}") -> Path:
    """A kubeconfig of one context `c`, selected, whose user and cluster are the YAML flow mappings given."""
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: c, cluster: {cluster}}}]\n"
        f"users: [{{name: u, user: {user}}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    return path


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("error: ") and "Traceback" not in captured.err
    return lines[0]


@pytest.mark.parametrize(
    "user", ["{tokenFile: token}", '{token: "secret-token-123\\r"}', "{token: ' secret-token-123'}"]
)
def test_a_token_with_whitespace_around_it_reaches_the_server_without_it(user: str, tmp_path: Path) -> None:
    """`echo $TOKEN > file` ends the token in a newline, which urllib3 refused as a header value, printing the token;
    kubectl trims it. The value checked is the one every request puts in its Authorization header."""
    (tmp_path / "token").write_text("secret-token-123\n")
    kube = connect(str(kubeconfig(tmp_path / "kubeconfig", user)))
    assert kube.api.configuration.auth_settings()["BearerToken"]["value"] == "Bearer secret-token-123"


def test_a_token_an_exec_plugin_refreshes_is_trimmed_too(tmp_path: Path) -> None:
    """The client library sets the header again before each request, from the plugin rerun once the token expired."""
    runs = tmp_path / "runs"
    plugin = tmp_path / "credential-helper"
    plugin.write_text(
        f"#!/bin/sh\necho x >> '{runs}'\n"
        'printf \'{"apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential", "status": '
        '{"token": "token-%s\\\\n", "expirationTimestamp": "2000-01-01T00:00:00Z"}}\' '
        f"$(wc -l < '{runs}' | tr -d ' ')\n"
    )
    plugin.chmod(0o755)
    exec_user = f"{{exec: {{apiVersion: client.authentication.k8s.io/v1beta1, command: '{plugin}'}}}}"
    kube = connect(str(kubeconfig(tmp_path / "kubeconfig", exec_user)))
    assert kube.api.configuration.api_key["BearerToken"] == "Bearer token-1"
    assert kube.api.configuration.auth_settings()["BearerToken"]["value"] == "Bearer token-2"


def test_a_token_with_a_line_break_inside_is_one_line_without_the_token(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """urllib3 refused it at the first request, and its error printed the token."""
    path = kubeconfig(tmp_path / "kubeconfig", '{token: "s3cr3t\\nt0ken"}')
    assert run(["list", "--kubeconfig", str(path)]) == 1
    line = one_error_line(capsys)
    assert line == (
        f"error: cannot use kubeconfig {path}: the token of its user 'u' holds a control character; "
        f"fix the token in the kubeconfig{HINT}"
    )


def test_a_kubeconfig_path_too_long_to_look_up_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The file system refuses a name of 300 characters (ENAMETOOLONG): that is the user's path to fix, not an
    unexpected error; in a KUBECONFIG list too, where only a missing file is skipped; and in a pod, where whether
    ~/.kube/config is there decides between it and the service account."""
    too_long = tmp_path / ("k" * 300)
    assert run(["list", "--kubeconfig", str(too_long)]) == 1
    assert one_error_line(capsys).endswith(f" File name too long{HINT}")
    with pytest.raises(KubeConfigError) as raised:
        connect(str(too_long))
    assert str(raised.value) == f"cannot read kubeconfig {too_long}: File name too long"
    monkeypatch.setenv("KUBECONFIG", f"{kubeconfig(tmp_path / 'kubeconfig')}{os.pathsep}{too_long}")
    with pytest.raises(KubeConfigError) as raised:
        connect()
    assert str(raised.value) == f"cannot read kubeconfig {too_long}: File name too long"
    monkeypatch.delenv("KUBECONFIG")
    monkeypatch.setenv("HOME", str(too_long))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    with pytest.raises(KubeConfigError) as raised:
        connect()
    assert str(raised.value) == f"cannot read kubeconfig {too_long}/.kube/config: File name too long"


@pytest.mark.parametrize(
    ("bad", "words"),
    [
        ("deep", 'not YAML (while increasing flow level exceeded maximum nesting depth in "{}", line 1, column 1003)'),
        (
            "laughs",
            'its aliases expand 49 nodes to 357449882134, more than 10 times as many in "{}", line 11, column 7',
        ),
        ("itself", 'an alias refers to a node that contains it in "{}", line 6, column 9'),
    ],
)
@pytest.mark.parametrize("listed", [False, True])
def test_a_kubeconfig_nested_or_aliased_past_bounds_is_one_line(
    bad: str,
    words: str,
    listed: bool,
    *,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A document nested 100,000 deep ran the client library's parser out of stack (RecursionError); a billion laughs
    under `users:` made its merge print the document out whole, for minutes and gigabytes. Alone, or after a good
    file in KUBECONFIG."""
    path = tmp_path / bad
    path.write_text(PAST_BOUNDS[bad])
    if listed:
        monkeypatch.setenv("KUBECONFIG", f"{kubeconfig(tmp_path / 'good')}{os.pathsep}{path}")
        assert run(["list"]) == 1
    else:
        assert run(["list", "--kubeconfig", str(path)]) == 1
    assert one_error_line(capsys) == f"error: cannot read kubeconfig {path}: {words.format(path)}{HINT}"


def test_a_current_context_that_is_no_name_is_named_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The client library printed `Expected object with name <kubernetes.config.kube_config.ConfigNode object at
    0x7fe4...>`."""
    path = kubeconfig(tmp_path / "kubeconfig")
    path.write_text(path.read_text().replace("current-context: c", "current-context: [c]"))
    assert run(["list", "--kubeconfig", str(path)]) == 1
    assert one_error_line(capsys) == (
        f"error: cannot use kubeconfig {path}: its current-context must be a context's name{HINT}"
    )


@pytest.mark.parametrize("cluster", ["{}", "{server: ''}"])
def test_a_cluster_without_a_server_is_named_with_what_to_add(
    cluster: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The client library leaves the host empty: 'cannot reach the API server at : No host specified.'"""
    path = kubeconfig(tmp_path / "kubeconfig", cluster=cluster)
    assert run(["list", "--kubeconfig", str(path)]) == 1
    assert one_error_line(capsys) == (
        f"error: cannot use kubeconfig {path}: its cluster 'c' has no server; "
        f"add `server: https://HOST:PORT` to it{HINT}"
    )


@pytest.mark.parametrize(
    ("change", "verb", "words"),
    [
        (
            ("cluster: {server: 'https://127.0.0.1:1'}", "cluster: https://127.0.0.1:1"),
            "read",
            "its cluster 'c' must hold a mapping under `cluster:`",
        ),
        (("user: {token: t}", "user: [t]"), "read", "its user 'u' must hold a mapping under `user:`"),
        (
            ("context: {cluster: c", "context: {cluster: [c]"),
            "use",
            "its context 'c' must give its cluster as a name, `cluster: NAME`",
        ),
        (("user: u}", "user: [u]}"), "use", "its context 'c' must give its user as a name, `user: NAME`"),
        (
            ("context: {cluster: c", "context: {cluster: gone"),
            "use",
            "its context 'c' names cluster 'gone', which it does not have (its clusters: c)",
        ),
        (
            ("server: 'https://127.0.0.1:1'", "server: 443"),
            "use",
            "its cluster 'c' has a server that is not text; write it as `server: https://HOST:PORT`",
        ),
    ],
)
def test_an_entry_of_another_shape_is_named_with_what_to_write(
    change: tuple[str, str], verb: str, words: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The client library failed inside on these: "it is not a kubeconfig (a YAML mapping)" for a file that was one,
    a list's internal object named as a cluster, a context's user in a list taken for none."""
    path = kubeconfig(tmp_path / "kubeconfig")
    path.write_text(path.read_text().replace(*change))
    assert run(["list", "--kubeconfig", str(path)]) == 1
    assert one_error_line(capsys) == f"error: cannot {verb} kubeconfig {path}: {words}{HINT}"


def test_an_error_about_a_user_names_it_without_printing_its_token(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The client library labelled an entry by its contents: a user missing its `user:` key printed its token."""
    path = kubeconfig(tmp_path / "kubeconfig")
    path.write_text(path.read_text().replace("{name: u, user: {token: t}}", "{name: u, token: s3cr3t}"))
    assert run(["list", "--kubeconfig", str(path)]) == 1
    assert one_error_line(capsys) == (
        f"error: cannot use kubeconfig {path}: Invalid kube-config file. "
        f"Expected key user in {path}/users[name=u]{HINT}"
    )


def test_a_relative_token_file_is_read_beside_its_kubeconfig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A relative tokenFile (or certificate) is the kubeconfig's directory's, wherever the command runs from; in a
    KUBECONFIG list, each file's own."""
    team = tmp_path / "team"
    team.mkdir()
    (team / "token").write_text("team-token")
    (team / "kubeconfig").write_text(
        "contexts: [{name: team, context: {cluster: c, user: team}}]\nusers: [{name: team, user: {tokenFile: token}}]\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KUBECONFIG", f"{kubeconfig(tmp_path / 'first')}{os.pathsep}{team / 'kubeconfig'}")
    kube = connect(None, "team")
    assert kube.api.configuration.auth_settings()["BearerToken"]["value"] == "Bearer team-token"


def test_a_context_given_needs_no_current_context_and_none_given_needs_one(tmp_path: Path) -> None:
    """kubectl takes --context from a kubeconfig that sets no current-context; the client library asked for one."""
    path = kubeconfig(tmp_path / "kubeconfig")
    path.write_text(path.read_text().replace("current-context: c\n", ""))
    assert connect(str(path), "c").server == "https://127.0.0.1:1"
    with pytest.raises(KubeConfigError) as raised:
        connect(str(path))
    assert (
        str(raised.value) == f"cannot use kubeconfig {path}: it sets no current-context; name a context with --context"
    )


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", "it is empty"),
        ("clusters: {c: {server: 'https://127.0.0.1:1'}}\n", "its clusters must be a list of named mappings"),
        ("users: [{user: {token: t}}]\n", "its users must be a list of named mappings"),
    ],
)
def test_a_kubeconfig_of_another_shape_is_one_line_naming_what_is_wrong(
    text: str, words: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The files are merged before the client library reads them: a section that is no list of named entries, or an
    empty file, is named there."""
    path = tmp_path / "kubeconfig"
    path.write_text(text)
    assert run(["list", "--kubeconfig", str(path)]) == 1
    assert one_error_line(capsys) == f"error: cannot read kubeconfig {path}: {words}{HINT}"


def test_without_libyaml_the_pure_python_loader_reads_kubeconfigs_and_refuses_the_deep_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PyYAML built without libyaml (a source install on a minimal image) has no CSafeLoader; its own loader recurses
    where libyaml stops at a depth, so the deep document is one line there too."""
    import yaml

    from kubectl_hami_place.kube import client

    monkeypatch.setattr(client, "KUBECONFIG_LOADER", yaml.SafeLoader)
    assert connect(str(kubeconfig(tmp_path / "kubeconfig"))).server == "https://127.0.0.1:1"
    deep = tmp_path / "deep"
    deep.write_text(PAST_BOUNDS["deep"])
    with pytest.raises(KubeConfigError) as raised:
        connect(str(deep))
    assert str(raised.value) == f"cannot read kubeconfig {deep}: not YAML (nested too deep)"


def test_kubeconfig_flag_names_one_file_and_only_the_variable_is_a_list(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """kubectl reads `--kubeconfig a:b` as the one file `a:b` (`stat a:b: no such file`); only KUBECONFIG is a list."""
    both = f"{kubeconfig(tmp_path / 'a')}{os.pathsep}{kubeconfig(tmp_path / 'b')}"
    assert run(["list", "--kubeconfig", both]) == 1
    assert one_error_line(capsys) == f"error: cannot read kubeconfig {both}: no such file{HINT}"
    monkeypatch.setenv("KUBECONFIG", both)
    assert connect().server == "https://127.0.0.1:1"


@pytest.mark.parametrize("empty", ["", "# only a comment\n"])
def test_an_empty_file_in_a_kubeconfig_list_is_skipped_as_kubectl_skips_it(
    empty: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A KUBECONFIG list holding an empty file failed every command ("it is empty"); kubectl reads the others. Alone,
    the file is still named as empty."""
    blank = tmp_path / "blank"
    blank.write_text(empty)
    monkeypatch.setenv("KUBECONFIG", f"{blank}{os.pathsep}{kubeconfig(tmp_path / 'kubeconfig')}")
    assert connect().server == "https://127.0.0.1:1"
    monkeypatch.setenv("KUBECONFIG", f"{blank}{os.pathsep}{blank}")
    assert run(["list"]) == 1
    assert one_error_line(capsys) == f"error: cannot read kubeconfig {blank}: it is empty{HINT}"
