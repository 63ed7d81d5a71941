"""Kubernetes Events: `kubectl describe` of a placement tells the story of its claim and eviction, of a pod or of the
defragmentation policy's ConfigMap the story of the controller's runs."""

from __future__ import annotations

import logging
import socket
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from kubectl_hami_place.core.names import API_VERSION, KIND
from kubectl_hami_place.kube.client import Kube, by_path, path_segment, request
from kubectl_hami_place.kube.errors import KubeError

log = logging.getLogger(__name__)

COMPONENT = "hami-place-webhook"
# The API server limits an Event's message; longer ones are cut here rather than refused there.
MAX_MESSAGE = 1024


def record_event(
    kube: Kube,
    involved: Mapping[str, Any],
    reason: str,
    message: str,
    *,
    warning: bool = False,
    api_version: str = API_VERSION,
    kind: str = KIND,
    component: str = COMPONENT,
) -> None:
    """Create an Event about the object (a placement unless `api_version`/`kind`, or the object's own, say
    otherwise); a failure is logged, never raised: events are best effort."""
    meta = involved.get("metadata") or {}
    namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    body = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{name}.", "namespace": namespace},
        "involvedObject": {
            "apiVersion": involved.get("apiVersion") or api_version,
            "kind": involved.get("kind") or kind,
            "name": name,
            "namespace": namespace,
            "uid": meta.get("uid", ""),
        },
        "reason": reason,
        "message": message[:MAX_MESSAGE],
        "type": "Warning" if warning else "Normal",
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
        "source": {"component": component},
        "reportingComponent": component,
        "reportingInstance": socket.gethostname(),
    }
    try:
        path = f"/api/v1/namespaces/{path_segment(namespace)}/events"
        request(kube, by_path(kube.api, "POST", path, body), what=f"create events in {namespace}")
    except KubeError as error:
        log.warning("event %s on %s/%s not recorded: %s", reason, namespace, name, error)
