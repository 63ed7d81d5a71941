"""The HTTPS listener on loopback, a stub admitter behind it: idle clients, claims in threads, probe, drain."""

from __future__ import annotations

import gc
import inspect
import json
import logging
import os
import re
import resource
import signal
import socket
import ssl
import struct
import threading
import time
import urllib.request
import weakref
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from flask import Flask
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from kubectl_hami_place.core.reviews import Review
from tests.unit.test_webhook_api import READERS, filled_cache
from tests.webhook_listener import call, refused, serving
from webhook import allocator
from webhook import listener as webhook_listener
from webhook import server as webhook_server
from webhook.api import api_app
from webhook.certs import CertBundle, generate
from webhook.listener import (
    HEADER_SECONDS,
    LISTEN_BACKLOG,
    MAX_HEADER_BYTES,
    Connections,
    IdleLimited,
    MutateListener,
    MutateProbe,
    drain,
)
from webhook.main import main
from webhook.metrics import REFUSALS, REFUSED_CAP, Metrics
from webhook.mutate import BodyBudget, MutateApp
from webhook.tls import ReloadingCertificate, certificate_names, named_client

# What the API server waits for a webhook by default.
TIMEOUT = 10.0
# The first bytes of a TLS ClientHello record announcing 512 bytes, of which a half-open client sends no more.
PARTIAL_CLIENT_HELLO = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"
# How long a `stall` review keeps the event loop from anything else.
STALL_SECONDS = 0.3


class Gate:
    """An admitter answering every review `allowed` from its "cache"; a pod named `hold` needs the API server (a
    claim), and its thread waits for `release` while `hold` is set; one named `stall` keeps the event loop busy."""

    def __init__(self) -> None:
        self.hold = threading.Event()
        self.release = threading.Event()
        self.entered = threading.Semaphore(0)

    def admit_review(self, review: Review, _started: float, *, cache_only: bool = False) -> dict[str, Any] | None:
        if review.name == "stall":
            time.sleep(STALL_SECONDS)
        if review.name == "hold":
            if cache_only:
                return None
            if self.hold.is_set():
                self.entered.release()
                self.release.wait(30)
        return {"response": {"uid": review.uid, "allowed": True}}


def review_body(name: str = "web-0") -> bytes:
    pod = {"metadata": {"name": name, "namespace": "team-a"}, "spec": {"containers": []}}
    request = {
        "uid": f"uid-{name}",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": "team-a",
        "name": name,
        "operation": "CREATE",
        "object": pod,
    }
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}).encode()


def post_request(name: str = "web-0", *, close: bool = False) -> bytes:
    body = review_body(name)
    head = (
        f"POST /mutate HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    )
    return head.encode() + (b"Connection: close\r\n" if close else b"") + b"\r\n" + body


@pytest.fixture
def bundle(tmp_path: Path) -> CertBundle:
    made = generate(["hami-place-webhook.test"], ["127.0.0.1"])
    made.write(tmp_path)
    return made


@pytest.fixture
def gate() -> Gate:
    return Gate()


@pytest.fixture
def app(gate: Gate) -> MutateApp:
    return MutateApp(gate, Metrics(), admission_timeout=TIMEOUT)  # type: ignore[arg-type]


@pytest.fixture
def served(tmp_path: Path, bundle: CertBundle, app: MutateApp, gate: Gate) -> Iterator[MutateListener]:
    try:
        with serving(app, tmp_path) as listener:
            yield listener
    finally:
        gate.release.set()


def read_answer(tls: ssl.SSLSocket) -> tuple[str, dict[str, str], bytes]:
    """One HTTP answer read to its Content-Length: (status line, headers, body)."""
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = tls.recv(4096)
        if not chunk:
            raise ConnectionError(f"closed after {received!r}")
        received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {key.lower(): value for key, value in (line.split(": ", 1) for line in lines[1:])}
    while len(body) < int(headers.get("content-length", "0")):
        body += tls.recv(4096)
    return lines[0], headers, body


@contextmanager
def connected(port: int, ca: bytes) -> Iterator[ssl.SSLSocket]:
    context = ssl.create_default_context(cadata=ca.decode())
    with (
        socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        yield tls


def post(port: int, ca: bytes, name: str = "web-0") -> tuple[str, dict[str, str], bytes]:
    """One admission over TLS, as the API server sends it: (status line, headers, body)."""
    with connected(port, ca) as tls:
        tls.sendall(post_request(name))
        return read_answer(tls)


def hold_connections(stack: ExitStack, port: int, idle: int, half_open: int) -> None:
    """Open `idle` TCP connections that send nothing and `half_open` that send a partial ClientHello."""
    for index in range(idle + half_open):
        sock = stack.enter_context(socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT))
        if index >= idle:
            sock.sendall(PARTIAL_CLIENT_HELLO)


def test_idle_and_half_open_connections_do_not_delay_a_request(served: MutateListener, bundle: CertBundle) -> None:
    """A hundred idle connections and a few half-open handshakes: admissions are still answered."""
    with ExitStack() as stack:
        hold_connections(stack, served.port, idle=100, half_open=4)
        for _ in range(3):
            status, _headers, body = post(served.port, bundle.ca_crt)
            assert status == "HTTP/1.1 200 OK"
            assert json.loads(body)["response"] == {"uid": "uid-web-0", "allowed": True}


def test_a_connection_that_sends_nothing_is_closed_after_the_idle_limit(
    tmp_path: Path, bundle: CertBundle, app: MutateApp, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neither a TCP client that never completes its handshake nor a TLS client that never sends a request keeps
    its socket: the handshake deadline closes the first, the idle limit the second."""
    monkeypatch.setattr(webhook_listener, "HANDSHAKE_SECONDS", 0.5)
    with serving(app, tmp_path, idle_seconds=1) as listener:
        with socket.create_connection(("127.0.0.1", listener.port), timeout=TIMEOUT) as half_open:
            half_open.sendall(PARTIAL_CLIENT_HELLO)
            assert half_open.recv(4096) == b"", "closed by the handshake deadline"
        with connected(listener.port, bundle.ca_crt) as idle:
            assert idle.recv(4096) == b"", "closed by the idle limit"


def test_a_header_that_trickles_in_is_cut_off_at_its_deadline_while_other_requests_are_answered(
    tmp_path: Path, bundle: CertBundle, app: MutateApp
) -> None:
    """uvicorn's idle timer stops at a request's first byte: a byte now and then must not keep the connection (the
    idle limit here is longer than the client's read timeout, so only the header deadline can close it)."""
    with (
        serving(app, tmp_path, idle_seconds=10 * TIMEOUT, header_seconds=1) as listener,
        connected(listener.port, bundle.ca_crt) as slow,
    ):
        slow.sendall(b"POST /mutate HTTP/1.1\r\n")
        for _ in range(4):
            time.sleep(0.4)
            try:
                slow.sendall(b"X-Slow: 1\r\n")
            except OSError:
                break
        status, _headers, _body = post(listener.port, bundle.ca_crt)
        assert status == "HTTP/1.1 200 OK"
        assert slow.recv(4096) == b"", "closed by the header deadline, nothing answered"


def test_the_private_uvicorn_class_the_listener_builds_on_has_the_shape_it_relies_on() -> None:
    """IdleLimited overrides and calls these parts of uvicorn's HttpToolsProtocol (uvicorn is pinned to its minor
    version in pyproject.toml): a new uvicorn that moves them fails here, not in production."""
    protocol = HttpToolsProtocol
    for method in (
        "connection_made",
        "connection_lost",
        "data_received",
        "shutdown",
        "on_message_begin",
        "on_headers_complete",
        "on_body",
        "on_message_complete",
        "on_response_complete",
        "timeout_keep_alive_handler",
    ):
        assert callable(getattr(protocol, method, None)), method
    source = inspect.getsource(protocol)
    for attribute in (
        "self.timeout_keep_alive_task",
        "self.cycle",
        "self.parser",
        "self.url",
        "self.headers",
        "self.transport",
        "self.parser.feed_data(data)",
    ):
        assert attribute in source, attribute
    assert "self._unset_keepalive_if_required()" in inspect.getsource(protocol.data_received), (
        "the idle timer stops at the first byte: why the header deadline exists"
    )


def test_a_handshake_that_fails_closes_only_its_own_connection(served: MutateListener, bundle: CertBundle) -> None:
    with socket.create_connection(("127.0.0.1", served.port), timeout=TIMEOUT) as plain:
        plain.sendall(b"GET / HTTP/1.1\r\nHost: webhook\r\n\r\n")
        plain.recv(4096)  # closed (or an alert) without an HTTP answer: it never reached the app
    assert post(served.port, bundle.ca_crt)[0] == "HTTP/1.1 200 OK"


def test_a_claim_being_written_does_not_hold_up_other_admissions(
    served: MutateListener, bundle: CertBundle, gate: Gate
) -> None:
    """A review that needs the API server waits in a thread of its own; the event loop answers the others."""
    gate.hold.set()
    held: list[tuple[str, dict[str, str], bytes]] = []
    claiming = threading.Thread(target=lambda: held.append(post(served.port, bundle.ca_crt, "hold")), daemon=True)
    claiming.start()
    assert gate.entered.acquire(timeout=TIMEOUT)
    assert post(served.port, bundle.ca_crt)[0] == "HTTP/1.1 200 OK"
    assert MutateProbe("127.0.0.1", served.port)() is None
    assert not held, "the claim is still being written"
    gate.release.set()
    claiming.join(TIMEOUT)
    assert held and json.loads(held[0][2])["response"]["uid"] == "uid-hold"


class Recorded(MutateApp):
    """The app, noting each request that reached it through uvicorn's ASGI cycle."""

    def __init__(self, gate: Gate, admission_timeout: float = TIMEOUT) -> None:
        super().__init__(gate, Metrics(), admission_timeout=admission_timeout)  # type: ignore[arg-type]
        self.through_asgi: list[str] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.through_asgi.append(f"{scope['method']} {scope['path']}")
        await super().__call__(scope, receive, send)


def raw_post(body: bytes, content_type: str = "application/json") -> bytes:
    head = (
        f"POST /mutate HTTP/1.1\r\nHost: webhook\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def test_a_review_the_cache_decides_is_answered_from_the_parser_and_the_others_through_the_app(
    tmp_path: Path, bundle: CertBundle, gate: Gate
) -> None:
    """On one kept-alive connection: cache-decided reviews and malformed bodies never reach the ASGI cycle, a
    review that needs a claim and everything else do; each answer is the one the app gives, in order."""
    app = Recorded(gate)
    requests = [
        post_request("web-0").replace(b"POST /mutate ", b"POST /mutate?timeout=10s ", 1),
        raw_post(b"{not json"),
        raw_post(b'{"kind": "Pod"}'),
        post_request("hold"),
        raw_post(review_body("web-1"), "text/plain"),
        b"GET /healthz HTTP/1.1\r\nHost: webhook\r\n\r\n",
        post_request("web-2"),
    ]
    with serving(app, tmp_path) as listener, connected(listener.port, bundle.ca_crt) as tls:
        answers = []
        for request in requests:
            tls.sendall(request)
            answers.append(read_answer(tls))
    assert app.through_asgi == ["POST /mutate", "POST /mutate", "GET /healthz"]
    expected = [
        call(Recorded(gate), *parse_request(request)[:3], content_type=parse_request(request)[3])
        for request in requests
    ]
    for (status_line, headers, body), (status, expected_headers, expected_body) in zip(answers, expected, strict=True):
        assert status_line.split(" ", 2)[1] == str(status)
        assert headers == expected_headers
        assert json.loads(body) == json.loads(expected_body)
    assert [json.loads(body)["response"]["uid"] for _, _, body in (answers[0], answers[3], answers[6])] == [
        "uid-web-0",
        "uid-hold",
        "uid-web-2",
    ]


def parse_request(request: bytes) -> tuple[str, str, bytes, str | None]:
    """(method, path, body, content type) of a request as `call` takes them (the path without its query, as
    uvicorn gives it)."""
    head, _, body = request.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    method, path, _ = lines[0].split(" ")
    headers = {key.lower(): value for key, value in (line.split(": ", 1) for line in lines[1:])}
    return method, path.partition("?")[0], body, headers.get("content-type")


def test_a_body_that_stops_arriving_is_a_408_and_the_connection_closes(
    tmp_path: Path, bundle: CertBundle, gate: Gate
) -> None:
    app = Recorded(gate, admission_timeout=1.0)
    request = post_request()
    with serving(app, tmp_path) as listener, connected(listener.port, bundle.ca_crt) as tls:
        tls.sendall(request[:-10])
        status, headers, body = read_answer(tls)
        assert tls.recv(4096) == b"", "the connection is closed after the 408"
    assert status == "HTTP/1.1 408 Request Timeout" and headers["connection"] == "close"
    assert "did not arrive" in json.loads(body)["error"]
    assert app.metrics.admissions.labels("invalid")._value.get() == 1
    assert app.through_asgi == [] and app.in_flight == 0


def test_a_stalled_event_loop_shows_in_its_lag(served: MutateListener, bundle: CertBundle) -> None:
    """The lag histogram counts the loop's own timer waking late while an admission held the loop."""
    lag = served.app.metrics.loop_lag
    assert post(served.port, bundle.ca_crt, "stall")[0] == "HTTP/1.1 200 OK"
    time.sleep(2 * webhook_listener.LAG_PROBE_SECONDS)
    assert sample(lag, "_bucket", le="0.1") < sample(lag, "_count"), "no wake-up as late as the stall"


def test_every_collection_is_timed_by_generation() -> None:
    metrics = Metrics()
    unwatch = metrics.watch_collector()
    try:
        gc.collect()
        gc.collect(0)
    finally:
        unwatch()
    pauses = metrics.collector_pauses
    assert sample(pauses, "_count", generation="2") == 1
    assert sample(pauses, "_count", generation="0") == 1
    gc.collect()
    assert sample(pauses, "_count", generation="2") == 1, "still timed once no longer watched"


def sample(metric: Any, suffix: str, **labels: str) -> float:
    """One sample of a metric by its name's suffix and labels."""
    for family in metric.collect():
        for found in family.samples:
            if found.name == family.name + suffix and all(found.labels.get(k) == v for k, v in labels.items()):
                return float(found.value)
    raise AssertionError(f"no sample {suffix} {labels}")


def test_the_http_api_answers_while_the_process_holds_more_than_1024_descriptors() -> None:
    """Under load the /mutate listener's connections alone pass 1,024 descriptors; select() refuses any above."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < 2048:
        pytest.skip(f"the hard limit on open files ({hard}) leaves no room above 1,024")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 2048), hard))
    held: list[int] = []
    try:
        while not held or held[-1] <= 1100:
            held.extend(os.pipe())
        server = webhook_server.api_server(api_app(filled_cache([], []), Metrics(), readers=READERS), "127.0.0.1", 0)
        threading.Thread(target=server.run, daemon=True).start()
        try:
            for _ in range(3):
                url = f"http://127.0.0.1:{server.effective_port}/healthz"
                with urllib.request.urlopen(url, timeout=TIMEOUT) as answer:
                    assert answer.status == 200
        finally:
            webhook_server.close_api_server(server)
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


class _Connection:
    """Stands for uvicorn's connection objects: cyclic, so only the collector frees them."""

    def __init__(self) -> None:
        self.me = self


def test_a_cycle_alive_at_a_full_collection_after_the_warm_up_freeze_is_still_freed_once_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stop = threading.Event()
    before = gc.get_freeze_count()  # a test runner may have frozen its own objects already
    try:
        with caplog.at_level(logging.INFO, logger="webhook.allocator"):
            allocator.freeze_when_synced(filled_cache([], []), stop)
        frozen = gc.get_freeze_count()
        assert frozen > before, "the warm-up freeze took the objects alive then"
        (said,) = [record.getMessage() for record in caplog.records if record.name == "webhook.allocator"]
        assert re.fullmatch(r"first sync in: [1-9]\d* objects frozen out of the collector's scans", said), said
        connection = _Connection()
        alive = weakref.ref(connection)
        gc.collect()  # a full collection while the connection is open
        del connection
        # gc.collect() returns at once, collecting nothing, while another thread's collection runs (CPython's
        # gcstate->collecting): daemon threads of earlier tests allocate, so a loaded box skipped one here once.
        for _ in range(20):
            gc.collect()
            if alive() is None:
                break
        assert alive() is None, "a connection open at a later full collection is freed once closed"
        # Frozen objects still die by reference count (another test's daemon thread dropped 5 once), so not "==";
        # an unfreeze would leave none.
        assert gc.get_freeze_count() > frozen // 2, "the warm-up freeze still holds after the collections"
    finally:
        gc.unfreeze()


def test_the_probe_answers_while_the_listener_serves(served: MutateListener) -> None:
    assert MutateProbe("127.0.0.1", served.port)() is None


def test_the_probe_says_why_when_nothing_listens() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    reason = MutateProbe("127.0.0.1", port)()
    assert reason is not None and "refused" in reason


def test_drain_closes_connections_after_answering_and_finishes_requests_in_flight(
    tmp_path: Path, bundle: CertBundle, app: MutateApp
) -> None:
    with serving(app, tmp_path) as listener:
        with connected(listener.port, bundle.ca_crt) as tls:
            tls.sendall(post_request())
            assert "connection" not in read_answer(tls)[1], "kept alive before the drain"
            app.draining = True
            tls.sendall(post_request())
            assert read_answer(tls)[1]["connection"] == "close", "clients move on while draining"

        # A request whose body is still arriving when the listener closes is read to the end and answered.
        request = post_request(close=True)
        with connected(listener.port, bundle.ca_crt) as tls:
            tls.sendall(request[:-10])
            wait_until(lambda: app.in_flight == 1)
            stopping = threading.Thread(target=drain, args=(listener,), kwargs={"listen": 0.0, "finish": TIMEOUT})
            stopping.start()
            wait_until(lambda: refused(listener.port, TIMEOUT))
            tls.sendall(request[-10:])
            status, _headers, body = read_answer(tls)
        stopping.join(timeout=TIMEOUT * 2)
        assert status == "HTTP/1.1 200 OK" and json.loads(body)["response"]["allowed"] is True
        assert not stopping.is_alive() and not listener.thread.is_alive()


def wait_until(condition: Any) -> None:
    for _ in range(int(TIMEOUT / 0.05)):
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError("condition never held")


def client_certificate(directory: Path, names: tuple[str, ...] = ("kube-apiserver",)) -> None:
    """ca.crt, and client-<name>.crt/.key it signed for client authentication (what the API server presents), one
    pair per name; the first is also client.crt/client.key."""
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    now = datetime.now(UTC)

    def issued(subject: str, public_key: Any, *extensions: Any) -> x509.Certificate:
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "client-ca")]))
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(minutes=5))
            .not_valid_after(now + timedelta(days=1))
        )
        for extension in extensions:
            builder = builder.add_extension(extension, critical=False)
        return builder.sign(ca_key, hashes.SHA256())

    ca = issued("client-ca", ca_key.public_key(), x509.BasicConstraints(ca=True, path_length=0))
    (directory / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    for index, name in enumerate(names):
        client = issued(name, key.public_key(), x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]))
        key_pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        for stem in (f"client-{name}", *(["client"] if index == 0 else [])):
            (directory / f"{stem}.crt").write_bytes(client.public_bytes(serialization.Encoding.PEM))
            (directory / f"{stem}.key").write_bytes(key_pem)


def test_a_client_certificate_is_required_when_a_client_ca_is_given(
    tmp_path: Path, bundle: CertBundle, app: MutateApp
) -> None:
    (tmp_path / "client").mkdir()
    client_certificate(tmp_path / "client")
    with serving(app, tmp_path, client_ca=str(tmp_path / "client" / "ca.crt")) as listener:
        with pytest.raises((ssl.SSLError, ConnectionError)):
            post(listener.port, bundle.ca_crt)
        context = ssl.create_default_context(cadata=bundle.ca_crt.decode())
        context.load_cert_chain(str(tmp_path / "client" / "client.crt"), str(tmp_path / "client" / "client.key"))
        with (
            socket.create_connection(("127.0.0.1", listener.port), timeout=TIMEOUT) as raw,
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
        ):
            tls.sendall(post_request(close=True))
            assert read_answer(tls)[0] == "HTTP/1.1 200 OK"
        probe = MutateProbe("127.0.0.1", listener.port, client_cert_required=True)
        assert probe() is None, "a completed handshake is an answer"


@pytest.mark.parametrize(
    ("key", "message"),
    [
        (None, "--room-key-file {path}: No such file or directory; give a readable file"),
        (b"short\n", "--room-key-file holds 5 bytes; write a random key of 32 or more there"),
    ],
)
def test_serve_refuses_a_room_key_it_cannot_read_or_too_short(
    key: bytes | None, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "room.key"
    if key is not None:
        path.write_bytes(key)
    argv = ["serve", "--tls-cert-file", str(tmp_path / "c"), "--tls-key-file", str(tmp_path / "k")]
    assert main([*argv, "--room-key-file", str(path)]) == 2
    assert message.format(path=path) in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--admission-timeout", "0.5"], "--admission-timeout must be 1..30 seconds"),
        (["--admission-timeout", "31"], "--admission-timeout must be 1..30 seconds"),
        (["--shutdown-grace", "-1"], "--shutdown-grace must be 0..3600 seconds"),
        (["--idle-timeout", "0"], "--idle-timeout must be 1..3600 seconds"),
        (["--hami-config-reread", "0"], "--hami-config-reread must be 1..3600 seconds"),
        (["--claim-grace", "0"], "--claim-grace must be a positive number of seconds, at most 31536000"),
        (["--claim-grace", "31536001"], "--claim-grace must be a positive number of seconds, at most 31536000"),
        (["--finished-ttl", "-1"], "--finished-ttl must be 0 (keep) or a positive number of seconds, at most"),
        (["--finished-ttl", "31536001"], "--finished-ttl must be 0 (keep) or a positive number of seconds, at most"),
        (["--placement-ttl", "0"], "--placement-ttl must be a positive number of seconds, at most 31536000"),
        (["--placement-ttl", "250000000000"], "--placement-ttl must be a positive number of seconds, at most"),
        (["--defrag-policy", "kube-system/Policy"], "must be NAMESPACE/NAME of a ConfigMap"),
        (["--defrag-policy", "kube-system/../x"], "must be NAMESPACE/NAME of a ConfigMap"),
        (["--defrag-policy", "a/b", "--defrag-namespace", "x.y"], "--defrag-namespace 'x.y' is not a namespace"),
        (["--lease-namespace", "Leases"], "--lease-namespace 'Leases' is not a namespace"),
        (["--defrag-policy", "a/b", "--defrag-lease-duration", "2"], "--defrag-lease-duration must be 3..3600"),
        (["--defrag-policy", "a/b", "--defrag-move-timeout", "4"], "--defrag-move-timeout must be 5..3600"),
    ],
)
def test_serve_refuses_timeouts_out_of_range(
    flags: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["serve", "--tls-cert-file", str(tmp_path / "c"), "--tls-key-file", str(tmp_path / "k"), *flags]
    assert main(argv) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "where"),
    [
        (["--defrag-namespace", "hp", "--lease-namespace", "hp-leases"], ("hp-leases", "hp-leases", "hp")),
        (["--defrag-namespace", "hp"], ("hp", "hp", "hp")),
        ([], ("default", "ctl", "ctl")),
    ],
)
def test_serve_keeps_its_leases_where_lease_namespace_says_and_its_own_pods_where_defrag_namespace_says(
    flags: list[str], where: tuple[str, str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`where`: the guards', the leader Lease's and the server's own namespace."""
    served: list[webhook_server.ServeOptions] = []
    monkeypatch.setattr("webhook.main.serve", served.append)
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    argv = ["serve", "--tls-cert-file", str(tmp_path / "c"), "--tls-key-file", str(tmp_path / "k")]
    assert main([*argv, "--defrag-policy", "ctl/policy", *flags]) == 0
    [options] = served
    assert options.defrag is not None
    assert (options.guard_namespace, options.defrag.leader_lease_namespace, options.defrag.server_namespace) == where


def post_as(port: int, ca: bytes, client: Path, stem: str) -> str:
    """One admission presenting the client certificate `stem` of `client`: its status line."""
    context = ssl.create_default_context(cadata=ca.decode())
    context.load_cert_chain(str(client / f"{stem}.crt"), str(client / f"{stem}.key"))
    with (
        socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        tls.sendall(post_request(close=True))
        return read_answer(tls)[0]


def test_a_client_certificate_of_the_right_ca_but_not_a_required_name_is_refused(
    tmp_path: Path, bundle: CertBundle, app: MutateApp
) -> None:
    client = tmp_path / "client"
    client.mkdir()
    client_certificate(client, ("webhook-client", "system:node:gpu-1"))
    with serving(
        app, tmp_path, client_ca=str(client / "ca.crt"), client_names=frozenset({"webhook-client"})
    ) as listener:
        assert post_as(listener.port, bundle.ca_crt, client, "client-webhook-client") == "HTTP/1.1 200 OK"
        with pytest.raises((ssl.SSLError, ConnectionError)):
            post_as(listener.port, bundle.ca_crt, client, "client-system:node:gpu-1")
        refused = app.metrics.connections_closed.labels("client-certificate-name")._value.get()
        assert refused == 1


def test_a_certificates_names_are_its_common_names_and_dns_alt_names() -> None:
    peercert = {
        "subject": ((("organizationName", "system:masters"),), (("commonName", "kube-apiserver"),)),
        "subjectAltName": (("DNS", "apiserver.example"), ("IP Address", "10.0.0.1")),
    }
    assert certificate_names(peercert) == {"kube-apiserver", "apiserver.example"}
    assert named_client(peercert, frozenset({"apiserver.example"}))
    assert not named_client(peercert, frozenset({"system:masters", "10.0.0.1"}))
    assert not named_client(None, frozenset({"kube-apiserver"}))


def test_at_the_cap_a_new_connection_closes_the_oldest_that_carried_no_review(
    tmp_path: Path, bundle: CertBundle, app: MutateApp
) -> None:
    with serving(app, tmp_path, max_connections=3) as listener, ExitStack() as stack:
        reviewer = stack.enter_context(connected(listener.port, bundle.ca_crt))
        reviewer.sendall(post_request())
        assert read_answer(reviewer)[0] == "HTTP/1.1 200 OK"
        oldest = stack.enter_context(connected(listener.port, bundle.ca_crt))
        oldest.sendall(b"POST /mutate HTTP/1.1\r\n")  # a header that never ends
        newer = stack.enter_context(connected(listener.port, bundle.ca_crt))
        newer.sendall(b"POST /mutate HTTP/1.1\r\n")
        wait_until(lambda: app.metrics.connections._value.get() == 3)
        with connected(listener.port, bundle.ca_crt) as newest:
            assert oldest.recv(4096) == b"", "the oldest connection without a review made room"
            newest.sendall(post_request())
            assert read_answer(newest)[0] == "HTTP/1.1 200 OK"
        reviewer.sendall(post_request())
        assert read_answer(reviewer)[0] == "HTTP/1.1 200 OK", "a connection that carried a review is kept"
        assert app.metrics.connections_closed.labels("over-cap")._value.get() == 1
        assert app.metrics.connections._value.get() <= 3


def test_a_header_longer_than_the_limit_closes_the_connection(
    served: MutateListener, bundle: CertBundle, app: MutateApp
) -> None:
    with connected(served.port, bundle.ca_crt) as tls:
        tls.sendall(b"POST /mutate HTTP/1.1\r\nX-Long: ")
        try:
            for _ in range(MAX_HEADER_BYTES // 4096 + 2):
                tls.sendall(b"a" * 4096)
        except OSError:
            pass
        assert tls.recv(4096) == b"", "closed, nothing answered"
    assert app.metrics.connections_closed.labels("header-too-large")._value.get() == 1
    assert post(served.port, bundle.ca_crt)[0] == "HTTP/1.1 200 OK"


def test_bodies_arriving_beyond_the_budget_close_the_connection_that_passes_it(
    served: MutateListener, bundle: CertBundle, app: MutateApp
) -> None:
    app.bodies = BodyBudget(limit=2000)
    body = review_body() + b" " * 1200  # JSON may end in white space
    head = f"POST /mutate HTTP/1.1\r\nHost: w\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    with connected(served.port, bundle.ca_crt) as first, connected(served.port, bundle.ca_crt) as second:
        first.sendall(head.encode() + body[:1200])
        wait_until(lambda: app.bodies.held == 1200)
        second.sendall(head.encode() + body[:1200])
        assert second.recv(4096) == b"", "its body would pass the budget: closed"
        assert app.bodies.held == 1200
        first.sendall(body[1200:])
        assert read_answer(first)[0] == "HTTP/1.1 200 OK"
    wait_until(lambda: app.bodies.held == 0)
    assert app.metrics.connections_closed.labels("bodies-over-budget")._value.get() == 1


def test_the_body_budget_holds_at_most_its_limit() -> None:
    budget = BodyBudget(limit=10)
    assert budget.take(6) and not budget.take(5) and budget.held == 6
    budget.give(6)
    assert budget.take(10) and budget.held == 10


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--client-ca-file", "ca.crt"], "--client-ca-file needs --client-cert-name"),
        (["--client-cert-name", "kube-apiserver"], "--client-cert-name needs --client-ca-file"),
        (["--max-connections", "0"], "--max-connections must be 1..65536"),
    ],
)
def test_serve_refuses_a_client_ca_without_names_and_a_cap_out_of_range(
    flags: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["serve", "--tls-cert-file", str(tmp_path / "c"), "--tls-key-file", str(tmp_path / "k"), *flags]
    assert main(argv) == 2
    assert message in capsys.readouterr().err


class SetInterruptedBySignal(threading.Event):
    """An Event whose `set` is interrupted, with its lock held, by a second signal's handler on the same thread."""

    def __init__(self) -> None:
        super().__init__()
        self.second_signal: Any = None

    def set(self) -> None:
        with self._cond:  # type: ignore[attr-defined]  # what Event.set holds while it notifies
            self.second_signal()
            self._flag = True  # type: ignore[attr-defined]
            self._cond.notify_all()  # type: ignore[attr-defined]


def test_a_second_signal_during_the_first_ones_handler_still_lets_the_server_stop() -> None:
    """A server sent SIGTERM twice (the harness did, then waited 15 s and killed it) hung in its handler for ever."""
    stop = SetInterruptedBySignal()
    signals = webhook_server.ShutdownSignal(stop)
    stop.second_signal = lambda: signals(signal.SIGINT, None)
    handler = threading.Thread(target=signals, args=(signal.SIGTERM, None), daemon=True)
    handler.start()
    handler.join(30)
    assert not handler.is_alive(), "the second handler waits for the lock the first one holds"
    assert stop.is_set() and signals.received == [signal.SIGTERM, signal.SIGINT]


@pytest.mark.parametrize(
    ("bind", "probed"),
    [("0.0.0.0", "127.0.0.1"), ("", "127.0.0.1"), ("::", "::1"), ("10.0.0.5", "10.0.0.5"), ("fd00::5", "fd00::5")],
)
def test_the_self_probe_connects_to_loopback_for_a_wildcard_bind_and_to_the_bound_address_otherwise(
    bind: str, probed: str
) -> None:
    """A wildcard is no address to connect to; a listener bound to one address answers on that one only."""
    assert webhook_server.probe_host(bind) == probed


def test_the_http_api_server_keeps_the_documented_limits() -> None:
    """These limits are what keeps a client of the API from holding its threads, connections or memory."""
    app = api_app(filled_cache([], []), Metrics(), readers=READERS)
    for threads, connections in ((4, 64), (1, 8)):
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            port = taken.getsockname()[1]
        server = webhook_server.api_server(app, "127.0.0.1", port, threads=threads, connections=connections)
        try:
            adj = server.adj
            assert (server.effective_host, int(server.effective_port)) == ("127.0.0.1", port)
            assert (
                adj.threads,
                adj.ident,
                adj.asyncore_use_poll,
                adj.connection_limit,
                adj.channel_timeout,
                adj.max_request_body_size,
                adj.max_request_header_size,
            ) == (threads, "hami-place-webhook", True, connections, 30, 16 * 1024, 64 * 1024)
        finally:
            webhook_server.close_api_server(server)


def test_closing_the_http_api_lets_an_answer_in_flight_finish_first(caplog: pytest.LogCaptureFixture) -> None:
    """waitress's close() alone shut the socket its workers wake the loop through: the answer in flight was lost."""
    entered, release = threading.Event(), threading.Event()
    app = Flask("slow")

    @app.get("/slow")
    def slow() -> str:
        entered.set()
        release.wait(TIMEOUT)
        return "done"

    server = webhook_server.api_server(app, "127.0.0.1", 0)
    threading.Thread(target=server.run, daemon=True).start()
    answers: list[bytes] = []

    def ask() -> None:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.effective_port}/slow", timeout=TIMEOUT) as answer:
            answers.append(answer.read())

    client = threading.Thread(target=ask, daemon=True)
    client.start()
    assert entered.wait(TIMEOUT)
    closing = threading.Thread(target=webhook_server.close_api_server, args=(server,), daemon=True)
    closing.start()
    closing.join(0.5)  # a close() that does not wait for the answer is over by now
    release.set()
    closing.join(TIMEOUT)
    client.join(TIMEOUT)
    assert answers == [b"done"]
    assert [r.getMessage() for r in caplog.records if r.name == "waitress" and r.levelno >= logging.ERROR] == []


@contextmanager
def answering(bundle: CertBundle, tmp_path: Path, answer: bytes) -> Iterator[int]:
    """A TLS server on a loopback port that answers one request with `answer` and closes: its port."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"))
    with socket.create_server(("127.0.0.1", 0)) as server:

        def serve_one() -> None:
            connection, _ = server.accept()
            with context.wrap_socket(connection, server_side=True) as tls:
                tls.recv(4096)
                tls.sendall(answer)

        thread = threading.Thread(target=serve_one, daemon=True)
        thread.start()
        yield server.getsockname()[1]
        thread.join(TIMEOUT)


@pytest.mark.parametrize(
    "status",
    [b"HTTP/1.1 503 Service Unavailable", b"HTTP/1.1 503 Service Unavailable Because It Is Shutting Down"],
)
def test_the_probe_says_what_a_listener_answered_other_than_200(
    status: bytes, bundle: CertBundle, tmp_path: Path
) -> None:
    """/readyz shows this line: it names the port and the status line (cut to 40 bytes), not the rest."""
    with answering(bundle, tmp_path, status + b"\r\nContent-Length: 0\r\n\r\n") as port:
        said = MutateProbe("127.0.0.1", port)()
    assert said == f"/mutate does not answer on port {port}: it answered {status[:40]!r}"


def test_the_probe_gives_up_on_a_listener_that_never_completes_a_handshake() -> None:
    """A stuck listener must turn /readyz unready, not hang the probe's thread with it."""
    with socket.create_server(("127.0.0.1", 0)) as silent:
        port = silent.getsockname()[1]
        said = MutateProbe("127.0.0.1", port, timeout=0.2)()
    where = f"/mutate does not answer on port {port}"
    # the cause's words are Python's and OpenSSL's (`_ssl.c:NNN: The handshake operation timed out` on 3.11)
    assert said is not None and said.startswith(f"{where}: ") and said.endswith("timed out"), said


class Timed(Gate):
    """The Gate, noting when the listener says each review began."""

    def __init__(self) -> None:
        super().__init__()
        self.started: list[float] = []

    def admit_review(self, review: Review, started: float, *, cache_only: bool = False) -> dict[str, Any] | None:
        self.started.append(started)
        return super().admit_review(review, started, cache_only=cache_only)


def test_a_chunked_review_goes_the_apps_way_whole_and_a_review_on_the_fast_path_tells_when_it_began(
    tmp_path: Path, bundle: CertBundle
) -> None:
    """A client may send its body chunked (no length): the app must get all of it, and its end; the admitter times
    each review from its first byte (hami_place_admission_seconds)."""
    gate = Timed()
    app = Recorded(gate)
    body = review_body("chunked")
    chunked = (
        b"POST /mutate HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n" + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    )
    with serving(app, tmp_path) as listener, connected(listener.port, bundle.ca_crt) as tls:
        tls.sendall(chunked)
        status, _headers, answer = read_answer(tls)
        tls.sendall(post_request())
        read_answer(tls)
    assert (status, json.loads(answer)["response"]) == ("HTTP/1.1 200 OK", {"uid": "uid-chunked", "allowed": True})
    assert app.through_asgi == ["POST /mutate"]
    assert len(gate.started) == 2 and all(isinstance(started, float) for started in gate.started)


def test_bodies_arriving_on_several_connections_are_each_in_flight_until_answered(
    served: MutateListener, bundle: CertBundle, app: MutateApp
) -> None:
    """The drain waits for and reports what is in flight: two bodies arriving are two admissions."""
    request = post_request()
    with connected(served.port, bundle.ca_crt) as first, connected(served.port, bundle.ca_crt) as second:
        first.sendall(request[:-10])
        second.sendall(request[:-10])
        wait_until(lambda: app.in_flight == 2)
        first.sendall(request[-10:])
        second.sendall(request[-10:])
        assert [read_answer(first)[0], read_answer(second)[0]] == ["HTTP/1.1 200 OK"] * 2
    assert app.in_flight == 0


def test_a_connection_closes_after_its_answer_when_the_client_or_its_protocol_says_so(
    served: MutateListener, bundle: CertBundle
) -> None:
    """A client that said close (on the fast path or the app's) or speaks HTTP/1.0 reads to the end of the stream:
    an answer that kept the connection open would leave it waiting."""
    http10 = (
        post_request()
        .replace(b" HTTP/1.1\r\n", b" HTTP/1.0\r\n", 1)
        .replace(b"Host: webhook\r\n", b"Host: webhook\r\nConnection: keep-alive\r\n", 1)
    )
    for request in (post_request(close=True), post_request("hold", close=True), http10):
        with connected(served.port, bundle.ca_crt) as tls:
            tls.sendall(request)
            status, headers, _body = read_answer(tls)
            assert (status.split(" ", 1)[1], headers.get("connection"), tls.recv(4096)) == ("200 OK", "close", b"")


def test_a_client_that_waits_for_100_continue_is_told_to_send_its_body(
    served: MutateListener, bundle: CertBundle
) -> None:
    """The fast path never says 100 Continue: such a request goes the app's way, which does."""
    body = review_body()
    head = (
        "POST /mutate HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\nExpect: 100-continue\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    with connected(served.port, bundle.ca_crt) as tls:
        tls.sendall(head.encode())
        assert tls.recv(4096) == b"HTTP/1.1 100 Continue\r\n\r\n"
        tls.sendall(body)
        assert read_answer(tls)[0] == "HTTP/1.1 200 OK"


def test_the_mutate_listener_is_built_with_the_settings_it_documents(
    tmp_path: Path, bundle: CertBundle, app: MutateApp
) -> None:
    """uvicorn's defaults would add headers, logging and a lifespan to every admission and forget the limits given."""
    context = ReloadingCertificate(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"), "").serving_context()
    names = frozenset({"kube-apiserver"})
    listener = MutateListener(
        ("::1", 0), app, context, idle_seconds=7, header_seconds=3, max_connections=5, client_names=names
    )
    try:
        config, server, held = listener.server.config, listener.server, listener.connections
        sock = listener.socket
        assert (sock.family, listener.port) == (socket.AF_INET6, sock.getsockname()[1])
        assert listen_backlog(sock) == min(LISTEN_BACKLOG, SOMAXCONN), "connections queue before the loop serves"
        assert (
            config.loop,
            config.http,
            config.lifespan,
            config.log_config,
            config.access_log,
            config.proxy_headers,
            config.server_header,
            config.date_header,
            config.backlog,
            config.timeout_keep_alive,
            config.ssl,
        ) == ("uvloop", IdleLimited, "off", None, False, False, False, False, 1024, 7, context)
        assert (server.app, server.held, server.header_seconds, server.lag_probe) == (app, held, 3, None)
        assert (held.metrics, held.cap, held.client_names, held.open) == (app.metrics, 5, names, {})
        assert (listener.thread.name, listener.thread.daemon, listener.started()) == ("https", True, False)
    finally:
        listener.socket.close()


# The kernel's cap on a listen backlog (Linux): a larger one is cut to it.
SOMAXCONN = int(Path("/proc/sys/net/core/somaxconn").read_text())


def listen_backlog(sock: socket.socket) -> int:
    """How many connections a listening socket's accept queue holds: Linux reports it in TCP_INFO's tcpi_sacked."""
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    return int(struct.unpack_from("8B6I", info)[-1])


def test_the_serving_listener_keeps_its_listen_backlog(served: MutateListener) -> None:
    """The event loop listens on the socket again when it starts serving: a burst of API server connections (a
    rollout, a failover) must queue there, not be refused at asyncio's default of 100."""
    assert listen_backlog(served.socket) == min(LISTEN_BACKLOG, SOMAXCONN)


class Held:
    """Stands for a connection as `Connections` sees it: its client certificate, whether it carried a review, and
    the reasons it was refused for (a refusal leaves, as the real one does)."""

    def __init__(self, held: Connections, name: str = "kube-apiserver", *, reviewed: bool = False) -> None:
        self.held = held
        self.cert = {"subject": ((("commonName", name),),)}
        self.reviewed = reviewed
        self.refused: list[str] = []

    def peercert(self) -> dict[str, Any]:
        return self.cert

    def refuse(self, reason: str) -> None:
        self.refused.append(reason)
        self.held.leave(self)  # type: ignore[arg-type]


def test_the_cap_makes_room_by_the_oldest_connection_without_a_review_and_else_refuses_the_new_one() -> None:
    """The API server's kept-alive connections carry the admissions: a burst of idle clients must not push them
    out, and the gauge must follow every connection in and out."""
    metrics = Metrics()
    held = Connections(metrics, cap=2)
    first, second, third = (Held(held, reviewed=True) for _ in range(3))
    assert [held.admit(first), held.admit(second), held.admit(third)] == [True, True, False]  # type: ignore[arg-type]
    assert (list(held.open), third.refused, metrics.connections._value.get()) == ([first, second], ["over-cap"], 2)
    held.leave(first)  # type: ignore[arg-type]
    held.leave(first)  # type: ignore[arg-type]
    assert (list(held.open), metrics.connections._value.get()) == ([second], 1)
    idle, newest = Held(held), Held(held)
    assert [held.admit(idle), held.admit(newest)] == [True, True]  # type: ignore[arg-type]
    assert (list(held.open), idle.refused, newest.refused) == ([second, newest], ["over-cap"], [])
    assert (second.refused, metrics.connections._value.get()) == ([], 2)


def test_only_a_client_certificate_with_a_required_name_is_held(caplog: pytest.LogCaptureFixture) -> None:
    """A certificate of the client CA but another name (a kubelet's, say) must not reach /mutate; the log names it."""
    metrics = Metrics()
    held = Connections(metrics, client_names=frozenset({"kube-apiserver"}))
    apiserver, kubelet = Held(held), Held(held, "system:node:gpu-1")
    with caplog.at_level(logging.WARNING, logger="webhook.listener"):
        assert [held.admit(apiserver), held.admit(kubelet)] == [True, False]  # type: ignore[arg-type]
    assert (list(held.open), apiserver.refused, kubelet.refused) == ([apiserver], [], ["client-certificate-name"])
    assert [record.getMessage() for record in caplog.records] == [
        "refused a client certificate named ['system:node:gpu-1']: not one of --client-cert-name"
    ]
    assert metrics.connections._value.get() == 1


class Timer:
    """Stands for an event loop's timer handle: when it is due, what it runs, whether it was cancelled."""

    def __init__(self, when: float, callback: Any, args: tuple[Any, ...]) -> None:
        self.when, self.callback, self.args = when, callback, args
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class Timers:
    """What a connection uses of its event loop, on a clock of its own: `call_later` notes each timer, `advance`
    moves the clock and runs those then due."""

    def __init__(self) -> None:
        self.now = 0.0
        self.timers: list[Timer] = []

    def call_later(self, delay: float, callback: Any, *args: Any) -> Timer:
        timer = Timer(self.now + delay, callback, args)
        self.timers.append(timer)
        return timer

    def advance(self, seconds: float) -> None:
        self.now += seconds
        for timer in [timer for timer in self.timers if timer.when <= self.now and not timer.cancelled]:
            self.timers.remove(timer)
            timer.callback(*timer.args)


class Wire:
    """Stands for a connection's TLS transport: what the listener wrote, and whether it closed it or cut it off."""

    def __init__(self) -> None:
        self.written = b""
        self.closed = False
        self.aborted = False

    def get_extra_info(self, _name: str) -> None:
        return None

    def write(self, data: bytes) -> None:
        self.written += data

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = True

    def is_closing(self) -> bool:
        return self.closed or self.aborted


def connect(app: MutateApp, held: Connections, timers: Timers) -> tuple[IdleLimited, Wire]:
    """A connection of the listener on a stand-in transport whose handshake just completed."""
    config = uvicorn.Config(app, http=IdleLimited, lifespan="off", log_config=None, timeout_keep_alive=5)
    connection = IdleLimited(config=config, server_state=ServerState(), app_state={}, _loop=timers)  # type: ignore[arg-type]
    connection.mutate, connection.held = app, held
    wire = Wire()
    connection.connection_made(wire)  # type: ignore[arg-type]
    return connection, wire


def closed_by_reason(metrics: Metrics) -> dict[str, float]:
    """hami_place_webhook_connections_refused_total, each reason's count."""
    return {reason: metrics.connections_closed.labels(reason)._value.get() for reason in REFUSALS}


def test_connections_made_in_one_turn_of_the_loop_at_the_cap_leave_it_held_by_the_newest(
    app: MutateApp,
) -> None:
    """The loop makes every connection whose handshake completed before any refused one is lost: each refused
    connection must give its place back at once, or the cap is passed and closes the same victim again."""
    held, timers = Connections(app.metrics, cap=1), Timers()
    made = [connect(app, held, timers) for _ in range(3)]
    assert (list(held.open), [wire.aborted for _, wire in made]) == ([made[2][0]], [True, True, False])
    assert (app.metrics.connections._value.get(), closed_by_reason(app.metrics)[REFUSED_CAP]) == (1, 2)


def test_a_connection_is_closed_and_counted_once_by_the_first_limit_one_read_passes(app: MutateApp) -> None:
    """A read may hold a body over the budget and, pipelined behind it, a header over its limit: the closed
    connections counted by reason must add up to the connections closed."""
    app.bodies = BodyBudget(limit=10)
    held, timers = Connections(app.metrics), Timers()
    connection, wire = connect(app, held, timers)
    connection.data_received(post_request() + b"POST /mutate HTTP/1.1\r\nX-Long: " + b"a" * MAX_HEADER_BYTES)
    assert closed_by_reason(app.metrics) == {
        "client-certificate-name": 0,
        "over-cap": 0,
        "header-too-large": 0,
        "bodies-over-budget": 1,
    }
    assert (wire.aborted, wire.written, list(held.open), app.in_flight, app.bodies.held) == (True, b"", [], 0, 0)


def test_a_connection_its_header_deadline_closed_is_forgotten_when_lost(app: MutateApp) -> None:
    """uvicorn's shutdown waits for every connection it still knows: one the header deadline closed must leave its
    books when the transport reports it lost."""
    held, timers = Connections(app.metrics), Timers()
    connection, wire = connect(app, held, timers)
    connection.data_received(b"POST /mutate HTTP/1.1\r\nX-Slow: 1\r\n")
    timers.advance(HEADER_SECONDS)
    assert (wire.closed, wire.written) == (True, b""), "closed, nothing answered"
    connection.connection_lost(None)
    gauge = app.metrics.connections._value.get()
    assert (connection.server_state.connections, list(held.open), gauge) == (set(), [], 0)


def test_a_listener_stopping_answers_a_body_still_arriving_and_then_closes_its_connection(app: MutateApp) -> None:
    """A stopping uvicorn waits for its connections to close: one answered while the listener stops must say close
    and close, even when no drain marked the app, or the stop waits out its grace."""
    held, timers = Connections(app.metrics), Timers()
    connection, wire = connect(app, held, timers)
    request = post_request()
    connection.data_received(request[:-10])
    connection.shutdown()
    assert not wire.is_closing(), "the body still arriving is read to its end"
    connection.data_received(request[-10:])
    body = b'{"response":{"uid":"uid-web-0","allowed":true}}'
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n"
    assert (wire.written, wire.closed, app.in_flight) == (head % len(body) + body, True, 0)


class LoopAt:
    """What `probe_lag` uses of asyncio, on a clock of its own: each sleep wakes `late` seconds after it was due
    (from a script), and the third observation ends the probe."""

    def __init__(self, late: list[float]) -> None:
        self.now = 100.0
        self.late = late
        self.slept: list[float] = []
        self.observed: list[float] = []

    def get_running_loop(self) -> LoopAt:
        return self

    def time(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds + self.late.pop(0)

    def observe(self, lag: float) -> None:
        self.observed.append(lag)
        if len(self.observed) == 3:
            raise EOFError


def test_the_loop_lag_is_how_late_each_wake_up_came_and_never_less_than_none() -> None:
    """hami_place_event_loop_lag_seconds is what each admission waited for the loop: the interval itself is no lag,
    and a timer that fires a little early is no negative wait."""
    loop = LoopAt([0.25, -0.125, 0.0])
    probing = webhook_listener.probe_lag(loop.observe)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(webhook_listener, "asyncio", loop)
        with pytest.raises(EOFError):
            probing.send(None)
    assert (loop.slept, loop.observed) == ([0.05] * 3, pytest.approx([0.25, 0.0, 0.0]))


def test_drain_marks_the_app_unready_stops_within_what_is_left_of_finish_and_says_so(
    tmp_path: Path, bundle: CertBundle, app: MutateApp, caplog: pytest.LogCaptureFixture
) -> None:
    """The drain's budget is the pod's termination grace: the listen phase uses part of it, the stop gets the rest
    (at least a second), and the log says what each phase did."""
    with serving(app, tmp_path) as listener, caplog.at_level(logging.INFO, logger="webhook.listener"):
        drain(listener, listen=0.5, finish=30.0)
    stopped = (app.draining, listener.thread.is_alive(), listener.socket.fileno())
    assert (*stopped, listener.server.config.timeout_graceful_shutdown) == (True, False, -1, 29)
    assert [record.getMessage() for record in caplog.records] == [
        "unready; still answering for 0.5s while clients move to other replicas",
        "listener stopped; 0 admission(s) were in flight and are answered",
    ]
    caplog.clear()
    with serving(Recorded(Gate()), tmp_path) as listener, caplog.at_level(logging.INFO, logger="webhook.listener"):
        drain(listener, listen=0.0, finish=0.0)
        assert (listener.server.config.timeout_graceful_shutdown, listener.thread.is_alive()) == (1, False)
    assert [record.getMessage() for record in caplog.records] == [
        "listener stopped; 0 admission(s) were in flight and are answered"
    ]


def test_a_review_pipelined_behind_one_in_flight_is_answered_after_it(
    served: MutateListener, bundle: CertBundle, gate: Gate
) -> None:
    """HTTP/1.1 answers in the order asked: a cache-decided review sent right behind one that waits for a claim
    must not overtake it on the fast path."""
    gate.hold.set()
    with connected(served.port, bundle.ca_crt) as tls:
        tls.sendall(post_request("hold") + post_request("web-1"))
        assert gate.entered.acquire(timeout=TIMEOUT)
        time.sleep(0.2)  # the second review's header is parsed by now
        gate.release.set()
        uids = [json.loads(read_answer(tls)[2])["response"]["uid"] for _ in range(2)]
    assert uids == ["uid-hold", "uid-web-1"]


def test_a_header_of_exactly_the_limit_is_answered_and_its_body_may_come_after_the_header_deadline(
    tmp_path: Path, bundle: CertBundle, app: MutateApp
) -> None:
    """MAX_HEADER_BYTES is the largest header served, not the first refused; and the header deadline ends with the
    header, the body has the admission's own."""
    request = post_request()
    line = b"POST /mutate HTTP/1.1\r\n"
    head, _, body = request[len(line) :].partition(b"\r\n\r\n")
    prefix = line + b"X-Long: "
    with serving(app, tmp_path, header_seconds=2) as listener, connected(listener.port, bundle.ca_crt) as tls:
        tls.sendall(prefix + b"a" * (MAX_HEADER_BYTES - len(prefix)))
        time.sleep(0.2)  # read as a header still not whole
        tls.sendall(b"\r\n" + head + b"\r\n\r\n")
        time.sleep(2.5)  # past the header deadline
        tls.sendall(body)
        assert read_answer(tls)[0] == "HTTP/1.1 200 OK"
    assert app.metrics.connections_closed.labels("header-too-large")._value.get() == 0


def test_a_client_gone_while_its_body_arrives_gives_back_its_budget_its_admission_and_its_place(
    tmp_path: Path, bundle: CertBundle, gate: Gate
) -> None:
    """The drain waits for admissions in flight and the cap counts open connections: a client that disconnects
    must not hold either until its admission's deadline."""
    app = MutateApp(gate, Metrics(), admission_timeout=30.0)  # type: ignore[arg-type]
    with serving(app, tmp_path) as listener:
        with connected(listener.port, bundle.ca_crt) as tls:
            tls.sendall(post_request()[:-10])
            wait_until(lambda: (app.in_flight, app.metrics.connections._value.get()) == (1, 1))
        wait_until(lambda: (app.in_flight, app.bodies.held, app.metrics.connections._value.get()) == (0, 0, 0))


def test_a_review_without_a_length_goes_the_apps_way(tmp_path: Path, bundle: CertBundle, gate: Gate) -> None:
    """Only a body whose length is told is read on the fast path; a POST without one (no body, as HTTP reads it)
    is the app's to answer, as a client's mistake."""
    app = Recorded(gate)
    request = b"POST /mutate HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\n\r\n"
    with serving(app, tmp_path) as listener, connected(listener.port, bundle.ca_crt) as tls:
        tls.sendall(request)
        status_line, headers, body = read_answer(tls)
    status, expected_headers, expected_body = call(Recorded(gate), "POST", "/mutate")
    assert app.through_asgi == ["POST /mutate"]
    assert (status_line.split(" ", 2)[1], headers, json.loads(body)) == (
        str(status),
        expected_headers,
        json.loads(expected_body),
    )
