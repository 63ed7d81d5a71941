"""What the defragmentation controller and the `defrag` verb read and write besides moves: the policy's ConfigMap,
the leader Lease, the scheduler's FailedScheduling Events, the placements of its runs, which are also its history,
and the annotations of a rescued pod that keep its room (`core.reservation`).

Every move stays a placement named after the move and labelled with its run (`DEFRAG_RUN_LABEL`); its annotations
name the pod it evicts, that pod's UID and the node it leaves. The budgets and cooldowns count those placements, so
a new leader knows what the last one did, and `kubectl hami-place list` shows them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from kubectl_hami_place.core.access import DEFRAG_MOVES_PATH
from kubectl_hami_place.core.defrag.budget import MoveRecord, card_names_value, history_from_placements
from kubectl_hami_place.core.defrag.report import moves_from_document
from kubectl_hami_place.core.names import (
    COMPONENT_LABEL,
    DEFRAG_FROM_CARDS_ANNOTATION,
    DEFRAG_FROM_NODE_ANNOTATION,
    DEFRAG_LEASE,
    DEFRAG_POD_ANNOTATION,
    DEFRAG_POD_UID_ANNOTATION,
    DEFRAG_POLICY_COMPONENT,
    DEFRAG_POLICY_KEY,
    DEFRAG_RUN_LABEL,
    DEFRAG_TO_CARDS_ANNOTATION,
    RESCUED_BY_ANNOTATION,
)
from kubectl_hami_place.core.planner import Move
from kubectl_hami_place.core.reservation import RoomKey
from kubectl_hami_place.kube import placements
from kubectl_hami_place.kube.client import Kube, by_path, path_segment, request
from kubectl_hami_place.kube.cluster_reads import first_webhook_answer
from kubectl_hami_place.kube.errors import KubeNotFound
from kubectl_hami_place.kube.list_body import list_items
from kubectl_hami_place.kube.pods import change_pod

FIELD_MANAGER = "kubectl-hami-place"
MANAGED_BY = {"app.kubernetes.io/managed-by": "hami-place-defrag"}
FAILED_SCHEDULING_FIELDS = ("reason", "message", "involvedObject", "lastTimestamp", "eventTime", "series")
EVENT_METADATA = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")


@dataclass(frozen=True)
class PolicySource:
    """The policy's ConfigMap as read: the object (Events name it) and its `policy.yaml`, None when missing."""

    obj: dict[str, Any]
    text: str | None

    @property
    def version(self) -> str:
        """The ConfigMap's resourceVersion: a new one means the policy may have changed."""
        return str((self.obj.get("metadata") or {}).get("resourceVersion", ""))


def read_policy(kube: Kube, namespace: str, name: str) -> PolicySource:
    """The policy's ConfigMap; `KubeNotFound` when it does not exist."""
    path = f"/api/v1/namespaces/{quote(namespace, safe='')}/configmaps/{quote(name, safe='')}"
    return policy_source(request(kube, by_path(kube.api, "GET", path), what=f"get configmaps in namespace {namespace}"))


def labelled_policies(kube: Kube, namespace: str | None = None) -> list[dict[str, Any]]:
    """Every ConfigMap labelled as the chart's DefragPolicy, in `namespace` or, when None, in any namespace."""
    selector = f"{COMPONENT_LABEL}={DEFRAG_POLICY_COMPONENT}"
    if namespace is not None:
        body = request(
            kube,
            kube.core().list_namespaced_config_map,
            namespace,
            label_selector=selector,
            what=f"list configmaps in namespace {namespace}",
        )
    else:
        body = request(
            kube, kube.core().list_config_map_for_all_namespaces, label_selector=selector, what="list configmaps"
        )
    return list_items(body)


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


def read_priority_value(kube: Kube, name: str) -> object:
    """The `value` of the PriorityClass `name` (a policy's `priorityThreshold: {name: ...}`, checked as a name by
    the policy's parse), as the API server stores it; KubeError (404 when there is none, 403 without `get` on it)."""
    path = f"/apis/scheduling.k8s.io/v1/priorityclasses/{path_segment(name)}"
    return request(kube, by_path(kube.api, "GET", path), what="get priorityclasses").get("value")


def read_leader_lease(kube: Kube, namespace: str) -> dict[str, Any] | None:
    """The controller's leader Lease in `namespace` (the server's Lease namespace), or None when no replica ever led."""
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


def project_failed_scheduling(event: dict[str, Any]) -> dict[str, Any]:
    """What the controller reads of a FailedScheduling Event: its pod, reason, message and times."""
    metadata = event.get("metadata") or {}
    kept = {key: event[key] for key in FAILED_SCHEDULING_FIELDS if key in event}
    kept["metadata"] = {key: metadata[key] for key in EVENT_METADATA if key in metadata}
    return kept


def policy_source(config_map: dict[str, Any]) -> PolicySource:
    """The policy as a ConfigMap read or watched holds it."""
    text = (config_map.get("data") or {}).get(DEFRAG_POLICY_KEY)
    return PolicySource(
        {"apiVersion": "v1", "kind": "ConfigMap", **config_map}, text if isinstance(text, str) else None
    )


def run_placements(kube: Kube) -> list[dict[str, Any]]:
    """Every placement a defragmentation run made, in all namespaces."""
    return placements.list_placements(kube, None, label_selector=DEFRAG_RUN_LABEL)


def run_history(kube: Kube, key: RoomKey | None = None) -> tuple[MoveRecord, ...]:
    """The moves the run placements record, newest first: with a shared `key`, only those whose seal checks."""
    return history_from_placements(run_placements(kube), key)


@dataclass(frozen=True)
class MovesRead:
    """The controller's moves, whether their seals were checked, and where they came from, in words for the user."""

    moves: tuple[MoveRecord, ...]
    sealed: bool
    source: str


def read_moves(kube: Kube, server_namespace: str | None = None) -> MovesRead:
    """The moves as the first webhook Service that answers gives them (a server holds the key their seals check
    with; one of `server_namespace` asked first), else every placement labelled with a run, read from the API
    server with no seal checked."""
    answer, said = first_webhook_answer(kube, DEFRAG_MOVES_PATH, moves_from_document, server_namespace)
    if answer is not None:
        moves, sealed = answer
        return MovesRead(moves, sealed, said)
    return MovesRead(run_history(kube), False, f"the API server ({said})")


def move_labels(run_id: str) -> dict[str, str]:
    """The labels of a move's placement."""
    return {**MANAGED_BY, DEFRAG_RUN_LABEL: run_id}


def move_annotations(move: Move, card_names: Mapping[str, str]) -> dict[str, str]:
    """The annotations of a move's placement: the pod it evicts, the node it leaves and, by `card_names` (UUID ->
    `gpu-N`), the cards it leaves and those it pins (each side only when every card of it is named)."""
    annotations = {
        DEFRAG_POD_ANNOTATION: move.pod,
        DEFRAG_POD_UID_ANNOTATION: move.uid,
        DEFRAG_FROM_NODE_ANNOTATION: move.from_node,
    }
    for key, cards in ((DEFRAG_FROM_CARDS_ANNOTATION, move.from_cards), (DEFRAG_TO_CARDS_ANNOTATION, move.to_cards)):
        if all(uuid in card_names for uuid in cards):
            annotations[key] = card_names_value(card_names[uuid] for uuid in cards)
    return annotations


def change_pod_annotations(
    kube: Kube,
    namespace: str,
    name: str,
    uid: str,
    change: Callable[[dict[str, str]], dict[str, str]],
    *,
    unscheduled: bool = False,
) -> dict[str, Any] | None:
    """Reads the pod and writes `change(its annotations)` as a JSON patch made by diff, guarded by the pod's UID (a
    pod of that name made since is left alone): the pod as stored after, None when it is gone or another pod (or,
    with `unscheduled`, already has a node: then it is not changed)."""

    def annotated(pod: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]] | None:
        if unscheduled and (pod.get("spec") or {}).get("nodeName"):
            return None
        own = (pod.get("metadata") or {}).get("annotations")
        annotations = {str(key): str(value) for key, value in own.items()} if isinstance(own, dict) else {}
        before = {"annotations": own} if own is not None else {}
        wanted = change(annotations)
        after = {"annotations": wanted} if wanted or own is not None else {}
        return {"metadata": before}, {"metadata": after}, []

    return change_pod(kube, namespace, name, uid, annotated)


def send_back(kube: Kube, namespace: str, name: str, uid: str, by: str) -> dict[str, Any] | None:
    """Annotates a Pending pod with what made its room (RESCUED_BY_ANNOTATION, `by`): the update has kube-scheduler try
    it again at once, where the deletions that made the room may not (before kubernetes#122019's fix it waits for a
    5-minute sweep). The pod as stored after; None when it is gone, another pod, or already scheduled (left alone)."""
    return change_pod_annotations(
        kube, namespace, name, uid, lambda annotations: {**annotations, RESCUED_BY_ANNOTATION: by}, unscheduled=True
    )
