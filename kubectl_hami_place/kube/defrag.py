"""What the defragmentation controller reads and writes besides moves: its policy's ConfigMap, the scheduler's
FailedScheduling Events, and the placements of its runs, which are also its history.

Every move stays a placement named after the move and labelled with its run (`DEFRAG_RUN_LABEL`); its annotations
name the pod it evicts, that pod's UID and the node it leaves. The budgets and cooldowns count those placements, so
a new leader knows what the last one did, and `kubectl hami-place list` shows them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote

from kubectl_hami_place.core.defrag.budget import MoveRecord
from kubectl_hami_place.core.names import (
    DEFRAG_FROM_NODE_ANNOTATION,
    DEFRAG_POD_ANNOTATION,
    DEFRAG_POD_UID_ANNOTATION,
    DEFRAG_POLICY_KEY,
    DEFRAG_RUN_LABEL,
)
from kubectl_hami_place.core.planner import Move
from kubectl_hami_place.kube import placements
from kubectl_hami_place.kube.client import Kube, by_path, list_items, request

MANAGED_BY = {"app.kubernetes.io/managed-by": "hami-place-defrag"}
# A placement's phase, as a move's result in the history (the budgets count all but Blocked and DryRun).
_RESULTS = {"Pending": "Pending", "Evicting": "Pending", "Consumed": "Evicted", "Failed": "Failed", "Expired": "Failed"}


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
    obj = request(kube, by_path(kube.api, "GET", path), what=f"get configmaps in namespace {namespace}")
    text = (obj.get("data") or {}).get(DEFRAG_POLICY_KEY)
    return PolicySource({"apiVersion": "v1", "kind": "ConfigMap", **obj}, text if isinstance(text, str) else None)


def failed_scheduling_events(kube: Kube) -> list[dict[str, Any]]:
    """Every FailedScheduling Event, in all namespaces (the scheduler's reasons for each Pending pod)."""
    call = by_path(kube.api, "GET", "/api/v1/events")
    body = request(kube, call, what="list events in all namespaces", field_selector="reason=FailedScheduling")
    return list_items(body)


def run_placements(kube: Kube) -> list[dict[str, Any]]:
    """Every placement a defragmentation run made, in all namespaces."""
    return placements.list_placements(kube, None, label_selector=DEFRAG_RUN_LABEL)


def move_labels(run_id: str) -> dict[str, str]:
    """The labels of a move's placement."""
    return {**MANAGED_BY, DEFRAG_RUN_LABEL: run_id}


def move_annotations(move: Move) -> dict[str, str]:
    """The annotations of a move's placement: the pod it evicts and the node it leaves."""
    return {
        DEFRAG_POD_ANNOTATION: move.pod,
        DEFRAG_POD_UID_ANNOTATION: move.uid,
        DEFRAG_FROM_NODE_ANNOTATION: move.from_node,
    }


def move_records(objects: Iterable[Mapping[str, Any]]) -> tuple[MoveRecord, ...]:
    """The history of moves from the runs' placements (a placement without our annotations is skipped)."""
    records = []
    for obj in objects:
        metadata = obj.get("metadata") or {}
        annotations = metadata.get("annotations") or {}
        run_id = (metadata.get("labels") or {}).get(DEFRAG_RUN_LABEL)
        pod = annotations.get(DEFRAG_POD_ANNOTATION)
        created = _time(metadata.get("creationTimestamp"))
        if not run_id or not pod or created is None:
            continue
        status = obj.get("status") or {}
        consumed = status.get("consumedBy") or {}
        namespace = str(metadata.get("namespace", ""))
        records.append(
            MoveRecord(
                run_id=run_id,
                pod=pod,
                namespace=pod.split("/", 1)[0],
                from_node=str(annotations.get(DEFRAG_FROM_NODE_ANNOTATION, "")),
                time=created,
                result=_RESULTS.get(str(status.get("phase") or "Pending"), "Pending"),
                to_node=str((obj.get("spec") or {}).get("nodeName", "")),
                replacement=f"{namespace}/{consumed['name']}" if consumed.get("name") else "",
            )
        )
    return tuple(sorted(records, key=lambda record: record.time))


def _time(value: object) -> datetime | None:
    """An RFC 3339 time, or None."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None
