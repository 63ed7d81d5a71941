"""HamiPodPlacement objects on the API server: list, get, create and delete, all as plain dicts.

Writes take `dry_run` so that `--dry-run=server` runs the API server's whole validation (schema, CEL, admission)
without persisting anything.
"""

from __future__ import annotations

from typing import Any

from kubectl_hami_place.core.names import GROUP, PLURAL, VERSION
from kubectl_hami_place.kube.client import Kube, request

FIELD_MANAGER = "kubectl-hami-place"


def list_placements(kube: Kube, namespace: str | None, label_selector: str = "") -> list[dict[str, Any]]:
    """Every placement in `namespace` (all namespaces when it is None) with the labels asked, sorted by namespace and
    name."""
    api = kube.custom()
    query = {"label_selector": label_selector} if label_selector else {}
    if namespace is None:
        body = request(kube, api.list_cluster_custom_object, GROUP, VERSION, PLURAL, what=f"list {PLURAL}", **query)
    else:
        body = request(
            kube,
            api.list_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            what=f"list {PLURAL} in namespace {namespace}",
            **query,
        )
    items = [item for item in body.get("items", []) if isinstance(item, dict)]
    return sorted(items, key=_namespaced_name)


def get_placement(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    """One placement; `KubeNotFound` when it does not exist."""
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


def create_placement(kube: Kube, namespace: str, body: dict[str, Any], dry_run: bool = False) -> dict[str, Any]:
    """Creates the placement and returns what the server stored (or would store, under dry-run)."""
    kwargs: dict[str, Any] = {"field_manager": FIELD_MANAGER}
    if dry_run:
        kwargs["dry_run"] = "All"
    return request(
        kube,
        kube.custom().create_namespaced_custom_object,
        GROUP,
        VERSION,
        namespace,
        PLURAL,
        body,
        what=f"create {PLURAL} in namespace {namespace}",
        **kwargs,
    )


def delete_placement(kube: Kube, namespace: str, name: str, dry_run: bool = False) -> dict[str, Any]:
    """Deletes the placement; `KubeNotFound` when it does not exist."""
    kwargs: dict[str, Any] = {}
    if dry_run:
        kwargs["dry_run"] = "All"
    return request(
        kube,
        kube.custom().delete_namespaced_custom_object,
        GROUP,
        VERSION,
        namespace,
        PLURAL,
        name,
        what=f"delete {PLURAL} in namespace {namespace}",
        **kwargs,
    )


def _namespaced_name(obj: dict[str, Any]) -> tuple[str, str]:
    """Sort key: namespace, then name."""
    metadata = obj.get("metadata") or {}
    return (str(metadata.get("namespace", "")), str(metadata.get("name", "")))
