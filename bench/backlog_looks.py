"""What a backlog of Pending pods costs the controller while they wait, before and after its looks back off.

The server's own controller (`webhook.defrag.DefragController`), as the unit tests drive it: its watch caches
filled by hand from bench/pod_terms.py's cluster (--nodes nodes of 8 cards of 80 GiB, 90% of their memory held by
one-card replicas), --pending pods that each ask a whole card, refused by HAMi (a FailedScheduling Event and the
PodScheduled condition kube-scheduler writes), a policy in --mode (the chart's default, dry-run, names a rescue's
moves and makes none; `on` would move pods), leading, no API server (Events are dropped, the history of runs is
empty). Time is virtual: for --seconds the controller's keys are looked at when they fall due, each second's keys as
one batch (one snapshot of the caches, as `work` reads it), and each Pending pod's FailedScheduling Event changes
every --event-every seconds (kube-scheduler trying the pod again, with other node counts in its message), which adds
its key at once. With --depart-every, every that many seconds one running GPU pod leaves (deleted from the cache, as
its watch says), and each Pending pod's key is added at once (kube-scheduler retries its pods on that deletion and
writes their Events again). Each tree (this one, and --before, a checkout such as a `git worktree` of main, imported
in a child process of its own) runs the same scene; printed side by side: looks, plans (`decide_run`), snapshots
read, and the CPU seconds they took (`time.process_time`, collector paused as the controller pauses it), and with
departures how long after one the first Pending pod was planned for, and each Pending pod (the median and the
longest over the departures, and over every departure and pod; a pod not planned for again by the end counts to the
end).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


ROOT = Path(__file__).resolve().parent.parent
REFUSAL = (
    "0/{nodes} nodes are available: {nodes} 8/8 CardInsufficientMemory. preemption: 0/{nodes} nodes are available: "
    "{nodes} Preemption is not helpful for scheduling."
)


def pending_objects(objects: dict[str, Any], nodes: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The Pending pods as stored (refused an hour ago) and their FailedScheduling Events."""
    since = (datetime.now(UTC) - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    pods, events = [], []
    for pod in objects["pending"]:
        meta = pod["metadata"]
        meta["creationTimestamp"] = since
        meta["resourceVersion"] = "1"
        message = REFUSAL.format(nodes=nodes)
        condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
        pod["status"] = {"phase": "Pending", "conditions": [{**condition, "lastTransitionTime": since}]}
        pods.append(pod)
        involved = {"kind": "Pod", "namespace": meta["namespace"], "name": meta["name"], "uid": meta["uid"]}
        event = {
            "metadata": {"namespace": meta["namespace"], "name": f"{meta['name']}.1", "resourceVersion": "1"},
            "reason": "FailedScheduling",
            "involvedObject": involved,
            "message": message,
            "lastTimestamp": since,
        }
        events.append(event)
    return pods, events


def run(tree: Path, scene: dict[str, Any]) -> dict[str, Any]:
    """The scene in this tree: looks, plans, snapshots and their CPU seconds."""
    sys.path.insert(0, str(tree))
    from kubernetes.client import ApiClient

    import kubectl_hami_place
    from kubectl_hami_place.core.defrag.keys import POLICY, PodKey
    from kubectl_hami_place.core.hami_config import HAMI_DEFAULTS
    from kubectl_hami_place.kube.client import Kube
    from webhook import defrag
    from webhook.cache import ClusterCache
    from webhook.metrics import Metrics

    for module in (kubectl_hami_place, defrag):
        if not Path(str(module.__file__)).resolve().is_relative_to(tree.resolve()):
            raise SystemExit(f"imported {module.__file__}, not the server of {tree}")
    clock = [0.0]
    defrag.time.monotonic = lambda: clock[0]  # type: ignore[attr-defined]
    counts = {"looks": 0, "plans": 0, "snapshots": 0}
    real_decide, real_snapshot = defrag.decide_run, defrag.snapshot_of
    looking: list[Any] = [None]
    planned: dict[Any, list[float]] = {}

    def decide_run(*args: Any, **kwargs: Any) -> Any:
        counts["plans"] += 1
        planned.setdefault(looking[0], []).append(clock[0])
        return real_decide(*args, **kwargs)

    def snapshot_of(*args: Any, **kwargs: Any) -> Any:
        counts["snapshots"] += 1
        return real_snapshot(*args, **kwargs)

    defrag.decide_run, defrag.snapshot_of = decide_run, snapshot_of
    cache = ClusterCache(ApiClient(), "hami-scheduler", planning=True)
    options = defrag.DefragOptions("ctl", "defrag-policy", "ctl", "me", interval=scene["interval"])
    ctl = defrag.DefragController(
        Kube(ApiClient(), "default", "", None), options, Metrics().defrag, cache, lambda: HAMI_DEFAULTS
    )
    ctl.events.record = lambda *args, **kwargs: None  # type: ignore[method-assign]
    ctl._runs = lambda: ()  # type: ignore[method-assign]
    for node in scene["nodes"]:
        cache.nodes.upsert(node)
    for pod in scene["pods"]:
        cache.pods.upsert(pod)
    policy = f"apiVersion: scheduling.hami.placement.com/v1alpha1\nkind: DefragPolicy\nmode: {scene['mode']}\n"
    policy += "rescue: {pendingFor: 0s}\n"
    ctl.policy_map.synced.set()
    ctl.policy_map.upsert(
        {
            "metadata": {"namespace": "ctl", "name": "defrag-policy", "resourceVersion": "1"},
            "data": {"policy.yaml": policy},
        }
    )
    ctl.look(POLICY)
    ctl._resume = False
    keys = [PodKey(p["metadata"]["namespace"], p["metadata"]["name"]) for p in scene["pending"]]
    due: dict[Any, float | None] = {key: 0.0 for key in keys}
    leaving = [pod["metadata"] for pod in scene["pods"] if pod["spec"].get("nodeName")]
    departures: list[float] = []
    cpu = 0.0
    for second in range(scene["seconds"]):
        clock[0] = float(second)
        ctl.elector._valid_until = clock[0] + 60
        for reflector in (*ctl.cache.reflectors(), *ctl.reflectors()):
            reflector.synced.set()
            reflector.last_sync = time.time()
        if second % scene["event_every"] == 0:
            for index, event in enumerate(scene["events"]):
                changed = json.loads(json.dumps(event))
                changed["metadata"]["resourceVersion"] = str(second + 2)
                ctl.failures.upsert(changed)
                due[keys[index]] = clock[0]  # the Event's change adds the pod's key (`_event_changed`)
        if scene["depart_every"] and second and second % scene["depart_every"] == 0 and leaving:
            gone = leaving.pop(0)
            cache.pods.remove(gone["namespace"], gone["name"])
            departures.append(clock[0])
            due.update({key: clock[0] for key in keys})
        batch = sorted((key for key, at in due.items() if at is not None and at <= clock[0]), key=str)
        if not batch:
            continue
        ctl._read, ctl._history = None, None
        start = time.process_time()
        for key in batch:
            counts["looks"] += 1
            looking[0] = key
            after = ctl.look(key)
            due[key] = clock[0] + max(after.total_seconds(), 1.0) if after is not None else None
        cpu += time.process_time() - start
    end = float(scene["seconds"])
    waits = [
        [min((at for at in planned.get(key, []) if at >= left), default=end) - left for key in keys]
        for left in departures
    ]
    first = sorted(min(each) for each in waits)
    every = sorted(wait for each in waits for wait in each)
    replanned = {"first": _spread(first), "every": _spread(every)} if departures else None
    return {**counts, "cpu": cpu, "replanned": replanned}


def _spread(waits: list[float]) -> str:
    """The median and the longest of sorted waits, as printed."""
    return f"{waits[len(waits) // 2]:.0f} / {waits[-1]:.0f} s"


def main() -> None:
    """Build the scene, run it in each tree, print both."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path, help="a checkout whose controller is the before (none: after only)")
    parser.add_argument("--nodes", type=int, default=1213)
    parser.add_argument("--pending", type=int, default=5)
    parser.add_argument("--mode", default="dry-run", choices=("dry-run", "on"))
    parser.add_argument("--seconds", type=int, default=600, help="virtual seconds the backlog waits")
    parser.add_argument("--event-every", type=int, default=30, help="seconds between a pod's Event changes")
    parser.add_argument("--depart-every", type=int, default=0, help="seconds between departures (0: none)")
    parser.add_argument("--interval", type=float, default=10.0, help="the server's --defrag-interval")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        print(json.dumps(run(args.worker, json.loads(sys.stdin.read()))))
        return
    from bench.pod_terms import cluster  # imports the sandbox and so this tree's webhook: not in a worker

    objects = cluster(args.nodes, 0.9, 0.0, args.pending, args.seed)
    pending, events = pending_objects(objects, args.nodes)
    scene = {
        "nodes": objects["nodes"],
        "pods": [*objects["pods"], *pending],
        "pending": pending,
        "events": events,
        "mode": args.mode,
        "seconds": args.seconds,
        "event_every": args.event_every,
        "interval": args.interval,
        "depart_every": args.depart_every,
    }
    body = json.dumps(scene)
    print(
        f"{args.nodes} nodes, {len(objects['pods'])} pods placed, {args.pending} Pending pods a whole card each; mode "
        f"{args.mode}; {args.seconds} s of virtual time, each pod's Event changed every {args.event_every} s, "
        f"--defrag-interval {args.interval:g}"
        + (f"; a running pod leaves every {args.depart_every} s" if args.depart_every else "")
    )
    print(
        f"{'tree':<7} {'looks':>6} {'plans':>6} {'snapshots':>9} {'CPU s':>8} "
        f"{'first pod planned after a departure':>36} {'each pod':>12}"
    )
    trees = [("after", ROOT)] + ([("before", args.before)] if args.before is not None else [])
    for name, tree in trees:
        command = [sys.executable, __file__, "--worker", str(tree)]
        out = subprocess.run(command, input=body, capture_output=True, text=True, check=True).stdout
        row = json.loads(out.splitlines()[-1])
        waits = row["replanned"] or {"first": "-", "every": "-"}
        print(
            f"{name:<7} {row['looks']:>6} {row['plans']:>6} {row['snapshots']:>9} {row['cpu']:>8.1f} "
            f"{'median / max ' + waits['first']:>36} {waits['every']:>12}",
            flush=True,
        )


if __name__ == "__main__":
    main()
