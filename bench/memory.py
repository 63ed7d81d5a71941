"""What the webhook's cache holds per pod, per node and per placement.

In-process, no sandbox: --pods HAMi pods, --nodes nodes and --placements placements shaped as the sandbox's API
server stores them (the defaults it adds, managedFields, kubelet-style node status, the webhook's acknowledgement in
each placement's status), each decoded from its own JSON by orjson as the watch decodes an event, then stored as the
reflector would: whole, trimmed of managedFields (what the cache kept before), or projected (webhook.cache.project_pod
/ project_node / project_placement: what it keeps now; with --planning, project_pod_for_planning and
project_node_for_planning, what it keeps while the defragmentation controller runs; for as many pods of another
scheduler, project_counted_pod, what that controller keeps of each). Prints MiB held (tracemalloc) and bytes per
object.
Then the whole cache (webhook.cache.ClusterCache, with --planning as the server builds it then) listed through its
reflectors' own relist, pages of the API server's JSON, with its indexes (allocations by pod and node, claims,
placements by namespace and label): MiB held after each kind, and after GET /api/v1/cluster-info built its per-node
views.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from datetime import UTC, datetime
from types import SimpleNamespace

import orjson
from kubernetes.client import ApiClient

from bench import generate
from kubectl_hami_place.kube.watch import _trimmed
from webhook.cache import (
    ClusterCache,
    json_pieces,
    project_counted_pod,
    project_node,
    project_node_for_planning,
    project_placement,
    project_pod,
    project_pod_for_planning,
)

STAMP = "2026-11-30T14:11:27Z"


def stored_pod(i: int, nodes: int) -> dict[str, Any]:
    """HAMi pod i as the sandbox's API server stores it (defaults, service account volume, managedFields)."""
    pod = generate.pod(i, nodes)
    meta = pod["metadata"]
    token = f"kube-api-access-{i % 100000:05d}"
    container = {
        **generate.gpu_container(),
        "volumeMounts": [
            {"name": token, "readOnly": True, "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}
        ],
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
        "imagePullPolicy": "IfNotPresent",
    }
    container["resources"] = {"limits": container["resources"]["limits"], "requests": container["resources"]["limits"]}
    fields = {
        "f:metadata": {
            "f:annotations": {".": {}, **{f"f:{key}": {} for key in meta["annotations"]}},
            "f:labels": {".": {}, **{f"f:{key}": {} for key in meta["labels"]}},
        },
        "f:spec": {
            "f:containers": {
                'k:{"name":"main"}': {
                    ".": {},
                    **{f"f:{key}": {} for key in ("image", "imagePullPolicy", "name", "terminationMessagePath")},
                    "f:resources": {".": {}, "f:limits": {".": {}}, "f:requests": {".": {}}},
                }
            },
            **{f"f:{key}": {} for key in ("dnsPolicy", "enableServiceLinks", "nodeName", "restartPolicy")},
        },
    }
    tolerations = [
        {"key": f"node.kubernetes.io/{taint}", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
        for taint in ("not-ready", "unreachable")
    ]
    return {
        "metadata": {
            **meta,
            "generation": 1,
            "creationTimestamp": STAMP,
            "managedFields": [
                {
                    "manager": "python-urllib3",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": STAMP,
                    "fieldsType": "FieldsV1",
                    "fieldsV1": fields,
                }
            ],
        },
        "spec": {
            "volumes": [
                {
                    "name": token,
                    "projected": {
                        "sources": [
                            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                            {
                                "downwardAPI": {
                                    "items": [
                                        {
                                            "path": "namespace",
                                            "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                                        }
                                    ]
                                }
                            },
                        ],
                        "defaultMode": 420,
                    },
                }
            ],
            "containers": [container],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "serviceAccount": "default",
            "nodeName": pod["spec"]["nodeName"],
            "securityContext": {},
            "schedulerName": generate.SCHEDULER,
            "tolerations": tolerations,
            "priority": 0,
            "enableServiceLinks": True,
            "preemptionPolicy": "PreemptLowerPriority",
        },
        "status": {"phase": "Pending", "qosClass": "BestEffort"},
    }


def stored_other_pod(i: int, nodes: int) -> dict[str, Any]:
    """Pod i of another scheduler as the sandbox stores it: stored_pod's shape without HAMi's annotations or cards,
    asking CPU and memory (four CPU and eight memory sizes, as a few templates would)."""
    obj = stored_pod(i, nodes)
    obj["metadata"]["name"] = f"web-{i:06d}"
    obj["metadata"]["annotations"] = {}
    obj["spec"]["schedulerName"] = "default-scheduler"
    requests = {"cpu": f"{(i % 4 + 1) * 250}m", "memory": f"{(i % 8 + 1) * 256}Mi"}
    obj["spec"]["containers"][0]["resources"] = {"requests": requests}
    obj["status"] = {"phase": "Running", "qosClass": "Burstable"}
    return obj


# What NVIDIA's GPU feature discovery labels an A100 node with (GFD 0.16; nvidia.com/ prefixed).
GFD_LABELS = {
    "cuda.driver.major": "550",
    "cuda.driver.minor": "54",
    "cuda.driver.rev": "15",
    "cuda.runtime.major": "12",
    "cuda.runtime.minor": "4",
    "gfd.timestamp": "1733400000",
    "gpu.compute.major": "8",
    "gpu.compute.minor": "0",
    "gpu.count": "8",
    "gpu.family": "ampere",
    "gpu.machine": "p4d.24xlarge",
    "gpu.memory": "40960",
    "gpu.product": "NVIDIA-A100-SXM4-40GB",
    "gpu.replicas": "1",
    "gpu.sharing-strategy": "none",
    "mig.capable": "true",
    "mig.strategy": "single",
    "mps.capable": "false",
    "gpu.present": "true",
    "gpu.deploy.driver": "true",
    "gpu.deploy.device-plugin": "true",
    "gpu.deploy.gpu-feature-discovery": "true",
    "gpu.deploy.dcgm-exporter": "true",
}


def node_labels(n: int) -> dict[str, str]:
    """Node n's labels as a managed cloud node group and GPU feature discovery write them (40 in all)."""
    zone = f"us-west-2{'abc'[n % 3]}"
    cloud = {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/instance-type": "p4d.24xlarge",
        "beta.kubernetes.io/os": "linux",
        "eks.amazonaws.com/capacityType": "ON_DEMAND",
        "eks.amazonaws.com/nodegroup": "gpu-a100",
        "eks.amazonaws.com/nodegroup-image": "ami-0123456789abcdef0",
        "failure-domain.beta.kubernetes.io/region": "us-west-2",
        "failure-domain.beta.kubernetes.io/zone": zone,
        "k8s.io/cloud-provider-aws": "0123456789abcdef0123456789abcdef",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": "p4d.24xlarge",
        "topology.ebs.csi.aws.com/zone": zone,
        "topology.kubernetes.io/region": "us-west-2",
        "topology.kubernetes.io/zone": zone,
    }
    return {**cloud, **{f"nvidia.com/{key}": value for key, value in GFD_LABELS.items()}}


def stored_node(n: int) -> dict[str, Any]:
    """Node n as the sandbox stores it: HAMi's handshakes beside the register, kubelet-style conditions, and the
    labels of a cloud's GPU node (`node_labels`)."""
    node = generate.node(n)
    handshakes = {
        f"hami.io/node-handshake{suffix}": f"Requesting_{STAMP}" for suffix in ("", "-biren", "-dcu", "-va", "-xpu")
    }
    conditions = [
        {
            "type": kind,
            "status": "True" if kind == "Ready" else "False",
            "lastHeartbeatTime": STAMP,
            "lastTransitionTime": STAMP,
            "reason": f"Kubelet{kind}",
            "message": f"kubelet reports {kind}",
        }
        for kind in ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable")
    ]
    info = ("machineID", "systemUUID", "bootID", "kernelVersion", "osImage", "containerRuntimeVersion")
    return {
        "metadata": {
            **node["metadata"],
            "labels": {**node_labels(n), **node["metadata"]["labels"]},
            "uid": f"00000000-0000-0000-0001-{n:012d}",
            "resourceVersion": str(n + 1),
            "creationTimestamp": STAMP,
            "annotations": {**node["metadata"]["annotations"], **handshakes, "node.alpha.kubernetes.io/ttl": "0"},
            "managedFields": [
                {"manager": manager, "operation": "Update", "apiVersion": "v1", "time": STAMP, "fieldsType": "FieldsV1"}
                for manager in ("hami-scheduler", "python-urllib3", "kube-controller-manager")
            ],
        },
        "spec": {},
        "status": {
            **node["status"],
            "phase": "Running",
            "conditions": conditions,
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 0}},
            "nodeInfo": {key: "kwok-0.8.0" for key in info},
        },
    }


def stored_placement(k: int, nodes: int) -> dict[str, Any]:
    """Placement k as the sandbox stores it once the webhook acknowledged it (status, managedFields of both)."""
    obj = generate.placement(k, nodes)
    fields: dict[str, Any] = {"f:status": {".": {}, "f:observedGeneration": {}, "f:phase": {}}}
    obj["metadata"].update(
        uid=f"00000000-0000-0000-0002-{k:012d}",
        resourceVersion=str(100000 + k),
        generation=1,
        creationTimestamp=STAMP,
        managedFields=[
            {
                "manager": manager,
                "operation": "Update",
                "apiVersion": obj["apiVersion"],
                "time": STAMP,
                "fieldsType": "FieldsV1",
                "fieldsV1": fields,
            }
            for manager in ("python-urllib3", "hami-place-webhook")
        ],
    )
    obj["status"] = {"phase": "Pending", "observedGeneration": 1}
    return obj


def held(texts: list[bytes], keep: Callable[[dict[str, Any]], dict[str, Any]]) -> float:
    """Bytes still allocated once every object is decoded (one orjson.loads each, as watch events) and kept."""
    gc.collect()
    tracemalloc.start()
    store = [keep(orjson.loads(text)) for text in texts]
    gc.collect()
    size, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del store
    return float(size)


def pages(make: Callable[[int], dict[str, Any]], count: int) -> Callable[..., Any]:
    """A list call answering pages of `count` objects as the API server does (limit, continue)."""

    def call(*, limit: int, _continue: str = "", **_: Any) -> Any:
        start = int(_continue or 0)
        end = min(count, start + limit)
        more = {"continue": str(end)} if end < count else {}
        body = {"metadata": {"resourceVersion": "1", **more}, "items": [make(i) for i in range(start, end)]}
        return SimpleNamespace(data=orjson.dumps(body))

    return call


def cache_held(nodes: int, pods: int, placements: int, *, planning: bool) -> None:
    """The whole cache listed kind after kind, then one cluster-info: MiB held after each, and per object."""
    cache = ClusterCache(ApiClient(), generate.SCHEDULER, planning=planning)
    cache.nodes._list_call = pages(stored_node, nodes)
    cache.pods._list_call = pages(lambda i: stored_pod(i, nodes), pods)
    cache.placements._list_call = pages(lambda k: stored_placement(k, nodes), placements)
    gc.collect()
    tracemalloc.start()
    before = 0
    print(f"\nClusterCache, listed: {'MiB held':>9} {'added':>7}")
    for what, count, step in (
        ("nodes", nodes, cache.nodes._relist),
        ("pods", pods, cache.pods._relist),
        ("placements", placements, cache.placements._relist),
        ("cluster-info views", nodes, lambda: list(json_pieces(cache.cluster_info_document(datetime.now(UTC))))),
    ):
        step()
        gc.collect()
        size, _ = tracemalloc.get_traced_memory()
        added = size - before
        print(f"  {what:<19} {size / 2**20:9.1f} {added / 2**20:7.1f}  ({added / max(count, 1):5.0f} B each)")
        before = size
    tracemalloc.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=40000)
    parser.add_argument("--placements", type=int, default=10000)
    parser.add_argument(
        "--planning", action="store_true", help="as the server keeps them while its defragmentation controller runs"
    )
    args = parser.parse_args(argv)
    placements = [json.dumps(stored_placement(k, args.nodes)).encode() for k in range(args.placements)]
    pod_projection, node_projection = (
        (project_pod_for_planning, project_node_for_planning) if args.planning else (project_pod, project_node)
    )
    kinds = (
        ("pods", [json.dumps(stored_pod(i, args.nodes)).encode() for i in range(args.pods)], pod_projection),
        ("nodes", [json.dumps(stored_node(n)).encode() for n in range(args.nodes)], node_projection),
        ("placements", placements, project_placement),
        (
            "other pods",
            [json.dumps(stored_other_pod(i, args.nodes)).encode() for i in range(args.pods)],
            project_counted_pod,
        ),
    )
    print(
        f"{'kind':<10} {'count':>6} {'JSON B/obj':>10} | {'whole':>15} | {'no managedFields':>16} | {'projected':>15}"
    )
    for kind, texts, project in kinds:
        whole, trimmed, projected = (held(texts, keep) for keep in (lambda obj: obj, _trimmed, project))
        count = len(texts)
        json_size = sum(map(len, texts)) / count

        def cell(size: float, count: int = count) -> str:
            return f"{size / 2**20:6.1f} MiB {size / count:5.0f} B"

        print(f"{kind:<10} {count:>6} {json_size:10.0f} | {cell(whole)} | {cell(trimmed):>16} | {cell(projected)}")
    del kinds, placements
    cache_held(args.nodes, args.pods, args.placements, planning=args.planning)
    return 0


if __name__ == "__main__":
    sys.exit(main())
