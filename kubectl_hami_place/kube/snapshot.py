"""Reads what the planner needs: every node, every pod, every PodDisruptionBudget (policy/v1), HAMi's device config."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple

from kubectl_hami_place.core.attach_limits import UNREAD_LIMITS, attach_limits_of
from kubectl_hami_place.core.defrag.triggers import PendingPod, pending_pod
from kubectl_hami_place.core.fields import as_mapping
from kubectl_hami_place.core.hami_config import HamiConfig
from kubectl_hami_place.core.node_resources import CountedPod
from kubectl_hami_place.core.node_selection import NodeMarks, node_marks
from kubectl_hami_place.core.planner import PlanPod, Snapshot
from kubectl_hami_place.core.planner.objects import claims_volume, pod_for_plan, snapshot_from_objects
from kubectl_hami_place.core.pod_affinity import (
    UNREAD_NAMESPACES,
    NamespaceLabels,
    labels_of,
    namespace_labels_of,
    picks_namespaces_by_labels,
    pod_spreads,
    pod_terms,
    selected_lists,
)
from kubectl_hami_place.core.usage import PodAllocation
from kubectl_hami_place.core.volumes import (
    UNREAD_CAPACITIES,
    UNREAD_CLAIMS,
    UNREAD_CLASSES,
    Volumes,
    volumes_of,
    waits_unbound,
)
from kubectl_hami_place.kube.client import Kube, request
from kubectl_hami_place.kube.cluster_reads import (
    get_pod,
    list_csi_drivers,
    list_csi_nodes,
    list_namespaces,
    list_nodes,
    list_pods,
    list_storage_capacities,
    list_storage_classes,
    list_volume_attachments,
    list_volume_claims,
    list_volumes,
)
from kubectl_hami_place.kube.errors import KubeForbidden
from kubectl_hami_place.kube.hami_config import read_hami_config
from kubectl_hami_place.kube.list_body import list_items
from kubectl_hami_place.kube.watch import NOT_ENDED


@dataclass(frozen=True)
class SnapshotRead:
    """The snapshot, the HAMi config it was read with, and warnings for the user."""

    snapshot: Snapshot
    config: HamiConfig
    warnings: tuple[str, ...]
    node_marks: NodeMarks
    pods: tuple[dict[str, Any], ...] = ()
    nodes: tuple[dict[str, Any], ...] = ()
    volumes: Volumes | None = None
    namespace_labels: NamespaceLabels | None = None


def read_snapshot(kube: Kube, hami_config: str = "", gpu_scheduler_policy: str = "") -> SnapshotRead:
    """The cluster as the planner sees it now, with the objects it was read from; HAMi's device config from the
    ConfigMap `hami_config` (`namespace/name`), else found by its name; its default GPU policy given, else read."""
    config = read_hami_config(kube, hami_config, gpu_scheduler_policy)
    nodes = list_nodes(kube)
    pods = list_pods(kube, None)
    body = request(
        kube,
        kube.policy().list_pod_disruption_budget_for_all_namespaces,
        what="list poddisruptionbudgets.policy in all namespaces",
    )
    notices = (config.notice,) if config.notice else ()
    volumes, unread = read_volumes(kube, pods)
    namespace_labels, unlabelled = read_namespace_labels(kube, pods)
    return snapshot_of(
        nodes,
        pods,
        list_items(body),
        config.config,
        (*notices, *unread, *unlabelled),
        volumes=volumes,
        namespace_labels=namespace_labels,
    )


class Unread(NamedTuple):
    """What a reader leaves unread without the claims and volumes, the CSINodes and VolumeAttachments, the
    StorageClasses and CSIDrivers, and the CSIStorageCapacities, in its own words."""

    claims: str = UNREAD_CLAIMS
    limits: str = UNREAD_LIMITS
    classes: str = UNREAD_CLASSES
    capacities: str = UNREAD_CAPACITIES


PLAN_UNREAD = Unread()
"""What a plan leaves unread without each storage list."""


def read_volumes(
    kube: Kube, pods: Iterable[Mapping[str, Any]], unread: Unread = PLAN_UNREAD
) -> tuple[Volumes | None, tuple[str, ...]]:
    """The claims and volumes, when a pod claims one (None otherwise), with the CSI attach limits, and the
    StorageClasses, CSI drivers and CSIStorageCapacities when a claim is not bound yet; and the warning when they may
    not be read, saying what is left `unread` (a plan's pods stay on their nodes, as they would without them, and a
    claim not bound yet stays unread)."""
    if not any(claims_volume(as_mapping(pod.get("spec"))) for pod in pods):
        return None, ()
    try:
        claims, volumes = list_volume_claims(kube), list_volumes(kube)
    except KubeForbidden as err:
        return None, (f"cannot read claims and volumes ({err}); {unread.claims}",)
    try:
        attach = attach_limits_of(list_csi_nodes(kube), list_volume_attachments(kube))
    except KubeForbidden as err:
        return None, (f"cannot read CSI nodes and volume attachments ({err}); {unread.limits}",)
    if not waits_unbound(claims):
        return volumes_of(claims, volumes, attach=attach), ()
    try:
        classes, drivers = list_storage_classes(kube), list_csi_drivers(kube)
    except KubeForbidden as err:
        said = f"cannot read storage classes and CSI drivers ({err}); {unread.classes}"
        return volumes_of(claims, volumes, attach=attach), (said,)
    try:
        return volumes_of(claims, volumes, classes, drivers, list_storage_capacities(kube), attach=attach), ()
    except KubeForbidden as err:
        said = f"cannot read CSI storage capacities ({err}); {unread.capacities}"
        return volumes_of(claims, volumes, classes, drivers, attach=attach), (said,)


def read_namespace_labels(
    kube: Kube, pods: Iterable[Mapping[str, Any]]
) -> tuple[NamespaceLabels | None, tuple[str, ...]]:
    """The namespaces' labels, when a pod's pod affinity term picks namespaces by them (None otherwise), and the
    warning when they may not be read: such a pod then stays on its node, and where it may go stays unread."""
    if not any(picks_namespaces_by_labels(as_mapping(pod.get("spec"))) for pod in pods):
        return None, ()
    try:
        return namespace_labels_of(list_namespaces(kube)), ()
    except KubeForbidden as err:
        return None, (f"cannot read namespaces ({err}); {UNREAD_NAMESPACES}",)


def snapshot_of(
    nodes: Sequence[dict[str, Any]],
    pods: Sequence[dict[str, Any]],
    budgets: Iterable[dict[str, Any]],
    config: HamiConfig,
    notices: tuple[str, ...] = (),
    *,
    others: Iterable[CountedPod] = (),
    volumes: Volumes | None = None,
    namespace_labels: NamespaceLabels | None = None,
    allocations: Mapping[tuple[str, str], tuple[Mapping[str, Any], PodAllocation | str]] | None = None,
) -> SnapshotRead:
    """The planner's snapshot of objects already read (lists, or the server's watch caches, whose pods of other
    schedulers come as `others`, counted in their nodes' rooms only; `volumes` the claims and volumes, None when not
    read; `namespace_labels` the namespaces' labels, None when not read; `allocations` those the cache decoded, as
    `snapshot_from_objects` takes them)."""
    snapshot, warnings = snapshot_from_objects(
        nodes,
        pods,
        budgets,
        datetime.now(UTC),
        config,
        others=others,
        volumes=volumes,
        namespace_labels=namespace_labels,
        allocations=allocations,
    )
    marks = node_marks(nodes)
    return SnapshotRead(
        snapshot, config, (*notices, *warnings), marks, tuple(pods), tuple(nodes), volumes, namespace_labels
    )


def read_pod(kube: Kube, namespace: str, name: str, read: SnapshotRead) -> PlanPod:
    """One pod as the planner sees it, with the snapshot's nodes and config; `KubeNotFound` when it does not exist."""
    pod = get_pod(kube, namespace, name)
    return pod_for_plan(
        pod,
        read.node_marks,
        read.config,
        volumes=read.volumes,
        namespace_labels=read.namespace_labels,
        scalars=read.snapshot.scalars,
    )


def read_pending(kube: Kube, namespace: str, name: str, read: SnapshotRead) -> PendingPod:
    """The pod to make room for, read with the snapshot's nodes, pods and config; `KubeNotFound` when it does not
    exist."""
    pod = get_pod(kube, namespace, name)
    return pending_pod(
        pod,
        read.node_marks,
        read.config,
        read.pods,
        read.snapshot,
        volumes=read.volumes,
        namespace_labels=read.namespace_labels,
    )


BOUND = f"spec.nodeName!=,{NOT_ENDED}"
"""The pods kube-scheduler counts for a pod affinity term or a topology spread (`pod_affinity.placed_pods`), as a
field selector."""


def selected_pods(
    kube: Kube, pod: Mapping[str, Any], namespace_labels: NamespaceLabels | None = None
) -> list[dict[str, Any]] | None:
    """The bound pods the pod's required pod affinity terms and `DoNotSchedule` topology spreads select, listed by
    each one's label selector in its namespaces (a namespaceSelector's by `namespace_labels`); None when one cannot
    be read (`pod_affinity`)."""
    metadata, spec = as_mapping(pod.get("metadata")), as_mapping(pod.get("spec"))
    namespace = str(metadata.get("namespace", ""))
    terms, spreads = pod_terms(spec, namespace, namespace_labels), pod_spreads(spec, labels_of(metadata))
    if terms is None or spreads is None:
        return None
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for wanted in selected_lists(terms, spreads, namespace):
        for listed in list_pods(kube, wanted.namespace, str(wanted.selector), BOUND):
            meta = as_mapping(listed.get("metadata"))
            found[(str(meta.get("namespace", "")), str(meta.get("name", "")))] = listed
    return list(found.values())
