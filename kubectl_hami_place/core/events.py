"""Events as client-go's recorder sends them: a repeat of the same Event (same source, object, type, reason and
message) raises the count and last timestamp of the one Event already written, and a token bucket per source and
object bounds how often anything about that object is written at all (`tools/record/events_cache.go`)."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Generic, TypeVar

# client-go's defaults: 25 Events about an object at once, then one every 5 minutes; 4096 keys remembered.
SPAM_BURST = 25
SPAM_QPS = 1.0 / 300.0
CACHE_ENTRIES = 4096

_Key = TypeVar("_Key")
_Value = TypeVar("_Value")


@dataclass(frozen=True)
class InvolvedObject:
    """What an Event is about, as its `involvedObject` names it."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str


@dataclass(frozen=True)
class EventKey:
    """One Event's identity for aggregation: a repeat with the same key is the same Event counted again."""

    component: str
    host: str
    involved: InvolvedObject
    type: str
    reason: str
    message: str

    @property
    def spam_key(self) -> tuple[str, str, InvolvedObject]:
        """The rate limit's key: the source and the object, whatever the reason or message (client-go's)."""
        return (self.component, self.host, self.involved)


@dataclass(frozen=True)
class Bucket:
    """A token bucket's state: the tokens left at `at` (seconds on a monotonic clock)."""

    tokens: float
    at: float


def take_token(
    bucket: Bucket | None, now: float, *, burst: int = SPAM_BURST, qps: float = SPAM_QPS
) -> tuple[bool, Bucket]:
    """Whether one more Event may be written now, and the bucket after: full (`burst`) at first, refilled at `qps`."""
    tokens = float(burst) if bucket is None else min(float(burst), bucket.tokens + max(0.0, now - bucket.at) * qps)
    if tokens >= 1.0:
        return True, Bucket(tokens - 1.0, now)
    return False, Bucket(tokens, now)


@dataclass(frozen=True)
class Seen:
    """What was written for a key: the Event's name ('' until the API server named it), its count and first time."""

    name: str
    count: int
    first_timestamp: str


@dataclass(frozen=True)
class Occurrence:
    """One more occurrence of a key: create a new Event, or patch `name` to this count and last timestamp."""

    count: int
    first_timestamp: str
    last_timestamp: str
    name: str = ""

    @property
    def patch(self) -> bool:
        """Whether an Event of this key exists already (by name): then it is patched, not created."""
        return bool(self.name)

    def patch_body(self, message: str) -> dict[str, object]:
        """The merge patch that counts this occurrence on the existing Event (client-go patches these three)."""
        return {"count": self.count, "lastTimestamp": self.last_timestamp, "message": message}


def observe(seen: Seen | None, now: str) -> Occurrence:
    """The next occurrence of a key last `seen` so (None: never): its count one more, its first time kept."""
    if seen is None:
        return Occurrence(count=1, first_timestamp=now, last_timestamp=now)
    return Occurrence(count=seen.count + 1, first_timestamp=seen.first_timestamp, last_timestamp=now, name=seen.name)


class Recent(Generic[_Key, _Value]):
    """A map that forgets its least recently used key past `size` entries (client-go's LRU of keys)."""

    def __init__(self, size: int = CACHE_ENTRIES) -> None:
        self.size = size
        self._entries: OrderedDict[_Key, _Value] = OrderedDict()

    def get(self, key: _Key) -> _Value | None:
        """The value, now the most recently used; None when unknown or forgotten."""
        value = self._entries.get(key)
        if value is not None:
            self._entries.move_to_end(key)
        return value

    def put(self, key: _Key, value: _Value) -> None:
        """Remember the value, forgetting the least recently used key past the size."""
        self._entries[key] = value
        self._entries.move_to_end(key)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)
