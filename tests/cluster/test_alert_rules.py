"""The chart's alerts fire when they should and only then, as Prometheus evaluates them: `promtool test rules` (built
from Prometheus' Go module, cached like the sandbox's binaries) over series a server would export. No sandbox runs.

Each case names the alert, the series by instance, and the labels of the alerts expected at an evaluation time; the
annotations expected are the rule's own (its `{{ $labels.kind }}` filled in), so a test fails on the labels and the
firing, not on a reworded description."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from sandbox import binaries

RULES = Path(__file__).resolve().parents[2] / "chart" / "alerts" / "hami-place.rules.yaml"


@pytest.fixture(scope="module")
def promtool() -> Path:
    return binaries.resolve("promtool")


def annotations(alert: str, labels: dict[str, str]) -> dict[str, str]:
    """The rule's annotations as Prometheus fills them for an alert with these labels (only `$labels` is used)."""
    groups = yaml.safe_load(RULES.read_text())["groups"]
    [rule] = [rule for group in groups for rule in group["rules"] if rule["alert"] == alert]
    filled = {}
    for name, written in rule["annotations"].items():
        text = written
        for key, value in labels.items():
            text = text.replace(f"{{{{ $labels.{key} }}}}", value)
        filled[name] = text
    return filled


def expected(alert: str, *fired: dict[str, str]) -> list[dict[str, Any]]:
    """The alerts `promtool` should find firing: each with its labels (the severity added) and the rule's words."""
    found = []
    for labels in fired:
        with_severity = {**labels, "severity": "warning"}
        found.append({"exp_labels": with_severity, "exp_annotations": annotations(alert, with_severity)})
    return found


def check(promtool: Path, tmp_path: Path, series: dict[str, str], checks: list[dict[str, Any]]) -> None:
    """Runs one promtool test of the chart's rules: `series` (name{labels} -> values, one sample a minute)."""
    test = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [{"series": name, "values": values} for name, values in series.items()],
                "alert_rule_test": checks,
            }
        ],
    }
    path = tmp_path / "rules.test.yaml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    args = [str(promtool), "test", "rules", str(path)]
    run = subprocess.run(args, check=False, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr


POLICY_LOOKS = 'hami_place_defrag_looks_total{instance="a",key="policy"}'


def test_an_unreadable_policy_is_alerted_after_ten_minutes_where_the_controller_runs(
    promtool: Path, tmp_path: Path
) -> None:
    """Replica a looked at its policy and cannot read it; b runs no controller (its gauge is 0, it never looked);
    c reads its policy."""
    series = {
        'hami_place_defrag_policy_valid{instance="a"}': "0x20",
        POLICY_LOOKS: "1+1x20",
        'hami_place_defrag_policy_valid{instance="b"}': "0x20",
        'hami_place_defrag_policy_valid{instance="c"}': "1x20",
        'hami_place_defrag_looks_total{instance="c",key="policy"}': "1+1x20",
    }
    alert = "HamiPlaceDefragPolicyInvalid"
    check(
        promtool,
        tmp_path,
        series,
        [
            {"eval_time": "9m", "alertname": alert, "exp_alerts": []},
            {"eval_time": "11m", "alertname": alert, "exp_alerts": expected(alert, {"instance": "a"})},
        ],
    )


@pytest.mark.parametrize(
    ("series", "fires"),
    [
        ({'hami_place_defrag_leader{instance="a"}': "0x20", 'hami_place_defrag_leader{instance="b"}': "0x20"}, True),
        ({'hami_place_defrag_leader{instance="a"}': "0x20", 'hami_place_defrag_leader{instance="b"}': "1x20"}, False),
    ],
    ids=["no replica leads", "b leads"],
)
def test_no_leader_is_alerted_after_five_minutes(
    promtool: Path, tmp_path: Path, series: dict[str, str], fires: bool
) -> None:
    """Two replicas whose controllers run: neither holding the Lease for 5 minutes is alerted, once."""
    alert = "HamiPlaceDefragNoLeader"
    check(
        promtool,
        tmp_path,
        {**series, POLICY_LOOKS: "1+1x20"},
        [
            {"eval_time": "4m", "alertname": alert, "exp_alerts": []},
            {"eval_time": "6m", "alertname": alert, "exp_alerts": expected(alert, {}) if fires else []},
        ],
    )


def test_no_leader_is_not_alerted_where_no_controller_runs(promtool: Path, tmp_path: Path) -> None:
    """A server started without a policy exports the leader gauge at 0 and never looks at a policy."""
    alert = "HamiPlaceDefragNoLeader"
    series = {'hami_place_defrag_leader{instance="a"}': "0x20"}
    check(promtool, tmp_path, series, [{"eval_time": "10m", "alertname": alert, "exp_alerts": []}])


def test_a_forbidden_watch_is_alerted_once_per_kind_after_fifteen_minutes(promtool: Path, tmp_path: Path) -> None:
    """Both replicas may not watch CSINodes (one alert, by kind); the namespaces' watch is allowed."""
    series = {
        'hami_place_defrag_watch_forbidden{instance="a",kind="csinodes"}': "1x20",
        'hami_place_defrag_watch_forbidden{instance="b",kind="csinodes"}': "1x20",
        'hami_place_defrag_watch_forbidden{instance="a",kind="namespaces"}': "0x20",
    }
    alert = "HamiPlaceDefragWatchForbidden"
    check(
        promtool,
        tmp_path,
        series,
        [
            {"eval_time": "14m", "alertname": alert, "exp_alerts": []},
            {"eval_time": "16m", "alertname": alert, "exp_alerts": expected(alert, {"kind": "csinodes"})},
        ],
    )
