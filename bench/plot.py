"""docs/performance.png and docs/performance.md from the figures bench/scale.py and bench/admission.py wrote.

scale.py calls this when it ends; run alone it redraws from docs/performance*.json (matplotlib: the bench extra).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parent.parent / "docs"
SCALE = DOCS / "performance.json"
ADMISSION = DOCS / "performance-admission.json"


NOTES = """## What was fixed (profiled in-process on generated data, before / after, same loaded box)

- `GET /api/v1/cluster-info` and `status` computed from the API: every node's usage was counted over every HAMi
  pod (`core/cluster.py` passed all allocations to each node): nodes x pods. Pods are now grouped by node once.
  `build_cluster_info`, in-process: 500 nodes / 4,000 pods 9.6 s -> 1.1 s; 1,000 / 8,000 37.6 s -> 2.6 s;
  2,000 / 16,000 68.4 s -> 2.4 s.
- `/mutate`: every admission copied every node into a dict and parsed every placement of its namespace, whatever
  the pod. Now nodes are read through a live by-name view and placements come from a namespace index kept with
  the reflector's store, each parsed once per stored version. `Admitter.admit` in-process at 5,000 nodes,
  40,000 pods, 10,000 placements in 50 namespaces: GPU pod without placement 53.8 -> 3.9 ms, non-GPU pod
  53.0 -> 0.3 ms, excluded namespace 25.6 -> 0.6 ms, claim (API writes faked) 80.2 -> 6.0 ms.
- The reconciler (runs on every cache change, at least every 2 s) read all HAMi pods each pass to find claim
  tokens (270 ms of a 480 ms pass at 40,000 pods, profiled); the tokens are now indexed from the pod watch.
- The cache no longer keeps `metadata.managedFields` (nothing reads them; 1.7 of a sandbox pod's 4.4 KB of JSON):
  40,000 such pods held as dicts, in-process, 1,132 -> 665 MiB.
- The reconciler decoded the register of every open placement's node on every pass (py-spy of the webhook
  under the admission bench: 28% of the process); a register's decode is now memoised by its text: 2,000
  `node_cards` calls 1,404 -> 24 ms in-process.

## What the webhook keeps

Every node and every pod with schedulerName hami-scheduler, as the API server's JSON (dicts, not typed models)
minus `managedFields`, plus every placement and one parsed copy of each; per pod nothing else but, for a pod that
carries a claim token, one index entry. Memory grows linearly with the pods and with their size: about 17 KiB a
sandbox pod as a dict, so 40,000 pods are ~665 MiB, far above the 250 MB target. Meeting it needs a projection:
keep of each pod only what the view, the claim index and the reconciler read (names, uid, annotations, phase,
deletion, init container states, node name), not the whole object.

## Left

- `status -o json` spends a large part of its CPU in `json.dumps(indent=2)` (the pure-Python encoder: the C one
  is used only without indent), about as much as building the view; a faster indented encoder (orjson's
  OPT_INDENT_2) would take it most of the way to the fetch floor.
- `/mutate` throughput is bound by the Python server, not by the decision any more: py-spy of the webhook at
  500/s showed half its samples in the TLS listener's workers, 28% in TLS handshakes (once saturated, keep-alive
  connections are refused and vegeta reconnects, so handshakes pile up) and 8% counting the keep-alive
  connections; on this shared box it saturated below 500/s at 1,000 nodes (see the admission table) while
  HAMi's Go server served 500/s. The p99 targets are missed.
- Claims under a burst in one namespace contend for the same oldest placement (resourceVersion conflicts,
  re-reads); spread over namespaces they cost two API writes each (status and Event).
- Not measured: `status` through the webhook's service proxy (the sandbox cannot route the API server's proxy
  to a loopback process); the sizes above 2,000 nodes (filling the sandbox with 40,000 pods did not fit the time).
"""


def plot(scale: dict[str, Any], target: Path) -> None:
    """Seconds and MiB against HAMi pods, one line a figure, so linear growth shows as a straight line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = scale["rows"]
    pods = [row["pods"] for row in rows]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    # CPU seconds when measured: on the shared box the wall time is mostly waiting for a core.
    cpu = all("floor_cpu_s" in row for row in rows)
    series = (
        (
            ("floor_cpu_s", "fetch floor: kubectl get --raw nodes + pods (kubectl's CPU)"),
            ("status_api_cpu_s", "status -o json, computed from the API"),
            ("cluster_info_cpu_s", "GET /api/v1/cluster-info (webhook process)"),
        )
        if cpu
        else (
            ("floor_s", "fetch floor (kubectl get --raw nodes + pods)"),
            ("status_api_s", "status -o json, computed from the API"),
            ("cluster_info_s", "GET /api/v1/cluster-info"),
            ("sync_s", "webhook first full sync"),
        )
    )
    for key, label in series:
        left.plot(pods, [row[key] for row in rows], marker="o", label=label)
    left.set_xlabel("HAMi pods (8 a node, 8 cards a node)")
    left.set_ylabel(f"{'CPU ' if cpu else ''}seconds (best of {scale['runs']})")
    left.legend(fontsize=7)
    left.grid(alpha=0.3)
    for key, label in (
        ("webhook_rss_mib", "webhook RSS after sync"),
        ("webhook_rss_after_mib", "webhook RSS after cluster-info"),
        ("status_api_rss_mib", "plugin max RSS (status -o json)"),
    ):
        right.plot(pods, [row[key] for row in rows], marker="o", label=label)
    right.set_xlabel("HAMi pods")
    right.set_ylabel("MiB")
    right.legend(fontsize=7)
    right.grid(alpha=0.3)
    fig.suptitle("hami-place cost as the cluster grows (2 shared cores)", fontsize=10)
    fig.tight_layout()
    fig.savefig(target, dpi=100)
    plt.close(fig)


def scale_table(scale: dict[str, Any]) -> list[str]:
    lines = [
        "| nodes | HAMi pods | fetch floor | `status -o json` (API) | ratio | plugin max RSS | first sync | "
        "`GET /api/v1/cluster-info` | webhook RSS | after cluster-info |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for row in scale["rows"]:
        lines.append(
            f"| {row['nodes']:,} | {row['pods']:,} | {row['floor_s']:.2f} s | {row['status_api_s']:.2f} s | "
            f"{row['status_api_s'] / row['floor_s']:.1f}x | {row['status_api_rss_mib']:.0f} MiB | "
            f"{row['sync_s']:.1f} s | {row['cluster_info_s']:.2f} s | {row['webhook_rss_mib']:.0f} MiB | "
            f"{row['webhook_rss_after_mib']:.0f} MiB |"
        )
    cpu = [row for row in scale["rows"] if "floor_cpu_s" in row]
    if cpu:
        lines += ["", "CPU seconds (user + system; wall time on the shared box includes waiting for a core):", ""]
        lines += ["| nodes | fetch floor | `status -o json` | ratio | cluster-info (whole webhook process) |"]
        lines += ["| ---: | ---: | ---: | ---: | ---: |"]
        lines += [
            f"| {row['nodes']:,} | {row['floor_cpu_s']:.2f} s | {row['status_api_cpu_s']:.2f} s | "
            f"{row['status_api_cpu_s'] / max(row['floor_cpu_s'], 0.01):.1f}x | {row['cluster_info_cpu_s']:.2f} s |"
            for row in cpu
        ]
    loads = [row for row in scale["rows"] if "load5" in row]
    if loads:
        shown = ", ".join(f"{row['nodes']:,} nodes {row['load5']:.1f}" for row in loads)
        lines += ["", f"Load average (5 min) on the 2 cores when each size was measured: {shown}."]
    return lines


def admission_table(adm: dict[str, Any]) -> list[str]:
    a = adm["args"]
    lines = [
        f"{a['nodes']:,} nodes x 8 cards, {a['pods']:,} HAMi pods, {a['placements']:,} placements; "
        f"{a['duration']:g} s a run.",
        "",
        "| rate | path | hami-place p50 / p99 / max (ms) | errors | HAMi p50 / p99 / max (ms) | errors | p99 ratio |",
        "| ---: | --- | --- | ---: | --- | ---: | ---: |",
    ]
    for row in [*adm["rows"], adm["claim"]]:
        ours, theirs = row["ours"], row["hami"]
        ratio = ours["p99"] / theirs["p99"] if theirs["p99"] else float("inf")
        lines.append(
            f"| {row['rate']}/s | {row['path']} | {ours['p50']:.2f} / {ours['p99']:.2f} / {ours['max']:.2f} | "
            f"{ours['errors']} | {theirs['p50']:.2f} / {theirs['p99']:.2f} / {theirs['max']:.2f} | "
            f"{theirs['errors']} | {ratio:.2f}x |"
        )
    w = adm["api_write"]
    lines += [
        "",
        f"API server's own write latency (sequential merge-patches of a placement's status): p50 {w['p50']:.2f} ms, "
        f"p99 {w['p99']:.2f} ms, max {w['max']:.2f} ms. Placements claimed: {adm['claimed']}.",
        f"RSS after the runs: hami-place {adm['rss_mib']['ours']:.0f} MiB, HAMi's scheduler "
        f"{adm['rss_mib']['hami']:.0f} MiB. First full sync of the webhook: {adm['sync_s']:.1f} s."
        + (f" Load average (5 min) at the end: {adm['load5']:.1f} on the 2 cores." if "load5" in adm else ""),
    ]
    return lines


def main() -> int:
    if not SCALE.exists() and not ADMISSION.exists():
        print(f"no figures yet ({SCALE.name}, {ADMISSION.name}); run bench/scale.py and bench/admission.py")
        return 0
    md = DOCS / "performance.md"
    lines = [
        "# Performance",
        "",
        "Measured by the benches in `bench/` (written by `bench/plot.py`; do not edit by hand).",
        "The machine: 2 cores shared with other work (test sessions, other benches), so the figures are",
        "pessimistic and noisy; the ratios against the baseline in the same run are what to read.",
        "",
    ]
    if SCALE.exists():
        scale = json.loads(SCALE.read_text())
        plot(scale, DOCS / "performance.png")
        lines += [
            "## Cost as the cluster grows",
            "",
            "![cost against cluster size](performance.png)",
            "",
            *scale_table(scale),
            "",
            "Reproduce: `.venv/bin/python bench/scale.py --sizes "
            + ",".join(str(r["nodes"]) for r in scale["rows"])
            + f" --runs {scale['runs']}`",
            "",
        ]
    if ADMISSION.exists():
        adm = json.loads(ADMISSION.read_text())
        a = adm["args"]
        lines += [
            "## Admission latency beside HAMi's own webhook",
            "",
            *admission_table(adm),
            "",
            f"Reproduce: `.venv/bin/python bench/admission.py --nodes {a['nodes']} --pods {a['pods']} "
            f"--placements {a['placements']} --duration {a['duration']:g} --rates {a['rates']} "
            f"--claim-rate {a['claim_rate']}`",
            "",
        ]
    lines += NOTES.splitlines()
    md.write_text("\n".join(lines) + "\n")
    print(f"wrote {md}" + (" and performance.png" if SCALE.exists() else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
