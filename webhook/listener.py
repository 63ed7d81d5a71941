"""The HTTPS /mutate listener: uvicorn on uvloop with the connection's own rules (a connection cap, header size and
deadline, a body budget, client certificate names), a review the cache decides answered from the parser's callbacks,
the self-probe behind /readyz and the drain at shutdown.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from kubectl_hami_place.kube.deadline import Deadline
from webhook.metrics import INVALID, REFUSED_BODIES, REFUSED_CAP, REFUSED_HEADER, REFUSED_NAME, Metrics
from webhook.mutate import (
    BODY_LATE,
    CLOSE_HEADER,
    JSON_HEADER,
    MutateApp,
    error_body,
    screen,
)
from webhook.settings import DEFAULTS
from webhook.tls import certificate_names, named_client

log = logging.getLogger(__name__)

# The listen backlog: connections the kernel holds until the event loop accepts them.
LISTEN_BACKLOG = 1024
# A request's header (request line and fields) may be this long; a longer one closes the connection. The API
# server's is a few hundred bytes; httptools, under uvicorn, would buffer a field without bound.
MAX_HEADER_BYTES = 64 * 1024
# A request's header must be whole this long after its first byte: uvicorn's idle timer stops at the first byte, so
# a client sending a byte now and then would otherwise keep its connection for ever. The API server sends a review's
# header in one write.
HEADER_SECONDS = 10.0
# The self-probe behind /readyz: each of connect, handshake and read must finish within this.
PROBE_TIMEOUT_SECONDS = 1.0
# The TLS handshake deadline: a client that connects and never completes one is dropped after this.
HANDSHAKE_SECONDS = 10.0
# How often the event loop times one of its own timers (hami_place_event_loop_lag_seconds).
LAG_PROBE_SECONDS = 0.05


@dataclass
class _Arriving:
    """A /mutate request whose body is still arriving on the fast path: when it began, its parts, its deadline, and
    the bytes it holds of the listener's body budget."""

    started: float
    parts: list[bytes]
    late: asyncio.TimerHandle
    size: int = 0


class Connections:
    """The /mutate listener's open connections, oldest first, within `cap`; with `client_names`, only a client
    certificate carrying one of them is served (the TLS context has verified it against the client CA)."""

    def __init__(
        self, metrics: Metrics, cap: int = DEFAULTS.max_connections, client_names: frozenset[str] = frozenset()
    ):
        self.metrics = metrics
        self.cap = cap
        self.client_names = client_names
        self.open: dict[IdleLimited, None] = {}

    def admit(self, connection: IdleLimited) -> bool:
        """Take a connection whose handshake is done: False (and closed) when its client certificate is not named
        as required, or when the cap is reached and every connection held has carried a review."""
        if self.client_names and not named_client(connection.peercert(), self.client_names):
            names = sorted(certificate_names(connection.peercert()))
            log.warning("refused a client certificate named %s: not one of --client-cert-name", names)
            connection.refuse(REFUSED_NAME)
            return False
        if len(self.open) >= self.cap:
            idle = next((held for held in self.open if not held.reviewed), None)
            if idle is None:
                connection.refuse(REFUSED_CAP)
                return False
            idle.refuse(REFUSED_CAP)
        self.open[connection] = None
        self.metrics.connections.set(len(self.open))
        return True

    def leave(self, connection: IdleLimited) -> None:
        """A connection closed."""
        if self.open.pop(connection, 0) is None:
            self.metrics.connections.set(len(self.open))


class IdleLimited(HttpToolsProtocol):
    """uvicorn's httptools connection, whose idle limit also runs before the first request (uvicorn's starts
    after a response only), so a client that connects and sends nothing does not keep its socket for ever.

    A POST /mutate of a JSON body with a length (what the API server sends) is answered from the parser's callbacks
    when the cache decides it: no ASGI cycle, task or receive/send round trips, half the CPU of a request. A review
    that needs the API server, and every other request, goes uvicorn's way to the same app.
    """

    mutate: MutateApp
    held: Connections
    header_seconds: float = HEADER_SECONDS
    header_late: asyncio.TimerHandle | None = None
    # Bytes of the request header received so far, while it is not whole.
    header_bytes = 0
    arriving: _Arriving | None = None
    # Set by a shutdown while a body arrives: that request is answered, then the connection closes.
    closing = False
    # Set once the connection carried an admission review: the cap then closes others before it.
    reviewed = False
    refused = False

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """uvicorn's bookkeeping; then the connection is held within the cap (and its client certificate's name
        checked), and the idle timer starts."""
        super().connection_made(transport)
        if self.held.admit(self):
            self.timeout_keep_alive_task = self.loop.call_later(
                self.timeout_keep_alive, self.timeout_keep_alive_handler
            )

    def peercert(self) -> dict[str, Any] | None:
        """The client certificate, as verified in the handshake (None without one)."""
        peercert: dict[str, Any] | None = self.transport.get_extra_info("peercert")
        return peercert

    def refuse(self, reason: str) -> None:
        """Closed unasked at once (no TLS close_notify to wait for), nothing answered; counted by reason."""
        if not self.refused:
            self.refused = True
            self.mutate.metrics.connections_closed.labels(reason).inc()
        self.held.leave(self)
        self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        """A body still arriving is given up with its deadline; then uvicorn's bookkeeping."""
        self.held.leave(self)
        self._header_arrived()
        self._take_arriving()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        """uvicorn's; then a header still not whole after this read is closed once past MAX_HEADER_BYTES."""
        if self.refused:
            return
        super().data_received(data)
        if self.header_late is not None:
            self.header_bytes += len(data)
            if self.header_bytes > MAX_HEADER_BYTES:
                self._header_arrived()
                self.refuse(REFUSED_HEADER)

    def shutdown(self) -> None:
        """A body still arriving is read to the end and answered before the connection closes; else uvicorn's."""
        if self.arriving is not None:
            self.closing = True
        else:
            super().shutdown()

    def on_message_begin(self) -> None:
        """uvicorn's, then the header deadline from this first byte of a request."""
        super().on_message_begin()
        self._header_arrived()
        self.header_bytes = 0
        self.header_late = self.loop.call_later(self.header_seconds, self._header_missing)

    def _header_arrived(self) -> None:
        """The header deadline no longer runs."""
        if self.header_late is not None:
            self.header_late.cancel()
            self.header_late = None

    def _header_missing(self) -> None:
        """The header did not arrive in time: the connection is closed, nothing answered."""
        self.header_late = None
        self.transport.close()

    def on_headers_complete(self) -> None:
        """A review for the fast path waits for its body here; anything else starts uvicorn's cycle."""
        self._header_arrived()
        if self._fast():
            deadline = Deadline.for_webhook_timeout(self.mutate.admission_timeout)
            late = self.loop.call_later(deadline.remaining(), self._body_late)
            self.arriving = _Arriving(time.perf_counter(), [], late)
            self.mutate.in_flight += 1
            return
        super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        """The fast path's body is kept whole (its length is checked already) within the listener's budget for
        bodies arriving, else the connection closes; uvicorn's cycle takes the rest."""
        if self.arriving is not None:
            if not self.mutate.bodies.take(len(body)):
                self._take_arriving()
                self.refuse(REFUSED_BODIES)
                return
            self.arriving.size += len(body)
            self.arriving.parts.append(body)
        elif self.cycle is not None:
            super().on_body(body)

    def on_message_complete(self) -> None:
        """The fast path answers now when the cache decides, else hands the whole request to uvicorn's cycle."""
        arriving = self._take_arriving()
        if arriving is None:
            if self.cycle is not None:
                super().on_message_complete()
            return
        data = b"".join(arriving.parts)
        answer = self.mutate.answer_on_loop(data, arriving.started)
        self.reviewed = self.reviewed or answer is None or answer[0] == HTTPStatus.OK
        if answer is None:
            super().on_headers_complete()
            self.cycle.body += data
            self.cycle.keep_alive = self.cycle.keep_alive and not self.closing
            super().on_message_complete()
            return
        keep_alive = (
            self.parser.get_http_version() != "1.0"
            and self.parser.should_keep_alive()
            and not (self.mutate.draining or self.closing)
        )
        self._respond(*answer, keep_alive=keep_alive)

    def _take_arriving(self) -> _Arriving | None:
        """The request whose body was arriving, if any, now no longer in flight here."""
        arriving, self.arriving = self.arriving, None
        if arriving is not None:
            arriving.late.cancel()
            self.mutate.bodies.give(arriving.size)
            self.mutate.in_flight -= 1
        return arriving

    def _fast(self) -> bool:
        """A request `screen` passes (the API server adds `?timeout=10s` to /mutate) with its body's length told, not
        chunked, not waiting for a 100-continue, not pipelined behind a request in flight; anything else, a client's
        mistake included, goes the ASGI way, which answers it."""
        if self.expect_100_continue or (self.cycle is not None and not self.cycle.response_complete):
            return False
        headers = dict(self.headers)
        if b"transfer-encoding" in headers or not headers.get(b"content-length", b"").isdigit():
            return False
        path = self.url.partition(b"?")[0].decode("latin-1")
        return screen(path, self.parser.get_method().decode("latin-1"), headers) is None

    def _body_late(self) -> None:
        """The body did not arrive within the admission's deadline: a 408, and the connection closed."""
        if self._take_arriving() is None:
            return
        self.mutate.metrics.admissions.labels(INVALID).inc()
        self._respond(408, error_body(BODY_LATE), keep_alive=False)

    def _respond(self, status: int, body: bytes, *, keep_alive: bool) -> None:
        """Writes the answer as the ASGI path would (JSON, its length, a close when the connection ends)."""
        headers = [JSON_HEADER, (b"content-length", b"%d" % len(body)), *(() if keep_alive else (CLOSE_HEADER,))]
        head = b"HTTP/1.1 %d %s\r\n" % (status, HTTPStatus(status).phrase.encode())
        self.transport.write(head + b"".join(b"%s: %s\r\n" % header for header in headers) + b"\r\n" + body)
        if not keep_alive:
            self.transport.close()
        self.on_response_complete()


async def probe_lag(observe: Callable[[float], None], interval: float = LAG_PROBE_SECONDS) -> None:
    """Sleep `interval` again and again and observe how late each wake-up came: what every admission on the loop
    waited then, for the GIL, a core or a collection."""
    loop = asyncio.get_running_loop()
    while True:
        due = loop.time() + interval
        await asyncio.sleep(interval)
        observe(max(0.0, loop.time() - due))


class HandshakeBounded(uvicorn.Server):
    """uvicorn's server, listening with a TLS handshake deadline (uvicorn leaves asyncio's 60 s), each connection
    given the app for its fast path, its loop's lag observed while it serves."""

    def __init__(
        self, config: uvicorn.Config, app: MutateApp, held: Connections, header_seconds: float = HEADER_SECONDS
    ) -> None:
        super().__init__(config)
        self.app = app
        self.held = held
        self.header_seconds = header_seconds
        self.observe_lag = app.metrics.loop_lag.observe
        self.lag_probe: asyncio.Task[None] | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """Serve the given sockets as uvicorn would, with `HANDSHAKE_SECONDS` for each handshake."""
        config = self.config
        loop = asyncio.get_running_loop()

        def protocol() -> asyncio.Protocol:
            connection = IdleLimited(config=config, server_state=self.server_state, app_state={}, _loop=loop)
            connection.mutate = self.app
            connection.held = self.held
            connection.header_seconds = self.header_seconds
            return connection

        self.servers = []
        for sock in sockets or ():
            server = await loop.create_server(
                protocol,
                sock=sock,
                ssl=config.ssl,
                backlog=config.backlog,
                ssl_handshake_timeout=HANDSHAKE_SECONDS,
            )
            self.servers.append(server)
        self.lag_probe = loop.create_task(probe_lag(self.observe_lag))
        self.started = True

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's shutdown, the lag probe stopped first."""
        if self.lag_probe is not None:
            self.lag_probe.cancel()
        await super().shutdown(sockets)


class MutateListener:
    """The HTTPS /mutate listener: bound at construction (a port in use fails at start), served from `start` to
    `stop` by an event loop in a thread of its own."""

    def __init__(
        self,
        bind: tuple[str, int],
        app: MutateApp,
        context: ssl.SSLContext,
        *,
        idle_seconds: float = DEFAULTS.idle_timeout,
        header_seconds: float = HEADER_SECONDS,
        max_connections: int = DEFAULTS.max_connections,
        client_names: frozenset[str] = frozenset(),
    ) -> None:
        family = socket.AF_INET6 if ":" in bind[0] else socket.AF_INET
        self.socket = socket.create_server(bind, family=family, backlog=LISTEN_BACKLOG)
        self.port = int(self.socket.getsockname()[1])
        self.app = app
        config = uvicorn.Config(
            app,
            loop="uvloop",
            http=IdleLimited,
            lifespan="off",
            log_config=None,
            access_log=False,
            proxy_headers=False,
            server_header=False,
            date_header=False,
            backlog=LISTEN_BACKLOG,
            timeout_keep_alive=idle_seconds,  # type: ignore[arg-type]
        )
        config.load()
        config.ssl = context
        self.connections = Connections(app.metrics, max_connections, client_names)
        self.server = HandshakeBounded(config, app, self.connections, header_seconds)
        self.thread = threading.Thread(target=self.server.run, args=([self.socket],), name="https", daemon=True)

    def start(self) -> None:
        """Serve from a thread of its own (the event loop) until `stop`."""
        self.thread.start()

    def started(self) -> bool:
        """Whether the event loop serves the socket yet."""
        return bool(self.server.started)

    def stop(self, grace: float) -> None:
        """Stop listening, close idle connections, let requests in flight finish within `grace` seconds."""
        self.server.config.timeout_graceful_shutdown = max(int(grace), 1)
        self.server.should_exit = True
        self.thread.join(grace + 1.0)


class MutateProbe:
    """Whether the HTTPS listener answers: connect, handshake and GET /healthz through it, as the API server would.

    With client certificates required the probe has none to show: a completed TLS 1.3 handshake (a worker sent
    its Finished) is then the answer, whatever the refusal that follows.
    """

    def __init__(
        self, host: str, port: int, *, client_cert_required: bool = False, timeout: float = PROBE_TIMEOUT_SECONDS
    ) -> None:
        self.address = (host, port)
        self.timeout = timeout
        self.client_cert_required = client_cert_required
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_3
        self.context.check_hostname = False
        self.context.verify_mode = ssl.CERT_NONE  # it asks whether the listener works, not who it is

    def __call__(self) -> str | None:
        """None when it answered; else why not, in one line."""
        where = f"/mutate does not answer on port {self.address[1]}"
        try:
            with (
                socket.create_connection(self.address, timeout=self.timeout) as raw,
                self.context.wrap_socket(raw) as tls,
            ):
                if self.client_cert_required:
                    return None
                tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: self-probe\r\nConnection: close\r\n\r\n")
                head = tls.recv(64)
        except OSError as error:
            return f"{where}: {error}"
        status = head.partition(b"\r\n")[0]
        return None if status.startswith(b"HTTP/1.1 200") else f"{where}: it answered {status[:40]!r}"


def drain(https: MutateListener, *, listen: float, finish: float) -> None:
    """Unready at once; keep answering for `listen` s; stop listening; in-flight admissions end by `finish` s."""
    started = time.monotonic()
    https.app.draining = True
    if listen > 0:
        log.info("unready; still answering for %.1fs while clients move to other replicas", listen)
        time.sleep(listen)
    left = max(finish - (time.monotonic() - started), 1.0)
    busy = https.app.in_flight
    https.stop(left)
    https.app.close()
    log.info("listener stopped; %d admission(s) were in flight and are answered", busy)
