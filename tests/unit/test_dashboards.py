"""The Grafana dashboard and the PrometheusRule the chart ships are PromQL Prometheus parses (promql-parser, the
Rust parser GreptimeDB keeps to Prometheus' grammar) and name only metrics that exist: each query's metrics are ones
the server exports (read from its own registry) or the API server's and HAMi's, listed here by name."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import promql_parser
import pytest
import yaml
from prometheus_client.core import Metric

from webhook.metrics import CERT_EXPIRY_METRIC, Metrics

CHART = Path(__file__).resolve().parents[2] / "chart"
DASHBOARD = CHART / "dashboards" / "hami-place.json"
RULES = CHART / "alerts" / "hami-place.rules.yaml"

# HAMi v2.10's scheduler (cmd/scheduler/metrics.go): per card, labelled node, device_uuid, device_index, device_type.
HAMI = {"hami_gpu_memory_allocated_bytes", "hami_gpu_memory_limit_bytes"}
# The API server's admission metrics (k8s.io/apiserver/pkg/admission/metrics, in kube-apiserver v1.37: counters
# labelled name and type, exposed under these names, without _total).
API_SERVER = {"apiserver_admission_webhook_fail_open_count", "apiserver_admission_webhook_rejection_count"}

SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "info": ("_info",),
    "summary": ("", "_sum", "_count", "_created"),
}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects, from its syntax tree; ValueError when it does not parse."""
    names: set[str] = set()

    def selected(node: object) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            assert node.name, f"{node} selects by matchers alone: name the metric"
            names.add(node.name)

    promql_parser.walk(promql_parser.parse(expr), selected)
    return names


def exported() -> set[str]:
    """Every sample name the server's registry can expose, whether or not it has samples yet."""
    metrics = Metrics()
    metrics.watch_placements(list, list)
    families: list[Metric] = list(metrics.registry.collect())
    return {family.name + suffix for family in families for suffix in SUFFIXES[family.type]}


def dashboard_queries() -> list[tuple[str, str]]:
    """(panel title, expression) of every query of every panel."""
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return [
        (panel["title"], target["expr"])
        for panel in dashboard["panels"]
        if panel["type"] != "row"
        for target in panel["targets"]
    ]


def rule_queries() -> list[tuple[str, str]]:
    """(alert, expression) of every rule."""
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [(rule["alert"], rule["expr"]) for group in groups for rule in group["rules"]]


def test_the_extractor_finds_the_metrics_and_nothing_else() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (le) (rate(a_seconds_bucket{x="rate(b)"}[5m])))'
        " * on (node, device_uuid) group_left (device_type) max by (node) (c_bytes) and on () d == 0"
    )
    assert metric_names(expr) == {"a_seconds_bucket", "c_bytes", "d"}


@pytest.mark.parametrize(
    ("expr", "why"),
    [
        ("sum(rate(a_total[5m])", "unclosed left parenthesis"),
        ("max by (instance) a == 0", "invalid promql query"),
        ("rate(a_total) > 0", "expected type matrix in call to function 'rate', got vector"),
        ('{key="policy"} > 0', "selects by matchers alone"),
    ],
)
def test_a_query_prometheus_would_refuse_fails_the_check(expr: str, why: str) -> None:
    """A rule Prometheus cannot parse is never evaluated (the Prometheus Operator rejects the whole PrometheusRule)."""
    with pytest.raises((ValueError, AssertionError)) as raised:
        metric_names(expr)
    assert why in str(raised.value)


def test_the_server_exports_the_metrics_the_dashboard_joins_on() -> None:
    names = exported()
    assert {"hami_place_build_info", "hami_place_placements", "hami_place_pinned_card_info"} <= names
    assert "hami_place_admissions_total" in names and "hami_place_admission_duration_seconds_bucket" in names


def test_every_query_of_the_dashboard_and_the_rules_names_a_known_metric() -> None:
    known = exported() | HAMI | API_SERVER
    queries = dashboard_queries() + rule_queries()
    assert len(queries) >= 20
    for where, expr in queries:
        names = metric_names(expr)
        assert names, f"{where}: no metric in {expr!r}"
        unknown = names - known
        assert not unknown, f"{where}: {sorted(unknown)} is not exported by the server nor a known external metric"


def test_the_dashboard_has_the_panels_the_issue_asks_for() -> None:
    read = {name for _, expr in dashboard_queries() for name in metric_names(expr)}
    for needed in (
        "hami_place_placements",
        "hami_place_admissions_total",
        "hami_place_admission_duration_seconds_bucket",
        "hami_place_evictions_total",
        "hami_place_claims_total",
        "hami_place_defrag_moves_total",
        "hami_place_defrag_rescued_pods_total",
        "hami_place_pinned_card_info",
        "hami_gpu_memory_allocated_bytes",
    ):
        assert needed in read, f"no panel reads {needed}"
    dashboard = json.loads(DASHBOARD.read_text())
    assert [v["name"] for v in dashboard["templating"]["list"]] == ["datasource"]
    assert all(panel["datasource"]["uid"] == "${datasource}" for panel in dashboard["panels"] if panel["type"] != "row")
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_the_rules_alert_on_what_the_issue_names() -> None:
    alerts = dict(rule_queries())
    assert set(alerts) == {
        "HamiPlaceAdmissionFailedOpen",
        "HamiPlaceCertificateExpiresSoon",
        "HamiPlaceCacheStale",
        "HamiPlaceEvictionsBlocked",
        "HamiPlaceDefragBudgetExhausted",
        "HamiPlaceDefragPolicyInvalid",
        "HamiPlaceDefragWatchForbidden",
        "HamiPlaceDefragNoLeader",
        "HamiPlaceDefragMovesFailing",
        "HamiPlaceCRDOutdated",
    }
    assert metric_names(alerts["HamiPlaceDefragMovesFailing"]) == {"hami_place_defrag_moves_total"}
    assert "hami_place_crd_fields_pruned" in metric_names(alerts["HamiPlaceCRDOutdated"])
    # The controller's: the first two also read its looks, so a server that runs no controller raises neither.
    assert metric_names(alerts["HamiPlaceDefragPolicyInvalid"]) == {
        "hami_place_defrag_policy_valid",
        "hami_place_defrag_looks_total",
    }
    assert metric_names(alerts["HamiPlaceDefragNoLeader"]) == {
        "hami_place_defrag_leader",
        "hami_place_defrag_looks_total",
    }
    assert metric_names(alerts["HamiPlaceDefragWatchForbidden"]) == {"hami_place_defrag_watch_forbidden"}
    assert CERT_EXPIRY_METRIC in metric_names(alerts["HamiPlaceCertificateExpiresSoon"])
    assert "apiserver_admission_webhook_fail_open_count" in metric_names(alerts["HamiPlaceAdmissionFailedOpen"])
