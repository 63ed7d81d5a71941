"""The defragmentation controller's leader election (`kube/leader.py`) on the sandbox's API server: one leader at a
time, and a leader cut off from the API server stops counting itself the leader before another replica starts."""

from __future__ import annotations

import copy
import dataclasses
import threading
from collections.abc import Iterator

import pytest
from kubernetes import client

from kubectl_hami_place.kube.client import Kube, connect
from kubectl_hami_place.kube.leader import Elector, LeaseTimes
from sandbox.cluster import Sandbox, wait_for

pytestmark = pytest.mark.cluster
# Short, so the test waits seconds, not the controller's 15 s.
TIMES = LeaseTimes(lease_duration=4, renew_deadline=2.5, retry=0.25)


@pytest.fixture
def stop() -> Iterator[threading.Event]:
    """Stops every elector a test runs."""
    event = threading.Event()
    yield event
    event.set()


def standing(kube: Kube, namespace: str, identity: str, stop: threading.Event) -> Elector:
    """An elector for the Lease `leader` in the namespace, running in its own thread until `stop`."""
    elector = Elector(kube, namespace, "leader", identity, times=TIMES)
    threading.Thread(target=elector.run, args=(stop,), daemon=True).start()
    return elector


def cut_off(kube: Kube) -> Kube:
    """The same client pointed at an address nothing listens on: every request fails at once."""
    configuration = copy.copy(kube.api.configuration)
    configuration.host = "https://127.0.0.1:1"
    return dataclasses.replace(kube, api=client.ApiClient(configuration))


def test_one_leader_and_a_cut_off_leader_stops_before_another_starts(
    cluster: Sandbox, namespace: str, stop: threading.Event
) -> None:
    kube = connect(str(cluster.kubeconfig))
    electors = [standing(kube, namespace, identity, stop) for identity in ("a", "b")]
    wait_for(lambda: any(e.leading() for e in electors), "a leader")
    for _ in range(40):
        assert sum(e.leading() for e in electors) == 1
        stop.wait(0.05)
    leader, follower = sorted(electors, key=lambda e: not e.leading())
    lease = client.CoordinationV1Api(cluster.api_client()).read_namespaced_lease("leader", namespace)
    assert lease.spec.holder_identity == leader.identity
    assert lease.spec.lease_duration_seconds == TIMES.lease_duration

    leader.kube = cut_off(kube)

    def taken_over() -> bool:
        both = leader.leading() and follower.leading()
        assert not both, "two replicas counted themselves the leader at once"
        return follower.leading()

    wait_for(taken_over, "the follower to take the Lease over", timeout=60, interval=0.05)
    assert not leader.leading()
    lease = client.CoordinationV1Api(cluster.api_client()).read_namespaced_lease("leader", namespace)
    assert lease.spec.holder_identity == follower.identity
    assert lease.spec.lease_transitions == 1
