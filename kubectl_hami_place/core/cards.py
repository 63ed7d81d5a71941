"""A node's GPU cards as HAMi's device plugin registers them in `hami.io/node-nvidia-register`.

Two encodings exist and both are decoded the way HAMi v2.10 decodes them:

- JSON (v2.8+, `MarshalNodeDevices`): a list of objects with the Go `omitempty` keys `id`, `index`, `count`,
  `devmem`, `devcore`, `type`, `numa`, `mode`, `health`. A missing key is Go's zero value, so a missing `index`
  or `numa` is 0 and a missing `health` is *unhealthy*. Keys match case-insensitively and unknown keys are
  ignored, as Go's `encoding/json` does. HAMi's `DeviceInfo` (`pkg/device/devices.go`) knows four more keys,
  `migProfiles`, `migtemplate`, `devicevendor` and `custominfo`: the model does not use them, but one of the wrong
  JSON type fails HAMi's `json.Unmarshal` and with it the whole node, so it fails `parse_register` too.
- Legacy (up to v2.7, `DecodeNodeDevices`): cards separated by `:`, fields by `,`, either
  `UUID,count,devmem,devcore,type,numa,health` (index 0, mode hami-core) or the same plus `,index,mode`.

`parse_register` decodes both, for display; `node_cards`, the cards HAMi schedules on, refuses the legacy one:
HAMi v2.10's NVIDIA scheduler unmarshals the register as JSON only and reports such a node unregistered. So does
a `hami.io/node-nvidia-score` annotation (the cards' pair scores) that `DecodePairScores` cannot read
(`GetNodeDevices`, `pkg/device/nvidia/device.go`).
"""

from __future__ import annotations

import functools
import json
import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from kubectl_hami_place.core.errors import RegisterError, clip
from kubectl_hami_place.core.fields import go_decimal, go_text

REGISTER_ANNOTATION = "hami.io/node-nvidia-register"
PAIR_SCORE_ANNOTATION = "hami.io/node-nvidia-score"
NVIDIA = "NVIDIA"
DEFAULT_MODE = "hami-core"
MIG_MODE = "mig"

_INT32_MIN = -(2**31)
_INT32_MAX = 2**31 - 1
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_UINT_MAX = 2**64 - 1
_UINT32_MAX = 2**32 - 1
_GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_GO_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


@dataclass(frozen=True)
class Card:
    """One GPU card of a node as its register describes it (memory in MiB, cores in percent of a card)."""

    uuid: str
    index: int = 0
    count: int = 0
    devmem: int = 0
    devcore: int = 0
    type: str = ""
    numa: int = 0
    health: bool = False
    mode: str = ""

    @property
    def name(self) -> str:
        """The card's `gpu-N` reference, N being its register index."""
        return f"gpu-{self.index}"

    @property
    def is_mig(self) -> bool:
        """True for a card in MIG mode, which HAMi fits by its MIG profiles and placements (not modelled here)."""
        return self.mode == MIG_MODE

    @property
    def is_nvidia(self) -> bool:
        """True when HAMi's NVIDIA scheduler considers the card (its type contains "NVIDIA", any case)."""
        return NVIDIA in self.type.upper()

    def label(self) -> str:
        """`gpu-N (UUID)`: how messages name a card."""
        return f"{self.name} ({self.uuid})"


def parse_register(text: object) -> tuple[Card, ...]:
    """Decode a register annotation in either encoding (JSON when it starts with `[` or `{`), in register order."""
    if not isinstance(text, str):
        raise RegisterError(f"card register must be a string, got {type(text).__name__}")
    return _parse_register_text(text)


@functools.lru_cache(maxsize=16384)
def _parse_register_text(text: str) -> tuple[Card, ...]:
    """Memoised by the text: the webhook checks every open placement's node each pass, and registers rarely change
    (the cards are frozen, so a cached decode is shared safely; a failure is not cached and raises again)."""
    stripped = text.strip()
    if not stripped:
        raise RegisterError("card register is empty")
    cards = _parse_json(stripped) if stripped[0] in "[{" else _parse_legacy(stripped)
    if not cards:
        raise RegisterError("card register lists no cards")
    return cards


def encode_register(cards: tuple[Card, ...] | list[Card], legacy: bool = False) -> str:
    """Encode cards as HAMi writes them: compact JSON with omitempty, or the 9-field legacy string."""
    if legacy:
        return "".join(_encode_legacy_card(card) for card in cards)
    return json.dumps([_card_to_json(card) for card in cards], separators=(",", ":"))


def node_cards(node: Mapping[str, Any]) -> tuple[Card, ...]:
    """The cards HAMi v2.10 schedules on for a node object (JSON dict form): its JSON register annotation."""
    name = _node_name(node)
    metadata = node.get("metadata") if isinstance(node, Mapping) else None
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    text = annotations.get(REGISTER_ANNOTATION) if isinstance(annotations, Mapping) else None
    if text is None:
        raise RegisterError(f"node {name} has no {REGISTER_ANNOTATION} annotation: HAMi's device plugin is not on it")
    try:
        cards = parse_register(text)
    except RegisterError as err:
        raise RegisterError(f"node {name}: {err}") from None
    if is_legacy_register(text):
        raise RegisterError(
            f"node {name}: its {REGISTER_ANNOTATION} is in the legacy colon format of HAMi up to v2.7, which HAMi "
            "v2.10's scheduler does not read (it reports the node unregistered): update HAMi's device plugin there"
        )
    if isinstance(annotations, Mapping) and PAIR_SCORE_ANNOTATION in annotations:
        try:
            pair_scores(annotations[PAIR_SCORE_ANNOTATION])
        except RegisterError as err:
            raise RegisterError(
                f"node {name}: {err}, so HAMi reports the node unregistered: fix or remove the annotation"
            ) from None
    return cards


def pair_scores(text: object) -> dict[str, dict[str, int]]:
    """The cards' pair scores of a `hami.io/node-nvidia-score` text, by card UUID, as HAMi's DecodePairScores reads
    them (a JSON list of `{"uuid": ..., "score": {uuid: int}}`; the first entry of a UUID is the one HAMi uses)."""
    if not isinstance(text, str):
        raise RegisterError(f"{PAIR_SCORE_ANNOTATION} must be a string, got {type(text).__name__}")
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as err:
        raise RegisterError(f"{PAIR_SCORE_ANNOTATION} is not valid JSON: {_first_line(err)}") from None
    _check_go(data, _PAIR_SCORES, PAIR_SCORE_ANNOTATION)
    scores: dict[str, dict[str, int]] = {}
    for entry in data or []:
        fields = _fold(entry or {})
        uuid = go_text(fields.get("uuid") or "")
        if uuid not in scores:
            scores[uuid] = {go_text(card): score for card, score in (fields.get("score") or {}).items()}
    return scores


def is_legacy_register(text: object) -> bool:
    """True when a register is in the legacy colon encoding (not JSON), which HAMi v2.10 cannot schedule on."""
    return isinstance(text, str) and bool(text.strip()) and text.strip()[0] not in "[{"


def _node_name(node: object) -> str:
    """The node's name for messages, `<unnamed>` when it has none."""
    metadata = node.get("metadata") if isinstance(node, Mapping) else None
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    return name if isinstance(name, str) and name else "<unnamed>"


# JSON encoding -------------------------------------------------------------------------------------------

_JSON_FIELDS = ("id", "index", "count", "devmem", "devcore", "type", "numa", "mode", "health")
_PLAIN_KEYS = frozenset(_JSON_FIELDS)


def _parse_json(text: str) -> tuple[Card, ...]:
    """Decode the v2.8+ JSON register the way Go's json.Unmarshal fills []*DeviceInfo."""
    plain = _plain_register(text)
    if plain is not None:
        return plain
    try:
        data = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as err:
        raise RegisterError(f"card register is not valid JSON: {_first_line(err)}") from None
    if not isinstance(data, list):
        raise RegisterError("card register JSON must be a list of cards, got an object")  # "{..." decodes to one
    return tuple(_json_card(item, position) for position, item in enumerate(data))


def _plain_register(text: str) -> tuple[Card, ...] | None:
    """The cards of a register as HAMi writes it, read by orjson in C (5,000 registers were a third of status's
    view); None for anything else (bad JSON, NaN, integers past 64 bits, which orjson reads as floats, odd keys or
    types), which `_parse_json` decodes with the json module or refuses with the reason."""
    try:
        data = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    if type(data) is not list:
        return None
    cards = []
    for item in data:
        card = _plain_card(item) if type(item) is dict and item.keys() <= _PLAIN_KEYS else None
        if card is None:
            return None
        cards.append(card)
    return tuple(cards)


def _plain_card(item: dict[str, object]) -> Card | None:
    """The card of an object with lower-case keys whose values are of their Go type and in range, else None."""
    uuid = item.get("id", "")
    index = item.get("index", 0)
    count = item.get("count", 0)
    devmem = item.get("devmem", 0)
    devcore = item.get("devcore", 0)
    kind = item.get("type", "")
    numa = item.get("numa", 0)
    health = item.get("health", False)
    mode = item.get("mode", "")
    if not (
        type(uuid) is str
        and type(kind) is str
        and type(mode) is str
        and type(health) is bool
        and type(index) is int
        and type(count) is int
        and type(devmem) is int
        and type(devcore) is int
        and type(numa) is int
        and 0 <= index <= _UINT_MAX
        and _INT32_MIN <= count <= _INT32_MAX
        and _INT32_MIN <= devmem <= _INT32_MAX
        and _INT32_MIN <= devcore <= _INT32_MAX
        and _INT64_MIN <= numa <= _INT64_MAX
    ):
        return None
    # The model and mode words repeat on every card of a cluster: one string each, not one per card kept.
    return Card(uuid, index, count, devmem, devcore, sys.intern(kind), numa, health, sys.intern(mode))


def _reject_constant(name: str) -> object:
    """Refuse NaN and Infinity, which Go's JSON decoder does not accept."""
    raise ValueError(f"{name} is not JSON")


def _json_card(item: object, position: int) -> Card:
    """One card object; null entries and null values keep Go's zero values."""
    if item is None:
        raise RegisterError(f"card register entry {position} is null")
    if not isinstance(item, dict):
        raise RegisterError(f"card register entry {position} must be an object, got {_json_type(item)}")
    values: dict[str, object] = {}
    where = f"card register entry {position}"
    for key, value in item.items():
        field = key.lower()
        if field in _JSON_FIELDS and value is not None:
            values[field] = value
        elif field in _EXTRA_FIELDS:
            _check_go(value, _EXTRA_FIELDS[field], f"{where}: {key}")
    return Card(
        uuid=_json_str(values, "id", where),
        index=_json_int(values, "index", where, 0, _UINT_MAX),
        count=_json_int(values, "count", where, _INT32_MIN, _INT32_MAX),
        devmem=_json_int(values, "devmem", where, _INT32_MIN, _INT32_MAX),
        devcore=_json_int(values, "devcore", where, _INT32_MIN, _INT32_MAX),
        type=_json_str(values, "type", where),
        numa=_json_int(values, "numa", where, _INT64_MIN, _INT64_MAX),
        health=_json_bool(values, "health", where),
        mode=_json_str(values, "mode", where),
    )


# The Go types of the register keys the model does not use, and of the pair scores: ("str",), ("int", low, high),
# ("list", element), ("struct", {lower-case key: type}), ("object",) for map[string]any, ("map", value type).
_GoType = tuple[Any, ...]
_INT32: _GoType = ("int", _INT32_MIN, _INT32_MAX)
_UINT32: _GoType = ("int", 0, _UINT32_MAX)
_MIG_PROFILE: _GoType = (
    "struct",
    {
        "name": ("str",),
        "memorymb": _INT32,
        "core": _INT32,
        "slicecount": _UINT32,
        "placements": ("list", ("struct", {"start": _UINT32, "size": _UINT32})),
    },
)
_MIG_TEMPLATE: _GoType = ("struct", {"name": ("str",), "core": _INT32, "memory": _INT32, "count": _INT32})
_EXTRA_FIELDS: dict[str, _GoType] = {
    "migprofiles": ("list", _MIG_PROFILE),
    "migtemplate": ("list", ("list", _MIG_TEMPLATE)),
    "devicevendor": ("str",),
    "custominfo": ("object",),
}
_PAIR_SCORES: _GoType = (
    "list",
    ("struct", {"uuid": ("str",), "score": ("map", ("int", _INT64_MIN, _INT64_MAX))}),
)


def _check_go(value: object, kind: _GoType, where: str) -> None:
    """Refuse a decoded JSON value Go's json.Unmarshal cannot store in a field of that type (null always fits)."""
    if value is None:
        return
    name = kind[0]
    if name == "str":
        ok = isinstance(value, str)
    elif name == "int":
        ok = isinstance(value, int) and not isinstance(value, bool) and kind[1] <= value <= kind[2]
    elif isinstance(value, list):
        ok = name == "list"
        for position, item in enumerate(value if ok else []):
            _check_go(item, kind[1], f"{where}[{position}]")
    elif isinstance(value, dict):
        ok = name in ("struct", "map", "object")
        for key, item in value.items() if name in ("struct", "map") else ():
            inner = kind[1].get(key.lower()) if name == "struct" else kind[1]
            if inner is not None:
                _check_go(item, inner, f"{where}.{key}")
    else:
        ok = False
    if not ok:
        raise RegisterError(f"{where} cannot be {_json_type(value)} (Go reads it as {_go_name(kind)})")


def _go_name(kind: _GoType) -> str:
    """How a message names a Go type."""
    return {"str": "a string", "int": "an integer", "list": "a list", "map": "an object"}.get(kind[0], "an object")


def _fold(value: object) -> dict[str, Any]:
    """An object's keys in lower case, the last of equal keys winning and nulls keeping Go's zero values."""
    if not isinstance(value, dict):
        return {}
    return {key.lower(): item for key, item in value.items() if item is not None}


def _json_str(values: dict[str, object], key: str, where: str) -> str:
    """A string field, "" when absent."""
    value = values.get(key, "")
    if not isinstance(value, str):
        raise RegisterError(f"{where}: {key} must be a string, got {_json_type(value)}")
    return go_text(value)


def _json_int(values: dict[str, object], key: str, where: str, low: int, high: int) -> int:
    """An integer field within Go's type range, 0 when absent; floats such as 1.0 are refused like Go does."""
    value = values.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int):
        raise RegisterError(f"{where}: {key} must be an integer, got {_json_type(value)}")
    if not low <= value <= high:
        raise RegisterError(f"{where}: {key} {value} is out of range")
    return value


def _json_bool(values: dict[str, object], key: str, where: str) -> bool:
    """A boolean field, false when absent."""
    value = values.get(key, False)
    if not isinstance(value, bool):
        raise RegisterError(f"{where}: {key} must be true or false, got {_json_type(value)}")
    return value


def _card_to_json(card: Card) -> dict[str, object]:
    """A card as Go marshals it: every zero value omitted, keys in struct order."""
    full: dict[str, object] = {
        "id": card.uuid,
        "index": card.index,
        "count": card.count,
        "devmem": card.devmem,
        "devcore": card.devcore,
        "type": card.type,
        "numa": card.numa,
        "mode": card.mode,
        "health": card.health,
    }
    return {key: value for key, value in full.items() if value not in ("", 0, False)}


def _json_type(value: object) -> str:
    """The JSON name of a decoded value's type, for messages (nulls are skipped before it is asked)."""
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return f"the number {value}" if isinstance(value, int) or math.isfinite(value) else "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object"


# Legacy colon encoding -----------------------------------------------------------------------------------


def _parse_legacy(text: str) -> tuple[Card, ...]:
    """Decode the legacy `UUID,count,devmem,devcore,type,numa,health[,index,mode]:` string."""
    if ":" not in text:
        raise RegisterError("card register is neither JSON nor the legacy 'UUID,count,...:' string (no ':')")
    cards = []
    for position, segment in enumerate(text.split(":")):
        if segment == "":
            continue
        fields = segment.split(",")
        where = f"card register entry {position} {clip(segment, 60)!r}"
        if len(fields) not in (7, 9):
            raise RegisterError(f"{where} has {len(fields)} fields, expected 7 or 9")
        index, mode = 0, DEFAULT_MODE
        if len(fields) == 9:
            # Atoi, then a sign check: HAMi refuses an index beyond int64 that its JSON form (a uint) would take.
            index = _go_int(fields[7], "index", where, 0, _INT64_MAX)
            mode = fields[8]
        cards.append(
            Card(
                uuid=fields[0],
                index=index,
                count=_go_int(fields[1], "count", where, _INT32_MIN, _INT32_MAX),
                devmem=_go_int(fields[2], "devmem", where, _INT32_MIN, _INT32_MAX),
                devcore=_go_int(fields[3], "devcore", where, _INT32_MIN, _INT32_MAX),
                type=fields[4],
                numa=_go_int(fields[5], "numa", where, _INT64_MIN, _INT64_MAX),
                health=_go_bool(fields[6], where),
                mode=mode,
            )
        )
    return tuple(cards)


def _go_int(text: str, key: str, where: str, low: int, high: int) -> int:
    """Parse a decimal like Go's strconv.ParseInt/Atoi: optional sign, ASCII digits only, within range."""
    value = go_decimal(text)
    if value is None:
        raise RegisterError(f"{where}: {key} {text[:40]!r} is not an integer")
    if not low <= value <= high:
        raise RegisterError(f"{where}: {key} {text[:40]} is out of range")
    return value


def _go_bool(text: str, where: str) -> bool:
    """Parse a boolean like Go's strconv.ParseBool."""
    if text in _GO_TRUE:
        return True
    if text in _GO_FALSE:
        return False
    raise RegisterError(f"{where}: health {text!r} is not a boolean")


def _encode_legacy_card(card: Card) -> str:
    """One card in the 9-field legacy form, refusing values the separators would corrupt."""
    for key, value in (("uuid", card.uuid), ("type", card.type), ("mode", card.mode)):
        if "," in value or ":" in value:
            raise RegisterError(f"card {card.uuid!r}: {key} {value!r} cannot be written in the legacy encoding")
    health = "true" if card.health else "false"
    fields = (card.uuid, card.count, card.devmem, card.devcore, card.type, card.numa, health, card.index, card.mode)
    return ",".join(str(field) for field in fields) + ":"


def _first_line(err: Exception) -> str:
    """The first line of an exception's message."""
    return str(err).splitlines()[0] if str(err) else type(err).__name__
