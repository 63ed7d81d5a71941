"""/mutate over HTTP/2, as the API server's client speaks it when ALPN offers it: one connection, many streams."""

from __future__ import annotations

import json
import socket
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.events import ConnectionTerminated, DataReceived, ResponseReceived, StreamEnded

from tests.unit.test_webhook_server import TIMEOUT, Gate, Recorded, post_request, read_answer, review_body
from tests.webhook_listener import serving
from webhook.certs import generate
from webhook.server import MutateListener


class H2Client:
    """A client of one HTTP/2 connection: requests on streams of their own, answers read as they come."""

    def __init__(self, tls: ssl.SSLSocket) -> None:
        self.tls = tls
        self.h2 = H2Connection(H2Configuration(client_side=True, header_encoding=None))
        self.h2.initiate_connection()
        self.tls.sendall(self.h2.data_to_send())
        self.answers: dict[int, tuple[int, dict[bytes, bytes], bytes]] = {}
        self.arriving: dict[int, tuple[int, dict[bytes, bytes], bytearray]] = {}
        self.terminated = False

    def send(self, method: str, path: str, body: bytes = b"", content_type: str = "application/json") -> int:
        stream = self.h2.get_next_available_stream_id()
        headers = [(b":method", method.encode()), (b":path", path.encode()), (b":scheme", b"https")]
        headers.append((b":authority", b"webhook"))
        if body:
            headers += [(b"content-type", content_type.encode()), (b"content-length", str(len(body)).encode())]
        self.h2.send_headers(stream, headers, end_stream=not body)
        if body:
            self.h2.send_data(stream, body, end_stream=True)
        self.tls.sendall(self.h2.data_to_send())
        return stream

    def answer(self, stream: int) -> tuple[int, dict[bytes, bytes], bytes]:
        while stream not in self.answers:
            data = self.tls.recv(65536)
            if not data:
                raise ConnectionError(f"closed before stream {stream} was answered")
            for event in self.h2.receive_data(data):
                if isinstance(event, ResponseReceived):
                    headers = dict(event.headers or ())
                    self.arriving[event.stream_id or 0] = (int(headers[b":status"]), headers, bytearray())
                elif isinstance(event, DataReceived):
                    self.arriving[event.stream_id or 0][2].extend(event.data or b"")
                    self.h2.acknowledge_received_data(event.flow_controlled_length or 0, event.stream_id or 0)
                elif isinstance(event, StreamEnded):
                    status, headers, body = self.arriving.pop(event.stream_id or 0)
                    self.answers[event.stream_id or 0] = (status, headers, bytes(body))
                elif isinstance(event, ConnectionTerminated):
                    self.terminated = True
            self.tls.sendall(self.h2.data_to_send())
        return self.answers[stream]


@contextmanager
def h2_connected(listener: MutateListener, ca: bytes) -> Iterator[H2Client]:
    context = ssl.create_default_context(cadata=ca.decode())
    context.set_alpn_protocols(["h2", "http/1.1"])
    with (
        socket.create_connection(("127.0.0.1", listener.port), timeout=TIMEOUT) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        assert tls.selected_alpn_protocol() == "h2"
        yield H2Client(tls)


def http11_answer(listener: MutateListener, ca: bytes, request: bytes) -> tuple[int, bytes]:
    context = ssl.create_default_context(cadata=ca.decode())
    with (
        socket.create_connection(("127.0.0.1", listener.port), timeout=TIMEOUT) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        tls.sendall(request)
        status, _headers, body = read_answer(tls)
    return int(status.split(" ")[1]), body


def test_streams_of_one_connection_are_answered_as_http11_requests_and_a_claim_holds_up_only_its_own(
    tmp_path: Path,
) -> None:
    bundle = generate(["hami-place-webhook.test"], ["127.0.0.1"])
    bundle.write(tmp_path)
    gate = Gate()
    gate.hold.set()
    app = Recorded(gate)
    with serving(app, tmp_path) as listener, h2_connected(listener, bundle.ca_crt) as client:
        held = client.send("POST", "/mutate?timeout=10s", review_body("hold"))
        assert gate.entered.acquire(timeout=TIMEOUT), "the claim waits in its thread"
        sent = {
            "web-0": client.send("POST", "/mutate?timeout=10s", review_body("web-0")),
            "not json": client.send("POST", "/mutate", b"{not json"),
            "text": client.send("POST", "/mutate", review_body("web-1"), "text/plain"),
            "healthz": client.send("GET", "/healthz"),
            "elsewhere": client.send("GET", "/elsewhere"),
        }
        answers = {name: client.answer(stream) for name, stream in sent.items()}
        assert held not in client.answers, "the claim is still being written"
        gate.release.set()
        status, headers, body = client.answer(held)
        assert status == 200 and json.loads(body)["response"]["uid"] == "uid-hold"
        assert app.through_asgi == [], "every stream is answered by the HTTP/2 connection itself"
        expected = {
            "web-0": post_request("web-0"),
            "not json": b"POST /mutate HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 9\r\n\r\n"
            b"{not json",
            "text": post_request("web-1").replace(b"application/json", b"text/plain"),
            "healthz": b"GET /healthz HTTP/1.1\r\nHost: webhook\r\n\r\n",
            "elsewhere": b"GET /elsewhere HTTP/1.1\r\nHost: webhook\r\n\r\n",
        }
        for name, request in expected.items():
            status, headers, body = answers[name]
            over_http11 = http11_answer(listener, bundle.ca_crt, request)
            assert (status, json.loads(body)) == (over_http11[0], json.loads(over_http11[1])), name
            assert headers[b"content-type"] == b"application/json"
        assert [answers[name][0] for name in sent] == [200, 400, 415, 200, 404]


def test_while_draining_a_connection_is_sent_goaway_after_its_answer(tmp_path: Path) -> None:
    bundle = generate(["hami-place-webhook.test"], ["127.0.0.1"])
    bundle.write(tmp_path)
    app = Recorded(Gate())
    with serving(app, tmp_path) as listener, h2_connected(listener, bundle.ca_crt) as client:
        assert client.answer(client.send("POST", "/mutate", review_body("web-0")))[0] == 200
        assert not client.terminated
        app.draining = True
        assert client.answer(client.send("POST", "/mutate", review_body("web-1")))[0] == 200
        while not client.terminated:
            data = client.tls.recv(65536)
            if not data:
                break
            for event in client.h2.receive_data(data):
                client.terminated |= isinstance(event, ConnectionTerminated)
        assert client.terminated, "GOAWAY: the client opens its next streams on another connection"


def test_without_http2_offered_the_client_speaks_http11(tmp_path: Path) -> None:
    bundle = generate(["hami-place-webhook.test"], ["127.0.0.1"])
    bundle.write(tmp_path)
    with serving(Recorded(Gate()), tmp_path, protocols=()) as listener:
        context = ssl.create_default_context(cadata=bundle.ca_crt.decode())
        context.set_alpn_protocols(["h2", "http/1.1"])
        with (
            socket.create_connection(("127.0.0.1", listener.port), timeout=TIMEOUT) as raw,
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
        ):
            assert tls.selected_alpn_protocol() is None
            tls.sendall(post_request())
            assert read_answer(tls)[0] == "HTTP/1.1 200 OK"


def test_a_stream_whose_body_stops_arriving_is_a_408(tmp_path: Path) -> None:
    bundle = generate(["hami-place-webhook.test"], ["127.0.0.1"])
    bundle.write(tmp_path)
    app = Recorded(Gate(), admission_timeout=1.0)
    with serving(app, tmp_path) as listener, h2_connected(listener, bundle.ca_crt) as client:
        stream = client.h2.get_next_available_stream_id()
        client.h2.send_headers(
            stream,
            [
                (b":method", b"POST"),
                (b":path", b"/mutate"),
                (b":scheme", b"https"),
                (b":authority", b"webhook"),
                (b"content-type", b"application/json"),
            ],
        )
        client.h2.send_data(stream, review_body()[:20])
        client.tls.sendall(client.h2.data_to_send())
        status, _headers, body = client.answer(stream)
        other = client.answer(client.send("POST", "/mutate", review_body("web-1")))
    assert status == 408 and "did not arrive" in json.loads(body)["error"]
    assert other[0] == 200, "the connection serves on"
    assert app.in_flight == 0


def test_a_connection_idle_after_a_claim_is_closed_after_the_idle_limit(tmp_path: Path) -> None:
    """The limit runs again once the last stream is answered, a claim answered from its thread included."""
    bundle = generate(["hami-place-webhook.test"], ["127.0.0.1"])
    bundle.write(tmp_path)
    with (
        serving(Recorded(Gate()), tmp_path, idle_seconds=1) as listener,
        h2_connected(listener, bundle.ca_crt) as client,
    ):
        assert client.answer(client.send("POST", "/mutate", review_body("web-0")))[0] == 200  # settings exchanged
        status, _headers, body = client.answer(client.send("POST", "/mutate", review_body("hold")))
        assert status == 200 and json.loads(body)["response"]["uid"] == "uid-hold"
        received = b""
        while chunk := client.tls.recv(65536):
            received += chunk
        events = client.h2.receive_data(received)
    assert any(isinstance(event, ConnectionTerminated) for event in events), "GOAWAY, then the connection closed"
