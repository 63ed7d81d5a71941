"""The word completer kubectl calls (`kubectl_complete-hami_place WORDS...`), for what needs no cluster."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubectl_hami_place.cli._completion import complete_words
from kubectl_hami_place.cli.app import PROG, app, complete_main
from kubectl_hami_place.kube import cluster_reads
from kubectl_hami_place.kube.client import Kube


def candidates(*words: str) -> list[str]:
    lines = complete_words(app, PROG, list(words)).splitlines()
    assert lines[-1] == ":4", "the no-file-completion directive ends the output"
    return [line.split("\t")[0] for line in lines[:-1]]


def test_verbs_complete_from_the_empty_word() -> None:
    assert candidates("") == [
        "pin",
        "evict",
        "status",
        "list",
        "delete",
        "why",
        "plan",
        "apply",
        "version",
        "completion",
        "defrag",
    ]


def test_defrag_subcommands_and_their_options_complete() -> None:
    assert candidates("defrag", "") == ["status", "history", "pause", "resume"]
    assert candidates("defrag", "pause", "--po") == ["--policy"]


def test_verbs_complete_from_a_prefix() -> None:
    assert candidates("st") == ["status"]


def test_options_of_a_verb() -> None:
    found = candidates("pin", "--re")
    assert {"--req-id", "--request-memory", "--request-cores"} <= set(found)
    assert "--yes" in candidates("evict", "pod", "--y")


def test_enum_values() -> None:
    assert candidates("list", "-o", "") == ["table", "wide", "json", "yaml"]
    assert candidates("pin", "--dry-run", "s") == ["server"]
    assert candidates("completion", "") == ["bash", "zsh", "fish"]


def test_cluster_lookups_offer_nothing_without_a_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The lookups run (spied on, not replaced) against a server that refuses connections, and offer nothing."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "gone", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "gone", "context": {"cluster": "gone", "user": "u"}}],
                "current-context": "gone",
            }
        )
    )
    looked_up: list[str] = []
    for name in ("list_nodes", "get_node", "list_pods"):
        real = getattr(cluster_reads, name)
        monkeypatch.setattr(
            cluster_reads, name, lambda *a, _real=real, _name=name, **k: looked_up.append(_name) or _real(*a, **k)
        )
    assert candidates("status", "--kubeconfig", str(kubeconfig), "") == []
    assert candidates("pin", "--kubeconfig", str(kubeconfig), "--node", "gpu-0", "--gpu", "") == []
    assert candidates("evict", "--kubeconfig", str(kubeconfig), "") == []
    assert candidates("list", "--kubeconfig", str(kubeconfig), "-n", "") == []
    assert looked_up == ["list_nodes", "get_node", "list_pods"]
    assert candidates("pin", "--gpu", "") == [], "without --node there is no node to ask"


def test_an_argument_already_typed_is_not_offered_again() -> None:
    """The completer parses the words typed without typer's coercion; it still tells a given argument from a
    missing one."""
    assert candidates("completion", "") == ["bash", "zsh", "fish"]
    assert candidates("completion", "bash", "") == []
    assert candidates("completion", "bash", "--") == ["--help"]


def test_the_completion_lines_kubectl_reads() -> None:
    """kubectl splits each line at the tab into a value and a one-line description, and takes a line with no tab as a
    bare value; fish may pass no word at all when the word being typed is empty."""
    assert complete_words(app, PROG, ["list", "--cont"]) == "--context\tThe kubeconfig context to use.\n:4\n"
    assert complete_words(app, PROG, ["list", "-o", ""]) == "table\nwide\njson\nyaml\n:4\n"
    assert complete_words(app, PROG, []) == complete_words(app, PROG, [""])
    assert candidates() == candidates("")


def two_context_kubeconfig(path: Path) -> Path:
    """Contexts `one` and `two`, each on its own closed port of 127.0.0.1, `two` with namespace team-b."""
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": name, "cluster": {"server": f"https://127.0.0.1:{port}"}}
                    for name, port in (("one", 1), ("two", 2))
                ],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [
                    {"name": "one", "context": {"cluster": "one", "user": "u"}},
                    {"name": "two", "context": {"cluster": "two", "user": "u", "namespace": "team-b"}},
                ],
                "current-context": "one",
            }
        )
    )
    return path


def test_contexts_complete_from_the_kubeconfig_given(tmp_path: Path) -> None:
    """`--context <TAB>` reads the file of --kubeconfig (no cluster): a missing file offers nothing, not an error."""
    kubeconfig = str(two_context_kubeconfig(tmp_path / "kubeconfig"))
    assert candidates("list", "--kubeconfig", kubeconfig, "--context", "") == ["one", "two"]
    assert candidates("list", "--kubeconfig", kubeconfig, "--context", "t") == ["two"]
    assert candidates("list", "--kubeconfig", str(tmp_path / "nope"), "--context", "") == []


def test_cluster_lookups_ask_the_context_namespace_and_node_typed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lookups run (spied on, not replaced) against closed ports: a pod or card offered must come from the cluster
    of the --context typed, the namespace of -n (else the context's) and the node of --to-node."""
    kubeconfig = str(two_context_kubeconfig(tmp_path / "kubeconfig"))
    asked: list[tuple[str, str, str]] = []
    for name in ("get_node", "list_pods"):
        real = getattr(cluster_reads, name)

        def spy(kube: Kube, where: str, *a: object, _real: Any = real, _name: str = name, **k: object) -> Any:
            asked.append((_name, kube.server, where))
            return _real(kube, where, *a, **k)

        monkeypatch.setattr(cluster_reads, name, spy)
    assert candidates("evict", "--kubeconfig", kubeconfig, "--context", "two", "-n", "team-a", "") == []
    assert candidates("evict", "--kubeconfig", kubeconfig, "--context", "two", "") == []
    assert candidates("evict", "p", "--kubeconfig", kubeconfig, "--to-node", "gpu-b", "--gpu", "") == []
    assert asked == [
        ("list_pods", "https://127.0.0.1:2", "team-a"),
        ("list_pods", "https://127.0.0.1:2", "team-b"),
        ("get_node", "https://127.0.0.1:1", "gpu-b"),
    ]


def test_the_completer_command_completes_the_words_kubectl_passes_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """kubectl runs `kubectl_complete-hami_place list -o ''` for `kubectl hami-place list -o <TAB>`: every word after
    the executable's name is the command line typed so far, the last one the word being typed."""
    monkeypatch.setattr(sys, "argv", ["kubectl_complete-hami_place", "list", "-o", ""])
    assert complete_main() == 0
    assert capsys.readouterr() == ("table\nwide\njson\nyaml\n:4\n", "")
