"""The webhook's listener under clients that misbehave, and its shutdown, behind the sandbox's real API server.

Each pod is created through the API server, which calls the webhook with the configuration's timeoutSeconds (10);
a pod the webhook did not answer in time is created unpinned (failurePolicy Ignore), so "pinned" is the proof that
the admission was answered in time.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import socket
import ssl
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from sandbox.cluster import Sandbox, wait_for
from sandbox.webhook import Webhook, configuration, start
from tests.cluster.webhook_harness import create_placement, gpu_pod, register, sees_placement, total_admissions
from tests.webhook_listener import refused

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
    cluster: Sandbox, namespace: str, placing: Webhook
) -> None:
    webhook = placing
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


def test_half_open_handshakes_leave_the_replica_ready(
    cluster: Sandbox, tmp_path: Path, webhooks: list[Webhook]
) -> None:
    """Forty half-open handshakes and a hundred idle connections (the old server's 32 workers were held by them,
    and /readyz said so): the event loop still answers its own probe, so the replica stays in the Service."""
    webhook = start(cluster, tmp_path, "--admission-timeout", "5")
    webhooks.append(webhook)
    assert webhook.get("/readyz")[0] == 200
    with ExitStack() as stack:
        hold(stack, webhook, idle=100, half_open=40)
        status, body = webhook.get("/readyz")
        assert status == 200, body


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
        assert not refused(webhook.port, 5), "still listening"
        core = client.CoreV1Api(cluster.api_client())
        created = core.create_namespaced_pod(namespace, gpu_pod(f"{app}-", {"app": app}))
        assert CLAIM in (created.metadata.annotations or {}), "admissions arriving while draining are answered"

        # Then it stops listening; the admission whose body is still arriving is answered all the same.
        wait_for(lambda: refused(webhook.port, 5), "the listener to close")
        tls.sendall(rest)
        status, headers, answer = read_answer(tls)
    assert status == 200
    assert answer["response"]["uid"] == "in-flight" and answer["response"]["allowed"] is True
    assert answer["response"].get("patchType") == "JSONPatch", "the admission in flight was decided, not dropped"
    assert headers.get("connection") == "close", "while draining, the client is told to reconnect elsewhere"
    assert webhook.process.wait(timeout=30) == 0


class ReadyProxy:
    """A stand-in for the Service: each new connection goes to the first backend counted ready; bytes are passed
    through. /readyz is looked at every 0.2 s; a backend is counted ready from its first 200, and stays counted
    `lag` seconds after it stopped answering 200, as a Service keeps routing to a pod until the kubelet's probes
    have failed and the endpoints have been updated (seconds; the chart probes every 5 s)."""

    def __init__(self, backends: list[Webhook], *, lag: float = 1.0) -> None:
        self.backends = backends
        self.lag = lag
        self.ready = [False] * len(backends)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.stopped = threading.Event()
        for target in (self._probe, self._accept):
            threading.Thread(target=target, daemon=True).start()

    def _probe(self) -> None:
        failing_since: list[float | None] = [None] * len(self.backends)
        while not self.stopped.is_set():
            for index, backend in enumerate(self.backends):
                try:
                    answered = backend.get("/readyz")[0] == 200
                except OSError:
                    answered = False
                if answered:
                    failing_since[index] = None
                    self.ready[index] = True
                    continue
                since = failing_since[index] = failing_since[index] or time.monotonic()
                self.ready[index] = self.ready[index] and time.monotonic() - since < self.lag
            self.stopped.wait(0.2)

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                downstream, _ = self.listener.accept()
            except OSError:
                return
            ready = [b for i, b in enumerate(self.backends) if self.ready[i]]
            if not ready:
                downstream.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", ready[0].port), timeout=30)
            except OSError:
                downstream.close()
                continue
            for source, sink in ((downstream, upstream), (upstream, downstream)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            for sock in (source, sink):
                sock.close()

    def close(self) -> None:
        self.stopped.set()
        self.listener.close()


def test_a_rolling_restart_under_a_stream_of_pod_creations_loses_no_pin(
    cluster: Sandbox, namespace: str, tmp_path: Path, webhooks: list[Webhook], configurations: list[str]
) -> None:
    """Two replicas behind a Service stand-in; one gets SIGTERM while pods keep being created: every pod pinned.

    The Service keeps sending new connections to the replica for a second after it turned unready; the replica
    answers them (the first third of --shutdown-grace) and closes each after its answer, so the API server's next
    request reconnects and, once the endpoints caught up, reaches the other replica. A replica that stopped
    listening at SIGTERM would refuse those connections and its pods would go unpinned."""
    first = start(cluster, tmp_path, "--shutdown-grace", "6")
    webhooks.append(first)
    shared_certificate = (
        "--tls-cert-file",
        str(first.certs / "tls.crt"),
        "--tls-key-file",
        str(first.certs / "tls.key"),
    )
    second = start(cluster, tmp_path, "--shutdown-grace", "6", *shared_certificate)
    webhooks.append(second)
    proxy = ReadyProxy([first, second])
    try:
        # Registered as the chart does, through the "Service"; the API server's connection may reach either replica.
        name = f"hami-place-test-{namespace}-rolling"
        body = configuration(
            name, [(dataclasses.replace(first, port=proxy.port), {})], {"matchLabels": {"hami-place-test": namespace}}
        )
        client.AdmissionregistrationV1Api(cluster.api_client()).create_mutating_webhook_configuration(body)
        configurations.append(name)
        core = client.CoreV1Api(cluster.api_client())

        def called() -> bool:
            before = total_admissions(first) + total_admissions(second)
            core.create_namespaced_pod(namespace, gpu_pod("probe-", {"probe": "yes"}), dry_run="All")
            return total_admissions(first) + total_admissions(second) > before

        wait_for(called, "the API server to call the webhook through the proxy")
        cards = [("gpu-a100-0", 0), ("gpu-a100-0", 1), ("gpu-a100-1", 0), ("gpu-a100-1", 1)]
        cards += [("gpu-h100-0", index) for index in range(8)]
        for index, (node, card) in enumerate(cards):
            create_placement(cluster, namespace, f"roll-{index:02d}", {"app": "roll"}, [f"gpu-{card}/10"], node=node)
        for webhook in (first, second):
            wait_for(
                lambda w=webhook: sees_placement(w, namespace, f"roll-{len(cards) - 1:02d}"), "both to see them all"
            )
        answered = [total_admissions(first), total_admissions(second)]
        unpinned = []
        for index in range(len(cards)):
            if index == 3:
                assert total_admissions(first) > answered[0], "the first replica answered until now"
                first.process.send_signal(signal.SIGTERM)
            pod = core.create_namespaced_pod(namespace, gpu_pod("roll-", {"app": "roll"}))
            if CLAIM not in (pod.metadata.annotations or {}):
                unpinned.append(pod.metadata.name)
            time.sleep(0.3)
        assert unpinned == [], "pods created during the rolling restart went unpinned"
        assert first.process.wait(timeout=30) == 0
        assert total_admissions(second) > answered[1], "the other replica took over"
    finally:
        proxy.close()
