"""The webhook's listener under clients that misbehave, and its shutdown, behind the sandbox's real API server.

Each pod is created through the API server, which calls the webhook with the configuration's timeoutSeconds (10);
a pod the webhook did not answer in time is created unpinned (failurePolicy Ignore), so "pinned" is the proof that
the admission was answered in time.
"""

from __future__ import annotations

import json
import signal
import socket
import ssl
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from sandbox.cluster import Sandbox, wait_for
from sandbox.webhook import Webhook, start
from tests.cluster.webhook_harness import create_placement, gpu_pod, register, sees_placement

pytestmark = pytest.mark.cluster
CLAIM = "scheduling.hami.placement.com/claim"
# The first bytes of a TLS ClientHello record announcing 512 bytes; a half-open client sends no more.
PARTIAL_CLIENT_HELLO = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"
NODES = ("gpu-a100-0", "gpu-a100-1", "gpu-h100-0")


def hold(stack: ExitStack, webhook: Webhook, *, idle: int, half_open: int) -> list[socket.socket]:
    """Open `idle` connections that send nothing and `half_open` that send part of a ClientHello; kept open."""
    held = []
    for index in range(idle + half_open):
        sock = stack.enter_context(socket.create_connection(("127.0.0.1", webhook.port), timeout=30))
        if index >= idle:
            sock.sendall(PARTIAL_CLIENT_HELLO)
        held.append(sock)
    return held


def placements_for_each_node(cluster: Sandbox, namespace: str, webhook: Webhook, prefix: str) -> list[str]:
    """One placement per GPU node, each selecting its own app label; returns the labels."""
    apps = []
    for node in NODES:
        app = f"{prefix}-{node}"
        create_placement(cluster, namespace, app, {"app": app}, ["gpu-0"], node=node)
        wait_for(lambda a=app: sees_placement(webhook, namespace, a), "the webhook to see the placement")
        apps.append(app)
    return apps


def test_idle_and_half_open_connections_do_not_keep_pods_from_being_pinned(
    cluster: Sandbox, namespace: str, tmp_path: Path, webhooks: list[Webhook], configurations: list[str]
) -> None:
    webhook = start(cluster, tmp_path)
    webhooks.append(webhook)
    register(cluster, configurations, namespace, [(webhook, {})])
    apps = placements_for_each_node(cluster, namespace, webhook, "idle")
    core = client.CoreV1Api(cluster.api_client())
    tokens = []
    with ExitStack() as stack:
        hold(stack, webhook, idle=3, half_open=3)
        for app in apps:
            pod = core.create_namespaced_pod(namespace, gpu_pod(f"{app}-", {"app": app}))
            annotations = pod.metadata.annotations or {}
            assert CLAIM in annotations, f"{pod.metadata.name} was admitted unpinned: the webhook did not answer"
            tokens.append(annotations[CLAIM])
        assert webhook.get("/readyz")[0] == 200, "ready: /mutate answers"

    # The claim tokens those pods carry are not served on the plain-HTTP port.
    with_pods = json.dumps(webhook.get(f"/api/v1/placements?namespace={namespace}")[1])
    info = json.dumps(webhook.get("/api/v1/cluster-info")[1])
    for token in tokens:
        assert token not in with_pods and token not in info


def test_readiness_follows_whether_mutate_answers(cluster: Sandbox, tmp_path: Path, webhooks: list[Webhook]) -> None:
    """More half-open handshakes than workers hold every worker for the handshake deadline: unready, then ready."""
    webhook = start(cluster, tmp_path, "--admission-timeout", "5")
    webhooks.append(webhook)
    assert webhook.get("/readyz")[0] == 200
    with ExitStack() as stack:
        hold(stack, webhook, idle=0, half_open=40)
        status, body = webhook.get("/readyz")
        assert status == 503, body
        assert f"/mutate does not answer on port {webhook.port}" in body["reason"]
    wait_for(lambda: webhook.get("/readyz")[0] == 200, "ready again once the handshakes timed out")


def post_in_two_halves(webhook: Webhook, body: bytes) -> tuple[ssl.SSLSocket, bytes]:
    """Send the headers and the first half of a /mutate body; returns the socket and the rest to send."""
    context = ssl.create_default_context(cafile=str(webhook.certs / "ca.crt"))
    raw = socket.create_connection(("127.0.0.1", webhook.port), timeout=30)
    tls = context.wrap_socket(raw, server_hostname="127.0.0.1")
    half = len(body) // 2
    tls.sendall(
        f"POST /mutate HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body[:half]
    )
    return tls, body[half:]


def read_answer(tls: ssl.SSLSocket) -> tuple[int, dict[str, str], Any]:
    received = b""
    while True:
        chunk = tls.recv(65536)
        if not chunk:
            break
        received += chunk
        head, _, rest = received.partition(b"\r\n\r\n")
        length = next(
            (int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")),
            None,
        )
        if length is not None and len(rest) >= length:
            break
    head, _, rest = received.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {k.lower(): v for k, v in (line.split(": ", 1) for line in lines[1:])}
    return int(lines[0].split()[1]), headers, json.loads(rest)


def refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except ConnectionRefusedError:
        return True
    return False


def review(namespace: str, pod: dict[str, Any]) -> bytes:
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "in-flight",
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "operation": "CREATE",
                "namespace": namespace,
                "dryRun": True,
                "object": pod,
            },
        }
    ).encode()


def test_sigterm_turns_unready_answers_what_is_in_flight_and_exits(
    cluster: Sandbox, namespace: str, tmp_path: Path, webhooks: list[Webhook], configurations: list[str]
) -> None:
    webhook = start(cluster, tmp_path, "--shutdown-grace", "15")
    webhooks.append(webhook)
    register(cluster, configurations, namespace, [(webhook, {})])
    app, in_flight_app, _ = placements_for_each_node(cluster, namespace, webhook, "drain")
    pod = gpu_pod("", {"app": in_flight_app}, name="in-flight")
    pod["metadata"]["namespace"] = namespace
    tls, rest = post_in_two_halves(webhook, review(namespace, pod))
    with tls:
        webhook.process.send_signal(signal.SIGTERM)
        wait_for(lambda: webhook.get("/readyz") == (503, {"status": "not ready", "reason": "shutting down"}), "unready")

        # The Service may still route here for a while (a third of the grace, 5 s here): a pod created a second
        # after SIGTERM is still pinned.
        time.sleep(1.0)
        assert not refused(webhook.port), "still listening"
        core = client.CoreV1Api(cluster.api_client())
        created = core.create_namespaced_pod(namespace, gpu_pod(f"{app}-", {"app": app}))
        assert CLAIM in (created.metadata.annotations or {}), "admissions arriving while draining are answered"

        # Then it stops listening; the admission whose body is still arriving is answered all the same.
        wait_for(lambda: refused(webhook.port), "the listener to close")
        tls.sendall(rest)
        status, headers, answer = read_answer(tls)
    assert status == 200
    assert answer["response"]["uid"] == "in-flight" and answer["response"]["allowed"] is True
    assert answer["response"].get("patchType") == "JSONPatch", "the admission in flight was decided, not dropped"
    assert headers.get("connection") == "close", "while draining, the client is told to reconnect elsewhere"
    assert webhook.process.wait(timeout=30) == 0
