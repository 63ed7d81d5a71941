"""Room a rescue freed, kept for its Pending pod until a deadline: the annotation, and what is written from it.

The controller writes `ROOM_RESERVED_ANNOTATION` on the rescued Pending pod (the plan's target cards, the deadline and
the pod's own `nvidia.com/use-gpuuuid`, if any) and sets that `use-gpuuuid` to the target cards, so that HAMi gives the
pod those cards only. Admission, on every replica, adds the cards of every unexpired reservation of another pod to a
new GPU pod's `nvidia.com/nouse-gpuuuid`: no pod admitted while the room is kept takes it (pods admitted before were
not changed and may). When the deadline passes, the pod gets its own `use-gpuuuid` back. The annotation is on a pod
anyone who may edit the pod can write, so what is read back is checked: at most MAX_CARDS card ids of a plain shape,
a deadline at most MAX_RESERVE ahead of the reader's clock, and a seal (HMAC-SHA256 over the pod, its UID and the
value, with the `RoomKey` every replica shares) that only a server can make; anything else is no reservation, so no
tenant keeps cards from others by writing the annotation, nor carries a sealed one to another pod.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Any

from kubectl_hami_place.core.fields import as_mapping, comma_list, rfc3339
from kubectl_hami_place.core.k8s_names import is_namespaced_name
from kubectl_hami_place.core.names import NOUSE_GPUUUID_ANNOTATION, ROOM_RESERVED_ANNOTATION, USE_GPUUUID_ANNOTATION

MAX_RESERVE = timedelta(minutes=10)
"""The longest a room is kept (the policy's `rescue.reserveFor` at most); a deadline further ahead is not believed."""
MAX_CARDS = 16
_CARD_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
_USE_MAX = 4096
_MAC = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Reservation:
    """Cards kept for a Pending pod (`namespace/name`) until `until`; `use` is the pod's own `use-gpuuuid` before
    (None: it had none)."""

    pod: str
    cards: tuple[str, ...]
    until: datetime
    use: str | None = None

    def holds(self, now: datetime) -> bool:
        """Whether the room is still kept at `now` (a deadline more than MAX_RESERVE ahead is not believed)."""
        return now < self.until <= now + MAX_RESERVE


@dataclass(frozen=True)
class RoomKey:
    """The secret the replicas share (`--room-key-file`): a reservation's seal, and a move's (`core.defrag.seal`), is
    made and checked with it. `shared` is False for a key a server made for itself: other replicas cannot check
    what it seals."""

    secret: bytes = field(repr=False)
    shared: bool = True

    def seal(self, pod: str, uid: str, document: Mapping[str, Any]) -> str:
        """The seal of a reservation `document` written on the pod `pod` (`namespace/name`) of UID `uid`."""
        return self.sign({"pod": pod, "uid": uid, **document})

    def sign(self, document: Mapping[str, Any]) -> str:
        """HMAC-SHA256 of the document as compact JSON with sorted keys, in hex."""
        message = json.dumps(document, sort_keys=True, separators=(",", ":"))
        return hmac.new(self.secret, message.encode(), hashlib.sha256).hexdigest()


def is_card_id(value: object) -> bool:
    """A card id as HAMi's registers write them (`GPU-...`): letters, digits, `.`, `_`, `:`, `-`, no comma."""
    return isinstance(value, str) and _CARD_ID.fullmatch(value) is not None


def reservation_value(
    cards: Iterable[str], until: datetime, use: str | None, *, key: RoomKey, pod: str, uid: str
) -> str:
    """The annotation's value on the pod `pod` of UID `uid`: compact JSON with the cards, the deadline (UTC, whole
    seconds), the pod's own `use-gpuuuid` when it had one, and their seal."""
    document: dict[str, Any] = {"cards": list(cards), "until": rfc3339(until)}
    if use is not None:
        document["use"] = use
    document["seal"] = key.seal(pod, uid, document)
    return json.dumps(document, separators=(",", ":"))


def parse_reservation(pod: str, uid: str, value: object, key: RoomKey | None) -> Reservation | None:
    """The reservation an annotation's value on the pod `pod` of UID `uid` names, None when it is not one a server
    wrote there (malformed, or its seal is not this key's for this pod); `key` None reads one of any seal's shape,
    for `release` alone."""
    if not isinstance(value, str) or len(value) > _USE_MAX + 4096:
        return None
    try:
        document = json.loads(value)
    except (ValueError, RecursionError):
        return None
    if not isinstance(document, dict) or set(document) - {"cards", "until", "use", "seal"}:
        return None
    seal = document.pop("seal", None)
    if (
        not isinstance(seal, str)
        or not _MAC.fullmatch(seal)
        or (key is not None and not hmac.compare_digest(seal, key.seal(pod, uid, document)))
    ):
        return None
    cards, until, use = document.get("cards"), _time(document.get("until")), document.get("use")
    if not isinstance(cards, list) or not 0 < len(cards) <= MAX_CARDS or not all(map(is_card_id, cards)):
        return None
    if until is None or (use is not None and (not isinstance(use, str) or len(use) > _USE_MAX)):
        return None
    return Reservation(pod, tuple(dict.fromkeys(cards)), until, use)


def reservation_of(pod: Mapping[str, Any], key: RoomKey) -> Reservation | None:
    """The reservation a stored pod carries while it waits unscheduled (Pending, no node, valid names), else None."""
    return _sealed_reservation(pod, key) if _waiting(pod) else None


def _waiting(pod: Mapping[str, Any]) -> bool:
    """Whether a stored pod waits unscheduled: Pending, no node, not being deleted."""
    metadata, spec, status = as_mapping(pod.get("metadata")), as_mapping(pod.get("spec")), as_mapping(pod.get("status"))
    return status.get("phase") == "Pending" and not spec.get("nodeName") and not metadata.get("deletionTimestamp")


def _sealed_reservation(pod: Mapping[str, Any], key: RoomKey) -> Reservation | None:
    """The reservation on a stored pod with valid names, when `key` sealed it for that pod, whatever its phase."""
    metadata = as_mapping(pod.get("metadata"))
    value = as_mapping(metadata.get("annotations")).get(ROOM_RESERVED_ANNOTATION)
    namespace, name = metadata.get("namespace"), metadata.get("name")
    if value is None or not is_namespaced_name(namespace, name):
        return None
    return parse_reservation(f"{namespace}/{name}", str(metadata.get("uid") or ""), value, key)


class LeftRoom(Enum):
    """What the controller does with a room annotation on a pod that no rescue of its own follows."""

    leave = "leave"
    """Not a room its key sealed, on a pod in a namespace its policy leaves out: not its to touch."""
    settle = "settle"
    """The pod is scheduled: only the annotation goes (`settled`)."""
    keep = "keep"
    """Its own room, still kept: looked at again at the deadline."""
    release = "release"
    """Past its deadline, or not a room its key sealed: the pod gets its own card choice back (`release`)."""


def left_room(
    pod: Mapping[str, Any], key: RoomKey, now: datetime, *, in_policy: bool
) -> tuple[LeftRoom, datetime | None]:
    """What to do with the room annotation on a stored pod no rescue of the controller follows (an earlier leader's,
    or anyone's), and the deadline of one still kept. The controller writes no pod of a namespace its policy leaves
    out (`in_policy` False) but to undo a room its key sealed."""
    found = _sealed_reservation(pod, key)
    if found is None and not in_policy:
        return LeftRoom.leave, None
    if as_mapping(pod.get("spec")).get("nodeName"):
        return LeftRoom.settle, None
    if found is not None and _waiting(pod) and found.holds(now):
        return LeftRoom.keep, found.until
    return LeftRoom.release, None


def reserve(
    annotations: Mapping[str, str], pod: str, cards: Iterable[str], until: datetime, *, uid: str, key: RoomKey
) -> tuple[dict[str, str], str]:
    """The pod's annotations keeping `cards` for it until `until`, and "" ; or ({}, why not).

    A pod that already names its cards keeps its own choice: the plan's cards must all be in its `use-gpuuuid` (the
    planner plans only cards it may use, so they are, unless the pod changed since) and none in its
    `nouse-gpuuuid`; then `use-gpuuuid` is narrowed to them, the intersection, and the pod's own list recorded to
    be given back."""
    cards = tuple(dict.fromkeys(cards))
    if not cards or len(cards) > MAX_CARDS or not all(map(is_card_id, cards)):
        return {}, "the plan names no card to keep"
    own = annotations.get(USE_GPUUUID_ANNOTATION)
    earlier = parse_reservation(pod, uid, annotations.get(ROOM_RESERVED_ANNOTATION), key)
    if earlier is not None and own == ",".join(earlier.cards):
        own = earlier.use
    if own is not None and len(own) > _USE_MAX:
        return {}, f"the pod's own {USE_GPUUUID_ANNOTATION} is too long to record; its choice is kept"
    allowed = comma_list(own or "")
    if allowed and not set(cards) <= set(allowed):
        return {}, f"the pod's own {USE_GPUUUID_ANNOTATION} excludes a planned card; its choice is kept"
    if set(cards) & set(comma_list(annotations.get(NOUSE_GPUUUID_ANNOTATION, ""))):
        return {}, f"the pod's own {NOUSE_GPUUUID_ANNOTATION} excludes a planned card; its choice is kept"
    wanted = dict(annotations)
    wanted[ROOM_RESERVED_ANNOTATION] = reservation_value(cards, until, own, key=key, pod=pod, uid=uid)
    wanted[USE_GPUUUID_ANNOTATION] = ",".join(cards)
    return wanted, ""


def release(annotations: Mapping[str, str], pod: str, uid: str) -> dict[str, str]:
    """The pod's annotations without its reservation: its own `use-gpuuuid` given back (removed when it had none),
    unless someone changed it since the reservation was written; a malformed reservation is only removed.

    Its seal is not checked: one another key sealed (a replica restarted without `--room-key-file`, a rotated key)
    is given back too. What it restores is the pod's own choice, which whoever may write its annotations could
    write anyway; only removing it would leave the pod narrowed to the kept cards for good."""
    wanted = dict(annotations)
    value = wanted.pop(ROOM_RESERVED_ANNOTATION, None)
    found = parse_reservation(pod, uid, value, None)
    if found is not None and wanted.get(USE_GPUUUID_ANNOTATION) == ",".join(found.cards):
        if found.use is None:
            del wanted[USE_GPUUUID_ANNOTATION]
        else:
            wanted[USE_GPUUUID_ANNOTATION] = found.use
    return wanted


def settled(annotations: Mapping[str, str]) -> dict[str, str]:
    """A scheduled pod's annotations without its reservation; `use-gpuuuid` stays, naming the cards it holds."""
    return {key: value for key, value in annotations.items() if key != ROOM_RESERVED_ANNOTATION}


def barring(reservations: Iterable[Reservation], now: datetime, pod: str) -> list[Reservation]:
    """The reservations that keep cards at `now` for pods other than `pod` (`namespace/name`): `pod` may not use
    their cards."""
    return [found for found in reservations if found.pod != pod and found.holds(now)]


def barred_cards(reservations: Iterable[Reservation], now: datetime, pod: str) -> tuple[str, ...]:
    """The cards kept at `now` for pods other than `pod` (`namespace/name`), in order."""
    return tuple(sorted({card for found in barring(reservations, now, pod) for card in found.cards}))


def kept_off(nouse: str | None, cards: Iterable[str]) -> str:
    """A `nouse-gpuuuid` value with `cards` added to the pod's own list (its entries first, as written)."""
    own = comma_list(nouse or "")
    return ",".join(dict.fromkeys([*own, *cards]))


def _time(value: object) -> datetime | None:
    """An RFC 3339 UTC time as `rfc3339` writes it, else None."""
    if not isinstance(value, str):
        return None
    try:
        return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError:
        return None
