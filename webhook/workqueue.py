"""A keyed work queue with the semantics of client-go's rate-limited delaying queue, for the server's loops.

A key (any hashable but None) is added on an event, handed to one worker at a time, and handed out again after
`done` when it was added while being processed. `add_after` holds a key until a deadline (the earliest one asked
for wins), `add_rate_limited` backs a failing key off exponentially until `forget`. `drain` hands out every key
ready now in one batch, for a loop that works out what its keys share once a pass.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

BASE_DELAY_SECONDS = 0.005
MAX_DELAY_SECONDS = 300.0


class WorkQueue(Generic[K]):
    """Ready keys in the order they became ready, each at most once; deadlines on an injectable clock."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        *,
        base_delay: float = BASE_DELAY_SECONDS,
        max_delay: float = MAX_DELAY_SECONDS,
    ) -> None:
        self._clock = clock
        self._base_delay = base_delay
        self._max_delay = max_delay
        self._changed = threading.Condition()
        self._ready: deque[K] = deque()
        self._dirty: set[K] = set()
        self._processing: set[K] = set()
        self._waiting: dict[K, float] = {}
        self._deadlines: list[tuple[float, int, K]] = []
        self._order = itertools.count()
        self._failures: dict[K, int] = {}
        self._shutting_down = False

    def add(self, key: K) -> None:
        """Mark the key for processing: handed out once, after `done` when a worker holds it now."""
        with self._changed:
            self._add(key)

    def add_after(self, key: K, seconds: float) -> None:
        """Add the key once `seconds` passed on the clock; a deadline already earlier for the key is kept."""
        with self._changed:
            if self._shutting_down:
                return
            if seconds <= 0:
                self._add(key)
                return
            at = self._clock() + seconds
            known = self._waiting.get(key)
            if known is not None and known <= at:
                return
            self._waiting[key] = at
            heapq.heappush(self._deadlines, (at, next(self._order), key))
            if len(self._deadlines) > 2 * len(self._waiting) + 64:
                self._compact()
            self._changed.notify_all()

    def add_rate_limited(self, key: K) -> None:
        """Add the key after its backoff (base, doubled at each failure since its last `forget`, up to the cap)."""
        with self._changed:
            failures = self._failures.get(key, 0)
            self._failures[key] = failures + 1
        self.add_after(key, min(self._base_delay * 2 ** min(failures, 64), self._max_delay))

    def forget(self, key: K) -> None:
        """Reset the key's backoff: it succeeded."""
        with self._changed:
            self._failures.pop(key, None)

    def retries(self, key: K) -> int:
        """How many times the key was added rate-limited since its last `forget`."""
        with self._changed:
            return self._failures.get(key, 0)

    def get(self, timeout: float | None = None) -> K | None:
        """The next ready key, now held by the caller until `done`; None once `timeout` (seconds) passed or the
        queue is shut down and empty."""
        give_up = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            while True:
                self._promote()
                if self._ready:
                    return self._hand_out()
                if self._shutting_down:
                    return None
                wait = None if give_up is None else give_up - time.monotonic()
                if wait is not None and wait <= 0:
                    return None
                if self._deadlines:
                    due = max(self._deadlines[0][0] - self._clock(), 0.0)
                    wait = due if wait is None else min(wait, due)
                self._changed.wait(wait)

    def drain(self, limit: int | None = None) -> list[K]:
        """Every key ready now (at most `limit`), without waiting, each held by the caller until `done`."""
        with self._changed:
            self._promote()
            count = len(self._ready) if limit is None else min(limit, len(self._ready))
            return [self._hand_out() for _ in range(count)]

    def done(self, key: K) -> None:
        """The caller finished with the key; added meanwhile, it is ready again."""
        with self._changed:
            self._processing.discard(key)
            if key in self._dirty:
                self._ready.append(key)
                self._changed.notify()

    def shut_down(self) -> None:
        """Take no more keys and drop the deadlines; `get` hands out what is ready, then returns None."""
        with self._changed:
            self._shutting_down = True
            self._waiting.clear()
            self._deadlines.clear()
            self._changed.notify_all()

    def shutting_down(self) -> bool:
        """Whether `shut_down` was called."""
        with self._changed:
            return self._shutting_down

    def waiting(self) -> int:
        """How many keys wait for a deadline."""
        with self._changed:
            return len(self._waiting)

    def __len__(self) -> int:
        """How many keys are ready now."""
        with self._changed:
            self._promote()
            return len(self._ready)

    def _add(self, key: K) -> None:
        if self._shutting_down or key in self._dirty:
            return
        self._dirty.add(key)
        if key not in self._processing:
            self._ready.append(key)
            self._changed.notify()

    def _hand_out(self) -> K:
        key = self._ready.popleft()
        self._dirty.discard(key)
        self._processing.add(key)
        return key

    def _promote(self) -> None:
        """Add the keys whose deadline came; entries replaced by an earlier deadline are dropped."""
        if not self._deadlines:
            return
        now = self._clock()
        while self._deadlines and self._deadlines[0][0] <= now:
            at, _, key = heapq.heappop(self._deadlines)
            if self._waiting.get(key) == at:
                del self._waiting[key]
                self._add(key)

    def _compact(self) -> None:
        """Drop the heap's replaced entries, so that a key moved earlier again and again keeps one."""
        self._deadlines = [entry for entry in self._deadlines if self._waiting.get(entry[2]) == entry[0]]
        heapq.heapify(self._deadlines)
