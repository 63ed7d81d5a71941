"""Placement status writes guarded by the resourceVersion that was read: the one mechanism behind exactly-once.

Every status change the webhook makes (a claim, a failure, an eviction attempt, an expiry) goes through
`write_status`: a PUT of the status subresource carrying the resourceVersion of the copy the decision was made
on. When another replica (or the user) changed the placement meanwhile, the API server answers 409 and nothing is
written; the caller re-reads and decides again.
"""

from __future__ import annotations

from typing import Any

from kubectl_hami_place.core.names import API_VERSION, GROUP, KIND, PLURAL, VERSION
from kubectl_hami_place.core.placement import Placement, PlacementStatus, spec_to_object, status_to_object
from kubectl_hami_place.kube.client import Kube, request
from kubectl_hami_place.kube.errors import KubeConflict, KubeNotFound


class StaleWrite(Exception):
    """The placement changed (409) or vanished (404) since it was read: re-read and decide again."""


def read_placement(kube: Kube, namespace: str, name: str) -> dict[str, Any] | None:
    """The placement as the API server has it now (not the cache's copy), or None when it is gone."""
    try:
        return request(
            kube,
            kube.custom().get_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            name,
            what=f"get {PLURAL} in namespace {namespace}",
        )
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
