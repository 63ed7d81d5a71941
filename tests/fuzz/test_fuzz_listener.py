"""Fuzz target: raw HTTP over TLS to the real /mutate listener (uvicorn + MutateApp): never a 5xx, never a traceback."""

from __future__ import annotations

import json
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.fuzz.strategies import FUZZ, json_values
from tests.unit.test_webhook_api import admitter, filled_cache, placement
from tests.webhook_listener import serving
from webhook.certs import generate
from webhook.listener import MutateListener
from webhook.metrics import Metrics
from webhook.mutate import MutateApp

TIMEOUT = 10.0
# The listener's admission timeout and idle limit, short so that a request whose framing is off ends quickly.
SERVER_TIMEOUT = 2.0
methods = st.sampled_from(["POST", "GET", "PUT", "DELETE", "OPTIONS", "HEAD", "PATCH", "BREW", "post", ""])
paths = st.sampled_from(["/mutate", "/mutate?x=1", "/", "/healthz", "//mutate", "/mutate/../mutate", "*", "%"])
versions = st.sampled_from(["HTTP/1.1", "HTTP/1.0", "HTTP/2.0", "HTTP/9", ""])
header_names = st.sampled_from(["Content-Type", "Transfer-Encoding", "Expect", "Connection", "Host", "X-Junk"])
header_values = st.sampled_from(
    ["application/json", "chunked", "100-continue", "close", "0", "-1", "5", "99999999999", "x", ""]
) | st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=20)
bodies = st.binary(max_size=512) | json_values.map(lambda value: json.dumps(value).encode())


@st.composite
def requests(draw: st.DrawFn) -> bytes:
    """A request line, headers and a body; its framing either says the body's true length or is refused at once
    (so no example waits out the server's read timeout for bytes that never come)."""
    line = f"{draw(methods)} {draw(paths)} {draw(versions)}".encode()
    body = draw(bodies)
    headers = draw(st.lists(st.tuples(header_names, header_values), max_size=5))
    length = draw(st.sampled_from([str(len(body)), str(len(body)), "-1", "x", "99999999999", None]))
    if length is not None:
        headers.append(("Content-Length", length))
    # Connection: close last, so an answered request ends its connection instead of idling until the timeout.
    headers.append(("Connection", "close"))
    head = b"\r\n".join([line, *(f"{name}: {value}".encode() for name, value in headers)])
    return head + b"\r\n\r\n" + body


@pytest.fixture(scope="module")
def listener(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[MutateListener, bytes]]:
    directory: Path = tmp_path_factory.mktemp("listener")
    bundle = generate(["hami-place-webhook.test"], ["127.0.0.1"])
    bundle.write(directory)
    metrics = Metrics()
    app = MutateApp(admitter(filled_cache([placement()], []), metrics), metrics, admission_timeout=SERVER_TIMEOUT)
    with serving(app, directory, idle_seconds=SERVER_TIMEOUT) as served:
        yield served, bundle.ca_crt


@settings(FUZZ, max_examples=60)  # each example is a TLS connection; a few wait out the server's read timeout
@given(request=requests() | st.binary(max_size=256).map(lambda junk: junk + b"\r\n\r\n"))
def test_raw_requests(listener: tuple[MutateListener, bytes], request: bytes) -> None:
    server, ca = listener
    context = ssl.create_default_context(cadata=ca.decode())
    received = b""
    with (
        socket.create_connection(("127.0.0.1", server.port), timeout=TIMEOUT) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        tls.settimeout(SERVER_TIMEOUT * 1.5)  # past the server's read timeout: its 408, or its close
        try:
            tls.sendall(request)  # the server may answer and close before the whole body is sent
            while chunk := tls.recv(65536):
                received += chunk
        except (ssl.SSLError, ConnectionError, TimeoutError):
            pass  # the server may drop a connection whose bytes make no request
    for status_line in (line for line in received.split(b"\r\n") if line.startswith(b"HTTP/1.")):
        assert int(status_line.split()[1]) < 500, (request[:200], received[:500])
    assert b"Traceback" not in received
