"""Kubernetes Events: `kubectl describe` of a placement tells the story of its claim and eviction, of a pinned pod
its pin, of a pod or of the defragmentation policy's ConfigMap the story of the controller's runs. A repeat is
counted on the Event already written (a PATCH of its count and last timestamp), and each object's Events are rate
limited, as client-go's recorder does (`core/events.py`)."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from kubectl_hami_place.core.events import Bucket, EventKey, InvolvedObject, Recent, Seen, observe, take_token
from kubectl_hami_place.core.names import API_VERSION, KIND
from kubectl_hami_place.kube.client import Kube, by_path, path_segment, request
from kubectl_hami_place.kube.errors import KubeError, KubeNotFound

log = logging.getLogger(__name__)

COMPONENT = "hami-place-webhook"
# The API server limits an Event's message; longer ones are cut here rather than refused there.
MAX_MESSAGE = 1024
MERGE_PATCH = "application/merge-patch+json"


class EventRecorder:
    """Writes Events through one connection, counting repeats on the Event already written and dropping what an
    object's token bucket refuses; safe to share between threads."""

    def __init__(
        self,
        kube: Kube,
        component: str = COMPONENT,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.kube = kube
        self.component = component
        self.host = socket.gethostname()
        self.monotonic = monotonic
        self.clock = clock
        self._seen: Recent[EventKey, Seen] = Recent()
        self._buckets: Recent[tuple[str, str, InvolvedObject], Bucket] = Recent()
        self._lock = threading.Lock()

    def record(
        self,
        involved: Mapping[str, Any],
        reason: str,
        message: str,
        *,
        warning: bool = False,
        api_version: str = API_VERSION,
        kind: str = KIND,
    ) -> None:
        """An Event about the object (a placement unless `api_version`/`kind`, or the object's own, say otherwise):
        created, or counted on the one of the same key; a failure is logged, never raised: Events are best effort."""
        meta = involved.get("metadata") or {}
        target = InvolvedObject(
            api_version=str(involved.get("apiVersion") or api_version),
            kind=str(involved.get("kind") or kind),
            namespace=str(meta.get("namespace", "")),
            name=str(meta.get("name", "")),
            uid=str(meta.get("uid", "")),
        )
        key = EventKey(self.component, self.host, target, "Warning" if warning else "Normal", reason, message)
        now = self.clock().strftime("%Y-%m-%dT%H:%M:%SZ")
        with self._lock:
            occurrence = observe(self._seen.get(key), now)
            self._seen.put(key, Seen(occurrence.name, occurrence.count, occurrence.first_timestamp))
            allowed, bucket = take_token(self._buckets.get(key.spam_key), self.monotonic())
            self._buckets.put(key.spam_key, bucket)
        if not allowed:
            log.debug("event %s on %s/%s not written: too many about it", reason, target.namespace, target.name)
            return
        try:
            if occurrence.patch:
                try:
                    self._patch(target.namespace, occurrence.name, occurrence.patch_body(message[:MAX_MESSAGE]))
                    return
                except KubeNotFound:
                    pass  # the Event aged out (the API server keeps them an hour): written again, with the count
            written = self._create(key, occurrence.count, occurrence.first_timestamp, now)
        except KubeError as error:
            log.warning("event %s on %s/%s not recorded: %s", reason, target.namespace, target.name, error)
            return
        name = str((written.get("metadata") or {}).get("name") or "")
        with self._lock:
            current = self._seen.get(key)
            if current is not None and not current.name:
                self._seen.put(key, Seen(name, current.count, current.first_timestamp))

    def _patch(self, namespace: str, name: str, body: dict[str, object]) -> None:
        path = f"/api/v1/namespaces/{path_segment(namespace)}/events/{path_segment(name)}"
        call = by_path(self.kube.api, "PATCH", path, body, content_type=MERGE_PATCH)
        request(self.kube, call, what=f"patch events in {namespace}")

    def _create(self, key: EventKey, count: int, first: str, last: str) -> dict[str, Any]:
        target = key.involved
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{target.name}.", "namespace": target.namespace},
            "involvedObject": {
                "apiVersion": target.api_version,
                "kind": target.kind,
                "name": target.name,
                "namespace": target.namespace,
                "uid": target.uid,
            },
            "reason": key.reason,
            "message": key.message[:MAX_MESSAGE],
            "type": key.type,
            "firstTimestamp": first,
            "lastTimestamp": last,
            "count": count,
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "reportingInstance": self.host,
        }
        path = f"/api/v1/namespaces/{path_segment(target.namespace)}/events"
        return request(
            self.kube, by_path(self.kube.api, "POST", path, body), what=f"create events in {target.namespace}"
        )
