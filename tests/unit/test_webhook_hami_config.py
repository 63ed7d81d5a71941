"""The server follows HAMi's device config: a new one reaches admissions, one that cannot be read leaves the last."""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Iterator

import pytest

from kubectl_hami_place.core.hami_config import HAMI_DEFAULTS
from kubectl_hami_place.kube.hami_config import HamiConfigInForce
from webhook.hami_config import FollowedHamiConfig

RENAMED = dataclasses.replace(HAMI_DEFAULTS, resource_count_name="example.com/vgpu")
UNREADABLE = HamiConfigInForce(HAMI_DEFAULTS, "", "cannot read HAMi's device config (timed out)", unreadable=True)
SEEN = HamiConfigInForce(RENAMED, "kube-system/hami-scheduler-device")


def reads(*answers: HamiConfigInForce) -> Iterator[HamiConfigInForce]:
    """What the API server answers, one read after another."""
    yield from answers


def test_a_start_without_the_api_server_takes_the_config_once_it_can_be_read_and_keeps_it_through_an_outage() -> None:
    answers = reads(UNREADABLE, UNREADABLE, SEEN, UNREADABLE, HamiConfigInForce(HAMI_DEFAULTS, "kube-system/h"))
    followed = FollowedHamiConfig(lambda: next(answers))
    told = []
    assert followed.refresh() == HAMI_DEFAULTS, "the defaults until the config can be read"
    followed.on_change = told.append
    followed.refresh()
    assert told == []
    followed.refresh()
    assert told == [RENAMED], "recovered: the config read replaces the defaults"
    assert followed.refresh() == RENAMED and told == [RENAMED], "an outage keeps the config read before"
    followed.refresh()
    assert told == [RENAMED, HAMI_DEFAULTS], "a change of the ConfigMap reaches admissions"


def test_each_config_taken_or_kept_is_said_once_in_the_log(caplog: pytest.LogCaptureFixture) -> None:
    """The log is where an operator learns which device config admissions use, and why an outage kept the old."""
    noticed = HamiConfigInForce(HAMI_DEFAULTS, "", "HAMi's device config has no key: HAMi's defaults apply")
    answers = reads(noticed, UNREADABLE, SEEN, SEEN, UNREADABLE)
    followed = FollowedHamiConfig(lambda: next(answers))
    with caplog.at_level(logging.INFO, logger="webhook.hami_config"):
        for _ in range(5):
            followed.refresh()
    assert [(record.levelno, record.getMessage()) for record in caplog.records] == [
        (logging.WARNING, "HAMi's device config has no key: HAMi's defaults apply"),
        (logging.WARNING, "cannot read HAMi's device config (timed out); keeping the config read from HAMi's defaults"),
        (logging.INFO, "HAMi's device config in force: kube-system/hami-scheduler-device"),
        (
            logging.WARNING,
            "cannot read HAMi's device config (timed out); keeping the config read from "
            "kube-system/hami-scheduler-device",
        ),
    ]


def test_a_change_with_no_one_told_is_taken_and_a_failed_reread_does_not_end_the_loop(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The loop runs for the life of the server: no listener yet, or a read that raises, must not stop it."""
    stop = threading.Event()
    steps: list[HamiConfigInForce | Exception] = [UNREADABLE, RuntimeError("a bug"), SEEN]

    def read() -> HamiConfigInForce:
        step = steps.pop(0)
        if isinstance(step, Exception):
            raise step
        if not steps:
            stop.set()
        return step

    followed = FollowedHamiConfig(read, every=0)
    followed.refresh()
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="webhook.hami_config"):
        followed.run(stop)
    assert followed.current == SEEN
    assert [record.getMessage() for record in caplog.records] == ["re-reading HAMi's device config failed"]
