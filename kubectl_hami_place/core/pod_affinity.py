"""Where a Pending pod's own required pod affinity and anti-affinity let it go, as kube-scheduler's InterPodAffinity
filter reads them: a node passes an anti-affinity term when no pod the term selects runs in the node's topology
domain, an affinity term when one does (or, for the first pod of a group, when no pod anywhere does and the pod
selects itself). The other direction, placed pods' anti-affinity against the pod, needs every pod's terms and is not
read here."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kubectl_hami_place.core.errors import SelectorError
from kubectl_hami_place.core.fields import as_mapping
from kubectl_hami_place.core.names import HOSTNAME_LABEL
from kubectl_hami_place.core.selectors import LabelSelector, matches, selector_from_dict

AFFINITY_REFUSALS = ("didn't match pod affinity rules", "didn't match pod anti-affinity rules")
"""kube-scheduler's words (ErrReasonAffinityRulesNotMatch, ErrReasonAntiAffinityRulesNotMatch) for a node the
pod's own terms refuse: what `kept_off_by_pods` reads once the pods its terms select are known."""


@dataclass(frozen=True)
class PodTerm:
    """One required term: anti-affinity or affinity, its topology key, the pods it selects by label (None: none, a
    null labelSelector) and their namespaces (None: every namespace, an empty namespaceSelector)."""

    anti: bool
    topology_key: str
    selector: LabelSelector | None
    namespaces: frozenset[str] | None

    def selects(self, namespace: str, labels: Mapping[str, str]) -> bool:
        """Whether the term selects a pod of `namespace` with these labels."""
        if self.selector is None or (self.namespaces is not None and namespace not in self.namespaces):
            return False
        return matches(self.selector, labels)

    @property
    def words(self) -> str:
        """The pods it selects, as kubectl's `-l` writes them."""
        return "no pod" if self.selector is None else str(self.selector) or "every pod"


@dataclass(frozen=True)
class PlacedPod:
    """A pod bound to a node, as a term reads it."""

    namespace: str
    name: str
    node: str
    labels: Mapping[str, str]


def placed_pods(pods: Iterable[Mapping[str, Any]]) -> tuple[PlacedPod, ...]:
    """The pods kube-scheduler counts for a term: bound to a node and not ended (its cache drops Succeeded and Failed
    pods; a terminating pod still counts)."""
    found = []
    for pod in pods:
        metadata, spec = as_mapping(pod.get("metadata")), as_mapping(pod.get("spec"))
        node = spec.get("nodeName")
        if not isinstance(node, str) or not node:
            continue
        if as_mapping(pod.get("status")).get("phase") in ("Succeeded", "Failed"):
            continue
        labels = {key: value for key, value in as_mapping(metadata.get("labels")).items() if isinstance(value, str)}
        found.append(PlacedPod(str(metadata.get("namespace", "")), str(metadata.get("name", "")), node, labels))
    return tuple(found)


def pod_terms(spec: Mapping[str, Any], namespace: str) -> tuple[PodTerm, ...] | None:
    """The pod's required pod affinity and anti-affinity terms; None when one cannot be read here (a namespaceSelector
    that names labels, whose namespaces' labels hami-place does not read, or a selector or term that does not parse):
    kube-scheduler's verdict from them then stays unread."""
    affinity = as_mapping(spec.get("affinity"))
    terms = []
    for kind, anti in (("podAffinity", False), ("podAntiAffinity", True)):
        listed = as_mapping(affinity.get(kind)).get("requiredDuringSchedulingIgnoredDuringExecution")
        for term in listed if isinstance(listed, list | tuple) else ():
            read = _term(term, namespace, anti)
            if read is None:
                return None
            terms.append(read)
    return tuple(terms)


def _term(term: object, namespace: str, anti: bool) -> PodTerm | None:
    """One term as read, or None when it cannot be."""
    if not isinstance(term, Mapping) or not isinstance(term.get("topologyKey"), str) or not term["topologyKey"]:
        return None
    namespace_selector = term.get("namespaceSelector")
    if namespace_selector is not None and namespace_selector != {}:
        return None
    listed = term.get("namespaces")
    names = [name for name in listed if isinstance(name, str)] if isinstance(listed, list | tuple) else []
    namespaces = None if namespace_selector is not None else frozenset(names or [namespace])
    selector = None
    if term.get("labelSelector") is not None:
        try:
            selector = selector_from_dict(term["labelSelector"])
        except SelectorError:
            return None
    return PodTerm(anti, term["topologyKey"], selector, namespaces)


def kept_off_by_pods(
    terms: Iterable[PodTerm],
    namespace: str,
    labels: Mapping[str, str],
    placed: Iterable[PlacedPod],
    node_labels: Mapping[str, Mapping[str, Any]],
) -> dict[str, str]:
    """Each node of `node_labels` the pod's terms keep it off (the pod of `namespace` with `labels`), and why in
    words; `placed` the pods bound to nodes (any superset of those the terms select)."""
    terms = tuple(terms)
    placed = tuple(placed)
    selected = [
        {
            (term.topology_key, value): pod
            for pod in placed
            if term.selects(pod.namespace, pod.labels)
            for value in (_value(node_labels, pod.node, term.topology_key),)
            if value is not None
        }
        for term in terms
    ]
    affinity = [(term, found) for term, found in zip(terms, selected, strict=True) if not term.anti]
    first_of_group = not any(found for _, found in affinity) and all(
        term.selects(namespace, labels) for term, _ in affinity
    )
    kept: dict[str, str] = {}
    for node in node_labels:
        why = _kept_off(node, zip(terms, selected, strict=True), node_labels, first_of_group=first_of_group)
        if why:
            kept[node] = why
    return kept


def _kept_off(
    node: str,
    judged: Iterable[tuple[PodTerm, Mapping[tuple[str, str], PlacedPod]]],
    node_labels: Mapping[str, Mapping[str, Any]],
    *,
    first_of_group: bool,
) -> str:
    """Why the terms keep the pod off `node` ("" when they do not), in `pod_terms`' order: the affinity terms first,
    as kube-scheduler judges them."""
    for term, found in judged:
        value = _value(node_labels, node, term.topology_key)
        if term.anti:
            pod = found.get((term.topology_key, value)) if value is not None else None
            if pod is not None:
                where = "on the node" if term.topology_key == HOSTNAME_LABEL else f"in its {term.topology_key}={value}"
                return f"the pod's anti-affinity ({term.words}): {pod.namespace}/{pod.name} runs {where}"
        elif value is None:
            return f"the pod's affinity ({term.words}): the node has no {term.topology_key} label"
        elif (term.topology_key, value) not in found and not first_of_group:
            where = "on the node" if term.topology_key == HOSTNAME_LABEL else f"in its {term.topology_key}={value}"
            return f"the pod's affinity ({term.words}): no such pod runs {where}"
    return ""


def _value(node_labels: Mapping[str, Mapping[str, Any]], node: str, key: str) -> str | None:
    """The node's value of a topology label; None when the node has none (or is not known)."""
    value = as_mapping(node_labels.get(node)).get(key)
    return value if isinstance(value, str) else None
