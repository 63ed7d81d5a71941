"""The cache's list+watch: events applied in order, a 410 leads to a relist, a broken watch to a retry."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from typing import Any

from kubectl_hami_place.kube.client import QUERY_NAMES, _query_value
from kubectl_hami_place.kube.watch import Reflector


def obj(name: str, version: str, namespace: str = "ns") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, "resourceVersion": version}}


class Reply:
    """What the client returns with _preload_content=False: `.data` for a list, `.stream()` for a watch."""

    def __init__(self, body: Any = None, events: list[dict[str, Any]] | None = None) -> None:
        self.data = json.dumps(body).encode() if body is not None else b""
        self.events = events or []

    def stream(self, amt: int, decode_content: bool) -> Any:
        text = "".join(json.dumps(event) + "\n" for event in self.events).encode()
        for start in range(0, len(text), 7):  # chunks cut mid-line, as the network does
            yield text[start : start + 7]

    def release_conn(self) -> None:
        pass

    def close(self) -> None:
        pass


class ScriptedServer:
    """A scripted list/watch endpoint. A fake on purpose: a real API server cannot be made to answer 410 or break
    a watch on demand (410 needs an etcd compaction past the watched version)."""

    def __init__(self, replies: list[Reply | Exception], stop: threading.Event) -> None:
        self.replies = replies
        self.calls: list[dict[str, Any]] = []
        self.stop = stop

    def __call__(self, **kwargs: Any) -> Reply:
        self.calls.append(kwargs)
        if not self.replies:
            self.stop.set()
            raise ConnectionError("script finished")
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return reply


def run(replies: list[Reply | Exception]) -> tuple[Reflector, ScriptedServer]:
    stop = threading.Event()
    server = ScriptedServer(replies, stop)
    reflector = Reflector("things", server)
    reflector.run(stop)
    return reflector, server


def test_events_are_applied_and_the_watch_resumes_from_the_last_version() -> None:
    reflector, server = run(
        [
            Reply({"metadata": {"resourceVersion": "10"}, "items": [obj("a", "5"), obj("b", "6")]}),
            Reply(
                events=[
                    {"type": "ADDED", "object": obj("c", "11")},
                    {"type": "MODIFIED", "object": obj("a", "12")},
                    {"type": "DELETED", "object": obj("b", "13")},
                    {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "14"}}},
                ]
            ),
        ]
    )
    assert sorted(o["metadata"]["name"] for o in reflector.items()) == ["a", "c"]
    assert reflector.get("ns", "a") == obj("a", "12")
    assert reflector.synced.is_set() and reflector.last_sync is not None
    watch_calls = [call for call in server.calls if call.get("watch")]
    assert [call["resource_version"] for call in watch_calls] == ["10", "14"]


def test_a_410_relists_and_drops_what_is_gone() -> None:
    reflector, server = run(
        [
            Reply({"metadata": {"resourceVersion": "10"}, "items": [obj("old", "5")]}),
            Reply(events=[{"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old"}}]),
            Reply({"metadata": {"resourceVersion": "90"}, "items": [obj("new", "80")]}),
            Reply(events=[{"type": "ADDED", "object": obj("newer", "91")}]),
        ]
    )
    assert sorted(o["metadata"]["name"] for o in reflector.items()) == ["new", "newer"]
    lists = [call for call in server.calls if not call.get("watch")]
    assert len(lists) >= 2


def test_a_broken_watch_is_retried_with_a_relist() -> None:
    reflector, _ = run(
        [
            Reply({"metadata": {"resourceVersion": "10"}, "items": [obj("a", "5")]}),
            ConnectionResetError("peer reset"),
            Reply({"metadata": {"resourceVersion": "20"}, "items": [obj("a", "15"), obj("b", "16")]}),
        ]
    )
    assert reflector.get("ns", "a") == obj("a", "15")
    assert reflector.get("ns", "b") == obj("b", "16")


def test_a_fresher_write_is_kept_and_a_stale_one_ignored() -> None:
    reflector = Reflector("things", lambda **_: None)
    reflector.upsert(obj("p", "20"))
    reflector.upsert(obj("p", "19"))
    assert reflector.get("ns", "p") == obj("p", "20")
    reflector.upsert(obj("p", "21"))
    assert reflector.get("ns", "p") == obj("p", "21")
    reflector.remove("ns", "p")
    assert reflector.get("ns", "p") is None


def test_managed_fields_are_not_kept() -> None:
    def managed(name: str, version: str) -> dict[str, Any]:
        thing = obj(name, version)
        thing["metadata"]["managedFields"] = [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]
        thing["metadata"]["labels"] = {"app": name}
        return thing

    reflector, _ = run(
        [
            Reply({"metadata": {"resourceVersion": "10"}, "items": [managed("a", "5")]}),
            Reply(events=[{"type": "ADDED", "object": managed("b", "11")}]),
        ]
    )
    reflector.upsert(managed("c", "12"))
    for name in ("a", "b", "c"):
        stored = reflector.get("ns", name)
        assert stored is not None and stored["metadata"]["labels"] == {"app": name}
        assert "managedFields" not in stored["metadata"]


def test_a_relist_reads_page_after_page_and_stores_each_object_projected() -> None:
    stop = threading.Event()
    server = ScriptedServer(
        [
            Reply({"metadata": {"resourceVersion": "10", "continue": "page-2"}, "items": [obj("a", "5")]}),
            Reply({"metadata": {"resourceVersion": "10"}, "items": [obj("b", "6", "other")]}),
            Reply(events=[{"type": "ADDED", "object": {**obj("c", "11"), "spec": {"big": "x"}}}]),
        ],
        stop,
    )
    reflector = Reflector("things", server, project=lambda o: {"metadata": o["metadata"]})
    reflector.run(stop)
    assert sorted(o["metadata"]["name"] for o in reflector.items()) == ["a", "b", "c"]
    assert reflector.get("ns", "c") == obj("c", "11")
    lists = [call for call in server.calls if not call.get("watch")]
    assert [call.get("_continue") for call in lists[:2]] == [None, "page-2"]
    assert all(call["limit"] > 0 for call in lists)
    assert next(call for call in server.calls if call.get("watch"))["resource_version"] == "10"


def test_a_relist_keeps_the_objects_it_finds_unchanged_and_tells_only_of_the_others() -> None:
    stop = threading.Event()
    server = ScriptedServer(
        [
            Reply(
                {
                    "metadata": {"resourceVersion": "10"},
                    "items": [obj("same", "5"), obj("moved", "6"), obj("gone", "7")],
                }
            ),
            ConnectionResetError("peer reset"),
            Reply({"metadata": {"resourceVersion": "20"}, "items": [obj("same", "5"), obj("moved", "16")]}),
        ],
        stop,
    )
    reflector = Reflector("things", server)
    heard: list[tuple[str, str]] = []
    first: dict[str, Any] = {}

    def listener(event: str, stored: dict[str, Any]) -> None:
        heard.append((event, stored["metadata"]["name"]))
        if stored["metadata"]["resourceVersion"] == "5":
            first.setdefault("same", stored)

    reflector.add_listener(listener)
    reflector.run(stop)
    after_first_list = [("MODIFIED", "same"), ("MODIFIED", "moved"), ("MODIFIED", "gone")]
    assert heard[:3] == after_first_list
    assert sorted(heard[3:]) == [("DELETED", "gone"), ("MODIFIED", "moved")]
    assert reflector.get("ns", "same") is first["same"], "the unchanged object is the one stored before"
    assert reflector.get("ns", "moved") == obj("moved", "16")


# What the webhook loads to serve: its watches, HAMi's config read and its Events go by path.
LOADED = """
import sys
from kubernetes.client import ApiClient
import webhook.server
from webhook.cache import ClusterCache

ClusterCache(ApiClient(), "hami-scheduler")
print("kubernetes.client.api.core_v1_api" in sys.modules)
"""


def test_the_webhook_serves_without_the_generated_core_api() -> None:
    # CoreV1Api's module alone is ~22 MiB of the webhook's RSS (every method, its docstring and validators).
    run = subprocess.run([sys.executable, "-c", LOADED], capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "False"


def test_a_call_by_path_asks_as_the_generated_methods_do() -> None:
    assert _query_value(True) == "true" and _query_value(False) == "false" and _query_value(500) == 500
    assert {QUERY_NAMES[key] for key in ("resource_version", "allow_watch_bookmarks", "_continue")} == {
        "resourceVersion",
        "allowWatchBookmarks",
        "continue",
    }
