"""One pod changed in place: read by path (the webhook keeps the generated CoreV1Api out of its process), then a JSON
patch made by diff, guarded by the pod's UID, so a pod re-created under the name since is left alone."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import jsonpatch

from kubectl_hami_place.kube.client import Kube, by_path, request
from kubectl_hami_place.kube.errors import KubeNotFound

Change = Callable[[dict[str, Any]], tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]] | None]
"""Given the pod as read: the part of it to change as it is and as it should be, and `test` operations that must
hold for the write (beside the UID's); None to leave the pod as it is."""


def change_pod(kube: Kube, namespace: str, name: str, uid: str, change: Change) -> dict[str, Any] | None:
    """Reads the pod and writes what `change` says as a JSON patch made by diff, guarded by the UID and `change`'s
    tests: the pod as stored after (as read when nothing differs); None when it is gone, another pod, or `change`
    left it alone."""
    path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}"
    what = f"get and patch pods in namespace {namespace}"
    try:
        pod = request(kube, by_path(kube.api, "GET", path), what=what)
    except KubeNotFound:
        return None
    if (pod.get("metadata") or {}).get("uid") != uid:
        return None
    wanted = change(pod)
    if wanted is None:
        return None
    before, after, tests = wanted
    operations = jsonpatch.JsonPatch.from_diff(before, after).patch
    if not operations:
        return pod
    patch = [{"op": "test", "path": "/metadata/uid", "value": uid}, *tests, *operations]
    try:
        return request(
            kube, by_path(kube.api, "PATCH", path, body=patch, content_type="application/json-patch+json"), what=what
        )
    except KubeNotFound:
        return None
