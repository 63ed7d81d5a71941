"""The word completer kubectl calls (`kubectl_complete-hami_place WORDS...`), for what needs no cluster."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kubectl_hami_place.cli._completion import complete_words
from kubectl_hami_place.cli.app import PROG, app
from kubectl_hami_place.kube import cluster_reads


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
    assert looked_up == ["list_nodes", "get_node", "list_pods"]
    assert candidates("pin", "--gpu", "") == [], "without --node there is no node to ask"


def test_an_argument_already_typed_is_not_offered_again() -> None:
    """The completer parses the words typed without typer's coercion; it still tells a given argument from a
    missing one."""
    assert candidates("completion", "") == ["bash", "zsh", "fish"]
    assert candidates("completion", "bash", "") == []
    assert candidates("completion", "bash", "--") == ["--help"]
