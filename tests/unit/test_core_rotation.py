"""The order of a certificate rotation: the new CA is trusted before it is served, the old one kept until served no
more."""

from __future__ import annotations

import dataclasses

from kubectl_hami_place.core.rotation import Rotation, Step, next_step, renewal_due

PUBLISH, RELOAD = 10.0, 30.0
STEADY = Rotation(
    now=1000.0,
    issued_at=0.0,
    not_after=3000.0,
    bundle_cas=1,
    staged=False,
    requested=False,
    switched_at=None,
    configuration_version="7",
    configuration_current=True,
    published=None,
)


def step(seen: Rotation) -> Step:
    return next_step(seen, publish_seconds=PUBLISH, reload_seconds=RELOAD)


def test_renewal_is_due_once_less_than_a_third_of_the_lifetime_is_left() -> None:
    assert not renewal_due(1999.0, 0.0, 3000.0)
    assert not renewal_due(2000.0, 0.0, 3000.0), "exactly a third left is not less than a third"
    assert renewal_due(2001.0, 0.0, 3000.0)
    assert renewal_due(4000.0, 0.0, 3000.0), "an expired certificate is due"


def test_a_certificate_is_due_by_its_own_lifetime_not_by_the_epoch() -> None:
    """Real certificates are issued at Unix times near 1.8e9: read wrongly, every replica would rotate at each look."""
    issued = 1_800_000_000.0
    assert [renewal_due(issued + elapsed, issued, issued + 3000.0) for elapsed in (0.0, 1999.0, 2001.0)] == [
        False,
        False,
        True,
    ]


def test_a_steady_certificate_is_left_alone_until_due_or_asked() -> None:
    assert step(STEADY) is Step.NONE
    assert step(dataclasses.replace(STEADY, now=2001.0)) is Step.STAGE
    assert step(dataclasses.replace(STEADY, requested=True)) is Step.STAGE


def test_a_configuration_that_differs_from_the_secret_is_published_first_whatever_else_is_due() -> None:
    for seen in (
        dataclasses.replace(STEADY, configuration_current=False),
        dataclasses.replace(STEADY, configuration_current=False, staged=True, bundle_cas=2),
        dataclasses.replace(STEADY, configuration_current=False, bundle_cas=2, switched_at=0.0),
    ):
        assert step(seen) is Step.PUBLISH


def test_the_switch_waits_for_the_two_ca_bundle_to_stand_unchanged_in_the_configuration() -> None:
    staged = dataclasses.replace(STEADY, staged=True, bundle_cas=2)
    assert step(staged) is Step.RECORD, "not yet recorded"
    assert step(dataclasses.replace(staged, published=("6", 990.0))) is Step.RECORD, "recorded for an older version"
    assert step(dataclasses.replace(staged, published=("7", 995.0))) is Step.NONE, "5 s of the 10"
    assert step(dataclasses.replace(staged, published=("7", 990.0))) is Step.SWITCH
    assert step(dataclasses.replace(staged, configuration_version=None)) is Step.SWITCH, "no configuration to wait on"


def test_the_old_ca_leaves_only_once_every_replica_had_time_to_serve_the_new_pair() -> None:
    switched = dataclasses.replace(STEADY, bundle_cas=2, switched_at=980.0)
    assert step(switched) is Step.NONE
    assert step(dataclasses.replace(switched, switched_at=970.0)) is Step.DROP
    assert step(dataclasses.replace(switched, switched_at=None)) is Step.DROP, "two CAs left by hand"
    assert step(dataclasses.replace(switched, requested=True)) is Step.NONE, "no new rotation before this one ended"
