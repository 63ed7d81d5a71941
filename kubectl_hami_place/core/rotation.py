"""When the webhook's certificate moves to a new CA, and in which order, so that the API server never meets a
serving certificate it cannot verify.

A rotation is four writes, each by whichever replica sees it due (every write is conditional on what was read):
stage (a new CA and a serving certificate it signed are stored beside the current pair; the Secret's bundle holds
both CAs), publish (the webhook configuration's caBundle takes that two-CA bundle), switch (once the API server has
had the two-CA bundle for `publish_seconds` unchanged, the new pair becomes the served one) and drop (once every
replica had `reload_seconds` to serve the new pair, the old CA leaves the bundle, then the configuration).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

# A certificate is renewed once less than this share of its lifetime remains.
RENEW_SHARE = 1 / 3


class Step(Enum):
    """What the replica looking at the Secret and the configuration does next."""

    NONE = "none"
    PUBLISH = "publish"  # the configuration's caBundle := the Secret's bundle
    RECORD = "record"  # note in the Secret the configuration version that carries the two-CA bundle, and when
    STAGE = "stage"
    SWITCH = "switch"
    DROP = "drop"


@dataclass(frozen=True)
class Rotation:
    """What one look at the Secret and the configuration found; times are Unix seconds."""

    now: float
    issued_at: float  # when the served certificate was made (its notBefore, less what it was backdated by)
    not_after: float  # the served certificate's, or its CA's if that ends first
    bundle_cas: int  # CAs in the Secret's bundle
    staged: bool  # a next pair waits in the Secret
    requested: bool  # an operator (or the chart's hook) asked for a rotation
    switched_at: float | None
    # The configuration: None when it does not exist; whether every webhook of it carries the Secret's bundle.
    configuration_version: str | None
    configuration_current: bool
    # (configuration version, when) that the Secret records for the two-CA bundle, if any.
    published: tuple[str, float] | None


def renewal_due(now: float, issued_at: float, not_after: float) -> bool:
    """Whether less than a third of the certificate's lifetime remains (expired included)."""
    return not_after - now < (not_after - issued_at) * RENEW_SHARE


def next_step(seen: Rotation, *, publish_seconds: float, reload_seconds: float) -> Step:
    """The one write due now, or NONE (nothing to do, or waiting for the API server or the other replicas)."""
    if seen.configuration_version is not None and not seen.configuration_current:
        return Step.PUBLISH
    if seen.staged:
        if seen.configuration_version is None:
            return Step.SWITCH  # no configuration: nobody calls the webhook through a bundle yet
        if seen.published is None or seen.published[0] != seen.configuration_version:
            return Step.RECORD
        return Step.SWITCH if seen.now - seen.published[1] >= publish_seconds else Step.NONE
    if seen.bundle_cas > 1:
        waited = seen.switched_at is None or seen.now - seen.switched_at >= reload_seconds
        return Step.DROP if waited else Step.NONE
    if seen.requested or renewal_due(seen.now, seen.issued_at, seen.not_after):
        return Step.STAGE
    return Step.NONE
