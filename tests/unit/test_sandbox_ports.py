"""The sandbox's listening ports stay out of the kernel's ephemeral range and apart between pytest-xdist workers."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from sandbox import cluster


def ephemeral_low() -> int:
    return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])


def test_a_port_is_below_the_ephemeral_range_and_bindable() -> None:
    port = cluster.free_port()
    assert cluster._LISTEN_PORTS[0] <= port < max(ephemeral_low(), cluster._LISTEN_PORTS[0] + 2048)
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_ports_handed_out_together_differ(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster.random, "randrange", lambda width: 0)
    ports = [cluster.free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)


def test_two_workers_draw_from_disjoint_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    drawn: dict[str, set[int]] = {}
    for worker in ("gw0", "gw1"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        drawn[worker] = {cluster.free_port() for _ in range(100)}
    assert max(drawn["gw0"]) < min(drawn["gw1"])


def test_a_port_someone_listens_on_is_not_handed_out(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        monkeypatch.setattr(cluster, "_LISTEN_PORTS", (port, port + 1))
        monkeypatch.setattr(cluster.random, "randrange", lambda width: 0)
        monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
        monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
        assert cluster.free_port() != port
