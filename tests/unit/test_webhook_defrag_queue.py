"""The controller's wiring to its work queue, on the server's cache and its own watches filled by hand (nothing is
listed, no API call is made): which change adds which key, that a follower looks at no pod, and that no plan is
made while a watch is stale."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes.client import ApiClient

from kubectl_hami_place.core.defrag.keys import KEEP_ROOM, POLICY, RESUME, PodKey
from kubectl_hami_place.core.defrag.policy import DefragPolicy, Mode
from kubectl_hami_place.core.defrag.runs import RunDecision
from kubectl_hami_place.core.hami_config import HAMI_DEFAULTS
from kubectl_hami_place.core.names import ROOM_RESERVED_ANNOTATION, USE_GPUUUID_ANNOTATION
from kubectl_hami_place.core.planner import Move
from kubectl_hami_place.core.planner.apply import MoveCheck, Step
from kubectl_hami_place.core.reservation import reservation_value
from kubectl_hami_place.kube.client import Kube
from tests.unit.test_webhook_cache_planning import plain_pod, whole_node, whole_pod
from webhook import defrag
from webhook.cache import ClusterCache
from webhook.defrag import STALE_SECONDS, DefragController, DefragOptions, NotOn
from webhook.metrics import Metrics

BIG = PodKey("team-a", "big")


def controller(finished_ttl: int = 86400) -> DefragController:
    cache = ClusterCache(ApiClient(), "hami-scheduler", planning=True)
    kube = Kube(ApiClient(), "default", "", None)
    options = DefragOptions("ctl", "defrag-policy", "ctl", "me", interval=7, finished_ttl=finished_ttl)
    ctl = DefragController(kube, options, Metrics().defrag, cache, lambda: HAMI_DEFAULTS)
    ctl.events.record = lambda *args, **kwargs: None  # type: ignore[method-assign]  # no API server here
    return ctl


def pod(name: str, phase: str = "Pending", node: str = "") -> dict[str, Any]:
    return {
        "metadata": {"namespace": "team-a", "name": name, "uid": f"uid-{name}", "resourceVersion": "1"},
        "spec": {"schedulerName": "hami-scheduler", **({"nodeName": node} if node else {})},
        "status": {"phase": phase},
    }


def refusal(name: str) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "team-a", "name": f"{name}.1", "resourceVersion": "2", "managedFields": [{}]},
        "reason": "FailedScheduling",
        "involvedObject": {"kind": "Pod", "namespace": "team-a", "name": name, "uid": f"uid-{name}"},
        "message": "0/1 nodes are available: 1 1/1 CardInsufficientMemory.",
        "lastTimestamp": "2026-12-01T12:00:00Z",
    }


def policy_map(mode: str, version: str) -> dict[str, Any]:
    """The policy's ConfigMap as its watch holds it."""
    text = f"apiVersion: scheduling.hami.placement.com/v1alpha1\nkind: DefragPolicy\nmode: {mode}\n"
    metadata = {"namespace": "ctl", "name": "defrag-policy", "resourceVersion": version}
    return {"metadata": metadata, "data": {"policy.yaml": text}}


def read_policy(ctl: DefragController, mode: str, version: str = "1") -> None:
    """The policy ConfigMap written and read, as the POLICY key reads it."""
    ctl.policy_map.synced.set()
    ctl.policy_map.upsert(policy_map(mode, version))
    assert ctl.look(POLICY) is None and ctl.policy is not None and ctl.policy.mode.value == mode


def ready(ctl: DefragController) -> list[Any]:
    """The keys ready now, released again."""
    keys = ctl.queue.drain()
    for key in keys:
        ctl.queue.done(key)
    return keys


def test_a_pod_waiting_unscheduled_and_a_refusal_add_the_pods_key_others_none() -> None:
    ctl = controller()
    ctl.cache.pods.upsert(pod("big"))
    ctl.cache.pods.upsert(pod("small", "Running", node="gpu-0"))
    assert ready(ctl) == [BIG]
    ctl.failures.upsert(refusal("late"))
    assert ready(ctl) == [PodKey("team-a", "late")]
    [kept] = ctl._events_of(PodKey("team-a", "late"))
    assert kept["message"].endswith("CardInsufficientMemory.") and "managedFields" not in kept["metadata"]
    ctl.failures.remove("team-a", "late.1")
    assert ctl._events_of(PodKey("team-a", "late")) == [] and ready(ctl) == []
    ctl.policy_map.upsert({"metadata": {"namespace": "ctl", "name": "defrag-policy", "resourceVersion": "3"}})
    assert ready(ctl) == [POLICY]


def test_a_follower_looks_at_no_pod_and_a_new_leader_adds_every_key() -> None:
    ctl = controller()
    ctl.policy = DefragPolicy(mode=Mode.on)
    ctl.cache.pods.upsert(pod("big"))
    ready(ctl)
    ctl._resume = False
    assert ctl.look(BIG) is None and ctl._resume, "not leading: dropped, and the next leader resumes first"
    ctl._leading(True)
    assert set(ready(ctl)) == {RESUME, KEEP_ROOM, BIG}


def test_no_plan_while_a_watch_is_stale_the_key_is_looked_at_again_after_the_interval() -> None:
    ctl = controller()
    ctl.policy = DefragPolicy(mode=Mode.on)
    ctl._resume = False
    ctl.elector._valid_until = time.monotonic() + 60
    assert ctl.look(BIG) == timedelta(seconds=7), "the watches have not listed yet"
    reflectors = (*ctl.cache.reflectors(), *ctl.reflectors())
    for reflector in reflectors:
        reflector.last_sync = time.time()
    assert ctl.look(BIG) is None, "fresh, and no such pod: done"
    reflectors[-1].last_sync = time.time() - STALE_SECONDS - 1
    assert ctl.look(BIG) == timedelta(seconds=7)


def test_the_policy_is_looked_at_again_until_its_watch_has_listed() -> None:
    ctl = controller()
    assert ctl.look(POLICY) == timedelta(seconds=1)
    ctl.policy_map.synced.set()
    assert ctl.look(POLICY) is None and ctl.policy is None, "listed, and no ConfigMap: off"


def test_a_plan_counts_other_schedulers_pods_and_waits_for_their_list_which_admission_does_not() -> None:
    ctl = controller()
    read_policy(ctl, "on")
    ctl._resume = False
    ctl.elector._valid_until = time.monotonic() + 60
    for reflector in (*ctl.cache.reflectors(), *ctl.reflectors()):
        if reflector is not ctl.other_pods:
            reflector.synced.set()
            reflector.last_sync = time.time()
    assert ctl.cache.ready(), "admission answers without the other schedulers' pods"
    assert ctl.look(BIG) == timedelta(seconds=7), "no plan before the other schedulers' pods are listed"
    ctl.cache.nodes.upsert(whole_node("gpu-0", "a"))
    ctl.cache.pods.upsert(whole_pod("small", node="gpu-0"))
    ctl.other_pods.upsert(plain_pod("web-1", "gpu-0"))
    ctl.other_pods.upsert(plain_pod("web-2", "gpu-1"))
    [node] = ctl._snapshot().snapshot.nodes
    # 8 CPU less the web pod's 4.6 and the GPU pod's 2 + 0.5 sidecar + 0.1 overhead (web-2's node is not known).
    assert node.room is not None and node.room.cpu == 800


def leading(ctl: DefragController) -> None:
    """This replica leads, has resumed, and every watch has just listed."""
    ctl._resume = False
    ctl.elector._valid_until = time.monotonic() + 60
    for reflector in (*ctl.cache.reflectors(), *ctl.reflectors()):
        reflector.synced.set()
        reflector.last_sync = time.time()


def test_a_pause_holds_for_the_rest_of_the_batch_and_stops_a_run_before_its_next_move() -> None:
    """`defrag pause` while a batch goes on (a run's moves take minutes): the batch's next pod is looked at under the
    paused policy, and a run's guard, read between its moves and before each eviction, stops it."""
    ctl = controller()
    read_policy(ctl, "on")
    leading(ctl)
    seen: list[tuple[str, Mode | None]] = []

    def look_at_pod(key: PodKey, policy: DefragPolicy | None) -> None:
        seen.append((key.name, None if policy is None else policy.mode))
        ctl.policy_map.upsert(policy_map("off", "2"))

    ctl._look_at_pod = look_at_pod  # type: ignore[method-assign]
    ctl.work([PodKey("team-a", "a"), PodKey("team-a", "b")])
    assert seen == [("a", Mode.on), ("b", None)], "the second pod was looked at paused: its room alone"
    ctl.policy_map.upsert(policy_map("on", "3"))
    ctl._guard()
    ctl.policy_map.upsert(policy_map("dry-run", "4"))
    with pytest.raises(NotOn, match="the policy is now mode dry-run; the run stops before its next move"):
        ctl._guard()


def test_a_budget_lowered_while_a_run_goes_on_stops_it_before_the_move_it_no_longer_allows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The operator lowers movesPerHour while a run's first move is made: the guard reads the policy again before
    the next, and the budgets it then holds stop the run there. The moves themselves are replaced here (no API
    server): the race with a real run's seconds-long move cannot be had on demand."""
    ctl = controller()
    read_policy(ctl, "on")
    leading(ctl)
    ctl._history = ()  # the runs' history as read for the batch: no move yet
    made: list[str] = []

    def make_move(kube: Kube, move: Move, **kwargs: Any) -> None:
        made.append(move.pod)
        lowered = policy_map("on", "2")
        lowered["data"]["policy.yaml"] += "budgets:\n  movesPerHour: 1\n"
        ctl.policy_map.upsert(lowered)

    monkeypatch.setattr(defrag.moves, "make_move", make_move)
    monkeypatch.setattr(ctl, "_stale", lambda move: "")
    monkeypatch.setattr(ctl, "_settle", lambda move: "")
    planned = tuple(Move(f"team-a/p{i}", f"u{i}", "n1", ("GPU-0",), "n2", ("GPU-1",), "room") for i in range(2))
    done, why, result, failed = ctl._carry_out(RunDecision("r1", "rescue", None, planned, False, ""), HAMI_DEFAULTS)
    assert made == ["team-a/p0"] and (done, result, failed) == (1, "failed", ""), (
        "no move failed: the policy stopped it"
    )
    assert why == (
        "the policy changed and no longer allows the rest of the run "
        "(budget: 0 moves left this hour, the rescue needs 1); it stops"
    )


def test_a_move_whose_target_node_filled_since_the_plan_stops_the_run_before_its_pod_is_evicted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Web pods land on the target node between the plan and the move: evicting the moved pod then would leave its
    replacement Pending for CPU, so the run stops with nothing evicted. The move itself is replaced here (no API
    server): a pod landing in that instant cannot be had on demand."""
    ctl = controller()
    read_policy(ctl, "on")
    leading(ctl)
    ctl._history = ()
    target = whole_node("gpu-1", "a")
    register = target["metadata"]["annotations"]["hami.io/node-nvidia-register"]
    target["metadata"]["annotations"]["hami.io/node-nvidia-register"] = register.replace("GPU-a", "GPU-c")
    ctl.cache.nodes.upsert(whole_node("gpu-0", "a"))
    ctl.cache.nodes.upsert(target)
    ctl.cache.pods.upsert(whole_pod("small", node="gpu-0"))
    made: list[str] = []
    monkeypatch.setattr(defrag.moves, "make_move", lambda kube, move, **kwargs: made.append(move.pod))
    monkeypatch.setattr(ctl, "_settle", lambda move: "")
    move = Move("team-a/small", "uid-small", "gpu-0", ("GPU-a",), "gpu-1", ("GPU-c",), "room")
    decision = RunDecision("r1", "rescue", None, (move,), False, "")
    assert ctl._carry_out(decision, HAMI_DEFAULTS) == (1, "", "", "") and made == ["team-a/small"]
    ctl.other_pods.upsert(plain_pod("web-1", "gpu-1"))
    ctl.other_pods.upsert(plain_pod("web-2", "gpu-1"))
    assert ctl._carry_out(decision, HAMI_DEFAULTS) == (
        0,
        "team-a/small: node gpu-1 no longer has the cpu team-a/small asks (kube-scheduler's count)",
        "failed",
        "team-a/small",
    )
    assert made == ["team-a/small"], "the pod was evicted onto a node that no longer holds it"


def test_what_was_said_on_a_pod_and_its_retry_go_with_the_pod() -> None:
    """A leader runs for months: its memory of pods is bounded by the pods there are."""
    ctl = controller()
    for n in range(50):
        about = pod(f"p{n}")
        ctl._decided(
            RunDecision("r", "rescue", None, (), False, "no plan: x"), about, "rescue", f"uid-p{n}", HAMI_DEFAULTS
        )
        ctl._retry_at[f"uid-p{n}"] = time.monotonic() + 60
    assert len(ctl._said) == 50
    for n in range(50):
        ctl.cache.pods.upsert(pod(f"p{n}"))
        ctl.cache.pods.remove("team-a", f"p{n}")
    assert ctl._said == {} and ctl._retry_at == {}


def test_a_new_leader_reads_no_pod_a_placement_names_outside_its_own_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    """A placement labelled with a run is only a move when its pod annotation names a pod of its own namespace: a
    forged one (another namespace's pod, a name that is no name) is left alone. The read is replaced here only to
    show that none is made; the API server would have answered it."""
    ctl = controller()

    def forged(namespace: str, pod_name: str) -> dict[str, Any]:
        metadata = {
            "namespace": namespace,
            "name": f"move-{namespace}",
            "labels": {"scheduling.hami.placement.com/defrag-run": "r"},
            "annotations": {"scheduling.hami.placement.com/defrag-pod": pod_name},
        }
        return {"metadata": metadata, "spec": {}, "status": {"phase": "Pending"}}

    monkeypatch.setattr(
        defrag, "run_placements", lambda kube: [forged("team-b", "team-a/x"), forged("team-c", "team-c/a/b")]
    )
    read: list[tuple[str, str]] = []
    monkeypatch.setattr(defrag.cluster_reads, "get_pod", lambda kube, namespace, name: read.append((namespace, name)))
    ctl._resume_runs()
    assert read == []


def test_a_policy_read_under_a_finished_ttl_too_short_for_its_budgets_says_so_on_the_configmap() -> None:
    said: list[tuple[str, str, bool]] = []
    for ttl in (86400, 600):
        ctl = controller(finished_ttl=ttl)
        ctl.events.record = lambda about, reason, message, **kw: said.append((reason, message, kw["warning"]))  # type: ignore[method-assign]
        read_policy(ctl, "on")
    assert said[0] == ("DefragPolicyRead", "policy read: mode on", False)
    assert said[1][0] == "DefragPolicyRead" and said[1][2], said[1]
    assert said[1][1].startswith("policy read: mode on; but finished placements are deleted after 10m"), said[1]


def test_a_policy_the_server_fails_to_read_for_any_reason_leaves_the_controller_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Whatever goes wrong while a new version of the policy is read, the version read before no longer acts. The
    parser is replaced to raise: no document is known to make it fail other than with a PolicyError."""
    ctl = controller()
    read_policy(ctl, "on")

    def unreadable(text: str, server_namespace: str, also_out: tuple[str, ...]) -> DefragPolicy:
        raise RuntimeError("a parser bug")

    monkeypatch.setattr(defrag, "parse_policy", unreadable)
    ctl.policy_map.upsert(policy_map("on", "2"))
    with pytest.raises(RuntimeError):
        ctl._read_policy()
    assert ctl.policy is None


@pytest.mark.parametrize("mode", ["off", "unreadable"])
def test_a_paused_or_unreadable_policy_still_gives_a_kept_room_back_at_its_deadline(
    monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """`defrag pause` (or a policy that no longer parses) right after a rescue: nothing is planned or moved, but the
    Pending pod's narrowed card choice is given back once its room's deadline passed, not left until a resume. The
    patch is recorded here (no API server): what it writes is `release`'s, tested on plain data."""
    ctl = controller()
    read_policy(ctl, "on")
    leading(ctl)
    waiting = pod("big")
    past = datetime.now(UTC) - timedelta(minutes=5)
    room = reservation_value(["GPU-2"], past, "GPU-1,GPU-2", key=ctl.cache.room_key, pod="team-a/big", uid="uid-big")
    waiting["metadata"]["annotations"] = {USE_GPUUUID_ANNOTATION: "GPU-2", ROOM_RESERVED_ANNOTATION: room}
    ctl.cache.pods.upsert(waiting)
    patched: list[tuple[str, str, str]] = []
    monkeypatch.setattr(defrag, "change_pod_annotations", lambda kube, *named_change: patched.append(named_change[:3]))
    changed = policy_map("off", "2")
    if mode == "unreadable":
        changed["data"]["policy.yaml"] += "budgets: {movesPerRun: -1}\n"
    ctl.policy_map.upsert(changed)
    ctl.look(BIG)
    assert ctl.policy is None or ctl.policy.mode is Mode.off
    assert patched == [("team-a", "big", "uid-big")]


def test_a_move_past_its_deadline_evicts_its_replacement_only_while_leading_under_a_policy_in_mode_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A move that did not settle in time is given up by evicting its replacement (`_unpin`): not by a replica that
    lost the lease meanwhile (the next leader's look does it), nor under a policy paused or made dry-run. The
    settle's reads and the eviction are replaced here (no API server): the lease lost at that instant cannot be had
    on demand."""
    ctl = controller()
    ctl.options = DefragOptions("ctl", "defrag-policy", "ctl", "me", move_timeout=0.0)
    read_policy(ctl, "on")
    leading(ctl)
    monkeypatch.setattr(defrag, "move_step", lambda *args: MoveCheck(Step.waiting, "not yet"))
    monkeypatch.setattr(ctl, "_snapshot", lambda again=False: SimpleNamespace(snapshot=None))
    unpinned: list[str] = []
    monkeypatch.setattr(ctl, "_unpin", lambda move: unpinned.append(move.pod) or "; evicted")
    move = Move("team-a/x", "u", "n1", ("GPU-1",), "n2", ("GPU-9",), "room")
    assert ctl._settle(move).endswith("not yet; evicted") and unpinned == ["team-a/x"]
    ctl.policy_map.upsert(policy_map("dry-run", "2"))
    assert "once the policy's mode is on again" in ctl._settle(move) and unpinned == ["team-a/x"]
    ctl.policy_map.upsert(policy_map("on", "3"))
    ctl.elector._valid_until = 0.0
    assert "stopped leading" in ctl._settle(move) and unpinned == ["team-a/x"]


def test_a_new_term_forgets_the_rescues_an_earlier_term_followed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A replica that lost the lease and leads again must not report on, nor give back the room of, a rescue another
    leader made since: the pod's room annotation says what is kept now. (The resume's reads are left out: no API
    server here.)"""
    ctl = controller()
    monkeypatch.setattr(ctl, "_resume_runs", lambda: None)
    read_policy(ctl, "on")
    leading(ctl)
    now = datetime.now(UTC)
    move = Move("team-a/x", "u", "n1", ("GPU-1",), "n2", ("GPU-9",), "room")
    ctl._rescues[BIG] = defrag.Rescue(pod("big"), "uid-big", (move,), now, now, now + timedelta(minutes=1))
    ctl._leading(False)
    ctl._leading(True)
    ctl.look(RESUME)
    assert ctl._rescues == {}


def test_a_shorter_keep_room_interval_holds_from_the_policy_that_sets_it() -> None:
    ctl = controller()
    ctl._next_room = time.monotonic() + 3600
    ctl.policy_map.synced.set()
    shorter = policy_map("on", "2")
    shorter["data"]["policy.yaml"] += "keepRoom: {enabled: true, interval: 1m}\n"
    ctl.policy_map.upsert(shorter)
    ctl.look(POLICY)
    assert ctl._next_room <= time.monotonic() + 60


@pytest.mark.parametrize("lost", [False, True])
def test_a_new_leader_that_loses_the_lease_while_it_resumes_undoes_nothing_more(
    monkeypatch: pytest.MonkeyPatch, lost: bool
) -> None:
    """Resuming reads each move's pod (seconds each on a slow API server); a replica whose lease ran out meanwhile
    must not delete a placement the next leader may be following. The reads and the delete are replaced here: the
    lease lost during one read cannot be had on demand."""
    ctl = controller()
    leading(ctl)
    metadata = {
        "namespace": "team-a",
        "name": "move-1",
        "labels": {"scheduling.hami.placement.com/defrag-run": "r"},
        "annotations": {
            "scheduling.hami.placement.com/defrag-pod": "team-a/x",
            "scheduling.hami.placement.com/defrag-pod-uid": "uid-x",
        },
    }
    monkeypatch.setattr(defrag, "run_placements", lambda kube: [{"metadata": metadata, "spec": {}, "status": {}}])

    def get_pod(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
        if lost:
            ctl.elector._valid_until = 0.0
        return {"metadata": {"namespace": namespace, "name": name, "uid": "uid-x"}}

    monkeypatch.setattr(defrag.cluster_reads, "get_pod", get_pod)
    deleted: list[str] = []
    monkeypatch.setattr(defrag.placements, "delete_placement", lambda kube, namespace, name: deleted.append(name))
    ctl._resume_runs()
    assert deleted == ([] if lost else ["move-1"])


def test_the_servers_excluded_namespaces_are_out_of_every_policy_it_reads() -> None:
    ctl = controller()
    ctl.options = DefragOptions("ctl", "defrag-policy", "ctl", "me", excluded_namespaces=("team-a",))
    read_policy(ctl, "on")
    assert ctl.policy is not None and not ctl.policy.namespaces.allows("team-a")
    assert ctl.policy.namespaces.allows("team-b")
