"""Creates the fake HAMi GPU nodes of sandbox/gpu-cluster.yaml through the API and waits until kwok has them Ready."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from sandbox.cluster import KWOK_NODE_ANNOTATION, Sandbox, wait_for

DATA = Path(__file__).resolve().parent / "gpu-cluster.yaml"
REGISTER_ANNOTATION = "hami.io/node-nvidia-register"
HANDSHAKE_ANNOTATION = "hami.io/node-handshake"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
"""The taint the API server gives a new node and the node lifecycle controller lifts once it is Ready."""


def load(path: Path = DATA) -> list[dict[str, Any]]:
    """The node entries of the data file, as written there."""
    return list(yaml.safe_load(path.read_text())["nodes"])


def register(cards: list[dict[str, Any]]) -> str:
    """The register annotation exactly as HAMi's v2.8+ device plugin writes it: a JSON list, one object a card."""
    keys = ("id", "index", "count", "devmem", "devcore", "type", "numa", "mode", "health")
    return json.dumps([{k: card[k] for k in keys} for card in cards], separators=(",", ":"))


def node_object(entry: dict[str, Any]) -> dict[str, Any]:
    """A Node as a HAMi GPU node looks to the API: register annotation, nvidia.com/gpu allocatable, kwok-managed."""
    gpus = str(sum(int(card["count"]) for card in entry["cards"]))
    resources = {
        "cpu": str(entry["cpu"]),
        "memory": str(entry["memory"]),
        "pods": str(entry["pods"]),
        "nvidia.com/gpu": gpus,
    }
    name = entry["name"]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "gpu": "on",
                "type": "kwok",
            },
            "annotations": {KWOK_NODE_ANNOTATION: "fake", REGISTER_ANNOTATION: register(entry["cards"])},
        },
        "status": {"allocatable": resources, "capacity": resources},
    }


def create(sandbox: Sandbox, path: Path = DATA, timeout: float = 60) -> list[str]:
    """Creates (or re-applies) every node of the data file and returns their names once all are Ready."""
    return create_nodes(sandbox, load(path), timeout)


def write_nodes(sandbox: Sandbox, entries: list[dict[str, Any]], conditions: tuple[dict[str, str], ...] = ()) -> None:
    """Creates (or re-applies) these nodes, then writes their capacity (and `conditions`, where no kwok reports them)
    as a kubelet does. A node written Ready here loses the not-ready taint the API server gave it
    (TaintNodesByCondition), as the node lifecycle controller would lift it: pods are kept off a node that has it."""
    from kubernetes import client  # here, as Sandbox.api_client imports it: only when nodes are made

    nodes = [node_object(e) for e in entries]
    sandbox.apply(*nodes)
    core = client.CoreV1Api(sandbox.api_client())
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    for obj in nodes:
        name = obj["metadata"]["name"]
        # Status only changes through the status subresource once the node exists, as a kubelet writes it.
        status: dict[str, Any] = {k: obj["status"][k] for k in ("allocatable", "capacity")}
        if conditions:
            status["conditions"] = list(conditions)
        core.patch_node_status(name, {"status": status})
        if ready:
            taints = sandbox.get(f"/api/v1/nodes/{name}").get("spec", {}).get("taints") or []
            lifted = [t for t in taints if t.get("key") != NOT_READY_TAINT]
            if len(lifted) < len(taints):
                core.patch_node(name, {"spec": {"taints": lifted or None}})


def create_nodes(sandbox: Sandbox, entries: list[dict[str, Any]], timeout: float = 60) -> list[str]:
    """Creates (or re-applies) these nodes; returns their names once kwok has them Ready and HAMi has seen them."""
    write_nodes(sandbox, entries)
    names = [e["name"] for e in entries]

    def all_ready() -> bool:
        by_name = {n["metadata"]["name"]: n for n in sandbox.get("/api/v1/nodes")["items"]}
        return all(_ready(by_name.get(name)) and _seen_by_hami(by_name[name]) for name in names)

    wait_for(all_ready, f"nodes {', '.join(names)} to be Ready through kwok and seen by HAMi", timeout)
    return names


def _seen_by_hami(node: dict[str, Any]) -> bool:
    """HAMi's scheduler writes its handshake on a node as it first registers the node's cards."""
    return HANDSHAKE_ANNOTATION in (node["metadata"].get("annotations") or {})


def _ready(node: dict[str, Any] | None) -> bool:
    """Ready, and the node lifecycle controller has lifted its not-ready taint (it lags the condition)."""
    conditions = (node or {}).get("status", {}).get("conditions") or []
    taints = (node or {}).get("spec", {}).get("taints") or []
    lifecycle = {NOT_READY_TAINT, "node.kubernetes.io/unreachable"}
    untainted = not any(t.get("key") in lifecycle for t in taints)
    return untainted and any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
