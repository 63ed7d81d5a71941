"""The chart's alerts fire when they should and only then, as Prometheus evaluates them: `promtool test rules` (built
from Prometheus' Go module, cached like the sandbox's binaries) over series a server would export. No sandbox runs.

Each case names the alert, the series by instance, and the labels of the alerts expected at an evaluation time; the
annotations expected are the rule's own (its `$labels` and `$value` filled in), so a test fails on the labels, the
value and the firing, not on a reworded description."""

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


def rule(alert: str) -> dict[str, Any]:
    """The chart's rule of that alert."""
    groups = yaml.safe_load(RULES.read_text())["groups"]
    [found] = [each for group in groups for each in group["rules"] if each["alert"] == alert]
    return found


def expected(alert: str, *fired: dict[str, str], value: str = "") -> list[dict[str, Any]]:
    """The alerts `promtool` should find firing: each with its labels and the rule's, and the rule's annotations as
    Prometheus fills them (`value`: the alert's value as its annotations print it)."""
    written = rule(alert)
    found = []
    for own in fired:
        labels = {**own, **written["labels"]}
        words = {name: filled(text, labels, value) for name, text in written["annotations"].items()}
        found.append({"exp_labels": labels, "exp_annotations": words})
    return found


def filled(text: str, labels: dict[str, str], value: str) -> str:
    """An annotation's template with its `$labels` and its `$value` (as printed, whatever the function) filled in."""
    fields = {f"{{{{ $labels.{key} }}}}": label for key, label in labels.items()}
    fields |= dict.fromkeys(("{{ $value | humanize }}", "{{ $value | humanizeDuration }}", "{{ $value }}"), value)
    for field, words in fields.items():
        text = text.replace(field, words)
    return text


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


def fires_after(  # noqa: PLR0917 - the fixtures, the alert and its times
    promtool: Path,
    tmp_path: Path,
    alert: str,
    series: dict[str, str],
    quiet: str,
    fired: str,
    *labels: dict[str, str],
    value: str = "",
) -> None:
    """`alert` quiet at `quiet` (before its `for` has passed), then at `fired` firing once for each of `labels`, with
    `value` in its words (no labels: still quiet)."""
    check(
        promtool,
        tmp_path,
        series,
        [
            {"eval_time": quiet, "alertname": alert, "exp_alerts": []},
            {"eval_time": fired, "alertname": alert, "exp_alerts": expected(alert, *labels, value=value)},
        ],
    )


OURS_FAILED_OPEN = 'apiserver_admission_webhook_fail_open_count{name="placement.scheduling.hami.placement.com"}'
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
    fires_after(promtool, tmp_path, "HamiPlaceDefragPolicyInvalid", series, "9m", "11m", {"instance": "a"})


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
    looked = {**series, POLICY_LOOKS: "1+1x20"}
    fires_after(promtool, tmp_path, "HamiPlaceDefragNoLeader", looked, "4m", "6m", *([{}] if fires else []))


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
    fires_after(promtool, tmp_path, "HamiPlaceDefragWatchForbidden", series, "14m", "16m", {"kind": "csinodes"})


@pytest.mark.parametrize(
    ("alert", "series", "quiet", "fired", "labels", "value"),
    [
        (
            "HamiPlaceAdmissionFailedOpen",
            {
                OURS_FAILED_OPEN: "0x4 1x10",
                'apiserver_admission_webhook_fail_open_count{name="vgpu.hami.io"}': "0+1x14",
            },
            "4m",
            "6m",
            {"name": "placement.scheduling.hami.placement.com"},
            "1",
        ),
        (
            "HamiPlaceCertificateExpiresSoon",
            {'hami_place_serving_certificate_not_after_timestamp_seconds{instance="a"}': "864000x70"},
            "59m",
            "61m",
            {},
            "9d 22h 59m 0s",
        ),
        (
            "HamiPlaceCacheStale",
            {
                'hami_place_cache_sync_age_seconds{instance="a",kind="pods"}': "300x10",
                'hami_place_cache_sync_age_seconds{instance="a",kind="nodes"}': "5x10",
            },
            "4m",
            "6m",
            {"kind": "pods"},
            "300",
        ),
        (
            "HamiPlaceEvictionsBlocked",
            {'hami_place_evictions_total{instance="a",result="Blocked"}': "0+1x40"},
            "30m",
            "32m",
            {},
            "",
        ),
        (
            "HamiPlaceDefragBudgetExhausted",
            {
                'hami_place_defrag_runs_total{instance="a",result="budget",trigger="rescue"}': "0+1x40",
                'hami_place_defrag_budget_left_moves{instance="a",window="hour"}': "0x40",
            },
            "30m",
            "32m",
            {},
            "",
        ),
        (
            "HamiPlaceDefragMovesFailing",
            {
                'hami_place_defrag_moves_total{instance="a",result="failed"}': "0x30 1x5 2x5 3x5 4x40",
                'hami_place_defrag_moves_total{instance="a",result="done"}': "0x30 1x50",
            },
            "52m",
            "54m",
            {},
            "4",
        ),
        ("HamiPlaceCRDOutdated", {'hami_place_crd_fields_pruned{instance="a"}': "2x20"}, "14m", "16m", {}, "2"),
    ],
    ids=[
        "failed open",
        "certificate",
        "cache stale",
        "evictions blocked",
        "budget spent",
        "moves failing",
        "CRD outdated",
    ],
)
def test_the_servers_other_alerts_fire_after_their_for_with_their_labels(  # noqa: PLR0917 - the fixtures and one case
    promtool: Path,
    tmp_path: Path,
    alert: str,
    series: dict[str, str],
    quiet: str,
    fired: str,
    labels: dict[str, str],
    value: str,
) -> None:
    """Each alert quiet before its condition has held for its `for`, then firing once, for the series it names (an
    admission webhook's fail-open counter of another name is not ours)."""
    fires_after(promtool, tmp_path, alert, series, quiet, fired, labels, value=value)


@pytest.mark.parametrize(
    ("failed", "done"),
    [("0x30 1x5 2x40", "0x80"), ("0x30 1x5 2x5 3x40", "0x30 1x5 2x5 3x40"), ("0+1x3 3x80", "0x80")],
    ids=["two failed, none made", "as many made as failed", "failed over an hour ago"],
)
def test_moves_failing_is_not_alerted_for_fewer_than_three_nor_as_many_as_were_made(
    promtool: Path, tmp_path: Path, failed: str, done: str
) -> None:
    """A move that fails now and then is a cluster that changed under a plan: no alert."""
    series = {
        'hami_place_defrag_moves_total{instance="a",result="failed"}': failed,
        'hami_place_defrag_moves_total{instance="a",result="done"}': done,
    }
    alert = "HamiPlaceDefragMovesFailing"
    check(promtool, tmp_path, series, [{"eval_time": "80m", "alertname": alert, "exp_alerts": []}])


def test_runs_refused_while_moves_are_left_this_hour_are_not_a_spent_budget(promtool: Path, tmp_path: Path) -> None:
    """Runs refused by another budget (per node, per namespace) while the hour's still allows a move: no alert."""
    series = {
        'hami_place_defrag_runs_total{instance="a",result="budget",trigger="rescue"}': "0+1x40",
        'hami_place_defrag_budget_left_moves{instance="a",window="hour"}': "1x40",
    }
    alert = "HamiPlaceDefragBudgetExhausted"
    check(promtool, tmp_path, series, [{"eval_time": "35m", "alertname": alert, "exp_alerts": []}])
