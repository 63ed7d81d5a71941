"""HamiPodPlacement objects on the API server: list, get, create and delete, all as plain dicts.

Writes take `dry_run` so that `--dry-run=server` runs the API server's whole validation (schema, CEL, admission)
without persisting anything.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client

from kubectl_hami_place.core.k8s_names import is_namespaced_name
from kubectl_hami_place.core.names import API_VERSION, GROUP, KIND, PLURAL, VERSION
from kubectl_hami_place.kube.client import Kube, request
from kubectl_hami_place.kube.errors import KubeInvalid, KubeServerError

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
    """One placement; `KubeNotFound` when it does not exist, `KubeInvalid` for a name no placement can have."""
    if not is_namespaced_name(namespace, name):
        raise KubeInvalid(f"{namespace[:70]!r}/{name[:120]!r} cannot name a placement (not a Kubernetes name)")
    found = request(
        kube,
        kube.custom().get_namespaced_custom_object,
        GROUP,
        VERSION,
        namespace,
        PLURAL,
        name,
        what=f"get {PLURAL} in namespace {namespace}",
    )
    return _that_placement(found, namespace, name)


def _that_placement(found: dict[str, Any], namespace: str, name: str) -> dict[str, Any]:
    """The object read, checked to be the placement asked for: anything else must never be taken for it."""
    metadata = found.get("metadata") or {}
    what = (found.get("apiVersion"), found.get("kind"), metadata.get("namespace"), metadata.get("name"))
    if what != (API_VERSION, KIND, namespace, name):
        raise KubeServerError(
            f"the read of placement {namespace}/{name} returned {str(what[1])[:40]} "
            f"{str(what[2])[:70]}/{str(what[3])[:120]}, not that placement"
        )
    return found


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


def delete_placement(
    kube: Kube, namespace: str, name: str, dry_run: bool = False, *, uid: str = "", resource_version: str = ""
) -> dict[str, Any]:
    """Deletes the placement; `KubeNotFound` when it does not exist. With `uid` and `resource_version`, only that
    very version of it (`KubeConflict` when it changed or was replaced since it was read)."""
    kwargs: dict[str, Any] = {}
    if dry_run:
        kwargs["dry_run"] = "All"
    if uid or resource_version:
        preconditions = client.V1Preconditions(uid=uid or None, resource_version=resource_version or None)
        kwargs["body"] = client.V1DeleteOptions(preconditions=preconditions)
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
