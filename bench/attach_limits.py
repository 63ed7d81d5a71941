"""What counting CSI attach limits (kube-scheduler's NodeVolumeLimits) costs a snapshot and a rescue's plan.

The cluster of bench/pod_terms.py (--nodes of 8 cards of 80 GiB, filled to --fill by Deployments of one-card
replicas, no pod terms), where a share of the replicas (--claiming) mount a claim bound to an EBS CSI volume, each
with its VolumeAttachment to its node, as a cloud cluster's are. Every node has a CSINode that limits EBS to --limit
volumes, or (`tight`) to the volumes its replicas hold already, so that no replica that claims one may move to it.
Each --pending pod asks a whole card, which no node has free: room is made by moving replicas.

Three readings of the same objects, in one process, interleaved: the volumes read without attach limits (what every
tree before this one planned with), with the limits, and with the tight limits. For each: the snapshot's CPU seconds
(best of --runs) and each rescue's plan CPU seconds (median / max), the cyclic collector paused as the server's
controller plans, the plans found and their moves, and the moves of replicas that claim a volume to another node.
First, the bytes the server's controller keeps a VolumeAttachment and a CSINode by.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import statistics
import sys
import time
import tracemalloc
import uuid
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import orjson

from bench.pod_terms import cluster
from kubectl_hami_place.core.attach_limits import attach_limits_of
from kubectl_hami_place.core.defrag.triggers import pending_pod
from kubectl_hami_place.core.hami_config import HAMI_DEFAULTS
from kubectl_hami_place.core.node_selection import node_marks
from kubectl_hami_place.core.planner import FitGoal, Limits, plan
from kubectl_hami_place.core.planner.objects import keep_counted_on_node, snapshot_from_objects
from kubectl_hami_place.core.volumes import Volumes, volumes_of
from webhook.cache import project_csi_node, project_volume_attachment

DRIVER = "ebs.csi.aws.com"


def with_volumes(
    objects: dict[str, Any], share: float, limit: int
) -> tuple[
    list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]
]:
    """Every `1/share`-th replica claims a CSI volume: the claims, volumes and attachments, and the CSINodes at
    `limit` and at each node's own count."""
    claims, volumes, attachments = [], [], []
    every = max(1, round(1 / share)) if share else 0
    held: Counter[str] = Counter()
    for index, pod in enumerate(objects["pods"]):
        if not every or index % every:
            continue
        name, node = pod["metadata"]["name"], pod["spec"]["nodeName"]
        # named as the provisioner and the attach-detach controller name them (pvc-<uid>, csi-<sha256>)
        volume = f"pvc-{uuid.uuid5(uuid.NAMESPACE_DNS, name)}"
        attachment_name = "csi-" + hashlib.sha256(f"{volume}{DRIVER}{node}".encode()).hexdigest()
        pod["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": f"data-{name}"}}]
        claims.append({"metadata": {"namespace": "bench", "name": f"data-{name}"}, "spec": {"volumeName": volume}})
        volumes.append({"metadata": {"name": volume}, "spec": {"csi": {"driver": DRIVER, "volumeHandle": name}}})
        source = {"persistentVolumeName": volume}
        attachments.append(
            {"metadata": {"name": attachment_name}, "spec": {"attacher": DRIVER, "nodeName": node, "source": source}}
        )
        held[node] += 1
    names = [n["metadata"]["name"] for n in objects["nodes"]]

    def csi_nodes(count: Any) -> list[dict[str, Any]]:
        return [
            {
                "metadata": {"name": n},
                "spec": {"drivers": [{"name": DRIVER, "nodeID": n, "allocatable": {"count": count(n)}}]},
            }
            for n in names
        ]

    return claims, volumes, attachments, csi_nodes(lambda _: limit), csi_nodes(lambda n: held[n])


def reading(objects: dict[str, Any], volumes: Volumes, runs: int) -> dict[str, Any]:
    """The snapshot's CPU seconds and every rescue's plan, collector paused."""
    nodes, pods = objects["nodes"], objects["pods"]
    claiming = {f"bench/{p['metadata']['name']}" for p in pods if "volumes" in p["spec"]}
    seconds = []
    gc.disable()
    try:
        for _ in range(runs):
            start = time.process_time()
            snapshot, _ = snapshot_from_objects(nodes, pods, [], datetime.now(UTC), HAMI_DEFAULTS, volumes=volumes)
            seconds.append(time.process_time() - start)
        marks = node_marks(nodes)
        plans, found, moves, moved_claiming = [], 0, 0, 0
        for waiting in objects["pending"]:
            read = pending_pod(waiting, marks, HAMI_DEFAULTS, pods, snapshot, volumes=volumes)
            held = keep_counted_on_node(snapshot, read.pod)
            start = time.process_time()
            result = plan(held, FitGoal(read.pod), Limits(max_moves=8, max_moves_per_node=8))
            plans.append(time.process_time() - start)
            if result.target is not None:
                found += 1
                moves += len(result.moves)
                moved_claiming += sum(1 for m in result.moves if m.pod in claiming and m.to_node != m.from_node)
    finally:
        gc.enable()
    return {
        "snapshot": min(seconds),
        "plan_median": statistics.median(plans),
        "plan_max": max(plans),
        "found": found,
        "moves": moves,
        "moved_claiming": moved_claiming,
    }


def kept_bytes(attachments: list[dict[str, Any]], csi_nodes: list[dict[str, Any]]) -> tuple[float, float]:
    """What the server's controller keeps a VolumeAttachment and a CSINode by (its watch's projections), in bytes, of
    objects decoded one by one as watch events bring them."""
    objects = [orjson.dumps(attachment) for attachment in attachments], [orjson.dumps(node) for node in csi_nodes]
    gc.collect()
    tracemalloc.start()
    kept = [project_volume_attachment(orjson.loads(raw)) for raw in objects[0]]
    attached = tracemalloc.get_traced_memory()[0]
    kept_nodes = [project_csi_node(orjson.loads(raw)) for raw in objects[1]]
    both = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert len(kept) + len(kept_nodes) == sum(map(len, objects))
    return attached / len(kept), (both - attached) / len(kept_nodes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1213)
    parser.add_argument("--fill", type=float, default=0.9)
    parser.add_argument("--claiming", type=float, default=0.5, help="share of the replicas that claim a CSI volume")
    parser.add_argument("--limit", type=int, default=39, help="each node's EBS attach limit (an m5's)")
    parser.add_argument("--pending", type=int, default=10)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2, help="the three readings, interleaved, this many times")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    objects = cluster(args.nodes, args.fill, 0.0, args.pending, args.seed)
    claims, volumes, attachments, limited, tight = with_volumes(objects, args.claiming, args.limit)
    readings = {
        "no attach limits read (before)": volumes_of(claims, volumes),
        f"EBS limit {args.limit} a node": volumes_of(claims, volumes, attach=attach_limits_of(limited, attachments)),
        "EBS limit = each node's own count": volumes_of(claims, volumes, attach=attach_limits_of(tight, attachments)),
    }
    per_attachment, per_node = kept_bytes(attachments, limited)
    print(f"the server keeps {per_attachment:.0f} B a VolumeAttachment and {per_node:.0f} B a CSINode")
    print(
        f"{args.nodes} nodes, {len(objects['pods'])} replicas, {len(claims)} claiming an EBS volume, "
        f"{len(objects['pending'])} rescues of a whole card within 8 moves; CPU seconds, collector paused"
    )
    print(
        "| reading | round | snapshot | plan (median / max) | plans found | moves "
        "| claiming replicas moved to another node |"
    )
    print("| --- | ---: | ---: | --- | ---: | ---: | ---: |")
    for round_ in range(1, args.rounds + 1):
        for words, read in readings.items():
            got = reading(objects, read, args.runs)
            print(
                f"| {words} | {round_} | {got['snapshot']:.3f} | {got['plan_median']:.3f} / {got['plan_max']:.3f} | "
                f"{got['found']} / {len(objects['pending'])} | {got['moves']} | {got['moved_claiming']} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
