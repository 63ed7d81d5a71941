"""The server tells an installed CRD older than itself by the fields its schema would prune, on plain data: the
chart's CRD and that CRD with what later versions added taken out."""

from __future__ import annotations

import copy
import dataclasses
import logging
import math
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry, Gauge

from kubectl_hami_place.core.crd_schema import EVERY_SPEC, EVERY_STATUS, missing_fields, pruned, written
from kubectl_hami_place.core.placement import PlacementSpec, PlacementStatus
from kubectl_hami_place.kube.errors import KubeError, KubeForbidden
from webhook.crd_check import CrdCheck

CRD_FILE = Path(__file__).resolve().parents[2] / "chart" / "templates" / "crd" / "hamipodplacement.yaml"


def chart_crd() -> dict[str, Any]:
    """The CRD the chart installs, as the API server returns it."""
    return yaml.safe_load(CRD_FILE.read_text())


def without(crd: dict[str, Any], *path: str) -> dict[str, Any]:
    """The CRD with one property of v1's schema removed (`status`, `defragRefused`: status.defragRefused)."""
    older = copy.deepcopy(crd)
    node = older["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for key in path[:-1]:
        node = node["properties"][key]
    del node["properties"][path[-1]]
    return older


def test_the_charts_crd_keeps_everything_this_version_writes() -> None:
    assert missing_fields(chart_crd()) == []


@pytest.mark.parametrize(
    ("path", "gap"),
    [
        (("status", "defragRefused"), "status.defragRefused"),
        (("status", "observedGeneration"), "status.observedGeneration"),
        (("status", "eviction", "uid"), "status.eviction.uid"),
        (("status", "conditions"), "status.conditions"),
        (("spec", "evictPod"), "spec.evictPod"),
    ],
)
def test_a_crd_without_a_field_this_version_writes_is_named_by_that_field(path: tuple[str, ...], gap: str) -> None:
    assert missing_fields(without(chart_crd(), *path)) == [gap]


def test_every_field_a_crd_lacks_is_named_not_only_the_first() -> None:
    """An operator upgrading the CRD by hand fixes what the warning names: a gap left unnamed stays."""
    older = without(without(chart_crd(), "status", "observedGeneration"), "status", "defragRefused")
    assert missing_fields(older) == ["status.observedGeneration", "status.defragRefused"]


def test_a_crd_not_serving_v1_is_said_so() -> None:
    crd = chart_crd()
    crd["spec"]["versions"][0]["served"] = False
    assert missing_fields(crd) == ["v1 (not served)"]


def test_pruning_follows_preserve_unknown_fields_additional_properties_and_items() -> None:
    value = {"a": {"x": 1}, "b": {"k": {"y": 2}}, "c": [{"z": 3}, {"w": 4}], "d": 5}
    schema = {
        "properties": {
            "a": {"x-kubernetes-preserve-unknown-fields": True},
            "b": {"additionalProperties": {"properties": {}}},
            "c": {"items": {"properties": {"z": {}}}},
        }
    }
    assert pruned(schema, value) == ["b.k.y", "c[].w", "d"]
    assert pruned({"additionalProperties": True}, value) == []


def test_a_list_where_the_schema_names_no_items_is_not_a_gap() -> None:
    """A field the CRD types otherwise is named, so not pruned: the check must say nothing of it, not fail."""
    assert pruned({"properties": {"cards": {"type": "string"}}}, {"cards": [{"uuid": "GPU-a"}]}) == []


@pytest.mark.parametrize(("example", "kind"), [(EVERY_STATUS, PlacementStatus), (EVERY_SPEC, PlacementSpec)])
def test_the_example_the_check_writes_sets_every_field(example: object, kind: type) -> None:
    # A field added to the model and left at its default here would go unchecked against the CRD.
    for field in dataclasses.fields(kind):
        if not field.metadata.get("stored", True):
            continue
        default = field.default_factory() if field.default_factory is not dataclasses.MISSING else field.default
        assert getattr(example, field.name) != default, field.name
    assert written()["status"]["defragRefused"]["cards"] == ["GPU-a"]


def gauge() -> Gauge:
    return Gauge("crd_fields_pruned", "test", registry=CollectorRegistry())


def answers(*replies: Mapping[str, Any] | KubeError) -> Iterator[Mapping[str, Any]]:
    """What the API server answers, one read after another."""
    for reply in replies:
        if isinstance(reply, KubeError):
            raise reply
        yield reply


def test_the_check_counts_and_logs_a_gap_once_then_says_when_it_is_gone(caplog: pytest.LogCaptureFixture) -> None:
    older = without(chart_crd(), "status", "defragRefused")
    replies = iter([older, older, chart_crd(), chart_crd()])
    pruned_gauge = gauge()
    check = CrdCheck(lambda: next(replies), pruned_gauge)
    assert math.isnan(pruned_gauge._value.get()), "unknown until read"
    with caplog.at_level(logging.INFO, logger="webhook.crd_check"):
        assert check.check() == ["status.defragRefused"]
        assert check.check() == ["status.defragRefused"]
        assert pruned_gauge._value.get() == 1
        assert check.check() == [] and check.check() == []
        assert pruned_gauge._value.get() == 0
    messages = [record.getMessage() for record in caplog.records]
    assert len(messages) == 2, messages
    assert "drops status.defragRefused, which this server writes" in messages[0]
    assert caplog.records[0].levelno == logging.WARNING
    assert "keeps every field" in messages[1]


def test_a_crd_that_cannot_be_read_is_unknown_not_fine(caplog: pytest.LogCaptureFixture) -> None:
    older = without(chart_crd(), "status", "defragRefused")
    replies = answers(older, KubeForbidden("forbidden: get customresourcedefinitions"))
    pruned_gauge = gauge()
    check = CrdCheck(lambda: next(replies), pruned_gauge)
    with caplog.at_level(logging.INFO, logger="webhook.crd_check"):
        assert check.check() == ["status.defragRefused"]
        assert check.check() is None
    assert math.isnan(pruned_gauge._value.get()), "no longer known: not the count read before"
    assert "grant get on customresourcedefinitions/hamipodplacements" in caplog.text


def test_a_fresh_check_with_nothing_missing_says_nothing(caplog: pytest.LogCaptureFixture) -> None:
    check = CrdCheck(chart_crd, gauge())
    with caplog.at_level(logging.INFO, logger="webhook.crd_check"):
        assert check.check() == []
    assert caplog.records == []


def test_a_gap_of_several_fields_is_one_warning_naming_each_and_the_fix(caplog: pytest.LogCaptureFixture) -> None:
    """The warning is all an operator of a CRD installed apart from the chart sees: it must name every field and
    the file to apply."""
    older = without(without(chart_crd(), "status", "observedGeneration"), "status", "defragRefused")
    check = CrdCheck(lambda: older, gauge())
    with caplog.at_level(logging.INFO, logger="webhook.crd_check"):
        check.check()
    assert [record.getMessage() for record in caplog.records] == [
        "the installed CRD hamipodplacements.scheduling.hami.placement.com drops status.observedGeneration, "
        "status.defragRefused, which this server writes: the CRD is older than the server (applied apart from the "
        "chart, crds.install=false); apply this release's hamipodplacement-crd.yaml"
    ]


def test_the_check_runs_before_looking_at_stop_and_a_failed_check_does_not_end_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The check runs for the life of the server: a fault in one check must leave the next one to run."""
    stop = threading.Event()
    steps: list[Mapping[str, Any] | Exception] = [RuntimeError("a bug"), chart_crd()]

    def read() -> Mapping[str, Any]:
        step = steps.pop(0)
        if isinstance(step, Exception):
            raise step
        stop.set()
        return step

    pruned_gauge = gauge()
    with caplog.at_level(logging.ERROR, logger="webhook.crd_check"):
        CrdCheck(read, pruned_gauge, every=0).run(stop)
    assert steps == [] and pruned_gauge._value.get() == 0
    assert [record.getMessage() for record in caplog.records] == [
        "checking the installed CRD hamipodplacements.scheduling.hami.placement.com failed"
    ]
