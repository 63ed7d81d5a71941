"""The planner's snapshot from the API server's objects (JSON dict form): nodes, pods and PodDisruptionBudgets.

Nodes go through the cluster-info view (`cluster_info.cluster_info`, from each pod's allocation decoded once for it
and the planner alike), so a node takes new pods exactly when `status` calls it usable. A pod whose allocation or
GPU request HAMi could not read either is left out of the snapshot (and of usage, as HAMi leaves it out); the reader
gets a warning for it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import datetime
from types import MappingProxyType
from typing import Any

from kubectl_hami_place.core.cards import PAIR_SCORE_ANNOTATION, pair_scores
from kubectl_hami_place.core.cluster_info import cluster_info, counted_allocation
from kubectl_hami_place.core.errors import ModelError, RequestError
from kubectl_hami_place.core.fields import as_mapping
from kubectl_hami_place.core.hami_config import HAMI_DEFAULTS, HamiConfig
from kubectl_hami_place.core.names import ENDED_PHASES
from kubectl_hami_place.core.node_resources import (
    NOTHING,
    CountedPod,
    Resources,
    attach_rooms,
    bound_pods,
    counted_scalars,
    node_remainders,
    pod_resources,
    with_attach_needs,
)
from kubectl_hami_place.core.node_selection import NodeMarks, node_marks, reachable, required_terms
from kubectl_hami_place.core.placement import time_or_none
from kubectl_hami_place.core.planner.model import PLACED_BY, PlanNode, PlanPod, Snapshot
from kubectl_hami_place.core.pod_affinity import (
    INTER_POD_AFFINITY,
    ByPlacedPods,
    DomainIndex,
    NamespaceLabels,
    PlacedPod,
    PortHolder,
    Repeller,
    Repelling,
    counted_pods,
    counts_any,
    host_ports,
    labels_of,
    placed_pods,
    pod_spreads,
    pod_terms,
    resolved_terms,
)
from kubectl_hami_place.core.requests import pod_requests
from kubectl_hami_place.core.selectors import budget_selector, matches
from kubectl_hami_place.core.usage import PodAllocation, pod_allocation
from kubectl_hami_place.core.volumes import Volumes, is_claim, volume_reach


def snapshot_from_objects(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    budgets: Iterable[Mapping[str, Any]],
    now: datetime,
    config: HamiConfig = HAMI_DEFAULTS,
    *,
    others: Iterable[CountedPod] = (),
    volumes: Volumes | None = None,
    namespace_labels: NamespaceLabels | None = None,
    allocations: Mapping[tuple[str, str], tuple[Mapping[str, Any], PodAllocation | str]] | None = None,
) -> tuple[Snapshot, tuple[str, ...]]:
    """The snapshot and the warnings about objects left out of it; `others` are bound pods besides `pods` whose CPU,
    memory and pod count their nodes' rooms count (the server's watch of other schedulers' pods), `volumes` the
    claims and volumes read (None: not read, and a pod that claims one stays on its node; their CSI attach limits,
    when read, count in the rooms and the pods' needs), `namespace_labels` the
    namespaces' labels (None: not read, and a pod whose own pod affinity term has a namespaceSelector that names
    labels stays on its node), `allocations` those the caller decoded already, by namespace and name, each with the
    very pod object it was decoded from (the server's cache decodes each stored version once): a pod given as another
    object is decoded anew."""
    nodes, pods, others = list(nodes), list(pods), list(others)
    decoded: dict[tuple[str, str], PodAllocation | None] = {}
    read: list[PodAllocation | str] = []
    for pod in pods:
        metadata = as_mapping(pod.get("metadata"))
        named = (str(metadata.get("namespace", "")), str(metadata.get("name", "")))
        known = allocations.get(named) if allocations is not None else None
        allocation = known[1] if known is not None and known[0] is pod else counted_allocation(pod)
        if not isinstance(allocation, str):
            decoded[named] = allocation
        if allocation is not None:
            read.append(allocation)
    info = cluster_info(nodes, read, now)
    marks = node_marks(nodes)
    scores = _pair_scores(nodes)
    attach = volumes.attach if volumes is not None else None
    attached = attach.counted if attach is not None else frozenset()
    counted = bound_pods(pods)
    if attached and volumes is not None:
        counted = [with_attach_needs(pod, volumes, attached) for pod in counted]
        others = [with_attach_needs(pod, volumes, attached) for pod in others]
    bound = (*counted, *others)
    scalars = counted_scalars(nodes, config.resource_names) | attached
    rooms, room_warnings = node_remainders(nodes, (), bound, scalars)
    if attach is not None and volumes is not None and attached:
        rooms = attach_rooms(rooms, bound, attach, volumes)
    asked = {(pod.namespace, pod.name): pod.needs for pod in counted}
    plan_nodes = tuple(
        PlanNode(
            name=node.name,
            cards=tuple(card.card() for card in node.cards),
            schedulable=node.usable,
            cordoned=frozenset(card.uuid for card in node.cards if card.cordoned),
            pair_scores=scores.get(node.name),
            room=rooms.get(node.name),
            labels=marks.labels.get(node.name, {}),
        )
        for node in info.nodes
    )
    selectors = []
    memo: dict[str, Reachable] = {}
    allowed: dict[str, int] = {}
    warnings = [*info.warnings, *room_warnings]
    for budget in budgets:
        metadata = as_mapping(budget.get("metadata"))
        key = f"{metadata.get('namespace', '')}/{metadata.get('name', '')}"
        try:
            selector = budget_selector(budget)
        except ModelError as err:
            warnings.append(f"PodDisruptionBudget {key}: {err}; it protects no pod in this plan")
            continue
        if selector is None:
            continue
        selectors.append((key, metadata.get("namespace", ""), selector))
        allowed[key] = _int(as_mapping(budget.get("status")).get("disruptionsAllowed"))
    repellers = tuple(
        Repeller(pod.namespace, pod.name, pod.node, resolved_terms(pod.repels, namespace_labels))
        for pod in bound
        if pod.repels
    )
    domains = DomainIndex(marks.labels)
    repelling = Repelling(repellers, domains)
    placed = ByPlacedPods(
        lambda: (*placed_pods(pods), *(PlacedPod(o.namespace, o.name, o.node, o.labels) for o in others)), domains
    )
    plan_pods = []
    for pod in pods:
        try:
            plan_pod = pod_for_plan(
                pod,
                marks,
                config,
                memo,
                asked,
                volumes=volumes,
                namespace_labels=namespace_labels,
                scalars=scalars,
                placed=placed,
                decoded=decoded,
            )
        except ModelError as err:
            warnings.append(f"{err}; the planner leaves the pod where it is")
            continue
        if plan_pod.allocation is None:
            continue
        pod_labels = as_mapping(as_mapping(pod.get("metadata")).get("labels"))
        covering = tuple(
            key
            for key, namespace, selector in selectors
            if namespace == plan_pod.namespace and matches(selector, pod_labels)
        )
        repelled = repelling.kept_off(plan_pod.namespace, plan_pod.name, plan_pod.labels)
        kept = {node: (INTER_POD_AFFINITY, why) for node, why in repelled.items()}
        plan_pods.append(kept_off_nodes(replace(plan_pod, budgets=covering) if covering else plan_pod, kept))
    holders = tuple(PortHolder(pod.namespace, pod.name, pod.node, pod.ports) for pod in bound if pod.ports)
    snapshot = Snapshot(plan_nodes, tuple(plan_pods), allowed, repellers, holders, scalars)
    return snapshot, tuple(warnings)


def _pair_scores(nodes: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, dict[str, int]]]:
    """Each node's cards' pair scores by node name, for the nodes that carry readable ones (a node whose scores HAMi
    cannot read is unregistered, so it has no cards in the snapshot anyway)."""
    result = {}
    for node in nodes:
        metadata = as_mapping(node.get("metadata"))
        text = as_mapping(metadata.get("annotations")).get(PAIR_SCORE_ANNOTATION)
        if text is None:
            continue
        try:
            result[str(metadata.get("name", ""))] = pair_scores(text)
        except ModelError:
            continue
    return result


def pod_for_plan(
    pod: Mapping[str, Any],
    marks: NodeMarks,
    config: HamiConfig = HAMI_DEFAULTS,
    memo: dict[str, Reachable] | None = None,
    asked: Mapping[tuple[str, str], Resources | str] | None = None,
    *,
    volumes: Volumes | None = None,
    namespace_labels: NamespaceLabels | None = None,
    scalars: frozenset[str] = frozenset(),
    placed: ByPlacedPods | None = None,
    decoded: Mapping[tuple[str, str], PodAllocation | None] | None = None,
) -> PlanPod:
    """One pod as the planner sees it (allocation None while HAMi has not placed it); ModelError when unreadable.

    The nodes it may run on are those whose labels (`marks`) carry its nodeSelector and match its required node
    affinity (`node_allows`), and whose keeping-off taints it tolerates (`tolerates`); the hostname requirement our
    webhook merged into a placed pod's affinity pins that pod only, not its replacement, so it is left out. A placed
    pod with a resource claim or a host port stays on its node (`on_node_only`, why in `stays`), as does one with a
    volume claim unless `volumes` were read: then its replacement may go where its bound volumes let it
    (`volumes.volume_reach`; on its own node alone when one of them cannot be read); and one with required pod
    affinity, anti-affinity or a `DoNotSchedule` spread unless the pods `placed` were read: then its replacement may go
    where they let it (`pod_affinity.ByPlacedPods`, a term's namespaceSelector read by `namespace_labels`; its own
    node alone when its terms cannot be read). Only a GPU pod's nodes are worked out (the planner moves no other),
    once per distinct constraint in `memo` (pods of one template share theirs). What it asks of its node is read from
    `asked` (by namespace and name) when the caller read it already for the nodes' rooms; of the scalar resources it
    asks, those of `scalars` (the ones the nodes' rooms count) are kept. Its allocation is read from `decoded` (by
    namespace and name) when the caller decoded it already for the cluster view. A pod terminating or ended never
    moves, so where its replacement could go is not worked out: kube-scheduler's spreads do not count it either.
    """
    metadata = as_mapping(pod.get("metadata"))
    spec = as_mapping(pod.get("spec"))
    namespace, name = str(metadata.get("namespace", "")), str(metadata.get("name", ""))
    try:
        requests = pod_requests(spec, config=config)
    except ModelError as err:
        raise type(err)(f"pod {namespace}/{name}: {err}") from None
    owners = [o for o in metadata.get("ownerReferences") or [] if isinstance(o, Mapping) and o.get("controller")]
    init = spec.get("initContainers")
    annotations = as_mapping(metadata.get("annotations"))
    placed_on = str(spec.get("nodeName") or "") if PLACED_BY in annotations else ""
    read = asked.get((namespace, name)) if asked is not None else None
    if read is None:
        try:
            read = pod_resources(spec)
        except RequestError as err:
            read = str(err)
    if isinstance(read, Resources):
        needs, unread = read.only(scalars), ""
    else:
        needs, unread = NOTHING, f"has a CPU or memory request kube-scheduler cannot read ({read})"
    on = str(spec.get("nodeName") or "")
    moves_volumes = volumes is not None and bool(on) and claims_volume(spec)
    nodes, untolerated, stays = *_ANY, ""
    gpu = any(requests)
    if gpu:
        nodes, untolerated = _reachable(spec, marks, placed_on, {} if memo is None else memo)
        stays = on_node_only(spec, moves_volumes, placed is not None) if on else ""
        nodes = _on_node(nodes, on) if stays else nodes
    local, claim = kept_storage(spec) if gpu else ("", False)
    named = (namespace, name)
    allocation = decoded[named] if decoded is not None and named in decoded else pod_allocation(pod)
    planned = PlanPod(
        namespace=namespace,
        name=name,
        uid=str(metadata.get("uid", "")),
        requests=requests,
        init_containers=len(init) if isinstance(init, list) else 0,
        annotations={key: value for key, value in annotations.items() if isinstance(value, str)},
        allocation=allocation,
        owner_kind=str(owners[0].get("kind", "")) if owners else "",
        owner_uid=str(owners[0].get("uid", "")) if owners else "",
        priority_class=str(spec.get("priorityClassName", "")),
        priority=_int(spec.get("priority")),
        nodes=nodes,
        untolerated=untolerated,
        default_policy=config.gpu_scheduler_policy,
        needs=needs,
        held=unread,
        labels=labels_of(metadata),
        created=time_or_none(metadata.get("creationTimestamp")),
        scheduled=_scheduled_at(pod),
        stays=stays,
        counts=counted_pods(spec, namespace, namespace_labels),
        local_storage=local,
        mounts_claim=claim,
    )
    ended = as_mapping(pod.get("status")).get("phase") in ENDED_PHASES
    if stays or not (on and gpu) or ended or metadata.get("deletionTimestamp"):
        return planned
    if volumes is not None and moves_volumes:
        reach = volume_reach(spec, namespace, name, volumes, marks.labels, replacement=True)
        if reach.unread:
            return replace(planned, nodes=_on_node(nodes, on), stays=reach.unread)
        planned = kept_off_nodes(planned, reach.kept_off)
    if placed is None or not placed_by_other_pods(spec):
        return planned
    terms, spreads = pod_terms(spec, namespace, namespace_labels), pod_spreads(spec, planned.labels)
    if terms is None or spreads is None:
        unread = "kube-scheduler places it by other pods, by terms the plan does not read"
        return replace(planned, nodes=_on_node(planned.nodes, on), stays=unread)
    allowed = selected_nodes(spec, marks, placed_on, memo) if spreads else None
    itself = PlacedPod(namespace, name, on, planned.labels)
    kept = placed.kept_off(itself, terms, spreads, allowed, frozenset(planned.untolerated))
    return kept_off_nodes(planned, kept)


def claims_volume(spec: Mapping[str, Any]) -> bool:
    """Whether the pod mounts a PersistentVolumeClaim (its own or an ephemeral one)."""
    volumes = spec.get("volumes")
    return isinstance(volumes, list | tuple) and any(map(is_claim, volumes))


def kept_storage(spec: Mapping[str, Any]) -> tuple[str, bool]:
    """The kind of the pod's first volume on its node's disk or memory (`emptyDir`, `hostPath`: the descheduler's
    local storage, whose contents a move loses; "" for none), and whether it mounts a PersistentVolumeClaim (an
    ephemeral volume's claim is made and deleted with its pod, so it keeps nothing across a move; the descheduler's
    ignorePvcPods skips it too). Names are left out: a hold's words reach other namespaces' Events, and a claim's
    name in a pod's spec is not checked by the API server. One pass, as every GPU pod of each snapshot is read."""
    volumes = spec.get("volumes")
    if not volumes or not isinstance(volumes, list | tuple):
        return "", False
    local, claim = "", False
    for volume in volumes:
        local = local or is_local(volume)
        claim = claim or (isinstance(volume, Mapping) and "persistentVolumeClaim" in volume)
    return local, claim


def is_local(volume: object) -> str:
    """The kind of a volume kept on its node (`emptyDir`, `hostPath`), "" for any other."""
    if not isinstance(volume, Mapping):
        return ""
    return "emptyDir" if "emptyDir" in volume else "hostPath" if "hostPath" in volume else ""


def placed_by_other_pods(spec: Mapping[str, Any]) -> bool:
    """Whether kube-scheduler places the pod by where other pods run: required pod affinity or anti-affinity (replicas
    spread one to a node), or a topology spread it must not break (`DoNotSchedule`, the default)."""
    affinity = as_mapping(spec.get("affinity"))
    for kind in ("podAffinity", "podAntiAffinity"):
        if as_mapping(affinity.get(kind)).get("requiredDuringSchedulingIgnoredDuringExecution"):
            return True
    spreads = spec.get("topologySpreadConstraints")
    if not isinstance(spreads, list | tuple):
        return False
    return any(
        isinstance(s, Mapping) and s.get("whenUnsatisfiable", "DoNotSchedule") == "DoNotSchedule" for s in spreads
    )


def takes_host_port(spec: Mapping[str, Any]) -> bool:
    """Whether a container of the pod takes a port of its node (`hostPort`; the API server sets it from the
    containerPort under hostNetwork), which kube-scheduler's NodePorts filter keeps other pods off; any init
    container's counts here, a reading wider than kube-scheduler's, which keeps such a pod on its node."""
    return bool(host_ports(spec, every_init_container=True))


def claims_resources(spec: Mapping[str, Any]) -> bool:
    """Whether the pod claims devices through dynamic resource allocation (`spec.resourceClaims`)."""
    claims = spec.get("resourceClaims")
    return isinstance(claims, list | tuple) and bool(claims)


def keep_counted_on_node(snapshot: Snapshot, pending: PlanPod) -> Snapshot:
    """The snapshot with the pods where the Pending pod may go depends on kept to their own node's cards: those its
    required pod (anti-)affinity and spreads count (`counts`), and those whose own count it (their anti-affinity
    keeps it out of their domains, which a move would change). Where it may go stays as kube-scheduler last judged
    it (a move between cards of one node changes no topology domain)."""
    counted = pending.counts
    if not counted and not any(pod.counts for pod in snapshot.pods):
        return snapshot
    pods = []
    for pod in snapshot.pods:
        node = pod.allocation.node if pod.allocation is not None else ""
        if node and counts_any(counted, pod.namespace, pod.labels):
            why = "the Pending pod's required pod affinity or spread counts it"
        elif node and counts_any(pod.counts, pending.namespace, pending.labels):
            why = "its required pod affinity or spread counts the Pending pod"
        else:
            pods.append(pod)
            continue
        stays = pod.stays or why
        pods.append(replace(pod, nodes=_on_node(pod.nodes, node), stays=stays))
    return replace(snapshot, pods=tuple(pods))


def kept_off_nodes(pod: PlanPod, kept_off: Mapping[str, tuple[str, str]]) -> PlanPod:
    """The pod kept off the nodes kube-scheduler's filters refuse (NodePorts, the volume filters, PodTopologySpread,
    InterPodAffinity: `pod_affinity`, `volumes`, each with the filter and why) of those it may run on: a node another
    filter refused first keeps that one's why."""
    kept = {node: why for node, why in kept_off.items() if pod.runs_on(node)}
    if not kept:
        return pod
    return replace(pod, kept_off={**pod.kept_off, **kept})


def on_node_only(spec: Mapping[str, Any], volumes_read: bool = False, pods_read: bool = False) -> str:
    """Why a placed pod may move only between its own node's cards ("" when it may go to other nodes): its volume
    claim may be bound to the node or its zone (a local PV, a zonal disk) unless the claims and their volumes were read
    (`volumes_read`: then `volumes.volume_reach` says where), as its resource claims may be to devices of its node,
    kube-scheduler places it by other pods unless the pods placed were read (`pods_read`: then
    `pod_affinity.ByPlacedPods` says where), or it takes a host port another node's pods may hold; the plan reads none
    of these, and kube-scheduler would refuse the replacement on another node (a move given up after its timeout)."""
    if claims_volume(spec) and not volumes_read:
        return "its volume claims were not read"
    if claims_resources(spec):
        return "it claims devices through resource claims"
    if placed_by_other_pods(spec) and not pods_read:
        return "kube-scheduler places it by other pods (required pod affinity or a DoNotSchedule spread)"
    if takes_host_port(spec):
        return "it takes a host port"
    return ""


Reachable = tuple[frozenset[str] | None, Mapping[str, str]]
"""The nodes a pod may run on (None: any) and, for each node its tolerations keep it off, the taint in words."""
_ANY: Reachable = (None, MappingProxyType({}))


def _on_node(nodes: frozenset[str] | None, node: str) -> frozenset[str]:
    """Of `nodes` (None: any), only `node`."""
    return frozenset({node}) if nodes is None or node in nodes else frozenset()


def _reachable(spec: Mapping[str, Any], marks: NodeMarks, placed_on: str, memo: dict[str, Reachable]) -> Reachable:
    """The nodes the pod's nodeSelector, required node affinity and tolerations allow, worked out once per distinct
    constraint in `memo` (pods of one template share theirs)."""
    selector = as_mapping(spec.get("nodeSelector"))
    terms = required_terms(spec, placed_on)
    if not selector and terms is None and not marks.taints:
        return _ANY
    tolerations = spec.get("tolerations") if marks.taints else None
    key = json.dumps([selector, terms, tolerations], sort_keys=True, default=str)
    if key not in memo:
        allowed, untolerated = reachable(selector, terms, tolerations, marks)
        memo[key] = (allowed, MappingProxyType(untolerated) if untolerated else _ANY[1])
    return memo[key]


def selected_nodes(
    spec: Mapping[str, Any], marks: NodeMarks, placed_on: str = "", memo: dict[str, Reachable] | None = None
) -> frozenset[str] | None:
    """The nodes the pod's nodeSelector and required node affinity allow, its tolerations aside (None: any): those a
    `DoNotSchedule` spread counts under nodeAffinityPolicy Honor. Without the hostname pin our webhook merged on
    `placed_on`; found once per distinct selection in `memo` (pods of one template share the set, and its hash)."""
    selector, terms = as_mapping(spec.get("nodeSelector")), required_terms(spec, placed_on)
    if not selector and terms is None:
        return None
    key = json.dumps(["selected", selector, terms], sort_keys=True, default=str)
    memo = {} if memo is None else memo
    if key not in memo:
        memo[key] = (reachable(selector, terms, None, NodeMarks(marks.labels))[0], _ANY[1])
    return memo[key][0]


def _int(value: object) -> int:
    """An integer field, 0 when absent or malformed."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def scheduled_condition(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    """The pod's PodScheduled condition ({} without one): when it was bound, or since when and why the scheduler
    refuses it."""
    conditions = as_mapping(pod.get("status")).get("conditions")
    for condition in conditions if isinstance(conditions, list) else ():
        if isinstance(condition, Mapping) and condition.get("type") == "PodScheduled":
            return condition
    return {}


def _scheduled_at(pod: Mapping[str, Any]) -> datetime | None:
    """When the pod was bound to its node (its PodScheduled=True condition's transition), else None."""
    condition = scheduled_condition(pod)
    return time_or_none(condition.get("lastTransitionTime")) if condition.get("status") == "True" else None
