"""Reads of the cluster the plugin reasons about: nodes, pods, controllers' pod templates, and the webhook's view.

Everything comes back as the API server's JSON dicts; the core turns them into cards, allocations and usage.
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar
from urllib.parse import urlencode

import orjson
import urllib3
from kubernetes.client.exceptions import ApiException

from kubectl_hami_place.core.access import CLUSTER_INFO_PATH, VERSION_PATH
from kubectl_hami_place.core.cluster_info import ClusterCount, ClusterInfo, cluster_info_from_dict, counted_allocation
from kubectl_hami_place.core.errors import ModelError
from kubectl_hami_place.core.lifecycle import claim_digest
from kubectl_hami_place.core.names import (
    CLAIM_DIGEST_LABEL,
    FORWARDED_TOKEN_HEADER,
    WEBHOOK_API_PORT,
    WEBHOOK_SERVICE_LABEL,
)
from kubectl_hami_place.kube.client import (
    DEFAULT_TIMEOUT,
    Kube,
    checked_path,
    list_batches,
    path_segment,
    request,
)
from kubectl_hami_place.kube.counted import COUNTED_NODES, COUNTED_PODS
from kubectl_hami_place.kube.errors import (
    KubeError,
    KubeForbidden,
    KubeNotFound,
    KubeServerError,
    KubeUnauthorized,
    WebhookRefused,
)
from kubectl_hami_place.kube.list_body import list_items

WEBHOOK_API_PORT_NAME = "api"
T = TypeVar("T")
# Controllers whose pod template tells what a new pod matching a selector will ask for.
CONTROLLER_KINDS = ("Deployment", "ReplicaSet", "StatefulSet", "Job")
# Batches of pods decoded ahead of the one being counted: enough to keep the reader busy, few enough to bound memory.
BATCHES_AHEAD = 2


@dataclass(frozen=True)
class Controller:
    """A workload controller: its kind and name, its pod selector, its pod template and its own controller owner."""

    kind: str
    name: str
    namespace: str
    selector: dict[str, Any]
    template: dict[str, Any]
    owner_kind: str | None


@dataclass(frozen=True)
class WebhookService:
    """Where the hami-place webhook's HTTP API is reachable through the API server's service proxy."""

    namespace: str
    name: str
    port: str

    def describe(self) -> str:
        """`namespace/name:port`, as shown to the user."""
        return f"{self.namespace}/{self.name}:{self.port}"


def list_nodes(kube: Kube, label_selector: str | None = None) -> list[dict[str, Any]]:
    """Every node (with these labels, filtered by the API server as `kubectl get nodes -l` does), sorted by name."""
    kwargs = {"label_selector": label_selector} if label_selector else {}
    body = request(kube, _get(kube, "/api/v1/nodes"), what="list nodes", **kwargs)
    return sorted(list_items(body), key=_name)


def get_node(kube: Kube, name: str) -> dict[str, Any]:
    """One node; `KubeNotFound` when there is none by that name."""
    return request(kube, kube.core().read_node, name, what="get nodes")


def list_pods(
    kube: Kube, namespace: str | None, label_selector: str | None = None, field_selector: str | None = None
) -> list[dict[str, Any]]:
    """Pods in `namespace` (all namespaces when None), optionally filtered server-side."""
    kwargs: dict[str, Any] = {}
    if label_selector:
        kwargs["label_selector"] = label_selector
    if field_selector:
        kwargs["field_selector"] = field_selector
    if namespace is None:
        body = request(kube, _get(kube, "/api/v1/pods"), what="list pods in all namespaces", **kwargs)
    else:
        path = f"/api/v1/namespaces/{path_segment(namespace)}/pods"
        body = request(kube, _get(kube, path), what=f"list pods in namespace {namespace}", **kwargs)
    return sorted(list_items(body), key=lambda p: (p.get("metadata", {}).get("namespace", ""), _name(p)))


def list_volume_claims(kube: Kube) -> list[dict[str, Any]]:
    """Every PersistentVolumeClaim: which volume each pod's claim is bound to."""
    body = request(
        kube, _get(kube, "/api/v1/persistentvolumeclaims"), what="list persistentvolumeclaims in all namespaces"
    )
    return list_items(body)


def list_volumes(kube: Kube) -> list[dict[str, Any]]:
    """Every PersistentVolume: the nodes each may be reached from."""
    return list_items(request(kube, _get(kube, "/api/v1/persistentvolumes"), what="list persistentvolumes"))


def list_storage_classes(kube: Kube) -> list[dict[str, Any]]:
    """Every StorageClass: whether a claim not bound yet waits for its pod, and where its class may provision."""
    return _list_storage(kube, "storageclasses")


def list_csi_drivers(kube: Kube) -> list[dict[str, Any]]:
    """Every CSIDriver: which drivers ask kube-scheduler to check their storage capacity."""
    return _list_storage(kube, "csidrivers")


def list_storage_capacities(kube: Kube) -> list[dict[str, Any]]:
    """Every CSIStorageCapacity: where a capacity-checking driver may provision a claim not bound yet."""
    path = "/apis/storage.k8s.io/v1/csistoragecapacities"
    return list_items(
        request(kube, _get(kube, path), what="list csistoragecapacities.storage.k8s.io in all namespaces")
    )


def list_csi_nodes(kube: Kube) -> list[dict[str, Any]]:
    """Every CSINode: how many volumes of each CSI driver its node may attach."""
    return _list_storage(kube, "csinodes")


def list_volume_attachments(kube: Kube) -> list[dict[str, Any]]:
    """Every VolumeAttachment: the volumes attached to each node, which count toward its drivers' attach limits."""
    return _list_storage(kube, "volumeattachments")


def _list_storage(kube: Kube, resource: str) -> list[dict[str, Any]]:
    """Every object of a cluster-scoped storage.k8s.io resource."""
    path = f"/apis/storage.k8s.io/v1/{resource}"
    return list_items(request(kube, _get(kube, path), what=f"list {resource}.storage.k8s.io"))


def list_namespaces(kube: Kube) -> list[dict[str, Any]]:
    """Every Namespace: the labels a pod affinity term's namespaceSelector picks namespaces by."""
    return list_items(request(kube, _get(kube, "/api/v1/namespaces"), what="list namespaces"))


def pods_labelled_with_claim(kube: Kube, namespace: str, token: str) -> list[dict[str, Any]]:
    """The namespace's pods labelled with the claim's digest (pinned by a server that labels, from issue 23 on)."""
    return list_pods(kube, namespace, label_selector=f"{CLAIM_DIGEST_LABEL}={claim_digest(token)}")


def node_exists(kube: Kube, name: str) -> bool:
    """False only when the API server says there is no such node (forbidden to look: assumed to exist)."""
    return _exists(kube, f"/api/v1/nodes/{path_segment(name)}", "get nodes")


def namespace_exists(kube: Kube, name: str) -> bool:
    """False only when the API server says the namespace does not exist (forbidden to look: assumed to exist)."""
    return _exists(kube, f"/api/v1/namespaces/{path_segment(name)}", "get namespaces")


def _exists(kube: Kube, path: str, what: str) -> bool:
    """False only on the API server's 404 for the object at `path`; a 403 counts as existing (we may not look)."""
    try:
        request(kube, _get(kube, path), what=what)
    except KubeNotFound:
        return False
    except KubeForbidden:
        return True
    return True


def get_pod(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    """One pod; `KubeNotFound` when it does not exist."""
    return request(kube, kube.core().read_namespaced_pod, name, namespace, what=f"get pods in namespace {namespace}")


def list_controllers(kube: Kube, namespace: str) -> list[Controller]:
    """Deployments, ReplicaSets, StatefulSets and Jobs of the namespace, with their selectors and pod templates."""
    apps, batch = kube.apps(), kube.batch()
    sources = (
        ("Deployment", apps.list_namespaced_deployment),
        ("ReplicaSet", apps.list_namespaced_replica_set),
        ("StatefulSet", apps.list_namespaced_stateful_set),
        ("Job", batch.list_namespaced_job),
    )
    controllers: list[Controller] = []
    for kind, call in sources:
        plural = kind.lower() + "s"
        body = request(kube, call, namespace, what=f"list {plural} in namespace {namespace}")
        controllers.extend(_controller(kind, item, namespace) for item in list_items(body))
    return controllers


def get_controller(kube: Kube, namespace: str, kind: str, name: str) -> Controller | None:
    """One controller by kind and name, or None when the kind is not one whose template we can read."""
    apps, batch = kube.apps(), kube.batch()
    calls = {
        "Deployment": apps.read_namespaced_deployment,
        "ReplicaSet": apps.read_namespaced_replica_set,
        "StatefulSet": apps.read_namespaced_stateful_set,
        "Job": batch.read_namespaced_job,
    }
    if kind not in calls:
        return None
    body = request(kube, calls[kind], name, namespace, what=f"get {kind.lower()}s in namespace {namespace}")
    return _controller(kind, body, namespace)


def list_disruption_budgets(kube: Kube, namespace: str) -> list[dict[str, Any]]:
    """The namespace's PodDisruptionBudgets."""
    body = request(
        kube,
        kube.policy().list_namespaced_pod_disruption_budget,
        namespace,
        what=f"list poddisruptionbudgets in namespace {namespace}",
    )
    return sorted(list_items(body), key=_name)


def find_webhook_services(kube: Kube) -> list[WebhookService]:
    """The webhook's Services in any namespace (by app label), each at its `api` port (else 8083); [] if absent."""
    body = request(
        kube,
        _get(kube, "/api/v1/services"),
        label_selector=WEBHOOK_SERVICE_LABEL,
        what="list services in all namespaces",
    )
    found = []
    for service in sorted(list_items(body), key=lambda s: (s.get("metadata", {}).get("namespace", ""), _name(s))):
        if (service.get("metadata") or {}).get("deletionTimestamp"):
            continue
        ports = (service.get("spec") or {}).get("ports") or []
        chosen = next((p for p in ports if p.get("name") == WEBHOOK_API_PORT_NAME), None) or next(
            (p for p in ports if WEBHOOK_API_PORT in (p.get("port"), p.get("targetPort"))), None
        )
        if chosen is not None:
            found.append(WebhookService(service["metadata"]["namespace"], _name(service), str(chosen.get("port"))))
    return found


def _proxied(
    kube: Kube, service: WebhookService, api_path: str, headers: dict[str, str] | None = None
) -> dict[str, Any]:
    """`GET api_path` (a route of the webhook's HTTP API, `core.access`) through the API server's service proxy."""
    path = (
        f"/api/v1/namespaces/{path_segment(service.namespace)}/services/"
        f"{path_segment(service.name)}:{path_segment(service.port)}/proxy{api_path}"
    )
    return request(kube, _get(kube, path, headers), what=f"get services/proxy in namespace {service.namespace}")


def read_webhook_version(kube: Kube, service: WebhookService) -> str:
    """The version the webhook answers at `/api/v1/version` (KubeError when it does not, e.g. an older server)."""
    version = _proxied(kube, service, VERSION_PATH).get("version")
    if not isinstance(version, str) or not version:
        raise KubeServerError(f"the webhook at {service.describe()} answered without a version")
    return version


def list_server_deployments(kube: Kube) -> list[dict[str, Any]]:
    """The webhook's Deployments in any namespace, by the chart's app label."""
    body = request(
        kube,
        _get(kube, "/apis/apps/v1/deployments"),
        label_selector=WEBHOOK_SERVICE_LABEL,
        what="list deployments in all namespaces",
    )
    return sorted(list_items(body), key=lambda d: (d.get("metadata", {}).get("namespace", ""), _name(d)))


def asked_order(services: list[WebhookService], prefer: str | None) -> list[WebhookService]:
    """The Services in the order they are asked: those of namespace `prefer` first, each group as listed."""
    return sorted(services, key=lambda service: service.namespace != prefer)


def first_webhook_answer(
    kube: Kube, api_path: str, parse: Callable[[dict[str, Any]], T], prefer: str | None = None
) -> tuple[T | None, str]:
    """`parse` of the first webhook Service's answer at `api_path` (through the service proxy, the user's token
    forwarded), those of namespace `prefer` asked first, and that Service in words; (None, why none answered) when
    none did."""
    try:
        services = asked_order(find_webhook_services(kube), prefer)
    except KubeForbidden:
        services = []
    failures = []
    for service in services:
        try:
            return parse(read_webhook_document(kube, service, api_path)), f"webhook {service.describe()}"
        except WebhookRefused as exc:
            failures.append(f"webhook {service.describe()} refused the read: {exc.cause}")
        except (KubeError, ModelError) as exc:
            failures.append(f"webhook {service.describe()} did not answer: {getattr(exc, 'cause', exc)}")
    return None, "; ".join(failures) or "no hami-place webhook Service found"


def _cluster_info(body: dict[str, Any]) -> ClusterInfo:
    """A webhook's cluster-info answer, parsed."""
    if "nodes" not in body:
        raise KubeServerError("no node list in its answer")
    return cluster_info_from_dict(body)


def read_webhook_document(kube: Kube, service: WebhookService, api_path: str) -> dict[str, Any]:
    """`GET api_path` of the webhook's API through the service proxy, with the user's bearer token forwarded for the
    webhook to review; `WebhookRefused` with the webhook's own reason when it refuses the caller."""
    token = forwardable_token(kube)
    headers = {FORWARDED_TOKEN_HEADER: token} if token else {}
    try:
        return _proxied(kube, service, api_path, headers)
    except (KubeUnauthorized, KubeForbidden) as error:
        refusal = _webhook_refusal(error.__cause__)
        if refusal is None:
            raise
        why = refusal if token else f"{refusal} (your credentials have no bearer token to forward)"
        raise WebhookRefused(why, status=error.status, reason=error.reason, action=error.action) from error


def forwardable_token(kube: Kube) -> str | None:
    """`Bearer <token>` the client authenticates with, for the webhook to review; None for a client certificate and
    when impersonating (the webhook would review the real user, not the one `--as` names)."""
    api = kube.api
    if any(key.lower().startswith("impersonate-") for key in api.default_headers):
        return None
    for auth in api.configuration.auth_settings().values():
        value = auth.get("value")
        if auth.get("in") == "header" and auth.get("key", "").lower() == "authorization" and isinstance(value, str):
            return value if value.lower().startswith("bearer ") else None
    return None


def _webhook_refusal(error: BaseException | None) -> str | None:
    """The webhook's own reason in a 401/403 its API passed back through the proxy (`{"error": ...}`); None when the
    API server itself refused (its Status body)."""
    if not isinstance(error, ApiException) or not error.body:
        return None
    try:
        body = orjson.loads(error.body)
    except orjson.JSONDecodeError:
        return None
    reason = body.get("error") if isinstance(body, dict) else None
    return reason if isinstance(reason, str) else None


# Query parameters `request` passes by their Python names, as the generated API methods name them.
_QUERY = {
    "label_selector": "labelSelector",
    "field_selector": "fieldSelector",
}


def _get(kube: Kube, path: str, extra_headers: Mapping[str, str] | None = None) -> Callable[..., Any]:
    """A GET of `path` for `request`, through the API client's own connection pool and credentials: the generated
    CoreV1Api costs ~1 s of CPU to import (it builds its validators on import), more than `status`'s whole view at
    1,000 nodes, and the reads of `status` need nothing of it."""

    path = checked_path(path)

    def call(*, _preload_content: bool = False, _request_timeout: Any = None, **query: Any) -> Any:
        api = kube.api
        # gzip as kubectl asks for it: a tenth of the bytes through Python's TLS reads, inflated by zlib in C.
        headers = {
            **api.default_headers,
            "Accept": "application/json",
            "Accept-Encoding": "gzip",
            **(extra_headers or {}),
        }
        for auth in api.configuration.auth_settings().values():
            if auth.get("in") == "header" and auth.get("value"):
                headers[auth["key"]] = auth["value"]
        params = urlencode({_QUERY[key]: value for key, value in query.items()})
        connect, read = _request_timeout or DEFAULT_TIMEOUT
        reply = api.rest_client.pool_manager.request(
            "GET",
            f"{api.configuration.host}{path}" + (f"?{params}" if params else ""),
            headers=headers,
            timeout=urllib3.Timeout(connect=connect, read=read),
            preload_content=_preload_content,
        )
        if not 200 <= reply.status <= 299:
            error = ApiException(status=reply.status, reason=reply.reason)
            error.body = reply.data.decode("utf-8", "replace")
            raise error
        return reply

    return call


def _controller(kind: str, item: dict[str, Any], namespace: str) -> Controller:
    """Extracts what a placement needs from a controller object."""
    spec = item.get("spec") or {}
    owner = next(
        (ref.get("kind") for ref in item.get("metadata", {}).get("ownerReferences") or [] if ref.get("controller")),
        None,
    )
    return Controller(
        kind=kind,
        name=_name(item),
        namespace=namespace,
        selector=spec.get("selector") or {},
        template=spec.get("template") or {},
        owner_kind=owner,
    )


def _name(obj: dict[str, Any]) -> str:
    """metadata.name, or empty."""
    return str((obj.get("metadata") or {}).get("name", ""))


@dataclass(frozen=True)
class ClusterInfoRead:
    """The cluster-info view and where it came from, in words for the user."""

    info: ClusterInfo
    source: str
    from_webhook: bool


def read_cluster_info(kube: Kube) -> ClusterInfoRead:
    """The view of the first webhook Service that answers through the service proxy, else computed from the API."""
    info, said = first_webhook_answer(kube, CLUSTER_INFO_PATH, _cluster_info)
    if info is not None:
        return ClusterInfoRead(info, f"{said} (/api/v1/cluster-info)", True)
    why = said
    # Each batch of pods is counted into the view as it comes: at 40,000 pods the whole list as dicts is ~700 MiB,
    # the allocations a few tens. The next batches are read while one is counted, so the API server encodes on one
    # core while this process works on the other; the nodes are read beside the first batch, and needed (their
    # error raised) only once the first batch is in, so a pods error still comes first.
    # Only what the count reads of each object is decoded (`counted`).
    what = "list pods in all namespaces"
    pods = _read_ahead(
        list_batches(kube, _get(kube, "/api/v1/pods"), what=what, decode=COUNTED_PODS), f"read ahead: {what}"
    )
    nodes = _in_thread(lambda: _counted_nodes(kube), "read nodes")
    first = next(pods, [])
    count = ClusterCount(nodes())
    for batch in itertools.chain([first], pods):
        for found in map(counted_allocation, batch):
            if found is not None:
                count.add(found)
    return ClusterInfoRead(count.view(datetime.now(UTC)), f"computed from the API server ({why})", False)


def _counted_nodes(kube: Kube) -> list[dict[str, Any]]:
    """Every node, with only what the cluster view reads of it."""
    batches = list_batches(kube, _get(kube, "/api/v1/nodes"), what="list nodes", decode=COUNTED_NODES)
    return [node for batch in batches for node in batch]


def _in_thread(read: Callable[[], T], name: str) -> Callable[[], T]:
    """Starts `read` in a thread; the returned call waits for it and gives its result or raises its error."""
    done: list[T] = []
    failed: list[Exception] = []

    def run() -> None:
        try:
            done.append(read())
        except Exception as exc:  # raised again in the caller's thread, where the result is asked for
            failed.append(exc)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()

    def result() -> T:
        thread.join()
        if failed:
            raise failed[0]
        return done[0]

    return result


def _read_ahead(items: Iterator[T], name: str) -> Iterator[T]:
    """The items, the next ones taken by a thread while the caller works on this one; the thread's error is raised
    where its item would be."""
    ahead: queue.Queue[tuple[T] | Exception | None] = queue.Queue(maxsize=BATCHES_AHEAD)

    def read() -> None:
        try:
            for item in items:
                ahead.put((item,))
        except Exception as exc:  # raised again in the caller's thread, as it would be without the read-ahead
            ahead.put(exc)
            return
        ahead.put(None)

    # A daemon: a caller that stops early (an error, ^C) leaves the reader blocked on a full queue until exit.
    threading.Thread(target=read, name=name, daemon=True).start()
    while (got := ahead.get()) is not None:
        if isinstance(got, Exception):
            raise got
        yield got[0]
