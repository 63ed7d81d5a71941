"""What one poll of a settling move costs, before and after it reads the move's own pods alone.

While a move settles (its pod evicted, its replacement on its way to the target cards) the controller looks at it
every second (`webhook.defrag`'s `_step`) and so does `kubectl hami-place apply` (`kube.moves.move_state`). Each
look read the whole cluster: the controller a snapshot of every node and pod from its caches, `apply` a list of
every node, pod, PodDisruptionBudget and volume from the API server, and a snapshot of them. Now, once the pod was
evicted, a look reads the moved pod while it terminates and those its placement pinned (`planner.apply.
settling_pods`: the controller finds them in its cache, `apply` reads the pod under the moved pod's name and the
consumer its placement's status names), and builds a snapshot of those and the nodes they name (`settling_nodes`).

A cluster of API objects, the same for one --seed (bench/pod_terms.py's: --nodes nodes of 8 cards of 80 GiB, filled
to 90% by Deployments of one-card replicas), its pods spread over --namespaces namespaces; a move of one replica to
another node's card, seen in three states: the pod terminating, the pod gone and its replacement Pending, the
replacement on the target cards. Each tree (this one, and --before, a checkout such as a `git worktree` of main,
imported in a child process of its own) looks at each state as its controller does, the collector paused and the
allocations decoded ahead as the server's cache keeps them; a tree without `settling_pods` reads the whole snapshot,
as the controller did. Printed side by side: the step found, CPU milliseconds per look (best of --runs), and what
`apply`'s look reads from the API server, in JSON bytes of the objects (nodes and pods; the before read
PodDisruptionBudgets and volumes besides).
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.pod_terms import cluster

ROOT = Path(__file__).resolve().parent.parent
STATES = ("terminating", "replacement Pending", "replacement on target")


def scenes(objects: dict[str, Any], namespaces: int) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]]]:
    """The move (as `plan -o json` prints it) and the cluster's pods in each state; pods spread over the namespaces."""
    pods = objects["pods"]
    for index, pod in enumerate(pods):
        pod["metadata"]["namespace"] = f"team-{index % namespaces}"
    moved = pods[0]
    meta, uuid = moved["metadata"], moved["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"].split(",")[0]
    source = moved["spec"]["nodeName"]
    target = next(n for n in objects["nodes"] if n["metadata"]["name"] != source)
    register = json.loads(target["metadata"]["annotations"]["hami.io/node-nvidia-register"])
    target_name, target_card = target["metadata"]["name"], register[-1]["id"]
    move = {
        "pod": f"{meta['namespace']}/{meta['name']}",
        "uid": meta["uid"],
        "from": {"node": source, "cards": [uuid]},
        "to": {"node": target_name, "cards": [target_card]},
        "reason": "bench",
    }
    terminating = {**moved, "metadata": {**meta, "deletionTimestamp": "2026-12-06T04:00:00Z"}}
    rest = pods[1:]

    def replacement(placed: bool) -> dict[str, Any]:
        pod = json.loads(json.dumps(moved))
        pod["metadata"]["name"] += "-new"
        pod["metadata"]["uid"] += "-new"
        pod["metadata"]["annotations"] = {"scheduling.hami.placement.com/placement": "PLACEMENT"}
        pod["spec"].pop("nodeName")
        pod["status"]["phase"] = "Pending"
        if placed:
            mib = moved["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"]
            pod["metadata"]["annotations"]["hami.io/vgpu-node"] = target_name
            pod["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"] = f"{target_card},NVIDIA,{mib},0:;"
            pod["spec"]["nodeName"] = target_name
            pod["status"]["phase"] = "Running"
        return pod

    states = {
        STATES[0]: [terminating, *rest],
        STATES[1]: [*rest, replacement(False)],
        STATES[2]: [*rest, replacement(True)],
    }
    return move, states


def measure(tree: Path, objects: dict[str, Any], runs: int) -> dict[str, Any]:
    """The tree's look at the move in each state: its step, CPU ms (best of `runs`), and the bytes apply reads."""
    sys.path.insert(0, str(tree))
    import kubectl_hami_place
    from kubectl_hami_place.core.cluster_info import counted_allocation
    from kubectl_hami_place.core.hami_config import HAMI_DEFAULTS
    from kubectl_hami_place.core.planner import apply
    from kubectl_hami_place.kube.snapshot import snapshot_of

    if not Path(kubectl_hami_place.__file__).resolve().is_relative_to(tree.resolve()):
        raise SystemExit(f"imported {kubectl_hami_place.__file__}, not the planner of {tree}")
    move = apply.read_plan({"moves": [objects["move"]]}).moves[0]
    placement = apply.placement_for(move)
    namespace = move.pod.split("/", 1)[0]
    nodes = objects["nodes"]
    by_name = {n["metadata"]["name"]: n for n in nodes}
    named = {f"{namespace}/{placement}"}
    settling = getattr(apply, "settling_pods", None)
    rows = {}
    for state, pods in objects["states"].items():
        for pod in pods:
            annotations = pod["metadata"]["annotations"]
            if annotations.get("scheduling.hami.placement.com/placement") == "PLACEMENT":
                annotations["scheduling.hami.placement.com/placement"] = placement
        decoded = {(p["metadata"]["namespace"], p["metadata"]["name"]): (p, counted_allocation(p)) for p in pods}

        def look(pods: list[dict[str, Any]] = pods, decoded: dict[Any, Any] = decoded) -> tuple[Any, int]:
            """One look as the tree's controller makes it; and the JSON bytes apply's look reads."""
            own = settling(move, pods) if settling is not None else None
            if own is None:
                read = snapshot_of(nodes, pods, [], HAMI_DEFAULTS, allocations=decoded)
                return apply.move_step(move, read.snapshot, named), 0
            wanted = [by_name[name] for name in sorted(apply.settling_nodes(move, own)) if name in by_name]
            return apply.move_step(move, snapshot_of(wanted, own, [], HAMI_DEFAULTS).snapshot, named), len(wanted)

        seconds = []
        for _ in range(runs):
            gc.disable()
            start = time.process_time()
            check, read_nodes = look()
            seconds.append(time.process_time() - start)
            gc.enable()
        own = settling(move, pods) if settling is not None else None
        if own is not None:
            # apply reads these by name (the moved pod's, its placement's consumer's) and the nodes they name.
            wanted = apply.settling_nodes(move, own)
            read = json.dumps(own) + json.dumps([by_name[n] for n in wanted if n in by_name])
        else:
            read = json.dumps(pods) + json.dumps(nodes)
        rows[state] = {
            "step": f"{check.step}: {check.detail}",
            "ms": min(seconds) * 1000,
            "apply_bytes": len(read),
            "nodes_read": read_nodes,
        }
    return rows


def main() -> None:
    """Build the cluster, look at the move in each tree, print both."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path, help="a checkout whose looks are the before (none: after only)")
    parser.add_argument("--nodes", type=int, default=1213)
    parser.add_argument("--namespaces", type=int, default=50)
    parser.add_argument("--runs", type=int, default=3, help="looks per state, the fastest kept")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        print(json.dumps(measure(args.worker, json.loads(sys.stdin.read()), args.runs)))
        return
    objects = cluster(args.nodes, 0.9, 0.0, 0, args.seed)
    move, states = scenes(objects, args.namespaces)
    body = json.dumps({"nodes": objects["nodes"], "move": move, "states": states})
    pods = len(objects["pods"])
    print(f"{args.nodes} nodes x 8 cards, {pods} pods over {args.namespaces} namespaces; move {move['pod']}")
    print(f"{'state':<22} {'tree':<6} {'ms a look':>9} {'apply reads':>12}  step")
    trees = [("after", ROOT)] + ([("before", args.before)] if args.before is not None else [])
    results = {}
    for name, tree in trees:
        command = [sys.executable, __file__, "--worker", str(tree), "--runs", str(args.runs)]
        out = subprocess.run(command, input=body, capture_output=True, text=True, check=True).stdout
        results[name] = json.loads(out)
    for state in STATES:
        for name, _ in trees:
            row = results[name][state]
            kib = row["apply_bytes"] / 2**10
            print(f"{state:<22} {name:<6} {row['ms']:>9.1f} {kib:>8,.1f} KiB  {row['step']}", flush=True)


if __name__ == "__main__":
    main()
