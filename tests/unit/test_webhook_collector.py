"""The collector's pause, shared by the cluster-info builds and the controller's plans."""

from __future__ import annotations

import gc

import pytest

from webhook.collector import CollectorPause


def test_the_collector_stays_paused_until_the_last_overlapping_build_ends() -> None:
    pause = CollectorPause()
    assert gc.isenabled()
    with pause():
        assert not gc.isenabled()
        with pause():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), pause():
        raise RuntimeError("a failed build")
    assert gc.isenabled()
