"""Clusters for the benches: random fragmented snapshots for the planner bench (nodes of identical cards, pods of one
or two cards), and a sandbox filled by bench/generate.py with the webhook settled on it (admission and soak)."""

from __future__ import annotations

import json
import os
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import uuid4

from kubectl_hami_place.core.allocations import ContainerDevice
from kubectl_hami_place.core.cards import Card
from kubectl_hami_place.core.planner import PlanNode, PlanPod, Snapshot
from kubectl_hami_place.core.requests import card_request
from kubectl_hami_place.core.usage import PodAllocation

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import generate
from sandbox import prepare
from sandbox import webhook as sandbox_webhook
from sandbox.cluster import Sandbox

CARD_MIB = 40960
SIZES = (2048, 4096, 4096, 8192, 8192, 10240, 16384, 20480)


def cluster(seed: int, nodes: int, cards: int, pods: int, *, slots: int = 10, multi: float = 0.0) -> Snapshot:
    """A cluster with `pods` placed at random (first card that fits), so free memory ends up scattered."""
    rng = random.Random(seed)
    plan_nodes = []
    free: dict[str, list[int]] = {}
    used_slots: dict[str, int] = {}
    for n in range(nodes):
        name = f"node-{n:04d}"
        node_cards = tuple(
            Card(
                uuid=f"GPU-{n:04d}-{c}",
                index=c,
                count=slots,
                devmem=CARD_MIB,
                devcore=100,
                type="NVIDIA-A100-SXM4-40GB",
                health=True,
                mode="hami-core",
            )
            for c in range(cards)
        )
        plan_nodes.append(PlanNode(name=name, cards=node_cards))
        for card in node_cards:
            free[card.uuid] = [CARD_MIB, 100]
            used_slots[card.uuid] = 0
    plan_pods = []
    for p in range(pods):
        mem = rng.choice(SIZES)
        cores = rng.choice((0, 10, 20, 30))
        nums = 2 if rng.random() < multi else 1
        for _ in range(20):
            node = rng.choice(plan_nodes)
            choices = [
                c.uuid
                for c in node.cards
                if free[c.uuid][0] >= mem and free[c.uuid][1] >= cores and used_slots[c.uuid] < slots
            ]
            if len(choices) >= nums:
                break
        else:
            continue
        uuids = sorted(rng.sample(choices, nums))
        for uuid in uuids:
            free[uuid][0] -= mem
            free[uuid][1] -= cores
            used_slots[uuid] += 1
        request = card_request(nums, memreq=mem, coresreq=cores)
        devices = tuple(ContainerDevice(uuid, "NVIDIA", mem, cores) for uuid in uuids)
        plan_pods.append(
            PlanPod(
                namespace="bench",
                name=f"pod-{p:05d}",
                uid=f"uid-{p}",
                requests=(request,),
                allocation=PodAllocation(
                    namespace="bench",
                    name=f"pod-{p:05d}",
                    uid=f"uid-{p}",
                    node=node.name,
                    phase="Running",
                    containers=(devices,),
                ),
                owner_kind="ReplicaSet",
            )
        )
    return Snapshot(nodes=tuple(plan_nodes), pods=tuple(plan_pods))


# A filled sandbox and its webhook -------------------------------------------------------------------------------


def create_review(pod: dict[str, Any]) -> bytes:
    """The admission.k8s.io/v1 AdmissionReview the API server sends for creating `pod`, a fresh request UID each."""
    request = {
        "uid": str(uuid4()),
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "operation": "CREATE",
        "namespace": pod["metadata"]["namespace"],
        "object": pod,
    }
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}).encode()


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    """The process's resident set, from /proc."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def settle(
    pid: int, events: Callable[[], float], *, quiet: float = 0.15, window: float = 5.0, limit: float = 900.0
) -> float:
    """Seconds until, over `window` seconds, the process uses less than `quiet` of a core and `events` (its placement
    watch's running total) stays put: after its first sync the webhook acknowledges every placement (one status
    write each, mostly waiting on the API server, so its CPU alone read quiet too early: the first rows of an earlier
    run still met 2,741 placement events) and freezes its cache out of the collector; the runs measure the steady
    state after that."""
    started = time.monotonic()
    while time.monotonic() - started < limit:
        before, seen = cpu_seconds(pid), events()
        time.sleep(window)
        if cpu_seconds(pid) - before < quiet * window and events() == seen:
            break
    return time.monotonic() - started


def placement_events(webhook: sandbox_webhook.Webhook) -> float:
    """The webhook's placement watch's running total (NaN when /metrics does not answer: never read as settled)."""
    try:
        return webhook.metric('hami_place_watch_events_total{kind="placements"}')
    except OSError:
        return float("nan")


@dataclass
class Served:
    """The webhook on a filled sandbox: seconds each kind took to create, to the first full sync and from it to
    settled, and the webhook's RSS (MiB) at each of those two moments."""

    webhook: sandbox_webhook.Webhook
    fill: dict[str, float]
    sync: float
    synced_rss: float
    settled: float
    settled_rss: float


def serve_filled(
    sandbox: Sandbox, workdir: Path, nodes: int, pods: int, placements: int, *extra: str, timeout: float = 900
) -> Served:
    """The placement CRD, --nodes x 8 cards, --pods bound HAMi pods and --placements open placements made by
    bench/generate.py, then the webhook (with `extra` flags) past its first full sync and settled: its cache full
    of that cluster, as a bench must meet it."""
    prepare.install_crd(sandbox)
    fill = generate.create(sandbox, nodes, pods, placements)
    started = time.monotonic()
    webhook = sandbox_webhook.start(sandbox, workdir, *extra, timeout=timeout)
    try:
        sync = time.monotonic() - started
        pid = webhook.process.pid
        synced_rss = rss_mib(pid)
        print(f"  webhook ready (first full sync) in {sync:.1f}s, RSS {synced_rss:.1f} MiB", flush=True)
        settled = settle(pid, lambda: placement_events(webhook))
        settled_rss = rss_mib(pid)
        print(
            f"  webhook settled (placements acknowledged, cache frozen) {settled:.0f}s later, "
            f"RSS {settled_rss:.1f} MiB",
            flush=True,
        )
    except BaseException:
        webhook.stop()
        raise
    return Served(webhook, fill, sync, synced_rss, settled, settled_rss)
