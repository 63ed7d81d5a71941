"""Where a Pending pod may go by the pods already placed, as kube-scheduler's InterPodAffinity and PodTopologySpread
filters read its own terms: a node passes an anti-affinity term when no pod the term selects runs in the node's
topology domain, an affinity term when one does (or, for the first pod of a group, when no pod anywhere does and the
pod selects itself), and a `DoNotSchedule` spread when the pods it selects in the node's domain, the pod counted,
exceed the fewest in any domain by no more than its maxSkew; a placed pod's replacement is judged so too, the pod
gone with its move (`ByPlacedPods`). The other direction too: a placed pod's required
anti-affinity keeps the pods its terms select out of its topology domains (`Repelling`). And NodePorts: a node whose
pods hold a host port the pod asks refuses it (`kept_off_by_ports`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any, TypeGuard

from kubectl_hami_place.core.errors import SelectorError
from kubectl_hami_place.core.fields import as_mapping
from kubectl_hami_place.core.names import ENDED_PHASES, HOSTNAME_LABEL
from kubectl_hami_place.core.selectors import LabelSelector, Requirement, matches, selector_from_dict

AFFINITY_REFUSALS = ("didn't match pod affinity rules", "didn't match pod anti-affinity rules")
"""kube-scheduler's words (ErrReasonAffinityRulesNotMatch, ErrReasonAntiAffinityRulesNotMatch) for a node the
pod's own terms refuse: what `kept_off_by_pods` reads once the pods its terms select are known."""
REPELLED_REFUSAL = "didn't satisfy existing pods anti-affinity rules"
"""kube-scheduler's words (ErrReasonExistingAntiAffinityRulesNotMatch) for a node a placed pod's anti-affinity keeps
the pod off: what `Repelling` reads once every bound pod's terms are known."""
INTER_POD_AFFINITY, POD_TOPOLOGY_SPREAD = "InterPodAffinity", "PodTopologySpread"
"""kube-scheduler's names of the two filters, which `why` gives as the reason a node is out."""
NODE_PORTS = "NodePorts"
PORTS_REFUSAL = "didn't have free ports for the requested pod ports"
"""kube-scheduler's words (NodePorts' ErrReason) for a node whose pods hold a host port the pod asks."""
SPREAD_REFUSAL = "didn't match pod topology spread constraints"
"""kube-scheduler's words (ErrReasonConstraintsNotMatch, and with ` (missing required label)`) for a node the pod's
own spreads refuse: what `ByPlacedPods` reads once the pods they select are known."""
UNREAD_NAMESPACES = "pods whose pod affinity picks namespaces by label stay on their nodes"
"""What a plan leaves unread without the namespaces' labels: the words the CLI and the controller say when they may
not read them."""

NamespaceLabels = Mapping[str, Mapping[str, str]]
"""Each namespace's labels by its name: what a term's namespaceSelector picks namespaces by."""


@dataclass(frozen=True)
class NamespacePick:
    """A term's namespaceSelector that names labels, with the namespaces the term lists besides."""

    selector: LabelSelector
    listed: frozenset[str]

    def namespaces(self, namespace_labels: NamespaceLabels) -> frozenset[str]:
        """As kube-scheduler merges them: those listed and those whose labels the selector matches."""
        return self.listed | {name for name, labels in namespace_labels.items() if matches(self.selector, labels)}


@dataclass(frozen=True)
class PodTerm:
    """One required term: anti-affinity or affinity, its topology key, the pods it selects by label (None: none, a
    null labelSelector) and their namespaces (None: every namespace, an empty namespaceSelector, or one in `pick`
    whose namespaces' labels were not read when the term was: `resolved` reads them)."""

    anti: bool
    topology_key: str
    selector: LabelSelector | None
    namespaces: frozenset[str] | None
    pick: NamespacePick | None = None

    def resolved(self, namespace_labels: NamespaceLabels) -> PodTerm:
        """The term with its namespaceSelector's namespaces picked by their labels."""
        return (
            self if self.pick is None else replace(self, namespaces=self.pick.namespaces(namespace_labels), pick=None)
        )

    def selects(self, namespace: str, labels: Mapping[str, str]) -> bool:
        """Whether the term selects a pod of `namespace` with these labels."""
        if self.selector is None or (self.namespaces is not None and namespace not in self.namespaces):
            return False
        return matches(self.selector, labels)

    @cached_property
    def words(self) -> str:
        """The pods it selects, as kubectl's `-l` writes them (kept: each node it keeps a pod off says it)."""
        return _selected_words(self.selector)


def _selected_words(selector: LabelSelector | None) -> str:
    """The pods a term's or spread's selector selects, as kubectl's `-l` writes them."""
    return "no pod" if selector is None else str(selector) or "every pod"


@dataclass(frozen=True)
class PlacedPod:
    """A pod bound to a node, as a term reads it."""

    namespace: str
    name: str
    node: str
    labels: Mapping[str, str]
    terminating: bool = False


EACH_NAMESPACE_UP_TO = 4
"""A term's pods are listed namespace by namespace in up to this many namespaces, else in one list of every
namespace: a namespaceSelector may pick hundreds, each a request to the API server at every look."""


@dataclass(frozen=True)
class PodList:
    """One list of pods by label selector, in `namespace` (None: every namespace; the terms judge the pods of other
    namespaces than theirs as selecting none)."""

    namespace: str | None
    selector: LabelSelector


def selected_lists(terms: Iterable[PodTerm], spreads: Iterable[Spread], namespace: str) -> tuple[PodList, ...]:
    """The lists that find the pods the terms and the spreads (of a pod of `namespace`) select, each once."""
    wanted = [(term.selector, term.namespaces) for term in terms]
    wanted += [(spread.selector, frozenset({namespace})) for spread in spreads]
    lists: dict[PodList, None] = {}
    for selector, namespaces in wanted:
        if selector is None:
            continue
        if namespaces is not None and len(namespaces) <= EACH_NAMESPACE_UP_TO:
            lists.update((PodList(where, selector), None) for where in sorted(namespaces))
        else:
            lists[PodList(None, selector)] = None
    return tuple(lists)


def placed_pods(pods: Iterable[Mapping[str, Any]]) -> tuple[PlacedPod, ...]:
    """The pods kube-scheduler counts for a term or a spread: bound to a node and not ended (its cache drops Succeeded
    and Failed pods; a term counts a terminating pod, a spread does not)."""
    found = []
    for pod in pods:
        bound = _bound(pod)
        if bound is not None:
            metadata = as_mapping(pod.get("metadata"))
            terminating = bool(metadata.get("deletionTimestamp"))
            found.append(PlacedPod(*bound, labels_of(metadata), terminating))
    return tuple(found)


def _bound(pod: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """The pod's namespace, name and node when it is bound and not ended, else None."""
    node = as_mapping(pod.get("spec")).get("nodeName")
    if not isinstance(node, str) or not node or as_mapping(pod.get("status")).get("phase") in ENDED_PHASES:
        return None
    metadata = as_mapping(pod.get("metadata"))
    return str(metadata.get("namespace", "")), str(metadata.get("name", "")), node


def labels_of(metadata: Mapping[str, Any]) -> dict[str, str]:
    """An object's labels, those whose value is text (what a selector can match)."""
    return {key: value for key, value in as_mapping(metadata.get("labels")).items() if isinstance(value, str)}


AFFINITY_KINDS = (("podAffinity", False), ("podAntiAffinity", True))
"""The two kinds of pod affinity, each with whether it is anti-affinity."""


def _required_terms(
    spec: Mapping[str, Any], kinds: tuple[tuple[str, bool], ...] = AFFINITY_KINDS
) -> list[tuple[bool, Any]]:
    """The pod's required terms of these kinds as written, each with whether it is anti-affinity."""
    affinity = as_mapping(spec.get("affinity"))
    found: list[tuple[bool, Any]] = []
    for kind, anti in kinds:
        listed = as_mapping(affinity.get(kind)).get("requiredDuringSchedulingIgnoredDuringExecution")
        if isinstance(listed, list | tuple):
            found.extend((anti, term) for term in listed)
    return found


def pod_terms(
    spec: Mapping[str, Any], namespace: str, namespace_labels: NamespaceLabels | None = None
) -> tuple[PodTerm, ...] | None:
    """The pod's required pod affinity and anti-affinity terms; None when one cannot be read here (a namespaceSelector
    that names labels while the namespaces' labels were not read, `namespace_labels` None, or a selector or term that
    does not parse): kube-scheduler's verdict from them then stays unread."""
    terms = []
    for anti, term in _required_terms(spec):
        read = _term(term, namespace, anti, namespace_labels)
        if read is None:
            return None
        terms.append(read)
    return tuple(terms)


def _term(term: object, namespace: str, anti: bool, namespace_labels: NamespaceLabels | None) -> PodTerm | None:
    """One term as read, or None when it cannot be."""
    if not isinstance(term, Mapping) or not isinstance(term.get("topologyKey"), str) or not term["topologyKey"]:
        return None
    try:
        namespaces = _term_namespaces(term, namespace, namespace_labels)
        selector = _selector(term.get("labelSelector"))
    except SelectorError:
        return None
    return PodTerm(anti, term["topologyKey"], selector, namespaces)


def term_namespaces(
    term: Mapping[str, Any], namespace: str, namespace_labels: NamespaceLabels | None = None
) -> frozenset[str] | None:
    """The namespaces a pod affinity term selects pods of (`_term_namespaces`); None (any) as well when they cannot be
    known here, so that what it counts is never fewer than kube-scheduler counts."""
    try:
        return _term_namespaces(term, namespace, namespace_labels)
    except SelectorError:
        return None


def picks_namespaces_by_labels(spec: Mapping[str, Any]) -> bool:
    """Whether one of the pod's required pod affinity terms has a namespaceSelector that names labels: only then are
    the namespaces' labels read."""
    return any(
        isinstance(term, Mapping) and term.get("namespaceSelector") not in (None, {})
        for _, term in _required_terms(spec)
    )


def namespace_labels_of(namespaces: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, str]]:
    """Each Namespace object's labels by its name."""
    return {
        str(metadata.get("name", "")): labels_of(metadata)
        for metadata in (as_mapping(namespace.get("metadata")) for namespace in namespaces)
    }


def _term_namespaces(
    term: Mapping[str, Any], namespace: str, namespace_labels: NamespaceLabels | None
) -> frozenset[str] | None:
    """As kube-scheduler reads a term: the namespaces it lists and, under a namespaceSelector, those whose labels
    (`namespace_labels`) it matches; the pod's own (`namespace`) when it has neither; None (any) under an empty
    namespaceSelector. SelectorError when its namespaceSelector does not parse, or names labels while the
    namespaces' labels were not read."""
    if term.get("namespaceSelector") is None:
        return _listed(term) or frozenset({namespace})
    pick = _namespace_pick(term)
    if pick is None:
        return None
    if namespace_labels is None:
        raise SelectorError("a namespaceSelector that names labels, the namespaces' labels not read")
    return pick.namespaces(namespace_labels)


def _namespace_pick(term: Mapping[str, Any]) -> NamespacePick | None:
    """The term's namespaceSelector when it names labels (None when it has none or an empty one); SelectorError
    when it does not parse."""
    written = term.get("namespaceSelector")
    selector = None if written is None else selector_from_dict(written)
    return None if selector is None or selector.empty else NamespacePick(selector, _listed(term))


def _listed(term: Mapping[str, Any]) -> frozenset[str]:
    """The namespaces a term lists."""
    listed = term.get("namespaces")
    return frozenset(n for n in listed if isinstance(n, str)) if isinstance(listed, list | tuple) else frozenset()


def _selector(written: object) -> LabelSelector | None:
    """A term's or spread's label selector; None (no pod) when it is null; SelectorError when it does not parse."""
    return None if written is None else selector_from_dict(written)


def kept_off_by_pods(
    terms: Iterable[PodTerm],
    namespace: str,
    labels: Mapping[str, str],
    placed: Iterable[PlacedPod],
    node_labels: Mapping[str, Mapping[str, Any]],
    *,
    domains: DomainIndex | None = None,
) -> dict[str, str]:
    """Each node of `node_labels` the pod's terms keep it off (the pod of `namespace` with `labels`), and why in
    words; `placed` the pods bound to nodes (any superset of those the terms select), `domains` the nodes' topology
    domains when the caller keeps them. Anti-affinity alone is judged by the domains the selected pods run in, not
    node by node."""
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
    kept: dict[str, str] = {}
    if all(term.anti for term in terms):
        domains = DomainIndex(node_labels) if domains is None else domains
        for term, found in zip(terms, selected, strict=True):
            for (key, value), pod in found.items():
                why = _repelled(term, pod, value)
                for node in domains.nodes(key).get(value, ()):
                    kept.setdefault(node, why)
        return kept
    affinity = [(term, found) for term, found in zip(terms, selected, strict=True) if not term.anti]
    first_of_group = not any(found for _, found in affinity) and all(
        term.selects(namespace, labels) for term, _ in affinity
    )
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
                return _repelled(term, pod, value)
        elif value is None:
            return f"the pod's affinity ({term.words}): the node has no {term.topology_key} label"
        elif (term.topology_key, value) not in found and not first_of_group:
            return f"the pod's affinity ({term.words}): no such pod runs {_in_domain(term.topology_key, value)}"
    return ""


def _repelled(term: PodTerm, pod: PlacedPod, value: str | None) -> str:
    """Why an anti-affinity term keeps the pod off the nodes of a domain where `pod`, which it selects, runs."""
    where = _in_domain(term.topology_key, value)
    return f"the pod's anti-affinity ({term.words}): {pod.namespace}/{pod.name} runs {where}"


def _in_domain(key: str, value: str | None) -> str:
    """Where a pod runs, in words: on the node itself, or in the node's domain of a wider topology label."""
    return "on the node" if key == HOSTNAME_LABEL else f"in its {key}={value}"


def _value(node_labels: Mapping[str, Mapping[str, Any]], node: str, key: str) -> str | None:
    """The node's value of a topology label; None when the node has none (or is not known)."""
    value = as_mapping(node_labels.get(node)).get(key)
    return value if isinstance(value, str) else None


@dataclass(frozen=True)
class Spread:
    """One `DoNotSchedule` topology spread constraint: the pods it selects (None: none, a null labelSelector; its
    matchLabelKeys merged), how far apart their counts may be, the fewest domains it expects, and whether the nodes
    it counts are those the pod's node selection allows (nodeAffinityPolicy Honor, the default) and whose taints the
    pod tolerates (nodeTaintsPolicy Honor; Ignore by default)."""

    max_skew: int
    topology_key: str
    selector: LabelSelector | None
    min_domains: int = 1
    honor_node_affinity: bool = True
    honor_taints: bool = False

    def selects(self, labels: Mapping[str, str]) -> bool:
        """Whether the spread selects the new pod, with these labels."""
        return self.selector is not None and matches(self.selector, labels)

    def counts(self, labels: Mapping[str, str]) -> bool:
        """Whether the spread counts a placed pod with these labels: an empty selector counts none, though it selects
        the new pod (kube-scheduler's countPodsMatchSelector; 1.24's counted every pod of the namespace then)."""
        return self.selector is not None and not self.selector.empty and matches(self.selector, labels)

    @cached_property
    def words(self) -> str:
        """The pods it selects, as kubectl's `-l` writes them (kept: each node it keeps a pod off says it)."""
        return _selected_words(self.selector)


def pod_spreads(spec: Mapping[str, Any], labels: Mapping[str, str]) -> tuple[Spread, ...] | None:
    """The pod's `DoNotSchedule` topology spreads (of a pod with `labels`); None when one cannot be read here."""
    listed = spec.get("topologySpreadConstraints")
    spreads = []
    for spread in listed if isinstance(listed, list | tuple) else ():
        if not isinstance(spread, Mapping):
            return None
        if spread.get("whenUnsatisfiable", "DoNotSchedule") != "DoNotSchedule":
            continue
        read = _spread(spread, labels)
        if read is None:
            return None
        spreads.append(read)
    return tuple(spreads)


def _spread(spread: Mapping[str, Any], labels: Mapping[str, str]) -> Spread | None:
    """One spread as read, or None when it cannot be."""
    skew, key = spread.get("maxSkew"), spread.get("topologyKey")
    least = spread.get("minDomains")
    least = 1 if least is None else least
    if not (_count(skew) and _count(least) and isinstance(key, str) and key):
        return None
    try:
        selector = _selector(spread.get("labelSelector"))
    except SelectorError:
        return None
    if selector is not None:
        keys = spread.get("matchLabelKeys")
        merged = [
            Requirement(name, "In", (labels[name],))
            for name in (keys if isinstance(keys, list | tuple) else ())
            if isinstance(name, str) and name in labels
        ]
        selector = replace(selector, match_expressions=(*selector.match_expressions, *merged))
    return Spread(
        skew,
        key,
        selector,
        least,
        spread.get("nodeAffinityPolicy") != "Ignore",
        spread.get("nodeTaintsPolicy") == "Honor",
    )


def _count(value: object) -> TypeGuard[int]:
    """Whether a field holds a count of at least one."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


class DomainIndex:
    """The nodes of each value of a topology label, and the nodes without it, read once per key however many pods'
    terms and spreads name it."""

    def __init__(self, node_labels: Mapping[str, Mapping[str, Any]]) -> None:
        self.node_labels = node_labels
        self._nodes: dict[str, dict[str, tuple[str, ...]]] = {}
        self._unlabelled: dict[str, tuple[str, ...]] = {}
        self._counted: dict[tuple[object, ...], tuple[Mapping[str, str], int]] = {}

    def nodes(self, key: str) -> dict[str, tuple[str, ...]]:
        """The nodes of each value of `key`."""
        found = self._nodes.get(key)
        if found is None:
            found = self._nodes[key] = _domains(self.node_labels, key)
        return found

    def unlabelled(self, key: str) -> tuple[str, ...]:
        """The nodes without `key`."""
        found = self._unlabelled.get(key)
        if found is None:
            found = self._unlabelled[key] = tuple(
                n for n in self.node_labels if _value(self.node_labels, n, key) is None
            )
        return found

    def value(self, node: str, key: str) -> str | None:
        """The node's value of `key`; None when it has none."""
        return _value(self.node_labels, node, key)

    def counted(
        self, key: str, keys: frozenset[str], selected: frozenset[str] | None, untolerated: frozenset[str]
    ) -> tuple[Mapping[str, str], int]:
        """The nodes a spread on `key` counts, with their values, and how many domains they make: those that carry
        every key of the pod's spreads (`keys`), of `selected` (None: any) and not `untolerated`; found once for all
        the spreads that count alike."""
        found = self._counted.get((key, keys, selected, untolerated))
        if found is None:
            where = {}
            for node in self.node_labels:
                value = self.value(node, key)
                if value is None or any(self.value(node, other) is None for other in keys):
                    continue
                if (selected is None or node in selected) and node not in untolerated:
                    where[node] = value
            found = self._counted[(key, keys, selected, untolerated)] = (where, len(set(where.values())))
        return found


@dataclass(frozen=True)
class SpreadCount:
    """One spread's pods counted in each domain of the nodes it counts (kube-scheduler's per-domain match count): the
    fewest any domain holds (0 below minDomains domains) and the domains that hold any, read once, then asked where
    any pod may go, one placed pod left out (`kept_off`)."""

    spread: Spread
    namespace: str
    where: Mapping[str, str]
    fewest: int
    enough: bool
    holding: Mapping[str, int]
    domains: DomainIndex

    @classmethod
    def of(  # noqa: PLR0917 - the spread, the pods placed, and the nodes as the pod's node selection sees them
        cls,
        spread: Spread,
        namespace: str,
        placed: Iterable[PlacedPod],
        domains: DomainIndex,
        selected: frozenset[str] | None,
        untolerated: frozenset[str],
        keys: frozenset[str],
    ) -> SpreadCount:
        """The count over the nodes that carry every key of the pod's spreads (`keys`), within its node selection
        (`selected`, None: any) and its tolerations (`untolerated`) as the spread's policies say; `placed` the pods
        bound to nodes (any superset of those the spread selects), terminating ones not counted."""
        where, counted = domains.counted(
            spread.topology_key,
            keys,
            selected if spread.honor_node_affinity else None,
            untolerated if spread.honor_taints else frozenset(),
        )
        holding: dict[str, int] = {}
        for pod in placed:
            if pod.node in where and not pod.terminating and pod.namespace == namespace and spread.counts(pod.labels):
                value = where[pod.node]
                holding[value] = holding.get(value, 0) + 1
        enough = counted >= spread.min_domains
        fewest = min(holding.values()) if enough and len(holding) == counted else 0
        return cls(spread, namespace, where, fewest, enough, holding, domains)

    def kept_off(self, labels: Mapping[str, str], without: PlacedPod | None = None) -> dict[str, str]:
        """Each node the spread keeps a pod with `labels` off, and why in words; `without` a placed pod left out of the
        count (the pod a move replaces). Only a domain holding pods can be too far ahead (maxSkew is at least 1)."""
        spread, fewest = self.spread, self.fewest
        own = None
        if without is not None and not without.terminating and without.namespace == self.namespace:
            own = self.where.get(without.node) if spread.counts(without.labels) else None
        if own is not None and self.enough:
            fewest = min(fewest, self.holding[own] - 1)
        itself = 1 if spread.selects(labels) else 0
        key = spread.topology_key
        kept = dict.fromkeys(
            self.domains.unlabelled(key), f"the pod's topology spread ({spread.words}): the node has no {key} label"
        )
        by_value = self.domains.nodes(key)
        for value, held in self.holding.items():
            count = held - 1 if value == own else held
            if count + itself - fewest <= spread.max_skew:
                continue
            why = (
                f"the pod's topology spread ({spread.words}, maxSkew {spread.max_skew}): {count} such pod(s) run in "
                f"its {key}={value}, {fewest} where fewest run"
            )
            for node in by_value.get(value, ()):
                kept.setdefault(node, why)
        return kept


@dataclass(frozen=True)
class CountedPods:
    """Pods whose nodes a pod's placement counts (its required pod affinity or anti-affinity, or a `DoNotSchedule`
    topology spread): those of `namespaces` (None: any) that `selector` matches (None: every pod, its selector
    unreadable)."""

    namespaces: frozenset[str] | None
    selector: LabelSelector | None

    def counts(self, namespace: str, labels: Mapping[str, str]) -> bool:
        """Whether a pod of `namespace` with these labels is one of them."""
        if self.namespaces is not None and namespace not in self.namespaces:
            return False
        return self.selector is None or matches(self.selector, labels)


def counted_pods(
    spec: Mapping[str, Any], namespace: str, namespace_labels: NamespaceLabels | None = None
) -> tuple[CountedPods, ...]:
    """The pods where the pod (of `namespace`) may go depends on: moving one to another node could change
    kube-scheduler's verdict on the pod. A namespaceSelector picks namespaces by `namespace_labels` (any namespace
    when they were not read); matchLabelKeys is not read (it only narrows); a null labelSelector counts no pod."""
    found = []
    for _, term in _required_terms(spec):
        if isinstance(term, Mapping) and term.get("labelSelector") is not None:
            namespaces = term_namespaces(term, namespace, namespace_labels)
            found.append(CountedPods(namespaces, _any_unread(term["labelSelector"])))
    spreads = spec.get("topologySpreadConstraints")
    for spread in spreads if isinstance(spreads, list | tuple) else ():
        if not isinstance(spread, Mapping) or spread.get("labelSelector") is None:
            continue
        if spread.get("whenUnsatisfiable", "DoNotSchedule") == "DoNotSchedule":
            found.append(CountedPods(frozenset({namespace}), _any_unread(spread["labelSelector"])))
    return tuple(found)


def _any_unread(written: object) -> LabelSelector | None:
    """A term's label selector; None (every pod) when it is unreadable."""
    try:
        return selector_from_dict(written)
    except SelectorError:
        return None


def counts_any(counted: Iterable[CountedPods], namespace: str, labels: Mapping[str, str]) -> bool:
    """Whether any of `counted` counts a pod of `namespace` with these labels."""
    return any(c.counts(namespace, labels) for c in counted)


Group = tuple[str, frozenset[tuple[str, str]]]
"""Placed pods alike to a selector: their namespace and labels."""


class ByPlacedPods:
    """Where a pod may go by its own required pod affinity, anti-affinity and `DoNotSchedule` spreads, judged against
    the pods placed as they are (spreads first, then terms, kube-scheduler's order): a Pending pod, or a placed pod's
    replacement, the pod itself gone with its move. The pods placed are read (`placed()`) when a pod first asks, most
    clusters' GPU pods having no such terms, and grouped by namespace and labels; each kind of pod's selected pods and
    spread counts are found once, and its verdict once per node (replicas of one template on one node share it).
    `domains` the nodes' topology domains, shared with the caller's `Repelling`."""

    def __init__(self, placed: Callable[[], Iterable[PlacedPod]], domains: DomainIndex) -> None:
        self._read = placed
        self._groups: dict[Group, list[PlacedPod]] | None = None
        self._with: dict[tuple[str, str], list[Group]] = {}
        self._positions: dict[Group, int] = {}
        self._domains = domains
        self._selected: dict[tuple[object, ...], tuple[PlacedPod, ...]] = {}
        self._counts: dict[tuple[object, ...], SpreadCount] = {}
        self._memo: dict[tuple[object, ...], dict[str, tuple[str, str]]] = {}

    def kept_off(
        self,
        pod: PlacedPod,
        terms: tuple[PodTerm, ...],
        spreads: tuple[Spread, ...],
        allowed: frozenset[str] | None,
        untolerated: frozenset[str],
    ) -> dict[str, tuple[str, str]]:
        """Each node the pod's terms and spreads keep its replacement off, with the filter and why in words; `allowed`
        the nodes its node selection allows (None: any), `untolerated` those whose taints it does not tolerate."""
        namespace, labels = pod.namespace, pod.labels
        kind = (terms, spreads, namespace)
        key = (*kind, frozenset(labels.items()), pod.node, allowed, untolerated)
        found = self._memo.get(key)
        if found is not None:
            return found
        selected = self._select(kind)
        found = {}
        keys = frozenset(spread.topology_key for spread in spreads)
        for spread in spreads:
            counted = (spread, namespace, allowed, untolerated, keys)
            count = self._counts.get(counted)
            if count is None:
                count = self._counts[counted] = SpreadCount.of(
                    spread, namespace, selected, self._domains, allowed, untolerated, keys
                )
            for node, why in count.kept_off(labels, pod).items():
                found.setdefault(node, (POD_TOPOLOGY_SPREAD, why))
        if terms:
            others = [other for other in selected if (other.namespace, other.name) != (namespace, pod.name)]
            node_labels = self._domains.node_labels
            by_terms = kept_off_by_pods(terms, namespace, labels, others, node_labels, domains=self._domains)
            for node, why in by_terms.items():
                found.setdefault(node, (INTER_POD_AFFINITY, why))
        self._memo[key] = found
        return found

    def _select(self, kind: tuple[tuple[PodTerm, ...], tuple[Spread, ...], str]) -> tuple[PlacedPod, ...]:
        """The placed pods a kind of pod's terms select or its spreads count, found once per group of pods alike."""
        selected = self._selected.get(kind)
        if selected is not None:
            return selected
        groups = self._groups
        if groups is None:
            groups = self._groups = {}
            for placed in self._read():
                groups.setdefault((placed.namespace, frozenset(placed.labels.items())), []).append(placed)
            self._positions = {group: at for at, group in enumerate(groups)}
            for group in groups:
                for pair in group[1]:
                    self._with.setdefault(pair, []).append(group)
        terms, spreads, namespace = kind
        candidates: dict[Group, None] = {}
        for selector in (*(t.selector for t in terms), *(s.selector for s in spreads)):
            candidates.update(dict.fromkeys(self._with_all(selector, groups)))
        found: list[PlacedPod] = []
        for group in sorted(candidates, key=self._positions.__getitem__):
            group_namespace, pods = group[0], groups[group]
            labels = pods[0].labels
            if any(t.selects(group_namespace, labels) for t in terms) or (
                group_namespace == namespace and any(s.counts(labels) for s in spreads)
            ):
                found += pods
        selected = self._selected[kind] = tuple(found)
        return selected

    def _with_all(self, selector: LabelSelector | None, groups: Iterable[Group]) -> Iterable[Group]:
        """The groups a selector may select: those carrying the rarest of its matchLabels (all of `groups` when it
        has none)."""
        if selector is None:
            return ()
        if not selector.match_labels:
            return groups
        return min((self._with.get(pair, []) for pair in selector.match_labels), key=len)


@dataclass(frozen=True)
class Repeller:
    """A bound pod whose required anti-affinity keeps the pods its terms select off every node that shares a term's
    topology value with its own node."""

    namespace: str
    name: str
    node: str
    terms: tuple[PodTerm, ...]


def repelling_terms(
    spec: Mapping[str, Any], namespace: str, namespace_labels: NamespaceLabels | None = None
) -> tuple[PodTerm, ...]:
    """The pod's required anti-affinity terms, as kube-scheduler judges other pods by them. A term whose
    namespaceSelector names labels while `namespace_labels` were not read selects its pods in every namespace until
    `PodTerm.resolved`; one that cannot be read (a selector that does not parse) is taken to select every pod of every
    namespace: no plan sends a pod where the term might refuse it. One without a topology key keeps no domain."""
    terms = []
    for _, term in _required_terms(spec, AFFINITY_KINDS[1:]):
        read = _term(term, namespace, True, namespace_labels)
        key = term.get("topologyKey") if isinstance(term, Mapping) else None
        if read is None and isinstance(key, str) and key:
            read = _unresolved(term, key)
        if read is not None:
            terms.append(read)
    return tuple(terms)


def _unresolved(term: Mapping[str, Any], key: str) -> PodTerm:
    """An anti-affinity term `_term` could not read: its namespaceSelector's namespaces left to `PodTerm.resolved`
    when that alone was why, else every pod of every namespace."""
    try:
        return PodTerm(True, key, _selector(term.get("labelSelector")), None, _namespace_pick(term))
    except SelectorError:
        return PodTerm(True, key, LabelSelector(), None)


def resolved_terms(terms: tuple[PodTerm, ...], namespace_labels: NamespaceLabels | None) -> tuple[PodTerm, ...]:
    """The terms with their namespaceSelectors' namespaces picked by `namespace_labels` (as they are when None)."""
    return terms if namespace_labels is None else tuple(term.resolved(namespace_labels) for term in terms)


class Repelling:
    """The nodes placed pods' anti-affinity keeps each pod off. The terms that select a kind of pod (its namespace and
    labels) are found once per kind, each distinct term tested once (replicas of one template share theirs) and only
    when the kind carries the term's first matchLabels pair; a repeller's own kind leaves its own terms out (a pod
    does not repel its own replacement). `domains` the nodes' topology domains, shared with the caller's
    `ByPlacedPods`."""

    def __init__(self, repellers: Iterable[Repeller], domains: DomainIndex) -> None:
        self._domains: list[tuple[Repeller, PodTerm, tuple[str, ...], str]] = []
        self._by_term: dict[PodTerm, list[int]] = {}
        self._terms_with: dict[tuple[str, str] | None, list[PodTerm]] = {}
        for found in repellers:
            for term in found.terms:
                value = domains.value(found.node, term.topology_key)
                if value is None:
                    continue
                nodes = domains.nodes(term.topology_key)[value]
                where = "the node" if term.topology_key == HOSTNAME_LABEL else f"its {term.topology_key}={value}"
                if term not in self._by_term and term.selector is not None:
                    pairs = term.selector.match_labels
                    self._terms_with.setdefault(pairs[0] if pairs else None, []).append(term)
                self._by_term.setdefault(term, []).append(len(self._domains))
                self._domains.append((found, term, nodes, where))
        self._names = {(found.namespace, found.name) for found, *_ in self._domains}
        self._selecting: dict[tuple[str, frozenset[tuple[str, str]]], list[int]] = {}
        self._memo: dict[tuple[str, frozenset[tuple[str, str]]], dict[str, str]] = {}

    def kept_off(self, namespace: str, name: str, labels: Mapping[str, str]) -> dict[str, str]:
        """Each node a placed pod's term keeps the pod off, and why in words; a pod does not repel its own
        replacement (the old one goes with the move)."""
        if not self._domains:
            return {}
        key = (namespace, frozenset(labels.items()))
        own = (namespace, name) in self._names
        if not own and key in self._memo:
            return self._memo[key]
        selecting = self._selecting.get(key)
        if selecting is None:
            terms = [*self._terms_with.get(None, ()), *(t for p in labels.items() for t in self._terms_with.get(p, ()))]
            selecting = self._selecting[key] = sorted(
                at for term in terms if term.selects(namespace, labels) for at in self._by_term[term]
            )
        kept: dict[str, str] = {}
        for at in selecting:
            found, term, nodes, where = self._domains[at]
            if (found.namespace, found.name) == (namespace, name):
                continue
            why = f"{found.namespace}/{found.name}'s anti-affinity ({term.words}) keeps it off {where}"
            for node in nodes:
                kept.setdefault(node, why)
        if not own:
            self._memo[key] = kept
        return kept


def _domains(node_labels: Mapping[str, Mapping[str, Any]], key: str) -> dict[str, tuple[str, ...]]:
    """The nodes of each value of a topology label, read once per key however many pods' terms name it."""
    found: dict[str, list[str]] = {}
    for node in node_labels:
        value = _value(node_labels, node, key)
        if value is not None:
            found.setdefault(value, []).append(node)
    return {value: tuple(nodes) for value, nodes in found.items()}


HostPort = tuple[str, str, int]
"""A port a pod takes on its node: host IP ("0.0.0.0" for every one), protocol and port."""
ANY_IP = "0.0.0.0"
NO_PORTS: frozenset[HostPort] = frozenset()
"""What most pods take, one object for all: the server keeps this of every pod of another scheduler."""


def host_ports(spec: Mapping[str, Any], *, every_init_container: bool = False) -> frozenset[HostPort]:
    """The host ports the pod takes, as kube-scheduler's GetHostPorts reads them: its containers' and its sidecars'
    (init containers that run for the pod's whole life; with `every_init_container`, the others' too), an IP or
    protocol left out read as every IP and TCP."""
    found = set()
    for key in ("initContainers", "containers"):
        listed = spec.get(key)
        for container in listed if isinstance(listed, list | tuple) else ():
            if not isinstance(container, Mapping):
                continue
            if key == "initContainers" and container.get("restartPolicy") != "Always" and not every_init_container:
                continue
            ports = container.get("ports")
            for port in ports if isinstance(ports, list | tuple) else ():
                taken = port.get("hostPort") if isinstance(port, Mapping) else None
                if isinstance(taken, int) and not isinstance(taken, bool) and taken > 0:
                    found.add((str(port.get("hostIP") or ANY_IP), str(port.get("protocol") or "TCP"), taken))
    return frozenset(found) if found else NO_PORTS


@dataclass(frozen=True)
class PortHolder:
    """A bound pod holding host ports of its node."""

    namespace: str
    name: str
    node: str
    ports: frozenset[HostPort]


def kept_off_by_ports(wanted: frozenset[HostPort], holders: Iterable[PortHolder]) -> dict[str, str]:
    """Each node whose pods hold a port the pod asks (HostPortInfo.CheckConflict: an IP conflicts with itself and
    with every IP), and why in words."""
    kept: dict[str, str] = {}
    for holder in holders:
        if holder.node in kept:
            continue
        for asked in sorted(wanted):
            if any(_conflict(asked, held) for held in holder.ports):
                _, protocol, port = asked
                kept[holder.node] = f"{holder.namespace}/{holder.name} holds host port {port}/{protocol} on the node"
                break
    return kept


def _conflict(asked: HostPort, held: HostPort) -> bool:
    """Whether a port asked is one held: the same protocol and port, on the same IP or where either is every IP."""
    return asked[1:] == held[1:] and (asked[0] == held[0] or ANY_IP in (asked[0], held[0]))
