"""Memory under connection churn (issue 23 item 6): does the webhook's RSS come back after its connections close?

Starts a sandbox of its own (stopped at the end), fills it as bench/admission.py does (bench/generate.py: --nodes x 8
H100 cards, --pods HAMi pods already bound, --placements open placements) and starts the webhook beside it, waiting
for its first full sync and for it to settle, so that its cache holds that cluster. Then it opens --rate new TLS
connections a second for --duration seconds, each POSTing one AdmissionReview to /mutate with keep-alive off
(`Connection: close`): a GPU pod of a namespace without placements, which the cache decides, so what is measured is
what each connection leaves behind (anything cyclic in it is freed only by the collector). Every
--interval seconds it prints the webhook's RSS (from /proc), the connections answered and failed in that interval,
and the full collections and their pause time so far (from /metrics); at the end the RSS after --warm-up seconds,
at the end and at most, the slope over the samples after the warm-up, and the box's load average at start and end.
"""

from __future__ import annotations

import argparse
import http.client
import os
import ssl
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._clusters import create_review, rss_mib, serve_filled
from sandbox.cluster import running, stop_on_signals
from sandbox.webhook import Webhook

NAMESPACE = "soak"
MIB = 1024 * 1024


def review() -> bytes:
    """A GPU pod of a namespace without placements: the cache answers it."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"namespace": NAMESPACE, "labels": {"app": "soak"}},
        "spec": {
            "schedulerName": "hami-scheduler",
            "containers": [{"name": "main", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 1}}}],
        },
    }
    return create_review(pod)


class Churn:
    """--rate new connections a second, one review each, closed after the answer; counts answered and failed."""

    def __init__(self, webhook: Webhook, rate: float, workers: int) -> None:
        self.port = webhook.port
        self.context = ssl.create_default_context(cafile=str(webhook.certs / "ca.crt"))
        self.rate = rate
        self.pool = ThreadPoolExecutor(workers)
        self.lock = threading.Lock()
        self.answered = 0
        self.failed = 0
        self.late = 0  # connections not started on time because every worker was busy
        self.stop = threading.Event()
        self.body = review()
        # Connections started and not yet done, at most two per worker: a backlog beyond is counted late, not queued.
        self.slots = threading.BoundedSemaphore(2 * workers)

    def one(self) -> None:
        connection = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.context, timeout=10)
        try:
            connection.request(
                "POST", "/mutate", body=self.body, headers={"Content-Type": "application/json", "Connection": "close"}
            )
            answer = connection.getresponse()
            answer.read()
            ok = answer.status == 200
        except OSError:
            ok = False
        finally:
            connection.close()
        with self.lock:
            if ok:
                self.answered += 1
            else:
                self.failed += 1
        self.slots.release()

    def run(self) -> None:
        """Submit one connection every 1/rate s until stopped (never more than the workers can start)."""
        period = 1.0 / self.rate
        due = time.monotonic()
        while not self.stop.is_set():
            due += period
            pause = due - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            elif pause < -1.0:
                self.late += int(-pause / period)
                due = time.monotonic()
            if self.slots.acquire(blocking=False):
                self.pool.submit(self.one)
            else:
                self.late += 1

    def counts(self) -> tuple[int, int]:
        with self.lock:
            return self.answered, self.failed


def gc_figures(webhook: Webhook) -> tuple[float, float, float]:
    """(full collections, their pause seconds in all, process_resident_memory_bytes in MiB) from /metrics."""
    return (
        webhook.metric('python_gc_collections_total{generation="2"}'),
        webhook.metric('hami_place_collector_pause_seconds_sum{generation="2"}'),
        webhook.metric("process_resident_memory_bytes") / MIB,
    )


def slope_per_hour(samples: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, MiB), in MiB an hour."""
    if len(samples) < 2:
        return float("nan")
    mean_t = sum(t for t, _ in samples) / len(samples)
    mean_m = sum(m for _, m in samples) / len(samples)
    spread = sum((t - mean_t) ** 2 for t, _ in samples)
    return 3600 * sum((t - mean_t) * (m - mean_m) for t, m in samples) / spread if spread else float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=3600, help="seconds of churn (default 3600)")
    parser.add_argument("--rate", type=float, default=200, help="new connections a second (default 200)")
    parser.add_argument("--interval", type=float, default=10, help="seconds between RSS samples (default 10)")
    parser.add_argument("--warm-up", type=float, default=60, help="seconds before the slope counts (default 60)")
    parser.add_argument("--workers", type=int, default=32, help="client threads (default 32)")
    parser.add_argument("--nodes", type=int, default=5000, help="generated nodes of 8 cards (default 5000)")
    parser.add_argument("--pods", type=int, default=40000, help="generated HAMi pods, bound (default 40000)")
    parser.add_argument("--placements", type=int, default=0, help="generated open placements (default 0)")
    args = parser.parse_args(argv)
    stop_on_signals()
    with tempfile.TemporaryDirectory(prefix="soak-") as tmp, running(Path(tmp) / "sandbox") as sandbox:
        print(
            f"filling the sandbox: {args.nodes} nodes x 8 cards, {args.pods} pods, {args.placements} placements",
            flush=True,
        )
        sandbox.kubectl("create", "namespace", NAMESPACE)
        try:
            served = serve_filled(sandbox, Path(tmp), args.nodes, args.pods, args.placements)
        except (TimeoutError, RuntimeError):
            for log in Path(tmp).glob("webhook-*.log"):
                print(log.read_text()[-3000:], file=sys.stderr)
            raise
        webhook = served.webhook
        pid = webhook.process.pid
        try:
            churn = Churn(webhook, args.rate, args.workers)
            load_start = os.getloadavg()
            print(
                f"webhook pid {pid}, RSS {served.synced_rss:.1f} MiB after the first full sync, "
                f"{rss_mib(pid):.1f} MiB before the churn; fill "
                + ", ".join(f"{kind} {seconds:.1f} s" for kind, seconds in served.fill.items())
                + f"; load average (1, 5, 15 min) {', '.join(f'{x:.2f}' for x in load_start)}",
                flush=True,
            )
            print("     t  conn/s  failed  RSS MiB  process_rss MiB  full GCs  full GC pause s", flush=True)
            submitting = threading.Thread(target=churn.run, daemon=True)
            submitting.start()
            started = time.monotonic()
            samples: list[tuple[float, float]] = []
            previous = (0, 0)
            while (elapsed := time.monotonic() - started) < args.duration:
                time.sleep(min(args.interval, args.duration - elapsed))
                elapsed = time.monotonic() - started
                answered, failed = churn.counts()
                rss = rss_mib(pid)
                full, pause, process_rss = gc_figures(webhook)
                samples.append((elapsed, rss))
                rate = (answered - previous[0]) / args.interval
                print(
                    f"{elapsed:6.0f}  {rate:6.1f}  {failed - previous[1]:6d}  {rss:7.1f}  {process_rss:15.1f}  "
                    f"{full:8.0f}  {pause:15.3f}",
                    flush=True,
                )
                previous = (answered, failed)
            churn.stop.set()
            submitting.join()
            churn.pool.shutdown(wait=True)
            load_end = os.getloadavg()
        finally:
            webhook.stop()
    settled = [(t, m) for t, m in samples if t >= args.warm_up]
    answered, failed = churn.counts()
    print(
        f"duration {args.duration:.0f} s at {args.rate:.0f}/s offered: {answered} answered "
        f"({answered / args.duration:.1f}/s), {failed} failed, {churn.late} not started on time; RSS after the "
        f"{args.warm_up:.0f} s warm-up {settled[0][1] if settled else float('nan'):.1f} MiB, at the end "
        f"{samples[-1][1] if samples else float('nan'):.1f} MiB, at most {max(m for _, m in samples):.1f} MiB, "
        f"slope after the warm-up {slope_per_hour(settled):+.1f} MiB/h; load average (1, 5, 15 min) at the start "
        f"{', '.join(f'{x:.2f}' for x in load_start)}, at the end {', '.join(f'{x:.2f}' for x in load_end)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
