"""docs/dashboard.png: the Grafana dashboard's panels (chart/dashboards/hami-place.json) drawn from real scrapes of
the webhook's and HAMi's /metrics, taken while `make demo` ran, so the README shows what the dashboard shows.

    make demo > /tmp/demo.log &  python bench/dashboard.py record /tmp/demo.log   # writes docs/dashboard.json
    python bench/dashboard.py                                                    # docs/dashboard.png from it

`record` reads the webhook's API address from the demo's output and HAMi's metrics address from the HAMi scheduler
process's own flags, scrapes both every 2 s until the demo stops, and keeps the samples the panels read. The
queries are evaluated here by hand on those samples (rates and increases over successive scrapes, quantiles from
histogram buckets), the panels titled as the dashboard's. Not part of `make test`.
"""

from __future__ import annotations

import json
import re
import sys
import time
import urllib.request
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "docs" / "dashboard.json"
IMAGE = ROOT / "docs" / "dashboard.png"
# The samples the panels read.
KEPT = re.compile(
    r"^(hami_place_(placements|admissions_total|admission_duration_seconds_bucket|evictions_total|claims_total"
    r"|claim_conflicts_total|expirations_total|cache_sync_age_seconds|pinned_card_info|defrag_moves_total"
    r"|defrag_rescued_pods_total|defrag_room_lost_total|defrag_runs_total)|hami_gpu_memory_(allocated|limit)_bytes)$"
)
WINDOW = 30.0  # seconds a rate is taken over

Sample = tuple[str, dict[str, str], float]
Scrape = dict[str, Any]


def scrape(url: str) -> list[Sample]:
    """The kept samples of one /metrics."""
    with urllib.request.urlopen(url, timeout=5) as reply:
        text = reply.read().decode()
    return [
        (sample.name, dict(sample.labels), float(sample.value))
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if KEPT.match(sample.name)
    ]


def processes() -> dict[int, tuple[int, list[str]]]:
    """pid -> (parent pid, argv) of every process."""
    found = {}
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            argv = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
            parent = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        found[int(proc.name)] = (parent, argv)
    return found


def hami_metrics_address(api_port: str) -> str:
    """The address the demo's HAMi scheduler serves its metrics on: the one spawned by the process that spawned the
    webhook serving on `api_port` (other sandboxes may run HAMi on this machine too)."""
    table = processes()
    parents = {parent for parent, argv in table.values() if "--api-port" in argv and api_port in argv}
    for parent, argv in table.values():
        if parent in parents and argv[0].endswith("hami-scheduler"):
            for arg in argv:
                if arg.startswith("--metrics-bind-address="):
                    return arg.split("=", 1)[1]
    raise SystemExit("no hami-scheduler beside the demo's webhook: is the demo running?")


def record(log: Path) -> None:
    """Scrape the demo's webhook and HAMi every 2 s until the demo stops; write DATA."""
    api = None
    while api is None:
        found = re.search(r"\(API (http://[0-9.:]+)\)", log.read_text() if log.exists() else "")
        api = found.group(1) if found else None
        time.sleep(1)
    hami = f"http://{hami_metrics_address(api.rsplit(':', 1)[1])}/metrics"
    scrapes: list[Scrape] = []
    start = time.time()
    while "stopping the sandbox" not in log.read_text():
        samples = []
        for url in (f"{api}/metrics", hami):
            try:
                samples += scrape(url)
            except OSError as error:
                print(f"scrape of {url} failed: {error}", file=sys.stderr)
        scrapes.append({"t": round(time.time() - start, 1), "samples": samples})
        time.sleep(2)
    DATA.write_text(json.dumps(compact(scrapes)) + "\n")
    print(f"{len(scrapes)} scrapes over {scrapes[-1]['t'] if scrapes else 0:.0f} s written to {DATA}")


def compact(scrapes: list[Scrape]) -> dict[str, Any]:
    """The scrapes as stored: each series (name, labels) once, each scrape its (series index, value) pairs."""
    index: dict[str, int] = {}
    stored: list[list[Any]] = []
    out = []
    for item in scrapes:
        values = []
        for name, labels, value in item["samples"]:
            key = json.dumps([name, labels], sort_keys=True)
            if key not in index:
                index[key] = len(stored)
                stored.append([name, labels])
            values.append([index[key], value])
        out.append({"t": item["t"], "values": values})
    return {"series": stored, "scrapes": out}


def expand(data: dict[str, Any]) -> list[Scrape]:
    """The stored scrapes back as lists of (name, labels, value)."""
    stored = data["series"]
    return [
        {"t": item["t"], "samples": [(*stored[i], value) for i, value in item["values"]]} for item in data["scrapes"]
    ]


def series(scrapes: list[Scrape], name: str, by: str, where: Callable[[dict[str, str]], bool] = lambda _l: True):
    """{label value: [(t, summed value)]} of one metric across the scrapes, summed by one label."""
    out: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for item in scrapes:
        sums: dict[str, float] = defaultdict(float)
        for sample, labels, value in item["samples"]:
            if sample == name and where(labels):
                sums[labels.get(by, "")] += value
        for key, value in sums.items():
            out[key].append((item["t"], value))
    return dict(out)


def rate(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Per-second increase over the WINDOW before each point (the counter's own rate())."""
    out = []
    for t, value in points:
        before = [(t0, v0) for t0, v0 in points if t - WINDOW <= t0 < t]
        if before:
            t0, v0 = before[0]
            out.append((t, max(0.0, value - v0) / (t - t0)))
    return out


def quantile(scrapes: list[Scrape], name: str, q: float) -> list[tuple[float, float]]:
    """histogram_quantile(q) over the bucket increases of each WINDOW."""
    buckets = series(scrapes, name, "le")
    out = []
    for i, (t, _value) in enumerate(buckets.get("+Inf", [])):
        counts = []
        for le, points in buckets.items():
            now = points[i][1] if i < len(points) else 0.0
            before = [v for t0, v in points if t - WINDOW <= t0 < t]
            counts.append((float(le), now - (before[0] if before else now)))
        counts.sort()
        total = counts[-1][1]
        if total <= 0:
            continue
        lower, below = 0.0, 0.0
        for upper, count in counts:
            if count >= q * total:
                share = (q * total - below) / (count - below) if count > below else 1.0
                out.append((t, lower + (upper - lower) * share if upper != float("inf") else lower))
                break
            lower, below = upper, count
    return out


def moved(lines: dict[str, list[tuple[float, float]]]) -> dict[str, list[tuple[float, float]]]:
    """The series that ever left 0, or all of them when none did (the panel then shows its flat lines)."""
    kept = {key: points for key, points in lines.items() if any(value for _t, value in points)}
    return kept or lines


def plot_lines(ax: Any, lines: dict[str, list[tuple[float, float]]], unit: str = "") -> None:
    for label, points in sorted(lines.items()):
        if points:
            ax.plot([p[0] for p in points], [p[1] for p in points], label=label, linewidth=1.6)
    if lines:
        ax.legend(loc="upper left", fontsize=7, frameon=False, labelcolor="#ccccdc")
    ax.set_ylabel(unit, fontsize=7, color="#ccccdc")


def render() -> None:
    """Draw IMAGE from DATA."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scrapes = expand(json.loads(DATA.read_text()))
    dashboard = json.loads((ROOT / "chart" / "dashboards" / "hami-place.json").read_text())
    titles = {panel["title"] for panel in dashboard["panels"]}
    plt.rcParams.update({"font.size": 8, "text.color": "#ccccdc", "axes.labelcolor": "#ccccdc"})
    fig = plt.figure(figsize=(14, 11), facecolor="#111217")
    grid = fig.add_gridspec(4, 3, height_ratios=[1, 1, 1, 0.55], hspace=0.45, wspace=0.18)
    per_second = "per second"

    panels: list[tuple[str, Callable[[Any], None]]] = [
        ("Placements by phase", lambda ax: plot_lines(ax, series(scrapes, "hami_place_placements", "phase"))),
        (
            "Admissions by result",
            lambda ax: plot_lines(
                ax,
                {k: rate(v) for k, v in moved(series(scrapes, "hami_place_admissions_total", "result")).items()},
                per_second,
            ),
        ),
        (
            "Admission latency",
            lambda ax: plot_lines(
                ax,
                {
                    "p50": quantile(scrapes, "hami_place_admission_duration_seconds_bucket", 0.5),
                    "p99": quantile(scrapes, "hami_place_admission_duration_seconds_bucket", 0.99),
                },
                "seconds",
            ),
        ),
        (
            "Evictions by result",
            lambda ax: plot_lines(ax, moved(series(scrapes, "hami_place_evictions_total", "result"))),
        ),
        (
            "Claims, conflicts and expirations",
            lambda ax: plot_lines(
                ax,
                {
                    "claims": series(scrapes, "hami_place_claims_total", "").get("", []),
                    "conflicts": series(scrapes, "hami_place_claim_conflicts_total", "").get("", []),
                    "expirations": series(scrapes, "hami_place_expirations_total", "").get("", []),
                },
            ),
        ),
        (
            "Cache sync age",
            lambda ax: plot_lines(ax, series(scrapes, "hami_place_cache_sync_age_seconds", "kind"), "s"),
        ),
        (
            "Moves by result",
            lambda ax: plot_lines(ax, moved(series(scrapes, "hami_place_defrag_moves_total", "result"))),
        ),
        (
            "Rescued pods and room lost",
            lambda ax: plot_lines(
                ax,
                {
                    "rescued": series(scrapes, "hami_place_defrag_rescued_pods_total", "").get("", []),
                    "room lost": series(scrapes, "hami_place_defrag_room_lost_total", "").get("", []),
                },
            ),
        ),
        (
            "Runs by trigger and result",
            lambda ax: plot_lines(
                ax, moved(dict(series_by_two(scrapes, "hami_place_defrag_runs_total", "trigger", "result")))
            ),
        ),
    ]
    for position, (title, draw) in enumerate(panels):
        assert title in titles, f"{title} is not a panel of the dashboard"
        ax = fig.add_subplot(grid[position // 3, position % 3])
        style(ax, title)
        draw(ax)
    ax = fig.add_subplot(grid[3, :])
    style(ax, "Pinned cards")
    ax.axis("off")
    rows = pinned_rows(scrapes[-1]["samples"])
    if rows:
        table = ax.table(
            cellText=rows,
            colLabels=["placement", "node", "device_uuid", "device_type", "allocated (GiB)", "limit (GiB)"],
            loc="upper center",
            cellLoc="left",
            colWidths=[0.3, 0.09, 0.29, 0.14, 0.09, 0.09],
        )
        table.auto_set_font_size(False)
        table.set_fontsize(8)
        for cell in table.get_celld().values():
            cell.set_facecolor("#181b1f")
            cell.set_edgecolor("#2c3235")
            cell.get_text().set_color("#ccccdc")
    fig.suptitle(
        f"hami-place (Grafana dashboard panels, drawn from {len(scrapes)} scrapes of `make demo`, seconds since start)",
        color="#ccccdc",
        fontsize=11,
    )
    fig.savefig(IMAGE, dpi=90, facecolor=fig.get_facecolor(), bbox_inches="tight")
    print(f"wrote {IMAGE}")


def series_by_two(scrapes: list[Scrape], name: str, first: str, second: str) -> list[tuple[str, list]]:
    """series() summed by two labels at once."""
    out: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for item in scrapes:
        sums: dict[str, float] = defaultdict(float)
        for sample, labels, value in item["samples"]:
            if sample == name:
                sums[f"{labels.get(first, '')} {labels.get(second, '')}"] += value
        for key, value in sums.items():
            out[key].append((item["t"], value))
    return sorted(out.items())


def pinned_rows(samples: list[Sample]) -> list[list[str]]:
    """The pinned-cards table: hami_place_pinned_card_info joined on (node, device_uuid) with HAMi's series."""
    allocated: dict[tuple[str | None, str | None], tuple[str, float]] = {}
    limit: dict[tuple[str | None, str | None], float] = {}
    for name, labels, value in samples:
        key = (labels.get("node"), labels.get("device_uuid"))
        if name == "hami_gpu_memory_allocated_bytes":
            allocated[key] = (labels.get("device_type", ""), value)
        elif name == "hami_gpu_memory_limit_bytes":
            limit[key] = value
    rows = []
    for name, labels, _value in samples:
        if name != "hami_place_pinned_card_info":
            continue
        key = (labels["node"], labels["device_uuid"])
        kind, used = allocated.get(key, ("-", None))
        total = limit.get(key)
        rows.append(
            [
                f"{labels['placement_namespace']}/{labels['placement']}",
                labels["node"],
                labels["device_uuid"],
                kind,
                "-" if used is None else f"{used / 2**30:.1f}",
                "-" if total is None else f"{total / 2**30:.1f}",
            ]
        )
    return sorted(rows)


def style(ax: Any, title: str) -> None:
    ax.set_facecolor("#181b1f")
    ax.set_title(title, loc="left", fontsize=9, color="#ccccdc")
    ax.tick_params(colors="#8e8e8e", labelsize=7)
    for spine in ax.spines.values():
        spine.set_color("#2c3235")
    ax.grid(color="#2c3235", linewidth=0.6)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "record":
        record(Path(sys.argv[2]))
    elif len(sys.argv) == 1:
        render()
    else:
        raise SystemExit("usage: dashboard.py [record DEMO_LOG]")
