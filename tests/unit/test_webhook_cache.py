"""The cache's derived views: nodes read through by name, placements parsed once per stored version."""

from __future__ import annotations

import gc
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest
from kubernetes.client import ApiClient

from kubectl_hami_place.core import lifecycle
from kubectl_hami_place.core import placement as placement_module
from kubectl_hami_place.core.cluster_info import counted_allocation
from kubectl_hami_place.core.pin_check import kept_off_node, workload_from_pod
from kubectl_hami_place.core.planner.objects import snapshot_from_objects
from kubectl_hami_place.core.reservation import RoomKey
from kubectl_hami_place.core.usage import PodAllocation, pod_allocation
from kubectl_hami_place.kube.watch import Reflector, object_key
from tests.cluster_views import build_cluster_info
from webhook import cache as cache_module
from webhook.api import _pod_summary
from webhook.cache import (
    _ALIKE,
    ClusterCache,
    json_pieces,
    project_node,
    project_node_for_planning,
    project_pod,
    same_node,
)

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def placement(name: str, version: str, namespace: str = "team", node: str = "gpu-0") -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.hami.placement.com/v1alpha1",
        "kind": "HamiPodPlacement",
        "metadata": {"name": name, "namespace": namespace, "resourceVersion": version},
        "spec": {
            "reqID": f"req-{name}",
            "podSelector": {"matchLabels": {"app": "x"}},
            "nodeName": node,
            "gpuDevices": ["gpu-0"],
        },
    }


@pytest.fixture
def cache() -> ClusterCache:
    # Nothing is listed: the reflectors are filled by hand with what a list or a watch would store.
    return ClusterCache(ApiClient(), "hami-scheduler")


def test_nodes_by_name_reads_the_store_as_it_is(cache: ClusterCache) -> None:
    nodes = cache.nodes_by_name()
    cache.nodes.upsert({"metadata": {"name": "gpu-0", "resourceVersion": "1"}})
    assert nodes["gpu-0"]["metadata"]["name"] == "gpu-0"
    assert "gpu-1" not in nodes and nodes.get("gpu-1") is None
    assert list(nodes) == ["gpu-0"] and len(nodes) == 1
    cache.nodes.remove("", "gpu-0")
    assert "gpu-0" not in nodes


def test_placements_are_parsed_once_per_version_and_follow_the_store(
    cache: ClusterCache, monkeypatch: pytest.MonkeyPatch
) -> None:
    parsed: list[str] = []
    real = placement_module.placement_from_object

    def counting(obj: object) -> Any:
        parsed.append(obj["metadata"]["name"])  # type: ignore[index]
        return real(obj)

    monkeypatch.setattr("webhook.cache.placement_from_object", counting)
    broken = placement("broken", "3")
    del broken["spec"]["nodeName"]
    for obj in (placement("a", "1"), placement("b", "2", "other"), broken):
        cache.placements.upsert(obj)
    assert [p.name for p in cache.parsed_placements("team")] == ["a"]
    assert [p.name for p in cache.parsed_placements("team")] == ["a"]
    assert sorted(parsed) == ["a", "b", "broken"]
    cache.placements.upsert(placement("a", "5", node="gpu-9"))
    assert [(p.name, p.spec.node_name) for p in cache.parsed_placements("team")] == [("a", "gpu-9")]
    assert sorted(p.name for p in cache.parsed_placements()) == ["a", "b"]
    assert sorted(parsed) == ["a", "a", "b", "broken"]
    cache.placements.remove("team", "a")
    assert cache.parsed_placements("team") == []
    assert [p.name for p in cache.parsed_placements()] == ["b"]


def selecting(name: str, version: str, selector: dict[str, Any], req_id: str, claim: str = "") -> dict[str, Any]:
    obj = placement(name, version)
    obj["spec"].update(podSelector=selector, reqID=req_id)
    if claim:
        obj["status"] = {
            "phase": "Consumed",
            "claim": {"token": claim, "pod": "p", "claimedAt": "2026-01-01T00:00:00Z"},
        }
    return obj


def test_placements_for_a_pod_are_those_that_may_select_it_and_the_claimed_ones_of_their_req_ids(
    cache: ClusterCache,
) -> None:
    objects = [
        selecting("by-app", "1", {"matchLabels": {"app": "x", "tier": "gpu"}}, "req-one"),
        selecting("by-tier", "2", {"matchLabels": {"tier": "gpu"}}, "req-two"),
        selecting("by-expression", "3", {"matchExpressions": [{"key": "app", "operator": "Exists"}]}, "req-three"),
        selecting("other-app", "4", {"matchLabels": {"app": "y"}}, "req-four"),
        selecting("consumed-one", "5", {"matchLabels": {"app": "x"}}, "req-one", claim="t1"),
        selecting("consumed-four", "6", {"matchLabels": {"app": "y"}}, "req-four", claim="t2"),
    ]
    for obj in objects:
        cache.placements.upsert(obj)
    names = lambda labels: sorted(p.name for p in cache.placements_for("team", labels))  # noqa: E731
    assert names({"app": "x", "tier": "gpu"}) == ["by-app", "by-expression", "by-tier", "consumed-one"]
    assert names({"app": "y"}) == ["by-expression", "consumed-four", "other-app"]
    assert names({}) == ["by-expression"]
    # A placement claimed since leaves the open index and is read only beside the open ones of its reqID.
    cache.placements.upsert(selecting("by-app", "7", {"matchLabels": {"app": "x"}}, "req-one", claim="t3"))
    assert names({"app": "x", "tier": "gpu"}) == ["by-expression", "by-tier"]
    cache.placements.remove("team", "by-tier")
    assert names({"app": "x", "tier": "gpu"}) == ["by-expression"]
    assert cache.placements_for("elsewhere", {"app": "x"}) == []


def test_the_keys_by_node_and_by_req_id_follow_every_version_and_the_index_tells_what_it_replaced(
    cache: ClusterCache,
) -> None:
    replaced: list[tuple[str | None, str | None]] = []
    cache.add_index_listener(lambda old, new: replaced.append((old and old.spec.node_name, new and new.spec.node_name)))
    cache.placements.upsert(selecting("open", "1", {"matchLabels": {"app": "x"}}, "req-one"))
    cache.placements.upsert(selecting("consumed", "2", {"matchLabels": {"app": "x"}}, "req-one", claim="t1"))
    cache.placements.upsert(placement("b", "3", "other"))
    assert sorted(cache.placement_keys_on("gpu-0")) == [("other", "b"), ("team", "consumed"), ("team", "open")]
    assert sorted(cache.placement_keys_sharing("team", "req-one")) == [("team", "consumed"), ("team", "open")]
    assert cache.placement_keys_sharing("other", "req-one") == []
    moved = selecting("open", "4", {"matchLabels": {"app": "x"}}, "req-one")
    moved["spec"]["nodeName"] = "gpu-1"
    cache.placements.upsert(moved)
    assert cache.placement_keys_on("gpu-1") == [("team", "open")]
    assert sorted(cache.placement_keys_on("gpu-0")) == [("other", "b"), ("team", "consumed")]
    cache.placements.remove("team", "consumed")
    cache.placements.remove("other", "b")
    assert cache.placement_keys_on("gpu-0") == []
    assert cache.placement_keys_sharing("team", "req-one") == [("team", "open")]
    assert replaced[-3:] == [("gpu-0", "gpu-1"), ("gpu-0", None), ("gpu-0", None)]
    assert cache._placements._on_node.keys() == {"gpu-1"}, "an emptied node's set stayed in the index"


def claimed_pod(name: str, version: str, token: str | None, namespace: str = "team") -> dict[str, Any]:
    notes = {"scheduling.hami.placement.com/claim": token} if token else {}
    return {"metadata": {"name": name, "namespace": namespace, "resourceVersion": version, "annotations": notes}}


def scan(cache: ClusterCache) -> dict[tuple[str, str], dict[str, Any]]:
    """What a pass over every stored pod finds: the index must always agree with it."""
    found = {}
    for pod in cache.pods.items():
        token = pod["metadata"]["annotations"].get("scheduling.hami.placement.com/claim")
        if token:
            found[(pod["metadata"]["namespace"], token)] = pod
    return found


def test_pods_by_claim_follows_every_pod_event(cache: ClusterCache) -> None:
    steps: list[Any] = [
        claimed_pod("a", "1", "t1"),
        claimed_pod("b", "2", None),
        claimed_pod("c", "3", "t1", "other"),
        claimed_pod("a", "4", "t2"),  # the token changes
        claimed_pod("d", "5", "t2"),  # a copy carrying the same token
        ("team", "d"),
        claimed_pod("b", "6", "t3"),
        claimed_pod("b", "7", None),  # the token goes
        ("team", "a"),
    ]
    seen = []
    for step in steps:
        if isinstance(step, tuple):
            cache.pods.remove(*step)
        else:
            cache.pods.upsert(step)
        assert cache.pods_by_claim() == scan(cache)
        seen.append(sorted((ns, token, pod["metadata"]["name"]) for (ns, token), pod in cache.pods_by_claim().items()))
    assert seen[4] == [("other", "t1", "c"), ("team", "t2", "d")]
    assert seen[5] == [("other", "t1", "c"), ("team", "t2", "a")]
    assert seen[6] == [("other", "t1", "c"), ("team", "t2", "a"), ("team", "t3", "b")]
    assert seen[-1] == [("other", "t1", "c")]


def full_pod(init_exit: int | None, deleting: bool, phase: str = "Running") -> dict[str, Any]:
    """A pod with much the readers never look at, and each field they do."""
    statuses = [] if init_exit is None else [{"name": "init", "state": {"terminated": {"exitCode": init_exit}}}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "train",
            "namespace": "team",
            "uid": "uid-1",
            "resourceVersion": "7",
            "labels": {"app": "x"},
            "managedFields": [{"manager": "kubectl"}],
            **({"deletionTimestamp": "2026-01-01T00:00:00Z"} if deleting else {}),
            "annotations": {
                "hami.io/vgpu-node": "gpu-0",
                "hami.io/vgpu-devices-allocated": "GPU-a,NVIDIA,1000,10:;GPU-a,NVIDIA,3000,30:;",
                "hami.io/bind-phase": "success",
                "scheduling.hami.placement.com/claim": "tok",
                "kubectl.kubernetes.io/last-applied-configuration": "{...}",
            },
        },
        "spec": {
            "nodeName": "gpu-0",
            "schedulerName": "hami-scheduler",
            "initContainers": [{"name": "init", "image": "busybox"}],
            "containers": [{"name": "main", "image": "pause", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
            "volumes": [{"name": "token"}],
        },
        "status": {"phase": phase, "initContainerStatuses": statuses, "conditions": [{"type": "Ready"}]},
    }


def gpu_node(cordon: str = "") -> dict[str, Any]:
    register = '[{"id":"GPU-a","index":0,"count":10,"devmem":40960,"devcore":100,"type":"NVIDIA-A100","health":true}]'
    return {
        "metadata": {
            "name": "gpu-0",
            "resourceVersion": "3",
            "labels": {"kubernetes.io/hostname": "gpu-0"},
            "annotations": {
                "hami.io/node-nvidia-register": register,
                "hami.io/node-handshake": "Reported",
                **({"hami.io/device-cordon": cordon} if cordon else {}),
            },
        },
        "spec": {"unschedulable": True, "podCIDR": "10.0.0.0/24"},
        "status": {
            "allocatable": {"nvidia.com/gpu": "10", "cpu": "8"},
            "conditions": [{"type": "Ready", "status": "True", "message": "kubelet is posting ready status"}],
            "nodeInfo": {"kernelVersion": "6.1"},
        },
    }


@pytest.mark.parametrize("init_exit", [None, 0, 1])
@pytest.mark.parametrize("deleting", [False, True])
@pytest.mark.parametrize("phase", ["Running", "Succeeded"])
def test_the_projections_read_as_the_whole_objects(init_exit: int | None, deleting: bool, phase: str) -> None:
    pod = full_pod(init_exit, deleting, phase)
    kept = project_pod(pod)
    assert pod_allocation(kept) == pod_allocation(pod)
    assert _pod_summary(kept) == _pod_summary(pod)
    assert object_key(kept) == object_key(pod)
    assert kept["metadata"]["annotations"] == {
        key: value
        for key, value in pod["metadata"]["annotations"].items()
        if key.startswith(("hami.io/vgpu-", "scheduling.hami.placement.com/"))
    }
    for step in (lifecycle._finished, lifecycle._uid_of):
        assert step(kept) == step(pod)
    now = datetime(2026, 1, 1, tzinfo=UTC)
    for node in (gpu_node(), gpu_node(cordon="GPU-a")):
        assert build_cluster_info([project_node(node)], [kept], now) == build_cluster_info([node], [pod], now)
    assert set(kept["metadata"]) == {"name", "namespace", "uid", "resourceVersion", "annotations"} | (
        {"deletionTimestamp"} if deleting else set()
    )
    assert "containers" not in kept["spec"] and "conditions" not in kept["status"]
    assert "nodeInfo" not in project_node(gpu_node())["status"]


def test_a_projected_node_keeps_the_labels_and_taints_an_admission_skips_a_pin_for() -> None:
    """A pod kept off the pinned node by its taint or by the pod's node selection is read as kept off it from the
    cache's node, as from the whole node, whether the controller plans or not."""
    node = gpu_node()
    node["metadata"]["labels"]["pool"] = "train"
    node["spec"]["taints"] = [{"key": "team", "value": "b", "effect": "NoExecute"}]
    pod = {"spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
    serving = {"nodeSelector": {"pool": "serve"}, "tolerations": [{"key": "team", "operator": "Exists"}]}
    for scheduling, why in (
        ({}, "node gpu-0's taint team=b:NoExecute is not tolerated"),
        (serving, "the node selection excludes node gpu-0"),
        ({**serving, "nodeSelector": {"pool": "train"}}, ""),
    ):
        workload = workload_from_pod({"spec": {**pod["spec"], **scheduling}}, "the pod")
        for project in (project_node, project_node_for_planning):
            assert kept_off_node(workload, project(node)) == kept_off_node(workload, node) == why


def test_nodes_decoded_apart_share_their_conditions_and_allocatable() -> None:
    """Thousands of nodes report the same conditions and cards: one part of each for all, read as each node's own."""
    one, other = (project_node(orjson.loads(orjson.dumps(gpu_node()))) for _ in range(2))
    assert one["status"]["conditions"] is other["status"]["conditions"]
    assert one["status"]["allocatable"] is other["status"]["allocatable"]
    assert one["status"] == {
        "allocatable": {"nvidia.com/gpu": "10"},
        "conditions": [{"type": "Ready", "status": "True"}],
    }


def test_the_cache_stores_pods_and_nodes_projected(cache: ClusterCache) -> None:
    cache.pods.upsert(full_pod(0, False))
    cache.nodes.upsert(gpu_node())
    assert cache.pods.get("team", "train") == project_pod(full_pod(0, False))
    assert cache.nodes.get("", "gpu-0") == project_node(gpu_node())
    assert [key for key, _ in cache.pods_by_claim()] == ["team"]


def broken_and_unplaced() -> tuple[dict[str, Any], dict[str, Any]]:
    """A pod whose allocation HAMi cannot decode, and one HAMi has not placed."""
    broken = full_pod(None, False)
    broken["metadata"].update(name="broken", resourceVersion="8")
    broken["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"] = "GPU-a,NVIDIA,x,10:;"
    unplaced = full_pod(None, False)
    unplaced["metadata"].update(name="unplaced", resourceVersion="9", annotations={})
    return broken, unplaced


def test_the_allocations_kept_from_pod_events_give_the_view_the_stored_pods_give(cache: ClusterCache) -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    cache.nodes.upsert(gpu_node())
    broken, unplaced = broken_and_unplaced()
    steps: list[Any] = [full_pod(0, False), broken, unplaced, full_pod(None, True), ("team", "broken")]
    for step in steps:
        if isinstance(step, tuple):
            cache.pods.remove(*step)
        else:
            cache.pods.upsert(step)
        expected = build_cluster_info(cache.nodes.items(), cache.pods.items(), now)
        assert b"".join(json_pieces(cache.cluster_info_document(now))) == orjson.dumps(expected.to_dict())
    assert len(cache._allocations) == 1, "the broken pod's entry went with it, the unplaced pod never had one"


def test_the_allocations_the_controller_s_snapshot_takes_are_the_stored_pods_and_read_as_they_do() -> None:
    """`decoded_allocations` gives each placed pod's stored object with what the cache decoded from it, so that the
    controller's snapshot does not decode them again; that snapshot is the one decoded from the pods themselves."""
    planning = ClusterCache(ApiClient(), "hami-scheduler", planning=True)
    planning.nodes.upsert(gpu_node())
    broken, unplaced = broken_and_unplaced()
    for pod in (full_pod(0, False), broken, unplaced):
        planning.pods.upsert(pod)
    kept = planning.decoded_allocations()
    assert set(kept) == {("team", "train"), ("team", "broken")}
    for (namespace, name), (pod, allocation) in kept.items():
        assert pod is planning.pods.get(namespace, name)
        assert allocation == counted_allocation(pod)
    nodes, pods = planning.nodes.items(), planning.pods.items()
    taken = snapshot_from_objects(nodes, pods, [], NOW, allocations=kept)
    assert taken == snapshot_from_objects(nodes, pods, [], NOW)
    assert [p.name for p in taken[0].pods] == ["train"] and len(taken[1]) == 2, taken[1]


def test_the_placement_store_keeps_the_key_the_version_and_the_parsed_placement_only(cache: ClusterCache) -> None:
    obj = placement("a", "1")
    obj["metadata"].update(uid="uid-a", generation=1, managedFields=[{"manager": "kubectl"}])
    obj["status"] = {"phase": "Pending", "observedGeneration": 1}
    cache.placements.upsert(obj)
    assert cache.placements.get("team", "a") == {
        "metadata": {"name": "a", "namespace": "team", "resourceVersion": "1"},
        "parsed": placement_module.placement_from_object(obj),
    }
    broken = placement("broken", "2")
    del broken["spec"]["nodeName"]
    cache.placements.upsert(broken)
    stored = cache.placements.get("team", "broken")
    assert stored is not None and stored["parsed"] is None


def without_init(name: str, phase: str = "Running") -> dict[str, Any]:
    pod = full_pod(None, False, phase)
    pod["metadata"]["name"] = name
    del pod["spec"]["initContainers"], pod["status"]["initContainerStatuses"]
    return pod


def test_pods_alike_share_their_node_name_and_phase_parts_and_read_the_same() -> None:
    # Each decoded from its own JSON, as a watch event is: equal strings, not the same ones.
    first, second, other = (project_pod(orjson.loads(orjson.dumps(without_init(name)))) for name in ("a", "b", "c"))
    ended = project_pod(without_init("d", "Succeeded"))
    with_init = project_pod(full_pod(0, False))
    assert first["spec"] is second["spec"] is other["spec"] and first["status"] is second["status"]
    assert (
        first["metadata"]["annotations"]["hami.io/vgpu-node"] is second["metadata"]["annotations"]["hami.io/vgpu-node"]
    )
    assert first["spec"] == {"nodeName": "gpu-0"} and first["status"] == {"phase": "Running"}
    assert ended["status"] == {"phase": "Succeeded"} and ended["spec"] is first["spec"]
    assert with_init["spec"] is not first["spec"] and with_init["spec"]["initContainers"] == [{"name": "init"}]


def test_the_table_of_shared_parts_is_emptied_at_its_limit_and_pods_keep_what_they_share(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cache_module, "_SHARED", {})
    monkeypatch.setattr(cache_module, "SHARED_LIMIT", 4)
    kept = []
    for node in range(10):
        pod = without_init(f"p{node}")
        pod["spec"]["nodeName"] = f"gpu-{node}"
        kept.append(project_pod(pod))
        assert len(cache_module._SHARED) <= 4
    assert [pod["spec"] for pod in kept] == [{"nodeName": f"gpu-{node}"} for node in range(10)]
    again = without_init("again")
    again["spec"]["nodeName"] = "gpu-9"
    assert project_pod(again)["spec"] is kept[9]["spec"]


def test_the_kept_allocations_share_their_card_strings(cache: ClusterCache) -> None:
    for name in ("a", "b"):
        pod = full_pod(None, False)
        pod["metadata"]["name"] = name
        pod["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"] = "".join(["GPU-", "a,NVIDIA,1000,10:;"])
        cache.pods.upsert(pod)
    first, second = (cache._allocations[("team", name)][1] for name in ("a", "b"))
    assert isinstance(first, PodAllocation) and isinstance(second, PodAllocation)
    assert first == pod_allocation(cache.pods.get("team", "a") or {})
    assert first.containers[0][0].uuid is second.containers[0][0].uuid
    assert first.containers[0][0].vendor is second.containers[0][0].vendor
    # The by-node index holds the same entries, not copies.
    assert all(cache._on_node["gpu-0"][key] is cache._allocations[key] for key in (("team", "a"), ("team", "b")))


def test_placements_alike_share_their_status_selector_and_cards_and_read_the_same(cache: ClusterCache) -> None:
    objects = [orjson.loads(orjson.dumps(placement(name, version))) for name, version in (("a", "1"), ("b", "2"))]
    for obj in objects:
        obj["status"] = {"phase": "Pending", "message": "alike", "observedGeneration": 1}
        cache.placements.upsert(obj)
    first, second = sorted(cache.parsed_placements("team"), key=lambda p: p.name)
    assert [first, second] == [placement_module.placement_from_object(obj) for obj in objects]
    assert first.status is second.status and first.spec.pod_selector is second.spec.pod_selector
    assert first.spec.gpu_devices[0] is second.spec.gpu_devices[0]
    assert first.namespace is second.namespace and first.spec.node_name is second.spec.node_name
    # The shared parts are held by the placements only: gone with them.
    del first, second
    for name in ("a", "b"):
        cache.placements.remove("team", name)
    gc.collect()
    assert not [part for part in list(_ALIKE.values()) if getattr(part, "message", "") == "alike"]


def reserving_pod(
    cache: ClusterCache, name: str, version: str, until: str, node: str = "", *, sealed: bool = True
) -> dict[str, Any]:
    """A pod of HAMi's scheduler carrying a reservation (valid when `until` is a time and it is sealed with the
    cache's key), bound when `node`."""
    document: dict[str, Any] = {"cards": ["GPU-a"], "until": until}
    if sealed:
        document["seal"] = cache.room_key.seal(f"team/{name}", f"uid-{name}", document)
    return {
        "metadata": {
            "name": name,
            "namespace": "team",
            "uid": f"uid-{name}",
            "resourceVersion": version,
            "annotations": {"scheduling.hami.placement.com/room-reserved": orjson.dumps(document).decode()},
        },
        "spec": {"nodeName": node} if node else {},
        "status": {"phase": "Pending"},
    }


def test_the_reservations_follow_the_pod_events(cache: ClusterCache) -> None:
    """Admission reads the few reservations, not every pod: a bound, gone, malformed or unsealed one holds none."""
    until = "2026-12-02T04:01:00Z"
    cache.pods.upsert(reserving_pod(cache, "a", "1", until))
    cache.pods.upsert(reserving_pod(cache, "b", "2", until))
    cache.pods.upsert(reserving_pod(cache, "c", "3", "soon"))
    cache.pods.upsert(reserving_pod(cache, "d", "4", until, sealed=False))
    assert sorted(found.pod for found in cache.reservations()) == ["team/a", "team/b"]
    cache.pods.upsert(reserving_pod(cache, "a", "5", until, node="gpu-0"))
    cache.pods.remove("team", "b")
    assert cache.reservations() == []
    cache.pods.upsert(reserving_pod(cache, "c", "6", until))
    [found] = cache.reservations()
    assert (found.pod, found.cards, found.until) == ("team/c", ("GPU-a",), datetime(2026, 12, 2, 4, 1, tzinfo=UTC))


def test_cluster_info_serves_the_rooms_kept_now_whose_seal_checks(cache: ClusterCache) -> None:
    """`status` shows why a free card refuses new pods: only the server can check a room's seal."""
    cache.pods.upsert(reserving_pod(cache, "a", "1", "2026-12-02T04:01:00Z"))
    cache.pods.upsert(reserving_pod(cache, "b", "2", "2026-12-02T04:00:30Z"))
    cache.pods.upsert(reserving_pod(cache, "forged", "3", "2026-12-02T04:01:00Z", sealed=False))
    cache.pods.upsert(reserving_pod(cache, "over", "4", "2026-12-02T03:59:59Z"))
    document = orjson.loads(b"".join(json_pieces(cache.cluster_info_document(datetime(2026, 12, 2, 4, 0, tzinfo=UTC)))))
    assert document["keptRooms"] == [
        {"pod": "team/b", "cards": ["GPU-a"], "until": "2026-12-02T04:00:30Z"},
        {"pod": "team/a", "cards": ["GPU-a"], "until": "2026-12-02T04:01:00Z"},
    ]


def test_a_placement_naming_a_card_index_of_thousands_of_digits_is_broken_and_the_watch_keeps_listing() -> None:
    """Any `pin` user may store one (the CRD's pattern allows any run of digits): were its projection to raise, the
    placement watch would stop on every replica and /readyz fail cluster-wide."""
    placement = {
        "apiVersion": "scheduling.hami.placement.com/v1",
        "kind": "HamiPodPlacement",
        "metadata": {"namespace": "team-a", "name": "p", "resourceVersion": "7"},
        "spec": {
            "reqID": "abcdef",
            "podSelector": {"matchLabels": {"a": "b"}},
            "nodeName": "n",
            "gpuDevices": ["gpu-" + "9" * 5000],
        },
    }
    body = orjson.dumps({"metadata": {"resourceVersion": "8"}, "items": [placement]})

    class Listed:
        data = body

    reflector = Reflector("placements", lambda **_: Listed(), project=cache_module.project_placement)
    reflector._relist()
    assert reflector.synced.is_set()
    stored = reflector.get("team-a", "p")
    assert stored is not None and stored["parsed"] is None, "broken: it takes no part"


def test_a_pod_relabelled_again_and_again_keeps_no_more_than_the_budget_of_planning_parts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every distinct labels part is kept for sharing until the budget of their JSON is spent, then all are let go:
    a tenant who relabels one pod grows the server's memory by no more than the budget."""
    kept = cache_module._KeptAlike(limit=1000, budget=1_000_000)
    monkeypatch.setattr(cache_module, "_kept_alike", kept)
    for version in range(60):
        labels = {f"k{i}.example.com/l": f"v{version}-{i:055d}" for i in range(1000)}  # ~80 KB of JSON
        pod = {
            "metadata": {"namespace": "team-a", "name": "one", "uid": "u", "resourceVersion": str(version)},
            "spec": {"schedulerName": "hami-scheduler", "containers": [{"name": "c"}]},
            "status": {"phase": "Pending"},
        }
        pod["metadata"]["labels"] = labels
        assert cache_module.project_pod_for_planning(pod)["metadata"]["labels"] == labels
        assert kept.size <= kept.budget
    assert 0 < len(kept.parts) < 60
    twin = {"app": "x"}
    assert kept(dict(twin)) is kept(dict(twin)), "parts alike are still kept once"


def test_a_node_name_no_pod_names_any_more_is_not_kept() -> None:
    """A pod's `hami.io/vgpu-node` may name anything: created and deleted again and again, its names stay nowhere."""
    from tests.unit.test_webhook_api import filled_cache, hami_pod

    cache = filled_cache([], [])
    for i in range(5):
        pod = hami_pod(f"p{i}")
        pod["metadata"]["annotations"]["hami.io/vgpu-node"] = f"n{i}-" + "x" * 1000
        pod["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"] = ""
        pod["metadata"]["resourceVersion"] = str(10 + i)
        cache.pods.upsert(pod)
        assert f"n{i}-" + "x" * 1000 in cache._pod_versions
        cache.pods.remove("team-a", f"p{i}")
    assert cache._pod_versions == {} and cache._on_node == {}


def test_placements_of_one_name_in_two_namespaces_are_both_indexed(cache: ClusterCache) -> None:
    """Tenants choose their placements' names: one namespace's `a` must not take another's `a` out of admission."""
    cache.placements.upsert(placement("a", "1"))
    cache.placements.upsert(placement("a", "2", "other", node="gpu-1"))
    assert sorted((p.namespace, p.spec.node_name) for p in cache.parsed_placements()) == [
        ("other", "gpu-1"),
        ("team", "gpu-0"),
    ]
    cache.placements.remove("other", "a")
    assert [(p.namespace, p.name) for p in cache.parsed_placements()] == [("team", "a")]


def test_one_placement_is_found_by_its_key_and_none_elsewhere(cache: ClusterCache) -> None:
    """A status write or the reconciler asks for one placement by key, in any namespace, known or not."""
    cache.placements.upsert(placement("a", "1"))
    assert cache.parsed_placement("team", "a") == placement_module.placement_from_object(placement("a", "1"))
    assert (cache.parsed_placement("team", "b"), cache.parsed_placement("elsewhere", "a")) == (None, None)


def test_the_placement_index_keeps_nothing_of_placements_gone(cache: ClusterCache) -> None:
    """Placements come and go by the thousand: an emptied label or reqID slot left behind would grow for good."""
    cache.placements.upsert(selecting("open", "1", {"matchLabels": {"app": "x"}}, "req-one"))
    cache.placements.upsert(selecting("consumed", "2", {"matchLabels": {"app": "x"}}, "req-one", claim="t1"))
    for name in ("open", "consumed"):
        cache.placements.remove("team", name)
    index = cache._placements
    assert (index._by_namespace, index._open_by_label, index._closed_by_req_id, index._sharing) == ({}, {}, {}, {})


def test_a_room_sealed_with_another_key_is_no_reservation(cache: ClusterCache) -> None:
    """A room another key sealed (a tenant's forgery, another replica's own key) must not hold cards here."""
    forged = reserving_pod(cache, "a", "1", "2026-12-02T04:01:00Z", sealed=False)
    document = {"cards": ["GPU-a"], "until": "2026-12-02T04:01:00Z"}
    document["seal"] = RoomKey(b"k" * 32).seal("team/a", "uid-a", document)
    forged["metadata"]["annotations"]["scheduling.hami.placement.com/room-reserved"] = orjson.dumps(document).decode()
    cache.pods.upsert(forged)
    assert cache.reservations() == []


def test_a_cache_given_the_shared_room_key_honours_the_rooms_it_sealed() -> None:
    """With --room-key-file every replica must check rooms with the one shared key, not a key of its own."""
    key = RoomKey(b"s" * 32)
    cache = ClusterCache(ApiClient(), "hami-scheduler", room_key=key)
    cache.pods.upsert(reserving_pod(cache, "a", "1", "2026-12-02T04:01:00Z"))
    assert (cache.room_key, [found.pod for found in cache.reservations()]) == (key, ["team/a"])


def waiting_pod(name: str, version: str, *, waits: bool) -> dict[str, Any]:
    notes = {"scheduling.hami.placement.com/room": "evicted/pod"} if waits else {}
    return {
        "metadata": {"name": name, "namespace": "team", "resourceVersion": version, "annotations": notes},
        "spec": {},
        "status": {"phase": "Pending"},
    }


def test_the_waiting_pods_follow_the_pod_events(cache: ClusterCache) -> None:
    """The reconciler releases only the pods listed here: one that stopped waiting or is gone must leave the list."""
    cache.pods.upsert(waiting_pod("a", "1", waits=True))
    cache.pods.upsert(waiting_pod("b", "2", waits=True))
    cache.pods.upsert(waiting_pod("c", "3", waits=False))
    assert sorted(pod["metadata"]["name"] for pod in cache.waiting_pods()) == ["a", "b"]
    cache.pods.upsert(waiting_pod("a", "4", waits=False))
    cache.pods.remove("team", "b")
    assert cache.waiting_pods() == []


def test_a_pods_new_version_with_the_same_allocation_keeps_the_view_and_its_entry(cache: ClusterCache) -> None:
    """Pods change (status, labels) far more often than their cards: each new version must still give the view the
    stored pods give, and the entry must hold the newest stored pod."""
    now = datetime(2026, 1, 1, tzinfo=UTC)
    cache.nodes.upsert(gpu_node())
    cache.pods.upsert(full_pod(0, False))
    again = full_pod(0, False)
    again["metadata"].update(resourceVersion="8", labels={"app": "y"})
    cache.pods.upsert(again)
    expected = build_cluster_info(cache.nodes.items(), cache.pods.items(), now)
    assert b"".join(json_pieces(cache.cluster_info_document(now))) == orjson.dumps(expected.to_dict())
    assert cache._allocations[("team", "train")][0] is cache.pods.get("team", "train")


def test_the_view_of_a_node_follows_each_of_its_pods_leaving(cache: ClusterCache) -> None:
    """The kept view of a node is reused until its pods change: each pod leaving must be seen, not the first only."""
    now = datetime(2026, 1, 1, tzinfo=UTC)
    cache.nodes.upsert(gpu_node())
    for index, name in enumerate(("a", "b", "c")):
        pod = full_pod(None, False)
        pod["metadata"].update(name=name, uid=f"uid-{name}", resourceVersion=str(10 + index))
        cache.pods.upsert(pod)
    for name in ("", "a", "b", "c"):
        if name:
            cache.pods.remove("team", name)
        expected = build_cluster_info(cache.nodes.items(), cache.pods.items(), now)
        assert b"".join(json_pieces(cache.cluster_info_document(now))) == orjson.dumps(expected.to_dict()), name


@pytest.mark.parametrize("value", [{}, [], {"a": {}, "b": [], "c": [{}]}])
def test_json_pieces_of_empty_parts_are_json(value: Any) -> None:
    """A cluster with no GPU node serves empty lists and dicts: the pieces must still join into valid JSON."""
    assert b"".join(json_pieces(value)) == orjson.dumps(value)


def test_a_node_not_stored_is_a_key_error_naming_it(cache: ClusterCache) -> None:
    """Admission reads nodes as a mapping: a missing node must raise as a dict would, with its name."""
    with pytest.raises(KeyError) as missing:
        cache.nodes_by_name()["gpu-9"]
    assert missing.value.args == ("gpu-9",)


def test_a_cache_not_listed_yet_is_not_ready_after_waiting(cache: ClusterCache) -> None:
    """/readyz and startup wait with a bound: a cache whose lists never completed must answer, not block."""
    assert cache.wait_ready(0) is False
    for reflector in cache.reflectors():
        reflector.synced.set()
    assert cache.wait_ready(0) is True


def test_stopping_a_cache_whose_watches_never_opened_sets_its_stop(cache: ClusterCache) -> None:
    """A server may shut down before its watches open: stopping must not fail, and watches started later end."""
    cache.stop()
    assert cache._stop.is_set()


def test_an_init_container_not_terminated_is_projected_as_the_api_server_shows_it() -> None:
    """HAMi reads whether an init container terminated: a running one must not look terminated with no exit code."""
    pod = full_pod(0, False)
    pod["status"]["initContainerStatuses"].append({"name": "setup", "state": {"running": {}}})
    assert project_pod(pod)["status"]["initContainerStatuses"] == [
        {"state": {"terminated": {"exitCode": 0}}},
        {"state": {}},
    ]


def test_pods_decoded_apart_share_their_namespace_string() -> None:
    """Forty thousand pods of a few namespaces must hold a few namespace strings, not one each."""
    first, second = (project_pod(orjson.loads(orjson.dumps(without_init(name)))) for name in ("a", "b"))
    assert first["metadata"]["namespace"] is second["metadata"]["namespace"]


def test_a_part_kept_alike_is_shared_whatever_its_key_order_and_counted_once() -> None:
    """Labels come in any order from the API server; a part seen again must not spend the budget again, and the
    budget and the limit are each spent in full before the table starts again."""
    first = {"a": "1", "b": "2"}  # 17 bytes of JSON
    kept = cache_module._KeptAlike(limit=2, budget=25)
    assert kept({"b": "2", "a": "1"}) is kept(first) is kept(dict(first))
    assert kept({"c": ""}) == {"c": ""}  # 8 bytes more: the budget reached, not passed
    assert (list(kept.parts.values()), kept.size) == ([{"b": "2", "a": "1"}, {"c": ""}], 25)
    counted = cache_module._KeptAlike(limit=2, budget=1000)
    for part in (first, {"c": ""}, {"d": "1"}):
        counted(part)
    assert (list(counted.parts.values()), counted.size) == ([{"d": "1"}], 9)


def test_a_shared_part_at_the_limit_of_the_table_is_still_shared(monkeypatch: pytest.MonkeyPatch) -> None:
    """A part already kept is found before the table's limit is looked at: pods alike keep sharing it."""
    monkeypatch.setattr(cache_module, "_SHARED", {})
    monkeypatch.setattr(cache_module, "SHARED_LIMIT", 2)
    first = project_pod(without_init("a"))
    assert len(cache_module._SHARED) == 2
    second = project_pod(without_init("b"))
    assert (second["spec"] is first["spec"], second["status"] is first["status"]) == (True, True)


def test_same_node_sees_every_change_but_the_version() -> None:
    """A heartbeat's new version must not wake the reconciler, a changed annotation (a card cordoned) must, and
    two absent nodes are the same absence."""
    stored = project_node(gpu_node())
    heartbeat = project_node(gpu_node())
    heartbeat["metadata"]["resourceVersion"] = "4"
    cordoned = project_node(gpu_node(cordon="GPU-a"))
    assert [
        same_node(stored, heartbeat),
        same_node(stored, cordoned),
        same_node(None, None),
        same_node(stored, None),
    ] == [True, False, True, False]
