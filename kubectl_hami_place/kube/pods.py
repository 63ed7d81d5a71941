"""One pod changed in place: read by path (the webhook keeps the generated CoreV1Api out of its process), then a JSON
patch made by diff, guarded by the pod's UID, so a pod re-created under the name since is left alone, and by the
version read, so a write made meanwhile is read again rather than overwritten."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import jsonpatch

from kubectl_hami_place.kube.client import Kube, by_path, request
from kubectl_hami_place.kube.errors import KubeInvalid, KubeNotFound

JSON_PATCH = "application/json-patch+json"
Change = Callable[[dict[str, Any]], tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]] | None]
"""Given the pod as read: the part of it to change as it is and as it should be, and `test` operations that must
hold for the write (beside the UID's); None to leave the pod as it is."""


WRITE_ATTEMPTS = 5
"""How many times a change is read and written again when the pod changed between the read and the write."""


def change_pod(kube: Kube, namespace: str, name: str, uid: str, change: Change) -> dict[str, Any] | None:
    """Reads the pod and writes what `change` says as a JSON patch made by diff, guarded by the UID, the version read
    and `change`'s tests: the pod as stored after (as read when nothing differs); None when it is gone, another pod,
    or `change` left it alone. A pod written by another meanwhile (HAMi's scheduler annotates a pod it places) is read
    and changed again: a diff from a pod without annotations adds the whole map, which would drop theirs. The API
    server says only that a test failed, so a refusal is taken for a write meanwhile when the pod's version moved."""
    path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}"
    what = f"get and patch pods in namespace {namespace}"
    refused: tuple[object, KubeInvalid] | None = None
    attempts = 0
    while True:
        attempts += 1
        try:
            pod = request(kube, by_path(kube.api, "GET", path), what=what)
        except KubeNotFound:
            return None
        metadata = pod.get("metadata") or {}
        version = metadata.get("resourceVersion")
        if refused is not None and refused[0] == version:
            raise refused[1]
        if metadata.get("uid") != uid:
            return None
        wanted = change(pod)
        if wanted is None:
            return None
        before, after, tests = wanted
        operations = jsonpatch.JsonPatch.from_diff(before, after).patch
        if not operations:
            return pod
        guards = [
            {"op": "test", "path": "/metadata/uid", "value": uid},
            {"op": "test", "path": "/metadata/resourceVersion", "value": version},
        ]
        try:
            return request(
                kube,
                by_path(kube.api, "PATCH", path, body=[*guards, *tests, *operations], content_type=JSON_PATCH),
                what=what,
            )
        except KubeNotFound:
            return None
        except KubeInvalid as error:
            if attempts == WRITE_ATTEMPTS:
                raise
            refused = (version, error)
