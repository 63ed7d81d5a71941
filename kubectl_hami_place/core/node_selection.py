"""Where kube-scheduler lets a pod go, as its node filters read the pod and the nodes: the nodeSelector and required
node affinity (NodeAffinity) and the taints that keep pods off (TaintToleration). The planner and the pin check both
read them; the planner adds what moves change (`planner.objects`)."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubectl_hami_place.core.errors import SelectorError
from kubectl_hami_place.core.fields import as_mapping, go_decimal
from kubectl_hami_place.core.names import HOSTNAME_LABEL
from kubectl_hami_place.core.selectors import OPERATORS, Requirement, selector_from_dict

KEEPS_OFF = ("NoSchedule", "NoExecute")
"""The taint effects for which kube-scheduler's TaintToleration filter refuses a pod (PreferNoSchedule only scores)."""


@dataclass(frozen=True)
class NodeMarks:
    """What a pod's node selection reads of each node, by node name: its labels, and the taints that keep pods off it
    (`KEEPS_OFF`; a node without any is not in `taints`)."""

    labels: Mapping[str, Mapping[str, Any]]
    taints: Mapping[str, tuple[Mapping[str, Any], ...]] = field(default_factory=dict)


def node_marks(nodes: Iterable[Mapping[str, Any]]) -> NodeMarks:
    """Each node's labels and keeping-off taints, by node name."""
    labels: dict[str, Mapping[str, Any]] = {}
    taints: dict[str, tuple[Mapping[str, Any], ...]] = {}
    for node in nodes:
        metadata = as_mapping(node.get("metadata"))
        name = str(metadata.get("name", ""))
        labels[name] = as_mapping(metadata.get("labels"))
        listed = as_mapping(node.get("spec")).get("taints")
        kept = tuple(
            taint
            for taint in (listed if isinstance(listed, list | tuple) else ())
            if isinstance(taint, Mapping) and taint.get("effect") in KEEPS_OFF
        )
        if kept:
            taints[name] = kept
    return NodeMarks(labels, taints)


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """Kubernetes' `ToleratesTaint`: the effect matches (or the toleration names none), the key matches (or the
    toleration names none), and the value is equal, or any under `Exists`; an operator it does not know tolerates
    nothing."""
    effect, key = toleration.get("effect") or "", toleration.get("key") or ""
    if (effect and effect != taint.get("effect")) or (key and key != taint.get("key")):
        return False
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return True
    return operator == "Equal" and (toleration.get("value") or "") == (taint.get("value") or "")


def taint_words(taint: Mapping[str, Any]) -> str:
    """A taint as kubectl writes it: `key=value:Effect`, `key:Effect` without a value."""
    value = taint.get("value") or ""
    return f"{taint.get('key', '')}{'=' + str(value) if value else ''}:{taint.get('effect', '')}"


def reachable(
    selector: Mapping[str, Any], terms: list[Mapping[str, Any]] | None, tolerations: object, marks: NodeMarks
) -> tuple[frozenset[str] | None, dict[str, str]]:
    """The nodes a pod of this nodeSelector, required nodeSelectorTerms (None: no requirement) and tolerations may run
    on (None: any), and the taint in words that keeps it off each node its tolerations exclude."""
    allowed = _allowed_nodes(selector, terms, marks.labels) if selector or terms is not None else None
    untolerated = _untolerated(tolerations, marks.taints)
    if untolerated:
        allowed = (frozenset(marks.labels) if allowed is None else allowed).difference(untolerated)
    return allowed, untolerated


def kept_off(spec: Mapping[str, Any], node: Mapping[str, Any], placed_on: str = "") -> str:
    """Why kube-scheduler would keep a pod of this spec off `node` (its node selection, the node's taints), in words;
    "" when neither does. `placed_on`: as `required_terms` reads it."""
    marks = node_marks([node])
    [name] = marks.labels
    selector, terms = as_mapping(spec.get("nodeSelector")), required_terms(spec, placed_on)
    allowed, untolerated = reachable(selector, terms, spec.get("tolerations"), marks)
    if name in untolerated:
        return f"node {name}'s taint {untolerated[name]} is not tolerated"
    if allowed is not None and name not in allowed:
        return f"the node selection excludes node {name}"
    return ""


def required_terms(spec: Mapping[str, Any], placed_on: str = "") -> list[Mapping[str, Any]] | None:
    """The pod's required nodeSelectorTerms; None when it requires no node affinity. For a pod placed on `placed_on`,
    without the hostname pin our webhook merged for that node (it pins that pod only, not its replacement) and
    without the terms that pin alone made up."""
    affinity = as_mapping(as_mapping(spec.get("affinity")).get("nodeAffinity"))
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if not isinstance(required, Mapping):
        return None
    terms = [term for term in _listed(required.get("nodeSelectorTerms")) if isinstance(term, Mapping)]
    if not placed_on:
        return terms
    pin = {"key": HOSTNAME_LABEL, "operator": "In", "values": [placed_on]}
    kept: list[Mapping[str, Any]] = []
    for term in terms:
        expressions = [e for e in _listed(term.get("matchExpressions")) if e != pin]
        if expressions or term.get("matchFields"):
            kept.append({**term, "matchExpressions": expressions})
    return kept or None


def _untolerated(tolerations: object, taints: Mapping[str, tuple[Mapping[str, Any], ...]]) -> dict[str, str]:
    """Each node with a taint none of the tolerations tolerates, and that taint in words."""
    held = [t for t in tolerations if isinstance(t, Mapping)] if isinstance(tolerations, list | tuple) else []
    result = {}
    for node, kept in taints.items():
        refused = next((taint for taint in kept if not any(tolerates(t, taint) for t in held)), None)
        if refused is not None:
            result[node] = taint_words(refused)
    return result


def _allowed_nodes(
    selector: Mapping[str, Any], terms: list[Mapping[str, Any]] | None, labels: Mapping[str, Mapping[str, Any]]
) -> frozenset[str]:
    """The nodes whose labels carry the nodeSelector and match the terms (None: no affinity)."""
    return frozenset(
        name
        for name, have in labels.items()
        if all(have.get(k) == v for k, v in selector.items()) and (terms is None or node_allows(terms, name, have))
    )


def node_allows(terms: Iterable[Mapping[str, Any]], name: str, labels: Mapping[str, Any]) -> bool:
    """Kubernetes' required node affinity: any term matches (an empty term matches no node), a term when all its
    matchExpressions (on labels) and matchFields (on metadata.name) hold."""
    for term in terms:
        expressions = [e for e in _listed(term.get("matchExpressions")) if isinstance(e, Mapping)]
        fields = [e for e in _listed(term.get("matchFields")) if isinstance(e, Mapping)]
        if not expressions and not fields:
            continue
        by_label = all(_parses(e) and _holds(e, labels) for e in expressions)
        by_field = all(_holds(e, {"metadata.name": name}) for e in fields)
        if by_label and by_field:
            return True
    return False


def _parses(requirement: Mapping[str, Any]) -> bool:
    """Whether kube-scheduler's labels package takes an In, NotIn, Exists or DoesNotExist requirement (its key and
    values in label syntax): one it cannot parse makes its term match no node. The API server checks the values from
    1.25 only, so on 1.24 `NotIn ["a b"]` is stored, and was read as matching every node."""
    operator = requirement.get("operator")
    if operator not in OPERATORS:
        return True
    values = tuple(str(value) for value in _listed(requirement.get("values")))
    return _label_syntax(str(requirement.get("key", "")), str(operator), values)


@functools.lru_cache(maxsize=4096)
def _label_syntax(key: str, operator: str, values: tuple[str, ...]) -> bool:
    """`_parses`, once per requirement: it is asked for every node."""
    try:
        selector_from_dict({"matchExpressions": [{"key": key, "operator": operator, "values": list(values)}]})
    except SelectorError:
        return False
    return True


def _holds(requirement: Mapping[str, Any], have: Mapping[str, Any]) -> bool:
    """One node selector requirement (In, NotIn, Exists, DoesNotExist, Gt, Lt) against a node's labels or fields."""
    key = str(requirement.get("key", ""))
    present, value = key in have, have.get(key)
    operator = requirement.get("operator")
    values = [str(v) for v in _listed(requirement.get("values"))]
    if operator in OPERATORS:
        return Requirement(key, str(operator), tuple(values)).matches({key: str(value)} if present else {})
    if operator in ("Gt", "Lt") and present and len(values) == 1:
        number, bound = _int64(str(value)), _int64(values[0])
        if number is None or bound is None:
            return False
        return number > bound if operator == "Gt" else number < bound
    return False


def _int64(text: str) -> int | None:
    """The number as kube-scheduler reads a Gt or Lt one (strconv.ParseInt base 10, 64 bits), None when it reads none:
    then the term matches no node. Python's int() also takes `1_0`, ` 5`, Arabic-Indic digits and any size."""
    number = go_decimal(text)
    return number if number is not None and -(2**63) <= number < 2**63 else None


def _listed(value: object) -> list[Any] | tuple[Any, ...]:
    """A list field as given, empty when it is none (a review sent to the server straight may hold anything)."""
    return value if isinstance(value, list | tuple) else []
