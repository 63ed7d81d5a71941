"""The controller's wiring to its work queue, on the server's cache and its own watches filled by hand (nothing is
listed, no API call is made): which change adds which key, that a follower looks at no pod, and that no plan is
made while a watch is stale."""

from __future__ import annotations

import gc
import logging
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from kubernetes.client import ApiClient

from kubectl_hami_place.core.attach_limits import AttachLimits, Attachment
from kubectl_hami_place.core.defrag.budget import MoveRecord
from kubectl_hami_place.core.defrag.decisions import decisions_of
from kubectl_hami_place.core.defrag.keys import KEEP_ROOM, POLICY, RESUME, RETRY, BackedOff, PodKey
from kubectl_hami_place.core.defrag.policy import DefragPolicy, Mode
from kubectl_hami_place.core.defrag.runs import RunDecision
from kubectl_hami_place.core.hami_config import HAMI_DEFAULTS
from kubectl_hami_place.core.names import (
    DEFRAG_FROM_CARDS_ANNOTATION,
    DEFRAG_FROM_NODE_ANNOTATION,
    DEFRAG_POD_ANNOTATION,
    DEFRAG_POD_UID_ANNOTATION,
    DEFRAG_RUN_LABEL,
    DEFRAG_TO_CARDS_ANNOTATION,
    PLACEMENT_ANNOTATION,
    ROOM_RESERVED_ANNOTATION,
    USE_GPUUUID_ANNOTATION,
)
from kubectl_hami_place.core.planner import DO_NOT_MOVE, Move
from kubectl_hami_place.core.planner.apply import MoveCheck, Step
from kubectl_hami_place.core.reservation import reservation_value
from kubectl_hami_place.kube.client import Kube
from kubectl_hami_place.kube.errors import (
    BlockedByDisruptionBudget,
    KubeError,
    KubeForbidden,
    KubeNotFound,
    KubeUnreachable,
)
from tests.unit.test_webhook_cache_planning import plain_pod, whole_node, whole_pod
from webhook import defrag
from webhook.cache import ClusterCache
from webhook.defrag import STALE_SECONDS, DefragController, DefragOptions, NotLeading, NotOn
from webhook.metrics import Metrics

BIG = PodKey("team-a", "big")
HOSTNAME = "kubernetes.io/hostname"


def controller(finished_ttl: int = 86400, metrics: Metrics | None = None) -> DefragController:
    cache = ClusterCache(ApiClient(), "hami-scheduler", planning=True)
    kube = Kube(ApiClient(), "default", "", None)
    options = DefragOptions("ctl", "defrag-policy", "ctl", "me", interval=7, finished_ttl=finished_ttl)
    ctl = DefragController(kube, options, (metrics or Metrics()).defrag, cache, lambda: HAMI_DEFAULTS)
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
    metrics = Metrics()
    ctl = controller(metrics=metrics)
    ctl.policy = DefragPolicy(mode=Mode.on)
    ctl.cache.pods.upsert(pod("big"))
    ready(ctl)
    ctl._resume = False
    assert ctl.look(BIG) is None and ctl._resume, "not leading: dropped, and the next leader resumes first"
    ctl._leading(True)
    assert set(ready(ctl)) == {RESUME, KEEP_ROOM, BIG}
    assert metrics.registry.get_sample_value("hami_place_defrag_leader") == 1.0
    ctl._leading(False)
    assert metrics.registry.get_sample_value("hami_place_defrag_leader") == 0.0


@pytest.mark.parametrize("mode", [Mode.on, Mode.off])
def test_no_plan_while_a_watch_is_stale_the_key_is_looked_at_again_after_the_interval(mode: Mode) -> None:
    """Off, a pod is still looked at for the room kept for it, given back at its deadline: a look while a watch is
    stale must come again, or the pod keeps its narrowed card choice until it changes."""
    ctl = controller()
    ctl.policy = DefragPolicy(mode=mode)
    ctl._resume = False
    ctl.elector._valid_until = time.monotonic() + 60
    assert ctl.look(BIG) == timedelta(seconds=7), "the watches have not listed yet"
    reflectors = (*ctl.cache.reflectors(), *ctl.reflectors())
    for reflector in reflectors:
        reflector.last_sync = time.time()
    assert ctl.look(BIG) is None, "fresh, and no such pod: done"
    reflectors[-1].last_sync = time.time() - STALE_SECONDS - 1
    assert ctl.look(BIG) == timedelta(seconds=7)


def test_a_watch_rbac_forbids_is_said_once_and_a_plan_waits_only_for_those_it_cannot_go_without(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An operator's narrower ClusterRole: without claims, volumes, storage classes, CSINodes, VolumeAttachments or
    namespaces the plans go on, leaving what needs them unread (as the CLI does); without any other watch nothing is
    planned."""
    metrics = Metrics()
    ctl = controller(metrics=metrics)
    told: list[tuple[str, str, bool]] = []
    ctl.events.record = lambda about, reason, message, **kw: told.append((reason, message, kw["warning"]))  # type: ignore[method-assign]
    ctl.policy_map.upsert(policy_map("on", "1"))
    for reflector in (*ctl.cache.reflectors(), *ctl.reflectors()):
        reflector.last_sync = time.time()
    for reflector in (ctl.volumes, ctl.storage_capacities, ctl.csi_nodes, ctl.volume_attachments, ctl.namespaces):
        reflector.forbidden, reflector.last_sync = "403 Forbidden", None
    assert ctl._fresh(), "what a plan can go without is not waited for"
    sample = metrics.registry.get_sample_value
    assert told == [
        (
            "DefragWatchForbidden",
            f"cannot watch {kind} (403 Forbidden): {without}; grant list and watch on {kind} (the chart's ClusterRole"
            " does)",
            True,
        )
        for kind, without in (
            ("csinodes", "CSI attach limits stay unread: pods that claim a volume stay on their nodes"),
            ("csistoragecapacities", "where a capacity-checking driver may provision stays unread"),
            ("namespaces", "pods whose pod affinity picks namespaces by label stay on their nodes"),
            ("persistentvolumes", "pods that claim a volume stay on their nodes"),
            ("volumeattachments", "CSI attach limits stay unread: pods that claim a volume stay on their nodes"),
        )
    ]
    assert sample("hami_place_defrag_watch_forbidden", {"kind": "persistentvolumes"}) == 1
    assert sample("hami_place_defrag_watch_forbidden", {"kind": "persistentvolumeclaims"}) == 0
    assert sample("hami_place_defrag_watch_forbidden", {"kind": "csinodes"}) == 1
    assert sample("hami_place_defrag_watch_forbidden", {"kind": "volumeattachments"}) == 1
    assert ctl._fresh() and len(told) == 5, "said once"
    ctl.disruption_budgets.forbidden, ctl.disruption_budgets.last_sync = "403 Forbidden", None
    caplog.set_level(logging.INFO, logger=defrag.__name__)
    assert not ctl._fresh(), "no plan without the PodDisruptionBudgets"
    assert told[-1][1].startswith("cannot watch poddisruptionbudgets (403 Forbidden): nothing is planned until it")
    ctl.disruption_budgets.forbidden, ctl.disruption_budgets.last_sync = "", time.time()
    ctl.volumes.forbidden, ctl.volumes.last_sync = "", time.time()
    assert ctl._fresh() and len(told) == 6
    assert sample("hami_place_defrag_watch_forbidden", {"kind": "persistentvolumes"}) == 0
    assert "the watch of persistentvolumes is allowed again" in caplog.text


def test_a_watch_forbidden_before_the_policy_is_listed_is_told_on_it_once_it_is() -> None:
    """The watches open together and a 403 comes back before the ConfigMap's list: the Event waits for the ConfigMap
    (the log has said it already) rather than being lost."""
    ctl = controller()
    told: list[tuple[str, str]] = []
    ctl.events.record = lambda about, reason, message, **kw: told.append((reason, message))  # type: ignore[method-assign]
    for reflector in (*ctl.cache.reflectors(), *ctl.reflectors()):
        reflector.last_sync = time.time()
    ctl.volumes.forbidden, ctl.volumes.last_sync = "403 Forbidden", None
    ctl._fresh()
    assert told == [], "no ConfigMap to tell it on yet"
    ctl.policy_map.upsert(policy_map("on", "1"))
    ctl._fresh()
    ctl._fresh()
    assert [(reason, message.split(":")[0]) for reason, message in told] == [
        ("DefragWatchForbidden", "cannot watch persistentvolumes (403 Forbidden)")
    ]
    ctl.policy_map.remove("ctl", "defrag-policy")
    ctl.volumes.forbidden, ctl.volumes.last_sync = "", time.time()
    ctl._fresh()
    ctl.volumes.forbidden = "403 Forbidden"
    ctl._fresh()
    ctl.policy_map.upsert(policy_map("on", "2"))
    ctl._fresh()
    assert len(told) == 2, "forbidden again while the ConfigMap was away: told again on its return"


def test_the_leader_says_on_its_lease_each_watch_it_may_not_keep_until_it_may() -> None:
    """Written at each renewal (`defrag status` reads it there): the watches forbidden now, none once allowed."""
    ctl = controller()
    metadata = ctl.elector._body(None, transitions=0, acquired=True)["metadata"]
    assert "annotations" not in metadata
    ctl.csi_nodes.forbidden = ctl.other_pods.forbidden = ctl.cache.nodes.forbidden = "403 Forbidden"
    renewed = ctl.elector._body({"metadata": {"resourceVersion": "7"}}, transitions=0, acquired=False)["metadata"]
    assert renewed == {
        "name": "hami-place-defrag-leader",
        "namespace": "ctl",
        "resourceVersion": "7",
        "annotations": {"scheduling.hami.placement.com/forbidden-watches": "csinodes,nodes,other-pods"},
    }
    ctl.csi_nodes.forbidden = ctl.other_pods.forbidden = ctl.cache.nodes.forbidden = ""
    assert "annotations" not in ctl.elector._body(None, transitions=0, acquired=False)["metadata"]


@pytest.mark.parametrize(
    ("forbidden", "read"),
    [
        ((), ("claims", "attach", "classes", "capacities", "namespaces")),
        (("persistentvolumeclaims",), ("namespaces",)),
        (("persistentvolumes",), ("namespaces",)),
        (("csinodes",), ("namespaces",)),
        (("volumeattachments",), ("namespaces",)),
        (("storageclasses",), ("claims", "attach", "namespaces")),
        (("csidrivers",), ("claims", "attach", "namespaces")),
        (("csistoragecapacities",), ("claims", "attach", "classes", "namespaces")),
        (("namespaces",), ("claims", "attach", "classes", "capacities")),
    ],
)
def test_a_snapshot_leaves_out_what_a_forbidden_watch_would_read(
    forbidden: tuple[str, ...], read: tuple[str, ...]
) -> None:
    """As the CLI reads them when it may not list them: no claims without the volumes, CSINodes and VolumeAttachments
    too (a volume's attach limit unread, its pod stays on its node), no classes without the CSIDrivers too (each says
    whether a driver checks capacity), no capacities alone."""
    ctl = controller()
    ctl.volumes.upsert({"metadata": {"name": "pv", "resourceVersion": "1"}, "spec": {"capacity": {"storage": "1Gi"}}})
    claim = {"metadata": {"namespace": "ns", "name": "data", "resourceVersion": "1"}, "spec": {"volumeName": "pv"}}
    ctl.volume_claims.upsert(claim)
    ctl.storage_classes.upsert(
        {"metadata": {"name": "local", "resourceVersion": "1"}, "provisioner": "csi.example.com"}
    )
    checks = {"metadata": {"name": "csi.example.com", "resourceVersion": "1"}, "spec": {"storageCapacity": True}}
    ctl.csi_drivers.upsert(checks)
    capacity = {"metadata": {"namespace": "csi", "name": "c", "resourceVersion": "1"}, "storageClassName": "local"}
    ctl.storage_capacities.upsert(capacity)
    limits = {"drivers": [{"name": "csi.example.com", "nodeID": "gpu-0", "allocatable": {"count": 16}}]}
    ctl.csi_nodes.upsert({"metadata": {"name": "gpu-0", "resourceVersion": "1"}, "spec": limits})
    attached = {"attacher": "csi.example.com", "nodeName": "gpu-0", "source": {"persistentVolumeName": "pv"}}
    ctl.volume_attachments.upsert({"metadata": {"name": "csi-1", "resourceVersion": "1"}, "spec": attached})
    for reflector in ctl.reflectors():
        reflector.forbidden = "403 Forbidden" if reflector.kind in forbidden else ""
    snapshot = ctl._snapshot()
    volumes = snapshot.volumes
    found = (
        ("claims", volumes is not None and volumes.claims[("ns", "data")].volume == "pv" and "pv" in volumes.volumes),
        (
            "attach",
            volumes is not None
            and volumes.attach
            == AttachLimits({"gpu-0": {"csi.example.com": 16}}, (Attachment("gpu-0", "pv", "csi.example.com"),)),
        ),
        (
            "classes",
            volumes is not None
            and volumes.classes is not None
            and "local" in volumes.classes
            and volumes.capacity_drivers == {"csi.example.com"},
        ),
        ("capacities", volumes is not None and volumes.capacities is not None and len(volumes.capacities) == 1),
        ("namespaces", snapshot.namespace_labels is not None),
    )
    assert tuple(name for name, there in found if there) == read


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


def test_a_plan_picks_a_terms_namespaces_by_the_labels_the_namespace_watch_keeps() -> None:
    """A GPU pod on gpu-0 kept apart from the web pods of the namespaces labelled tier=front, another scheduler's web
    pod on gpu-1: with its namespace so labelled the GPU pod's replacement is kept off gpu-1; relabelled, it is not."""
    ctl = controller()
    leading(ctl)
    for name in ("gpu-0", "gpu-1"):
        ctl.cache.nodes.upsert(whole_node(name, "a"))
    small = whole_pod("small", node="gpu-0")
    front = {"matchLabels": {"tier": "front"}}
    term = {"labelSelector": {"matchLabels": {"app": "web"}}, "namespaceSelector": front, "topologyKey": HOSTNAME}
    small["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    ctl.cache.pods.upsert(small)
    ctl.other_pods.upsert(plain_pod("web-1", "gpu-1"))
    web = {"name": "web", "resourceVersion": "3", "labels": {"tier": "front"}}
    ctl.namespaces.upsert({"metadata": {**web, "annotations": {"a": "b"}}, "spec": {"finalizers": ["kubernetes"]}})
    assert ctl.namespaces.items() == [{"metadata": web}]
    read = ctl._snapshot(again=True)
    assert read.namespace_labels == {"web": {"tier": "front"}}
    [planned] = read.snapshot.pods
    assert (set(planned.kept_off), planned.stays) == ({"gpu-1"}, "")
    ctl.namespaces.upsert({"metadata": {**web, "resourceVersion": "4", "labels": {"tier": "back"}}})
    [planned] = ctl._snapshot(again=True).snapshot.pods
    assert (set(planned.kept_off), planned.stays) == (set(), "")


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


def moving_small(monkeypatch: pytest.MonkeyPatch) -> tuple[DefragController, dict[str, Any], list[str], RunDecision]:
    """A leader, mode on, whose run moves pod small from gpu-0's card GPU-a to gpu-1's GPU-c, made once as planned
    (the move itself replaced, recorded in the list): the controller, the pod as cached, the moves made, the run."""
    ctl = controller()
    read_policy(ctl, "on")
    leading(ctl)
    ctl._history = ()
    target = whole_node("gpu-1", "a")
    register = target["metadata"]["annotations"]["hami.io/node-nvidia-register"]
    target["metadata"]["annotations"]["hami.io/node-nvidia-register"] = register.replace("GPU-a", "GPU-c")
    ctl.cache.nodes.upsert(whole_node("gpu-0", "a"))
    ctl.cache.nodes.upsert(target)
    small = whole_pod("small", node="gpu-0")
    ctl.cache.pods.upsert(small)
    made: list[str] = []
    monkeypatch.setattr(defrag.moves, "make_move", lambda kube, move, **kwargs: made.append(move.pod))
    monkeypatch.setattr(ctl, "_settle", lambda move: "")
    move = Move("team-a/small", "uid-small", "gpu-0", ("GPU-a",), "gpu-1", ("GPU-c",), "room")
    decision = RunDecision("r1", "rescue", None, (move,), False, "")
    assert ctl._carry_out(decision, HAMI_DEFAULTS) == (1, "", "", "") and made == ["team-a/small"]
    return ctl, small, made, decision


def test_a_move_whose_target_node_filled_since_the_plan_stops_the_run_before_its_pod_is_evicted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Web pods land on the target node between the plan and the move: evicting the moved pod then would leave its
    replacement Pending for CPU, so the run stops with nothing evicted. The move itself is replaced here (no API
    server): a pod landing in that instant cannot be had on demand."""
    ctl, _, made, decision = moving_small(monkeypatch)
    ctl.other_pods.upsert(plain_pod("web-1", "gpu-1"))
    ctl.other_pods.upsert(plain_pod("web-2", "gpu-1"))
    assert ctl._carry_out(decision, HAMI_DEFAULTS) == (
        0,
        "team-a/small: node gpu-1 no longer has the cpu team-a/small asks (kube-scheduler's count)",
        "failed",
        "team-a/small",
    )
    assert made == ["team-a/small"], "the pod was evicted onto a node that no longer holds it"


@pytest.mark.parametrize("change", ["policy", "annotation"])
def test_a_pod_the_policy_or_its_owner_protects_since_the_plan_is_not_evicted(
    change: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between a run's plan and its move the operator narrows the policy's labelSelector, or the pod's owner
    annotates it do-not-move: the run stops with nothing evicted. The move itself is replaced here (no API server):
    the change landing in that instant cannot be had on demand."""
    ctl, small, made, decision = moving_small(monkeypatch)
    if change == "policy":
        narrowed = policy_map("on", "2")
        narrowed["data"]["policy.yaml"] += "labelSelector:\n  matchLabels: {app: web}\n"
        ctl.policy_map.upsert(narrowed)
        stopped = (
            "the policy changed and now keeps the run's next move from being made "
            "(team-a/small is not selected by the policy's labelSelector); it stops",
            "failed",
            "",
        )
    else:
        small["metadata"]["annotations"][DO_NOT_MOVE] = "true"
        small["metadata"]["resourceVersion"] = "12"
        ctl.cache.pods.upsert(small)
        stopped = (f"team-a/small: team-a/small is annotated {DO_NOT_MOVE}", "failed", "team-a/small")
    assert ctl._carry_out(decision, HAMI_DEFAULTS) == (0, *stopped)
    assert made == ["team-a/small"], "a pod the plan may no longer move was evicted"


def test_what_was_said_on_a_pod_and_its_retry_go_with_the_pod() -> None:
    """A leader runs for months: its memory of pods is bounded by the pods there are."""
    ctl = controller()
    for n in range(50):
        about = pod(f"p{n}")
        ctl._decided(
            RunDecision("r", "rescue", None, (), False, "no plan: x"), about, "rescue", f"uid-p{n}", HAMI_DEFAULTS
        )
        ctl._retry_at[f"uid-p{n}"] = time.monotonic() + 60
        ctl._backed_off[f"uid-p{n}"] = BackedOff(PodKey("team-a", f"p{n}"), 0, 3, 0.0)
    assert len(ctl._said) == 50
    for n in range(50):
        ctl.cache.pods.upsert(pod(f"p{n}"))
        ctl.cache.pods.remove("team-a", f"p{n}")
    assert ctl._said == {} and ctl._retry_at == {} and ctl._backed_off == {}


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


def heard(ctl: DefragController) -> list[tuple[str, str, bool]]:
    """The Events the controller records from now on: reason, message as recorded, whether a Warning."""
    said: list[tuple[str, str, bool]] = []
    ctl.events.record = lambda about, reason, message, **kw: said.append((reason, message, kw["warning"]))  # type: ignore[method-assign]
    return said


def counted(metrics: Metrics) -> dict[str, float]:
    """Every defragmentation series that is not zero, as `name{label=value}` (of a histogram, its count alone)."""
    found = {}
    for family in metrics.registry.collect():
        for sample in family.samples:
            timed = sample.name.endswith(("_created", "_sum", "_bucket"))  # times, not counts
            if sample.name.startswith("hami_place_defrag") and not timed and sample.value:
                labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
                found[f"{sample.name}{{{labels}}}"] = sample.value
    return found


def holding(name: str, card: str, mib: int) -> dict[str, Any]:
    """A pod running on gpu-0 holding `mib` MiB of `card`."""
    running = whole_pod(name, node="gpu-0")
    running["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"] = f"{card},NVIDIA,{mib},0:;"
    return running


def fragmented(ctl: DefragController) -> None:
    """gpu-0's GPU-a holds p (24 GiB), GPU-b holds q (10 GiB): big, refused for 32 GiB of one card, fits once q joins
    p on GPU-a."""
    ctl.cache.nodes.upsert(whole_node("gpu-0", "a"))
    ctl.cache.pods.upsert(holding("p", "GPU-a", 24576))
    ctl.cache.pods.upsert(holding("q", "GPU-b", 10240))
    big = whole_pod("big")
    big["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"] = "32768"
    ctl.cache.pods.upsert(big)
    ctl.failures.upsert(refusal("big"))


# The moves of a rescue, as the Lease keeps them (its trigger apart), and as its Events say them.
MOVED_Q = "moving team-a/q from gpu-0/gpu-1 to gpu-0/gpu-0"
MOVE_Q = f"{MOVED_Q} to rescue team-a/big (CardInsufficientMemory)"


def planned(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The triggers of the plans the controller makes from now on (each `decide_run`)."""
    made: list[str] = []
    real = defrag.decide_run

    def decide_run(*args: Any, **kwargs: Any) -> RunDecision:
        made.append(type(args[2]).__name__)
        return real(*args, **kwargs)

    monkeypatch.setattr(defrag, "decide_run", decide_run)
    return made


def on_lease(ctl: DefragController) -> list[tuple[str, str, int, bool, str]]:
    """The decisions the leader says on its Lease at its next renewal, newest first: (run, trigger, moves, dry-run,
    outcome), each read back as `defrag status` reads it."""
    metadata = ctl.elector._body(None, transitions=0, acquired=False)["metadata"]
    value = (metadata.get("annotations") or {}).get("scheduling.hami.placement.com/last-decisions")
    return [(d.run_id, d.trigger, d.moves, d.dry_run, d.outcome) for d in decisions_of(value)]


def test_a_dry_run_says_once_what_it_would_move_and_never_plans_onto_a_room_kept_for_another_pod(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The operator turns the controller on from what its dry-run said; a room kept for another rescued pod is no
    room for this one: planning onto it would take the cards that pod was promised. A dry run is not planned again
    before the interval (however often the pod or its Events change), then after twice as long each time."""
    metrics = Metrics()
    ctl, said = rescuing(metrics, dry_run=True)
    plans = planned(monkeypatch)
    assert ctl.look(BIG) == timedelta(seconds=7)
    assert timedelta(0) < ctl.look(BIG) <= timedelta(seconds=7)  # type: ignore[operator]
    assert plans == ["RescueTrigger"], "not planned for again before the interval"
    other = whole_pod("other")
    until = (datetime.now(UTC) + timedelta(minutes=5)).replace(microsecond=0)
    room = reservation_value(["GPU-a"], until, None, key=ctl.cache.room_key, pod="team-a/other", uid="uid-other")
    other["metadata"]["annotations"] |= {USE_GPUUUID_ANNOTATION: "GPU-a", ROOM_RESERVED_ANNOTATION: room}
    ctl.cache.pods.upsert(other)
    ctl._read = None  # the next batch reads the caches again
    ctl._retry_at.clear()  # the interval passed
    assert ctl.look(BIG) == timedelta(seconds=14), "the second look in a row without moves waits twice as long"
    assert plans == ["RescueTrigger"] * 2
    assert said == [
        ("DefragPolicyRead", "policy read: mode dry-run", False),
        (
            "DefragDryRun",
            "would move team-a/q from gpu-0/gpu-1 to gpu-0/gpu-0 (dry-run) to rescue team-a/big "
            "(CardInsufficientMemory)",
            False,
        ),
        (
            "DefragNoPlan",
            "no plan: no node can make room within the bounds: gpu-0: moving team-a/q would make room "
            "on gpu-1, but team-a/q fits no other card; gpu-0: CardCordoned: gpu-0 (GPU-a) is kept for team-a/other, "
            f"whose rescue freed it, until {until:%H:%M:%S} UTC",
            False,
        ),
    ]
    rescue = "rescue team-a/big (CardInsufficientMemory)"
    assert [entry[1:] for entry in on_lease(ctl)] == [
        (rescue, 0, True, said[2][1]),
        (rescue, 1, True, "would move team-a/q from gpu-0/gpu-1 to gpu-0/gpu-0 (dry-run)"),
    ], "what each look said, newest first, on the Lease: the moves without the trigger the entry names apart"
    read_policy(ctl, "dry-run", version="2")
    ctl._read = None
    assert ctl.look(BIG) == timedelta(seconds=7), "a new policy plans for every pod again now"
    assert len(on_lease(ctl)) == 2, "the same words, not said again on the pod, are not kept again"
    assert counted(metrics) == {
        "hami_place_defrag_policy_valid{}": 1.0,
        "hami_place_defrag_runs_total{result=dry_run,trigger=rescue}": 1.0,
        "hami_place_defrag_runs_total{result=no_plan,trigger=rescue}": 1.0,
        "hami_place_defrag_moves_total{result=dry_run}": 1.0,
        "hami_place_defrag_looks_total{key=pod}": 4.0,
        "hami_place_defrag_looks_total{key=policy}": 2.0,
        "hami_place_defrag_budget_left_moves{window=hour}": 12.0,
        "hami_place_defrag_budget_left_moves{window=run}": 4.0,
    }


def test_a_pod_backed_off_is_planned_for_again_within_an_interval_once_a_pod_leaves_its_node_or_a_node_comes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """kube-scheduler retries the pods it could not place when an assigned pod goes: a pod whose looks backed off (up
    to five minutes) is planned for again within one interval of its last look, not at the end of its backoff. A
    Pending pod deleted frees nothing, and pods leaving within an interval of the last that did bring nothing more
    forward."""
    ctl, _ = rescuing(Metrics(), dry_run=True)
    big = whole_pod("big", priority=5)
    big["metadata"]["resourceVersion"] = "12"
    big["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"] = "32768"
    ctl.cache.pods.upsert(big)
    plans = planned(monkeypatch)
    assert ctl.look(BIG) == timedelta(seconds=7)
    ctl._read = None
    ctl._retry_at.clear()  # the interval passed
    assert ctl.look(BIG) == timedelta(seconds=14)
    assert ctl._backed_off["uid-big"].priority == 5, "the pod's own priority, which picks the pod brought forward"
    ctl.cache.pods.upsert(pod("waiting"))
    ctl.cache.pods.remove("team-a", "waiting")
    assert timedelta(seconds=7) < ctl.look(BIG) <= timedelta(seconds=14), "a Pending pod deleted frees nothing"  # type: ignore[operator]
    ready(ctl)
    ctl.cache.pods.remove("team-a", "p")
    assert timedelta(0) < ctl.look(BIG) <= timedelta(seconds=7)  # type: ignore[operator]
    assert ctl.queue._waiting[BIG] - time.monotonic() <= 7, "its key is added when the look falls due"
    assert plans == ["RescueTrigger"] * 2, "not planned for before an interval since its last look"
    backed_off = ctl._backed_off["uid-big"]
    ctl._backed_off["uid-big"] = replace(backed_off, looked=backed_off.looked - 8)  # an interval passed since
    ctl._retry_at["uid-big"] = time.monotonic() + 300
    ended = holding("q", "GPU-b", 10240)
    ended["metadata"]["resourceVersion"] = "12"
    ended["status"] = {"phase": "Succeeded"}
    ctl.cache.pods.upsert(ended)
    assert ctl._retry_at["uid-big"] > time.monotonic() + 200, "another pod left within the interval: not sooner"
    assert ctl._plan_cost > 0, "the last plan's CPU, which spaces the looks brought forward"
    ctl._plan_cost = 5.0
    ctl._sooner_after = 0.0  # the interval passed
    ctl.cache.pods.upsert(ended)
    ctl._read = None
    assert ctl._sooner_after - time.monotonic() > 45, "a plan of 5 s: the next one brought forward 50 s on"
    ctl.look(BIG)
    assert plans == ["RescueTrigger"] * 3, "a pod that ended freed its room: planned for now"
    ctl._retry_at["uid-big"] = time.monotonic() + 300
    ctl._backed_off["uid-big"] = replace(ctl._backed_off["uid-big"], looked=time.monotonic() - 8)
    ctl._sooner_after = 0.0
    ctl.cache.nodes._apply({"type": "ADDED", "object": whole_node("gpu-9", "a")}, "1")
    assert ctl._retry_at["uid-big"] <= time.monotonic(), "a node that comes is room too"
    ctl._retry_at["uid-big"] = time.monotonic() + 300
    ctl._sooner_after = 0.0
    ctl.other_pods.upsert(plain_pod("web-1", "gpu-0"))
    assert ctl._retry_at["uid-big"] > time.monotonic() + 200, "another scheduler's pod that comes frees nothing"
    ctl.other_pods.remove("web", "web-1")
    assert ctl._retry_at["uid-big"] <= time.monotonic(), "one that leaves frees CPU and memory"


def rescuing(metrics: Metrics, *, dry_run: bool = False) -> tuple[DefragController, list[tuple[str, str, bool]]]:
    """A leading controller in mode on without kept rooms (or in dry-run), on the `fragmented` cluster with no moves
    yet; and the Events it records."""
    ctl = controller(metrics=metrics)
    said = heard(ctl)
    if dry_run:
        read_policy(ctl, "dry-run")
    else:
        on_without_room(ctl)
    leading(ctl)
    ctl._history = ()
    fragmented(ctl)
    return ctl, said


def on_without_room(ctl: DefragController) -> None:
    """Mode on, keeping no room for a rescued pod (`rescue.reserveFor: 0s`: no pod annotation is written)."""
    ctl.policy_map.synced.set()
    written = policy_map("on", "1")
    written["data"]["policy.yaml"] += "rescue: {reserveFor: 0s}\n"
    ctl.policy_map.upsert(written)
    assert ctl.look(POLICY) is None and ctl.policy is not None


def keeping_room(
    monkeypatch: pytest.MonkeyPatch, metrics: Metrics | None = None
) -> tuple[DefragController, list[tuple[str, str, bool]]]:
    """A leading controller in mode on keeping a rescue's room (the policy's default rescue.reserveFor, 60 s), on the
    `fragmented` cluster with no moves yet, each move made and settled at once (no API server); and the Events it
    records."""
    ctl = controller(metrics=metrics)
    said = heard(ctl)
    read_policy(ctl, "on")
    leading(ctl)
    ctl._history = ()
    fragmented(ctl)
    monkeypatch.setattr(defrag.moves, "make_move", lambda kube, move, **kwargs: None)
    monkeypatch.setattr(ctl, "_settle", lambda move: "")
    return ctl, said


def pod_writes(ctl: DefragController, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, str, dict[str, Any]]]:
    """The pod annotation changes the controller asks for from now on, each applied to the cached pod (no API
    server): namespace, name, UID and keyword arguments."""
    written: list[tuple[str, str, str, dict[str, Any]]] = []

    def change(kube: Kube, namespace: str, name: str, uid: str, wanted: Any, **kwargs: Any) -> dict[str, Any]:
        stored = ctl.cache.pods.get(namespace, name)
        assert stored is not None and stored["metadata"]["uid"] == uid
        stored["metadata"]["annotations"] = wanted(dict(stored["metadata"].get("annotations") or {}))
        written.append((namespace, name, uid, kwargs))
        return stored

    monkeypatch.setattr(defrag, "change_pod_annotations", change)
    return written


def test_a_rescue_keeps_the_card_it_freed_for_its_pod_and_names_it_as_the_moves_are_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The kept room's Event names the card by register index, as the run's and the move's Events do (it named UUIDs
    alone). The moves and the pod's write are replaced here (no API server): the change the controller asks for is
    applied to the cached pod; `change_pod_annotations` itself is tested against a cluster."""
    ctl, said = keeping_room(monkeypatch)
    written = pod_writes(ctl, monkeypatch)
    before = datetime.now(UTC)
    ctl.look(BIG)
    assert written == [("team-a", "big", "uid-big", {"unscheduled": True})]
    [kept] = [message for reason, message, _ in said if reason == "DefragRoomKept"]
    until = ctl._rescues[BIG].kept_until
    assert until is not None and before + timedelta(seconds=59) <= until <= datetime.now(UTC) + timedelta(seconds=60)
    assert kept == (
        f"cards gpu-0/gpu-1 are kept for the pod until {until:%H:%M:%S}Z (nvidia.com/use-gpuuuid names them; pods "
        "admitted meanwhile get them in nvidia.com/nouse-gpuuuid)"
    )
    big = ctl.cache.pods.get("team-a", "big")
    assert big is not None and big["metadata"]["annotations"][USE_GPUUUID_ANNOTATION] == "GPU-b"


@pytest.mark.parametrize("scheduled", [True, False])
def test_a_rescue_moves_then_follows_its_pod_until_it_is_scheduled_or_refused_again(
    monkeypatch: pytest.MonkeyPatch, scheduled: bool
) -> None:
    """A rescue is followed to its end, which the operator reads on the pod and in the metrics: the pod sent back to
    the scheduler once the moved pod is gone, then scheduled, or the room lost to another pod and the pod planned for
    again. The moves and the send-back are replaced here (no API server): what they write is `make_move`'s and
    `send_back`'s, tested against a cluster."""
    metrics = Metrics()
    ctl, said = rescuing(metrics)
    made: list[str] = []
    monkeypatch.setattr(defrag.moves, "make_move", lambda kube, move, **kwargs: made.append(move.pod))
    monkeypatch.setattr(ctl, "_settle", lambda move: "")
    assert ctl.look(BIG) == timedelta(seconds=1), "sent back to the scheduler once q has been gone a second"
    [(key, rescue)] = ctl._rescues.items()
    run = rescue.run_id
    assert on_lease(ctl) == [
        (run, "rescue team-a/big (CardInsufficientMemory)", 1, False, f"{MOVED_Q}; 1 of 1 move(s) made")
    ]
    assert (key, rescue.uid, [m.pod for m in rescue.moved], rescue.kept_until) == (BIG, "uid-big", ["team-a/q"], None)
    assert ctl.look(BIG) == timedelta(seconds=1) and rescue.room_made_at is None, "q is still there"
    sent: list[tuple[str, ...]] = []
    monkeypatch.setattr(defrag, "send_back", lambda kube, *named: sent.append(named) or {})
    ctl.cache.pods.remove("team-a", "q")
    assert ctl.look(BIG) == timedelta(seconds=1) and sent == [], "HAMi's own watch may not have seen q go yet"
    assert rescue.room_made_at is not None
    rescue.room_made_at -= 1  # q has been gone for a second
    followed = [ctl.look(BIG), ctl.look(BIG)]
    assert sent == [("team-a", "big", "uid-big", run)], "sent back to the scheduler once"
    assert all(timedelta(minutes=14) < wait <= timedelta(minutes=15) for wait in followed), "until FOLLOW ends"
    ctl.cache.pods.upsert(holding("q", "GPU-b", 10240))  # another pod took the room
    if scheduled:
        bound = ctl.cache.pods.get("team-a", "big")
        assert bound is not None
        bound["spec"]["nodeName"] = "gpu-0"
        bound["metadata"]["annotations"] |= {
            "hami.io/vgpu-node": "gpu-0",
            "hami.io/vgpu-devices-allocated": "GPU-b,NVIDIA,32768,0:;",
        }
        ctl.cache.pods.upsert(bound)
    else:
        again = refusal("big")
        again["lastTimestamp"] = f"{datetime.now(UTC) + timedelta(minutes=1):%Y-%m-%dT%H:%M:%SZ}"
        ctl.failures.upsert(again)
    ctl._read, ctl._history = None, ()
    ended = ctl.look(BIG)
    placement = defrag.moves.placement_for(rescue.moved[0])
    assert said[:3] == [
        ("DefragPolicyRead", "policy read: mode on", False),
        ("DefragRun", f"run {run}: {MOVE_Q}", False),
        (
            "DefragMoved",
            f"evicted by run {run} to rescue team-a/big (CardInsufficientMemory); its replacement is "
            f"pinned to gpu-0/gpu-0 by placement {placement}",
            False,
        ),
    ]
    common = {
        "hami_place_defrag_policy_valid{}": 1.0,
        "hami_place_defrag_looks_total{key=pod}": 6.0,
        "hami_place_defrag_looks_total{key=policy}": 1.0,
        "hami_place_defrag_budget_left_moves{window=hour}": 12.0,
        "hami_place_defrag_budget_left_moves{window=run}": 4.0,
    }
    if scheduled:
        assert (ended, ctl._rescues, made) == (None, {}, ["team-a/q"])
        rescued = "rescued by 1 move(s): scheduled on gpu-0/gpu-1"  # HAMi allocated big the card q left
        assert said[3:] == [("DefragRescued", rescued, False)]
        assert on_lease(ctl)[0] == (run, "rescue team-a/big", 1, False, rescued)
        assert counted(metrics) == common | {
            "hami_place_defrag_runs_total{result=moved,trigger=rescue}": 1.0,
            "hami_place_defrag_moves_total{result=done}": 1.0,
            "hami_place_defrag_rescued_pods_total{}": 1.0,
            "hami_place_defrag_rescue_seconds_count{}": 1.0,
        }
        return
    assert (ended, made) == (timedelta(seconds=1), ["team-a/q", "team-a/q"]), "planned for again: q moves again"
    rerun = ctl._rescues[BIG].run_id
    lost = (
        "the room 1 move(s) made was taken before the scheduler retried the pod; it is planned for again once it "
        "qualifies"
    )
    assert [(entry[0], entry[4]) for entry in on_lease(ctl)] == [
        (rerun, f"{MOVED_Q}; 1 of 1 move(s) made"),
        (run, lost),
        (run, f"{MOVED_Q}; 1 of 1 move(s) made"),
    ]
    assert said[3:] == [
        (
            "DefragRoomLost",
            "the room 1 move(s) made was taken before the scheduler retried the pod; it is planned for again once it "
            "qualifies",
            True,
        ),
        ("DefragRun", f"run {rerun}: {MOVE_Q}", False),
        (
            "DefragMoved",
            f"evicted by run {rerun} to rescue team-a/big (CardInsufficientMemory); its replacement is "
            f"pinned to gpu-0/gpu-0 by placement {placement}",
            False,
        ),
    ]
    assert counted(metrics) == common | {
        "hami_place_defrag_runs_total{result=moved,trigger=rescue}": 2.0,
        "hami_place_defrag_moves_total{result=done}": 2.0,
        "hami_place_defrag_room_lost_total{}": 1.0,
    }


@pytest.mark.parametrize("blocked", [False, True])
def test_a_run_whose_move_fails_says_why_on_the_pod_and_is_not_tried_again_before_its_retry(
    monkeypatch: pytest.MonkeyPatch, blocked: bool
) -> None:
    """A failed run evicted pods for nothing: the pod says why (a PodDisruptionBudget that refused is a block the
    operator can lift), and the pod is not planned for again at once, which would evict again. The move is replaced
    here (no API server): an eviction refused at that instant cannot be had on demand."""
    metrics = Metrics()
    ctl, said = rescuing(metrics)
    made: list[str] = []

    def make_move(kube: Kube, move: Move, **kwargs: Any) -> None:
        made.append(move.pod)
        if blocked:
            raise BlockedByDisruptionBudget("team-a", "q", ("q-pdb",), "PodDisruptionBudget q-pdb allows no eviction")
        raise KubeError("the API server refused the eviction")

    monkeypatch.setattr(defrag.moves, "make_move", make_move)
    assert ctl.look(BIG) == RETRY
    run = said[1][1].split(":")[0].removeprefix("run ")
    why = "PodDisruptionBudget q-pdb allows no eviction" if blocked else "team-a/q: the API server refused the eviction"
    assert said[1:] == [
        ("DefragRun", f"run {run}: {MOVE_Q}", False),
        ("DefragBlocked" if blocked else "DefragStopped", f"run {run} stopped after 0 of 1 move(s): {why}", True),
    ]
    stopped = f"run {run} stopped after 0 of 1 move(s): {why}"
    assert on_lease(ctl) == [(run, "rescue team-a/big (CardInsufficientMemory)", 0, False, stopped)]
    ctl._read, ctl._history = None, ()
    assert timedelta(0) < ctl.look(BIG) <= RETRY  # type: ignore[operator]
    assert made == ["team-a/q"] and len(said) == 3, "not planned for again before RETRY"
    assert counted(metrics) == {
        "hami_place_defrag_policy_valid{}": 1.0,
        f"hami_place_defrag_runs_total{{result={'blocked' if blocked else 'failed'},trigger=rescue}}": 1.0,
        f"hami_place_defrag_moves_total{{result={'blocked' if blocked else 'failed'}}}": 1.0,
        "hami_place_defrag_looks_total{key=pod}": 2.0,
        "hami_place_defrag_looks_total{key=policy}": 1.0,
        "hami_place_defrag_budget_left_moves{window=hour}": 12.0,
        "hami_place_defrag_budget_left_moves{window=run}": 4.0,
    }


def test_a_rescue_the_hours_budget_does_not_allow_says_so_once_and_waits_until_the_budget_eases() -> None:
    """A spent budget is the operator's limit, not a failure: the pod says it once (not at each look), and is looked
    at again when the hour's oldest move leaves the window, not at every interval."""
    metrics = Metrics()
    ctl = controller(metrics=metrics)
    said = heard(ctl)
    ctl.policy_map.synced.set()
    written = policy_map("on", "1")
    written["data"]["policy.yaml"] += "budgets: {movesPerHour: 1, cooldown: 10m}\n"
    ctl.policy_map.upsert(written)
    ctl.look(POLICY)
    leading(ctl)
    fragmented(ctl)
    moved = datetime.now(UTC) - timedelta(minutes=20)
    ctl._history = (MoveRecord("r0", "team-b/x", "team-b", "gpu-9", moved, "Evicted"),)
    first, second = ctl.look(BIG), ctl.look(BIG)
    eases = moved + timedelta(hours=1) - datetime.now(UTC)
    for again in (first, second):
        assert again is not None and eases <= again <= eases + timedelta(minutes=1), again
    budget = (
        "budget: 1 of 1 move(s) made in the last hour (budgets.movesPerHour); the next is allowed after "
        f"{moved + timedelta(hours=1):%H:%M:%S} UTC"
    )
    assert said[1:] == [("DefragNoPlan", budget, False)]
    assert counted(metrics) == {
        "hami_place_defrag_policy_valid{}": 1.0,
        "hami_place_defrag_runs_total{result=budget,trigger=rescue}": 1.0,
        "hami_place_defrag_looks_total{key=pod}": 2.0,
        "hami_place_defrag_looks_total{key=policy}": 1.0,
        "hami_place_defrag_budget_left_moves{window=run}": 4.0,
    }


def test_a_room_an_earlier_leader_kept_sends_its_pod_back_once_it_fits_and_is_otherwise_left_until_its_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A new leader follows no rescue of the old one: the pod whose room it kept is sent back to the scheduler once
    the room is made (kube-scheduler before 1.29 may not try it for 5 minutes), not while the room's pods are still
    there, and not under a dry-run; it is written less often each time. The send-back is recorded here (no API
    server): what it writes is `send_back`'s."""
    ctl = controller()
    said = heard(ctl)
    read_policy(ctl, "on")
    leading(ctl)
    ctl._history = ()
    fragmented(ctl)
    big = ctl.cache.pods.get("team-a", "big")
    assert big is not None
    until = (datetime.now(UTC) + timedelta(minutes=5)).replace(microsecond=0)
    room = reservation_value(["GPU-a"], until, None, key=ctl.cache.room_key, pod="team-a/big", uid="uid-big")
    big["metadata"]["annotations"] |= {USE_GPUUUID_ANNOTATION: "GPU-a", ROOM_RESERVED_ANNOTATION: room}
    ctl.cache.pods.upsert(big)
    sent: list[tuple[str, str, str]] = []
    monkeypatch.setattr(defrag, "send_back", lambda kube, *named: sent.append(named[:3]) or {})
    assert ctl.look(BIG) == timedelta(seconds=10), "p still holds 24 GiB of GPU-a: looked at again shortly"
    ctl.cache.pods.remove("team-a", "p")
    ctl._read = None
    assert [ctl.look(BIG), sent] == [timedelta(seconds=10), [("team-a", "big", "uid-big")]]
    soon = ctl.look(BIG)
    assert soon is not None and timedelta(0) < soon <= timedelta(seconds=10) and len(sent) == 1, "not before due"
    ctl._sent_back["uid-big"] = (1, 0.0)  # the first send-back's wait is over
    assert [ctl.look(BIG), len(sent)] == [timedelta(seconds=20), 2], "sent back again, next after twice as long"
    ctl.policy_map.upsert(policy_map("dry-run", "2"))
    left = ctl.look(BIG)
    assert left is not None and timedelta(minutes=4) < left <= timedelta(minutes=5), "left until its deadline"
    assert len(sent) == 2
    assert said == [
        ("DefragPolicyRead", "policy read: mode on", False),
        ("DefragPolicyRead", "policy read: mode dry-run", False),
    ]


def test_a_rescued_pods_events_name_nothing_of_another_namespace_which_the_log_names_whole(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The rescued pod's namespace reads its Events: the pod moved for it and the budget that refused belong to
    another tenant, whose names it must not learn; the operator reads the whole story in the log. The move is
    replaced here (no API server): an eviction refused at that instant cannot be had on demand."""
    ctl = controller()
    recorded: list[tuple[str, str, str, bool]] = []
    ctl.events.record = lambda about, reason, message, **kw: recorded.append(  # type: ignore[method-assign]
        (about["metadata"]["name"], reason, message, kw["warning"])
    )
    on_without_room(ctl)
    leading(ctl)
    ctl._history = ()
    fragmented(ctl)
    q = ctl.cache.pods.get("team-a", "q")
    assert q is not None
    ctl.cache.pods.remove("team-a", "q")
    q["metadata"]["namespace"] = "team-b"
    ctl.cache.pods.upsert(q)

    def refused(kube: Kube, move: Move, **kwargs: Any) -> None:
        raise BlockedByDisruptionBudget("team-b", "q", ("q-pdb",), "PodDisruptionBudget team-b/q-pdb allows none")

    monkeypatch.setattr(defrag.moves, "make_move", refused)
    with caplog.at_level(logging.INFO, logger="webhook.defrag"):
        assert ctl.look(BIG) == RETRY
    run = recorded[1][2].split(":")[0].removeprefix("run ")
    assert recorded[1:] == [
        (
            "big",
            "DefragRun",
            f"run {run}: moving a pod of another namespace from gpu-0/gpu-1 to gpu-0/gpu-0 to rescue team-a/big "
            "(CardInsufficientMemory)",
            False,
        ),
        (
            "big",
            "DefragBlocked",
            f"run {run} stopped after 0 of 1 move(s): a PodDisruptionBudget of another namespace refused the eviction "
            "of a pod of another namespace",
            True,
        ),
    ]
    assert [r.getMessage() for r in caplog.records if r.name == "webhook.defrag"] == [
        f"defrag: DefragRun on pod team-a/big: run {run}: moving team-b/q from gpu-0/gpu-1 to gpu-0/gpu-0 to rescue "
        "team-a/big (CardInsufficientMemory)",
        f"defrag: DefragBlocked on pod team-a/big: run {run} stopped after 0 of 1 move(s): PodDisruptionBudget "
        "team-b/q-pdb allows none",
    ]


def test_a_policy_that_cannot_act_says_why_on_its_configmap_and_in_the_log_and_turns_the_controller_off(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The operator learns from the ConfigMap's Events and the log why nothing moves (the key missing, a wrong field,
    the ConfigMap gone), and the metric alerts on it; a policy read again turns it back on."""
    metrics = Metrics()
    ctl = controller(metrics=metrics)
    assert counted(metrics) == {}, "neither valid nor leading before the policy is read and the lease is held"
    said = heard(ctl)
    ctl.policy_map.synced.set()
    valid: list[float | None] = []
    written = policy_map("on", "1")
    with caplog.at_level(logging.INFO, logger="webhook.defrag"):
        for change in ("no key", "wrong field", "fixed", "deleted"):
            if change == "deleted":
                ctl.policy_map.remove("ctl", "defrag-policy")
            else:
                written = policy_map("on", str(len(valid) + 2))
                if change == "no key":
                    written["data"] = {}
                elif change == "wrong field":
                    written["data"]["policy.yaml"] += "budgets: {movesPerRun: -1}\n"
                ctl.policy_map.upsert(written)
            assert ctl.look(POLICY) is None
            valid.append(metrics.registry.get_sample_value("hami_place_defrag_policy_valid"))
    assert valid == [0.0, 0.0, 1.0, 0.0] and ctl.policy is None
    problems = [
        "policy.yaml: missing from ConfigMap ctl/defrag-policy; put the DefragPolicy there",
        "budgets.movesPerRun: -1 is negative; write 0 or more",
    ]
    assert said == [
        ("DefragPolicyInvalid", f"nothing is moved until this is fixed: {problems[0]}", True),
        ("DefragPolicyInvalid", f"nothing is moved until this is fixed: {problems[1]}", True),
        ("DefragPolicyRead", "policy read: mode on", False),
    ]
    problems.append("ConfigMap ctl/defrag-policy not found; create it with the DefragPolicy under policy.yaml")
    invalid = "defrag policy ctl/defrag-policy is invalid, nothing is moved until it is fixed: "
    assert [r.getMessage() for r in caplog.records if r.name == "webhook.defrag"] == [
        invalid + problems[0],
        invalid + problems[1],
        "defrag policy ctl/defrag-policy read: mode on",
        invalid + problems[2],
    ]


def test_a_run_stops_before_its_next_move_once_the_replica_stops_or_the_policy_goes() -> None:
    """The guard between a run's moves: a replica told to stop (or that lost the lease) evicts nothing more, and one
    whose policy no longer parses moves nothing on the policy it read before."""
    ctl = controller()
    read_policy(ctl, "on")
    leading(ctl)
    ctl._guard()
    ctl._stop.set()
    with pytest.raises(NotLeading) as lost:
        ctl._guard()
    assert str(lost.value) == "this replica no longer holds the defragmentation lease; the new leader resumes the run"
    ctl._stop.clear()
    broken = policy_map("on", "2")
    broken["data"] = {}
    ctl.policy_map.upsert(broken)
    with pytest.raises(NotOn) as off:
        ctl._guard()
    assert str(off.value) == "the policy is now invalid; the run stops before its next move"


def test_a_pod_carrying_a_room_is_looked_at_until_it_is_deleted_and_what_was_sent_back_goes_with_it() -> None:
    """A room annotation left on a scheduled pod is only taken off by a look at it; a deleted pod needs no look, and a
    leader running for months keeps nothing of the pods that are gone."""
    ctl = controller()
    kept = pod("big", "Running", node="gpu-0")
    kept["metadata"]["annotations"] = {ROOM_RESERVED_ANNOTATION: "{}"}
    ctl.cache.pods.upsert(kept)
    assert ready(ctl) == [BIG]
    ctl._sent_back["uid-big"] = (1, time.monotonic() + 10)
    ctl.cache.pods.remove("team-a", "big")
    assert ready(ctl) == [] and ctl._sent_back == {}


def keep_room_policy(ctl: DefragController, mode: str, version: str, window: str = "", zone: str = "UTC") -> None:
    """A policy asking one whole free card (and tolerating stranded memory), looked at every minute, within `window`
    (the hours of `zone`) when given."""
    written = policy_map(mode, version)
    written["data"]["policy.yaml"] += (
        "keepRoom: {enabled: true, interval: 1m, wholeFreeCards: {count: 1}, maxStrandedShare: 0.9, "
        f"window: '{window}', timeZone: {zone}}}\n"
    )
    ctl.policy_map.upsert(written)
    assert ctl.look(POLICY) is None and ctl.policy is not None


def test_keep_room_plans_toward_its_goal_once_an_interval_says_so_on_the_policy_and_keeps_off_a_kept_room(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Keep-room's runs are the operator's, said on the policy's ConfigMap; it plans once an interval, not at every
    look, and a room kept for a rescued pod is no room to make for the goal. The moves themselves are replaced here
    (no API server): what they write is `make_move`'s, tested against a cluster."""
    ctl = controller()
    said = heard(ctl)
    ctl.policy_map.synced.set()
    keep_room_policy(ctl, "dry-run", "1")
    leading(ctl)
    ctl._history = ()
    fragmented(ctl)
    goal = "keep room: free 1 more whole card (cards already free do not count)"
    assert ctl.look(KEEP_ROOM) == timedelta(minutes=1)
    soon = ctl.look(KEEP_ROOM)
    assert soon is not None and timedelta(0) < soon < timedelta(minutes=1), "not again before the interval"
    assert said[1:] == [
        ("DefragDryRun", f"would move team-a/q from gpu-0/gpu-1 to gpu-0/gpu-0 (dry-run) to {goal}", False)
    ]
    made: list[tuple[str, dict[str, str]]] = []
    monkeypatch.setattr(
        defrag.moves, "make_move", lambda kube, move, **kwargs: made.append((move.pod, kwargs["annotations"]))
    )
    monkeypatch.setattr(ctl, "_settle", lambda move: "")
    keep_room_policy(ctl, "on", "2")
    ctl._next_room = 0.0  # the interval is over
    assert ctl.look(KEEP_ROOM) == timedelta(minutes=1)
    assert made == [
        (
            "team-a/q",
            {
                DEFRAG_POD_ANNOTATION: "team-a/q",
                DEFRAG_POD_UID_ANNOTATION: "uid-q",
                DEFRAG_FROM_NODE_ANNOTATION: "gpu-0",
                DEFRAG_FROM_CARDS_ANNOTATION: "gpu-1",
                DEFRAG_TO_CARDS_ANNOTATION: "gpu-0",
            },
        )
    ], "the move's placement names the cards q leaves and those it goes to, as the Event does"
    run = said[3][1].split(":")[0].removeprefix("run ")
    placement = defrag.moves.placement_for(Move("team-a/q", "uid-q", "gpu-0", ("GPU-b",), "gpu-0", ("GPU-a",), ""))
    assert said[2:] == [
        ("DefragPolicyRead", "policy read: mode on", False),
        ("DefragRun", f"run {run}: moving team-a/q from gpu-0/gpu-1 to gpu-0/gpu-0 to {goal}", False),
        (
            "DefragMoved",
            f"evicted by run {run} to {goal}; its replacement is pinned to gpu-0/gpu-0 by placement {placement}",
            False,
        ),
        ("DefragRoomMade", f"run {run} made 1 move(s) toward {goal}", False),
    ]
    other = whole_pod("other")
    until = (datetime.now(UTC) + timedelta(minutes=5)).replace(microsecond=0)
    room = reservation_value(["GPU-a"], until, None, key=ctl.cache.room_key, pod="team-a/other", uid="uid-other")
    other["metadata"]["annotations"] |= {USE_GPUUUID_ANNOTATION: "GPU-a", ROOM_RESERVED_ANNOTATION: room}
    ctl.cache.pods.upsert(other)
    ctl._next_room, ctl._read, ctl._history = 0.0, None, ()
    assert ctl.look(KEEP_ROOM) == timedelta(minutes=1) and [pod for pod, _ in made] == ["team-a/q"]
    assert said[6:] == [
        (
            "DefragNoPlan",
            "no plan: freed 0 of 1 card(s); the others cannot be emptied: gpu-0/gpu-1: team-a/q fits no other card in "
            "use",
            False,
        )
    ]
    ctl.cache.pods.remove("team-a", "q")
    ctl._next_room, ctl._read = 0.0, None
    assert ctl.look(KEEP_ROOM) == timedelta(minutes=1) and said[7:] == [], "GPU-b is whole: the goal is met, no run"


def test_a_batch_looks_at_the_most_urgent_pod_first_and_a_failed_look_neither_ends_it_nor_holds_its_key(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The highest-priority pod is rescued before a lower one takes the room; a look that fails (an API call refused,
    or a bug) is one log line and its key is backed off, while the rest of the batch is still looked at and a pod
    due now is added again at once."""
    ctl = controller()
    read_policy(ctl, "on")
    leading(ctl)
    for name, priority in (("early", 0), ("urgent", 100), ("buggy", 0)):
        waiting = pod(name)
        waiting["spec"]["priority"] = priority
        ctl.cache.pods.upsert(waiting)
    ready(ctl)
    seen: list[str] = []

    def look_at_pod(key: PodKey, policy: DefragPolicy | None) -> timedelta:
        seen.append(key.name)
        if key.name == "urgent":
            raise KubeError("the API server refused the read")
        if key.name == "buggy":
            raise RuntimeError("a bug")
        return timedelta(seconds=-1)  # overdue: at once

    ctl._look_at_pod = look_at_pod  # type: ignore[method-assign]
    with caplog.at_level(logging.INFO, logger="webhook.defrag"):
        ctl.work([PodKey("team-a", "early"), PodKey("team-a", "buggy"), PodKey("team-a", "urgent")])
    assert seen == ["urgent", "buggy", "early"]
    assert [(r.levelname, r.getMessage(), r.exc_info is not None) for r in caplog.records] == [
        ("WARNING", "defrag team-a/urgent: the API server refused the read", False),
        ("ERROR", "defrag team-a/buggy: the look failed", True),
    ]
    assert ready(ctl) == [PodKey("team-a", "early")], "the failed looks are backed off"


def test_a_rescue_only_a_disruption_budget_stops_says_so_once_and_is_looked_at_again_after_the_interval() -> None:
    """A block is the owner's PodDisruptionBudget, which the operator can ask to lift: the pod says which budget and
    which pod, once, and is looked at again after the interval (a budget's allowance changes with no Event of the
    pod)."""
    metrics = Metrics()
    ctl, said = rescuing(metrics, dry_run=True)
    selector = {"matchExpressions": [{"key": "app", "operator": "In", "values": ["p", "q"]}]}
    metadata = {"namespace": "team-a", "name": "gpu-pdb", "resourceVersion": "1"}
    ctl.disruption_budgets.upsert(
        {"metadata": metadata, "spec": {"selector": selector}, "status": {"disruptionsAllowed": 0}}
    )
    assert ctl.look(BIG) == timedelta(seconds=7)
    assert timedelta(0) < ctl.look(BIG) <= timedelta(seconds=7)  # type: ignore[operator]
    blocked = (
        "blocked: the rescue must evict team-a/q; PodDisruptionBudget team-a/gpu-pdb allows 0 disruption(s), the "
        "rescue needs 1"
    )
    assert said[1:] == [("DefragBlocked", blocked, False)]
    assert counted(metrics) == {
        "hami_place_defrag_policy_valid{}": 1.0,
        "hami_place_defrag_runs_total{result=blocked,trigger=rescue}": 1.0,
        "hami_place_defrag_looks_total{key=pod}": 2.0,
        "hami_place_defrag_looks_total{key=policy}": 1.0,
        "hami_place_defrag_budget_left_moves{window=hour}": 12.0,
        "hami_place_defrag_budget_left_moves{window=run}": 4.0,
    }


def test_the_snapshot_and_every_plan_are_made_with_the_collector_paused_and_it_runs_again_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A plan's working copy (a slot per card and per pod) made the cyclic collector walk the whole snapshot at every
    other plan at 1,213 nodes (docs/performance.md): the snapshot, a rescue's plan and keep-room's are made with it
    paused (and whether a pod fits a kept room as the cards are), and it is on again once they are made."""
    paused: list[tuple[str, bool]] = []

    def watched(name: str) -> None:
        real = getattr(defrag, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            paused.append((name, not gc.isenabled()))
            return real(*args, **kwargs)

        monkeypatch.setattr(defrag, name, call)

    for name in ("snapshot_of", "decide_run", "fits_as_is"):
        watched(name)
    ctl, said = rescuing(Metrics(), dry_run=True)
    assert ctl.look(BIG) == timedelta(seconds=7) and said[-1][0] == "DefragDryRun"
    keep_room_policy(ctl, "dry-run", "2")
    ctl._read = None
    assert ctl.look(KEEP_ROOM) == timedelta(minutes=1) and said[-1][0] == "DefragDryRun"
    big = ctl.cache.pods.get(BIG.namespace, BIG.name)
    assert big is not None
    waiting = ctl._room_kept(BIG, big, datetime.now(UTC))  # a room kept by an earlier leader: does the pod fit it?
    assert waiting == timedelta(seconds=defrag.SEND_BACK_AGAIN_SECONDS), "it fits no card as they are"
    assert paused == [("snapshot_of", True), ("decide_run", True)] * 2 + [("fits_as_is", True)]
    assert gc.isenabled()


def test_a_pods_event_keeps_a_nodes_taint_key_and_hides_a_pod_of_another_namespace() -> None:
    """The tenant's Event reads the cached nodes' keys: `dedicated/gpu` is a taint there, not a pod of a namespace
    `dedicated`; the pod of secret-ns named beside it is still hidden."""
    ctl = controller()
    recorded: list[str] = []
    ctl.events.record = lambda about, reason, message, **kw: recorded.append(message)  # type: ignore[method-assign]
    ctl.cache.nodes.upsert(
        {
            "metadata": {"name": "gpu-1", "resourceVersion": "1"},
            "spec": {"taints": [{"key": "dedicated/gpu", "value": "a100", "effect": "NoSchedule"}]},
        }
    )
    ctl._event(pod("big"), "DefragNoPlan", "no plan: gpu-1 has the taint dedicated/gpu=a100:NoSchedule; secret-ns/p")
    assert recorded == ["no plan: gpu-1 has the taint dedicated/gpu=a100:NoSchedule; a pod of another namespace"]


def naming_a_class(ctl: DefragController, answers: list[object]) -> tuple[list[str], dict[str, Any]]:
    """The policy naming PriorityClass high, written with the class's reader replaced by one that gives `answers` in
    turn (a value, or an error it raises): the names it was asked for, and the ConfigMap."""
    asked: list[str] = []

    def value_of(name: str) -> object:
        asked.append(name)
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    ctl.priority_value = value_of
    config_map = policy_map("on", "1")
    config_map["data"]["policy.yaml"] += "priorityThreshold: {name: high}\n"
    ctl.policy_map.synced.set()
    ctl.policy_map.upsert(config_map)
    return asked, config_map


def test_a_policy_naming_a_priority_class_waits_until_its_value_can_be_read() -> None:
    """priorityThreshold: {name: high}: nothing moves until the class's value is read; a problem is said once, a new
    one again, and the policy is read again every 10 s. The reader is replaced here (no API server): the cluster test
    reads a real class and a missing one; a refused read and an API server that does not answer are what this adds."""
    ctl = controller()
    said = heard(ctl)
    refused = KubeForbidden('priorityclasses "high" is forbidden')
    asked, config_map = naming_a_class(ctl, [refused, refused, KubeUnreachable("connection refused"), 1000])
    for _ in range(3):
        assert ctl.look(POLICY) == timedelta(seconds=10) and ctl.policy is None
        assert ctl.metrics.policy_valid._value.get() == 0
        soon = ctl.look(POLICY)
        assert soon is not None and timedelta(0) < soon <= timedelta(seconds=10), "not read again before its time"
        ctl._class_retry_at = 0.0  # its time has come
    broken = policy_map("sometimes", "2")
    ctl.policy_map.upsert(broken)
    assert ctl.look(POLICY) is None and ctl.look(POLICY) is None, "a new version that does not parse: not read again"
    config_map["metadata"]["resourceVersion"] = "3"
    ctl.policy_map.upsert(config_map)
    assert ctl.look(POLICY) == timedelta(seconds=60) and ctl.policy is not None, "its value read again in a minute"
    assert (ctl.policy.priority_class, ctl.policy.priority_threshold) == ("high", 1000)
    assert ctl.metrics.policy_valid._value.get() == 1
    assert asked == ["high"] * 4
    soon = ctl.look(POLICY)
    assert soon is not None and timedelta(0) < soon <= timedelta(seconds=60) and asked == ["high"] * 4, "not before"
    fix = "or write value: N (its VALUE in kubectl get priorityclass) instead"
    assert said == [
        (
            "DefragPolicyInvalid",
            "nothing is moved until this is fixed: priorityThreshold.name: the server may not read PriorityClass high "
            "(read again every 10s); grant get on priorityclasses.scheduling.k8s.io (the chart's ClusterRole does), "
            f"{fix}",
            True,
        ),
        (
            "DefragPolicyInvalid",
            "nothing is moved until this is fixed: priorityThreshold.name: PriorityClass high could not be read (read "
            "again every 10s): connection refused",
            True,
        ),
        (
            "DefragPolicyInvalid",
            "nothing is moved until this is fixed: mode: 'sometimes' is not a mode; write off, dry-run or on",
            True,
        ),
        ("DefragPolicyRead", "policy read: mode on", False),
    ]


def test_the_value_of_the_policys_priority_class_is_read_again_every_minute() -> None:
    """A class's value cannot change in place, but the class may be deleted, or deleted and made again with another
    value: read again every 60 s, the same value changes nothing, a new one holds pods by it (said on the ConfigMap,
    every pod looked at again), a deleted class turns the controller off until it is back. The reader is replaced
    here: the clock is the controller's own monotonic one, which a cluster test would wait a minute for."""
    ctl = controller()
    said = heard(ctl)
    asked, _ = naming_a_class(ctl, [1000, 1000, 2000, KubeNotFound('priorityclasses "high" not found'), 3000])
    assert ctl.look(POLICY) == timedelta(seconds=60) and ctl.policy is not None
    ctl._retry_at[PodKey("team-a", "big")] = time.monotonic() + 300
    ctl._class_refresh_at = 0.0  # a minute passed
    assert ctl.look(POLICY) == timedelta(seconds=60) and ctl.policy.priority_threshold == 1000
    assert len(asked) == 2 and ctl._retry_at, "the same value: nothing said, no pod looked at again"
    ctl._class_refresh_at = 0.0
    assert ctl.look(POLICY) == timedelta(seconds=60) and ctl.policy.priority_threshold == 2000
    assert not ctl._retry_at, "every pod is looked at again by the new threshold"
    ctl._class_refresh_at = 0.0
    assert ctl.look(POLICY) == timedelta(seconds=10) and ctl.policy is None, "deleted: nothing moves"
    assert ctl.metrics.policy_valid._value.get() == 0
    ctl._class_retry_at = 0.0  # created again
    assert ctl.look(POLICY) == timedelta(seconds=60) and ctl.policy is not None
    assert ctl.policy.priority_threshold == 3000 and ctl.metrics.policy_valid._value.get() == 1
    assert asked == ["high"] * 5
    assert said == [
        ("DefragPolicyRead", "policy read: mode on", False),
        ("DefragPolicyRead", "policy read: PriorityClass high's value is now 2000, was 1000", False),
        (
            "DefragPolicyInvalid",
            "nothing is moved until this is fixed: priorityThreshold.name: PriorityClass high not found (read again "
            "every 10s); create it, or write value: N (its VALUE in kubectl get priorityclass) instead",
            True,
        ),
        ("DefragPolicyRead", "policy read: mode on", False),
    ]


def leading_over_fragmented_cards() -> tuple[DefragController, list[tuple[str, str, bool]]]:
    """A leading controller whose policy watch has listed, no moves made yet, over the fragmented node (`fragmented`);
    and what it says."""
    ctl = controller()
    said = heard(ctl)
    ctl.policy_map.synced.set()
    leading(ctl)
    ctl._history = ()
    fragmented(ctl)
    return ctl, said


def test_keep_room_outside_its_window_plans_nothing_and_looks_again_when_it_opens() -> None:
    """The window is written around the real clock (the controller reads it) in Kolkata's hours (UTC+05:30), as an
    operator there writes it: opening two hours from now, nothing is planned and the look comes back then; one open
    now plans as without a window."""
    ctl, said = leading_over_fragmented_cards()
    now = datetime.now(ZoneInfo("Asia/Kolkata"))
    later, after = now + timedelta(hours=2), now + timedelta(hours=3)
    keep_room_policy(ctl, "dry-run", "1", f"{later:%H:%M}-{after:%H:%M}", "Asia/Kolkata")
    closed = ctl.look(KEEP_ROOM)
    assert closed is not None and timedelta(hours=1, minutes=58) < closed <= timedelta(hours=2), closed
    assert said[1:] == [], "nothing planned outside the window"
    before = now - timedelta(hours=1)
    keep_room_policy(ctl, "dry-run", "2", f"{before:%H:%M}-{later:%H:%M}", "Asia/Kolkata")
    assert ctl.look(KEEP_ROOM) == timedelta(minutes=1)
    goal = "keep room: free 1 more whole card (cards already free do not count)"
    assert said[2:] == [
        ("DefragDryRun", f"would move team-a/q from gpu-0/gpu-1 to gpu-0/gpu-0 (dry-run) to {goal}", False)
    ]


def test_keep_room_counts_no_room_on_the_nodes_the_node_selector_leaves_out() -> None:
    """gpu-1 (pool=training) has two whole free cards, gpu-0 (pool=inference) none: a policy for the inference pool
    that wants one whole free card plans on gpu-0, as if gpu-1 were not there; without a nodeSelector the goal is
    met."""
    ctl, said = leading_over_fragmented_cards()
    inference = ctl.cache.nodes.get("", "gpu-0")
    assert inference is not None
    inference["metadata"]["labels"]["pool"] = "inference"
    ctl.cache.nodes.upsert(inference)
    training = whole_node("gpu-1", "a")
    training["metadata"]["labels"]["pool"] = "training"
    register = training["metadata"]["annotations"]["hami.io/node-nvidia-register"]
    training["metadata"]["annotations"]["hami.io/node-nvidia-register"] = register.replace("GPU-", "GPU-t")
    ctl.cache.nodes.upsert(training)
    keep_room_policy(ctl, "dry-run", "1")
    assert ctl.look(KEEP_ROOM) == timedelta(minutes=1)
    assert said[1:] == [], "gpu-1's free cards meet the goal"
    written = policy_map("dry-run", "2")
    written["data"]["policy.yaml"] += (
        "keepRoom: {enabled: true, interval: 1m, wholeFreeCards: {count: 1}, maxStrandedShare: 0.9}\n"
        "nodeSelector: pool=inference\n"
    )
    ctl.policy_map.upsert(written)
    assert ctl.look(POLICY) is None and ctl.policy is not None
    ctl._next_room, ctl._read = 0.0, None
    assert ctl.look(KEEP_ROOM) == timedelta(minutes=1)
    goal = "keep room: free 1 more whole card (cards already free do not count)"
    assert said[2:] == [
        ("DefragDryRun", f"would move team-a/q from gpu-0/gpu-1 to gpu-0/gpu-0 (dry-run) to {goal}", False)
    ]


def test_a_new_leader_gives_an_earlier_moves_replacement_the_move_timeout_once_the_evicted_pod_is_gone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The leader that made a move waits move_timeout after its evicted pod is gone (its grace period can outlast the
    move's due time); one that took over gave up the Pending replacement at its first look after the pod went. The
    placement read and the eviction are replaced here (no API server): a leader change in the 300 s of a grace period
    cannot be had on demand in a test."""
    ctl = controller()
    read_policy(ctl, "on")
    leading(ctl)
    now = datetime.now(UTC)
    made = now - timedelta(seconds=200)  # the move's placement, older than the move's due time (190 s)
    placement = {
        "metadata": {
            "namespace": "team-a",
            "name": "move-web-abc",
            "creationTimestamp": made.isoformat(),
            "labels": {DEFRAG_RUN_LABEL: "r1"},
            "annotations": {DEFRAG_POD_ANNOTATION: "team-a/web", DEFRAG_POD_UID_ANNOTATION: "uid-web"},
        },
        "spec": {"nodeName": "gpu-1", "gpuDevices": ["GPU-c"]},
    }
    monkeypatch.setattr(ctl, "_pinned_by", lambda pod: placement)
    monkeypatch.setattr(ctl, "_refuse", lambda *args: "")
    evicted: list[str] = []
    monkeypatch.setattr(defrag.evictions, "evict_pod", lambda kube, namespace, name, **kwargs: evicted.append(name))
    terminating = whole_pod("web", node="gpu-0")
    terminating["metadata"]["deletionTimestamp"] = (made + timedelta(seconds=305)).isoformat()
    ctl.cache.pods.upsert(terminating)
    replacement = whole_pod("web-2")
    replacement["metadata"]["annotations"][PLACEMENT_ANNOTATION] = "move-web-abc"
    ctl.cache.pods.upsert(replacement)
    key = PodKey("team-a", "web-2")
    assert ctl.look(key) is not None and evicted == [], "the evicted pod still goes"
    ctl.cache.pods.remove("team-a", "web")
    assert ctl.look(key) is not None and evicted == [], "given up as soon as the evicted pod was gone"
    ctl._gone_seen["uid-web-2"] -= ctl.options.move_timeout  # the move timeout passed since
    ctl.policy_map.upsert(policy_map("dry-run", "2"))
    assert ctl.look(key) is None and evicted == [], "a dry run evicts nothing, an earlier leader's replacement neither"
    ctl.policy_map.upsert(policy_map("on", "3"))
    assert ctl.look(key) is None and evicted == ["web-2"]
    ctl.cache.pods.remove("team-a", "web-2")
    assert ctl._gone_seen == {}, "what was seen of a pod goes with it"


def refused_write(*args: Any, **kwargs: Any) -> Any:
    """A pod's write the API server refuses."""
    raise KubeError("the API server refused the write")


def test_a_room_the_api_server_will_not_keep_leaves_the_rescue_followed_without_it(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The moves made, the pod's write keeping their room fails: the rescue goes on as one that keeps no room (one log
    line says why, no Event claims a room) and the pod is still sent back once the moved pod is gone. The moves and
    the pod's writes are replaced here (no API server): a write refused at that instant cannot be had on demand."""
    ctl, said = keeping_room(monkeypatch)
    monkeypatch.setattr(defrag, "change_pod_annotations", refused_write)
    with caplog.at_level(logging.WARNING, logger="webhook.defrag"):
        assert ctl.look(BIG) == timedelta(seconds=1), "q is still there"
    assert [r.getMessage() for r in caplog.records] == [
        "defrag: the room freed for team-a/big is not kept: the API server refused the write"
    ]
    assert ctl._rescues[BIG].kept_until is None
    assert [reason for reason, _, _ in said] == ["DefragPolicyRead", "DefragRun", "DefragMoved"]
    sent: list[tuple[str, ...]] = []
    monkeypatch.setattr(defrag, "send_back", lambda kube, *named: sent.append(named[:3]) or {})
    ctl.cache.pods.remove("team-a", "q")
    ctl.look(BIG)
    ctl._rescues[BIG].room_made_at -= 1  # type: ignore[operator]  # q has been gone for a second
    ctl.look(BIG)
    assert sent == [("team-a", "big", "uid-big")]


def test_a_send_back_the_api_server_refuses_is_one_log_line_and_is_tried_again(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A followed rescue's send-back that fails is tried again after the interval, not given up, and not written
    twice once it is done; a room an earlier leader kept is sent back again as it would be after a send-back that
    did not help. `send_back` is replaced here (no API server): a write refused at that instant cannot be had on
    demand."""
    ctl, _ = rescuing(Metrics())
    monkeypatch.setattr(defrag.moves, "make_move", lambda kube, move, **kwargs: None)
    monkeypatch.setattr(ctl, "_settle", lambda move: "")
    ctl.look(BIG)
    rescue = ctl._rescues[BIG]
    ctl.cache.pods.remove("team-a", "q")
    ctl.look(BIG)
    rescue.room_made_at -= 1  # type: ignore[operator]  # q has been gone for a second
    monkeypatch.setattr(defrag, "send_back", refused_write)
    with caplog.at_level(logging.WARNING, logger="webhook.defrag"):
        assert ctl.look(BIG) == timedelta(seconds=7), "the interval"
    assert [r.getMessage() for r in caplog.records] == [
        "defrag: team-a/big not sent back to the scheduler: the API server refused the write"
    ]
    sent: list[tuple[str, ...]] = []
    monkeypatch.setattr(defrag, "send_back", lambda kube, *named: sent.append(named[:3]) or {})
    ctl.look(BIG)
    ctl.look(BIG)
    assert (sent, rescue.sent_back) == ([("team-a", "big", "uid-big")], True)

    caplog.clear()
    monkeypatch.setattr(defrag, "send_back", refused_write)
    with caplog.at_level(logging.WARNING, logger="webhook.defrag"):
        assert ctl._send_back_fitting(rescue.pod, "r1") == timedelta(seconds=10)
    assert [r.getMessage() for r in caplog.records] == [
        "defrag: team-a/big not sent back to the scheduler: the API server refused the write"
    ]
    ctl._sent_back["uid-big"] = (1, 0.0)  # the first send-back's wait is over
    assert ctl._send_back_fitting(rescue.pod, "r1") == timedelta(seconds=20)


def test_a_room_lost_that_the_api_server_will_not_give_back_is_given_back_at_the_pods_next_look(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The kept room's deadline passed and the write giving the pod its own card choice back fails: the loss is said
    and counted once, and the pod's next look gives the room back from its annotation. The moves and the pod's
    writes are replaced here (no API server): a write refused at that instant cannot be had on demand; the change
    asked for is applied to the cached pod."""
    metrics = Metrics()
    ctl, said = keeping_room(monkeypatch, metrics)
    written = pod_writes(ctl, monkeypatch)
    ctl.look(BIG)
    rescue = ctl._rescues[BIG]
    big = ctl.cache.pods.get("team-a", "big")
    assert big is not None and rescue.kept_until is not None and len(written) == 1
    past = (datetime.now(UTC) - timedelta(seconds=1)).replace(microsecond=0)
    rescue.kept_until = past  # the room's deadline, in the Rescue and on the pod, has passed
    room = reservation_value(["GPU-b"], past, None, key=ctl.cache.room_key, pod="team-a/big", uid="uid-big")
    big["metadata"]["annotations"][ROOM_RESERVED_ANNOTATION] = room
    monkeypatch.setattr(defrag, "change_pod_annotations", refused_write)
    with caplog.at_level(logging.WARNING, logger="webhook.defrag"):
        ctl.work([BIG])
    assert [r.getMessage() for r in caplog.records] == ["defrag team-a/big: the API server refused the write"]
    written = pod_writes(ctl, monkeypatch)
    assert ctl.look(BIG) == timedelta(seconds=7)
    assert written == [("team-a", "big", "uid-big", {})]
    assert ROOM_RESERVED_ANNOTATION not in big["metadata"]["annotations"]
    assert USE_GPUUUID_ANNOTATION not in big["metadata"]["annotations"]
    assert [reason for reason, _, _ in said].count("DefragRoomLost") == 1
    assert counted(metrics)["hami_place_defrag_room_lost_total{}"] == 1.0


def test_a_rescued_pods_room_annotation_the_api_server_will_not_take_off_leaves_the_rescue_ended(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The pod was scheduled on the room kept for it and the write taking our annotation off fails: the rescue still
    ends rescued, said and counted, with one log line; the annotation left on a bound pod keeps nothing (admission
    reads only Pending pods' reservations). The moves and the pod's writes are replaced here (no API server): a write
    refused at that instant cannot be had on demand."""
    metrics = Metrics()
    ctl, said = keeping_room(monkeypatch, metrics)
    pod_writes(ctl, monkeypatch)
    ctl.look(BIG)
    bound = ctl.cache.pods.get("team-a", "big")
    assert bound is not None and ctl._rescues[BIG].kept_until is not None
    bound["spec"]["nodeName"] = "gpu-0"
    bound["metadata"]["annotations"] |= {
        "hami.io/vgpu-node": "gpu-0",
        "hami.io/vgpu-devices-allocated": "GPU-b,NVIDIA,32768,0:;",
    }
    ctl.cache.pods.upsert(bound)
    monkeypatch.setattr(defrag, "change_pod_annotations", refused_write)
    with caplog.at_level(logging.WARNING, logger="webhook.defrag"):
        ctl.look(BIG)
    assert [r.getMessage() for r in caplog.records] == [
        "defrag: the room-kept annotation stays on team-a/big: the API server refused the write"
    ]
    assert ctl._rescues == {}
    assert said[-1] == ("DefragRescued", "rescued by 1 move(s): scheduled on gpu-0/gpu-1", False)
    assert counted(metrics)["hami_place_defrag_rescued_pods_total{}"] == 1.0


@pytest.mark.parametrize("refused", ["refused", "gone"])
def test_a_given_up_moves_replacement_that_cannot_be_evicted_is_said_and_its_target_stays_in_plans(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, refused: str
) -> None:
    """A move given up evicts its replacement Pending on the target (`_unpin`): when the API server refuses that
    eviction the give-up says the replacement stays Pending and why, in one log line too; when the replacement is
    gone meanwhile nothing more is said; either way the target's cards are not left out of plans, since no
    replacement was refused on them by this eviction. The eviction is replaced here (no API server): a Pending pod's
    eviction is a deletion a real server does not refuse on demand."""
    ctl = controller()
    read_policy(ctl, "on")
    leading(ctl)
    move = Move("team-a/web", "uid-web", "gpu-0", ("GPU-a",), "gpu-1", ("GPU-c",), "room")
    replacement = whole_pod("web-2")
    replacement["metadata"]["annotations"][PLACEMENT_ANNOTATION] = defrag.moves.placement_for(move)
    ctl.cache.pods.upsert(replacement)
    left_out: list[tuple[Any, ...]] = []
    monkeypatch.setattr(ctl, "_refuse", lambda *args: left_out.append(args) or "; left out")

    def evict_pod(kube: Kube, namespace: str, name: str, **kwargs: Any) -> None:
        if refused == "gone":
            raise KubeNotFound(f'pods "{name}" not found')
        raise KubeError("the API server refused the eviction")

    monkeypatch.setattr(defrag.evictions, "evict_pod", evict_pod)
    with caplog.at_level(logging.INFO, logger="webhook.defrag"):
        said = ctl._unpin(move)
    logged = [record.getMessage() for record in caplog.records]
    if refused == "gone":
        assert (said, logged) == ("", [])
    else:
        assert said == "; its replacement team-a/web-2 stays Pending on the target: the API server refused the eviction"
        assert logged == [
            "defrag: replacement team-a/web-2 of a given-up move stays Pending: the API server refused the eviction"
        ]
    assert left_out == []
    monkeypatch.setattr(defrag.evictions, "evict_pod", lambda kube, namespace, name, **kwargs: None)
    assert (
        ctl._unpin(move)
        == "; its replacement team-a/web-2, Pending on the target, was evicted for an unpinned one; left out"
    )
    assert [args[0] for args in left_out] == [("GPU-c",)]


def test_cards_refused_a_given_up_move_are_left_out_here_when_their_placement_cannot_be_written(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The give-up leaves the target cards out of this replica's plans for the cooldown and says so; the placement a
    new leader would read it from cannot be written (one log line), which leaves this replica's own plans as they
    are. Cards no node registers are not left out. The placement's read is replaced here (no API server): a write
    refused at that instant cannot be had on demand."""
    ctl = controller()
    read_policy(ctl, "on")
    leading(ctl)
    fragmented(ctl)

    def refused_read(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
        raise KubeError("the API server refused the read")

    monkeypatch.setattr(defrag.placements, "get_placement", refused_read)
    assert ctl._refuse(("GPU-unknown",), "team-a", "move-q") == "" and ctl._refused_now() == 0
    with caplog.at_level(logging.WARNING, logger="webhook.defrag"):
        said = ctl._refuse(("GPU-b", "GPU-unknown"), "team-a", "move-q")
    assert said.startswith("; its target cards are left out of plans until ") and said.endswith(
        " UTC (budgets.cooldown)"
    ), said
    assert [r.getMessage() for r in caplog.records] == [
        "defrag: the refused cards are not written on placement team-a/move-q: the API server refused the read"
    ]
    assert list(ctl._refused) == ["GPU-b"] and ctl._refused_now() == 1
