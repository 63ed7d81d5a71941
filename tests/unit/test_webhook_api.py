"""The webhook's HTTP surface on a cache filled by hand (no API server): documented shapes, and 4xx for bad input."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client import ApiClient, Configuration
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

import kubectl_hami_place
import webhook
from kubectl_hami_place.core.admission import Settings
from kubectl_hami_place.core.defrag.budget import MoveRecord
from kubectl_hami_place.core.defrag.report import moves_document, moves_from_document
from kubectl_hami_place.core.fields import rfc3339
from kubectl_hami_place.core.names import ROOM_RESERVED_ANNOTATION
from kubectl_hami_place.core.reservation import reservation_value
from kubectl_hami_place.kube.client import Kube
from kubectl_hami_place.kube.errors import KubeUnreachable
from tests.webhook_listener import call
from webhook.access import ReaderGate
from webhook.admit import Admitter
from webhook.api import CHUNK_BYTES, STALE_SECONDS, _chunks, api_app, probe_app
from webhook.cache import ClusterCache
from webhook.metrics import Metrics
from webhook.mutate import BODIES_OVER_BUDGET, MAX_REVIEW_BYTES, BodyBudget, ClientMistake, MutateApp, read_body
from webhook.server import API_MAX_BODY_BYTES, ServeOptions, api_server, close_api_server, open_port_notices

NS = "team-a"
UUID0 = "GPU-d66f8818-d420-5068-879c-852329dc277d"
UUID1 = "GPU-0ca0daa1-5c30-5d99-aa15-826ea34ee962"


def unreachable_kube() -> Kube:
    """A connection to nowhere: these tests must never reach it (a call would fail loudly)."""
    configuration = Configuration()
    configuration.host = "http://127.0.0.1:9"
    configuration.retries = 0
    return Kube(api=ApiClient(configuration), namespace="default", server=configuration.host, context=None)


def never_asked(review: dict[str, Any]) -> dict[str, Any]:
    raise AssertionError(f"the API server was asked a {review['kind']}: a loopback reader needs no review")


# The test client calls from 127.0.0.1: the pod's own loopback, which the API trusts without a token.
READERS = ReaderGate(never_asked, never_asked)


def gpu_node(name: str = "gpu-a100-0") -> dict[str, Any]:
    cards = [
        {
            "id": UUID0,
            "index": 0,
            "count": 10,
            "devmem": 40960,
            "devcore": 100,
            "type": "NVIDIA-A100-SXM4-40GB",
            "health": True,
            "mode": "hami-core",
        },
        {
            "id": UUID1,
            "index": 1,
            "count": 10,
            "devmem": 40960,
            "devcore": 100,
            "type": "NVIDIA-A100-SXM4-40GB",
            "numa": 1,
            "health": True,
            "mode": "hami-core",
        },
    ]
    return {
        "metadata": {
            "name": name,
            "resourceVersion": "1",
            "annotations": {"hami.io/node-nvidia-register": json.dumps(cards)},
        },
        "status": {"allocatable": {"nvidia.com/gpu": "20"}, "conditions": [{"type": "Ready", "status": "True"}]},
    }


def hami_pod(name: str = "train-0", token: str | None = None) -> dict[str, Any]:
    annotations = {"hami.io/vgpu-node": "gpu-a100-0", "hami.io/vgpu-devices-allocated": f"{UUID0},NVIDIA,3000,30:;"}
    if token:
        annotations["scheduling.hami.placement.com/claim"] = token
    return {
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": f"uid-{name}",
            "resourceVersion": "2",
            "annotations": annotations,
        },
        "spec": {
            "schedulerName": "hami-scheduler",
            "nodeName": "gpu-a100-0",
            "containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "1"}}}],
        },
        "status": {"phase": "Running"},
    }


def placement(name: str = "p1", status: dict[str, Any] | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "scheduling.hami.placement.com/v1",
        "kind": "HamiPodPlacement",
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": f"uid-{name}",
            "resourceVersion": "3",
            "creationTimestamp": "2026-11-29T10:00:00Z",
        },
        "spec": {
            "reqID": f"req-{name}",
            "podSelector": {"matchLabels": {"app": "train"}},
            "nodeName": "gpu-a100-0",
            "gpuDevices": ["gpu-1/50"],
        },
    }
    if status is not None:
        obj["status"] = status
    return obj


def filled_cache(
    placements: list[dict[str, Any]],
    pods: list[dict[str, Any]],
    *,
    node: dict[str, Any] | None = None,
    planning: bool = False,
) -> ClusterCache:
    """A cache holding these objects (and `node`, else gpu_node()) and marked synced, as if its watches had listed
    them; with `planning` as the server's while its controller plans."""
    cache = ClusterCache(unreachable_kube().api, "hami-scheduler", planning=planning)
    for obj in [gpu_node() if node is None else node]:
        cache.nodes.upsert(obj)
    for obj in pods:
        cache.pods.upsert(obj)
    for obj in placements:
        cache.placements.upsert(obj)
    for reflector in cache.reflectors():
        reflector.last_sync = time.time()
        reflector.synced.set()
    return cache


def dumps(value: Any) -> bytes:
    return json.dumps(value).encode()


def admitter(cache: ClusterCache, metrics: Metrics) -> Admitter:
    return Admitter(unreachable_kube(), cache, Settings(), metrics, new_token=lambda: "tok-unit")


def review(*, dry_run: bool, labels: dict[str, str] | None = None, uid: str = "rev-1") -> dict[str, Any]:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "trainer", "namespace": NS, "labels": labels or {"app": "train"}},
        "spec": {
            "schedulerName": "hami-scheduler",
            "containers": [{"name": "main", "image": "x", "resources": {"limits": {"nvidia.com/gpu": 1}}}],
        },
    }
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "operation": "CREATE",
            "namespace": NS,
            "name": "trainer",
            "object": pod,
            "dryRun": dry_run,
        },
    }


# The OpenAPI document, checked against real responses ----------------------------------------------------------

OPENAPI = yaml.safe_load((Path(webhook.__file__).parent / "openapi.yaml").read_text())
TYPES = {"object": dict, "array": list, "string": str, "integer": int, "boolean": bool, "number": (int, float)}


def check(value: Any, schema: dict[str, Any], where: str = "$") -> None:
    """Validate against the OpenAPI subset the document uses: $ref, type, nullable, required, properties, enum,
    pattern, maxItems, items."""
    if "$ref" in schema:
        target: Any = OPENAPI
        for part in schema["$ref"].lstrip("#/").split("/"):
            target = target[part]
        check(value, target, where)
        return
    if value is None:
        assert schema.get("nullable"), f"{where} is null but not nullable"
        return
    kind = schema.get("type")
    if kind:
        assert isinstance(value, TYPES[kind]), f"{where}: expected {kind}, got {type(value).__name__}"
        assert not (kind == "integer" and isinstance(value, bool)), f"{where}: expected integer, got boolean"
    if "enum" in schema:
        assert value in schema["enum"], f"{where}: {value!r} not in {schema['enum']}"
    if "pattern" in schema:
        assert re.search(schema["pattern"], value), f"{where}: {value!r} does not match {schema['pattern']}"
    if "maxItems" in schema:
        assert len(value) <= schema["maxItems"], f"{where}: more than {schema['maxItems']} items"
    for key in schema.get("required", []):
        assert key in value, f"{where}: missing required {key}"
    for key, sub in (schema.get("properties") or {}).items():
        if isinstance(value, dict) and key in value:
            check(value[key], sub, f"{where}.{key}")
    if "items" in schema and isinstance(value, list):
        for index, item in enumerate(value):
            check(item, schema["items"], f"{where}[{index}]")


def response_schema(path: str, method: str, status: str) -> dict[str, Any]:
    response = OPENAPI["paths"][path][method]["responses"][status]
    if "$ref" in response:
        response = OPENAPI["components"]["responses"][response["$ref"].split("/")[-1]]
    schema: dict[str, Any] = response["content"]["application/json"]["schema"]
    return schema


def readyz_schema(status: str) -> dict[str, Any]:
    schema: dict[str, Any] = OPENAPI["paths"]["/readyz"]["get"]["responses"][status]["content"]["application/json"]
    return dict(schema["schema"])


def test_cluster_info_matches_the_documented_shape() -> None:
    cache = filled_cache([placement()], [hami_pod()])
    client = api_app(cache, Metrics(), readers=READERS).test_client()
    reply = client.get("/api/v1/cluster-info")
    assert reply.status_code == 200
    body = reply.get_json()
    check(body, response_schema("/api/v1/cluster-info", "get", "200"))
    card = body["nodes"][0]["cards"][0]
    assert card["uuid"] == UUID0
    assert card["memory"] == {"total": 40960, "used": 3000, "free": 37960}
    assert [pod["name"] for pod in card["pods"]] == ["train-0"]
    assert body["lastSyncTime"]
    until = (datetime.now(UTC) + timedelta(minutes=1)).replace(microsecond=0)
    room = reservation_value([UUID0], until, None, key=cache.room_key, pod=f"{NS}/waiting", uid="uid-waiting")
    waiting = {
        "metadata": {
            "namespace": NS,
            "name": "waiting",
            "uid": "uid-waiting",
            "resourceVersion": "9",
            "annotations": {ROOM_RESERVED_ANNOTATION: room},
        },
        "spec": {"schedulerName": "hami-scheduler"},
        "status": {"phase": "Pending"},
    }
    cache.pods.upsert(waiting)
    kept = client.get("/api/v1/cluster-info").get_json()
    check(kept, response_schema("/api/v1/cluster-info", "get", "200"))
    assert kept["keptRooms"] == [{"pod": f"{NS}/waiting", "cards": [UUID0], "until": rfc3339(until)}]


def test_the_version_is_served_before_the_cache_syncs() -> None:
    api = api_app(ClusterCache(unreachable_kube().api, "hami-scheduler"), Metrics(), readers=READERS).test_client()
    reply = api.get("/api/v1/version")
    assert reply.status_code == 200
    check(reply.get_json(), response_schema("/api/v1/version", "get", "200"))
    assert reply.get_json() == {"version": kubectl_hami_place.__version__}


def test_defrag_moves_match_the_documented_shape_and_a_failed_list_is_a_503() -> None:
    moved = MoveRecord(
        "run-1",
        f"{NS}/x",
        NS,
        "gpu-a100-0",
        datetime(2026, 12, 3, 12, 0, tzinfo=UTC),
        "Evicted",
        "gpu-a100-1",
        from_cards=("gpu-1",),
        to_cards=("gpu-0", "gpu-2"),
    )
    served = api_app(
        filled_cache([], []),
        Metrics(),
        readers=READERS,
        defrag_moves=lambda: moves_document([moved], seals_checked=True),
    ).test_client()
    reply = served.get("/api/v1/defrag/moves")
    assert reply.status_code == 200
    check(reply.get_json(), response_schema("/api/v1/defrag/moves", "get", "200"))
    assert moves_from_document(reply.get_json()) == ((moved,), True)

    def unreachable() -> dict[str, Any]:
        raise KubeUnreachable("connection refused")

    failing = api_app(filled_cache([], []), Metrics(), readers=READERS, defrag_moves=unreachable).test_client()
    reply = failing.get("/api/v1/defrag/moves")
    assert (reply.status_code, reply.get_json()) == (
        503,
        {"error": "could not list the moves' placements: connection refused; retry in a few seconds"},
    )
    unserved = api_app(filled_cache([], []), Metrics(), readers=READERS).test_client()
    assert unserved.get("/api/v1/defrag/moves").status_code == 404


def test_placements_match_the_documented_shape_and_name_the_matched_pod() -> None:
    claim = {"token": "tok-a", "claimedAt": "2026-11-29T11:00:00Z"}
    consumed = placement(
        "p1",
        status={
            "phase": "Consumed",
            "claim": claim,
            "consumedBy": {"name": "train-0", "uid": "uid-train-0"},
            "consumedAt": "2026-11-29T11:00:00Z",
        },
    )
    cache = filled_cache([consumed, placement("p2")], [hami_pod(token="tok-a")])
    client = api_app(cache, Metrics(), readers=READERS).test_client()
    body = client.get("/api/v1/placements").get_json()
    check(body, response_schema("/api/v1/placements", "get", "200"))
    first, second = body["placements"]
    assert first["matchedPod"] == {
        "namespace": NS,
        "name": "train-0",
        "uid": "uid-train-0",
        "node": "gpu-a100-0",
        "phase": "Running",
    }
    assert (first["phase"], second["phase"], second["matchedPod"]) == ("Consumed", "Pending", None)
    assert first["claim"] == {"claimedAt": "2026-11-29T11:00:00Z"}, "the token is never served"
    for path in ("/api/v1/placements", "/api/v1/cluster-info"):
        assert "tok-a" not in client.get(path).get_data(as_text=True), path
    other = client.get("/api/v1/placements?namespace=elsewhere").get_json()
    assert other["placements"] == []


def test_a_namespaces_placements_are_served_whole_with_their_consumer_and_eviction() -> None:
    """The CLI shows a placement's consumer and eviction from this document alone, to a reader of one namespace too."""
    consumed = placement(
        "p1",
        status={
            "phase": "Consumed",
            "claim": {"token": "tok-a", "claimedAt": "2026-11-29T11:00:00Z"},
            "consumedBy": {"name": "train-0", "uid": "uid-train-0"},
            "consumedAt": "2026-11-29T11:01:00Z",
        },
    )
    evicting = placement(
        "p2",
        status={
            "phase": "Evicting",
            "consumedBy": {"name": "train-1", "uid": "uid-train-1"},
            "eviction": {"pod": "old", "result": "Pending", "attempts": 1, "time": "2026-11-29T11:02:00Z"},
        },
    )
    evicting["spec"]["evictPod"] = "old"
    cache = filled_cache([evicting, consumed], [hami_pod(token="tok-a")])
    for reflector in cache.reflectors():
        reflector.last_sync = 1796108400.0
    body = api_app(cache, Metrics(), readers=READERS).test_client().get(f"/api/v1/placements?namespace={NS}")
    spec = {"podSelector": {"matchLabels": {"app": "train"}}, "nodeName": "gpu-a100-0", "gpuDevices": ["gpu-1/50"]}
    assert body.get_json() == {
        "lastSyncTime": "2026-12-01T07:00:00Z",
        "placements": [
            {
                "namespace": NS,
                "name": "p1",
                "uid": "uid-p1",
                "createdAt": "2026-11-29T10:00:00Z",
                "spec": {"reqID": "req-p1", **spec},
                "phase": "Consumed",
                "message": "",
                "claim": {"claimedAt": "2026-11-29T11:00:00Z"},
                "consumedBy": {"name": "train-0", "uid": "uid-train-0"},
                "consumedAt": "2026-11-29T11:01:00Z",
                "eviction": None,
                "matchedPod": {
                    "namespace": NS,
                    "name": "train-0",
                    "uid": "uid-train-0",
                    "node": "gpu-a100-0",
                    "phase": "Running",
                },
            },
            {
                "namespace": NS,
                "name": "p2",
                "uid": "uid-p2",
                "createdAt": "2026-11-29T10:00:00Z",
                "spec": {"reqID": "req-p2", **spec, "evictPod": "old"},
                "phase": "Evicting",
                "message": "",
                "claim": None,
                "consumedBy": {"name": "train-1", "uid": "uid-train-1"},
                "consumedAt": None,
                "eviction": {"pod": "old", "result": "Pending", "attempts": 1, "time": "2026-11-29T11:02:00Z"},
                "matchedPod": None,
            },
        ],
    }


def test_a_namespaces_placements_are_its_own_whichever_namespace_sorts_first() -> None:
    """`list -n` of the namespace that sorts after another must not come back empty or hold the other's."""
    elsewhere = placement("p0")
    elsewhere["metadata"]["namespace"] = "aaa-team"
    cache = filled_cache([elsewhere, placement("p1"), placement("p2")], [])
    client = api_app(cache, Metrics(), readers=READERS).test_client()

    def served(query: str) -> list[tuple[str, str]]:
        items = client.get(f"/api/v1/placements{query}").json["placements"]
        return [(item["namespace"], item["name"]) for item in items]

    assert served(f"?namespace={NS}") == [(NS, "p1"), (NS, "p2")]
    assert served("?namespace=aaa-team") == [("aaa-team", "p0")]
    assert served("") == [("aaa-team", "p0"), (NS, "p1"), (NS, "p2")]


@pytest.mark.usefixtures("east_of_utc")
def test_the_last_sync_time_is_utc_whatever_the_servers_time_zone() -> None:
    """The CLI reads lastSyncTime as UTC (its `Z`); a server image with a local zone must not shift it by hours."""
    cache = filled_cache([], [])
    for reflector in cache.reflectors():
        reflector.last_sync = 1796108400.0
    client = api_app(cache, Metrics(), readers=READERS).test_client()
    assert client.get("/api/v1/placements").get_json() == {"lastSyncTime": "2026-12-01T07:00:00Z", "placements": []}


def test_a_streamed_body_is_written_in_whole_pieces_joined_up_to_chunk_bytes_in_order() -> None:
    """Thousands of small pieces must not be as many sends; a piece is never split or reordered."""
    pieces = [b"a" * (CHUNK_BYTES - 1), b"b", b"c" * (CHUNK_BYTES - 1), b"d", b"e" * CHUNK_BYTES, b"f" * 5]
    assert list(_chunks(pieces)) == [
        b"a" * (CHUNK_BYTES - 1) + b"b",
        b"c" * (CHUNK_BYTES - 1) + b"d",
        b"e" * CHUNK_BYTES,
        b"f" * 5,
    ]
    assert list(_chunks([])) == []


def test_a_dry_run_admission_answers_the_documented_shape_with_a_patch() -> None:
    metrics = Metrics()
    cache = filled_cache([placement()], [])
    status, _, reply = call(
        MutateApp(admitter(cache, metrics), metrics), "POST", "/mutate", dumps(review(dry_run=True))
    )
    assert status == 200
    body = json.loads(reply)
    check(body, response_schema("/mutate", "post", "200"))
    assert body["response"]["uid"] == "rev-1" and body["response"]["allowed"] is True
    assert body["response"]["patchType"] == "JSONPatch"
    assert 'hami_place_admissions_total{result="dry_run"} 1.0' in generate_latest(metrics.registry).decode()


def test_a_pod_no_placement_selects_is_allowed_without_a_patch() -> None:
    metrics = Metrics()
    app = MutateApp(admitter(filled_cache([placement()], []), metrics), metrics)
    body = json.loads(call(app, "POST", "/mutate", dumps(review(dry_run=False, labels={"app": "web"})))[2])
    check(body, response_schema("/mutate", "post", "200"))
    assert body["response"] == {"uid": "rev-1", "allowed": True}


# Malformed requests: a 4xx with a reason, and the server keeps answering ------------------------------------------

# Nested 1,000 deep (JSON parsers take it; str() and the patch diff hit Python's recursion limit): where a string
# belongs, and in a DELETE review the decision ignores.
DEEP = b"[" * 1000 + b"]" * 1000
DEEP_API_VERSION = b'{"apiVersion":' + DEEP + b',"kind":"x"}'
DEEP_KIND = (
    b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":'
    b'{"uid":"u","operation":"DELETE","kind":{"kind":' + DEEP + b"}}}"
)


@pytest.mark.parametrize("data", [DEEP_API_VERSION, DEEP_KIND])
def test_a_body_nested_past_the_limit_is_a_400_on_the_connections_fast_path_too(data: bytes) -> None:
    metrics = Metrics()
    app = MutateApp(admitter(filled_cache([], []), metrics), metrics)
    answer = app.answer_on_loop(data, time.monotonic())
    assert answer is not None and answer[0] == 400, answer
    assert b"nests deeper than 100 levels" in answer[1]


@pytest.mark.parametrize(
    ("data", "content_type", "status", "fragment"),
    [
        (b"{not json", "application/json", 400, "not valid JSON"),
        (b"[]", "application/json", 400, "JSON object"),
        (json.dumps({"apiVersion": "v1", "kind": "Pod"}).encode(), "application/json", 400, "expected apiVersion"),
        (
            json.dumps(
                {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"operation": "CREATE"}}
            ).encode(),
            "application/json",
            400,
            "no uid",
        ),
        (b"x" * (MAX_REVIEW_BYTES + 1), "application/json", 413, "larger than"),
        (b"uid=1", "application/x-www-form-urlencoded", 415, "application/json"),
        (DEEP_API_VERSION, "application/json", 400, "nests deeper than 100 levels"),
        (DEEP_KIND, "application/json", 400, "nests deeper than 100 levels"),
    ],
)
def test_malformed_bodies_get_a_4xx_with_a_reason(data: bytes, content_type: str, status: int, fragment: str) -> None:
    metrics = Metrics()
    app = MutateApp(admitter(filled_cache([], []), metrics), metrics)
    for chunks in (1, 3):  # with a Content-Length, and chunked (no length up front)
        got, _, reply = call(app, "POST", "/mutate", data, content_type=content_type, chunks=chunks)
        assert got == status
        error = json.loads(reply)
        check(error, response_schema("/mutate", "post", str(status)))
        assert fragment in error["error"]
    assert call(app, "POST", "/mutate", dumps(review(dry_run=True)))[0] == 200
    assert 'hami_place_admissions_total{result="invalid"} 2.0' in generate_latest(metrics.registry).decode()


def test_unknown_paths_and_methods_are_json_4xx() -> None:
    metrics = Metrics()
    app = MutateApp(admitter(filled_cache([], []), metrics), metrics)
    status, headers, body = call(app, "GET", "/mutate")
    assert (status, headers["content-type"]) == (405, "application/json")
    assert "POST an AdmissionReview" in json.loads(body)["error"]
    assert call(app, "POST", "/elsewhere", b"{}")[0] == 404
    assert call(app, "DELETE", "/healthz")[0] == 405


def test_a_body_that_does_not_arrive_in_time_is_a_408() -> None:
    async def never() -> dict[str, Any]:
        await asyncio.sleep(30)
        return {}

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    app = MutateApp(admitter(filled_cache([], []), Metrics()), Metrics(), admission_timeout=1.0)
    scope = {"type": "http", "method": "POST", "path": "/mutate", "headers": [(b"content-type", b"application/json")]}
    asyncio.run(app(scope, never, send))
    assert sent[0]["status"] == 408
    check(json.loads(sent[1]["body"]), response_schema("/mutate", "post", "408"))
    assert "did not arrive" in json.loads(sent[1]["body"])["error"]


def test_an_unsynced_cache_is_not_ready_and_admits_unchanged_with_a_warning() -> None:
    cache = ClusterCache(unreachable_kube().api, "hami-scheduler")
    metrics = Metrics()
    api = api_app(cache, metrics, readers=READERS).test_client()
    reply = api.get("/readyz")
    assert reply.status_code == 503
    check(reply.get_json(), readyz_schema("503"))
    assert api.get("/api/v1/cluster-info").status_code == 503
    assert api.get("/healthz").get_json() == {"status": "ok"}
    body = json.loads(
        call(MutateApp(admitter(cache, metrics), metrics), "POST", "/mutate", dumps(review(dry_run=True)))[2]
    )
    assert body["response"]["allowed"] is True
    assert "not synced" in body["response"]["warnings"][0]


def test_not_ready_while_mutate_does_not_answer() -> None:
    api = api_app(
        filled_cache([], []), Metrics(), lambda: "/mutate does not answer on port 8443: timed out", readers=READERS
    ).test_client()
    reply = api.get("/readyz")
    assert reply.status_code == 503
    check(reply.get_json(), readyz_schema("503"))
    assert reply.get_json()["reason"] == "/mutate does not answer on port 8443: timed out"


def test_a_cache_that_heard_nothing_for_twice_a_watch_is_not_ready_until_it_hears_again() -> None:
    cache = filled_cache([], [])
    api = api_app(cache, Metrics(), readers=READERS).test_client()
    cache.pods.last_sync = time.time() - STALE_SECONDS - 1
    reply = api.get("/readyz")
    assert reply.status_code == 503
    check(reply.get_json(), readyz_schema("503"))
    assert reply.get_json()["reason"] == "cache stale: no list, event or bookmark for over 120 s: pods"
    cache.pods.last_sync = time.time()
    assert api.get("/readyz").status_code == 200


def test_the_probe_port_serves_the_probes_and_nothing_else() -> None:
    probes = probe_app(filled_cache([], []), lambda: None).test_client()
    assert probes.get("/healthz").get_json() == {"status": "ok"}
    assert probes.get("/readyz").status_code == 200
    for path in ("/api/v1/cluster-info", "/api/v1/placements", "/metrics"):
        assert probes.get(path).status_code == 404, path


def test_livez_on_the_probe_port_answers_whether_the_https_listener_does() -> None:
    listener: list[str | None] = [None]
    probes = probe_app(filled_cache([], []), lambda: "shutting down", lambda: listener[0]).test_client()
    assert probes.get("/livez").get_json() == {"status": "ok"}, "a replica draining is still alive"
    listener[0] = "/mutate does not answer on port 8443: connection refused"
    answer = probes.get("/livez")
    assert answer.status_code == 503
    assert answer.get_json()["reason"] == listener[0]


def test_cluster_info_leads_its_warnings_with_the_servers_notices() -> None:
    notices = open_port_notices(ServeOptions(kubeconfig=None))
    assert notices == [
        "the webhook port 8443 takes an AdmissionReview from anyone who can reach it: a forged review can hold an "
        "open placement for the claim grace, again and again, and large ones slow every admission; admit only the "
        "API server (chart networkPolicy or server.clientCA; see docs/security.md)"
    ]
    api = api_app(filled_cache([], []), Metrics(), notices=notices, readers=READERS).test_client()
    assert api.get("/api/v1/cluster-info").get_json()["warnings"] == notices
    assert open_port_notices(ServeOptions(kubeconfig=None, network_policy="gpu-descheduler-webhook")) == []
    assert open_port_notices(ServeOptions(kubeconfig=None, client_ca_file="ca.crt")) == []


def test_a_request_body_over_the_limit_gets_413_at_once() -> None:
    server = api_server(api_app(filled_cache([], []), Metrics(), readers=READERS), "127.0.0.1", 0)
    port = server.socket.getsockname()[1]  # type: ignore[union-attr]
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            head = f"POST /api/v1/placements HTTP/1.1\r\nHost: x\r\nContent-Length: {API_MAX_BODY_BYTES + 1}\r\n\r\n"
            sock.sendall(head.encode())  # the body never comes: the answer must not wait for it
            assert sock.recv(64).startswith(b"HTTP/1.1 413")
    finally:
        close_api_server(server)
        thread.join(5)


def test_the_mutate_listener_answers_its_health_check_without_counting_an_admission() -> None:
    metrics = Metrics()
    app = MutateApp(admitter(filled_cache([], []), metrics), metrics)
    assert json.loads(call(app, "GET", "/healthz")[2]) == {"status": "ok"}
    assert 'result="invalid"} 0.0' in generate_latest(metrics.registry).decode()


def test_ready_and_metrics_after_sync() -> None:
    metrics = Metrics()
    cache = filled_cache([], [])
    for reflector in cache.reflectors():
        metrics.watch_sync_age(reflector)
    api = api_app(cache, metrics, readers=READERS).test_client()
    ready = api.get("/readyz")
    assert ready.status_code == 200
    check(ready.get_json(), readyz_schema("200"))
    text = api.get("/metrics").get_data(as_text=True)
    for name in (
        "hami_place_admissions_total",
        "hami_place_claims_total",
        "hami_place_claim_conflicts_total",
        "hami_place_evictions_total",
        "hami_place_cache_sync_age_seconds",
        "hami_place_admission_duration_seconds_bucket",
    ):
        assert name in text
    assert 'hami_place_cache_sync_age_seconds{kind="placements"}' in text


def test_metrics_count_the_cached_placements_by_phase_and_label_pinned_cards_as_hami_does() -> None:
    claimed = {"phase": "Consumed", "claim": {"token": "tok-b", "claimedAt": "2026-11-29T10:01:00Z"}}
    pinned = hami_pod("train-b", token="tok-b")
    pinned["metadata"]["annotations"]["scheduling.hami.placement.com/placement"] = "p2"
    ended = hami_pod("train-c", token="tok-c")
    ended["metadata"]["annotations"]["scheduling.hami.placement.com/placement"] = "p3"
    ended["status"]["phase"] = "Succeeded"
    unplaced = hami_pod("train-d")
    forged = hami_pod("train-e", token="tok-forged")  # its editor wrote a claim and a placement no claim holds
    forged["metadata"]["annotations"]["scheduling.hami.placement.com/placement"] = "p2"
    metrics = Metrics()
    cache = filled_cache(
        [placement("p1"), placement("p2", claimed), placement("p3", claimed)], [pinned, ended, unplaced, forged]
    )
    metrics.watch_cache(cache)
    samples = scraped(cache, metrics)
    assert samples["hami_place_placements"] == [
        ({"phase": "Pending"}, 1.0),
        ({"phase": "Evicting"}, 0.0),
        ({"phase": "Consumed"}, 2.0),
        ({"phase": "Failed"}, 0.0),
        ({"phase": "Expired"}, 0.0),
    ]
    assert samples["hami_place_pinned_card_info"] == [
        ({"placement_namespace": NS, "placement": "p2", "node": "gpu-a100-0", "device_uuid": UUID0}, 1.0)
    ], "the running pinned pod's card only: not the ended one's, not an unpinned pod's, not a forged claim's"
    [(build, one)] = samples["hami_place_build_info"]
    assert (one, build["version"]) == (1.0, kubectl_hami_place.__version__)
    assert build["python_version"].startswith("3.")
    cache.placements.remove(NS, "p1")
    assert ({"phase": "Pending"}, 0.0) in scraped(cache, metrics)["hami_place_placements"], "read at scrape time"


def scraped(cache: ClusterCache, metrics: Metrics) -> dict[str, list[tuple[dict[str, str], float]]]:
    """GET /metrics, parsed: each sample name's (labels, value) in order."""
    text = api_app(cache, metrics, readers=READERS).test_client().get("/metrics").get_data(as_text=True)
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((sample.labels, sample.value))
    return samples


def test_the_objects_each_watch_takes_in_are_counted_by_kind() -> None:
    metrics = Metrics()
    cache = filled_cache([], [])
    for reflector in cache.reflectors():
        metrics.count_events(reflector)
    cache.nodes.upsert(gpu_node("gpu-a100-1"))
    cache.nodes.remove("", "gpu-a100-1")
    cache.placements.upsert(placement())
    text = generate_latest(metrics.registry).decode()
    assert 'hami_place_watch_events_total{kind="nodes"} 2.0' in text
    assert 'hami_place_watch_events_total{kind="placements"} 1.0' in text


def test_a_forged_review_whose_metadata_is_no_object_is_answered_not_an_internal_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Only a forger sends such a shape (the API server decodes a typed Pod); the answer is still the decision's."""
    metrics = Metrics()
    app = MutateApp(admitter(filled_cache([placement()], []), metrics), metrics)
    forged = review(dry_run=True)
    forged["request"]["object"]["metadata"] = ["x"]
    status, _, reply = call(app, "POST", "/mutate", dumps(forged))
    assert status == 200 and b"internal error" not in reply, reply
    assert not [record for record in caplog.records if record.exc_info]


def test_a_review_no_placement_may_be_claimed_for_reads_nothing_from_the_api_server() -> None:
    """A pod of another scheduler (or any review admission ignores) carrying our claim annotations is answered from
    what the review says: a forger cannot make each review cost a placement read and a pod listing."""
    metrics = Metrics()
    ours = admitter(filled_cache([placement()], []), metrics)
    read: list[tuple[str, str]] = []
    ours._refresh = lambda namespace, name: read.append((namespace, name))  # type: ignore[method-assign]
    forged = review(dry_run=False)
    forged["request"]["object"]["metadata"]["annotations"] = {
        "scheduling.hami.placement.com/placement": "p1",
        "scheduling.hami.placement.com/claim": "tok-1",
    }
    forged["request"]["object"]["spec"]["schedulerName"] = "default-scheduler"
    app = MutateApp(ours, metrics)
    assert json.loads(call(app, "POST", "/mutate", dumps(forged))[2])["response"]["allowed"] is True
    assert read == []
    forged["request"]["object"]["spec"]["schedulerName"] = "hami-scheduler"
    call(app, "POST", "/mutate", dumps(forged))
    assert read == [(NS, "p1")], "a pod admission considers is read for, as before"


def test_healthz_answers_get_and_head_and_refuses_other_methods_with_the_reason() -> None:
    """The self-probe behind /readyz may use either read method; any other names the one that works."""
    app = MutateApp(admitter(filled_cache([], []), Metrics()), Metrics())
    assert call(app, "GET", "/healthz")[0::2] == (200, b'{"status":"ok"}')
    assert call(app, "HEAD", "/healthz")[0::2] == (200, b'{"status":"ok"}')
    assert call(app, "POST", "/healthz")[0::2] == (405, b'{"error": "POST is not allowed on /healthz; use GET"}')


def read(messages: list[dict[str, Any]], bodies: BodyBudget) -> bytes | tuple[int, str]:
    """What read_body makes of these ASGI messages: the body, or the client's mistake (status, reason)."""

    async def receive() -> dict[str, Any]:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    try:
        return asyncio.run(read_body(receive, bodies))
    except ClientMistake as mistake:
        return mistake.status, str(mistake)


def test_a_body_is_read_up_to_its_last_message_and_up_to_the_largest_review() -> None:
    """A message without a body or more_body is the ASGI default (no bytes, the last one), and the largest review
    passes whole: refusing either would refuse reviews the API server sends."""
    bodies = BodyBudget()
    half = MAX_REVIEW_BYTES // 2
    messages = [
        {"type": "http.request", "more_body": True},
        {"type": "http.request", "body": b"a" * half, "more_body": True},
        {"type": "http.request", "body": b"b" * half},
    ]
    assert read(messages, bodies) == b"a" * half + b"b" * half
    assert bodies.held == 0, "every byte held is given back"


def test_a_body_cut_short_or_past_the_budget_is_the_clients_mistake_and_holds_nothing() -> None:
    """A client that goes away, or bodies held open past the budget, must end in a reason and free their bytes."""
    bodies = BodyBudget(limit=10)
    assert read([{"type": "http.request", "body": b"12345", "more_body": True}], bodies) == (
        400,
        "the client went away before the body was complete",
    )
    assert bodies.held == 0
    assert bodies.take(6)
    assert read([{"type": "http.request", "body": b"12345"}], bodies) == (503, BODIES_OVER_BUDGET)
    assert bodies.held == 6


def test_the_event_loop_answers_a_review_the_cache_decides_and_counts_a_body_that_is_no_review() -> None:
    """Nearly every pod is answered on the loop: its answer and the invalid count must be those of the ASGI path."""
    metrics = Metrics()
    app = MutateApp(admitter(filled_cache([placement()], []), metrics), metrics)
    assert app.answer_on_loop(dumps(review(dry_run=False, labels={"app": "web"})), time.perf_counter()) == (
        200,
        b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":"rev-1","allowed":true}}',
    )
    assert app.answer_on_loop(b"{not json", time.perf_counter()) == (
        400,
        b'{"error": "the body is not valid JSON; send an admission.k8s.io/v1 AdmissionReview"}',
    )
    assert metrics.registry.get_sample_value("hami_place_admissions_total", {"result": "invalid"}) == 1.0
