"""`kubectl hami-place defrag` against the sandbox: pause/resume flip the mode of the chart's policy ConfigMap (the
rest kept, the mode before the pause remembered), status reads the leader Lease and the run-labelled placements.

The ConfigMap is the chart's own, rendered with `helm template --show-only` and applied with kubectl; no server
runs (the verb reads and writes only API objects).
"""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import yaml

from kubectl_hami_place.core.defrag.policy import Mode, parse_policy, with_mode
from kubectl_hami_place.core.names import DEFRAG_RESUME_ANNOTATION
from sandbox import binaries
from sandbox.cluster import Sandbox
from tests.cluster.cli_harness import REPO, apply, declining, get, plugin

COMPONENT = "app.kubernetes.io/component"


@pytest.fixture(scope="module")
def helm() -> Path:
    return binaries.resolve("helm")


def chart_policy(helm: Path, namespace: str, release: str, *sets: str, labelled: bool = False) -> dict[str, Any]:
    """The chart's DefragPolicy ConfigMap for a release in `namespace`; without the component label unless asked, so
    that only the discovery test's ConfigMaps are found by label."""
    args = [str(helm), "template", release, str(REPO / "chart"), "-n", namespace]
    args += ["--show-only", "templates/defrag-policy.yaml"]
    for item in sets:
        args += ["--set", item]
    rendered = subprocess.run(args, capture_output=True, text=True, check=True, timeout=120).stdout
    config_map: dict[str, Any] = yaml.safe_load(rendered)
    if not labelled:
        del config_map["metadata"]["labels"][COMPONENT]
    return config_map


def stored(cluster: Sandbox, namespace: str, name: str) -> dict[str, Any]:
    """The ConfigMap as stored."""
    found = get(cluster, "configmap", name, "-n", namespace)
    assert found is not None
    return found


def test_pause_then_resume_restores_the_mode_and_keeps_the_rest(cluster: Sandbox, namespace: str, helm: Path) -> None:
    config_map = chart_policy(
        helm, namespace, "gd", "defrag.mode=on", "defrag.budgets.movesPerHour=3", "defrag.priorityThreshold.value=1000"
    )
    apply(cluster, config_map)
    name = config_map["metadata"]["name"]
    ref = f"{namespace}/{name}"
    written = config_map["data"]["policy.yaml"]

    refused = plugin(cluster, "defrag", "pause", "--policy", ref)
    assert refused.code == 2
    assert refused.error_lines == [
        f"error: refusing to pause defragmentation (policy {ref}: mode on -> off) without confirmation; "
        "pass --yes to confirm"
    ]
    for dry_run in ("client", "server"):
        tried = plugin(cluster, "defrag", "pause", "--policy", ref, "--yes", f"--dry-run={dry_run}")
        assert tried.code == 0, tried.err
        assert tried.out == f"defrag policy {ref}: mode on -> off ({dry_run} dry run)\n"
    declined = declining(cluster, "defrag", "pause", "--policy", ref)
    assert (declined.code, declined.error_lines) == (1, ["error: not confirmed; the policy was not changed"])
    assert stored(cluster, namespace, name)["data"]["policy.yaml"] == written

    paused = plugin(cluster, "defrag", "pause", "--policy", ref, "--yes", "-o", "json")
    assert paused.code == 0, paused.err
    assert paused.json() == {"policy": ref, "from": "on", "to": "off", "changed": True, "dryRun": "none"}
    after = stored(cluster, namespace, name)
    assert after["metadata"]["annotations"][DEFRAG_RESUME_ANNOTATION] == "on"
    assert parse_policy(after["data"]["policy.yaml"]) == parse_policy(with_mode(written, Mode.off))
    assert parse_policy(after["data"]["policy.yaml"]).budgets.moves_per_hour == 3

    again = plugin(cluster, "defrag", "pause", "--policy", ref, "--yes")
    assert again.code == 0 and again.out == f"defrag policy {ref}: mode is already off; nothing changed\n"

    status = plugin(cluster, "defrag", "status", "--policy", ref, "-o", "json")
    assert status.code == 0, status.err
    shown = status.json()
    assert (shown["mode"], shown["resumeMode"], shown["valid"]) == ("off", "on", True)
    assert shown["says"]["namespaces"] == f"*; never kube-system, {namespace} or the server's --exclude-namespace ones"
    assert shown["says"]["neverMoves"][-1] == "pods of priority 1000 or more (priorityThreshold)"
    table = plugin(cluster, "defrag", "status", "--policy", ref)
    assert "Mode:    off (resume restores on)" in table.out
    assert "\n               pods of priority 1000 or more (priorityThreshold)\n" in table.out

    resumed = plugin(cluster, "defrag", "resume", "--policy", ref, "--yes")
    assert resumed.code == 0 and resumed.out == f"defrag policy {ref}: mode off -> on\n"
    back = stored(cluster, namespace, name)
    assert DEFRAG_RESUME_ANNOTATION not in (back["metadata"].get("annotations") or {})
    assert parse_policy(back["data"]["policy.yaml"]) == parse_policy(written)


def test_resume_without_a_remembered_mode_goes_to_dry_run(cluster: Sandbox, namespace: str, helm: Path) -> None:
    config_map = chart_policy(helm, namespace, "gd", "defrag.mode=off")
    apply(cluster, config_map)
    ref = f"{namespace}/{config_map['metadata']['name']}"
    resumed = plugin(cluster, "defrag", "resume", "--policy", ref, "--yes", "-o", "json")
    assert resumed.code == 0, resumed.err
    assert (resumed.json()["from"], resumed.json()["to"]) == ("off", "dry-run")
    running = plugin(cluster, "defrag", "resume", "--policy", ref, "--yes")
    assert running.out == f"defrag policy {ref}: mode is already dry-run; nothing changed\n"
    table = plugin(cluster, "defrag", "status", "--policy", ref)
    logs = (
        f"kubectl logs -n {namespace} -l app.kubernetes.io/name=gpu-descheduler-webhook --tail=-1 | grep DefragDryRun"
    )
    assert f"Dry-run: nothing moves; the server's log says what would:\n  {logs}\n" in table.out, table.out


def policy_map(namespace: str, name: str, text: str) -> dict[str, Any]:
    """A ConfigMap holding `text` as its DefragPolicy, written by hand rather than rendered by the chart."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": {"policy.yaml": text},
    }


def test_a_policy_the_controller_cannot_read_is_shown_and_can_still_be_paused(cluster: Sandbox, namespace: str) -> None:
    text = (
        "apiVersion: scheduling.hami.placement.com/v1alpha1\nkind: DefragPolicy\nmode: on\nbudgets: {movesPerRun: -1}\n"
    )
    apply(cluster, policy_map(namespace, "bad", text))
    ref = f"{namespace}/bad"
    status = plugin(cluster, "defrag", "status", "--policy", ref)
    assert status.code == 0, status.err
    assert (
        "Problem: budgets.movesPerRun: -1 is negative; write 0 or more (the controller stays off until it is fixed)"
        in status.out
    )
    paused = plugin(cluster, "defrag", "pause", "--policy", ref, "--yes")
    assert paused.code == 0 and paused.out == f"defrag policy {ref}: mode on -> off\n"
    assert "movesPerRun: -1" in stored(cluster, namespace, "bad")["data"]["policy.yaml"]
    sideways = text.replace("mode: on", "mode: sideways")
    apply(cluster, policy_map(namespace, "sideways", sideways))
    unread = plugin(cluster, "defrag", "pause", "--policy", f"{namespace}/sideways", "--yes")
    assert (unread.code, unread.error_lines) == (
        1,
        [
            f"error: policy {namespace}/sideways: mode: 'sideways' is not a mode; write off, dry-run or on; fix the "
            "mode in policy.yaml first"
        ],
    )
    assert stored(cluster, namespace, "sideways")["data"]["policy.yaml"] == sideways, "left as it was"
    missing = plugin(cluster, "defrag", "status", "--policy", f"{namespace}/nothing")
    assert (missing.code, missing.error_lines) == (
        1,
        [
            f"error: no ConfigMap {namespace}/nothing: a server whose --defrag-policy names it moves nothing until it "
            "exists; create it with the DefragPolicy under policy.yaml (helm upgrade renders the chart's), or pass "
            "--policy with the ConfigMap the server reads"
        ],
    )


def test_status_reads_the_value_of_the_priority_class_the_policy_names(
    cluster: Sandbox, namespace: str, helm: Path
) -> None:
    """The server moves nothing while the PriorityClass the policy names is missing: status says so, as the server's
    Event does, and once the class exists shows its value."""
    tier = f"tier-{namespace}"
    config_map = chart_policy(helm, namespace, "gd", f"defrag.priorityThreshold.name={tier}")
    apply(cluster, config_map)
    ref = f"{namespace}/{config_map['metadata']['name']}"
    missing = plugin(cluster, "defrag", "status", "--policy", ref, "-o", "json")
    assert missing.code == 0, missing.err
    assert (missing.json()["valid"], missing.json()["problem"]) == (
        False,
        f"priorityThreshold.name: PriorityClass {tier} not found; create it, or write value: N (its VALUE in kubectl "
        "get priorityclass) instead",
    )
    cluster.kubectl("create", "priorityclass", tier, "--value=1000")
    try:
        shown = plugin(cluster, "defrag", "status", "--policy", ref, "-o", "json").json()
        assert shown["valid"] is True
        assert (
            shown["says"]["neverMoves"][-1]
            == f"pods of PriorityClass {tier}'s priority (1000) or more (priorityThreshold)"
        )
    finally:
        cluster.kubectl("delete", "priorityclass", tier, check=False)


def test_status_says_how_long_until_keep_rooms_window_opens(cluster: Sandbox, namespace: str, helm: Path) -> None:
    """A window written around the real clock in Kolkata's hours (UTC+05:30), opening in two hours: status reads the
    clock and the zone and says so (in UTC hours it would open in seven and a half, or be open)."""
    now = datetime.now(ZoneInfo("Asia/Kolkata"))
    later, after = now + timedelta(hours=2), now + timedelta(hours=3)
    window = f"{later:%H:%M}-{after:%H:%M}"
    config_map = chart_policy(
        helm,
        namespace,
        "gd",
        "defrag.keepRoom.enabled=true",
        f"defrag.keepRoom.window={window}",
        "defrag.keepRoom.timeZone=Asia/Kolkata",
    )
    apply(cluster, config_map)
    shown = plugin(
        cluster, "defrag", "status", "--policy", f"{namespace}/{config_map['metadata']['name']}", "-o", "json"
    )
    assert shown.code == 0, shown.err
    assert shown.json()["keepRoomOpensIn"] in {"1h59m", "2h"} or shown.json()["keepRoomOpensIn"].startswith("1h59m")


def test_status_and_history_read_the_leader_and_the_runs_placements(
    cluster: Sandbox, namespace: str, helm: Path
) -> None:
    release = f"r{namespace}"
    config_map = chart_policy(helm, namespace, release, "defrag.budgets.movesPerHour=5")
    # The chart keeps the leader Lease in the Leases' own namespace and names it on the policy: status reads it there.
    leases = config_map["metadata"]["annotations"]["scheduling.hami.placement.com/lease-namespace"]
    assert leases == f"{release}-webhook-leases"
    cluster.kubectl("create", "namespace", leases)
    try:
        status_and_history(cluster, namespace, leases, config_map)
    finally:
        cluster.kubectl("delete", "namespace", leases, "--wait=false", check=False)


def status_and_history(cluster: Sandbox, namespace: str, leases: str, config_map: dict[str, Any]) -> None:
    """The status and history test's body, its leader Lease in `leases`."""
    run = f"run-{namespace}"
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "hami-place-defrag-leader", "namespace": leases},
        "spec": {"holderIdentity": "server-a", "renewTime": now, "acquireTime": now, "leaseDurationSeconds": 3600},
    }
    moves = [
        {
            "apiVersion": "scheduling.hami.placement.com/v1",
            "kind": "HamiPodPlacement",
            "metadata": {
                "name": f"move-{pod}-0123456789ab",
                "namespace": namespace,
                "labels": {"scheduling.hami.placement.com/defrag-run": run},
                "annotations": {"scheduling.hami.placement.com/defrag-from-node": "gpu-a100-0", **cards},
            },
            "spec": {
                "reqID": "0123456789ab",
                "podSelector": {"matchLabels": {"app": pod}},
                "nodeName": "gpu-a100-1",
                "gpuDevices": ["gpu-0"],
                "evictPod": pod,
            },
        }
        for pod, cards in (
            # x as the controller writes a move now; y as before its cards were written.
            (
                "x",
                {
                    "scheduling.hami.placement.com/defrag-from-cards": "gpu-1",
                    "scheduling.hami.placement.com/defrag-to-cards": "gpu-0",
                },
            ),
            ("y", {}),
        )
    ]
    apply(cluster, config_map, lease, *moves)
    ref = f"{namespace}/{config_map['metadata']['name']}"

    status = plugin(cluster, "defrag", "status", "--policy", ref, "-o", "json")
    assert status.code == 0, status.err
    shown = status.json()
    assert shown["mode"] == "dry-run" and shown["leader"]["holder"] == "server-a" and shown["leader"]["current"]
    assert shown["budgets"]["movesPerHour"] == 5
    assert shown["usedLastHour"]["moves"] >= 2 and shown["usedLastHour"]["perNode"]["gpu-a100-0"] >= 2
    (ours,) = [r for r in shown["runs"] if r["run"] == run]
    assert (ours["moves"], ours["results"]) == (2, {"Pending": 2})
    assert {m["pod"] for m in shown["latestRunMoves"]} == {f"{namespace}/x", f"{namespace}/y"}
    table = plugin(cluster, "defrag", "status", "--policy", ref)
    assert "Leader:  server-a" in table.out and f"Moves of run {run}" in table.out

    listed = plugin(cluster, "defrag", "history", "--run", run, "-o", "json")
    assert listed.code == 0, listed.err
    assert sorted(m["pod"] for m in listed.json()["moves"]) == [f"{namespace}/x", f"{namespace}/y"]
    assert {(m["from"], m["to"], m["result"]) for m in listed.json()["moves"]} == {
        ("gpu-a100-0", "gpu-a100-1", "Pending")
    }
    assert sorted((m["pod"], m["fromCards"], m["toCards"]) for m in listed.json()["moves"]) == [
        (f"{namespace}/x", ["gpu-1"], ["gpu-0"]),
        (f"{namespace}/y", [], []),
    ]
    rows = plugin(cluster, "defrag", "history", "--run", run).out.splitlines()
    assert sorted(row.split()[3:6] for row in rows if f"{namespace}/" in row) == [
        [f"{namespace}/x", "gpu-a100-0/gpu-1", "gpu-a100-1/gpu-0"],
        [f"{namespace}/y", "gpu-a100-0", "gpu-a100-1"],
    ], rows
    mine = plugin(cluster, "defrag", "history", "-n", namespace, "-o", "json")
    assert sorted(m["pod"] for m in mine.json()["moves"]) == [f"{namespace}/x", f"{namespace}/y"]
    assert plugin(cluster, "defrag", "history", "--run", run, "-n", "default", "-o", "json").json()["moves"] == []
    wide = plugin(cluster, "defrag", "history", "--run", run, "-o", "wide")
    assert "PLACEMENT" in wide.out and "move-x-0123456789ab" in wide.out
    assert "PLACEMENT" not in plugin(cluster, "defrag", "history", "--run", run).out


def test_the_policy_is_found_by_its_label_when_not_named(cluster: Sandbox, namespace: str, helm: Path) -> None:
    labelled = cluster.kubectl("get", "configmaps", "-A", "-l", f"{COMPONENT}=defrag-policy", "-o", "name")
    if labelled.stdout.strip():
        pytest.skip("a reused sandbox (make sandbox-up) holds a DefragPolicy of its own; a fresh one runs this test")
    first = chart_policy(helm, namespace, "one", labelled=True)
    apply(cluster, first)
    try:
        found = plugin(cluster, "defrag", "status", "-o", "json")
        assert found.code == 0, found.err
        assert found.json()["policy"] == f"{namespace}/one-defrag-policy"
        second = chart_policy(helm, "default", "two", labelled=True)
        apply(cluster, second)
        several = plugin(cluster, "defrag", "pause", "--yes")
        assert several.code == 1
        assert several.error_lines == [
            f"error: several DefragPolicy ConfigMaps: default/two-defrag-policy, {namespace}/one-defrag-policy; "
            "pass --policy NAMESPACE/NAME"
        ]
        narrowed = plugin(cluster, "defrag", "status", "-n", namespace, "-o", "json")
        assert narrowed.code == 0, narrowed.err
        assert narrowed.json()["policy"] == f"{namespace}/one-defrag-policy"
        paused = plugin(cluster, "defrag", "pause", "-n", "default", "--yes")
        assert paused.code == 0 and paused.out == "defrag policy default/two-defrag-policy: mode dry-run -> off\n"
        elsewhere = plugin(cluster, "defrag", "status", "-n", "kube-public")
        assert elsewhere.error_lines == [
            "error: no DefragPolicy ConfigMap (label app.kubernetes.io/component=defrag-policy) in namespace "
            "kube-public; install the chart, or pass --policy NAMESPACE/NAME"
        ]
    finally:
        for where in (namespace, "default"):
            cluster.kubectl("delete", "configmap", "-n", where, "-l", f"{COMPONENT}=defrag-policy", "--wait=true")
    none = plugin(cluster, "defrag", "status")
    assert none.code == 1
    assert none.error_lines == [
        "error: no DefragPolicy ConfigMap (label app.kubernetes.io/component=defrag-policy) in any namespace; "
        "install the chart, or pass --policy NAMESPACE/NAME"
    ]
