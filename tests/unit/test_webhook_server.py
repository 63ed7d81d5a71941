"""The HTTPS listener on loopback with a plain WSGI app: idle and half-open clients, the self-probe, the drain."""

from __future__ import annotations

import json
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from webhook.certs import CertBundle, generate
from webhook.main import main
from webhook.server import WORKER_THREADS, AdmissionServer, InFlight, MutateProbe, drain, https_server
from webhook.tls import ReloadingCertificate, ReloadingSSLAdapter

# What the API server waits for a webhook by default; the listener is given the same.
TIMEOUT = 10.0
# The first bytes of a TLS ClientHello record announcing 512 bytes, of which a half-open client sends no more.
PARTIAL_CLIENT_HELLO = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"


class Gate:
    """A WSGI app answering 200 `ok` (or `read N` for a body); while `hold` is set, each waits for `release`."""

    def __init__(self) -> None:
        self.hold = threading.Event()
        self.release = threading.Event()
        self.entered = threading.Semaphore(0)

    def __call__(self, environ: dict[str, Any], start_response: Any) -> list[bytes]:
        if self.hold.is_set():
            self.entered.release()
            self.release.wait(30)
        length = int(environ.get("CONTENT_LENGTH") or 0)
        answer = f"read {len(environ['wsgi.input'].read(length))}".encode() if length else b"ok"
        start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(answer)))])
        return [answer]


@pytest.fixture
def bundle(tmp_path: Path) -> CertBundle:
    made = generate(["hami-place-webhook.test"], ["127.0.0.1"])
    made.write(tmp_path)
    return made


def listener(tmp_path: Path, app: Any, threads: int = WORKER_THREADS) -> tuple[AdmissionServer, threading.Thread]:
    certificate = ReloadingCertificate(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"))
    server = https_server(("127.0.0.1", 0), app, ReloadingSSLAdapter(certificate), timeout=TIMEOUT, threads=threads)
    server.prepare()
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    return server, thread


@pytest.fixture
def gate() -> Gate:
    return Gate()


@pytest.fixture
def served(tmp_path: Path, bundle: CertBundle, gate: Gate) -> Iterator[tuple[AdmissionServer, InFlight]]:
    in_flight = InFlight(gate)
    server, thread = listener(tmp_path, in_flight)
    try:
        yield server, in_flight
    finally:
        gate.release.set()
        server.stop()
        thread.join(timeout=15)


def port_of(server: AdmissionServer) -> int:
    return int(server.bind_addr[1])


def get(port: int, ca: bytes, timeout: float = TIMEOUT) -> tuple[str, dict[str, str]]:
    """One request over TLS, as the API server sends it: (status line, headers)."""
    context = ssl.create_default_context(cadata=ca.decode())
    with (
        socket.create_connection(("127.0.0.1", port), timeout=timeout) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        tls.sendall(b"GET / HTTP/1.1\r\nHost: webhook\r\n\r\n")
        received = b""
        while not received.endswith(b"ok"):
            chunk = tls.recv(4096)
            if not chunk:
                break
            received += chunk
    head = received.partition(b"\r\n\r\n")[0].decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in head[1:])
    return head[0], {key.lower(): value for key, value in headers.items()}


def hold_connections(stack: ExitStack, port: int, idle: int, half_open: int) -> None:
    """Open `idle` TCP connections that send nothing and `half_open` that send a partial ClientHello."""
    for index in range(idle + half_open):
        sock = stack.enter_context(socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT))
        if index >= idle:
            sock.sendall(PARTIAL_CLIENT_HELLO)


def test_idle_and_half_open_connections_do_not_delay_a_request(
    served: tuple[AdmissionServer, InFlight], bundle: CertBundle
) -> None:
    """More idle connections than workers, and a few half-open handshakes: a request is still answered in time."""
    server, _ = served
    with ExitStack() as stack:
        hold_connections(stack, port_of(server), idle=3 * WORKER_THREADS, half_open=4)
        for _ in range(3):
            status, _headers = get(port_of(server), bundle.ca_crt)
            assert status == "HTTP/1.1 200 OK"


def test_a_handshake_that_fails_closes_only_its_own_connection(
    served: tuple[AdmissionServer, InFlight], bundle: CertBundle
) -> None:
    server, _ = served
    with socket.create_connection(("127.0.0.1", port_of(server)), timeout=TIMEOUT) as plain:
        plain.sendall(b"GET / HTTP/1.1\r\nHost: webhook\r\n\r\n")
        plain.recv(4096)  # closed (or an alert) without an HTTP answer: it never reached the app
    assert get(port_of(server), bundle.ca_crt)[0] == "HTTP/1.1 200 OK"


def test_the_probe_answers_while_the_listener_serves(served: tuple[AdmissionServer, InFlight]) -> None:
    server, _ = served
    assert MutateProbe("127.0.0.1", port_of(server))() is None


def test_the_probe_says_why_when_no_worker_is_free(tmp_path: Path, bundle: CertBundle, gate: Gate) -> None:
    """With its only worker stuck in a request, the listener does not answer, and the probe says so."""
    server, thread = listener(tmp_path, gate, threads=1)
    try:
        gate.hold.set()
        stuck = threading.Thread(target=get, args=(port_of(server), bundle.ca_crt), daemon=True)
        stuck.start()
        assert gate.entered.acquire(timeout=TIMEOUT)
        reason = MutateProbe("127.0.0.1", port_of(server))()
        assert reason is not None
        assert f"/mutate does not answer on port {port_of(server)}" in reason
    finally:
        gate.release.set()
        server.stop()
        thread.join(timeout=15)


def test_the_probe_says_why_when_nothing_listens() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    reason = MutateProbe("127.0.0.1", port)()
    assert reason is not None and "refused" in reason


def test_drain_closes_connections_after_answering_and_finishes_requests_in_flight(
    served: tuple[AdmissionServer, InFlight], bundle: CertBundle, gate: Gate
) -> None:
    server, in_flight = served
    assert "connection" not in get(port_of(server), bundle.ca_crt)[1], "kept alive before the drain"
    server.draining = True
    assert get(port_of(server), bundle.ca_crt)[1]["connection"] == "close", "clients move on while draining"

    # A request whose body is still arriving when the listener closes is read to the end and answered.
    context = ssl.create_default_context(cadata=bundle.ca_crt.decode())
    with (
        socket.create_connection(("127.0.0.1", port_of(server)), timeout=TIMEOUT) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        tls.sendall(b"POST / HTTP/1.1\r\nHost: webhook\r\nContent-Length: 10\r\n\r\nhello")
        wait_until(lambda: in_flight.count == 1)
        stopping = threading.Thread(target=drain, args=(server, in_flight), kwargs={"listen": 0.0, "finish": TIMEOUT})
        stopping.start()
        wait_until(lambda: refused(port_of(server)))
        tls.sendall(b"world")
        answer = b""
        while chunk := tls.recv(4096):
            answer += chunk
    stopping.join(timeout=TIMEOUT * 2)
    assert answer.startswith(b"HTTP/1.1 200 OK") and answer.endswith(b"read 10"), answer
    assert not stopping.is_alive()


def wait_until(condition: Any) -> None:
    for _ in range(int(TIMEOUT / 0.05)):
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError("condition never held")


def refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT).close()
    except ConnectionRefusedError:
        return True
    return False


def client_certificate(directory: Path) -> None:
    """ca.crt, and client.crt/client.key it signed for client authentication (what the API server presents)."""
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
    client = issued("kube-apiserver", key.public_key(), x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]))
    (directory / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (directory / "client.crt").write_bytes(client.public_bytes(serialization.Encoding.PEM))
    (directory / "client.key").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )


def test_a_client_certificate_is_required_when_a_client_ca_is_given(tmp_path: Path, bundle: CertBundle) -> None:
    (tmp_path / "client").mkdir()
    client_certificate(tmp_path / "client")
    certificate = ReloadingCertificate(
        str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"), str(tmp_path / "client" / "ca.crt")
    )
    server = https_server(("127.0.0.1", 0), Gate(), ReloadingSSLAdapter(certificate), timeout=TIMEOUT)
    server.prepare()
    thread = threading.Thread(target=server.serve, daemon=True)
    thread.start()
    try:
        with pytest.raises((ssl.SSLError, ConnectionError)):
            get(port_of(server), bundle.ca_crt)
        context = ssl.create_default_context(cadata=bundle.ca_crt.decode())
        context.load_cert_chain(str(tmp_path / "client" / "client.crt"), str(tmp_path / "client" / "client.key"))
        with (
            socket.create_connection(("127.0.0.1", port_of(server)), timeout=TIMEOUT) as raw,
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
        ):
            tls.sendall(b"GET / HTTP/1.1\r\nHost: webhook\r\nConnection: close\r\n\r\n")
            assert tls.recv(4096).startswith(b"HTTP/1.1 200 OK")
        probe = MutateProbe("127.0.0.1", port_of(server), client_cert_required=True)
        assert probe() is None, "a handshake a worker completed is an answer"
    finally:
        server.stop()
        thread.join(timeout=15)


def test_in_flight_counts_requests_being_answered() -> None:
    seen: list[int] = []
    counter: InFlight

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        seen.append(counter.count)
        start_response("200 OK", [])
        return [json.dumps({}).encode()]

    counter = InFlight(app)
    assert list(counter({}, lambda *_: None)) == [b"{}"]
    assert (seen, counter.count) == ([1], 0)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--admission-timeout", "0.5"], "--admission-timeout must be 1..30 seconds"),
        (["--admission-timeout", "31"], "--admission-timeout must be 1..30 seconds"),
        (["--shutdown-grace", "-1"], "--shutdown-grace must be 0..3600 seconds"),
        (["--claim-grace", "0"], "--claim-grace must be a positive number of seconds"),
    ],
)
def test_serve_refuses_timeouts_out_of_range(
    flags: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["serve", "--tls-cert-file", str(tmp_path / "c"), "--tls-key-file", str(tmp_path / "k"), *flags]
    assert main(argv) == 2
    assert message in capsys.readouterr().err
