"""Reads the installed HamiPodPlacement CRD (one object, by name), so the server can say when it is older than the
server."""

from __future__ import annotations

from typing import Any

from kubectl_hami_place.core.crd_schema import CRD_NAME
from kubectl_hami_place.kube.client import Kube, by_path, request


def read_placement_crd(kube: Kube) -> dict[str, Any]:
    """The CRD as the API server stores it; KubeError (403 without `get` on it, 404 when not installed) otherwise."""
    path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}"
    return request(kube, by_path(kube.api, "GET", path), what=f"get customresourcedefinition {CRD_NAME}")
