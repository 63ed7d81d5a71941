"""`defrag status|history|pause|resume` as -o json|yaml and the table print them, and the policy ConfigMap as they
read it. Reading and patching the cluster is covered by tests/cluster."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone

import pytest

from kubectl_hami_place.cli._common import DryRun
from kubectl_hami_place.cli._defrag import (
    History,
    ModeChange,
    PolicyView,
    Status,
    _policy_ref,
    _view,
    _with_threshold,
)
from kubectl_hami_place.cli._errors import CliError, UsageProblem
from kubectl_hami_place.cli.output import Table, Text
from kubectl_hami_place.core.defrag.budget import MoveRecord
from kubectl_hami_place.core.defrag.decisions import Decision
from kubectl_hami_place.core.defrag.policy import Budgets, DefragPolicy, Mode, parse_policy
from kubectl_hami_place.core.defrag.report import Leader, RunSummary, Used
from kubectl_hami_place.core.names import DEFRAG_RESUME_ANNOTATION
from kubectl_hami_place.kube.errors import KubeForbidden, KubeUnreachable

HEAD = "apiVersion: scheduling.hami.placement.com/v1alpha1\nkind: DefragPolicy\n"
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
# The moves a cluster in Berlin time reports: the table shows them in UTC.
BERLIN = timezone(timedelta(hours=1))
MOVED = MoveRecord(
    "run-2",
    "ns/a",
    "ns",
    "n1",
    datetime(2026, 12, 1, 12, 30, tzinfo=BERLIN),
    "Evicted",
    "n2",
    "ns/a-x",
    "move-a",
    from_cards=("gpu-1",),
    to_cards=("gpu-0", "gpu-2"),
)
STUCK = MoveRecord("run-2", "ns/b", "ns", "", NOW, "Pending")
RUNS = (
    RunSummary("run-2", NOW - timedelta(minutes=30), 2, {"Pending": 1, "Evicted": 1}),
    RunSummary("run-1", NOW - timedelta(hours=2), 1, {"Evicted": 1}),
)
LEADER = Leader("server-0", NOW, NOW + timedelta(seconds=15), True)
USED = Used(3, {"n9": 1, "n3": 2}, {"ns": 2, "zz": 1})
BUDGETS = Budgets(moves_per_run=4, moves_per_hour=12, moves_per_node=2, moves_per_namespace=5, cooldown=timedelta(0))
POLICY = DefragPolicy(mode=Mode.on, budgets=BUDGETS)
SAYS = Text(
    (
        "What the policy lets it do",
        "  rescue:      pods Pending 1m or more on HAMi's fit reasons; their room kept 1m",
        "  keep room:   off (keepRoom.enabled: false)",
        "  namespaces:  *; never kube-system or the server's --exclude-namespace ones",
        "  never moves: DaemonSet, static, system-critical or controller-less pods, pods annotated "
        "scheduling.hami.placement.com/do-not-move",
        "               for a rescue, pods of a higher priority than the pod it rescues",
        "               a Job's pods (moveJobPods: false)",
    )
)
RUNS_TABLE = Table(
    title="Last runs",
    columns=("RUN", "STARTED", "MOVES", "RESULTS"),
    rows=(
        ("run-2", "2026-12-01 11:30:00Z", "2", "Evicted: 1, Pending: 1"),
        ("run-1", "2026-12-01 10:00:00Z", "1", "Evicted: 1"),
    ),
    empty="none",
)


def config_map(text: str | None, annotations: dict[str, str] | None = None) -> dict[str, object]:
    data = {} if text is None else {"policy.yaml": text}
    return {"metadata": {"namespace": "hami", "name": "defrag", "annotations": annotations}, "data": data}


def test_status_shows_the_mode_leader_budgets_runs_and_the_newest_runs_moves() -> None:
    """The table is how an operator checks the controller: what limits it, how much of each it spent, and by whom."""
    view = PolicyView("hami/defrag", Mode.on, POLICY, "", "")
    status = Status(view, LEADER, USED, RUNS, sealed=True, latest=(MOVED, STUCK))
    assert status.to_blocks() == [
        Text(("Policy:  hami/defrag", "Mode:    on", "Leader:  server-0")),
        SAYS,
        Table(
            title="Budgets (rolling hour)",
            columns=("BUDGET", "LIMIT", "USED"),
            rows=(
                ("moves per hour", "12", "3"),
                ("moves per node", "2", "2 (n3)"),
                ("moves per namespace", "5", "2 (ns)"),
                ("moves per run", "4", "-"),
                ("cooldown", "0s", "-"),
            ),
        ),
        RUNS_TABLE,
        Table(
            title="Moves of run run-2",
            columns=("POD", "FROM", "TO", "RESULT"),
            rows=(("ns/a", "n1/gpu-1", "n2/gpu-0,gpu-2", "Evicted"), ("ns/b", "-", "-", "Pending")),
        ),
    ]


def test_status_of_a_paused_broken_or_dry_run_policy_says_what_follows() -> None:
    """A paused policy says what resume brings back; a broken one that the controller stays off (a broken dry-run one
    logs no moves either); a dry-run one where the moves it would make are logged. With no budgets read and no moves
    yet, nothing is spent by anyone."""
    idle = Used(0, {}, {})
    paused = Status(
        PolicyView("hami/defrag", Mode.off, None, "budgets.movesPerRun: -1 is negative", "on"), LEADER, idle, (), False
    )
    assert paused.to_blocks() == [
        Text(
            (
                "Policy:  hami/defrag",
                "Mode:    off (resume restores on)",
                "Leader:  server-0",
                "Problem: budgets.movesPerRun: -1 is negative (the controller stays off until it is fixed)",
            )
        ),
        Table(title="Last runs", columns=("RUN", "STARTED", "MOVES", "RESULTS"), rows=(), empty="none"),
    ]
    dry = Status(PolicyView("hami/defrag", Mode.dry_run, DefragPolicy(), "", "on"), LEADER, idle, (), False)
    assert dry.to_blocks()[0] == Text(
        (
            "Policy:  hami/defrag",
            "Mode:    dry-run",
            "Leader:  server-0",
            "Dry-run: nothing moves; the server's log says what would:",
            "  kubectl logs -n hami -l app.kubernetes.io/name=gpu-descheduler-webhook --tail=-1 | grep DefragDryRun",
        )
    )
    assert dry.to_blocks()[1] == Text(
        (
            "What the policy lets it do",
            "  rescue:      pods Pending 1m or more on HAMi's fit reasons; their room kept 1m",
            "  keep room:   off (keepRoom.enabled: false)",
            "  namespaces:  *; never kube-system or the server's --exclude-namespace ones",
            "  never moves: DaemonSet, static, system-critical or controller-less pods, pods annotated "
            "scheduling.hami.placement.com/do-not-move",
            "               for a rescue, pods of a higher priority than the pod it rescues",
            "               a moved pod again within 1h (budgets.cooldown)",
            "               a Job's pods (moveJobPods: false)",
        )
    ), "what the default policy lets it do, the cooldown among the pods it leaves"
    assert dry.to_blocks()[2] == Table(
        title="Budgets (rolling hour)",
        columns=("BUDGET", "LIMIT", "USED"),
        rows=(
            ("moves per hour", "12", "0"),
            ("moves per node", "2", "0"),
            ("moves per namespace", "4", "0"),
            ("moves per run", "4", "-"),
            ("cooldown", "1h", "-"),
        ),
    )
    broken = Status(
        PolicyView("hami/defrag", Mode.dry_run, None, "budgets.movesPerRun: -1 is negative", ""),
        LEADER,
        idle,
        (),
        False,
    )
    assert broken.to_blocks()[0] == Text(
        (
            "Policy:  hami/defrag",
            "Mode:    dry-run",
            "Leader:  server-0",
            "Problem: budgets.movesPerRun: -1 is negative (the controller stays off until it is fixed)",
        )
    ), "no dry-run log to read while the controller is off"
    unreadable = Status(PolicyView("hami/defrag", None, None, "not YAML", ""), LEADER, idle, (), False)
    assert unreadable.to_blocks()[0] == Text(
        (
            "Policy:  hami/defrag",
            "Mode:    unreadable",
            "Leader:  server-0",
            "Problem: not YAML (the controller stays off until it is fixed)",
        )
    )


def test_status_json_carries_the_budgets_and_what_was_spent_of_them() -> None:
    """A monitoring script reads this document: every field present, null where nothing is known."""
    view = PolicyView("hami/defrag", Mode.on, POLICY, "", "")
    status = Status(view, LEADER, USED, RUNS[:1], sealed=True, latest=(STUCK,))
    assert status.to_data() == {
        "policy": "hami/defrag",
        "mode": "on",
        "valid": True,
        "problem": None,
        "resumeMode": None,
        "leader": {
            "holder": "server-0",
            "current": True,
            "renewTime": "2026-12-01T12:00:00+00:00",
            "forbiddenWatches": [],
            "lastDecisions": [],
        },
        "says": {
            "rescue": "pods Pending 1m or more on HAMi's fit reasons; their room kept 1m",
            "keepRoom": "off (keepRoom.enabled: false)",
            "namespaces": "*; never kube-system or the server's --exclude-namespace ones",
            "neverMoves": [
                "DaemonSet, static, system-critical or controller-less pods, pods annotated "
                "scheduling.hami.placement.com/do-not-move",
                "for a rescue, pods of a higher priority than the pod it rescues",
                "a Job's pods (moveJobPods: false)",
            ],
        },
        "budgets": {
            "movesPerRun": 4,
            "movesPerHour": 12,
            "movesPerNode": 2,
            "movesPerNamespace": 5,
            "cooldown": "0s",
        },
        "usedLastHour": {"moves": 3, "perNode": {"n9": 1, "n3": 2}, "perNamespace": {"ns": 2, "zz": 1}},
        "runs": [
            {
                "run": "run-2",
                "started": "2026-12-01T11:30:00+00:00",
                "moves": 2,
                "results": {"Pending": 1, "Evicted": 1},
            }
        ],
        "latestRunMoves": [
            {
                "time": "2026-12-01T12:00:00+00:00",
                "run": "run-2",
                "pod": "ns/b",
                "namespace": "ns",
                "from": None,
                "fromCards": [],
                "to": None,
                "toCards": [],
                "result": "Pending",
                "replacement": None,
                "placement": "",
            }
        ],
        "sealsChecked": True,
        "keepRoomOpensIn": None,
    }
    assert status.to_blocks()[-1] == Table(
        title="Moves of run run-2", columns=("POD", "FROM", "TO", "RESULT"), rows=(("ns/b", "-", "-", "Pending"),)
    )
    nobody = Status(
        PolicyView("hami/defrag", None, None, "not YAML", "on"), Leader("", None, None, False), USED, (), False
    )
    assert nobody.to_data() | {"usedLastHour": None} == {
        "policy": "hami/defrag",
        "mode": None,
        "valid": False,
        "problem": "not YAML",
        "resumeMode": "on",
        "leader": {
            "holder": None,
            "current": False,
            "renewTime": None,
            "forbiddenWatches": [],
            "lastDecisions": [],
        },
        "says": None,
        "budgets": None,
        "usedLastHour": None,
        "runs": [],
        "latestRunMoves": [],
        "sealsChecked": False,
        "keepRoomOpensIn": None,
    }


def test_status_says_when_keep_room_is_outside_its_window_and_when_it_opens() -> None:
    """Keep-room that has not run for hours may only be waiting for its window: status says so, and when it opens."""
    written = HEAD + "keepRoom: {enabled: true, window: '22:00-06:00'}\n"
    view = PolicyView("hami/defrag", Mode.on, parse_policy(written, "hami"), "", "")
    idle = Used(0, {}, {})
    noon = datetime(2026, 12, 7, 12, 30, 44, 500000, tzinfo=UTC)
    closed = Status(view, LEADER, idle, (), False, now=noon)
    assert closed.to_data()["keepRoomOpensIn"] == "9h29m16s"
    first = closed.to_blocks()[0]
    assert isinstance(first, Text)
    assert first.lines[-1] == "Keep-room: outside its window (between 22:00 and 06:00 UTC); it opens in 9h29m16s"
    night = Status(view, LEADER, idle, (), False, now=noon.replace(hour=23))
    assert night.to_data()["keepRoomOpensIn"] is None
    night_first = night.to_blocks()[0]
    assert isinstance(night_first, Text) and not [line for line in night_first.lines if line.startswith("Keep-room")]
    unwindowed = replace(view, policy=parse_policy(HEAD + "keepRoom: {enabled: true}\n", "hami"))
    assert Status(unwindowed, LEADER, idle, (), False, now=noon).to_data()["keepRoomOpensIn"] is None
    off = replace(view, policy=parse_policy(HEAD + "keepRoom: {window: '22:00-06:00'}\n", "hami"))
    assert Status(off, LEADER, idle, (), False, now=noon).to_data()["keepRoomOpensIn"] is None, "keep-room is off"
    tokyo = replace(
        view,
        policy=parse_policy(HEAD + "keepRoom: {enabled: true, window: '22:00-06:00', timeZone: Asia/Tokyo}\n", "hami"),
    )
    # 12:30:44.5 UTC is 21:30:44.5 in Tokyo (UTC+9, no daylight saving time)
    tokyo_first = Status(tokyo, LEADER, idle, (), False, now=noon).to_blocks()[0]
    assert isinstance(tokyo_first, Text)
    assert tokyo_first.lines[-1] == (
        "Keep-room: outside its window (between 22:00 and 06:00 Asia/Tokyo); it opens in 29m16s"
    )


def test_status_says_each_watch_the_leader_may_not_keep_what_it_leaves_unread_and_what_to_grant() -> None:
    """The leader's Lease names the watches the API server forbids it: the operator reads there why pods stay put
    and which rule to add, without the server's log or its policy's Events (gone after an hour)."""
    leader = Leader("server-0", NOW, NOW + timedelta(seconds=15), True, ("csinodes", "other-pods"))
    status = Status(PolicyView("hami/defrag", Mode.on, None, "", ""), leader, Used(0, {}, {}), (), False)
    assert status.to_blocks()[0] == Text(
        (
            "Policy:  hami/defrag",
            "Mode:    on",
            "Leader:  server-0",
            "Unread:  the leader may not watch csinodes: CSI attach limits stay unread: pods that claim a volume stay "
            "on their nodes; grant list and watch on csinodes (the chart's ClusterRole does)",
            "Unread:  the leader may not watch other-pods: nothing is planned until it is allowed; grant list and "
            "watch on pods (the chart's ClusterRole does)",
        )
    )
    assert status.to_data()["leader"]["forbiddenWatches"] == ["csinodes", "other-pods"]


def test_status_shows_the_leaders_last_decisions_newest_first_before_the_runs() -> None:
    """In dry-run, the chart's default, no run leaves a placement: the leader's last decisions are where the operator
    reads what it would move, or why it found no plan, without the server's log."""
    would = Decision(
        datetime(2026, 12, 1, 12, 30, tzinfo=BERLIN), "20261201-113000-ab12", "rescue ns/big", 1, True, "would move"
    )
    none = Decision(NOW, "20261201-120000-cd34", "keep room", 0, True, "no plan: nothing to gain")
    leader = replace(LEADER, decisions=(none, would))
    status = Status(PolicyView("hami/defrag", Mode.dry_run, None, "", ""), leader, Used(0, {}, {}), (), False)
    blocks = status.to_blocks()
    assert blocks[1:] == [
        Text(
            (
                "Last decisions (the leader's, newest first)",
                "  2026-12-01 12:00:00Z  run 20261201-120000-cd34: keep room",
                "    no plan: nothing to gain",
                "  2026-12-01 11:30:00Z  run 20261201-113000-ab12: rescue ns/big",
                "    would move",
            )
        ),
        Table(title="Last runs", columns=("RUN", "STARTED", "MOVES", "RESULTS"), rows=(), empty="none"),
    ]
    assert status.to_data()["leader"]["lastDecisions"] == [
        {
            "time": "2026-12-01T12:00:00Z",
            "run": "20261201-120000-cd34",
            "trigger": "keep room",
            "moves": 0,
            "dryRun": True,
            "outcome": "no plan: nothing to gain",
        },
        {
            "time": "2026-12-01T11:30:00Z",
            "run": "20261201-113000-ab12",
            "trigger": "rescue ns/big",
            "moves": 1,
            "dryRun": True,
            "outcome": "would move",
        },
    ]


def test_history_lists_each_move_in_utc_with_its_replacement_and_placement(monkeypatch: pytest.MonkeyPatch) -> None:
    """Moves are compared across replicas' logs in UTC, whatever the local time zone; the wide columns name what to
    inspect next."""
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    time.tzset()
    history = History((MOVED, STUCK), sealed=False)
    blocks = history.to_blocks()
    monkeypatch.undo()
    time.tzset()
    assert blocks == [
        Table(
            columns=("TIME", "RUN", "POD", "FROM", "TO", "RESULT", "REPLACEMENT", "PLACEMENT"),
            rows=(
                ("2026-12-01 11:30:00Z", "run-2", "ns/a", "n1/gpu-1", "n2/gpu-0,gpu-2", "Evicted", "ns/a-x", "move-a"),
                ("2026-12-01 12:00:00Z", "run-2", "ns/b", "-", "-", "Pending", "-", ""),
            ),
            wide=frozenset({"REPLACEMENT", "PLACEMENT"}),
            empty="No moves: the controller has made none.",
        )
    ]
    assert history.to_data() == {
        "moves": [
            {
                "time": "2026-12-01T12:30:00+01:00",
                "run": "run-2",
                "pod": "ns/a",
                "namespace": "ns",
                "from": "n1",
                "fromCards": ["gpu-1"],
                "to": "n2",
                "toCards": ["gpu-0", "gpu-2"],
                "result": "Evicted",
                "replacement": "ns/a-x",
                "placement": "move-a",
            },
            History((STUCK,), False).to_data()["moves"][0],
        ],
        "sealsChecked": False,
    }


def test_pause_and_resume_say_what_they_changed_or_that_nothing_needed_to() -> None:
    """A second pause must read as harmless, and a dry run as not having changed the cluster."""
    assert ModeChange("hami/defrag", "on", "off", True, DryRun.none).to_blocks() == [
        Text(("defrag policy hami/defrag: mode on -> off",))
    ]
    assert ModeChange("hami/defrag", "off", "on", True, DryRun.server).to_blocks() == [
        Text(("defrag policy hami/defrag: mode off -> on (server dry run)",))
    ]
    same = ModeChange("hami/defrag", "off", "off", False, DryRun.client)
    assert same.to_blocks() == [Text(("defrag policy hami/defrag: mode is already off; nothing changed",))]
    assert same.to_data() == {"policy": "hami/defrag", "from": "off", "to": "off", "changed": False, "dryRun": "client"}


def test_the_policy_is_read_as_the_server_reads_it() -> None:
    """The server leaves its own namespace out and refuses a field it does not know: status must say the same."""
    assert _view(config_map(HEAD + "mode: on\n", {DEFRAG_RESUME_ANNOTATION: "dry-run"})) == PolicyView(
        "hami/defrag", Mode.on, parse_policy(HEAD + "mode: on\n", "hami"), "", "dry-run"
    )
    broken = _view(config_map(HEAD + "mode: off\nbudget: {}\n"))
    assert broken == PolicyView(
        "hami/defrag",
        Mode.off,
        None,
        "budget: unknown field; the fields here are apiVersion, kind, mode, namespaces, rescue, keepRoom, budgets, "
        "maxMovesPerPlan, moveJobPods, priorityThreshold, minReplicas, labelSelector, minPodAge, nodeSelector, "
        "ignorePodsWithoutPDB, evictLocalStoragePods, ignorePvcPods",
        "",
    )
    with pytest.raises(CliError) as caught:
        _view(config_map(None))
    assert caught.value.lines() == [
        "ConfigMap hami/defrag has no policy.yaml; pass --policy with the chart's defrag policy"
    ]


def test_a_priority_class_status_may_not_read_is_shown_by_its_name() -> None:
    """A user who may not read PriorityClasses, or a server that did not answer, leaves the threshold shown by the
    class's name; a value no PriorityClass can hold is the server's problem too. The reader is replaced here: the
    cluster test reads a real class and a missing one; these are the answers a real server does not give on demand."""
    view = _view(config_map(HEAD + "priorityThreshold: {name: high}\n"))
    asked: list[str] = []

    def refusing(error: Exception) -> object:
        def read(name: str) -> object:
            asked.append(name)
            raise error

        return read

    assert _with_threshold(view, refusing(KubeForbidden('priorityclasses "high" is forbidden'))) == view
    assert _with_threshold(view, refusing(KubeUnreachable("connection refused"))) == view
    assert asked == ["high", "high"]
    odd = _with_threshold(view, lambda name: "high")
    assert (odd.policy, odd.problem) == (
        None,
        "priorityThreshold.value: 'high' is not a whole number; write a PriorityClass's value, e.g. 100000",
    )
    plain = _view(config_map(HEAD + "priorityThreshold: {value: 5}\n"))
    assert _with_threshold(plain, refusing(AssertionError("no class named: nothing read"))) == plain


def test_policy_names_namespace_and_name_and_agrees_with_n() -> None:
    """`--policy` is split once, at the first slash; -n must name the same namespace, checked before any request."""
    assert _policy_ref(None, None) is None
    assert _policy_ref("hami/defrag", "hami") == ("hami", "defrag")
    with pytest.raises(UsageProblem) as caught:
        _policy_ref("hami/defrag", "other")
    assert caught.value.lines() == ["--policy hami/defrag is not in namespace other; give one of -n and --policy"]
    with pytest.raises(UsageProblem) as caught:
        _policy_ref("hami", None)
    assert caught.value.lines() == [
        "--policy 'hami' is not NAMESPACE/NAME; write e.g. --policy kube-system/gd-defrag-policy"
    ]
