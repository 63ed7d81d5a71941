"""What `defrag status` reports: the leader from the Lease, the runs, and the budgets used in the last hour."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest

from kubectl_hami_place.core.defrag.budget import MoveRecord
from kubectl_hami_place.core.defrag.policy import parse_policy, with_threshold
from kubectl_hami_place.core.defrag.report import (
    MAX_MOVES_ANSWERED,
    Leader,
    PolicySays,
    RunSummary,
    Used,
    leader_of,
    moves_document,
    moves_from_document,
    policy_says,
    runs_of,
    used_in_hour,
)
from kubectl_hami_place.core.errors import MovesDocumentError

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def lease(holder: str, renewed_ago: float, duration: int = 15) -> dict:
    """A leader Lease renewed `renewed_ago` seconds before NOW."""
    renewed = (NOW - timedelta(seconds=renewed_ago)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {"spec": {"holderIdentity": holder, "renewTime": renewed, "leaseDurationSeconds": duration}}


def test_the_leader_holds_the_lease_until_it_lapses() -> None:
    assert leader_of(lease("server-a", 5), NOW).describe() == "server-a"
    lapsed = leader_of(lease("server-a", 20), NOW)
    assert not lapsed.current
    assert lapsed.describe() == "none; last server-a (lease lapsed at 11:59:55 UTC)"
    assert leader_of(None, NOW).describe() == "none"


def test_the_leader_is_read_whole_from_the_lease() -> None:
    renewed = NOW - timedelta(seconds=5)
    assert leader_of(lease("server-a", 5), NOW) == Leader("server-a", renewed, renewed + timedelta(seconds=15), True)


def test_a_lease_ends_at_the_instant_its_duration_runs_out() -> None:
    """As client-go's leader election counts it: held while renew time + duration is after now."""
    assert not leader_of(lease("server-a", 15), NOW).current
    assert leader_of(lease("server-a", 14.999), NOW).current


def test_a_lease_never_renewed_is_read_from_its_acquire_time() -> None:
    spec = lease("server-a", 5)["spec"]
    spec["acquireTime"] = spec.pop("renewTime")
    renewed = NOW - timedelta(seconds=5)
    assert leader_of({"spec": spec}, NOW) == Leader("server-a", renewed, renewed + timedelta(seconds=15), True)


@pytest.mark.parametrize(
    ("renewed", "duration", "current"), [("9999-12-31T23:59:59Z", 15, True), ("0001-01-01T00:00:00Z", -15, False)]
)
def test_a_lease_renewed_at_the_ends_of_time_is_read(renewed: str, duration: int, current: bool) -> None:
    """`defrag status` raised OverflowError on such a Lease, written by hand or by a replica's clock gone wrong."""
    leader = leader_of({"spec": {"holderIdentity": "x", "renewTime": renewed, "leaseDurationSeconds": duration}}, NOW)
    assert (leader.current, leader.expires is not None and leader.expires.year) == (current, 9999 if current else 1)


def test_a_lease_with_a_holder_but_no_time_is_a_lapsed_leader() -> None:
    """`defrag status` still names the last holder, without a time it cannot know."""
    leader = leader_of({"spec": {"holderIdentity": "server-a", "leaseDurationSeconds": 15}}, NOW)
    assert leader == Leader("server-a", None, None, False)
    assert leader.describe() == "none; last server-a (lease lapsed)"


def test_a_current_leader_says_the_watches_it_may_not_keep_on_its_lease() -> None:
    """Read from the annotation the holder writes at each renewal; of a lapsed holder nothing (it may have been
    granted since); each name checked, since anyone who may write the Lease may write it."""
    said = lease("server-a", 5) | {
        "metadata": {"annotations": {"scheduling.hami.placement.com/forbidden-watches": "namespaces,csinodes"}}
    }
    assert leader_of(said, NOW).forbidden == ("csinodes", "namespaces")
    assert leader_of(said | {"spec": lease("server-a", 20)["spec"]}, NOW).forbidden == ()
    hostile = "csinodes, ../../api,\x1b[31mred, ,Nodes,namespaces,csinodes"
    said["metadata"]["annotations"]["scheduling.hami.placement.com/forbidden-watches"] = hostile
    assert leader_of(said, NOW).forbidden == ("csinodes", "namespaces")
    said["metadata"]["annotations"]["scheduling.hami.placement.com/forbidden-watches"] = ",".join(
        f"w{n:02}" for n in range(40)
    )
    assert leader_of(said, NOW).forbidden == tuple(f"w{n:02}" for n in range(32)), "at most 32 read"
    for broken in ({"scheduling.hami.placement.com/forbidden-watches": ["csinodes"]}, "csinodes", None):
        assert leader_of(said | {"metadata": {"annotations": broken}}, NOW).forbidden == ()
    assert leader_of(said | {"metadata": "csinodes"}, NOW).forbidden == ()


def test_the_leaders_last_decisions_are_read_from_its_lease_a_lapsed_ones_too() -> None:
    """What the controller did or would do (a dry-run leaves no placement): each says when, so a lapsed holder's last
    words are still its last decisions, unlike its forbidden watches, which may have been granted since."""
    entry = {
        "time": "2026-12-01T11:59:00Z",
        "run": "20261201-115900-ab12",
        "trigger": "rescue team-a/big",
        "moves": 1,
        "dryRun": True,
        "outcome": "would move team-a/q (dry-run)",
    }
    annotations = {
        "scheduling.hami.placement.com/last-decisions": orjson.dumps([entry]).decode(),
        "scheduling.hami.placement.com/forbidden-watches": "csinodes",
    }
    said = lease("server-a", 20) | {"metadata": {"annotations": annotations}}
    lapsed = leader_of(said, NOW)
    assert (lapsed.current, lapsed.forbidden) == (False, ())
    assert [d.to_data() for d in lapsed.decisions] == [entry]
    assert leader_of(said | {"spec": lease("server-a", 5)["spec"]}, NOW).decisions == lapsed.decisions
    assert leader_of(said | {"metadata": {"annotations": {}}}, NOW).decisions == ()


def record(run: str, minutes_ago: float, result: str = "Evicted", node: str = "n1", ns: str = "a") -> MoveRecord:
    """A move."""
    return MoveRecord(run, f"{ns}/p{minutes_ago}", ns, node, NOW - timedelta(minutes=minutes_ago), result)


def test_runs_newest_first_with_their_results() -> None:
    history = [record("r1", 90), record("r2", 10), record("r2", 9, "Blocked"), record("r1", 89, "Pending")]
    runs = runs_of(history)
    assert [(r.run_id, r.moves) for r in runs] == [("r2", 2), ("r1", 2)]
    assert runs[0].describe_results() == "Blocked: 1, Evicted: 1"
    assert runs == (
        RunSummary("r2", NOW - timedelta(minutes=10), 2, {"Evicted": 1, "Blocked": 1}),
        RunSummary("r1", NOW - timedelta(minutes=90), 2, {"Evicted": 1, "Pending": 1}),
    )


def test_used_counts_only_spent_moves_of_the_last_hour() -> None:
    history = [record("r1", 90), record("r2", 10), record("r2", 9, "Blocked"), record("r3", 5, node="n2", ns="b")]
    used = used_in_hour(history, NOW)
    assert used.hour == 2 and used.per_node == {"n1": 1, "n2": 1} and used.per_namespace == {"a": 1, "b": 1}


def test_the_hour_used_holds_a_move_made_now_and_not_one_made_an_hour_ago() -> None:
    """The same window `budget.allowance` spends: a move exactly an hour old no longer counts."""
    history = [record("r1", 60, node="n1", ns="a"), record("r2", 0, node="n2", ns="b")]
    assert used_in_hour(history, NOW) == Used(1, {"n2": 1}, {"b": 1})


def test_the_servers_answer_gives_back_the_moves_and_whether_their_seals_were_checked() -> None:
    """Through JSON, as the plugin reads it: every field, the empty ones (no replacement yet) too."""
    full = replace(
        record("r1", 3),
        to_node="n2",
        replacement="a/p3-new",
        placement="move-p3-0123456789ab",
        from_cards=("gpu-1", "gpu-12"),
        to_cards=("gpu-0",),
    )
    history = (full, record("r2", 1, "Pending"))
    for sealed in (True, False):
        answer = orjson.loads(orjson.dumps(moves_document(history, seals_checked=sealed)))
        assert moves_from_document(answer) == (history, sealed)


def test_a_move_off_no_node_comes_back_from_the_servers_answer() -> None:
    """A move whose placement recorded no from-node is answered with `from: null`; `history` shows it as `-`."""
    history = (replace(record("r1", 3), from_node=""),)
    answer = orjson.loads(orjson.dumps(moves_document(history, seals_checked=True)))
    assert moves_from_document(answer) == (history, True)


def test_the_cards_of_a_move_are_answered_by_name_and_an_older_servers_answer_without_them_reads_as_none() -> None:
    moved = replace(record("r1", 3), to_node="n2", from_cards=("gpu-1",), to_cards=("gpu-0", "gpu-3"))
    [data] = moves_document([moved], seals_checked=True)["moves"]
    assert (data["from"], data["fromCards"], data["to"], data["toCards"]) == ("n1", ["gpu-1"], "n2", ["gpu-0", "gpu-3"])
    older = answer()
    del older["moves"][0]["fromCards"], older["moves"][0]["toCards"]
    [read], _ = moves_from_document(older)
    assert (read.from_cards, read.to_cards, read.source) == ((), (), "n1")


def test_an_answer_of_the_most_moves_allowed_is_read() -> None:
    document = moves_document([record("r1", 3)] * MAX_MOVES_ANSWERED, seals_checked=False)
    moves, sealed = moves_from_document(orjson.loads(orjson.dumps(document)))
    assert len(moves) == MAX_MOVES_ANSWERED and not sealed


def answer(**move: Any) -> dict[str, Any]:
    """A server's answer with one move, changed."""
    document = moves_document([record("r1", 3)], seals_checked=True)
    document["moves"][0].update(move)
    return orjson.loads(orjson.dumps(document))


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ([], "the answer is not an object with a boolean sealsChecked"),
        ({"moves": []}, "the answer is not an object with a boolean sealsChecked"),
        ({"sealsChecked": "yes", "moves": []}, "the answer is not an object with a boolean sealsChecked"),
        ({"sealsChecked": True}, f"moves must be a list of at most {MAX_MOVES_ANSWERED} moves"),
        ({"sealsChecked": True, "moves": [{}] * (MAX_MOVES_ANSWERED + 1)}, "moves must be a list of at most"),
        ({"sealsChecked": True, "moves": [7]}, "moves[0] is not an object"),
        (answer(run=""), "moves[0].run must be a non-empty string"),
        (answer(pod=None), "moves[0].pod must be a non-empty string"),
        (answer(to=5), "moves[0].to must be a non-empty string"),
        (answer(time="yesterday"), "moves[0].time 'yesterday' is not an RFC 3339 time"),
        (answer(fromCards="gpu-1"), "moves[0].fromCards must be a list of at most 16 card names gpu-<index>"),
        (answer(toCards=["gpu-1,gpu-2"]), "moves[0].toCards must be a list of at most 16 card names gpu-<index>"),
        (answer(toCards=["GPU-1"]), "moves[0].toCards must be a list of at most 16 card names gpu-<index>"),
        (answer(toCards=[1]), "moves[0].toCards must be a list of at most 16 card names gpu-<index>"),
        (answer(toCards={"gpu-1": 1}), "moves[0].toCards must be a list of at most 16 card names gpu-<index>"),
        (answer(toCards=["gpu-0"] * 17), "moves[0].toCards must be a list of at most 16 card names gpu-<index>"),
    ],
)
def test_an_answer_that_is_not_the_servers_shape_is_refused_with_the_field(document: object, message: str) -> None:
    with pytest.raises(MovesDocumentError, match="^" + re.escape(message)):
        moves_from_document(document)


HEAD = "apiVersion: scheduling.hami.placement.com/v1alpha1\nkind: DefragPolicy\n"
ALWAYS = (
    "DaemonSet, static, system-critical or controller-less pods, pods annotated "
    "scheduling.hami.placement.com/do-not-move"
)
RANKED = "for a rescue, pods of a higher priority than the pod it rescues"


def test_what_a_policy_lets_the_controller_do_is_said_part_by_part() -> None:
    """`defrag status` shows the policy as the server reads it, defaults filled in: an operator checks there that a
    field written took (a threshold, a goal) and which pods it will never touch."""
    written = parse_policy(
        HEAD
        + """
rescue: {pendingFor: 90s, reserveFor: 0s}
keepRoom: {enabled: true, interval: 90s, wholeFreeCards: {count: 2, type: H100}, maxStrandedShare: 0.125}
namespaces: {include: [team-*, ml], exclude: [team-b]}
budgets: {cooldown: 0s}
moveJobPods: true
priorityThreshold: {value: 1000}
minReplicas: 2
labelSelector: {matchLabels: {tier: batch}}
minPodAge: 15m
""",
        "hami",
    )
    says = policy_says(written)
    assert says == PolicySays(
        "pods Pending 1m30s or more on HAMi's fit reasons; their room not kept (reserveFor: 0s)",
        "every 1m30s: at least 2 whole free H100 card(s); stranded memory at most 12.5% of free memory",
        "team-*, ml but not team-b; never kube-system, hami or the server's --exclude-namespace ones",
        (
            ALWAYS,
            RANKED,
            "pods of priority 1000 or more (priorityThreshold)",
            "pods the labelSelector does not select (tier=batch)",
            "pods whose controller has fewer than 2 running pods (minReplicas)",
            "pods placed on their card less than 15m ago (minPodAge)",
        ),
    )
    assert says.lines()[3:] == (
        f"never moves: {ALWAYS}",
        f"             {RANKED}",
        "             pods of priority 1000 or more (priorityThreshold)",
        "             pods the labelSelector does not select (tier=batch)",
        "             pods whose controller has fewer than 2 running pods (minReplicas)",
        "             pods placed on their card less than 15m ago (minPodAge)",
    )
    assert says.to_data()["neverMoves"] == [
        ALWAYS,
        RANKED,
        "pods of priority 1000 or more (priorityThreshold)",
        "pods the labelSelector does not select (tier=batch)",
        "pods whose controller has fewer than 2 running pods (minReplicas)",
        "pods placed on their card less than 15m ago (minPodAge)",
    ]
    default = policy_says(parse_policy(HEAD + "keepRoom: {enabled: true, maxStrandedShare: null}", "hami"))
    assert default == PolicySays(
        "pods Pending 1m or more on HAMi's fit reasons; their room kept 1m",
        "every 5m: no goal set",
        "*; never kube-system, hami or the server's --exclude-namespace ones",
        (ALWAYS, RANKED, "a moved pod again within 1h (budgets.cooldown)", "a Job's pods (moveJobPods: false)"),
    )
    windowed = policy_says(parse_policy(HEAD + "keepRoom: {enabled: true, window: '01:30-05:00'}", "hami"))
    assert windowed.keep_room == ("every 5m between 01:30 and 05:00 UTC: stranded memory at most 20% of free memory")
    off = policy_says(parse_policy(HEAD + "rescue: {enabled: false}\nnamespaces: {include: []}", "hami"))
    assert (off.rescue, off.keep_room, off.namespaces) == (
        "off (rescue.enabled: false)",
        "off (keepRoom.enabled: false)",
        "none; never kube-system, hami or the server's --exclude-namespace ones",
    )


def test_ignore_pods_without_pdb_is_said_with_the_pods_it_keeps() -> None:
    covered_only = parse_policy(HEAD + "ignorePodsWithoutPDB: true", "hami")
    assert policy_says(covered_only).never_moves[-1] == "pods no PodDisruptionBudget covers (ignorePodsWithoutPDB)"


def test_local_storage_and_claims_are_said_when_the_policy_keeps_their_pods() -> None:
    kept = parse_policy(HEAD + "evictLocalStoragePods: false\nignorePvcPods: true", "hami")
    assert policy_says(kept).never_moves[-2:] == (
        "pods with an emptyDir or hostPath volume (evictLocalStoragePods: false)",
        "pods that mount a PersistentVolumeClaim (ignorePvcPods)",
    )
    said = policy_says(parse_policy(HEAD, "hami")).never_moves
    assert not [line for line in said if "volume" in line], "the defaults keep neither"


def test_a_node_selector_is_said_with_the_pods_it_keeps() -> None:
    scoped = parse_policy(HEAD + "nodeSelector: pool=inference", "hami")
    assert policy_says(scoped).never_moves[-1] == (
        "pods on, or onto, nodes the nodeSelector does not select (pool=inference)"
    )


def test_a_priority_threshold_by_name_is_said_with_its_value_once_read() -> None:
    """The plugin parses the ConfigMap itself and reads no PriorityClass: it says the class; the server's reading,
    its value too."""
    named = parse_policy(HEAD + "priorityThreshold: {name: high}", "hami")
    assert policy_says(named).never_moves[-1] == "pods of PriorityClass high's priority or more (priorityThreshold)"
    read = policy_says(with_threshold(named, 1000)).never_moves[-1]
    assert read == "pods of PriorityClass high's priority (1000) or more (priorityThreshold)"
