"""The webhook's reconcile pass: asking every placement (what each 2-second pass did before) beside asking only
the keys its work queue hands out (what a pass does now between full passes), under the sandbox's event rates.

In-process, no sandbox: a ClusterCache holding --nodes nodes of 8 cards (bench/generate.py's) and --placements open
placements shaped as bench/admission.py creates them (all on the first 16 nodes, as there: kwok keeps only those
Ready), plus --claimed placements consumed by a stored pod and 10 claims in flight. Between two passes, 2 s of the
admission bench's churn arrive as events: --heartbeats node events (a new resourceVersion, as kwok's status
updates; on the placements' nodes), --node-changes that change what a placement reads (a cordon) and
--placement-events (claims). Nothing is due, so no pass writes. Prints each kind of pass's CPU and wall time per
pass (median, p95, max of --passes) and their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from datetime import UTC, datetime

from kubernetes.client import ApiClient

from bench import generate
from kubectl_hami_place.core.names import CLAIM_ANNOTATION
from webhook import reconcile
from webhook.cache import ClusterCache
from webhook.metrics import Metrics

CREATED = "2026-12-01T06:00:00Z"
NOW = datetime(2026, 12, 1, 6, 30, tzinfo=UTC)


class NoWrites:
    """The reconciler's Writes for a cluster where nothing is due and no reqID guard is held: a write is an error."""

    def list_guards(self) -> list[Any]:
        return []

    def __getattr__(self, name: str) -> Callable[..., Any]:
        raise AssertionError(f"the bench's pass called {name}: something was due")


def stored_placement(k: int, nodes: int, status: dict[str, Any] | None = None) -> dict[str, Any]:
    obj = generate.placement(k, nodes)
    obj["metadata"].update(uid=f"uid-{k}", resourceVersion=str(10 + k), creationTimestamp=CREATED)
    obj["status"] = status or {"phase": "Pending", "observedGeneration": 0}
    return obj


def claimed(k: int, in_flight: bool) -> dict[str, Any]:
    status: dict[str, Any] = {
        "phase": "Consumed",
        "claim": {"token": f"tok-{k}", "claimedAt": CREATED},
        "consumedAt": CREATED,
    }
    if not in_flight:
        status["consumedBy"] = {"name": f"train-{k}", "uid": f"pod-uid-{k}"}
    return status


def build(nodes: int, placements: int, claimed_count: int) -> ClusterCache:
    cache = ClusterCache(ApiClient(), generate.SCHEDULER)
    for n in range(nodes):
        cache.nodes.upsert(generate.node(n))
    for k in range(placements):
        cache.placements.upsert(stored_placement(k, nodes))
    for k in range(placements, placements + claimed_count + 10):
        in_flight = k >= placements + claimed_count
        obj = stored_placement(k, nodes, claimed(k, in_flight))
        cache.placements.upsert(obj)
        if not in_flight:
            pod = generate.pod(k, nodes)
            pod["metadata"]["namespace"] = obj["metadata"]["namespace"]
            pod["metadata"]["uid"] = f"pod-uid-{k}"
            pod["metadata"]["annotations"][CLAIM_ANNOTATION] = f"tok-{k}"
            cache.pods.upsert(pod)
    for reflector in cache.reflectors():
        reflector.synced.set()
        reflector.last_sync = time.time()
    return cache


class Churn:
    """2 s of the admission bench's events, each batch on the placements' nodes, each object a new version."""

    def __init__(self, cache: ClusterCache, nodes: int, placements: int) -> None:
        self.cache, self.nodes, self.placements = cache, nodes, placements
        self.version = 10**7

    def _next(self) -> str:
        self.version += 1
        return str(self.version)

    def arrive(self, heartbeats: int, changes: int, placement_events: int) -> None:
        hot = min(self.nodes, generate.KWOK_NODES)
        for i in range(heartbeats + changes):
            node = generate.node((self.version + i) % hot)
            node["metadata"]["resourceVersion"] = self._next()
            if i >= heartbeats:
                node["spec"] = {"unschedulable": self.version % 2 == 0}
            self.cache.nodes.upsert(node)
        for i in range(placement_events):
            obj = stored_placement((self.version + i) % self.placements, self.nodes)
            obj["metadata"]["resourceVersion"] = self._next()
            self.cache.placements.upsert(obj)


def timed(run: Callable[[], None]) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    run()
    return (time.perf_counter() - wall) * 1000, (time.process_time() - cpu) * 1000


def summary(label: str, samples: list[tuple[float, float]]) -> tuple[float, float]:
    walls = sorted(wall for wall, _ in samples)
    cpus = sorted(cpu for _, cpu in samples)
    p95 = walls[min(len(walls) - 1, round(0.95 * (len(walls) - 1)))]
    print(
        f"{label:<34} wall median {statistics.median(walls):7.2f} ms  p95 {p95:7.2f}  max {walls[-1]:7.2f}"
        f"   CPU median {statistics.median(cpus):7.2f} ms"
    )
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--placements", type=int, default=10000)
    parser.add_argument("--claimed", type=int, default=600)
    parser.add_argument("--heartbeats", type=int, default=10)
    parser.add_argument("--node-changes", type=int, default=1)
    parser.add_argument("--placement-events", type=int, default=40)
    parser.add_argument("--passes", type=int, default=30)
    args = parser.parse_args()

    started = time.perf_counter()
    cache = build(args.nodes, args.placements, args.claimed)
    print(
        f"cache: {args.nodes} nodes, {args.placements} open + {args.claimed} consumed placements + 10 claims in"
        f" flight, built in {time.perf_counter() - started:.1f} s; between passes {args.heartbeats} heartbeats,"
        f" {args.node_changes} node changes, {args.placement_events} placement events"
    )
    ticks = [0.0]
    loop = reconcile.Reconciler(
        None, cache, Metrics(), 86400, lambda: NOW, writes=NoWrites(), monotonic=lambda: ticks[0], claim_grace=10**9
    )
    churn = Churn(cache, args.nodes, args.placements)
    loop.reconcile_once()
    figures = {}
    # A full pass is due whenever the monotonic clock moved FULL_PASS_SECONDS; standing still, none is.
    for label, step in (("every placement (before)", reconcile.FULL_PASS_SECONDS), ("work queue (now)", 0.0)):
        samples = []
        for _ in range(args.passes):
            churn.arrive(args.heartbeats, args.node_changes, args.placement_events)
            ticks[0] += step
            samples.append(timed(loop.reconcile_once))
        figures[label] = summary(label, samples)
    before, now = figures.values()
    print(f"ratio (before / now): wall {before[0] / now[0]:.1f}x, CPU {before[1] / now[1]:.1f}x")


if __name__ == "__main__":
    main()
