"""Rescues when replicas are placed by other pods (required anti-affinity, a topology spread), before and after.

A cluster of API objects, the same in every run (--seed): --nodes of bench/generate.py's nodes (8 cards of 80 GiB),
filled to --fill of their memory by Deployments of 2 to 12 one-card replicas, each replica on the least used card of
a few nodes (HAMi's spread, which scatters them over every card); a share of the Deployments (--terms-share) keeps
its replicas one to a node by a required hostname anti-affinity, or (every other such Deployment) by a hostname
spread of maxSkew 1. Then
--pending pods that each ask a whole card (none is free, and at 90% no node has a card's memory free in all) are
planned for, one after the other on the same snapshot: room is made only by moving replicas to other nodes.

Each tree (this one, and --before, a checkout such as a `git worktree` of main, imported in a child process of its
own) reads the objects into its snapshot (`snapshot_from_objects`: CPU seconds, best of --runs, and the MiB it
keeps, by tracemalloc; CPU seconds again with the cyclic collector paused, as the server's controller reads it)
and plans each rescue as the controller does (the Pending pod read with the pods its terms select, the pods it
counts kept on their nodes), twice, each time on a snapshot read anew: with the cyclic garbage
collector on (as `kubectl hami-place plan` plans) and paused (as the server's controller plans); printed side by
side: snapshot seconds and MiB, plans found, CPU seconds of a plan (median / max) both ways, moves, and moves of
replicas placed by other pods; then keep-room's goals (1, 2 and 4 more whole free cards, 2 on one node) within 8
moves on the same snapshot, and two harder rescues (a whole card within 2 moves, which has no plan here, and 2 whole
cards on one node within 8), collector paused: CPU seconds, complete or not, moves.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.generate import CARD_MIB, CARDS, card_uuid, node, node_name

ROOT = Path(__file__).resolve().parent.parent
HOSTNAME = "kubernetes.io/hostname"


def terms_of(app: str, kind: str) -> dict[str, Any]:
    """The pod spec's part that places a replica by the others."""
    apart = {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": HOSTNAME}
    if kind == "anti-affinity":
        return {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [apart]}}}
    if kind == "spread":
        return {"topologySpreadConstraints": [{**apart, "maxSkew": 1, "whenUnsatisfiable": "DoNotSchedule"}]}
    return {}


def pod(name: str, app: str, mib: int, spec: dict[str, Any], where: tuple[str, str] | None) -> dict[str, Any]:
    """A one-card replica of `app` asking `mib`, placed by HAMi on (node, card) when given."""
    annotations = {}
    if where is not None:
        annotations = {"hami.io/vgpu-node": where[0], "hami.io/vgpu-devices-allocated": f"{where[1]},NVIDIA,{mib},0:;"}
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(mib)}
    return {
        "metadata": {
            "name": name,
            "namespace": "bench",
            "uid": f"uid-{name}",
            "labels": {"app": app},
            "annotations": annotations,
            "ownerReferences": [{"kind": "ReplicaSet", "name": app, "controller": True}],
        },
        "spec": {
            "schedulerName": "hami-scheduler",
            **({"nodeName": where[0]} if where is not None else {}),
            "containers": [{"name": "c", "resources": {"limits": limits}}],
            **spec,
        },
        "status": {"phase": "Running" if where is not None else "Pending"},
    }


def cluster(nodes: int, fill: float, share: float, pending: int, seed: int) -> dict[str, Any]:
    """The nodes, the placed replicas and the Pending pods, the same for one seed."""
    rng = random.Random(seed)
    used = {(n, c): 0 for n in range(nodes) for c in range(CARDS)}
    apps_on: dict[int, set[str]] = {n: set() for n in range(nodes)}
    pods, total, target, app_index = [], 0, fill * nodes * CARDS * CARD_MIB, 0
    while total < target:
        app, app_index = f"app-{app_index}", app_index + 1
        kind = ""
        if rng.random() < share:
            kind = "anti-affinity" if app_index % 2 else "spread"
        mib = rng.choice((8, 12, 16, 20, 24, 32, 40)) * 1024
        for replica in range(rng.randint(2, 12)):
            choices = [n for n in rng.sample(range(nodes), min(8, nodes)) if not (kind and app in apps_on[n])]
            cards = [(used[(n, i)], n, i) for n in choices for i in range(CARDS) if used[(n, i)] + mib <= CARD_MIB]
            if not cards:
                continue
            _, where, card = min(cards)
            used[(where, card)] += mib
            apps_on[where].add(app)
            total += mib
            placed_on = (node_name(where), card_uuid(where, card))
            pods.append(pod(f"{app}-{replica}", app, mib, terms_of(app, kind), placed_on))
    ask = CARD_MIB
    waiting = [pod(f"waiting-{i}", f"waiting-{i}", ask, {}, None) for i in range(pending)]
    two = pod("waiting-two", "waiting-two", ask, {}, None)
    two["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "2"
    nodes_made = [node(n) for n in range(nodes)]
    return {"nodes": nodes_made, "pods": pods, "pending": waiting, "pending_two": two, "ask": ask}


def measure(tree: Path, objects: dict[str, Any], runs: int) -> dict[str, Any]:
    """The tree's snapshot time and its rescues of every Pending pod."""
    sys.path.insert(0, str(tree))
    import kubectl_hami_place
    from kubectl_hami_place.core.defrag.triggers import pending_pod
    from kubectl_hami_place.core.hami_config import HAMI_DEFAULTS
    from kubectl_hami_place.core.node_selection import node_marks
    from kubectl_hami_place.core.planner import FitGoal, FreeCardsGoal, Limits, plan
    from kubectl_hami_place.core.planner.objects import keep_counted_on_node, snapshot_from_objects

    if not Path(kubectl_hami_place.__file__).resolve().is_relative_to(tree.resolve()):
        raise SystemExit(f"imported {kubectl_hami_place.__file__}, not the planner of {tree}")
    from datetime import UTC, datetime

    nodes, pods = objects["nodes"], objects["pods"]
    tracemalloc.start()
    snapshot, _ = snapshot_from_objects(nodes, pods, [], datetime.now(UTC), HAMI_DEFAULTS)
    kept = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del snapshot
    seconds, paused_snapshot = [], []
    for _ in range(runs):
        for times in (seconds, paused_snapshot):
            if times is paused_snapshot:
                gc.disable()  # as the server's controller reads it (webhook/collector.py)
            start = time.process_time()
            snapshot, _ = snapshot_from_objects(nodes, pods, [], datetime.now(UTC), HAMI_DEFAULTS)
            times.append(time.process_time() - start)
            gc.enable()
    marks = node_marks(nodes)
    placed_by_pods = {
        f"bench/{p['metadata']['name']}" for p in pods if set(p["spec"]) & {"affinity", "topologySpreadConstraints"}
    }

    def rescue(waiting: dict[str, Any], snapshot: Any) -> tuple[Any, Any]:
        """The snapshot and goal the controller plans a Pending pod's rescue with (the Pending pod read with the
        pods its terms select, those it counts kept on their nodes; `counted` is missing in older trees)."""
        read = pending_pod(waiting, marks, HAMI_DEFAULTS, pods, snapshot)
        return keep_counted_on_node(snapshot, read.counted if hasattr(read, "counted") else read.pod), FitGoal(read.pod)

    eight = Limits(max_moves=8, max_moves_per_node=8)
    found, plan_seconds, paused_seconds, moves, moved_by_pods = 0, [], [], 0, 0
    for paused in (False, True):
        # each pass on a snapshot of its own: what a pod's first plan works out once is paid in both
        snapshot, _ = snapshot_from_objects(nodes, pods, [], datetime.now(UTC), HAMI_DEFAULTS)
        for waiting in objects["pending"]:
            held, goal = rescue(waiting, snapshot)
            if paused:
                gc.disable()  # as the server plans (webhook/collector.py)
            start = time.process_time()
            result = plan(held, goal, eight)
            (paused_seconds if paused else plan_seconds).append(time.process_time() - start)
            gc.enable()
            if result.target is not None and not paused:
                found += 1
                moves += len(result.moves)
                moved_by_pods += sum(1 for m in result.moves if m.pod in placed_by_pods)
    rooms = []
    gc.disable()  # keep-room's goals and the hard rescues, as the controller plans them
    for goal in (FreeCardsGoal(1), FreeCardsGoal(2), FreeCardsGoal(4), FreeCardsGoal(2, on_one_node=True)):
        start = time.process_time()
        result = plan(snapshot, goal, eight)
        rooms.append([goal.describe(), time.process_time() - start, result.complete, len(result.moves)])
    hard = (
        ("rescue of a whole card within 2 moves", objects["pending"][0], Limits(max_moves=2, max_moves_per_node=2)),
        ("rescue of 2 whole cards within 8 moves", objects["pending_two"], eight),
    )
    for words, waiting, limits in hard:
        held, rescue_goal = rescue(waiting, snapshot)
        start = time.process_time()
        result = plan(held, rescue_goal, limits)
        rooms.append([words, time.process_time() - start, result.complete, len(result.moves)])
    gc.enable()
    return {
        "rooms": rooms,
        "snapshot": min(seconds),
        "snapshot_paused": min(paused_snapshot),
        "kept_mib": kept / 2**20,
        "found": found,
        "plans": len(objects["pending"]),
        "plan_median": statistics.median(plan_seconds),
        "plan_max": max(plan_seconds),
        "paused_median": statistics.median(paused_seconds),
        "paused_max": max(paused_seconds),
        "moves": moves,
        "moved_by_pods": moved_by_pods,
    }


def main() -> None:
    """Build the cluster for each share, measure before and after, print both."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path, help="a checkout whose planner is the before (none: after only)")
    parser.add_argument("--nodes", type=int, default=1213)
    parser.add_argument("--fill", type=float, default=0.9, help="share of the cards' memory the replicas take")
    parser.add_argument("--terms-shares", default="0,0.5,1", help="shares of Deployments placed by other pods")
    parser.add_argument("--pending", type=int, default=20)
    parser.add_argument("--runs", type=int, default=3, help="snapshot readings, the fastest kept")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        objects = json.loads(sys.stdin.read())
        print(json.dumps(measure(args.worker, objects, args.runs)))
        return
    trees = [("after", ROOT)] + ([("before", args.before)] if args.before is not None else [])
    print(
        f"{args.nodes} nodes x {CARDS} cards of 80 GiB, filled to {args.fill:.0%}; "
        f"{args.pending} Pending pods a whole card each"
    )
    header = (
        f"{'share':>5} {'pods':>6} {'ask':>6} {'tree':<6} {'snapshot s':>10} {'paused':>6} {'MiB':>6} {'found':>7} "
        f"{'plan s (median/max)':>20} {'collector paused':>16}"
    )
    print(header + f" {'moves':>5} {'of replicas placed by pods':>26}")
    for share in (float(s) for s in args.terms_shares.split(",")):
        objects = cluster(args.nodes, args.fill, share, args.pending, args.seed)
        body = json.dumps(objects)
        for name, tree in trees:
            command = [sys.executable, __file__, "--worker", str(tree), "--runs", str(args.runs)]
            out = subprocess.run(command, input=body, capture_output=True, text=True, check=True).stdout
            row = json.loads(out)
            plan_s = f"{row['plan_median']:.3f} / {row['plan_max']:.3f}"
            paused_s = f"{row['paused_median']:.3f} / {row['paused_max']:.3f}"
            print(
                f"{share:>5.2f} {len(objects['pods']):>6} {objects['ask'] // 1024:>4}Gi {name:<6} "
                f"{row['snapshot']:>10.2f} {row['snapshot_paused']:>6.2f} {row['kept_mib']:>6.0f} "
                f"{row['found']:>3}/{row['plans']:<3} {plan_s:>20} {paused_s:>16} {row['moves']:>5} "
                f"{row['moved_by_pods']:>26}",
                flush=True,
            )
            for goal, seconds, complete, moves in row["rooms"]:
                print(
                    f"{'':>5} {name}: {goal}: {seconds:.3f} s, {'complete' if complete else 'incomplete'}, "
                    f"{moves} move(s)",
                    flush=True,
                )


if __name__ == "__main__":
    main()
