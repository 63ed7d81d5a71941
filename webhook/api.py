"""The plain HTTP listener's Flask app: the read-only API, probes and metrics (/mutate is webhook/mutate.py).

Shapes of every response are in webhook/openapi.yaml. A client's mistake is a 4xx with a one-line reason in
`{"error": ...}`; a 500 would mean a bug of ours.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import orjson
from flask import Flask, Response, request
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from werkzeug.exceptions import HTTPException

from kubectl_hami_place import __version__
from kubectl_hami_place.core.access import (
    CLUSTER_INFO_PATH,
    DEFRAG_MOVES_PATH,
    PLACEMENTS_PATH,
    VERSION_PATH,
    required_access,
)
from kubectl_hami_place.core.fields import rfc3339
from kubectl_hami_place.core.k8s_names import is_namespace
from kubectl_hami_place.core.names import FORWARDED_TOKEN_HEADER
from kubectl_hami_place.core.placement import Placement, spec_to_object, status_to_object
from kubectl_hami_place.kube.errors import KubeError
from kubectl_hami_place.kube.watch import WATCH_TIMEOUT_SECONDS
from webhook.access import ReaderGate
from webhook.cache import ClusterCache, json_pieces
from webhook.collector import collector_paused
from webhook.metrics import Metrics
from webhook.mutate import error_body

log = logging.getLogger(__name__)

# /readyz turns unready when a kind of the cache heard nothing (no list, event or bookmark) for this long: twice a
# watch's timeout, at whose end a healthy API server always answers (a bookmark, or the watch's end and a new one).
STALE_SECONDS = 2 * WATCH_TIMEOUT_SECONDS


def _error(status: int, reason: str) -> Response:
    return Response(error_body(reason), status=status, mimetype="application/json")


def _json(body: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(body), status=status, mimetype="application/json")


def _http_errors(app: Flask) -> None:
    """Werkzeug's HTML error pages become the same one-line JSON errors as ours."""

    @app.errorhandler(HTTPException)
    def on_http_error(error: HTTPException) -> Response:
        return _error(error.code or 400, error.description or error.name)


def probe_app(
    cache: ClusterCache,
    mutate_serving: Callable[[], str | None] = lambda: None,
    mutate_alive: Callable[[], str | None] = lambda: None,
) -> Flask:
    """GET /livez, /healthz and /readyz only: the probes' own port, which no client of the API can crowd out.

    /livez is the liveness probe: whether the HTTPS /mutate listener answers (`mutate_alive`, None when it does),
    draining or not, so a replica whose listener died is restarted while one shutting down is left to finish."""
    app = Flask("hami-place-probes")
    _http_errors(app)
    _probes(app, cache, mutate_serving)

    @app.get("/livez")
    def livez() -> Response:
        reason = mutate_alive()
        if reason is not None:
            return _json({"status": "not alive", "reason": reason}, 503)
        return _json({"status": "ok"})

    return app


def _probes(app: Flask, cache: ClusterCache, mutate_serving: Callable[[], str | None]) -> None:
    """/healthz (the process answers) and /readyz (synced, fresh, /mutate answers) on the app."""

    @app.get("/healthz")
    def healthz() -> Response:
        return _json({"status": "ok"})

    @app.get("/readyz")
    def readyz() -> Response:
        if not cache.ready():
            waiting = [r.kind for r in cache.reflectors() if not r.synced.is_set()]
            return _json({"status": "not ready", "reason": f"cache not synced yet: {', '.join(waiting)}"}, 503)
        now = time.time()
        stale = [r.kind for r in cache.reflectors() if r.last_sync is None or now - r.last_sync > STALE_SECONDS]
        if stale:
            why = f"cache stale: no list, event or bookmark for over {STALE_SECONDS:.0f} s: {', '.join(stale)}"
            return _json({"status": "not ready", "reason": why}, 503)
        reason = mutate_serving()
        if reason is not None:
            return _json({"status": "not ready", "reason": reason}, 503)
        return _json({"status": "ready", "lastSyncTime": _last_sync(cache)})


def api_app(
    cache: ClusterCache,
    metrics: Metrics,
    mutate_serving: Callable[[], str | None] = lambda: None,
    notices: Sequence[str] = (),
    *,
    readers: ReaderGate,
    defrag_moves: Callable[[], Mapping[str, Any]] | None = None,
) -> Flask:
    """GET /api/v1/cluster-info, /api/v1/placements, /api/v1/version, /healthz, /readyz, /metrics, and with
    `defrag_moves` /api/v1/defrag/moves (the controller's moves, their seals checked with the key the CLI lacks).

    `mutate_serving` says why /mutate would not be answered right now (None when it would): /readyz is ready only
    when the cache is synced, has heard from the API server within STALE_SECONDS (a replica whose watches died
    decides from an old view), and /mutate answers, so the Service sends the API server only to replicas that work.
    The documents name pods and placements, so `readers` decides who may read each (probes and /metrics name none).
    `notices` about the server itself (its webhook port open to anyone) lead cluster-info's warnings, which
    `kubectl hami-place status` shows.
    """
    app = Flask("hami-place-api")
    _http_errors(app)

    _probes(app, cache, mutate_serving)

    @app.before_request
    def authorize() -> Response | None:
        namespace = request.args.get("namespace") or None
        if namespace is not None and not is_namespace(namespace):
            return _error(400, "namespace must be a namespace's name (a DNS-1123 label); fix ?namespace=")
        # The route that will answer, not the raw path: the right follows what is served.
        access = required_access(request.url_rule.rule if request.url_rule else "", namespace)
        if access is None:
            return None
        # Through the API server's service proxy the caller's Authorization is gone (the API server strips it once
        # it has authenticated the caller): the plugin forwards its token in a header of ours.
        authorization = request.headers.get("Authorization") or request.headers.get(FORWARDED_TOKEN_HEADER)
        refused = readers.refusal(request.remote_addr, authorization, access)
        if refused is None:
            return None
        response = _error(refused.status, refused.reason)
        if refused.status == 401:
            response.headers["WWW-Authenticate"] = 'Bearer realm="hami-place"'
        return response

    @app.get("/metrics")
    def metrics_endpoint() -> Response:
        return Response(generate_latest(metrics.registry), mimetype=CONTENT_TYPE_LATEST)

    @app.get(VERSION_PATH)
    def version() -> Response:
        # `kubectl hami-place version` compares it with its own; answered before the cache syncs.
        return _json({"version": __version__})

    @app.get(CLUSTER_INFO_PATH)
    def cluster_info() -> Response:
        if not cache.ready():
            return _error(503, "cache not synced yet; retry in a few seconds")
        with collector_paused():
            # Only the nodes that changed since the last request are built and encoded again (see the cache).
            document = cache.cluster_info_document(datetime.now(UTC))
        document["lastSyncTime"] = _last_sync(cache)
        document["warnings"] = [*notices, *document["warnings"]]
        # The pieces are the kept views themselves (no copies): listed once, for the length and for the body.
        pieces = list(json_pieces(document))
        length = sum(map(len, pieces))
        return Response(_chunks(pieces), mimetype="application/json", headers={"Content-Length": str(length)})

    @app.get(PLACEMENTS_PATH)
    def placements() -> Response:
        if not cache.ready():
            return _error(503, "cache not synced yet; retry in a few seconds")
        namespace = request.args.get("namespace") or None
        placements = cache.parsed_placements(namespace)
        return _json(placements_view(placements, cache.pods_by_claim(), _last_sync(cache)))

    if defrag_moves is not None:
        moves = defrag_moves

        @app.get(DEFRAG_MOVES_PATH)
        def defrag_moves_endpoint() -> Response:
            try:
                return _json(moves())
            except KubeError as error:
                return _error(503, f"could not list the moves' placements: {error}; retry in a few seconds")

    return app


# What a streamed body is written in: waitress sends each write at once, so thousands of small pieces would be as
# many sends; small enough to come from the allocator's free lists rather than a fresh mapping.
CHUNK_BYTES = 64 * 1024


def _chunks(pieces: Iterable[bytes]) -> Iterator[bytes]:
    """The pieces joined into writes of about CHUNK_BYTES, in order."""
    group: list[bytes] = []
    size = 0
    for piece in pieces:
        group.append(piece)
        size += len(piece)
        if size >= CHUNK_BYTES:
            yield b"".join(group)
            group, size = [], 0
    if group:
        yield b"".join(group)


def placements_view(
    placements: Sequence[Placement],
    claimed_pods: Mapping[tuple[str, str], Mapping[str, Any]],
    last_sync: str | None,
) -> dict[str, Any]:
    """The `GET /api/v1/placements` document: each placement given (the cache reads one namespace's or all), its
    state, and the pod that consumed it (no token)."""
    items = []
    for placement in placements:
        status = status_to_object(placement.status)
        token = placement.status.claim_token
        pod = claimed_pods.get((placement.namespace, token)) if token else None
        claim = status.get("claim")
        items.append(
            {
                "namespace": placement.namespace,
                "name": placement.name,
                "uid": placement.uid,
                "createdAt": rfc3339(placement.created) if placement.created is not None else None,
                "spec": spec_to_object(placement.spec),
                "phase": placement.status.phase.value,
                "message": placement.status.message,
                # The token is what a pod must carry to be honoured, so it is never served.
                "claim": {k: v for k, v in claim.items() if k != "token"} if claim is not None else None,
                "consumedBy": status.get("consumedBy"),
                "consumedAt": status.get("consumedAt"),
                "eviction": status.get("eviction"),
                "matchedPod": _pod_summary(pod) if pod is not None else None,
            }
        )
    items.sort(key=lambda item: (item["namespace"], item["name"]))
    return {"lastSyncTime": last_sync, "placements": items}


def _pod_summary(pod: Mapping[str, Any]) -> dict[str, Any]:
    meta = pod.get("metadata") or {}
    return {
        "namespace": meta.get("namespace", ""),
        "name": meta.get("name", ""),
        "uid": meta.get("uid", ""),
        "node": (pod.get("spec") or {}).get("nodeName") or None,
        "phase": (pod.get("status") or {}).get("phase") or "Pending",
    }


def _last_sync(cache: ClusterCache) -> str | None:
    stamp = cache.last_sync_time()
    return None if stamp is None else rfc3339(datetime.fromtimestamp(stamp, UTC))
