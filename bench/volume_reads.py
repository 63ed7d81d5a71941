"""What the controller's snapshot spends reading PersistentVolumes and their claims from its watch stores.

Each planning batch builds a snapshot, and with it the `Volumes` every claim and volume of the cluster make. The
server now reads each claim and volume once, when its watch brings it (`webhook.cache.project_volume_claim`,
`project_volume`: `volumes.claim_of`, `volume_of`), so a snapshot only gathers them; before, it kept the objects'
fields and read them all anew at each snapshot. --volumes local volumes (node affinity to one of 1,213 nodes' hostname,
eight a node) bound to as many claims, in one process per tree: this one, the baseline of reading the whole objects
at each snapshot (`volumes_of`, as the CLI reads what it lists), and --before, a checkout such as a `git worktree` of
main, as its server keeps and reads them. Printed side by side: CPU milliseconds a snapshot spends on them (best of
--runs) and the bytes kept a volume and its claim (tracemalloc, of 2,000).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
NODES = 1213


def volume(i: int) -> dict[str, Any]:
    """Local volume i, bound to claim i, on node i // 8."""
    hostname = {"key": "kubernetes.io/hostname", "operator": "In", "values": [f"gpu-{i // 8 % NODES:04d}"]}
    return {
        "metadata": {"name": f"pv-{i}", "resourceVersion": str(i), "labels": {"topology.kubernetes.io/zone": "z1"}},
        "spec": {
            "capacity": {"storage": "100Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "local",
            "volumeMode": "Filesystem",
            "claimRef": {"namespace": "team", "name": f"data-{i}", "uid": f"uid-{i}"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [hostname]}]}},
            "local": {"path": "/mnt/disk"},
            "persistentVolumeReclaimPolicy": "Delete",
        },
        "status": {"phase": "Bound"},
    }


def claim(i: int) -> dict[str, Any]:
    """Claim i, bound to volume i."""
    return {
        "metadata": {"namespace": "team", "name": f"data-{i}", "uid": f"uid-{i}", "resourceVersion": str(i)},
        "spec": {
            "volumeName": f"pv-{i}",
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "100Gi"}},
            "storageClassName": "local",
        },
        "status": {"phase": "Bound"},
    }


def measure(tree: str, count: int, runs: int) -> dict[str, float]:
    """In this process, with `tree`'s modules: CPU ms a snapshot reads the kept claims and volumes in, and bytes kept
    a volume and its claim; `tree` "whole": this tree reading the whole objects at each snapshot."""
    from kubectl_hami_place.core import volumes
    from webhook import cache

    raw_claims, raw_volumes = [claim(i) for i in range(count)], [volume(i) for i in range(count)]
    if tree == "whole":
        kept_claims, kept_volumes = raw_claims, raw_volumes
    else:
        kept_claims = [cache.project_volume_claim(c) for c in raw_claims]
        kept_volumes = [cache.project_volume(v) for v in raw_volumes]

    def snapshot() -> Any:
        if tree == "whole" or not hasattr(cache, "CLAIM"):
            return volumes.volumes_of(kept_claims, kept_volumes)
        claims = [c[cache.CLAIM] for c in kept_claims]
        return volumes.parsed_volumes(claims, [v[cache.VOLUME] for v in kept_volumes])

    best = float("inf")
    for _ in range(runs):
        started = time.process_time()
        read = snapshot()
        best = min(best, time.process_time() - started)
    assert len(read.claims) == len(read.volumes) == count
    tracemalloc.start()
    if tree == "whole":
        held = [(claim(i), volume(i)) for i in range(2000)]
    else:
        held = [(cache.project_volume_claim(claim(i)), cache.project_volume(volume(i))) for i in range(2000)]
    size = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del held
    return {"ms": best * 1000, "bytes": size / 2000}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--volumes", type=int, default=9704, help="local volumes, each bound to a claim")
    parser.add_argument("--runs", type=int, default=5, help="snapshots read per tree; the best is printed")
    parser.add_argument("--before", type=Path, help="a checkout whose server's reads are the before (none: skipped)")
    parser.add_argument("--child", nargs=2, metavar=("TREE", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        sys.path.insert(0, args.child[1])
        print(json.dumps(measure(args.child[0], args.volumes, args.runs)))
        return
    trees = [("now (read once a change)", "now", ROOT), ("whole objects at each snapshot", "whole", ROOT)]
    if args.before is not None:
        trees.append((f"before ({args.before})", "before", args.before))
    print(f"{args.volumes:,} local volumes and their claims, best of {args.runs} snapshots")
    print(f"{'tree':<50} {'CPU ms a snapshot':>18} {'B kept a volume+claim':>22}")
    for label, tree, path in trees:
        command = [sys.executable, __file__, "--child", tree, str(path.resolve())]
        command += ["--volumes", str(args.volumes), "--runs", str(args.runs)]
        found = json.loads(subprocess.run(command, capture_output=True, text=True, check=True).stdout)
        print(f"{label:<50} {found['ms']:>18.1f} {found['bytes']:>22,.0f}")


if __name__ == "__main__":
    main()
