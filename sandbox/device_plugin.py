"""A stand-in for HAMi's NVIDIA device plugin on the sandbox's kwok nodes: it completes each bind as Allocate does.

HAMi's scheduler binds a pod with `hami.io/bind-phase: allocating` and takes the node lock (`hami.io/mutex.lock`).
On a real node the kubelet then calls the device plugin's Allocate, which erases the pod's entries from
`hami.io/vgpu-devices-to-allocate`, sets `hami.io/bind-phase: success` and releases the node lock
(pkg/device-plugin/nvidiadevice/nvinternal/plugin/util.go, `PodAllocationSuccess`). kwok runs no kubelet, so this
process does those three writes for every pod bound to a kwok node. `hami.io/vgpu-devices-allocated`, which is what
HAMi counts usage from, stays as HAMi's scheduler wrote it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import urllib3
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

NODE_LABEL = "hami.io/vgpu-node"
BIND_PHASE = "hami.io/bind-phase"
TO_ALLOCATE = "hami.io/vgpu-devices-to-allocate"
NODE_LOCK = "hami.io/mutex.lock"
BIND_TIME = "hami.io/bind-time"
# HAMi's NodeLockTimeout: a lock older than this is broken by HAMi itself, so only pods bound since are looked at again.
LOCK_TIMEOUT_SECONDS = 300


def erased(to_allocate: str) -> str:
    """Every container's entry emptied, as the plugin leaves it once each container got its devices."""
    return ";" * to_allocate.count(";")


def lock_owned_by(lock: str, namespace: str, name: str) -> bool:
    """Whether the node lock was taken for this pod (`<time>,<ns>,<pod>`); a bare time (legacy) is anyone's."""
    return "," not in lock or lock.endswith(f",{namespace},{name}")


def bound_since(annotations: dict[str, str], since: float) -> bool:
    """Whether HAMi's scheduler bound the pod (`hami.io/bind-time`, unix seconds) at or after `since`."""
    try:
        return float(annotations.get(BIND_TIME, "")) >= since
    except ValueError:
        return False


def complete(api: client.CoreV1Api, pod: Any, now: float | None = None) -> bool:
    """Completes one pod's allocation; returns True when it wrote anything. A pod already completed whose node lock
    is still taken for it (the lock's release failed after the pod's write) gets the lock released on its next
    event, or HAMi's scheduler would bind nothing more on that node until the lock expires (five minutes)."""
    annotations = pod.metadata.annotations or {}
    phase = annotations.get(BIND_PHASE)
    if not pod.spec.node_name or phase not in ("allocating", "success"):
        return False
    if phase == "success" and not bound_since(
        annotations, (time.time() if now is None else now) - LOCK_TIMEOUT_SECONDS
    ):
        return False
    namespace, name = pod.metadata.namespace, pod.metadata.name
    if phase == "allocating":
        patch = {
            "metadata": {"annotations": {BIND_PHASE: "success", TO_ALLOCATE: erased(annotations.get(TO_ALLOCATE, ""))}}
        }
        try:
            api.patch_namespaced_pod(name, namespace, patch)
        except ApiException as error:
            if error.status == 404:
                return False
            raise
    try:
        node: Any = api.read_node(pod.spec.node_name)
    except ApiException as error:
        if error.status == 404:
            return phase == "allocating"
        raise
    lock = (node.metadata.annotations or {}).get(NODE_LOCK)
    # Once completed, only a lock naming this pod is its own: a bare time may be another bind's.
    ours = lock is not None and (
        lock_owned_by(lock, namespace, name) if phase == "allocating" else lock.endswith(f",{namespace},{name}")
    )
    if ours:
        api.patch_node(pod.spec.node_name, {"metadata": {"annotations": {NODE_LOCK: None}}})
    return phase == "allocating" or ours


def run(api: client.CoreV1Api) -> None:
    """Lists, then watches, the pods HAMi has placed (labelled with their node), completing each new bind."""
    while True:
        try:
            listed: Any = api.list_pod_for_all_namespaces(label_selector=NODE_LABEL)
            for pod in listed.items:
                complete(api, pod)
            stream = watch.Watch().stream(
                api.list_pod_for_all_namespaces,
                label_selector=NODE_LABEL,
                resource_version=listed.metadata.resource_version,
                timeout_seconds=300,
            )
            for event in stream:
                # The client yields None for a line it cannot decode (an empty one as the stream closes).
                if event and event["type"] in ("ADDED", "MODIFIED"):
                    complete(api, event["object"])
        except (ApiException, urllib3.exceptions.HTTPError, OSError) as error:
            # A 410, a broken watch or a failed write: list again after a pause, as an informer does.
            print(f"device-plugin stand-in: watch ended: {error}", file=sys.stderr, flush=True)
            time.sleep(1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    args = parser.parse_args(argv)
    api = client.CoreV1Api(config.new_client_from_config(config_file=args.kubeconfig))
    print(json.dumps({"device-plugin stand-in": "watching pods labelled " + NODE_LABEL}), flush=True)
    run(api)
    return 0


if __name__ == "__main__":
    sys.exit(main())
