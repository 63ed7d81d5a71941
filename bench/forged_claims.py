"""Admissions per second of forged annotated pods (issue 23 item 2): each carries our annotations naming a real
placement with a token it never held, so the webhook re-reads the placement and asks the API server whether a stored
pod carries the token. Before the claim-digest label that was a whole LIST of the pod's namespace; now it is a LIST
by label selector.

Starts a sandbox of its own (stopped at the end), fills one namespace with --pods pods (of no scheduler: nothing
runs them), starts the webhook, creates one placement there, and POSTs forged AdmissionReviews straight to /mutate
over TLS from --clients threads for --duration seconds. Prints admissions/s and the latency percentiles. Run it on
the commit before the label and on the one after to compare.
"""

from __future__ import annotations

import argparse
import ssl
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from kubernetes import client

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._clusters import create_review
from sandbox import prepare
from sandbox.cluster import running, stop_on_signals
from sandbox.webhook import Webhook, start

NAMESPACE = "forged"
GROUP, VERSION, PLURAL = "scheduling.hami.placement.com", "v1", "hamipodplacements"


def fill(core: client.CoreV1Api, count: int) -> None:
    """`count` small pods in the namespace, none scheduled."""

    def create(index: int) -> None:
        body = {
            "metadata": {"name": f"filler-{index:05d}", "labels": {"app": "filler"}},
            "spec": {"schedulerName": "nobody", "containers": [{"name": "main", "image": "busybox"}]},
        }
        core.create_namespaced_pod(NAMESPACE, body)

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(create, range(count)))


def forged_review() -> bytes:
    """A pod claiming the real placement with a token it never held."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "namespace": NAMESPACE,
            "labels": {"app": "forged"},
            "annotations": {f"{GROUP}/placement": "real", f"{GROUP}/claim": uuid.uuid4().hex},
        },
        "spec": {
            "schedulerName": "hami-scheduler",
            "containers": [{"name": "main", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 1}}}],
        },
    }
    return create_review(pod)


def hammer(webhook: Webhook, clients: int, duration: float) -> list[float]:
    """Latencies (s) of the forged admissions `clients` threads got answered in `duration` seconds."""
    context = ssl.create_default_context(cafile=str(webhook.certs / "ca.crt"))
    latencies: list[float] = []
    lock = threading.Lock()
    stop_at = time.monotonic() + duration

    def one_client() -> None:
        while time.monotonic() < stop_at:
            started = time.perf_counter()
            request = urllib.request.Request(
                webhook.url, data=forged_review(), method="POST", headers={"Content-Type": "application/json"}
            )
            with urllib.request.urlopen(request, timeout=30, context=context) as reply:
                reply.read()
            with lock:
                latencies.append(time.perf_counter() - started)

    threads = [threading.Thread(target=one_client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return latencies


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pods", type=int, default=5000, help="pods in the namespace (default 5000)")
    parser.add_argument("--clients", type=int, default=16, help="concurrent clients (default 16)")
    parser.add_argument("--duration", type=float, default=30, help="seconds of forged admissions (default 30)")
    args = parser.parse_args(argv)
    stop_on_signals()
    with tempfile.TemporaryDirectory(prefix="forged-claims-") as tmp, running(Path(tmp) / "sandbox") as sandbox:
        api = sandbox.api_client()
        core = client.CoreV1Api(api)
        prepare.prepare(sandbox)  # the placement CRD and the GPU nodes
        sandbox.kubectl("create", "namespace", NAMESPACE)
        started = time.monotonic()
        fill(core, args.pods)
        print(f"{args.pods} pods created in {time.monotonic() - started:.0f} s", file=sys.stderr)
        placement: dict[str, Any] = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "HamiPodPlacement",
            "metadata": {"name": "real", "namespace": NAMESPACE},
            "spec": {
                "reqID": "req-real-1",
                "podSelector": {"matchLabels": {"app": "real"}},
                "nodeName": "gpu-a100-0",
                "gpuDevices": ["gpu-0"],
            },
        }
        client.CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, placement)
        webhook = start(sandbox, Path(tmp))
        try:
            hammer(webhook, args.clients, 3)  # warm-up: connections, the first reads
            latencies = sorted(hammer(webhook, args.clients, args.duration))
        finally:
            webhook.stop()
    count = len(latencies)
    p99 = latencies[min(count - 1, int(count * 0.99))] if count else float("nan")
    median = statistics.median(latencies) if count else float("nan")
    print(
        f"pods={args.pods} clients={args.clients} duration={args.duration:.0f}s: {count / args.duration:.1f} "
        f"forged admissions/s, p50 {median * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
