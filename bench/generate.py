"""A big HAMi cluster for the admission and scale benches: nodes of 8 H100 cards, HAMi pods, open placements.

The objects are plain dicts as the API server returns them, so the same data feeds the in-process profiles and the
sandbox (`create`). Nodes carry HAMi's register and allocatable `nvidia.com/gpu` but are not kwok-managed (nothing
runs on them); pods are already bound with HAMi's `hami.io/vgpu-node` + `hami.io/vgpu-devices-allocated`, live
in namespaces labelled `hami.io/webhook: ignore` (HAMi's webhook skips them, as it skips its own bench data), and
carry schedulerName hami-scheduler so both HAMi's scheduler and our webhook's cache count them.
Run as a script it only prints the sizes; the benches import it.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import urllib3

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sandbox.cluster import Sandbox

CARDS = 8
CARD_MIB = 81920
CARD_TYPE = "NVIDIA-H100-80GB-HBM3"
POD_MIB = 8192
POD_CORES = 10
POD_NAMESPACES = 40
PLACEMENT_NAMESPACES = 50
CLAIM_LABEL = {"bench.hami-place/claim": "yes"}
IGNORE = {"hami.io/webhook": "ignore"}
SCHEDULER = "hami-scheduler"
# Placements point at the first few nodes, which kwok keeps Ready (a pin needs a Ready node); kwok keeping all
# 5,000 would load the shared 2-core box with heartbeats, so the other nodes keep the Ready condition they are
# created with until the node controller marks them Unknown (nothing here depends on it).
KWOK_NODES = 16


def node_name(n: int) -> str:
    return f"h100-{n:05d}"


def card_uuid(n: int, c: int) -> str:
    return f"GPU-{n:05d}0000-0000-0000-0000-00000000000{c}"


def node(n: int) -> dict[str, Any]:
    """A HAMi GPU node: the register annotation as HAMi's device plugin writes it, 8 cards x 10 slots allocatable."""
    register = [
        {
            "id": card_uuid(n, c),
            "index": c,
            "count": 10,
            "devmem": CARD_MIB,
            "devcore": 100,
            "type": CARD_TYPE,
            "numa": c // 4,
            "mode": "hami-core",
            "health": True,
        }
        for c in range(CARDS)
    ]
    resources = {"cpu": "192", "memory": "2Ti", "pods": "110", "nvidia.com/gpu": str(CARDS * 10)}
    name = node_name(n)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, "gpu": "on", "bench.hami-place/generated": "yes"},
            "annotations": {
                "hami.io/node-nvidia-register": json.dumps(register, separators=(",", ":")),
                **({"kwok.x-k8s.io/node": "fake"} if n < KWOK_NODES else {}),
            },
        },
        "status": {
            "allocatable": resources,
            "capacity": resources,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "bench"}],
        },
    }


def pod_namespace(i: int) -> str:
    return f"bench-pods-{i % POD_NAMESPACES:02d}"


def placement_namespace(k: int) -> str:
    return f"bench-place-{k % PLACEMENT_NAMESPACES:02d}"


def gpu_container(name: str = "main", mib: int = POD_MIB) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(mib), "nvidia.com/gpucores": str(POD_CORES)}
    return {"name": name, "image": "registry.k8s.io/pause:3.10", "resources": {"limits": limits}}


def pod(i: int, nodes: int) -> dict[str, Any]:
    """HAMi pod i, bound: pods fill node after node's cards round-robin, one card and 8 GiB each."""
    n = i % nodes
    c = (i // nodes) % CARDS
    allocated = f"{card_uuid(n, c)},NVIDIA,{POD_MIB},{POD_CORES}:;"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"train-{i:06d}",
            "namespace": pod_namespace(i),
            "uid": f"00000000-0000-0000-0000-{i:012d}",
            "resourceVersion": str(i + 1),
            "labels": {"app": f"train-{i % 100}", **IGNORE},
            "annotations": {
                "hami.io/vgpu-node": node_name(n),
                "hami.io/vgpu-devices-allocated": allocated,
                "hami.io/vgpu-devices-to-allocate": ";",
                "hami.io/bind-phase": "success",
            },
        },
        "spec": {"schedulerName": SCHEDULER, "nodeName": node_name(n), "containers": [gpu_container()]},
        "status": {"phase": "Running"},
    }


def placement(k: int, nodes: int) -> dict[str, Any]:
    """Open placement k: the next pod labelled CLAIM_LABEL in its namespace goes to one card of one node."""
    return {
        "apiVersion": "scheduling.hami.placement.com/v1",
        "kind": "HamiPodPlacement",
        "metadata": {"name": f"place-{k:06d}", "namespace": placement_namespace(k)},
        "spec": {
            "reqID": f"bench-{k:06d}",
            "podSelector": {"matchLabels": dict(CLAIM_LABEL)},
            "nodeName": node_name(k % min(nodes, KWOK_NODES)),
            "gpuDevices": [f"gpu-{k % CARDS}"],
        },
    }


def namespaces(placements: int) -> list[str]:
    pods = [pod_namespace(i) for i in range(POD_NAMESPACES)]
    places = [placement_namespace(k) for k in range(min(placements, PLACEMENT_NAMESPACES))]
    return pods + places


def in_process(nodes: int, pods: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Nodes and pods as a list call returns them, for in-process profiles."""
    return [node(n) for n in range(nodes)], [pod(i, nodes) for i in range(pods)]


# Loading into a sandbox ------------------------------------------------------------------------------------------


class Loader:
    """Creates objects through the API server with a pool of keep-alive HTTPS connections (kubectl is far slower)."""

    def __init__(self, sandbox: Sandbox, workers: int = 12) -> None:
        pki = sandbox.workdir / "pki"
        self.server = sandbox.server
        self.http = urllib3.PoolManager(
            num_pools=4,
            maxsize=workers,
            ca_certs=str(pki / "ca.crt"),
            cert_file=str(pki / "admin.crt"),
            key_file=str(pki / "admin.key"),
        )
        self.workers = workers
        self._lock = threading.Lock()
        self.failed: list[str] = []

    def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        data = None if body is None else json.dumps(body).encode()
        reply = self.http.request(
            method, self.server + path, body=data, headers={"Content-Type": content_type}, retries=False
        )
        if reply.status >= 300 and reply.status != 409:
            with self._lock:
                self.failed.append(f"{method} {path}: {reply.status} {reply.data[:200]!r}")
        return reply

    def create_all(self, items: Iterable[tuple[str, dict[str, Any]]]) -> int:
        """POST each (collection path, object); 409 (already there) counts as done. Returns how many were sent."""
        with ThreadPoolExecutor(self.workers) as pool:
            return sum(1 for _ in pool.map(lambda item: self.request("POST", item[0], item[1]), items))


def pod_for_create(obj: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in obj["metadata"].items() if k not in ("uid", "resourceVersion")}
    return {**obj, "metadata": meta, "status": {}}


def _node_items(nodes: int) -> Iterator[tuple[str, dict[str, Any]]]:
    for n in range(nodes):
        obj = node(n)
        yield "/api/v1/nodes", {**obj, "status": {}}


def create(
    sandbox: Sandbox, nodes: int, pods: int, placements: int, *, log: Any = None, workers: int = 12
) -> dict[str, float]:
    """Fills the sandbox; returns the seconds each kind took to create."""
    if log is None:
        log = lambda message: print(message, flush=True)  # noqa: E731
    loader = Loader(sandbox, workers)
    timings: dict[str, float] = {}
    for ns in namespaces(placements):
        labels = IGNORE if ns.startswith("bench-pods") else {}
        loader.request("POST", "/api/v1/namespaces", {"metadata": {"name": ns, "labels": labels}})
    started = time.monotonic()
    loader.create_all(_node_items(nodes))
    # allocatable and Ready go through the status subresource, as a kubelet writes them.
    patch_statuses(loader, nodes)
    timings["nodes"] = time.monotonic() - started
    log(f"  {nodes} nodes in {timings['nodes']:.1f}s")
    started = time.monotonic()
    for ns in {pod_namespace(i) for i in range(min(pods, POD_NAMESPACES))}:
        wait_service_account(loader, ns)
    loader.create_all(
        (f"/api/v1/namespaces/{pod_namespace(i)}/pods", pod_for_create(pod(i, nodes))) for i in range(pods)
    )
    timings["pods"] = time.monotonic() - started
    log(f"  {pods} pods in {timings['pods']:.1f}s")
    started = time.monotonic()
    loader.create_all(
        (
            f"/apis/scheduling.hami.placement.com/v1/namespaces/{placement_namespace(k)}/hamipodplacements",
            placement(k, nodes),
        )
        for k in range(placements)
    )
    timings["placements"] = time.monotonic() - started
    log(f"  {placements} placements in {timings['placements']:.1f}s")
    if loader.failed:
        raise RuntimeError(f"{len(loader.failed)} creates failed, first: {loader.failed[0]}")
    return timings


def patch_statuses(loader: Loader, nodes: int | range) -> None:
    """allocatable, capacity and Ready through the status subresource, as a kubelet writes them."""

    def patch(n: int) -> None:
        loader.request(
            "PATCH",
            f"/api/v1/nodes/{node_name(n)}/status",
            {"status": node(n)["status"]},
            "application/merge-patch+json",
        )

    with ThreadPoolExecutor(loader.workers) as pool:
        list(pool.map(patch, range(nodes) if isinstance(nodes, int) else nodes))


def wait_service_account(loader: Loader, namespace: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reply = loader.http.request("GET", f"{loader.server}/api/v1/namespaces/{namespace}/serviceaccounts/default")
        if reply.status == 200:
            return
        time.sleep(0.2)
    raise TimeoutError(f"no default service account in {namespace}")


if __name__ == "__main__":
    nodes_, pods_ = in_process(5000, 40000)
    size = sum(len(json.dumps(o)) for o in nodes_ + pods_)
    print(f"5,000 nodes + 40,000 pods: {size / 1e6:.1f} MB of JSON")
