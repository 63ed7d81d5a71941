"""Status computed from the API decodes only what the count reads of each node and pod: the view must come out as
from the whole objects, for API-server-shaped objects and for objects shaped otherwise."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import orjson
from core_strategies import json_of
from hypothesis import given, settings
from hypothesis import strategies as st

from kubectl_hami_place.core.cards import Card, encode_register
from kubectl_hami_place.kube import list_body
from kubectl_hami_place.kube.counted import COUNTED_NODES, COUNTED_PODS, CountedNode, decode_items
from tests.cluster_views import build_cluster_info

NOW = datetime(2026, 12, 1, 5, 0, tzinfo=UTC)
# Any JSON value the API server could send (its integers are 64-bit; orjson refuses larger ones either way).
JSON = json_of(st.integers(min_value=-(2**63), max_value=2**63 - 1))
CARDS = [Card(f"GPU-{i}", i, 10, 81920, 100, "NVIDIA-H100-80GB-HBM3", 0, True, "hami-core") for i in range(2)]


def node(name: str, *, ready: bool = True, cordoned: bool = False, card_cordon: str | None = None) -> dict[str, Any]:
    """A node as the API server lists it: the fields the count reads among many it does not."""
    annotations = {"hami.io/node-nvidia-register": encode_register(CARDS), "node.alpha.kubernetes.io/ttl": "0"}
    if card_cordon is not None:
        annotations["hami.io/device-cordon"] = card_cordon
    return {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "labels": {"kubernetes.io/hostname": name},
            "annotations": annotations,
            "managedFields": [{"manager": "kwok", "fieldsV1": {"f:status": {"f:conditions": {}}}}],
        },
        "spec": {"unschedulable": cordoned, "taints": [{"key": "k", "effect": "NoSchedule"}]},
        "status": {
            "capacity": {"nvidia.com/gpu": "20"},
            "allocatable": {"cpu": "8", "nvidia.com/gpu": "20"},
            "conditions": [
                {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory"},
                {"type": "Ready", "status": "True" if ready else "False", "lastHeartbeatTime": "2026-12-01T05:00:00Z"},
            ],
            "nodeInfo": {"kubeletVersion": "v1.37.2"},
        },
    }


def pod(
    name: str,
    on: str,
    allocated: str,
    *,
    phase: str = "Running",
    init: int = 0,
    init_status: list[dict[str, Any]] | None = None,
    deleting: bool = False,
) -> dict[str, Any]:
    """A HAMi pod as the API server lists it."""
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": "team",
        "uid": f"uid-{name}",
        "labels": {"app": name},
        "annotations": {"hami.io/vgpu-node": on, "hami.io/vgpu-devices-allocated": allocated},
        "managedFields": [{"manager": "hami", "fieldsV1": {"f:metadata": {"f:annotations": {}}}}],
    }
    if deleting:
        metadata["deletionTimestamp"] = "2026-12-01T05:00:00Z"
    status: dict[str, Any] = {"phase": phase, "conditions": [{"type": "Ready", "status": "True"}], "podIP": "10.0.0.1"}
    if init_status is not None:
        status["initContainerStatuses"] = init_status
    return {
        "metadata": metadata,
        "spec": {
            "schedulerName": "hami-scheduler",
            "nodeName": on,
            "initContainers": [{"name": f"init{i}", "image": "busybox"} for i in range(init)],
            "containers": [{"name": "main", "image": "pause", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
            "volumes": [{"name": "token", "projected": {"sources": []}}],
        },
        "status": status,
    }


DONE = [{"name": "init0", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]
FAILED = [{"name": "init0", "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}]
RUNNING = [{"name": "init0", "state": {"running": {"startedAt": "2026-12-01T05:00:00Z"}}}]
NODES = [node("n-0"), node("n-1", ready=False), node("n-2", cordoned=True, card_cordon="GPU-1")]
PODS = [
    pod("shared", "n-0", "GPU-0,NVIDIA,8192,10:;"),
    pod("init-done", "n-0", "GPU-1,NVIDIA,40000,50:;GPU-1,NVIDIA,1000,10:;", init=1, init_status=DONE),
    pod("init-failed", "n-1", "GPU-0,NVIDIA,40000,50:;GPU-0,NVIDIA,1000,10:;", init=1, init_status=FAILED),
    pod("init-running", "n-1", "GPU-1,NVIDIA,40000,50:;GPU-1,NVIDIA,1000,10:;", init=1, init_status=RUNNING),
    pod("terminating", "n-2", "GPU-0,NVIDIA,2000,5:;", deleting=True),
    pod("ended", "n-2", "GPU-1,NVIDIA,2000,5:;", phase="Succeeded"),
    pod("mig", "n-0", "GPU-0[1g.10gb-0],NVIDIA,10000,0:;", phase="Pending"),
    pod("undecodable", "n-0", "GPU-0,NVIDIA,5:;"),
    pod("unplaced", "", ""),
]


def listed(items: list[Any], decode: Any, chunk: int = 97) -> list[dict[str, Any]]:
    """The items of a list body of `items`, read a chunk at a time and decoded by `decode` as `status` reads them."""
    body = orjson.dumps({"kind": "List", "apiVersion": "v1", "metadata": {"resourceVersion": "1"}, "items": items})
    chunks = (body[at : at + chunk] for at in range(0, len(body), chunk))
    return [item for batch in list_body.item_batches(chunks, "list", decode) for item in batch]


def views(nodes: list[Any], pods: list[Any]) -> tuple[Any, Any]:
    """The view from the counted parts beside the view from the whole objects."""
    counted = build_cluster_info(listed(nodes, COUNTED_NODES), listed(pods, COUNTED_PODS), NOW)
    whole = build_cluster_info(listed(nodes, None), listed(pods, None), NOW)
    return counted, whole


def test_the_view_from_the_counted_parts_is_the_view_from_the_whole_objects(monkeypatch: Any) -> None:
    monkeypatch.setattr(list_body, "LIST_BATCH_BYTES", 1)
    counted, whole = views(NODES, PODS)
    assert counted == whole
    used = {
        (n.name, c.name): (c.memory_used, c.slots_used, [p.deleting for p in c.pods])
        for n in whole.nodes
        for c in n.cards
    }
    # What each case is there for: init containers done drop out, terminating pods count, ended ones do not.
    assert used[("n-0", "gpu-1")] == (1000, 1, [False])
    assert used[("n-1", "gpu-0")] == (40000, 1, [False])
    assert used[("n-2", "gpu-0")] == (2000, 1, [True])
    assert used[("n-2", "gpu-1")] == (0, 0, [])
    assert len(whole.warnings) == 1
    assert not whole.node("n-1").ready and not whole.node("n-2").schedulable  # type: ignore[union-attr]
    assert whole.node("n-2").cards[1].cordoned  # type: ignore[union-attr]


def test_only_the_counted_parts_are_decoded(monkeypatch: Any) -> None:
    monkeypatch.setattr(list_body, "LIST_BATCH_BYTES", 1)
    pods = listed(PODS, COUNTED_PODS)
    nodes = listed(NODES, COUNTED_NODES)
    assert len(pods) == len(PODS) and len(nodes) == len(NODES)
    assert "managedFields" not in pods[0]["metadata"] and "containers" not in pods[0]["spec"]
    assert pods[1]["spec"]["initContainers"] == [{}]
    assert pods[1]["status"]["initContainerStatuses"] == [{"state": {"terminated": {"exitCode": 0}}}]
    assert "conditions" not in pods[0]["status"]
    assert nodes[0]["status"]["conditions"][1] == {"type": "Ready", "status": "True"}
    assert "nodeInfo" not in nodes[0]["status"] and "taints" not in nodes[0]["spec"]


def test_a_batch_shaped_otherwise_is_decoded_whole() -> None:
    odd = copy.deepcopy(PODS[0])
    odd["spec"]["initContainers"] = ["not-an-object"]
    odd["status"]["initContainerStatuses"] = "garbage"
    items = orjson.dumps([odd, None, PODS[1]])
    assert COUNTED_PODS(items) == list_body.whole_items(items)


def test_a_decoder_made_for_a_shape_keeps_its_fields_and_decodes_another_shape_whole() -> None:
    """`decode_items` is the one place a shape becomes a decoder: a node must keep what the count reads (its name,
    register, cordons, readiness, allocatable) and drop the rest, and a node shaped otherwise must still be read."""
    decode = decode_items(CountedNode)
    annotations = NODES[2]["metadata"]["annotations"]
    assert decode(orjson.dumps([NODES[2]])) == [
        {
            "metadata": {"name": "n-2", "annotations": annotations},
            "spec": {"unschedulable": True},
            "status": {
                "conditions": [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "True"}],
                "allocatable": {"cpu": "8", "nvidia.com/gpu": "20"},
            },
        }
    ]
    odd = {**NODES[0], "status": {"conditions": "garbage"}}
    assert decode(orjson.dumps([odd, None, NODES[1]])) == [odd, NODES[1]]


def _garbled(draw: st.DrawFn, value: dict[str, Any]) -> dict[str, Any]:
    """The object with a few of its values, at any depth, replaced by arbitrary JSON."""
    value = copy.deepcopy(value)
    for _ in range(draw(st.integers(min_value=0, max_value=3))):
        at: Any = value
        while isinstance(at, (dict, list)) and at and draw(st.booleans()):
            keys = list(at) if isinstance(at, dict) else list(range(len(at)))
            key = draw(st.sampled_from(keys))
            if not isinstance(at[key], (dict, list)) or not at[key] or draw(st.booleans()):
                at[key] = draw(JSON)
                break
            at = at[key]
    return value


@st.composite
def garbled_lists(draw: st.DrawFn) -> tuple[list[Any], list[Any]]:
    nodes = [_garbled(draw, item) for item in draw(st.lists(st.sampled_from(NODES), max_size=3))]
    pods = [_garbled(draw, item) for item in draw(st.lists(st.sampled_from(PODS), max_size=5))]
    return nodes, pods


@settings(max_examples=300, deadline=None)
@given(garbled_lists(), st.integers(min_value=1, max_value=400))
def test_objects_shaped_otherwise_give_the_view_their_whole_objects_give(
    lists: tuple[list[Any], list[Any]], batch_bytes: int
) -> None:
    nodes, pods = lists
    original = list_body.LIST_BATCH_BYTES
    list_body.LIST_BATCH_BYTES = batch_bytes
    try:
        counted, whole = views(nodes, pods)
    finally:
        list_body.LIST_BATCH_BYTES = original
    assert counted == whole
