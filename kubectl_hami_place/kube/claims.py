"""Placement status writes guarded by the resourceVersion that was read: the one mechanism behind exactly-once.

Every status change the webhook makes (a claim, a failure, an eviction attempt, an expiry) goes through
`write_status`: a PUT of the status subresource carrying the resourceVersion of the copy the decision was made
on. When another replica (or the user) changed the placement meanwhile, the API server answers 409 and nothing is
written; the caller re-reads and decides again.
"""

from __future__ import annotations

from typing import Any

from kubectl_hami_place.kube.client import Kube, request
from kubectl_hami_place.kube.errors import KubeConflict, KubeNotFound
from kubectl_hami_place.kube.placements import API_VERSION, GROUP, KIND, PLURAL, VERSION


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


def write_status(
    kube: Kube, placement: dict[str, Any], status: dict[str, Any], resource_version: str | None = None
) -> dict[str, Any]:
    """Replace the placement's status, only if it is still at `resource_version` (default: the one it carries).

    Returns the stored placement (with its new resourceVersion); raises StaleWrite when someone else changed it.
    """
    meta = placement.get("metadata") or {}
    namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
    body = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "resourceVersion": resource_version or meta.get("resourceVersion", ""),
        },
        "spec": placement.get("spec") or {},
        "status": status,
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
