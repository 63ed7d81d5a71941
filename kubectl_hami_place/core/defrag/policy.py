"""The DefragPolicy document an operator writes once: parsed strictly, every mistake named by its field path.

```yaml
apiVersion: scheduling.hami.placement.com/v1alpha1
kind: DefragPolicy
mode: dry-run                 # off | dry-run | on
namespaces: {include: ["*"], exclude: []}          # glob patterns; kube-system and the server's are always out
rescue: {enabled: true, pendingFor: 60s, reserveFor: 60s}     # reserveFor 0s: the room is not kept
keepRoom: {enabled: false, interval: 5m, wholeFreeCards: {count: 0, type: ""}, maxStrandedShare: 0.2, window: "",
           timeZone: UTC}   # window 22:00-06:00: the hours of timeZone (an IANA name) keep-room may plan in
budgets: {movesPerRun: 4, movesPerHour: 12, movesPerNode: 2, movesPerNamespace: 4, cooldown: 1h}
maxMovesPerPlan: 8
moveJobPods: false            # a Job's pods stay where they are (see runs._hold)
priorityThreshold: null       # {value: N} or {name: CLASS}: pods of priority N (CLASS's value) or more never move
minReplicas: 0                # a pod whose controller has fewer running pods than this never moves
labelSelector: null           # {matchLabels, matchExpressions}: only the pods it selects may move
minPodAge: 0s                 # a pod placed on its card less than this long ago never moves
nodeSelector: ""              # kubectl -l syntax: only the nodes it selects are planned on, off and onto
ignorePodsWithoutPDB: false   # true: only pods a PodDisruptionBudget covers may move
evictLocalStoragePods: true   # false: pods with an emptyDir or hostPath volume never move
ignorePvcPods: false          # true: pods that mount a PersistentVolumeClaim never move
```

`movesPerNode` counts the moves off one node and `movesPerNamespace` the moves of one namespace's pods, both over
the same rolling hour as `movesPerHour`. `reserveFor` keeps the cards a rescue freed for the rescued pod that long
(`core.reservation`), at most 10m. Durations are `90s`, `5m`, `1h30m` or a number of seconds. A `priorityThreshold`
by name is parsed into `priority_class`, its value left None: the server reads the PriorityClass and sets it
(`with_threshold`), and until it has, a run moves nothing (`runs._hold`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from fnmatch import fnmatchcase
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import yaml

from kubectl_hami_place.core.errors import ModelError, clip
from kubectl_hami_place.core.k8s_names import SUBDOMAIN_MAX, is_object_name
from kubectl_hami_place.core.names import GROUP
from kubectl_hami_place.core.reservation import MAX_RESERVE
from kubectl_hami_place.core.selectors import LabelSelector, SelectorError, parse_selector_string, selector_from_dict
from kubectl_hami_place.core.yaml_doc import load_yaml

POLICY_API_VERSION = f"{GROUP}/v1alpha1"
POLICY_KIND = "DefragPolicy"
ALWAYS_OUT = ("kube-system",)
# Longest keepRoom.wholeFreeCards.type: a card model's name as HAMi registers it is some 30 characters.
CARD_TYPE_MAX = 128
_TOP_FIELDS = (
    "apiVersion",
    "kind",
    "mode",
    "namespaces",
    "rescue",
    "keepRoom",
    "budgets",
    "maxMovesPerPlan",
    "moveJobPods",
    "priorityThreshold",
    "minReplicas",
    "labelSelector",
    "minPodAge",
    "nodeSelector",
    "ignorePodsWithoutPDB",
    "evictLocalStoragePods",
    "ignorePvcPods",
)

_WINDOW = re.compile(r"([01][0-9]|2[0-3]):([0-5][0-9])-([01][0-9]|2[0-3]):([0-5][0-9])")
_DURATION = re.compile(r"(?:([0-9]+)h)?(?:([0-9]+)m)?(?:([0-9]+)s)?")
# The longest duration a policy may give: beyond it the clock arithmetic of budgets and cooldowns overflows, and
# no wait of the controller's needs more than a month.
MAX_DURATION = timedelta(days=30)
_DURATION_DIGITS = len(str(int(MAX_DURATION.total_seconds())))
"""More digits than this in one part of a duration (leading zeros aside) is past MAX_DURATION whatever the unit."""
_PATTERN = re.compile(r"(?:[a-z0-9*?-]|\[!?[a-z0-9-]+\])+")
PRIORITY_RANGE = (-(2**31), 2**31 - 1)
"""A pod's `spec.priority` is an int32; a threshold outside it would hold every pod or none."""
MAX_COUNT = 2**53 - 1
"""The largest whole number a float holds exactly: the budgets are exported as metrics, and float() of a count
past a float's range raised at every look."""


def _shown(value: object) -> str:
    """The value as the mistake's line quotes it, cut short: the ConfigMap may hold a megabyte in one field."""
    return clip(repr(value))


class PolicyError(ModelError):
    """A policy the controller cannot act on; the message is one line naming the field and what to write instead."""


class Mode(StrEnum):
    """What the controller does with a decision: nothing, say what it would do, or carry it out."""

    off = "off"
    dry_run = "dry-run"
    on = "on"


@dataclass(frozen=True)
class Namespaces:
    """Which namespaces' pods may be moved or rescued; `always_out` wins over `include`."""

    include: tuple[str, ...] = ("*",)
    exclude: tuple[str, ...] = ()
    always_out: tuple[str, ...] = ALWAYS_OUT

    def allows(self, namespace: str) -> bool:
        """Whether a pod of this namespace may be moved or rescued."""
        if namespace in self.always_out:
            return False
        if any(fnmatchcase(namespace, pattern) for pattern in self.exclude):
            return False
        return any(fnmatchcase(namespace, pattern) for pattern in self.include)


@dataclass(frozen=True)
class Rescue:
    """Rescue a GPU pod Pending for at least `pending_for` on HAMi's fit reasons; keep the room its moves freed for it
    for `reserve_for` (zero: not kept)."""

    enabled: bool = True
    pending_for: timedelta = timedelta(seconds=60)
    reserve_for: timedelta = timedelta(seconds=60)


@dataclass(frozen=True)
class WholeFreeCards:
    """Keep at least `count` whole free cards (of a type containing `type`, any type when empty)."""

    count: int = 0
    type: str = ""


@dataclass(frozen=True)
class KeepRoom:
    """Every `interval`, plan toward the room goals when they are not met; `max_stranded_share` None: no such goal;
    `window` the minutes of the day in `time_zone` (an IANA name) from which and until which it may plan (`22:00-06:00`
    wraps midnight), None: any time."""

    enabled: bool = False
    interval: timedelta = timedelta(minutes=5)
    whole_free_cards: WholeFreeCards = field(default_factory=WholeFreeCards)
    max_stranded_share: float | None = 0.2
    window: tuple[int, int] | None = None
    time_zone: str = "UTC"

    def closed_for(self, now: datetime) -> timedelta:
        """How long until the window opens (0 while it is open, or without one): keep-room moves pods nobody waits
        for, so an operator keeps them to the hours the cluster is quiet, which are local hours.

        The opening is the first start on the local clock, today's or tomorrow's, on either pass of an hour the clocks
        go back over: a window that closed on the first pass opens again on the second. A start the clocks skip is
        looked at again an hour after it would have been, and that night skipped."""
        if self.window is None:
            return timedelta(0)
        start, end = self.window
        zone = ZoneInfo(self.time_zone)
        local = now.astimezone(zone)
        minute = local.hour * 60 + local.minute
        open_now = start <= minute < end if start < end else minute >= start or minute < end
        if open_now:
            return timedelta(0)
        today = local.replace(hour=start // 60, minute=start % 60, second=0, microsecond=0, fold=0)
        again = today.replace(fold=1).astimezone(UTC)
        openings = [today.astimezone(UTC), (today + timedelta(days=1)).astimezone(UTC)]
        if again.astimezone(zone).fold:
            openings.append(again)
        return min(at for at in openings if at > now) - now

    def describe_window(self) -> str:
        """`between 22:00 and 06:00 UTC` (or the window's time zone), "" without a window."""
        if self.window is None:
            return ""
        start, end = self.window
        return f"between {start // 60:02d}:{start % 60:02d} and {end // 60:02d}:{end % 60:02d} {self.time_zone}"


@dataclass(frozen=True)
class Budgets:
    """How many moves may be made: per run, per rolling hour, off one node and of one namespace's pods in that hour;
    and how long a moved pod (and its replacement) is left alone."""

    moves_per_run: int = 4
    moves_per_hour: int = 12
    moves_per_node: int = 2
    moves_per_namespace: int = 4
    cooldown: timedelta = timedelta(hours=1)


@dataclass(frozen=True)
class DefragPolicy:
    """The whole policy; the defaults are a fresh install's (dry-run: show what it would do, move nothing)."""

    mode: Mode = Mode.dry_run
    namespaces: Namespaces = field(default_factory=Namespaces)
    rescue: Rescue = field(default_factory=Rescue)
    keep_room: KeepRoom = field(default_factory=KeepRoom)
    budgets: Budgets = field(default_factory=Budgets)
    max_moves_per_plan: int = 8
    move_job_pods: bool = False
    priority_threshold: int | None = None
    priority_class: str = ""
    min_replicas: int = 0
    label_selector: LabelSelector | None = None
    min_pod_age: timedelta = timedelta(0)
    node_selector: LabelSelector | None = None
    ignore_pods_without_budget: bool = False
    evict_local_storage: bool = True
    ignore_claim_pods: bool = False


DEFAULT_POLICY = DefragPolicy()


def parse_policy(text: str, server_namespace: str = "", also_out: Iterable[str] = ()) -> DefragPolicy:
    """The policy in `text` (YAML or JSON), or PolicyError naming the first wrong field; `server_namespace` and the
    namespaces `also_out` (the server's --exclude-namespace) are out whatever it says."""
    document = _load(text)
    _known(document, "", _TOP_FIELDS)
    if document.get("apiVersion") != POLICY_API_VERSION:
        raise PolicyError(
            f"apiVersion: {_shown(document.get('apiVersion'))} is not supported; write {POLICY_API_VERSION}"
        )
    if document.get("kind") != POLICY_KIND:
        raise PolicyError(f"kind: {_shown(document.get('kind'))} is not a policy kind; write {POLICY_KIND}")
    threshold, priority_class = _priority(document.get("priorityThreshold"))
    return DefragPolicy(
        mode=parse_mode(document.get("mode", DEFAULT_POLICY.mode.value), "mode"),
        namespaces=_namespaces(document.get("namespaces", {}), (server_namespace, *also_out)),
        rescue=_rescue(document.get("rescue", {})),
        keep_room=_keep_room(document.get("keepRoom", {})),
        budgets=_budgets(document.get("budgets", {})),
        max_moves_per_plan=_count(document, "maxMovesPerPlan", DEFAULT_POLICY.max_moves_per_plan, "", least=1),
        move_job_pods=_bool(document, "moveJobPods", DEFAULT_POLICY.move_job_pods, ""),
        priority_threshold=threshold,
        priority_class=priority_class,
        min_replicas=_count(document, "minReplicas", DEFAULT_POLICY.min_replicas, ""),
        label_selector=_selector(document.get("labelSelector"), "labelSelector", selector_from_dict),
        min_pod_age=_min_pod_age(document.get("minPodAge")),
        node_selector=_selector(document.get("nodeSelector"), "nodeSelector", parse_selector_string),
        ignore_pods_without_budget=_bool(
            document, "ignorePodsWithoutPDB", DEFAULT_POLICY.ignore_pods_without_budget, ""
        ),
        evict_local_storage=_bool(document, "evictLocalStoragePods", DEFAULT_POLICY.evict_local_storage, ""),
        ignore_claim_pods=_bool(document, "ignorePvcPods", DEFAULT_POLICY.ignore_claim_pods, ""),
    )


def parse_mode(value: object, path: str = "mode") -> Mode:
    """A mode; YAML 1.1 reads a bare `off`/`on` as a boolean, which means the same here."""
    if value is False:
        return Mode.off
    if value is True:
        return Mode.on
    try:
        return Mode(str(value))
    except ValueError:
        raise PolicyError(f"{path}: {_shown(value)} is not a mode; write off, dry-run or on") from None


def with_mode(text: str, mode: Mode | str) -> str:
    """The document with only its mode changed; the rest is kept as written, even fields a parse would refuse."""
    document = _load(text)
    document["mode"] = parse_mode(mode).value
    return yaml.safe_dump(document, sort_keys=False)


def read_mode(text: str) -> Mode:
    """The mode written in the document, read alone (pause and resume flip it whatever else the policy says wrong);
    PolicyError naming what keeps it from being read, the document or its mode."""
    return parse_mode(_load(text).get("mode", DEFAULT_POLICY.mode.value))


def mode_of(text: str) -> Mode | None:
    """The mode written in the document, or None when the document or its mode cannot be read."""
    try:
        return read_mode(text)
    except PolicyError:
        return None


def parse_duration(value: object, path: str) -> timedelta:
    """`90s`, `5m`, `1h30m` or a number of seconds, never negative, never longer than MAX_DURATION."""
    if isinstance(value, bool):
        raise PolicyError(f"{path}: {_shown(value)} is not a duration; write e.g. 60s, 5m or 1h")
    if isinstance(value, int | float):
        if math.isnan(value):
            raise PolicyError(f"{path}: {_shown(value)} is not a duration; write e.g. 60s, 5m or 1h")
        if value < 0:
            raise PolicyError(f"{path}: {_shown(value)} is negative; write a duration of 0s or more, e.g. 60s")
        seconds: int | float = value
    else:
        text = str(value).strip()
        match = _DURATION.fullmatch(text)
        if not text or match is None:
            hint = "; durations are never negative" if text.startswith("-") else ""
            raise PolicyError(f"{path}: {_shown(value)} is not a duration{hint}; write e.g. 60s, 5m, 1h or 1h30m")
        parts = [(part or "").lstrip("0") or "0" for part in match.groups()]
        if any(len(part) > _DURATION_DIGITS for part in parts):
            seconds = math.inf  # past MAX_DURATION, its digits not read: int() refuses more than 4,300
        else:
            hours, minutes, seconds_part = map(int, parts)
            seconds = hours * 3600 + minutes * 60 + seconds_part
    if seconds > MAX_DURATION.total_seconds():
        longest = format_duration(MAX_DURATION)
        shown = repr(clip(value, 24) if isinstance(value, str) else value)
        raise PolicyError(f"{path}: {shown} is longer than {longest}; write a duration of at most {longest}")
    return timedelta(seconds=seconds)


def format_duration(value: timedelta) -> str:
    """The shortest `1h30m`-style form of a duration (whole seconds)."""
    total = int(value.total_seconds())
    hours, rest = divmod(total, 3600)
    minutes, seconds = divmod(rest, 60)
    text = (f"{hours}h" if hours else "") + (f"{minutes}m" if minutes else "") + (f"{seconds}s" if seconds else "")
    return text or "0s"


def _load(text: str) -> dict[str, Any]:
    """The document's top-level mapping."""
    try:
        document = load_yaml(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or "unreadable"
        raise PolicyError(f"policy: not YAML or JSON{where} ({problem}); fix the document's syntax") from None
    except ValueError:
        raise PolicyError("policy: a number with more digits than can be read; write a shorter number") from None
    except RecursionError:
        raise PolicyError("policy: nested deeper than a DefragPolicy ever is; fix the document's structure") from None
    if not isinstance(document, dict):
        raise PolicyError(f"policy: the document is not a mapping; write a {POLICY_KIND} with apiVersion and kind")
    return document


def _section(value: object, path: str, fields: tuple[str, ...]) -> Mapping[str, Any]:
    """A nested mapping with only known fields (null: all defaults)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise PolicyError(f"{path}: expected a mapping with {', '.join(fields)}; got {type(value).__name__}")
    _known(value, path, fields)
    return value


def _known(value: Mapping[str, Any], path: str, fields: tuple[str, ...]) -> None:
    """Refuse a field the document version does not have."""
    for key in value:
        if key not in fields:
            # The key goes into a log line and an Event on the ConfigMap: one that is no plain name is shown quoted.
            shown = key if isinstance(key, str) and key.isidentifier() and len(key) <= 60 else repr(str(key)[:60])
            raise PolicyError(f"{_field(path, shown)}: unknown field; the fields here are {', '.join(fields)}")


def _field(path: str, key: str) -> str:
    """A field's path as a message names it: `budgets.cooldown`, or `moveJobPods` at the top."""
    return f"{path}.{key}" if path else key


def _bool(section: Mapping[str, Any], key: str, default: bool, path: str) -> bool:
    """A true/false field."""
    value = section.get(key, default)
    if not isinstance(value, bool):
        raise PolicyError(f"{_field(path, key)}: {_shown(value)} is not true or false; write true or false")
    return value


def _count(section: Mapping[str, Any], key: str, default: int, path: str, least: int = 0) -> int:
    """A whole number field of at least `least`."""
    value = section.get(key, default)
    where = _field(path, key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise PolicyError(f"{where}: {_shown(value)} is not a whole number; write a number such as {default}")
    if value < least:
        word = "negative" if value < 0 else f"below {least}"
        raise PolicyError(f"{where}: {_shown(value)} is {word}; write {least} or more")
    if value > MAX_COUNT:
        raise PolicyError(f"{where}: {_shown(value)} is more than {MAX_COUNT}; write a number such as {default}")
    return value


def _namespaces(value: object, out: Iterable[str]) -> Namespaces:
    """Include and exclude glob patterns; kube-system and `out` always out."""
    section = _section(value, "namespaces", ("include", "exclude"))
    include = _patterns(section.get("include", ["*"]), "namespaces.include")
    exclude = _patterns(section.get("exclude", []), "namespaces.exclude")
    return Namespaces(
        include=include, exclude=exclude, always_out=tuple(dict.fromkeys((*ALWAYS_OUT, *filter(None, out))))
    )


def _patterns(value: object, path: str) -> tuple[str, ...]:
    """A list of namespace glob patterns: DNS-label characters with `*`, `?` and `[a-z]` classes."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise PolicyError(f"{path}: expected a list of namespace patterns, e.g. [team-*]; got {type(value).__name__}")
    patterns = []
    for position, pattern in enumerate(value):
        if not isinstance(pattern, str) or len(pattern) > 63 or not _PATTERN.fullmatch(pattern):
            raise PolicyError(
                f"{path}[{position}]: {_shown(pattern)} is not a namespace pattern; write a namespace name "
                "(lowercase letters, digits, -) with * ? or [a-z] wildcards, e.g. team-*"
            )
        patterns.append(pattern)
    return tuple(patterns)


def _rescue(value: object) -> Rescue:
    """The rescue trigger."""
    section = _section(value, "rescue", ("enabled", "pendingFor", "reserveFor"))
    default = Rescue()
    reserve_for = parse_duration(section.get("reserveFor", default.reserve_for.total_seconds()), "rescue.reserveFor")
    if reserve_for > MAX_RESERVE:
        raise PolicyError(
            f"rescue.reserveFor: {format_duration(reserve_for)} is longer than {format_duration(MAX_RESERVE)}, "
            "the longest a room is kept; write 0s (off) to 10m, e.g. 60s"
        )
    return Rescue(
        enabled=_bool(section, "enabled", default.enabled, "rescue"),
        pending_for=parse_duration(section.get("pendingFor", default.pending_for.total_seconds()), "rescue.pendingFor"),
        reserve_for=reserve_for,
    )


def _keep_room(value: object) -> KeepRoom:
    """The keep-room trigger and its goals."""
    section = _section(
        value, "keepRoom", ("enabled", "interval", "wholeFreeCards", "maxStrandedShare", "window", "timeZone")
    )
    default = KeepRoom()
    interval = parse_duration(section.get("interval", default.interval.total_seconds()), "keepRoom.interval")
    if interval.total_seconds() < 1:
        raise PolicyError("keepRoom.interval: 0s would plan without pause; write 1s or more, e.g. 5m")
    cards = _section(section.get("wholeFreeCards"), "keepRoom.wholeFreeCards", ("count", "type"))
    card_type = cards.get("type", "")
    if card_type is None:
        card_type = ""
    if not isinstance(card_type, str):
        raise PolicyError(
            f"keepRoom.wholeFreeCards.type: {_shown(card_type)} is not text; write part of a card type, e.g. A100"
        )
    if len(card_type) > CARD_TYPE_MAX or not card_type.isprintable():
        # it is quoted in the Events on the ConfigMap and in the run's record on the Lease
        raise PolicyError(
            f"keepRoom.wholeFreeCards.type: {_shown(card_type)} is no card type; write part of one in at most "
            f"{CARD_TYPE_MAX} printable characters, e.g. A100"
        )
    share = section.get("maxStrandedShare", default.max_stranded_share)
    if share is not None and (isinstance(share, bool) or not isinstance(share, int | float) or not 0 <= share <= 1):
        raise PolicyError(
            f"keepRoom.maxStrandedShare: {_shown(share)} is not a share; write a number from 0 to 1 (e.g. 0.2), or null"
        )
    return KeepRoom(
        enabled=_bool(section, "enabled", default.enabled, "keepRoom"),
        interval=interval,
        whole_free_cards=WholeFreeCards(
            count=_count(cards, "count", 0, "keepRoom.wholeFreeCards"), type=card_type.strip()
        ),
        max_stranded_share=None if share is None else float(share),
        window=_window(section.get("window")),
        time_zone=_time_zone(section.get("timeZone")),
    )


def _window(value: object) -> tuple[int, int] | None:
    """`22:00-06:00`: the hours of `timeZone` keep-room may plan in (wrapping midnight when the end comes first); ""
    or null: any time."""
    if value is None or value == "":
        return None
    found = _WINDOW.fullmatch(value) if isinstance(value, str) else None
    if found is None:
        raise PolicyError(
            f"keepRoom.window: {_shown(value)} is not a window; write START-END in hours of keepRoom.timeZone, "
            'e.g. 22:00-06:00, or "" for any time'
        )
    hours, minutes, end_hours, end_minutes = map(int, found.groups())
    start, end = hours * 60 + minutes, end_hours * 60 + end_minutes
    if start == end:
        raise PolicyError(
            f"keepRoom.window: {value} starts where it ends; write START-END in hours of keepRoom.timeZone, "
            'e.g. 22:00-06:00, or "" for any time'
        )
    return start, end


def _time_zone(value: object) -> str:
    """The IANA time zone keepRoom.window's hours are in; "" or null: UTC. A name the zone database does not know is
    refused here, so a server that could not place the window in time never runs keep-room on it (ZoneInfo takes
    only normalized relative names: no path the policy writes leaves the zone folders)."""
    if value is None or value == "":
        return "UTC"
    if isinstance(value, str):
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a folder of zones (Europe), a name too long
            pass
        else:
            return value
    raise PolicyError(
        f"keepRoom.timeZone: {_shown(value)} is not a time zone; write an IANA name, e.g. Europe/Berlin, or UTC"
    )


def _min_pod_age(value: object) -> timedelta:
    """How long a pod stays on its card before it may move (the descheduler's `minPodAge`); null is none, as unset."""
    return timedelta(0) if value is None else parse_duration(value, "minPodAge")


def with_threshold(policy: DefragPolicy, value: object) -> DefragPolicy:
    """The policy with its PriorityClass's value read (the server reads it by `priority_class`), checked as a
    written value is."""
    return replace(policy, priority_threshold=_priority_value(value))


CLASS_INSTEAD = "or write value: N (its VALUE in kubectl get priorityclass) instead"
"""The other way to write a priorityThreshold whose PriorityClass cannot be read."""


def class_not_found(name: str, again: str = "") -> str:
    """Why a policy whose priorityThreshold names a missing PriorityClass moves nothing, and what to do (`again`: when
    the server reads it again): the server's words and `defrag status`'s."""
    when = f" ({again})" if again else ""
    return f"priorityThreshold.name: PriorityClass {name} not found{when}; create it, {CLASS_INSTEAD}"


def _priority(value: object) -> tuple[int | None, str]:
    """The priority from which pods never move, as the descheduler writes it: `priorityThreshold: {value: N}` is
    (N, ""), `{name: CLASS}` (None, CLASS), whose value the server reads; neither (None, ""). A name the API could not
    store is refused here, before it reaches an API path."""
    if isinstance(value, int) and not isinstance(value, bool):
        raise PolicyError(f"priorityThreshold: {value} goes under value; write priorityThreshold: {{value: {value}}}")
    section = _section(value, "priorityThreshold", ("value", "name"))
    name, threshold = section.get("name"), section.get("value")
    if name is None:
        return (None if threshold is None else _priority_value(threshold)), ""
    if threshold is not None:
        raise PolicyError("priorityThreshold: both name and value given; write one of them, as the descheduler asks")
    if not is_object_name(name):
        raise PolicyError(
            f"priorityThreshold.name: {_shown(name)} is not a PriorityClass's name; write one as kubectl get "
            f"priorityclass lists it (lowercase letters, digits, '-' and '.', at most {SUBDOMAIN_MAX} characters)"
        )
    return None, name


def _priority_value(threshold: object) -> int:
    """A priority threshold within a pod priority's range."""
    low, high = PRIORITY_RANGE
    if isinstance(threshold, bool) or not isinstance(threshold, int):
        raise PolicyError(
            f"priorityThreshold.value: {_shown(threshold)} is not a whole number; write a PriorityClass's value, "
            "e.g. 100000"
        )
    if not low <= threshold <= high:
        raise PolicyError(
            f"priorityThreshold.value: {_shown(threshold)} is out of a pod priority's range; write {low} to {high}, "
            "e.g. a PriorityClass's value such as 100000"
        )
    return threshold


def _selector(value: object, path: str, parse: Callable[[object], LabelSelector]) -> LabelSelector | None:
    """A selector as the descheduler writes it there (`labelSelector`: the pods that may move, an object;
    `nodeSelector`: the nodes worked on, kubectl's `-l` syntax); None when absent or empty: all of them."""
    if value is None:
        return None
    try:
        selector = parse(value)
    except SelectorError as error:
        raise PolicyError(f"{path}: {error}") from None
    return None if selector.empty else selector


def _budgets(value: object) -> Budgets:
    """The move budgets and the cooldown."""
    fields = ("movesPerRun", "movesPerHour", "movesPerNode", "movesPerNamespace", "cooldown")
    section = _section(value, "budgets", fields)
    default = Budgets()
    return Budgets(
        moves_per_run=_count(section, "movesPerRun", default.moves_per_run, "budgets"),
        moves_per_hour=_count(section, "movesPerHour", default.moves_per_hour, "budgets"),
        moves_per_node=_count(section, "movesPerNode", default.moves_per_node, "budgets"),
        moves_per_namespace=_count(section, "movesPerNamespace", default.moves_per_namespace, "budgets"),
        cooldown=parse_duration(section.get("cooldown", default.cooldown.total_seconds()), "budgets.cooldown"),
    )
