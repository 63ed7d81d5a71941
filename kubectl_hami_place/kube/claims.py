"""Placement status writes guarded by the resourceVersion that was read: the one mechanism behind exactly-once.

Every status change the webhook makes (a claim, a failure, an eviction attempt, an expiry) goes through
`write_status`: a PUT of the status subresource carrying the resourceVersion of the copy the decision was made
on. When another replica (or the user) changed the placement meanwhile, the API server answers 409 and nothing is
written; the caller re-reads and decides again.

A reqID is guarded the same way, by a create that can succeed once: before a claim is written, a Lease named after
(namespace, reqID) is created holding the placement's UID, so two placements sharing a reqID claimed at the same
moment by two replicas cannot both be consumed. The guards live in the server's Lease namespace (one of their own,
in the chart), so that its rights on Leases are those of one namespace, and no tenant can create a Lease of a
guard's name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kubernetes import client

from kubectl_hami_place.core.lifecycle import GUARD_LABEL, GUARD_LABEL_VALUE, req_id_guard_name
from kubectl_hami_place.core.names import (
    API_VERSION,
    GROUP,
    KIND,
    PLACEMENT_ANNOTATION,
    PLACEMENT_NAMESPACE_ANNOTATION,
    PLURAL,
    REQ_ID_ANNOTATION,
    VERSION,
)
from kubectl_hami_place.core.placement import Placement, PlacementStatus, spec_to_object, status_to_object
from kubectl_hami_place.kube.client import Kube, request
from kubectl_hami_place.kube.errors import KubeConflict, KubeNotFound
from kubectl_hami_place.kube.list_body import list_items
from kubectl_hami_place.kube.placements import get_placement


class StaleWrite(Exception):
    """The placement changed (409) or vanished (404) since it was read: re-read and decide again."""


def read_placement(kube: Kube, namespace: str, name: str) -> dict[str, Any] | None:
    """The placement as the API server has it now (not the cache's copy), or None when it is gone."""
    try:
        return get_placement(kube, namespace, name)
    except KubeNotFound:
        return None


def write_status(kube: Kube, placement: Placement, status: PlacementStatus) -> dict[str, Any]:
    """Replace the placement's status, only if it is still at the resourceVersion it was read at.

    Returns the stored placement (with its new resourceVersion); raises StaleWrite when someone else changed it.
    """
    namespace, name = placement.namespace, placement.name
    body = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, "namespace": namespace, "resourceVersion": placement.resource_version},
        "spec": spec_to_object(placement.spec),
        "status": status_to_object(status),
    }
    try:
        return request(
            kube,
            kube.custom().replace_namespaced_custom_object_status,
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            name,
            body,
            what=f"update {PLURAL}/status in namespace {namespace}",
        )
    except (KubeConflict, KubeNotFound) as error:
        raise StaleWrite(f"placement {namespace}/{name} changed since it was read") from error


@dataclass(frozen=True)
class Guard:
    """A reqID guard as stored: a Lease (in `namespace`, the server's Lease namespace) whose holder is the UID of the
    one placement allowed to use that reqID, `holder_name` in `holder_namespace`."""

    namespace: str
    name: str
    uid: str
    holder_uid: str
    holder_name: str
    holder_namespace: str


def hold_req_id(kube: Kube, namespace: str, holder: Placement) -> Guard:
    """Create, in `namespace` (the server's), the guard of the holder's reqID held by it; when it exists already,
    the stored one (maybe another's).

    The create can succeed once per (placement namespace, reqID): the API server, not a cache, says who uses a
    reqID. A Lease of the guard's name without our label is not a guard and blocks nothing: that very Lease is
    deleted (anyone who may create Leases in the namespace could have made it, to hold the reqID) and ours created
    in its place.
    """
    name = req_id_guard_name(holder.namespace, holder.spec.req_id)
    annotations = {
        PLACEMENT_ANNOTATION: holder.name,
        PLACEMENT_NAMESPACE_ANNOTATION: holder.namespace,
        REQ_ID_ANNOTATION: holder.spec.req_id,
    }
    body = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {GUARD_LABEL: GUARD_LABEL_VALUE},
            "annotations": annotations,
        },
        "spec": {"holderIdentity": holder.uid},
    }
    api = client.CoordinationV1Api(kube.api)
    what = f"create leases in namespace {namespace}"
    for _ in range(2):
        try:
            return _guard(request(kube, api.create_namespaced_lease, namespace, body, what=what))
        except KubeConflict:
            stored = request(kube, api.read_namespaced_lease, name, namespace, what=f"get leases in {namespace}")
        if _ours(stored):
            return _guard(stored)
        release_guard(kube, _guard(stored))
    raise KubeConflict(f"lease {namespace}/{name} is not a hami-place reqID guard and came back after it was deleted")


def _ours(lease: dict[str, Any]) -> bool:
    """Whether a stored Lease carries the guards' label."""
    labels = (lease.get("metadata") or {}).get("labels") or {}
    return bool(labels.get(GUARD_LABEL) == GUARD_LABEL_VALUE)


def list_guards(kube: Kube, namespace: str) -> list[Guard]:
    """Every reqID guard in `namespace` (the server's)."""
    api = client.CoordinationV1Api(kube.api)
    found = request(
        kube,
        api.list_namespaced_lease,
        namespace,
        label_selector=f"{GUARD_LABEL}={GUARD_LABEL_VALUE}",
        what=f"list leases in namespace {namespace}",
    )
    return [_guard(item) for item in list_items(found)]


def release_guard(kube: Kube, guard: Guard) -> None:
    """Delete that guard (that very object: a newer one of the same name stays); gone already is fine."""
    api = client.CoordinationV1Api(kube.api)
    options = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=guard.uid))
    try:
        request(
            kube,
            api.delete_namespaced_lease,
            guard.name,
            guard.namespace,
            body=options,
            what=f"delete leases in namespace {guard.namespace}",
        )
    except (KubeNotFound, KubeConflict):
        return


def _guard(lease: dict[str, Any]) -> Guard:
    """A stored Lease as a Guard."""
    metadata = lease.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    return Guard(
        namespace=str(metadata.get("namespace") or ""),
        name=str(metadata.get("name") or ""),
        uid=str(metadata.get("uid") or ""),
        holder_uid=str((lease.get("spec") or {}).get("holderIdentity") or ""),
        holder_name=str(annotations.get(PLACEMENT_ANNOTATION) or ""),
        holder_namespace=str(annotations.get(PLACEMENT_NAMESPACE_ANNOTATION) or ""),
    )
