"""The server follows HAMi's device config: a new one reaches admissions, one that cannot be read leaves the last."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

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
