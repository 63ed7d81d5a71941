"""Kubernetes label selectors: parsing (the `matchLabels`/`matchExpressions` dict and kubectl's `-l` string),
matching against a pod's labels, and a conservative overlap test between two placements' selectors.

Keys and values are validated as the API server validates them: a key is an optional DNS-subdomain prefix
(at most 253 characters) and `/`, then a name of at most 63 characters of `[A-Za-z0-9._-]` that starts and ends
alphanumeric; a value is empty or such a name.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kubectl_hami_place.core.errors import SelectorError, clip
from kubectl_hami_place.core.fields import as_mapping
from kubectl_hami_place.core.k8s_names import is_object_name

OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")

_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_WORD = re.compile(r"[^\s,()=!<>]+")


@dataclass(frozen=True)
class Requirement:
    """One `matchExpressions` entry: key, operator (In, NotIn, Exists, DoesNotExist) and its values (sorted)."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether a label set satisfies this requirement."""
        present = self.key in labels
        if self.operator == "In":
            return present and labels[self.key] in self.values
        if self.operator == "NotIn":
            return not present or labels[self.key] not in self.values
        if self.operator == "Exists":
            return present
        return not present

    def __str__(self) -> str:
        """The requirement in kubectl `-l` syntax."""
        if self.operator == "Exists":
            return self.key
        if self.operator == "DoesNotExist":
            return f"!{self.key}"
        word = "in" if self.operator == "In" else "notin"
        return f"{self.key} {word} ({','.join(self.values)})"


@dataclass(frozen=True)
class LabelSelector:
    """A label selector: `match_labels` as sorted (key, value) pairs and `match_expressions`, all ANDed."""

    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[Requirement, ...] = ()

    @property
    def empty(self) -> bool:
        """True for the selector that matches every pod."""
        return not self.match_labels and not self.match_expressions

    @property
    def labels(self) -> dict[str, str]:
        """`matchLabels` as a dict."""
        return dict(self.match_labels)

    def requirements(self) -> tuple[Requirement, ...]:
        """Every constraint as a requirement (`k=v` becomes `k In (v)`)."""
        return tuple(Requirement(k, "In", (v,)) for k, v in self.match_labels) + self.match_expressions

    def to_dict(self) -> dict[str, Any]:
        """The selector in the API's dict form, empty parts omitted."""
        result: dict[str, Any] = {}
        if self.match_labels:
            result["matchLabels"] = dict(self.match_labels)
        if self.match_expressions:
            result["matchExpressions"] = [
                {"key": r.key, "operator": r.operator, **({"values": list(r.values)} if r.values else {})}
                for r in self.match_expressions
            ]
        return result

    def __str__(self) -> str:
        """The selector in kubectl `-l` syntax (what `parse_selector_string` reads back)."""
        parts = [f"{k}={v}" for k, v in self.match_labels] + [str(r) for r in self.match_expressions]
        return ",".join(parts)


def selector_from_dict(data: object, require_nonempty: bool = False) -> LabelSelector:
    """Parse a `{matchLabels, matchExpressions}` dict, validating keys, values and operators."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise SelectorError(f"a label selector must be an object, got {type(data).__name__}")
    unknown = sorted(str(key) for key in data if key not in ("matchLabels", "matchExpressions"))
    if unknown:
        raise SelectorError(f"label selector has unknown field {unknown[0]!r}; use matchLabels and matchExpressions")
    raw_labels = _default(data.get("matchLabels"), {})
    raw_expressions = _default(data.get("matchExpressions"), [])
    if not isinstance(raw_labels, Mapping):
        raise SelectorError("matchLabels must be an object of label: value")
    if not isinstance(raw_expressions, list):
        raise SelectorError("matchExpressions must be a list")
    labels = []
    for key, value in raw_labels.items():
        if not isinstance(value, str):
            raise SelectorError(f"matchLabels {key!r}: the value must be a string, got {type(value).__name__}")
        labels.append((_check_key(key), _check_value(value, key)))
    expressions = tuple(_requirement_from_dict(item, position) for position, item in enumerate(raw_expressions))
    selector = LabelSelector(match_labels=tuple(sorted(labels)), match_expressions=expressions)
    return require_nonempty_selector(selector) if require_nonempty else selector


def budget_selector(budget: Mapping[str, Any]) -> LabelSelector | None:
    """The pods a PodDisruptionBudget protects, as policy/v1 reads its selector since Kubernetes 1.29 and late 1.27
    and 1.28 patches (kubernetes#119732): None without one (no pod), `{}` every pod of its namespace;
    SelectorError when it is malformed."""
    written = as_mapping(budget.get("spec")).get("selector")
    return None if written is None else selector_from_dict(written)


def require_nonempty_selector(selector: LabelSelector, what: str = "pod") -> LabelSelector:
    """The selector itself, or SelectorError when it is empty: it would match every `what` (pod, node, ...)."""
    if selector.empty:
        raise SelectorError(f"the {what} selector is empty and would match every {what}; give at least one label")
    return selector


def parse_selector_string(text: object, require_nonempty: bool = False) -> LabelSelector:
    """Parse kubectl's `-l` syntax: `a=x,b!=y,c in (p,q),d notin (r),e,!f` (`==` works as `=`)."""
    if not isinstance(text, str):
        raise SelectorError(f"a label selector must be a string, got {type(text).__name__}")
    labels: dict[str, str] = {}
    expressions: list[Requirement] = []
    for part in _split_top_level(text):
        _parse_part(part, labels, expressions)
    selector = LabelSelector(match_labels=tuple(sorted(labels.items())), match_expressions=tuple(expressions))
    return require_nonempty_selector(selector) if require_nonempty else selector


def matches(selector: LabelSelector, labels: Mapping[str, str] | None) -> bool:
    """Whether a label set (a pod's `metadata.labels`) satisfies the selector; the empty selector matches all."""
    labels = labels or {}
    return all(requirement.matches(labels) for requirement in selector.requirements())


def may_overlap(a: LabelSelector, b: LabelSelector) -> bool:
    """False only when no label set can satisfy both selectors (e.g. `app=x` and `app=y`); True otherwise."""
    return _satisfiable((*a.requirements(), *b.requirements()))


def _satisfiable(requirements: Iterable[Requirement]) -> bool:
    """Whether some label set satisfies every requirement: checked key by key, which is exact for ANDed terms."""
    by_key: dict[str, list[Requirement]] = {}
    for requirement in requirements:
        by_key.setdefault(requirement.key, []).append(requirement)
    for key_requirements in by_key.values():
        operators = {r.operator for r in key_requirements}
        must_exist = bool(operators & {"In", "Exists"})
        if must_exist and "DoesNotExist" in operators:
            return False
        allowed: set[str] | None = None
        for r in key_requirements:
            if r.operator == "In":
                allowed = set(r.values) if allowed is None else allowed & set(r.values)
        if allowed is not None:
            excluded = {v for r in key_requirements if r.operator == "NotIn" for v in r.values}
            if not allowed - excluded:
                return False
    return True


def _requirement_from_dict(item: object, position: int) -> Requirement:
    """One `matchExpressions` entry, with the API server's rules on operators and values."""
    where = f"matchExpressions[{position}]"
    if not isinstance(item, Mapping):
        raise SelectorError(f"{where} must be an object with key, operator and values")
    key = item.get("key")
    operator = item.get("operator")
    values = _default(item.get("values"), [])
    if not isinstance(key, str):
        raise SelectorError(f"{where}: key must be a string")
    if operator not in OPERATORS:
        raise SelectorError(f"{where}: operator {clip(repr(operator))} is not one of {', '.join(OPERATORS)}")
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise SelectorError(f"{where}: values must be a list of strings")
    return _requirement(_check_key(key), str(operator), values)


def _requirement(key: str, operator: str, values: Iterable[str]) -> Requirement:
    """A validated requirement with its values sorted and deduplicated."""
    values = tuple(sorted({_check_value(v, key) for v in values}))
    if operator in ("In", "NotIn") and not values:
        raise SelectorError(f"label selector: {key} {operator} needs at least one value")
    if operator in ("Exists", "DoesNotExist") and values:
        raise SelectorError(f"label selector: {key} {operator} takes no values")
    return Requirement(key, operator, values)


def _check_key(key: object) -> str:
    """A label key as the API server accepts it."""
    if not isinstance(key, str) or not key:
        raise SelectorError("label selector: a label key must be a non-empty string")
    prefix, slash, name = key.rpartition("/")
    if slash and not is_object_name(prefix):
        raise SelectorError(f"label key {clip(key)!r}: the prefix must be a lowercase DNS subdomain")
    if len(name) > 63 or not _NAME.fullmatch(name):
        raise SelectorError(
            f"label key {clip(key)!r}: the name must be 1-63 characters of A-Z a-z 0-9 . _ -, "
            "starting and ending with a letter or digit"
        )
    return key


def _check_value(value: str, key: str) -> str:
    """A label value as the API server accepts it (empty allowed)."""
    if value and (len(value) > 63 or not _NAME.fullmatch(value)):
        raise SelectorError(
            f"label {clip(key)!r}: value {clip(value)!r} must be at most 63 characters of A-Z a-z 0-9 . _ -, "
            "starting and ending with a letter or digit"
        )
    return value


def _split_top_level(text: str) -> list[str]:
    """Split on commas outside parentheses; refuse unbalanced parentheses and empty terms."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise SelectorError(f"label selector {clip(text)!r} has an unmatched ')'")
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth != 0:
        raise SelectorError(f"label selector {clip(text)!r} has an unclosed '('")
    parts.append("".join(current))
    if len(parts) == 1 and not parts[0].strip():
        return []
    for part in parts:
        if not part.strip():
            raise SelectorError(f"label selector {clip(text)!r} has an empty term between commas")
    return [part.strip() for part in parts]


_SET_TERM = re.compile(r"(?P<key>\S+?)\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)")


def _parse_part(part: str, labels: dict[str, str], expressions: list[Requirement]) -> None:
    """One comma-separated term of a `-l` selector, added to labels or expressions."""
    set_term = _SET_TERM.fullmatch(part)
    if set_term and set_term.group("op") in ("in", "notin"):
        values = [v.strip() for v in set_term.group("values").split(",")]
        operator = "In" if set_term.group("op") == "in" else "NotIn"
        expressions.append(_requirement(_check_key(set_term.group("key")), operator, values))
        return
    for token, negated in (("!=", True), ("==", False), ("=", False)):
        key, found, value = part.partition(token)
        if found:
            key, value = key.strip(), value.strip()
            if negated:
                expressions.append(_requirement(_check_key(key), "NotIn", [value]))
            else:
                _add_label(labels, _check_key(key), _check_value(value, key))
            return
    if part.startswith("!"):
        expressions.append(_requirement(_check_key(part[1:].strip()), "DoesNotExist", []))
        return
    if _WORD.fullmatch(part):
        expressions.append(_requirement(_check_key(part), "Exists", []))
        return
    raise SelectorError(
        f"label selector term {clip(part)!r} is not key, !key, key=value, key!=value, key in (a,b) or key notin (a,b)"
    )


def _add_label(labels: dict[str, str], key: str, value: str) -> None:
    """Record `key=value`, refusing a second, different value for the same key (it would match nothing)."""
    if key in labels and labels[key] != value:
        raise SelectorError(f"label selector asks {key}={labels[key]} and {key}={value}; it would match no pod")
    labels[key] = value


def _default(value: object, default: object) -> object:
    """The value, or `default` when it is absent (null); a wrong type is left for the caller to refuse."""
    return default if value is None else value
