"""What the webhook's cache holds per pod and per node: the API server's object, without managedFields, projected.

In-process, no sandbox: --pods HAMi pods and --nodes nodes shaped as the sandbox's API server stores them (the
defaults it adds, managedFields, kubelet-style node status), each decoded from its own JSON as a watch event is,
then stored as the reflector would: whole, trimmed of managedFields (what the cache kept before), or projected
(webhook.cache.project_pod / project_node: what it keeps now). Prints MiB held (tracemalloc) and bytes per object.
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

from bench import generate
from kubectl_hami_place.kube.watch import _trimmed
from webhook.cache import project_node, project_pod

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


def stored_node(n: int) -> dict[str, Any]:
    """Node n as the sandbox stores it: HAMi's handshakes beside the register, kubelet-style conditions."""
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


def held(texts: list[bytes], keep: Callable[[dict[str, Any]], dict[str, Any]]) -> float:
    """Bytes still allocated once every object is decoded (one json.loads each, as watch events) and kept."""
    gc.collect()
    tracemalloc.start()
    store = [keep(json.loads(text)) for text in texts]
    gc.collect()
    size, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del store
    return float(size)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=40000)
    args = parser.parse_args(argv)
    kinds = (
        ("pods", [json.dumps(stored_pod(i, args.nodes)).encode() for i in range(args.pods)], project_pod),
        ("nodes", [json.dumps(stored_node(n)).encode() for n in range(args.nodes)], project_node),
    )
    print(f"{'kind':<6} {'count':>6} {'JSON B/obj':>10} | {'whole':>15} | {'no managedFields':>16} | {'projected':>15}")
    for kind, texts, project in kinds:
        whole, trimmed, projected = (held(texts, keep) for keep in (lambda obj: obj, _trimmed, project))
        count = len(texts)
        json_size = sum(map(len, texts)) / count

        def cell(size: float, count: int = count) -> str:
            return f"{size / 2**20:6.1f} MiB {size / count:5.0f} B"

        print(f"{kind:<6} {count:>6} {json_size:10.0f} | {cell(whole)} | {cell(trimmed):>16} | {cell(projected)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
