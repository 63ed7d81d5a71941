"""The defragmentation controller's objects as the CLI and the controller read and write them: the DefragPolicy
ConfigMap, the leader Lease, the placements its runs made (labelled with the run; annotated with the pod each move
evicts, its UID and the node it leaves), and the scheduler's FailedScheduling Events, all as plain dicts.
"""

from __future__ import annotations

from typing import Any

from kubectl_hami_place.core.names import (
    COMPONENT_LABEL,
    DEFRAG_FROM_NODE_ANNOTATION,
    DEFRAG_LEASE,
    DEFRAG_POD_ANNOTATION,
    DEFRAG_POD_UID_ANNOTATION,
    DEFRAG_POLICY_COMPONENT,
    DEFRAG_RUN_LABEL,
    GROUP,
    PLURAL,
    VERSION,
)
from kubectl_hami_place.core.planner import Move
from kubectl_hami_place.kube.client import Kube, by_path, list_items, request
from kubectl_hami_place.kube.errors import KubeError, KubeNotFound

FIELD_MANAGER = "kubectl-hami-place"
MANAGED_BY = {"app.kubernetes.io/managed-by": "hami-place-defrag"}


def read_policy(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    """The policy ConfigMap `namespace/name`; KubeNotFound when it does not exist."""
    return request(
        kube, kube.core().read_namespaced_config_map, name, namespace, what=f"get configmaps in namespace {namespace}"
    )


def find_policy(kube: Kube) -> dict[str, Any]:
    """The one ConfigMap labelled as the chart's DefragPolicy, in any namespace."""
    body = request(
        kube,
        kube.core().list_config_map_for_all_namespaces,
        label_selector=f"{COMPONENT_LABEL}={DEFRAG_POLICY_COMPONENT}",
        what="list configmaps",
    )
    found = list_items(body)
    if not found:
        raise KubeNotFound(
            f"no DefragPolicy ConfigMap (label {COMPONENT_LABEL}={DEFRAG_POLICY_COMPONENT}) in any namespace",
            "install the chart, or pass --policy NAMESPACE/NAME",
        )
    if len(found) > 1:
        names = ", ".join(sorted(policy_ref(item) for item in found))
        raise KubeError(f"several DefragPolicy ConfigMaps: {names}", "pass --policy NAMESPACE/NAME")
    return found[0]


def policy_ref(config_map: dict[str, Any]) -> str:
    """`namespace/name` of a ConfigMap."""
    metadata = config_map.get("metadata") or {}
    return f"{metadata.get('namespace', '')}/{metadata.get('name', '')}"


def patch_policy(
    kube: Kube,
    config_map: dict[str, Any],
    data: dict[str, str],
    annotations: dict[str, str | None],
    dry_run: bool = False,
) -> dict[str, Any]:
    """Writes `data` keys and `annotations` (None removes one) on the ConfigMap as it was read; KubeConflict when it
    changed since (its resourceVersion)."""
    metadata = config_map.get("metadata") or {}
    namespace, name = str(metadata.get("namespace", "")), str(metadata.get("name", ""))
    body = {
        "metadata": {"resourceVersion": metadata.get("resourceVersion"), "annotations": annotations},
        "data": data,
    }
    kwargs: dict[str, Any] = {"field_manager": FIELD_MANAGER}
    if dry_run:
        kwargs["dry_run"] = "All"
    return request(
        kube,
        kube.core().patch_namespaced_config_map,
        name,
        namespace,
        body,
        what=f"patch configmaps in namespace {namespace}",
        **kwargs,
    )


def read_leader_lease(kube: Kube, namespace: str) -> dict[str, Any] | None:
    """The controller's leader Lease in the server's namespace, or None when no replica ever led."""
    try:
        return request(
            kube,
            kube.coordination().read_namespaced_lease,
            DEFRAG_LEASE,
            namespace,
            what=f"get leases in namespace {namespace}",
        )
    except KubeNotFound:
        return None


def list_move_placements(kube: Kube) -> list[dict[str, Any]]:
    """Every placement a run of the controller made, in any namespace."""
    body = request(
        kube,
        kube.custom().list_cluster_custom_object,
        GROUP,
        VERSION,
        PLURAL,
        label_selector=DEFRAG_RUN_LABEL,
        what=f"list {PLURAL}",
    )
    return list_items(body)


def failed_scheduling_events(kube: Kube) -> list[dict[str, Any]]:
    """Every FailedScheduling Event, in all namespaces (the scheduler's reasons for each Pending pod)."""
    call = by_path(kube.api, "GET", "/api/v1/events")
    body = request(kube, call, what="list events in all namespaces", field_selector="reason=FailedScheduling")
    return list_items(body)


def move_labels(run_id: str) -> dict[str, str]:
    """The labels of a move's placement the controller creates."""
    return {**MANAGED_BY, DEFRAG_RUN_LABEL: run_id}


def move_annotations(move: Move) -> dict[str, str]:
    """The annotations of a move's placement: the pod it evicts (and its UID) and the node it leaves."""
    return {
        DEFRAG_POD_ANNOTATION: move.pod,
        DEFRAG_POD_UID_ANNOTATION: move.uid,
        DEFRAG_FROM_NODE_ANNOTATION: move.from_node,
    }
