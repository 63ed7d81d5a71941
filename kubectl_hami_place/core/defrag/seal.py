"""The seal on a move's placement: the controller's proof that it made the move.

Anyone who may create placements in a namespace can label one with a run. Counted as a move, it would spend the
hourly budget of every namespace, rest a pod, and make a new leader evict or follow a pod; so the controller seals
what it writes (the placement's namespace and name, its run, the pod it evicts with that pod's UID, the node it
leaves, the node and cards it pins the replacement to, and when it sealed) with the key the replicas share
(`RoomKey`), and the budgets, a new leader's resume and the following of an open move take only placements whose
seal checks. The seal's time must be within SEAL_WINDOW of the placement's creation, so a sealed placement deleted
and created again later is not a new move. A key a server made for itself (no `--room-key-file`) seals, but checks
nothing: another replica could not tell its moves apart from forged ones and would forget them, so every run
placement counts then, as before seals. The cards' names a move's placement carries for `defrag history`
(`defrag-from-cards`, `defrag-to-cards`) are outside the seal: a replica of the version before them checks this
version's seals in a rolling upgrade, and the names only say where a move went (whoever may edit a placement in its
namespace may as well delete it).
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from kubectl_hami_place.core.errors import ModelError
from kubectl_hami_place.core.fields import as_mapping, rfc3339
from kubectl_hami_place.core.names import (
    DEFRAG_FROM_NODE_ANNOTATION,
    DEFRAG_POD_ANNOTATION,
    DEFRAG_POD_UID_ANNOTATION,
    DEFRAG_RUN_LABEL,
    DEFRAG_SEAL_ANNOTATION,
)
from kubectl_hami_place.core.placement import DefragRefusal, status_from_object, time_or_none
from kubectl_hami_place.core.reservation import MAX_CARDS, RoomKey, is_card_id

_SEAL = re.compile(r"(?P<at>[0-9]{1,11}):(?P<mac>[0-9a-f]{64})")
_MAC = re.compile(r"[0-9a-f]{64}")
SEAL_WINDOW = timedelta(minutes=10)
"""How far the seal's time may be from the placement's creation (clocks of the leader and the API server apart)."""


def seal_move(obj: Mapping[str, Any], key: RoomKey, now: datetime) -> dict[str, Any]:
    """The move's placement `obj`, about to be created, with the seal annotation made at `now`."""
    metadata = dict(as_mapping(obj.get("metadata")))
    at = int(now.timestamp())
    annotations = dict(as_mapping(metadata.get("annotations")))
    annotations[DEFRAG_SEAL_ANNOTATION] = f"{at}:{key.sign(_document(obj, at))}"
    return {**obj, "metadata": {**metadata, "annotations": annotations}}


def move_sealed(obj: Mapping[str, Any], key: RoomKey | None) -> bool:
    """Whether a run's placement, as stored, is one the controller made: its seal checks with `key` and was made
    within SEAL_WINDOW of its creation. Always True without a key to check with (None, or one not shared)."""
    if key is None or not key.shared:
        return True
    metadata = as_mapping(obj.get("metadata"))
    value = as_mapping(metadata.get("annotations")).get(DEFRAG_SEAL_ANNOTATION)
    found = _SEAL.fullmatch(value) if isinstance(value, str) else None
    created = time_or_none(metadata.get("creationTimestamp"))
    if found is None or created is None:
        return False
    at = int(found["at"])
    if abs(created - datetime.fromtimestamp(at, UTC)) > SEAL_WINDOW:
        return False
    return hmac.compare_digest(found["mac"], key.sign(_document(obj, at)))


def _document(obj: Mapping[str, Any], at: int) -> dict[str, Any]:
    """What a move's seal covers: who made the move and for which pod, and where it pins the replacement (the cards
    a given-up move leaves out of plans are read from there)."""
    metadata, spec = as_mapping(obj.get("metadata")), as_mapping(obj.get("spec"))
    labels, annotations = as_mapping(metadata.get("labels")), as_mapping(metadata.get("annotations"))
    return {
        "move": {
            "namespace": str(metadata.get("namespace", "")),
            "name": str(metadata.get("name", "")),
            "run": str(labels.get(DEFRAG_RUN_LABEL, "")),
            "pod": str(annotations.get(DEFRAG_POD_ANNOTATION, "")),
            "uid": str(annotations.get(DEFRAG_POD_UID_ANNOTATION, "")),
            "from": str(annotations.get(DEFRAG_FROM_NODE_ANNOTATION, "")),
            "node": spec.get("nodeName"),
            "cards": spec.get("gpuDevices"),
            "at": at,
        }
    }


def refusal(obj: Mapping[str, Any], cards: Iterable[str], until: datetime, key: RoomKey) -> DefragRefusal:
    """The `status.defragRefused` of the given-up move's placement `obj`: the cards HAMi refused its replacement on
    and until when plans leave them out, sealed over the placement and its move's own seal, so that it holds on this
    placement alone."""
    refused = tuple(sorted(set(cards)))
    return DefragRefusal(refused, until, key.sign(_refusal_document(obj, refused, until)))


def refused_by(obj: Mapping[str, Any], key: RoomKey | None, now: datetime, cooldown: timedelta) -> dict[str, datetime]:
    """The cards a sealed move's placement status says HAMi refused, with until when plans leave them out (at most
    `cooldown` from `now`), those past their time dropped; {} for a placement no run sealed, or a refusal that is not
    of card ids or whose seal does not check (without a key that checks, as `move_sealed`, any)."""
    if not move_sealed(obj, key):
        return {}
    try:
        found = status_from_object(obj.get("status")).defrag_refused
    except ModelError:
        return {}
    if found is None or not 0 < len(found.cards) <= MAX_CARDS or not all(map(is_card_id, found.cards)):
        return {}
    wanted = _refusal_document(obj, found.cards, found.until)
    if (
        key is not None
        and key.shared
        and not (_MAC.fullmatch(found.seal) and hmac.compare_digest(found.seal, key.sign(wanted)))
    ):
        return {}
    held = min(found.until, now + cooldown)
    return dict.fromkeys(found.cards, held) if held > now else {}


def _refusal_document(obj: Mapping[str, Any], cards: tuple[str, ...], until: datetime) -> dict[str, Any]:
    """What a refusal's seal covers: the placement, its move's seal (a placement made again under the name is
    another move), the cards and the time."""
    metadata = as_mapping(obj.get("metadata"))
    annotations = as_mapping(metadata.get("annotations"))
    return {
        "refused": {
            "namespace": str(metadata.get("namespace", "")),
            "name": str(metadata.get("name", "")),
            "move": str(annotations.get(DEFRAG_SEAL_ANNOTATION, "")),
            "cards": list(cards),
            "until": rfc3339(until),
        }
    }
