"""The cost of the webhook and of `status` as the cluster grows, beside the fetch floor, in one sandbox grown in steps.

At each size (--sizes, nodes; 8 H100 cards and --pods-per-node HAMi pods a node, from bench/generate.py) the
sandbox is grown to that size, then:
- a fresh webhook's first full sync: seconds from start to /readyz 200 (list of nodes, HAMi's pods, placements);
  its RSS then, and after `GET /api/v1/cluster-info`;
- `GET /api/v1/cluster-info` straight from the webhook's API port;
- `kubectl hami-place status -o json` computed from the API (no webhook Service): time and the plugin's max RSS;
- the same command through the webhook: its API port bound to this machine's non-loopback address (the API
  server refuses to proxy to loopback), a Service labelled as the chart labels it with Endpoints at that address
  (backed by a host-network stand-in pod, as the service proxy requires), so `status` reads the cluster-info
  through the API server's service proxy, as a ServiceAccount whose token the webhook reviews;
- the fetch floor: `kubectl get --raw /api/v1/nodes` plus `kubectl get --raw /api/v1/pods`.
Each timing is the best of --runs. Prints the table and the ratios, writes --json for bench/plot.py.
The webhook keeps every node and every HAMi pod (schedulerName hami-scheduler) as the API server's JSON dicts,
plus every placement; nothing else per pod.
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import generate, plot
from bench.admission import rss_mib
from kubectl_hami_place.core.names import NAME_LABEL, WEBHOOK_APP
from sandbox import prepare
from sandbox import webhook as sandbox_webhook
from sandbox.cluster import Sandbox, primary_address, wait_for

DEFAULT_JSON = plot.SCALE
# Where the webhook's Service and its stand-in pod go: a namespace the generator made (its service account exists).
PROXY_NAMESPACE = generate.pod_namespace(0)
# What `status` finds the webhook's Service by (core.names.WEBHOOK_SERVICE_LABEL).
WEBHOOK_LABELS = {NAME_LABEL: WEBHOOK_APP}
# Whose token `status` forwards through the service proxy: the namespace's default ServiceAccount.
READER = "default"


def timed(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, float, int, float]:
    """(seconds, max RSS MiB, output bytes, CPU seconds) of one command; its own rusage, not all children's.

    CPU seconds (user + system) are what the command itself costs; on a box shared with other work the wall
    time also holds the time it waited for a core."""
    started = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.PIPE, env=env)
        _, status, usage = os.wait4(process.pid, 0)
        elapsed = time.perf_counter() - started
        process.returncode = os.waitstatus_to_exitcode(status)
        if process.returncode != 0:
            raise RuntimeError(f"{argv[0]} exited {process.returncode}: {process.stderr.read()[-500:]!r}")  # type: ignore[union-attr]
        size = out.seek(0, 2)
    return elapsed, usage.ru_maxrss / 1024, size, usage.ru_utime + usage.ru_stime


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def best(runs: int, measure: Any) -> Any:
    """The run with the least time (first item) of `runs` calls."""
    return min((measure() for _ in range(runs)), key=lambda result: result[0])


def grow(sandbox: Sandbox, have: tuple[int, int], nodes: int, pods: int) -> None:
    """Add nodes and pods up to the size (objects already there are left alone)."""
    loader = generate.Loader(sandbox)
    started = time.monotonic()
    loader.create_all(("/api/v1/nodes", _bare(generate.node(n))) for n in range(have[0], nodes))
    generate.patch_statuses(loader, range(have[0], nodes))
    loader.create_all(
        (f"/api/v1/namespaces/{generate.pod_namespace(i)}/pods", generate.pod_for_create(generate.pod(i, nodes)))
        for i in range(have[1], pods)
    )
    if loader.failed:
        raise RuntimeError(f"{len(loader.failed)} creates failed, first: {loader.failed[0]}")
    print(f"  grown to {nodes} nodes, {pods} pods in {time.monotonic() - started:.0f}s", flush=True)


def _bare(node: dict[str, Any]) -> dict[str, Any]:
    return {**node, "status": {}}


def measure(sandbox: Sandbox, workdir: Path, runs: int) -> dict[str, Any]:
    """Every figure at the sandbox's current size."""
    kubectl = [str(sandbox.bin("kubectl")), f"--kubeconfig={sandbox.kubeconfig}"]
    figures: dict[str, Any] = {}
    nodes_s = best(runs, lambda: timed([*kubectl, "get", "--raw", "/api/v1/nodes"]))
    pods_s = best(runs, lambda: timed([*kubectl, "get", "--raw", "/api/v1/pods"]))
    figures["floor_s"] = nodes_s[0] + pods_s[0]
    figures["floor_bytes"] = nodes_s[2] + pods_s[2]
    figures["floor_cpu_s"] = nodes_s[3] + pods_s[3]
    plugin = str(Path(sys.executable).with_name("kubectl-hami_place"))
    env = {**os.environ, "KUBECONFIG": str(sandbox.kubeconfig)}
    # The plugin's own start (interpreter, imports): the part of `status` no cluster size changes.
    figures["plugin_start_s"] = best(runs, lambda: timed([plugin, "--help"], env))[0]
    status = best(runs, lambda: timed([plugin, "status", "-o", "json"], env))
    figures["status_api_s"], figures["status_api_rss_mib"] = status[0], status[1]
    figures["status_api_cpu_s"] = status[3]
    started = time.monotonic()
    address = primary_address()
    bind = () if address is None else ("--bind-address", "0.0.0.0")
    webhook = sandbox_webhook.start(sandbox, workdir, *bind, timeout=1800)
    try:
        figures["sync_s"] = time.monotonic() - started
        figures["webhook_rss_mib"] = rss_mib(webhook.process.pid)

        def cluster_info() -> tuple[float, float, int, float]:
            begun, cpu = time.perf_counter(), cpu_seconds(webhook.process.pid)
            with urllib.request.urlopen(webhook.api + "/api/v1/cluster-info", timeout=600) as reply:
                size = len(reply.read())
            return time.perf_counter() - begun, 0.0, size, cpu_seconds(webhook.process.pid) - cpu

        info = best(runs, cluster_info)
        figures["cluster_info_s"], figures["cluster_info_bytes"] = info[0], info[2]
        # The whole process's CPU meanwhile: the watches and the reconciler run beside the request.
        figures["cluster_info_cpu_s"] = info[3]
        figures["webhook_rss_after_mib"] = rss_mib(webhook.process.pid)
        if address is not None:
            with routed(sandbox, address, webhook.api_port):
                # The webhook serves cluster-info only to a reviewed reader: a token the plugin forwards (the
                # admin's client certificate carries none). The first run pays the reviews; the next 30 s do not.
                env = {**env, "KUBECONFIG": str(reader_kubeconfig(sandbox, workdir))}
                source = json.loads(
                    subprocess.run([plugin, "status", "-o", "json"], env=env, check=True, capture_output=True).stdout
                )
                if not source["fromWebhook"]:
                    raise RuntimeError(f"status did not read the webhook: {source['source']}")
                through = best(runs, lambda: timed([plugin, "status", "-o", "json"], env))
            figures["status_webhook_s"], figures["status_webhook_rss_mib"] = through[0], through[1]
            figures["status_webhook_cpu_s"] = through[3]
    finally:
        webhook.stop()
    return figures


def reader_kubeconfig(sandbox: Sandbox, workdir: Path) -> Path:
    """The admin's kubeconfig with a token of READER (bound to cluster-admin by `routed`) instead of its certificate."""
    account = f"system:serviceaccount:{PROXY_NAMESPACE}:{READER}"
    wait_for(
        lambda: (
            sandbox.kubectl("auth", "can-i", "list", "pods", "-A", f"--as={account}", check=False).stdout.strip()
            == "yes"
        ),
        "the bench's reader to be allowed to list pods",
    )
    token = sandbox.kubectl("create", "token", READER, "-n", PROXY_NAMESPACE, "--duration=1h").stdout.strip()
    config = json.loads(sandbox.kubeconfig.read_text())
    config["users"][0]["user"] = {"token": token}
    path = workdir / "reader.kubeconfig"
    path.write_text(json.dumps(config))
    return path


@contextlib.contextmanager
def routed(sandbox: Sandbox, address: str, port: int) -> Iterator[None]:
    """The webhook's Service, its Endpoints at `address:port` and the host-network pod that backs that address (the
    service proxy dials only endpoints of a pod with that IP); all deleted again, so the next size's `status`
    computed from the API finds no Service."""
    loader = generate.Loader(sandbox)
    base = f"/api/v1/namespaces/{PROXY_NAMESPACE}"
    name = "hami-place-bench"
    stand_in = {
        "metadata": {"name": name, "namespace": PROXY_NAMESPACE},
        "spec": {
            # Not a kwok node (kwok would set the pod's IP); tolerated so that the node's taints do not evict it.
            "nodeName": generate.node_name(generate.KWOK_NODES),
            "hostNetwork": True,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "api", "image": "registry.invalid/stand-in:1"}],
        },
    }
    service = {
        "metadata": {"name": name, "namespace": PROXY_NAMESPACE, "labels": WEBHOOK_LABELS},
        "spec": {"ports": [{"name": "api", "port": 8083, "targetPort": port}]},
    }
    endpoints = {
        "metadata": {"name": name, "namespace": PROXY_NAMESPACE, "labels": WEBHOOK_LABELS},
        "subsets": [
            {
                "addresses": [
                    {"ip": address, "targetRef": {"kind": "Pod", "name": name, "namespace": PROXY_NAMESPACE}}
                ],
                "ports": [{"name": "api", "port": port}],
            }
        ],
    }
    reader = {
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": READER, "namespace": PROXY_NAMESPACE}],
    }
    bindings = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"
    try:
        loader.request("POST", bindings, reader)
        loader.request("POST", f"{base}/pods", stand_in)
        ip = {"status": {"podIP": address, "podIPs": [{"ip": address}]}}
        loader.request("PATCH", f"{base}/pods/{name}/status", ip, "application/merge-patch+json")
        loader.request("POST", f"{base}/services", service)
        loader.request("POST", f"{base}/endpoints", endpoints)
        if loader.failed:
            raise RuntimeError(f"routing the service proxy to the webhook failed: {loader.failed}")
        yield
    finally:
        for kind in ("services", "endpoints", "pods"):
            loader.request("DELETE", f"{base}/{kind}/{name}?gracePeriodSeconds=0")
        loader.request("DELETE", f"{bindings}/{name}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,2500,5000", help="node counts, ascending, comma-separated")
    parser.add_argument("--pods-per-node", type=int, default=8)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help=f"figures for bench/plot.py ({DEFAULT_JSON})")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    # The plugin as installed: pip and the krew build ship its modules compiled; a checkout run with
    # PYTHONDONTWRITEBYTECODE set (this machine sets it) would compile ~90 of them at every start (~0.3 s of CPU).
    compileall.compile_dir(Path(__file__).resolve().parent.parent / "kubectl_hami_place", quiet=1)
    rows = []
    with tempfile.TemporaryDirectory(prefix="hami-place-scale-") as tmp:
        workdir = Path(tmp)
        print(f"starting the sandbox; sizes {sizes} nodes x 8 cards, {args.pods_per_node} pods a node", flush=True)
        sandbox = Sandbox.start(workdir / "sandbox")
        try:
            prepare.install_crd(sandbox)
            loader = generate.Loader(sandbox)
            for ns in generate.namespaces(0):
                loader.request("POST", "/api/v1/namespaces", {"metadata": {"name": ns, "labels": generate.IGNORE}})
            for ns in generate.namespaces(0):
                generate.wait_service_account(loader, ns)
            have = (0, 0)
            for nodes in sizes:
                pods = nodes * args.pods_per_node
                grow(sandbox, have, nodes, pods)
                have = (nodes, pods)
                row = {
                    "nodes": nodes,
                    "pods": pods,
                    **measure(sandbox, workdir, args.runs),
                    "load5": os.getloadavg()[1],
                }
                rows.append(row)
                print(_row(row), flush=True)
        finally:
            sandbox.stop()
    print()
    print(f"Scale (best of {args.runs}; 2 cores shared with other work)")
    print(_header())
    for row in rows:
        print(_row(row))
    first = rows[0]
    for row in rows[1:]:
        grow_by = row["pods"] / first["pods"]
        print(
            f"x{grow_by:.1f} the cluster: cluster-info x{row['cluster_info_s'] / first['cluster_info_s']:.1f}, "
            f"sync x{row['sync_s'] / first['sync_s']:.1f}, status x{row['status_api_s'] / first['status_api_s']:.1f}, "
            f"floor x{row['floor_s'] / first['floor_s']:.1f}, "
            f"webhook RSS x{row['webhook_rss_mib'] / first['webhook_rss_mib']:.1f}"
        )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"runs": args.runs, "rows": rows}, indent=2) + "\n")
    print(f"figures written to {args.json}")
    return plot.main() if args.json == plot.SCALE else 0


def _header() -> str:
    return (
        f"{'nodes':>6} {'pods':>6} {'floor s':>8} {'status s':>9} {'x floor':>8} {'webhook s':>9} {'x floor':>8} "
        f"{'status MiB':>10} "
        f"{'sync s':>7} {'info s':>7} {'RSS MiB':>8} {'after':>6} {'plugin start s':>14}"
    )


def _row(row: dict[str, Any]) -> str:
    return (
        f"{row['nodes']:>6} {row['pods']:>6} {row['floor_s']:8.2f} {row['status_api_s']:9.2f} "
        f"{row['status_api_s'] / row['floor_s']:7.1f}x "
        + (
            f"{row['status_webhook_s']:9.2f} {row['status_webhook_s'] / row['floor_s']:7.1f}x "
            if "status_webhook_s" in row
            else f"{'-':>9} {'-':>8} "
        )
        + f"{row['status_api_rss_mib']:10.0f} {row['sync_s']:7.1f} "
        f"{row['cluster_info_s']:7.2f} {row['webhook_rss_mib']:8.0f} {row['webhook_rss_after_mib']:6.0f} "
        f"{row['plugin_start_s']:14.2f}"
        + (
            f"   CPU s: floor {row['floor_cpu_s']:.2f}, status {row['status_api_cpu_s']:.2f}, "
            f"through the webhook {row.get('status_webhook_cpu_s', float('nan')):.2f}, "
            f"cluster-info {row['cluster_info_cpu_s']:.2f}"
            if "floor_cpu_s" in row
            else ""
        )
    )


if __name__ == "__main__":
    sys.exit(main())
