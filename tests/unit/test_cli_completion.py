"""The word completer kubectl calls (`kubectl_complete-hami_place WORDS...`), for what needs no cluster."""

from __future__ import annotations

from kubectl_hami_place.cli._completion import complete_words
from kubectl_hami_place.cli.app import PROG, app


def candidates(*words: str) -> list[str]:
    lines = complete_words(app, PROG, list(words)).splitlines()
    assert lines[-1] == ":4", "the no-file-completion directive ends the output"
    return [line.split("\t")[0] for line in lines[:-1]]


def test_verbs_complete_from_the_empty_word() -> None:
    assert candidates("") == ["pin", "evict", "status", "list", "delete", "completion"]


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


def test_cluster_lookups_offer_nothing_without_a_cluster() -> None:
    assert candidates("status", "--kubeconfig", "/nonexistent", "") == []
    assert candidates("pin", "--gpu", "") == []
