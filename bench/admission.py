"""Admission latency of our /mutate beside HAMi's own /webhook, same load, same run, over TLS with keep-alive.

A sandbox (HAMi v2.10's scheduler + webhook included) is filled by bench/generate.py: --nodes x 8 H100 cards,
--pods HAMi pods already bound, --placements open placements spread over 50 namespaces. Then vegeta sends, at each
fixed rate for --duration seconds (cut into --slices turns, the servers taking turns in a rotating order, balanced
with a baseline, so that all meet the same background), one kind of AdmissionReview at a time to each server
(admission.k8s.io/v1 to ours, v1beta1 to HAMi's, as its chart registers it):
  no-placement  a GPU pod of hami-scheduler in a namespace with placements, none of which selects it
  non-gpu       a pod asking for no GPU (default scheduler)
  excluded      a GPU pod in a namespace our webhook is told to exclude (HAMi has no such setting: it processes it)
  claim         a GPU pod that an open placement selects: ours claims it, an API write (--claim-rate, bounded by
                the placements there are); shown beside the API server's own write latency (timed merge-patches
                of a placement's status from this process, keep-alive)
The non-claiming paths also go to a floor (hack/admission-floor: a Go HTTPS server that allows every review and does
nothing else, with our webhook's certificate): what the box, TLS, HTTP/1.1 and vegeta cost by themselves at that
moment, so that a latency target is read against what this machine allows any server.
The runs start once the filled sandbox has gone quiet (--quiet-level); each row gives the cores the rest of the box
(the sandbox and the servers not under test) used during ours' and HAMi's turns.
Prints the table (latencies and each process's CPU milliseconds per request), the p99 ratios (ours / HAMi's), the
floor's p50/p99, the box's cores and both servers' RSS after the runs.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import copy
import json
import math
import os
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import generate, plot
from bench._clusters import cpu_seconds, placement_events, rss_mib, serve_filled, settle
from sandbox import binaries
from sandbox import webhook as sandbox_webhook
from sandbox.cluster import Sandbox, free_port

EXCLUDED_NAMESPACE = "bench-excluded"
PATHS = ("no-placement", "non-gpu", "excluded")
# How long a turn waits at most for the box to settle after the one before (--settle-between-turns).
SETTLE_LIMIT = 10.0
# How long a read of the webhook's /metrics may take around a turn.
METRICS_TIMEOUT = 30.0
REVIEWS = (*PATHS, "claim")
# What the API server adds to a webhook's URL: the webhook's timeoutSeconds (10 s by default).
API_SERVER_QUERY = "?timeout=10s"


def pod_for(path: str, spread: int = 0) -> tuple[str, dict[str, Any]]:
    """(namespace, pod) of one path's AdmissionReview, as the API server sends it on CREATE (claims: spread over
    the placement namespaces, as pods of many teams would come)."""
    namespace = {"excluded": EXCLUDED_NAMESPACE}.get(
        path, generate.placement_namespace(spread if path == "claim" else 1)
    )
    labels = {"app": "bench-admission", **(generate.CLAIM_LABEL if path == "claim" else {})}
    container = generate.gpu_container()
    scheduler = generate.SCHEDULER
    if path == "non-gpu":
        container = {"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": {}}
        scheduler = "default-scheduler"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "bench-", "namespace": namespace, "labels": labels},
        "spec": {
            "schedulerName": scheduler,
            "containers": [container],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
                {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
            ],
        },
        "status": {},
    }
    return namespace, pod


def review(path: str, api_version: str = "admission.k8s.io/v1", spread: int = 0) -> bytes:
    """The AdmissionReview body for one path."""
    namespace, pod = pod_for(path, spread)
    body = {
        "apiVersion": api_version,
        "kind": "AdmissionReview",
        "request": {
            "uid": "6f1d3c5e-0000-4000-8000-000000000001",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller", "groups": []},
            "object": copy.deepcopy(pod),
            "oldObject": None,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }
    return json.dumps(body).encode()


@dataclass
class Target:
    """One server under load: its process, its URL, the CA its certificate chains to, the body (or bodies, sent in
    turn) and, for ours, what reads its stalls from /metrics."""

    pid: int
    url: str
    ca: Path
    body: bytes | list[bytes]
    stalls: Callable[[], dict[str, float]] | None = None


# What makes the sandbox's churn: kwok's node heartbeats and lease renewals, the controllers' writes they set off.
CHURN = ("kwok", "kube-controller-manager")


@contextlib.contextmanager
def stopped_during(pids: list[int]) -> Iterator[None]:
    """Those processes stopped meanwhile (a turn, 10 s by default: well within the 40 s a node lease lasts)."""
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)


def attack(target: Target, rate: int, duration: float, results: Path, workdir: Path) -> None:
    """One vegeta run at a constant rate, its results written to `results`."""
    bodies = target.body if isinstance(target.body, list) else [target.body]
    header = {"Content-Type": ["application/json"]}
    targets = workdir / "target.json"
    targets.write_text(
        "".join(
            json.dumps({"method": "POST", "url": target.url, "body": base64.b64encode(b).decode(), "header": header})
            + "\n"
            for b in bodies
        )
    )
    attack_cmd = [
        str(binaries.resolve("vegeta")),
        "attack",
        "-format=json",
        f"-targets={targets}",
        f"-rate={rate}/s",
        f"-duration={duration}s",
        f"-root-certs={target.ca}",
        "-keepalive=true",
        # HTTP/1.1 to both servers, as the API server calls a Service webhook (k8s.io/apiserver's webhook client
        # sets NextProtos to http/1.1 but for loopback URLs); vegeta would speak HTTP/2 to HAMi's Go server.
        "-http2=false",
        "-timeout=10s",
        f"-output={results}",
    ]
    subprocess.run(attack_cmd, capture_output=True, check=True)


def start_floor(certs: Path) -> tuple[subprocess.Popen[bytes], str]:
    """The floor (hack/admission-floor: every review allowed, nothing else done) serving with our webhook's
    certificate, and its URL once it answers."""
    address = f"127.0.0.1:{free_port()}"
    command = [str(binaries.resolve("admission-floor")), address, str(certs / "tls.crt"), str(certs / "tls.key")]
    process = subprocess.Popen(command)
    url = f"https://{address}/mutate{API_SERVER_QUERY}"
    context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(url, data=b"{}", context=context, timeout=5):
                return process, url
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                process.kill()
                raise
            time.sleep(0.1)


def report(results: list[Path]) -> dict[str, Any]:
    """vegeta's JSON report over several runs' results (latencies in ns)."""
    command = [str(binaries.resolve("vegeta")), "report", "-type=json", *map(str, results)]
    return dict(json.loads(subprocess.run(command, capture_output=True, check=True).stdout))


def summary(report: dict[str, Any]) -> dict[str, Any]:
    """p50/p99/max in ms, errors (non-200 or transport), achieved throughput."""
    lat = report["latencies"]
    codes = report.get("status_codes") or {}
    errors = sum(n for code, n in codes.items() if code != "200")
    return {
        "p50": lat["50th"] / 1e6,
        "p99": lat["99th"] / 1e6,
        "max": lat["max"] / 1e6,
        "errors": errors,
        "requests": report["requests"],
        "throughput": report["throughput"],
        "error_samples": (report.get("errors") or [])[:2],
    }


def cpus_seconds(pids: list[int]) -> float:
    """The CPU seconds of those processes together (one that has exited counts for nothing)."""
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError):
            total += cpu_seconds(pid)
    return total


def cores_used(processes: list[int], window: float) -> dict[int, float]:
    """The cores each of those processes used over the next `window` seconds."""
    before, at = {pid: cpus_seconds([pid]) for pid in processes}, time.monotonic()
    time.sleep(window)
    spent = time.monotonic() - at
    return {pid: (cpus_seconds([pid]) - before[pid]) / spent for pid in processes}


def quiet_box(
    processes: dict[int, str], *, level: float, window: float = 30.0, limit: float = 1200.0
) -> tuple[float, float]:
    """Seconds until, over `window` seconds, those processes (the sandbox's and the servers) use less than `level`
    cores together, and the cores they used in the last window: a freshly filled sandbox keeps the box busy for
    a while, which is no part of any webhook's latency; the runs start once that has passed (or `limit` has), and
    each row says how busy the box still was."""
    started = time.monotonic()
    while True:
        spent = cores_used(list(processes), window)
        used = sum(spent.values())
        busiest = sorted(processes, key=spent.__getitem__, reverse=True)[:3]
        print(
            f"  the sandbox used {used:.2f} cores over the last {window:.0f} s ("
            + ", ".join(f"{processes[pid]} {spent[pid]:.2f}" for pid in busiest)
            + ")",
            flush=True,
        )
        if used < level or time.monotonic() - started >= limit:
            return time.monotonic() - started, used


def settle_box(processes: list[int], *, level: float, limit: float, window: float = 1.0) -> float:
    """Seconds until those processes use fewer than `level` cores over `window` (at most `limit`): what one server's
    turn leaves behind (HAMi's scheduler collects for seconds after its own) is then not in the next one's."""
    started = time.monotonic()
    while time.monotonic() - started < limit:
        if sum(cores_used(processes, window).values()) < level:
            break
    return time.monotonic() - started


def turn_order(count: int, turn: int) -> list[int]:
    """The servers' order in a turn: for an even count a balanced Latin square (Williams), so that over `count` turns
    each server follows every other exactly once and none always meets the burst another leaves behind (HAMi's
    scheduler keeps collecting for seconds after its own turn); for an odd count the rotation (0, 1, 2; 1, 2, 0)."""
    if count % 2:
        return [(turn + k) % count for k in range(count)]
    first = [0]
    for k in range(1, count):
        first.append((k + 1) // 2 if k % 2 else count - k // 2)
    return [(server + turn) % count for server in first]


def side_by_side(
    targets: list[Target],
    rate: int,
    duration: float,
    *,
    slices: int,
    workdir: Path,
    paused: list[int] | None = None,
    background: dict[int, str] | None = None,
    idle_stopped: list[int] | None = None,
    settle_level: float = 0.0,
) -> list[dict[str, Any]]:
    """Every server under the same load for `duration` s each, in `slices` turns, in `turn_order` (ours, HAMi,
    floor; HAMi, floor, ours; ...; with a baseline, each server after every other once in four turns) so that all
    meet the same background (the sandbox's bursts come and go); each side's summary over all its turns, with its
    process's CPU milliseconds per request over them (its own background work included: a figure the shared box's
    load does not inflate the way it does latency), the cores the `background` processes (the sandbox's, the other
    servers; pid to name) used meanwhile, in all and by name, and, where it has them, its stalls over them. The
    `idle_stopped` servers are stopped during every turn but their own, so that each one's background work lands in
    its own turns only, as it would on a box of its own. With `settle_level`, each turn starts once every process
    uses fewer cores than that (at most SETTLE_LIMIT s later), whoever went before."""
    results: list[list[Path]] = [[] for _ in targets]
    cpu = [0.0 for _ in targets]
    box = [0.0 for _ in targets]
    by_name: list[dict[str, float]] = [{} for _ in targets]
    turns: list[list[dict[str, Any]]] = [[] for _ in targets]
    settled = [0.0 for _ in targets]
    stalls: list[dict[str, float]] = [{} for _ in targets]
    for turn in range(slices):
        for index in turn_order(len(targets), turn):
            target = targets[index]
            others = [pid for pid in background or {} if pid != target.pid]
            stopped = [pid for pid in idle_stopped or [] if pid != target.pid]
            if settle_level:
                settled[index] += settle_box(list(background or {}), level=settle_level, limit=SETTLE_LIMIT)
            stalled = target.stalls() if target.stalls else {}
            results[index].append(workdir / f"results-{index}-{turn}.bin")
            with stopped_during([*(paused or []), *stopped]):
                before, started = cpu_seconds(target.pid), time.monotonic()
                each = {pid: cpus_seconds([pid]) for pid in others}
                attack(target, rate, duration / slices, results[index][-1], workdir)
                spent = time.monotonic() - started
                cpu[index] += cpu_seconds(target.pid) - before
                for pid, at in each.items():
                    cores = (cpus_seconds([pid]) - at) / spent / slices
                    box[index] += cores
                    name = (background or {})[pid]
                    by_name[index][name] = by_name[index].get(name, 0.0) + cores
            own = summary(report(results[index][-1:]))
            turns[index].append({"turn": turn, "p99": own["p99"], "max": own["max"]})
            if target.stalls:
                after = target.stalls()
                if "unread" in after or "unread" in stalled:
                    stalls[index]["unread"] = 1.0
                    continue
                for name, value in after.items():
                    stalls[index][name] = stalls[index].get(name, 0.0) + value - stalled.get(name, 0.0)
                turns[index][-1]["full passes"] = after.get("full passes n", 0.0) - stalled.get("full passes n", 0.0)
    figures = []
    for index, target in enumerate(targets):
        side = summary(report(results[index]))
        side["cpu_ms"] = cpu[index] * 1000 / max(side["requests"], 1)
        side["turns"] = turns[index]
        side["settle_s"] = settled[index]
        if background:
            side["box_cores"] = box[index]
            side["box_by_process"] = by_name[index]
        if target.stalls:
            side["stalls"] = stalls[index]
        figures.append(side)
    return figures


def stall_reading(metrics_url: str) -> dict[str, float]:
    """From the webhook's /metrics: its event loop's lag probes (all, and those later than 10 and 50 ms), its
    cyclic collections (count and seconds) by generation and the objects its watches took in, as running totals."""
    reading: dict[str, float] = {}
    try:
        with urllib.request.urlopen(metrics_url, timeout=METRICS_TIMEOUT) as reply:
            text = reply.read().decode()
    except OSError:
        return {"unread": 1.0}  # the run's figures stand; its stalls are reported as not read
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "hami_place_event_loop_lag_seconds_count":
                reading["lag probes"] = sample.value
            elif sample.name == "hami_place_event_loop_lag_seconds_bucket" and sample.labels["le"] in ("0.01", "0.05"):
                reading[f"lag<={sample.labels['le']}"] = sample.value
            elif sample.name == "hami_place_watch_events_total":
                reading[f"{sample.labels['kind']} events"] = sample.value
            elif family.name == "hami_place_collector_pause_seconds" and (kind := _sum_or_count(sample.name)):
                reading[f"gc{sample.labels['generation']} {kind}"] = sample.value
            elif family.name == "hami_place_reconcile_pass_seconds" and (kind := _sum_or_count(sample.name)):
                reading[f"{sample.labels['kind']} passes {kind}"] = sample.value
    return reading


def _sum_or_count(sample: str) -> str:
    """`s` for a histogram's _sum sample, `n` for its _count, empty for a bucket."""
    return {"_sum": "s", "_count": "n"}.get(sample[sample.rfind("_") :], "")


def stall_line(stalls: dict[str, float]) -> str:
    """One run's stalls, in a line: lag probes later than 10 / 50 ms, collections and their total pause, and the
    watches' objects taken in meanwhile."""
    if stalls.get("unread"):
        return f"/metrics did not answer within {METRICS_TIMEOUT:.0f} s around a turn: stalls not read"
    probes = stalls.get("lag probes", 0.0)
    late = probes - stalls.get("lag<=0.01", 0.0)
    very_late = probes - stalls.get("lag<=0.05", 0.0)
    return (
        f"loop late >10 ms {late:.0f}/{probes:.0f}, >50 ms {very_late:.0f}; "
        f"full collections {stalls.get('gc2 n', 0):.0f} ({stalls.get('gc2 s', 0) * 1000:.0f} ms), "
        f"young {stalls.get('gc0 n', 0) + stalls.get('gc1 n', 0):.0f} "
        f"({(stalls.get('gc0 s', 0) + stalls.get('gc1 s', 0)) * 1000:.0f} ms); "
        f"full reconcile passes {stalls.get('full passes n', 0):.0f} ({stalls.get('full passes s', 0) * 1000:.0f} ms); "
        "watch events: "
        + ", ".join(f"{stalls.get(kind + ' events', 0):.0f} {kind}" for kind in ("nodes", "pods", "placements"))
    )


def background_line(side: dict[str, Any]) -> str:
    """The three processes that used the most CPU during a server's turns, beside it, and each turn's p99 (a turn
    with a full reconcile pass in it marked *)."""
    busiest = sorted(side["box_by_process"].items(), key=lambda item: item[1], reverse=True)[:3]
    each = ", ".join(f"{t['p99']:.1f}{'*' * int(t.get('full passes', 0))}" for t in side["turns"])
    return "beside it: " + ", ".join(f"{name} {cores:.2f}" for name, cores in busiest) + f" cores; turns' p99 {each} ms"


def api_write_latency(sandbox: Sandbox, count: int = 300) -> dict[str, float]:
    """The API server's own write latency: timed merge-patches of one placement's status, keep-alive, sequential."""
    loader = generate.Loader(sandbox, workers=1)
    k = 1  # in bench-place-01, where no review claims
    path = (
        f"/apis/scheduling.hami.placement.com/v1/namespaces/{generate.placement_namespace(k)}"
        f"/hamipodplacements/place-{k:06d}/status"
    )
    samples = []
    for i in range(count):
        patch = {"status": {"message": f"bench write {i}"}}
        started = time.perf_counter()
        reply = loader.request("PATCH", path, patch, "application/merge-patch+json")
        samples.append((time.perf_counter() - started) * 1000)
        if reply.status != 200:
            raise RuntimeError(f"status patch failed: {reply.status} {reply.data[:200]!r}")
    samples.sort()
    return {
        "p50": statistics.median(samples),
        "p99": samples[int(len(samples) * 0.99) - 1],
        "max": samples[-1],
        "errors": 0,
        "requests": count,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=40000)
    parser.add_argument("--placements", type=int, default=10000)
    parser.add_argument("--duration", type=float, default=30, help="seconds per run (default 30)")
    parser.add_argument("--rates", default="100,500,1000", help="requests per second, comma-separated")
    parser.add_argument(
        "--slices",
        type=int,
        help="turns each run is cut into, the servers alternating (default: one turn per server, 3, or 4 with "
        "--baseline-webhook: each server then follows every other once)",
    )
    parser.add_argument("--claim-rate", type=int, default=20, help="claims per second (one pod per namespace in turn)")
    parser.add_argument(
        "--pause-churn",
        action="store_true",
        help="stop kwok and the controller-manager during each turn (the non-claiming paths; both servers alike): "
        "the servers with their caches full on a box the 5,000-node control plane is not keeping busy",
    )
    parser.add_argument(
        "--stop-idle-servers",
        action="store_true",
        help="with --baseline-webhook: stop ours and the baseline during each other's (and HAMi's and the floor's) "
        "turns, so that one's background work (its watches, its reconciler's passes, its controller) slows its own "
        "admissions only, as on a box of its own, not the other's",
    )
    parser.add_argument(
        "--settle-between-turns",
        action="store_true",
        help="start each turn once the sandbox and the servers use fewer cores than --quiet-level over a second (at "
        f"most {SETTLE_LIMIT:g} s), so that no server's turn meets what the one before left running",
    )
    parser.add_argument(
        "--quiet-level",
        type=float,
        default=0.6,
        help="start the runs once the sandbox's processes use fewer cores than this over 30 s (default 0.6)",
    )
    parser.add_argument(
        "--baseline-webhook",
        default="",
        help="the hami-place-webhook console script of another build (say a worktree's .venv/bin/hami-place-webhook "
        "at the commit to compare with): started beside ours on the same filled sandbox, settled, and taking its "
        "turns in every non-claiming run, its figures in a `baseline` column",
    )
    parser.add_argument(
        "--json", type=Path, default=plot.ADMISSION, help=f"figures for bench/plot.py ({plot.ADMISSION})"
    )
    args = parser.parse_args(argv)
    args.slices = args.slices or (4 if args.baseline_webhook else 3)
    rates = [int(r) for r in args.rates.split(",")]
    started = time.monotonic()
    # Built (or found in the cache) before the sandbox starts: a cold build after the box went quiet would load it.
    binaries.resolve("vegeta")
    binaries.resolve("admission-floor")
    with tempfile.TemporaryDirectory(prefix="hami-place-bench-") as tmp:
        workdir = Path(tmp)
        print(
            f"starting the sandbox; filling it: {args.nodes} nodes x 8 cards, {args.pods} pods, "
            f"{args.placements} placements",
            flush=True,
        )
        sandbox = Sandbox.start(workdir / "sandbox")
        webhook = None
        baseline: sandbox_webhook.Webhook | None = None
        floor: subprocess.Popen[bytes] | None = None
        try:
            sandbox.kubectl("create", "namespace", EXCLUDED_NAMESPACE)
            served = serve_filled(
                sandbox, workdir, args.nodes, args.pods, args.placements, "--exclude-namespace", EXCLUDED_NAMESPACE
            )
            webhook = served.webhook
            fill, sync, settled, settled_rss = served.fill, served.sync, served.settled, served.settled_rss
            metrics_url = webhook.api + "/metrics"
            hami = next(p for p in sandbox.processes if p.name == generate.SCHEDULER)
            ca_ours = webhook.certs / "ca.crt"
            if args.baseline_webhook:
                baseline = sandbox_webhook.start(
                    sandbox,
                    workdir,
                    "--exclude-namespace",
                    EXCLUDED_NAMESPACE,
                    timeout=900,
                    command=args.baseline_webhook,
                )
                waited_baseline = settle(baseline.process.pid, lambda: placement_events(baseline))
                print(f"  baseline webhook settled {waited_baseline:.0f}s after its start", flush=True)
            floor, floor_url = start_floor(webhook.certs)
            ca_hami = sandbox.workdir / "pki" / "ca.crt"
            hami_url = f"{sandbox.hami_url}/webhook{API_SERVER_QUERY}"
            ours_url = f"{webhook.url}{API_SERVER_QUERY}"
            rows = []
            ours_pid, hami_pid = webhook.process.pid, hami.popen.pid
            churn = [p.popen.pid for p in sandbox.processes if p.name in CHURN]
            everyone = {p.popen.pid: p.name for p in sandbox.processes} | {
                ours_pid: "hami-place",
                floor.pid: "floor",
            }
            if baseline is not None:
                everyone[baseline.process.pid] = "baseline"
            idle_servers = [ours_pid, baseline.process.pid] if baseline is not None and args.stop_idle_servers else []
            waited, quiet = quiet_box(everyone, level=args.quiet_level)
            print(f"  the runs start {waited:.0f} s later, the sandbox at {quiet:.2f} cores", flush=True)
            for rate in rates:
                for path in PATHS:
                    targets = [
                        Target(ours_pid, ours_url, ca_ours, review(path), lambda: stall_reading(metrics_url)),
                        Target(hami_pid, hami_url, ca_hami, review(path, "admission.k8s.io/v1beta1")),
                        Target(floor.pid, floor_url, ca_ours, review(path)),
                    ]
                    if baseline is not None:
                        base_metrics = baseline.api + "/metrics"
                        targets.append(
                            Target(
                                baseline.process.pid,
                                f"{baseline.url}{API_SERVER_QUERY}",
                                baseline.certs / "ca.crt",
                                review(path),
                                lambda url=base_metrics: stall_reading(url),  # type: ignore[misc]
                            )
                        )
                    ours, theirs, least, *base = side_by_side(
                        targets,
                        rate,
                        args.duration,
                        slices=args.slices,
                        workdir=workdir,
                        paused=churn if args.pause_churn else None,
                        background=everyone,
                        idle_stopped=idle_servers,
                        settle_level=args.quiet_level if args.settle_between_turns else 0.0,
                    )
                    rows.append({"rate": rate, "path": path, "ours": ours, "hami": theirs, "floor": least})
                    if base:
                        rows[-1]["baseline"] = base[0]
                    print(_row(rows[-1]), flush=True)
                    print(f"{'':>20} ours: {stall_line(ours['stalls'])}; {background_line(ours)}", flush=True)
                    if base:
                        print(
                            f"{'':>20} baseline: {_side(base[0])}; {stall_line(base[0]['stalls'])}; "
                            f"{background_line(base[0])}",
                            flush=True,
                        )
            status, answer = webhook.post_mutate(review("claim"))
            check = answer.get("response") or {}
            print(f"  one claim by hand: HTTP {status}, patch {'patchType' in check}, {check.get('warnings')}")
            claim_seconds = min(args.duration, 0.8 * (args.placements - 1) / args.claim_rate)
            spaces = min(args.placements, generate.PLACEMENT_NAMESPACES)
            ours, theirs = side_by_side(
                [
                    Target(ours_pid, ours_url, ca_ours, [review("claim", spread=k) for k in range(spaces)]),
                    Target(
                        hami_pid,
                        hami_url,
                        ca_hami,
                        [review("claim", "admission.k8s.io/v1beta1", k) for k in range(spaces)],
                    ),
                ],
                args.claim_rate,
                claim_seconds,
                slices=1,
                workdir=workdir,
                background=everyone,
                idle_stopped=idle_servers,
            )
            claimed = sum(
                1
                for item in sandbox.get("/apis/scheduling.hami.placement.com/v1/hamipodplacements", timeout=120)[
                    "items"
                ]
                if (item.get("status") or {}).get("claim")
            )
            writes = api_write_latency(sandbox)
            load = os.getloadavg()[1]
            rss = {"ours": rss_mib(webhook.process.pid), "hami": rss_mib(hami.popen.pid), "settled": settled_rss}
            if baseline is not None:
                rss["baseline"] = rss_mib(baseline.process.pid)
        finally:
            if webhook is not None:
                webhook.stop()
            if baseline is not None:
                baseline.stop()
            if floor is not None:
                floor.kill()
                floor.wait()
            sandbox.stop()
    claim_row = {"rate": args.claim_rate, "path": "claim", "ours": ours, "hami": theirs}
    print()
    print(
        f"Admission latency (ms), {args.nodes} nodes x 8 cards, {args.pods} HAMi pods, {args.placements} "
        f"placements; {args.duration:g} s a run; 2 cores shared with other work"
        + ("; kwok and the controller-manager stopped during each turn" if args.pause_churn else "")
    )
    print(_header())
    for row in rows:
        print(_row(row))
        if "baseline" in row:
            print(f"{'':>20} baseline: {_side(row['baseline'])}")
    print(_row(claim_row) + f"   ({claimed} placements claimed)")
    print(
        f"{'':>6} {'API write':<13} {writes['p50']:8.2f} {writes['p99']:8.2f} {writes['max']:8.2f} {0:6d}"
        "   (merge-patch of a placement's status, sequential)"
    )
    print(
        f"RSS after the runs: hami-place {rss['ours']:.0f} MiB, HAMi's scheduler {rss['hami']:.0f} MiB; "
        f"first full sync {sync:.1f} s, settled {settled:.0f} s later; fill {fill}; "
        f"total {time.monotonic() - started:.0f} s; "
        f"load average (5 min) at the end {load:.1f} on 2 cores"
    )
    spreads = {side: turn_spread(rows, side) for side in ("ours", "baseline", "hami", "floor")}
    print("Each turn's own p99 (ms), every row's turns together:")
    for side, spread in spreads.items():
        if spread:
            print(_spread_line(side, spread))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        figures = {
            "turn_spread": spreads,
            "args": vars(args) | {"json": str(args.json)},
            "rows": rows,
            "claim": claim_row,
            "claimed": claimed,
            "api_write": writes,
            "rss_mib": rss,
            "sync_s": sync,
            "settle_s": settled,
            "quiet_wait_s": waited,
            "quiet_cores": quiet,
            "fill_s": fill,
            "load5": load,
        }
        args.json.write_text(json.dumps(figures, indent=2))
    return 0


def turn_spread(rows: list[dict[str, Any]], side: str, over: tuple[float, ...] = (10.0, 40.0)) -> dict[str, float]:
    """One server's turns over every row as a distribution of their own p99s (median, p90, max) and how many went
    over each of `over` ms: a row's p99 is decided by the few turns a box burst hits, the distribution is not."""
    p99s = sorted(turn["p99"] for row in rows if side in row for turn in row[side].get("turns", []))
    if not p99s:
        return {}
    spread = {
        "turns": float(len(p99s)),
        "median": statistics.median(p99s),
        "p90": p99s[max(0, math.ceil(0.9 * len(p99s)) - 1)],
        "max": p99s[-1],
    }
    return spread | {f"over {limit:g} ms": float(sum(p > limit for p in p99s)) for limit in over}


def _spread_line(name: str, spread: dict[str, float]) -> str:
    over = ", ".join(f"{int(v)} {k}" for k, v in spread.items() if k.startswith("over"))
    return (
        f"  {name:<10} {int(spread['turns'])} turns: p99 median {spread['median']:.2f}, p90 {spread['p90']:.2f}, "
        f"max {spread['max']:.2f} ms; {over}"
    )


def _header() -> str:
    side = f"{'p50':>8} {'p99':>8} {'max':>8} {'err':>6} {'cpu/req':>7}"
    names = f"{'':>6} {'':<13} {'hami-place /mutate':^41} | {'HAMi /webhook':^41} | {'floor':^17}"
    return (
        f"{names}\n{'rate':>6} {'path':<13} {side} | {side} | {'p50':>8} {'p99':>8} | {'p99 ratio':>9}"
        f" | {'box cores':>9}"
    )


def _side(s: dict[str, Any]) -> str:
    """One server's p50, p99, max, errors and CPU ms a request."""
    return f"{s['p50']:8.2f} {s['p99']:8.2f} {s['max']:8.2f} {s['errors']:6d} {s['cpu_ms']:7.3f}"


def _row(row: dict[str, Any]) -> str:
    least = row.get("floor")
    floor = f"{least['p50']:8.2f} {least['p99']:8.2f}" if least else f"{'':>8} {'':>8}"
    ratio = row["ours"]["p99"] / row["hami"]["p99"] if row["hami"]["p99"] else float("inf")
    box = "/".join(f"{row[k]['box_cores']:.2f}" for k in ("ours", "hami") if "box_cores" in (row.get(k) or {}))
    return (
        f"{row['rate']:>6} {row['path']:<13} {_side(row['ours'])} | {_side(row['hami'])} | {floor} | {ratio:8.2f}x"
        f" | {box:>9}"
    )


if __name__ == "__main__":
    sys.exit(main())
