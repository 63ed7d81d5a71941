"""What the server does to the cluster, behind one small interface: read a placement, write its status, record an
Event, evict a pod, lift the scheduling gate of the pod an eviction makes room for, ask whether a stored pod carries
a claim, hold and release reqID guards, delete a finished placement. `KubeWrites` does it
through kube/; unit tests give
the Admitter and the Reconciler an in-memory implementation that can answer a write with a stale-write conflict.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from kubectl_hami_place.core.names import CLAIM_ANNOTATION, ROOM_ANNOTATION, ROOM_GATE
from kubectl_hami_place.core.placement import Placement, PlacementStatus
from kubectl_hami_place.kube.claims import Guard, hold_req_id, list_guards, read_placement, release_guard, write_status
from kubectl_hami_place.kube.client import Kube
from kubectl_hami_place.kube.cluster_reads import list_pods, pods_labelled_with_claim
from kubectl_hami_place.kube.errors import KubeConflict, KubeNotFound
from kubectl_hami_place.kube.events import EventRecorder
from kubectl_hami_place.kube.evictions import evict_pod, release_from_wait
from kubectl_hami_place.kube.placements import delete_placement

log = logging.getLogger(__name__)
DEFAULT_GUARD_NAMESPACE = "default"
"""Where the reqID guards live when the server is not told its namespace (`--defrag-namespace`, POD_NAMESPACE)."""

# Events waiting for their thread; past this many a new one is dropped (and logged), as client-go's recorder does.
EVENT_QUEUE = 1000


class Writes(Protocol):
    """The server's side effects; every failure is a kube.claims.StaleWrite or a kube.errors.KubeError."""

    def read_placement(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The placement as the API server has it now, None when it is gone."""
        ...

    def write_status(self, placement: Placement, status: PlacementStatus) -> dict[str, Any]:
        """Replace the status if the placement is still at its resourceVersion; StaleWrite otherwise."""
        ...

    def record_event(self, placement: Mapping[str, Any], reason: str, message: str, *, warning: bool) -> None:
        """An Event about the placement (or the object its apiVersion and kind name: a pinned pod); a repeat is
        counted on the Event already written; best effort, never raises."""
        ...

    def evict(self, namespace: str, pod: str, uid: str) -> None:
        """Evict the pod of that UID (any, when empty) through the Eviction API: KubeNotFound (PodReplaced when
        another pod holds the name), BlockedByDisruptionBudget or another KubeError."""
        ...

    def release_room_wait(self, namespace: str, pod: str, uid: str) -> bool:
        """Take ROOM_GATE and ROOM_ANNOTATION off the pod of that UID: False when it is gone, replaced or no longer
        waits."""
        ...

    def claim_carried(self, namespace: str, token: str, *, unlabelled: bool = False) -> bool:
        """Whether a stored pod of the namespace carries this claim token (whatever its scheduler), found by its
        claim-digest label; with `unlabelled`, also among pods pinned before pods were labelled."""
        ...

    def delete_placement(self, placement: Placement) -> None:
        """Delete that very version of the placement; one changed, replaced or gone since is left alone."""
        ...

    def hold_req_id(self, placement: Placement) -> Guard:
        """Create the guard of the placement's reqID held by it; when one exists, the stored one (maybe another's)."""
        ...

    def list_guards(self) -> list[Guard]:
        """Every reqID guard (they live in the server's Lease namespace)."""
        ...

    def release_guard(self, guard: Guard) -> None:
        """Delete that very guard; one already gone or replaced is left alone."""
        ...


def _carries(pod: Mapping[str, Any], token: str) -> bool:
    """Whether the pod's claim annotation is that token."""
    return bool(((pod.get("metadata") or {}).get("annotations") or {}).get(CLAIM_ANNOTATION) == token)


class QueuedEvents:
    """Events sent by a thread of their own: an admission that claims answers after its status write, not after the
    Event too (best effort either way; one the queue has no room for is dropped)."""

    def __init__(self, send: Callable[[dict[str, Any], str, str, bool], None], size: int = EVENT_QUEUE) -> None:
        self._send = send
        self._queue: queue.Queue[tuple[dict[str, Any], str, str, bool] | None] = queue.Queue(maxsize=size)
        self._thread = threading.Thread(target=self._run, name="events", daemon=True)
        self._thread.start()

    def put(self, placement: Mapping[str, Any], reason: str, message: str, *, warning: bool) -> None:
        """Queue one Event; never blocks."""
        try:
            self._queue.put_nowait((dict(placement), reason, message, warning))
        except queue.Full:
            log.warning("event %s not recorded: %d events are already waiting", reason, self._queue.maxsize)

    def close(self, timeout: float) -> None:
        """Send what is queued, within `timeout` seconds; then stop the thread."""
        try:
            self._queue.put(None, timeout=timeout)
        except queue.Full:
            return
        self._thread.join(timeout)

    def _run(self) -> None:
        """Sends each queued Event; one that fails in any way is logged and the thread goes on with the next."""
        while (item := self._queue.get()) is not None:
            try:
                self._send(*item)
            except Exception:
                log.exception("event %s not recorded", item[1])


class KubeWrites:
    """Writes through the API server; Events through a queue (see QueuedEvents)."""

    def __init__(self, kube: Kube, guard_namespace: str = DEFAULT_GUARD_NAMESPACE) -> None:
        self.kube = kube
        self.guard_namespace = guard_namespace
        recorder = EventRecorder(kube)
        self.events = QueuedEvents(
            lambda placement, reason, message, warning: recorder.record(placement, reason, message, warning=warning)
        )

    def read_placement(self, namespace: str, name: str) -> dict[str, Any] | None:
        """GET the placement."""
        return read_placement(self.kube, namespace, name)

    def write_status(self, placement: Placement, status: PlacementStatus) -> dict[str, Any]:
        """PUT the status subresource guarded by resourceVersion."""
        return write_status(self.kube, placement, status)

    def record_event(self, placement: Mapping[str, Any], reason: str, message: str, *, warning: bool) -> None:
        """POST an Event, or PATCH the count of the one of the same key, from the events thread."""
        self.events.put(placement, reason, message, warning=warning)

    def evict(self, namespace: str, pod: str, uid: str) -> None:
        """POST pods/eviction with the UID as its precondition."""
        evict_pod(self.kube, namespace, pod, uid=uid)

    def release_room_wait(self, namespace: str, pod: str, uid: str) -> bool:
        """GET the pod, then PATCH it without ROOM_GATE and ROOM_ANNOTATION, guarded by its UID and the gates read."""
        return release_from_wait(self.kube, namespace, pod, uid, gate=ROOM_GATE, annotation=ROOM_ANNOTATION)

    def claim_carried(self, namespace: str, token: str, *, unlabelled: bool = False) -> bool:
        """LIST the namespace's pods labelled with the token's digest, and check the token itself in their
        annotations (a label anyone may set on a pod is an index, not a proof). With `unlabelled`, and when none is
        found, LIST the whole namespace: a pod pinned by a version that did not label carries only the annotation
        (the reconciler asks so before releasing a claim, once per claim that no pod took, so a claim written by
        an older replica during an upgrade is never released under its pod)."""
        if any(_carries(pod, token) for pod in pods_labelled_with_claim(self.kube, namespace, token)):
            return True
        return unlabelled and any(_carries(pod, token) for pod in list_pods(self.kube, namespace))

    def delete_placement(self, placement: Placement) -> None:
        """DELETE the placement, preconditioned on its UID and resourceVersion."""
        try:
            delete_placement(
                self.kube,
                placement.namespace,
                placement.name,
                uid=placement.uid,
                resource_version=placement.resource_version,
            )
        except (KubeNotFound, KubeConflict):
            return

    def hold_req_id(self, placement: Placement) -> Guard:
        """CREATE the Lease named after (namespace, reqID) in the server's Lease namespace, or GET it on 409."""
        return hold_req_id(self.kube, self.guard_namespace, placement)

    def list_guards(self) -> list[Guard]:
        """LIST the guard Leases of the server's Lease namespace."""
        return list_guards(self.kube, self.guard_namespace)

    def release_guard(self, guard: Guard) -> None:
        """DELETE the Lease, preconditioned on its UID."""
        release_guard(self.kube, guard)
