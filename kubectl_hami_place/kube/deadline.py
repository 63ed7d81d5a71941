"""The time an admission may still take: the API server stops waiting after the webhook's timeoutSeconds.

The /mutate app starts a `Deadline` when a review arrives: its body must arrive by then, and a review that needs
the API server is answered in a claim thread with the deadline current (a context variable, so each thread sees its
own). Admission code reads it with `current()`; every API server call made from that thread through a
`DeadlineApiClient` has its read and connect timeouts cut to what is left, so no write of ours outlives the API
server's patience by more than the margin. Threads without a current deadline (watches, the reconciler) keep their
own timeouts.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from kubectl_hami_place.kube.client import CheckedApiClient

# What is kept back from the webhook timeout: the answer still has to travel back and be read by the API server.
MARGIN_SECONDS = 1.0
# A call is never given less than this (a zero timeout would mean "no timeout" to urllib3).
MIN_CALL_SECONDS = 0.05

_current: ContextVar[Deadline | None] = ContextVar("hami_place_deadline", default=None)


@dataclass(frozen=True)
class Deadline:
    """A point on the monotonic clock by which the admission's answer must be on its way."""

    expires: float

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        """A deadline `seconds` from now."""
        return cls(time.monotonic() + seconds)

    @classmethod
    def for_webhook_timeout(cls, timeout_seconds: float) -> Deadline:
        """The deadline of an admission the API server waits `timeout_seconds` for, less a margin for the answer."""
        return cls.after(max(timeout_seconds - MARGIN_SECONDS, timeout_seconds / 2))

    def remaining(self) -> float:
        """Seconds left, never negative."""
        return max(0.0, self.expires - time.monotonic())

    def expired(self) -> bool:
        """True once no time is left."""
        return self.remaining() <= 0.0


def current() -> Deadline | None:
    """The deadline of the admission this thread is answering, None outside one."""
    return _current.get()


@contextmanager
def admitting(deadline: Deadline) -> Iterator[Deadline]:
    """Make `deadline` current for the duration of one admission."""
    token = _current.set(deadline)
    try:
        yield deadline
    finally:
        _current.reset(token)


def bounded(timeout: Any) -> Any:
    """A urllib3 `_request_timeout` (None, seconds, or (connect, read)) cut to the current deadline, if any."""
    deadline = current()
    if deadline is None:
        return timeout
    left = max(deadline.remaining(), MIN_CALL_SECONDS)
    if timeout is None:
        return (left, left)
    if isinstance(timeout, int | float):
        return (min(float(timeout), left), min(float(timeout), left))
    connect, read = timeout
    return (min(float(connect), left), min(float(read), left))


class DeadlineApiClient(CheckedApiClient):
    """The kubernetes ApiClient, with every request's timeouts cut to the current admission's deadline."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Every generated API call ends in rest_client.request(..., _request_timeout=...), in every client version.
        plain = self.rest_client.request

        def request(*call: Any, **options: Any) -> Any:
            options["_request_timeout"] = bounded(options.get("_request_timeout"))
            return plain(*call, **options)

        setattr(self.rest_client, "request", request)  # noqa: B010  (an instance attribute over the method)
