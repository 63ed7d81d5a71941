"""The controller's wiring to its work queue, on the server's cache and its own watches filled by hand (nothing is
listed, no API call is made): which change adds which key, that a follower looks at no pod, and that no plan is
made while a watch is stale."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from kubernetes.client import ApiClient

from kubectl_hami_place.core.defrag.keys import KEEP_ROOM, POLICY, RESUME, PodKey
from kubectl_hami_place.core.defrag.policy import DefragPolicy, Mode
from kubectl_hami_place.core.hami_config import HAMI_DEFAULTS
from kubectl_hami_place.kube.client import Kube
from tests.unit.test_webhook_cache_planning import plain_pod, whole_node, whole_pod
from webhook.cache import ClusterCache
from webhook.defrag import STALE_SECONDS, DefragController, DefragOptions
from webhook.metrics import Metrics

BIG = PodKey("team-a", "big")


def controller() -> DefragController:
    cache = ClusterCache(ApiClient(), "hami-scheduler", planning=True)
    kube = Kube(ApiClient(), "default", "", None)
    options = DefragOptions("ctl", "defrag-policy", "ctl", "me", interval=7)
    return DefragController(kube, options, Metrics().defrag, cache, lambda: HAMI_DEFAULTS)


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
    ctl.policy = DefragPolicy(mode=Mode.on)
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
