"""The server's own registry carries the standard process and Python series beside its own."""

from __future__ import annotations

import re
import time
from pathlib import Path
from types import SimpleNamespace

from prometheus_client import generate_latest

from tests.unit.test_webhook_server import sample
from webhook.metrics import MAX_CARDS_A_POD, Metrics, pinned_cards


def test_the_registry_exports_the_process_and_python_collectors() -> None:
    names = {
        line.split("{")[0].split(" ")[0]
        for line in generate_latest(Metrics().registry).decode().splitlines()
        if not line.startswith("#")
    }
    assert {"process_resident_memory_bytes", "process_cpu_seconds_total", "process_open_fds"} <= names
    assert {"python_gc_collections_total", "python_gc_objects_collected_total", "python_info"} <= names


def test_every_metric_the_server_exports_is_one_the_readme_names_and_no_other() -> None:
    """The names are an interface (the chart's dashboard and alerts, an operator's queries): a rename, a new series or
    one gone fails here until the README says so. The `_created` series are prometheus_client's own."""
    metrics = Metrics()
    metrics.watch_placements(list, list)
    text = generate_latest(metrics.registry).decode()
    exported = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE hami_place_")}
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    named = {name for name in re.findall(r"hami_place_[a-z_]+", readme) if not name.endswith("_")}
    assert {name for name in exported if not name.endswith("_created")} == named


def test_two_servers_in_one_process_each_get_their_registry() -> None:
    """The collectors are shared objects: registering them on a second registry must not fail."""
    assert generate_latest(Metrics().registry) and generate_latest(Metrics().registry)


def test_one_pinned_pod_names_no_more_than_its_share_of_cards() -> None:
    """A pinned pod's allocation annotation is its editor's to write: its series stop at MAX_CARDS_A_POD."""
    devices = "".join(f"GPU-{n},NVIDIA,1,0:" for n in range(1000))
    annotations = {
        "hami.io/vgpu-node": "gpu-0",
        "hami.io/vgpu-devices-allocated": devices + ";",
        "scheduling.hami.placement.com/placement": "p",
        "scheduling.hami.placement.com/claim": "tok",
    }
    pod = {"metadata": {"namespace": "a", "name": "x", "annotations": annotations}, "status": {"phase": "Running"}}
    assert len(pinned_cards([pod], {("a", "p", "tok")})) == MAX_CARDS_A_POD
    assert pinned_cards([pod], {("a", "p", "other")}) == [], "no stored placement holds its claim"


def test_the_pinned_cards_are_those_of_pinned_pods_placed_and_not_ended_each_card_once() -> None:
    """Ended or ending pods, pods not placed yet and unreadable allocations hold no card; the ones after them do."""

    def pod(name: str, allocated: str, *, node: str = "", phase: str = "Running", **meta: str) -> dict[str, object]:
        annotations = {
            "hami.io/vgpu-devices-allocated": allocated,
            "scheduling.hami.placement.com/placement": "p",
            "scheduling.hami.placement.com/claim": name,
        }
        if node:
            annotations["hami.io/vgpu-node"] = node
        return {
            "metadata": {"namespace": "a", "name": name, "annotations": annotations, **meta},
            "spec": {"nodeName": "by-spec"},
            "status": {"phase": phase},
        }

    one = "GPU-1,NVIDIA,1000,0:;"
    pods = [
        pod("succeeded", one, node="gpu-0", phase="Succeeded"),
        pod("failed", one, node="gpu-0", phase="Failed"),
        pod("deleting", one, node="gpu-0", deletionTimestamp="2026-12-07T00:00:00Z"),
        pod("unreadable", "GPU-9,NVIDIA,x,0:;", node="gpu-0"),
        pod("two", "GPU-2,NVIDIA,1000,0:GPU-3,NVIDIA,1000,0:;GPU-2,NVIDIA,1000,0:;", node="gpu-0"),
        pod("spec", one),
    ]
    unplaced = pod("unplaced", one)
    unplaced["spec"] = {}
    held = {("a", "p", str(p["metadata"]["name"])) for p in [*pods, unplaced]}  # type: ignore[index]
    assert pinned_cards([*pods, unplaced], held) == [
        ("a", "p", "gpu-0", "GPU-2"),
        ("a", "p", "gpu-0", "GPU-3"),
        ("a", "p", "by-spec", "GPU-1"),
    ]


def test_a_watchs_sync_age_is_infinite_before_its_first_sync_then_seconds_since_and_never_negative() -> None:
    """Read at scrape time from the reflector's last sync (Unix seconds); a stamp ahead of this clock reads 0."""
    metrics = Metrics()
    reflector = SimpleNamespace(kind="pods", last_sync=None)
    metrics.watch_sync_age(reflector)  # type: ignore[arg-type]  # the two attributes it reads

    assert sample(metrics.sync_age, "", kind="pods") == float("inf")
    reflector.last_sync = time.time() - 5
    before = time.time() - reflector.last_sync
    seen = sample(metrics.sync_age, "", kind="pods")
    after = time.time() - reflector.last_sync
    assert before <= seen <= after
    reflector.last_sync = time.time() + 60
    assert sample(metrics.sync_age, "", kind="pods") == 0.0
