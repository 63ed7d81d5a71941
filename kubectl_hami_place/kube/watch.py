"""List+watch of one kind of object into an in-memory store, so the webhook answers from memory, not the API.

Objects are kept as plain dicts in the API server's shape (no typed models): the core reads dicts, and decoding
thousands of pods into generated classes would cost more than the whole admission decision. A projection, given
by the store's owner, keeps of each object only what its readers use.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterator
from http import HTTPStatus
from typing import Any
from urllib.parse import quote

import orjson
from kubernetes.client import ApiClient, CustomObjectsApi
from kubernetes.client.exceptions import ApiException

from kubectl_hami_place.core.names import ENDED_PHASES, GROUP, PLURAL, VERSION
from kubectl_hami_place.kube.client import CheckedApiClient, Kube, by_path

log = logging.getLogger(__name__)

NOT_ENDED = ",".join(f"status.phase!={phase}" for phase in sorted(ENDED_PHASES))
"""The field selector of pods not ended (`names.ENDED_PHASES`): those kube-scheduler and HAMi still count."""
# A watch ends after this many seconds and is re-opened from the last resourceVersion: a silent broken
# connection is then noticed within a bounded time, and the sync age stays meaningful.
WATCH_TIMEOUT_SECONDS = 60
# Backoff between failed list/watch attempts, doubling up to the cap.
RETRY_FIRST_SECONDS = 0.5
RETRY_MAX_SECONDS = 30.0

# A relist reads this many objects a page, so that it never holds the whole list's JSON and dicts at once.
LIST_PAGE_SIZE = 500
# How much of a watch stream is read at a time: a node event is several KiB, a burst of them many.
WATCH_READ_BYTES = 64 * 1024

ListCall = Callable[..., Any]
Listener = Callable[[str, dict[str, Any]], None]
Projection = Callable[[dict[str, Any]], dict[str, Any]]


class WatchExpired(Exception):
    """The API server no longer has the resourceVersion we watch from (410 Gone): relist."""


def object_key(obj: dict[str, Any]) -> tuple[str, str]:
    """(namespace, name): the store key of an object; cluster-scoped objects have namespace ''."""
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _trimmed(obj: dict[str, Any]) -> dict[str, Any]:
    """The object without metadata.managedFields: nothing here reads them, and they are ~40% of a pod's JSON."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or "managedFields" not in meta:
        return obj
    return {**obj, "metadata": {key: value for key, value in meta.items() if key != "managedFields"}}


def _newer(candidate: dict[str, Any], current: dict[str, Any] | None) -> bool:
    """Whether candidate may replace current: resourceVersions are opaque, but etcd's are integers in practice."""
    if current is None:
        return True
    new_rv = str((candidate.get("metadata") or {}).get("resourceVersion") or "")
    old_rv = str((current.get("metadata") or {}).get("resourceVersion") or "")
    if new_rv.isdigit() and old_rv.isdigit():
        return int(new_rv) >= int(old_rv)
    return True


def _same_version(stored: dict[str, Any], listed: dict[str, Any]) -> bool:
    """Whether the listed object is the stored one's version (an empty resourceVersion never matches)."""
    version = (stored.get("metadata") or {}).get("resourceVersion")
    return bool(version) and version == (listed.get("metadata") or {}).get("resourceVersion")


def _lines(response: Any) -> Iterator[bytes]:
    """The newline-separated JSON events of a watch response, however the chunks are cut."""
    pending = b""
    for chunk in response.stream(WATCH_READ_BYTES, decode_content=True):
        *lines, pending = (pending + chunk).split(b"\n")
        yield from (line for line in lines if line.strip())
    if pending.strip():
        yield pending


class Reflector:
    """Keeps one kind of object in memory: a full list, then a watch from its resourceVersion, relisting on 410."""

    def __init__(
        self,
        kind: str,
        list_call: ListCall,
        *,
        list_kwargs: dict[str, Any] | None = None,
        project: Projection = _trimmed,
    ) -> None:
        self.kind = kind
        # What of each object is stored (every list item, event and upsert goes through it).
        self._project = project
        self._list_call = list_call
        self._list_kwargs = dict(list_kwargs or {})
        self._objects: dict[tuple[str, str], dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._listeners: list[Listener] = []
        self._response: Any = None
        self.synced = threading.Event()
        self.last_sync: float | None = None
        self.forbidden = ""
        """Why the API server refuses to list or watch these objects (a 403: RBAC does not grant both), "" once a
        watch opens; the list and watch are still retried, so a grant made later is taken up."""

    def add_listener(self, listener: Listener) -> None:
        """Call listener(event_type, obj) after every change the watch or a fresher read brings."""
        self._listeners.append(listener)

    def items(self) -> list[dict[str, Any]]:
        """A copy of the list of stored objects (the dicts themselves are shared: treat them as read-only)."""
        with self._lock:
            return list(self._objects.values())

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The stored object, or None."""
        with self._lock:
            return self._objects.get((namespace, name))

    def upsert(self, obj: dict[str, Any]) -> None:
        """Store an object read or written outside the watch, unless the store already holds a newer one."""
        obj = self._project(obj)
        key = object_key(obj)
        with self._lock:
            if not _newer(obj, self._objects.get(key)):
                return
            self._objects[key] = obj
        self._notify("MODIFIED", obj)

    def remove(self, namespace: str, name: str) -> None:
        """Forget an object known to be gone before the watch says so."""
        with self._lock:
            obj = self._objects.pop((namespace, name), None)
        if obj is not None:
            self._notify("DELETED", obj)

    def run(self, stop: threading.Event) -> None:
        """List and watch until stop is set; every failure leads to a relist after a backoff."""
        delay = RETRY_FIRST_SECONDS
        while not stop.is_set():
            try:
                version = self._relist()
                delay = RETRY_FIRST_SECONDS
                while not stop.is_set():
                    version = self._watch(version)
            except WatchExpired:
                log.info("%s: watch expired (410), relisting", self.kind)
                continue
            except Exception as error:
                if stop.is_set():
                    break
                refused = isinstance(error, ApiException) and error.status == HTTPStatus.FORBIDDEN
                # Still forbidden: said once, not at every retry.
                say = log.debug if refused and self.forbidden else log.warning
                say("%s: list/watch failed (%s), retrying in %.1fs", self.kind, _short(error), delay)
                if refused:
                    self.forbidden = _short(error)
                stop.wait(delay)
                delay = min(delay * 2, RETRY_MAX_SECONDS)

    def stop(self) -> None:
        """Break an open watch so that run() notices its stop event at once."""
        response = self._response
        if response is None:
            return
        # close() waits for the thread blocked reading the stream; shutting the socket down first wakes it.
        raw = getattr(response, "response", response)
        try:
            shutdown = getattr(raw, "shutdown", None)
            if shutdown is not None:
                shutdown()
            raw.close()
        except Exception:
            log.debug("%s: closing the watch failed", self.kind, exc_info=True)

    def _relist(self) -> str:
        fresh: dict[tuple[str, str], dict[str, Any]] = {}
        token = ""
        while True:
            paging: dict[str, Any] = {"limit": LIST_PAGE_SIZE, **({"_continue": token} if token else {})}
            response = self._list_call(_preload_content=False, _request_timeout=(10, 60), **paging, **self._list_kwargs)
            body = orjson.loads(response.data)
            for item in body.get("items") or []:
                key = object_key(item)
                stored = self._objects.get(key)
                # An object the relist finds unchanged stays the stored one: listeners hear of it no more, and
                # the relist does not hold a second copy of every object until the swap.
                fresh[key] = stored if stored is not None and _same_version(stored, item) else self._project(item)
            token = str((body.get("metadata") or {}).get("continue") or "")
            if not token:
                break
        with self._lock:
            gone = [obj for key, obj in self._objects.items() if key not in fresh]
            changed = [obj for key, obj in fresh.items() if self._objects.get(key) is not obj]
            self._objects = fresh
        for obj in gone:
            self._notify("DELETED", obj)
        for obj in changed:
            self._notify("MODIFIED", obj)
        self._mark_synced()
        return str((body.get("metadata") or {}).get("resourceVersion") or "")

    def _watch(self, version: str) -> str:
        response = self._list_call(
            watch=True,
            resource_version=version,
            allow_watch_bookmarks=True,
            timeout_seconds=WATCH_TIMEOUT_SECONDS,
            _preload_content=False,
            _request_timeout=(10, WATCH_TIMEOUT_SECONDS + 30),
            **self._list_kwargs,
        )
        self.forbidden = ""
        self._response = response
        try:
            for line in _lines(response):
                version = self._apply(orjson.loads(line), version)
        finally:
            self._response = None
            response.release_conn()
        self._mark_synced()
        return version

    def _apply(self, event: dict[str, Any], version: str) -> str:
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise WatchExpired(obj.get("message", "resource version too old"))
            raise RuntimeError(f"watch error {obj.get('code')}: {obj.get('message')}")
        new_version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
        if kind == "BOOKMARK":
            self._mark_synced()
            return new_version
        obj = self._project(obj)
        key = object_key(obj)
        with self._lock:
            if kind == "DELETED":
                self._objects.pop(key, None)
            else:
                self._objects[key] = obj
        self._mark_synced()
        self._notify(str(kind), obj)
        return new_version

    def _mark_synced(self) -> None:
        self.last_sync = time.time()
        self.synced.set()

    def _notify(self, kind: str, obj: dict[str, Any]) -> None:
        for listener in self._listeners:
            try:
                listener(kind, obj)
            except Exception:
                log.exception("%s: listener failed", self.kind)


def _short(error: BaseException) -> str:
    """One line for the log: the API status and reason, or the exception's first line."""
    if isinstance(error, ApiException):
        return f"{error.status} {error.reason}"
    reason = getattr(error, "reason", None) or error
    return (str(reason).splitlines() or [type(error).__name__])[0][:200]


def node_reflector(api_client: ApiClient, project: Projection = _trimmed) -> Reflector:
    """Every node: cards come from their registers."""
    return Reflector("nodes", by_path(api_client, "GET", "/api/v1/nodes"), project=project)


def pod_reflector(api_client: ApiClient, scheduler_name: str, project: Projection = _trimmed) -> Reflector:
    """The pods HAMi's scheduler places: the only ones that hold cards or that the webhook pins."""
    return Reflector(
        "pods",
        by_path(api_client, "GET", "/api/v1/pods"),
        list_kwargs={"field_selector": f"spec.schedulerName={scheduler_name}"},
        project=project,
    )


def other_pods_reflector(api_client: ApiClient, scheduler_name: str, project: Projection = _trimmed) -> Reflector:
    """The bound, unfinished pods of every other scheduler: what they ask of their nodes is room HAMi's pods lack."""
    return Reflector(
        "other-pods",
        by_path(api_client, "GET", "/api/v1/pods"),
        list_kwargs={"field_selector": f"spec.schedulerName!={scheduler_name},spec.nodeName!=,{NOT_ENDED}"},
        project=project,
    )


def placement_reflector(api_client: ApiClient, project: Projection = _trimmed) -> Reflector:
    """Every HamiPodPlacement in the cluster."""
    api = CustomObjectsApi(api_client)

    def list_call(**kwargs: Any) -> Any:
        return api.list_cluster_custom_object(GROUP, VERSION, PLURAL, **kwargs)

    return Reflector("placements", list_call, project=project)


def with_pool_size(kube: Kube, size: int) -> Kube:
    """The same connection with room for `size` pooled connections: open watches each hold one for minutes."""
    configuration = kube.api.configuration
    configuration.connection_pool_maxsize = size
    return dataclasses.replace(kube, api=CheckedApiClient(configuration))


def failed_scheduling_reflector(api_client: ApiClient, project: Projection = _trimmed) -> Reflector:
    """The scheduler's FailedScheduling Events in every namespace: why each Pending pod was refused, and when."""
    return Reflector(
        "events",
        by_path(api_client, "GET", "/api/v1/events"),
        list_kwargs={"field_selector": "reason=FailedScheduling"},
        project=project,
    )


def config_map_reflector(api_client: ApiClient, namespace: str, name: str) -> Reflector:
    """One ConfigMap, by name (a list and watch with the fieldSelector metadata.name, which resourceNames allow)."""
    path = f"/api/v1/namespaces/{quote(namespace, safe='')}/configmaps"
    return Reflector(
        "configmap", by_path(api_client, "GET", path), list_kwargs={"field_selector": f"metadata.name={name}"}
    )


def disruption_budget_reflector(api_client: ApiClient, project: Projection = _trimmed) -> Reflector:
    """Every PodDisruptionBudget (policy/v1): which pods a plan may not move now."""
    return Reflector(
        "poddisruptionbudgets", by_path(api_client, "GET", "/apis/policy/v1/poddisruptionbudgets"), project=project
    )


def volume_claim_reflector(api_client: ApiClient, project: Projection = _trimmed) -> Reflector:
    """Every PersistentVolumeClaim: the volume each pod's claim is bound to."""
    return Reflector(
        "persistentvolumeclaims", by_path(api_client, "GET", "/api/v1/persistentvolumeclaims"), project=project
    )


def namespace_reflector(api_client: ApiClient, project: Projection = _trimmed) -> Reflector:
    """Every Namespace: the labels a pod affinity term's namespaceSelector picks namespaces by."""
    return Reflector("namespaces", by_path(api_client, "GET", "/api/v1/namespaces"), project=project)


def volume_reflector(api_client: ApiClient, project: Projection = _trimmed) -> Reflector:
    """Every PersistentVolume: the nodes each may be reached from."""
    return Reflector("persistentvolumes", by_path(api_client, "GET", "/api/v1/persistentvolumes"), project=project)


def storage_class_reflector(api_client: ApiClient, project: Projection = _trimmed) -> Reflector:
    """Every StorageClass: whether a claim not bound yet waits for its pod, and where its class may provision."""
    path = "/apis/storage.k8s.io/v1/storageclasses"
    return Reflector("storageclasses", by_path(api_client, "GET", path), project=project)


def storage_capacity_reflector(api_client: ApiClient, project: Projection = _trimmed) -> Reflector:
    """Every CSIStorageCapacity: where a capacity-checking driver may provision a claim not bound yet."""
    path = "/apis/storage.k8s.io/v1/csistoragecapacities"
    return Reflector("csistoragecapacities", by_path(api_client, "GET", path), project=project)


def csi_driver_reflector(api_client: ApiClient, project: Projection = _trimmed) -> Reflector:
    """Every CSIDriver: which drivers ask kube-scheduler to check their storage capacity."""
    return Reflector("csidrivers", by_path(api_client, "GET", "/apis/storage.k8s.io/v1/csidrivers"), project=project)


def csi_node_reflector(api_client: ApiClient, project: Projection = _trimmed) -> Reflector:
    """Every CSINode: how many volumes of each CSI driver its node may attach."""
    return Reflector("csinodes", by_path(api_client, "GET", "/apis/storage.k8s.io/v1/csinodes"), project=project)


def volume_attachment_reflector(api_client: ApiClient, project: Projection = _trimmed) -> Reflector:
    """Every VolumeAttachment: the volumes attached to each node, which count toward its drivers' attach limits."""
    path = "/apis/storage.k8s.io/v1/volumeattachments"
    return Reflector("volumeattachments", by_path(api_client, "GET", path), project=project)
