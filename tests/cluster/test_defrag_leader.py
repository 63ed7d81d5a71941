"""The defragmentation controller's leader election (`kube/leader.py`) on the sandbox's API server: one leader at a
time, a leader cut off from the API server stops counting itself the leader before another replica starts, a renewal
another replica beat is refused, and a replica that stops gives its own Lease up at once."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from kubectl_hami_place.kube.client import Kube, connect
from kubectl_hami_place.kube.leader import Elector, LeaseTimes
from sandbox.cluster import Sandbox, wait_for
from tests.cluster.cli_harness import cut_off

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


def test_a_renewal_over_a_lease_another_replica_wrote_since_it_was_read_is_refused_and_not_leading(
    cluster: Sandbox, namespace: str
) -> None:
    """Each write carries the resourceVersion read: when another replica takes the Lease between this one's read and
    its renewal, the API server refuses the renewal (409) and this replica does not count itself the leader. The
    other replica's write is made at that instant by wrapping the read; the refusal is the API server's."""
    kube = connect(str(cluster.kubeconfig))
    a, b = (Elector(kube, namespace, "leader", identity, times=TIMES) for identity in ("a", "b"))
    assert a._attempt(time.monotonic()), "a creates the Lease"
    read = a._get

    def read_then_taken() -> dict[str, Any]:
        lease = read()
        b._write("PUT", b._body(read(), transitions=1, acquired=True))
        return lease

    a._get = read_then_taken  # type: ignore[method-assign]
    assert not a._attempt(time.monotonic()), "the renewal over a Lease b took is refused"
    lease = client.CoordinationV1Api(cluster.api_client()).read_namespaced_lease("leader", namespace)
    assert (lease.spec.holder_identity, lease.spec.lease_transitions) == ("b", 1)


def test_a_replica_that_stops_gives_its_lease_up_at_once_and_leaves_another_holders_alone(
    cluster: Sandbox, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Stopping, the leader empties the Lease's holder, so another replica takes it at its next try instead of
    waiting the lease out; a replica stopping after another took the Lease leaves that holder's record as it is; one
    that cannot reach the API server to give the Lease up says so in one line."""
    kube = connect(str(cluster.kubeconfig))
    leases = client.CoordinationV1Api(cluster.api_client())
    a, b = (Elector(kube, namespace, "leader", identity, times=TIMES) for identity in ("a", "b"))

    def lead(elector: Elector) -> None:
        """One try that takes or renews the Lease, counted as leading until its deadline, as `run` counts it."""
        started = time.monotonic()
        assert elector._attempt(started), f"{elector.identity} took the Lease"
        elector._valid_until = started + TIMES.renew_deadline

    lead(a)
    assert not b._attempt(time.monotonic()), "a holds the Lease"
    a._step_down()
    lease = leases.read_namespaced_lease("leader", namespace)
    assert (lease.spec.holder_identity, lease.spec.lease_duration_seconds) == ("", 1), lease.spec
    lead(b)
    a._valid_until = time.monotonic() + TIMES.renew_deadline  # a still counted itself the leader
    before = leases.read_namespaced_lease("leader", namespace).metadata.resource_version
    a._step_down()
    after = leases.read_namespaced_lease("leader", namespace)
    assert (after.spec.holder_identity, after.metadata.resource_version) == ("b", before)
    b.kube = cut_off(kube)
    with caplog.at_level(logging.WARNING, logger="kubectl_hami_place.kube.leader"):
        b._step_down()
    [said] = [record.getMessage() for record in caplog.records if record.name == "kubectl_hami_place.kube.leader"]
    assert said.startswith(f"leader lease {namespace}/leader not released: cannot reach the API server"), said
    assert not b.leading()
