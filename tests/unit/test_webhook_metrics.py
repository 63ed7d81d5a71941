"""The server's own registry carries the standard process and Python series beside its own."""

from __future__ import annotations

from prometheus_client import generate_latest

from webhook.metrics import Metrics


def test_the_registry_exports_the_process_and_python_collectors() -> None:
    names = {
        line.split("{")[0].split(" ")[0]
        for line in generate_latest(Metrics().registry).decode().splitlines()
        if not line.startswith("#")
    }
    assert {"process_resident_memory_bytes", "process_cpu_seconds_total", "process_open_fds"} <= names
    assert {"python_gc_collections_total", "python_gc_objects_collected_total", "python_info"} <= names


def test_two_servers_in_one_process_each_get_their_registry() -> None:
    """The collectors are shared objects: registering them on a second registry must not fail."""
    assert generate_latest(Metrics().registry) and generate_latest(Metrics().registry)


def test_one_pinned_pod_names_no_more_than_its_share_of_cards() -> None:
    """A pinned pod's allocation annotation is its editor's to write: its series stop at MAX_CARDS_A_POD."""
    from webhook.metrics import MAX_CARDS_A_POD, pinned_cards

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
