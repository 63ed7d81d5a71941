"""The elector's thread outlives an attempt that fails in a way no API error names (the Lease itself is covered on
the sandbox: tests/cluster/test_defrag_leader.py). `_attempt` is replaced here: such a failure cannot be had from a
real API server on demand."""

from __future__ import annotations

import threading

import pytest
from kubernetes.client import ApiClient

from kubectl_hami_place.kube.client import Kube
from kubectl_hami_place.kube.leader import Elector, LeaseTimes


def test_an_attempt_that_raises_anything_leaves_the_thread_trying_again(monkeypatch: pytest.MonkeyPatch) -> None:
    elector = Elector(Kube(ApiClient(), "ns", "", None), "ns", "lease", "me", times=LeaseTimes(3, 2.0, 0.01))
    attempts: list[float] = []
    leading = threading.Event()

    def attempt(started: float) -> bool:
        attempts.append(started)
        if len(attempts) == 1:
            raise RuntimeError("a Lease of an unexpected shape")
        return True

    monkeypatch.setattr(elector, "_attempt", attempt)
    monkeypatch.setattr(elector, "_step_down", lambda: None)
    elector.on_change = lambda now: leading.set() if now else None
    stop = threading.Event()
    thread = threading.Thread(target=elector.run, args=(stop,), daemon=True)
    thread.start()
    try:
        assert leading.wait(10), "the thread ended at the first failure"
    finally:
        stop.set()
        thread.join(10)
    assert len(attempts) >= 2 and elector.leading()


@pytest.mark.parametrize(
    ("lease_duration", "renew_deadline", "retry"),
    [(15, 10.0, 0.0), (15, 10.0, 10.0), (10, 10.0, 2.0)],
)
def test_lease_times_that_let_two_replicas_act_at_once_are_refused(
    lease_duration: int, renew_deadline: float, retry: float
) -> None:
    """A leader must stop acting strictly before a follower may take over, and retry strictly within its deadline
    (a zero retry spins): times equal at any step would let two replicas act, so they are refused, each alike."""
    with pytest.raises(ValueError) as raised:
        LeaseTimes(lease_duration, renew_deadline, retry)
    assert str(raised.value) == "leader election needs 0 < retry < renew deadline < lease duration"
