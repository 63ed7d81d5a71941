"""HTTP/2 on the /mutate listener: one connection carries every admission an API server sends at once.

The API server's client speaks HTTP/2 to a webhook that offers it in ALPN (client-go's transport, as HAMi's Go
server gets). Over HTTP/1.1 a connection holds one request at a time, so while the loop is held up (a core, a
collection) the client opens a connection, and a TLS handshake, per request still waiting: work that makes the
wait longer. Over HTTP/2 they queue as streams of the connection it has. Each stream is answered as an HTTP/1.1
request is (`MutateApp.answer_on_loop` on the loop, a claim in a thread), with the same statuses and bodies.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, cast

from h2.config import H2Configuration
from h2.connection import H2Connection
from h2.events import ConnectionTerminated, DataReceived, RequestReceived, StreamEnded, StreamReset
from h2.exceptions import H2Error
from h2.settings import SettingCodes

from webhook.deadline import Deadline
from webhook.metrics import INVALID
from webhook.mutate import BODY_LATE, MAX_REVIEW_BYTES, ClientMistake, MutateApp, error_body, routed, too_large

ALPN = "h2"
# Headers are bytes as they come, neither checked nor normalised by the library (a third of its time): a stream's
# method, path and content type are checked here, and nothing else of the headers is read.
CONFIG = H2Configuration(
    client_side=False,
    header_encoding=None,
    validate_inbound_headers=False,
    normalize_inbound_headers=False,
    validate_outbound_headers=False,
    normalize_outbound_headers=False,
)
# Streams a client may have open at once: past the limit Go's client opens another connection (and handshake), so it
# is above what a stall of the loop leaves waiting at 1,000 admissions a second.
MAX_STREAMS = 2000
# What every stream may send before its data is acknowledged (the connection's window grows by this at start).
CONNECTION_WINDOW = 16 * 1024 * 1024


@dataclass
class _Stream:
    """A request whose body is arriving: its headers, its parts, when it began, its deadline and the timer of it."""

    headers: dict[bytes, bytes]
    started: float
    deadline: Deadline
    late: asyncio.TimerHandle
    parts: list[bytes] = field(default_factory=list)
    size: int = 0


class H2Admissions(asyncio.Protocol):
    """One HTTP/2 connection of the /mutate listener, in uvicorn's bookkeeping so that its shutdown reaches it."""

    def __init__(self, app: MutateApp, server_state: Any, idle_seconds: float, loop: asyncio.AbstractEventLoop):
        self.app = app
        self.server_state = server_state
        self.idle_seconds = idle_seconds
        self.loop = loop
        self.h2 = H2Connection(config=CONFIG)
        self.streams: dict[int, _Stream] = {}
        self.answering = 0
        self.transport: asyncio.Transport | None = None
        self.idle: asyncio.TimerHandle | None = None
        self.closing = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Settings first, then the idle limit until the first stream."""
        self.transport = cast(asyncio.Transport, transport)  # uvloop's TLS transport, not an asyncio subclass
        self.server_state.connections.add(self)
        self.h2.initiate_connection()
        self.h2.update_settings({SettingCodes.MAX_CONCURRENT_STREAMS: MAX_STREAMS})
        self.h2.increment_flow_control_window(CONNECTION_WINDOW)
        self._flush()
        self._idle_from_now()

    def connection_lost(self, exc: Exception | None) -> None:
        """Streams still arriving are given up with their deadlines."""
        self.server_state.connections.discard(self)
        for stream in self.streams.values():
            stream.late.cancel()
            self.app.in_flight -= 1
        self.streams.clear()
        if self.idle is not None:
            self.idle.cancel()

    def shutdown(self) -> None:
        """uvicorn's stop, or the drain: GOAWAY, so the client opens its next streams elsewhere; the streams begun
        are answered, then the connection closes."""
        if self.closing:
            return
        self.closing = True
        self.h2.close_connection()
        self._flush()
        self._close_when_done()

    def data_received(self, data: bytes) -> None:
        """Frames in, each request's events handled, what they produce written."""
        if self.idle is not None:
            self.idle.cancel()
            self.idle = None
        try:
            events = self.h2.receive_data(data)
        except H2Error:
            self._flush()
            self._close()
            return
        for event in events:
            if isinstance(event, RequestReceived) and event.stream_id is not None:
                self._begin(event.stream_id, dict(event.headers or ()))
            elif isinstance(event, DataReceived) and event.stream_id is not None:
                self._body(event.stream_id, event.data or b"", event.flow_controlled_length or 0)
            elif isinstance(event, StreamEnded) and event.stream_id is not None:
                self._complete(event.stream_id)
            elif isinstance(event, StreamReset) and event.stream_id is not None:
                self._forget(event.stream_id)
            elif isinstance(event, ConnectionTerminated):
                self._close()
        self._flush()
        self._idle_from_now()

    def _begin(self, stream_id: int, headers: dict[bytes, bytes]) -> None:
        deadline = Deadline.for_webhook_timeout(self.app.admission_timeout)
        late = self.loop.call_later(deadline.remaining(), self._late, stream_id)
        self.streams[stream_id] = _Stream(headers, time.perf_counter(), deadline, late)
        self.app.in_flight += 1

    def _body(self, stream_id: int, data: bytes, flow_controlled: int) -> None:
        self.h2.acknowledge_received_data(flow_controlled, stream_id)
        stream = self.streams.get(stream_id)
        if stream is None:
            return
        stream.size += len(data)
        if stream.size > MAX_REVIEW_BYTES:
            self._forget(stream_id)
            self._refuse(stream_id, ClientMistake(413, too_large()), "/mutate")
            return
        stream.parts.append(data)

    def _complete(self, stream_id: int) -> None:
        stream = self.streams.get(stream_id)
        if stream is None:
            return
        self._forget(stream_id)
        headers = stream.headers
        method = headers.get(b":method", b"").decode("latin-1")
        path = headers.get(b":path", b"").partition(b"?")[0].decode("latin-1")
        try:
            answer = routed(method, path, headers)
        except ClientMistake as mistake:
            self._refuse(stream_id, mistake, path)
            return
        if answer is None:
            data = b"".join(stream.parts)
            answer = self.app.answer_on_loop(data, stream.started)
            if answer is None:
                self.answering += 1
                task = self.loop.create_task(self.app.answer(data, stream.started, stream.deadline))
                task.add_done_callback(lambda done: self._answered(stream_id, done))
                return
        self._respond(stream_id, *answer)

    def _answered(self, stream_id: int, done: asyncio.Task[tuple[int, bytes]]) -> None:
        """A review answered in a thread (a claim): its answer goes out on its stream if the stream is still open."""
        self.answering -= 1
        if self.transport is None or self.transport.is_closing():
            return
        try:
            status, body = done.result()
        except ClientMistake as mistake:
            self._refuse(stream_id, mistake, "/mutate")
        else:
            self._respond(stream_id, status, body)
        self._flush()
        self._close_when_done()
        self._idle_from_now()

    def _late(self, stream_id: int) -> None:
        """The body did not arrive within the admission's deadline: a 408 on its stream."""
        if stream_id not in self.streams:
            return
        self._forget(stream_id)
        self.app.metrics.admissions.labels(INVALID).inc()
        self._respond(stream_id, 408, error_body(BODY_LATE))
        self._flush()
        self._idle_from_now()

    def _refuse(self, stream_id: int, mistake: ClientMistake, path: str) -> None:
        """A client's mistake, counted as an invalid admission when it was sent to /mutate (as over HTTP/1.1)."""
        if path == "/mutate":
            self.app.metrics.admissions.labels(INVALID).inc()
        self._respond(stream_id, mistake.status, error_body(str(mistake)))

    def _forget(self, stream_id: int) -> None:
        stream = self.streams.pop(stream_id, None)
        if stream is not None:
            stream.late.cancel()
            self.app.in_flight -= 1

    def _respond(self, stream_id: int, status: int, body: bytes) -> None:
        """The answer's headers and body on its stream; a stream the client reset meanwhile is let go."""
        headers = [
            (b":status", str(status).encode()),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ]
        try:
            self.h2.send_headers(stream_id, headers)
            self.h2.send_data(stream_id, body, end_stream=True)
        except H2Error:
            return
        if self.app.draining:
            self.shutdown()

    def _flush(self) -> None:
        data = self.h2.data_to_send()
        if data and self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def _close_when_done(self) -> None:
        if self.closing and not self.streams and not self.answering:
            self._close()

    def _close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def _idle_from_now(self) -> None:
        """With no stream open, the connection is closed after the idle limit, as an HTTP/1.1 one."""
        if self.streams or self.answering or self.closing:
            return
        if self.idle is not None:
            self.idle.cancel()
        self.idle = self.loop.call_later(self.idle_seconds, self.shutdown)
