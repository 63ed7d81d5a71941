"""The /mutate listener's ASGI app: POST /mutate and GET /healthz, answered on the event loop where the cache decides.

A review the cache alone answers (no placement to claim, none of our annotations; nearly every pod) is decided on
the loop: no thread hand-off, no GIL ping-pong. One that needs the API server (a claim to write, a claim to look up)
goes to a worker thread under the admission's deadline. A client's mistake is a 4xx with `{"error": reason}`.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson

from kubectl_hami_place.core.reviews import Review, ReviewError, parse_review
from kubectl_hami_place.kube.deadline import Deadline, admitting
from webhook.admit import Admitter
from webhook.metrics import INVALID, Metrics
from webhook.settings import DEFAULTS

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

# The API server sends at most ~3 MiB of object; anything larger is not an AdmissionReview it sent.
MAX_REVIEW_BYTES = 4 * 1024 * 1024
# Bytes of request bodies the listener holds at once while they arrive, over all connections: 16 reviews of the
# largest size. A body that would pass it closes its connection (fast path) or gets 503 (the ASGI path); the API
# server sends a review's body in one write, so only a client holding bodies open competes for it.
BODY_BUDGET_BYTES = 16 * MAX_REVIEW_BYTES
# Threads writing claims at once; each call is bounded by its admission's deadline.
CLAIM_THREADS = 16
HEALTHY = orjson.dumps({"status": "ok"})
JSON_HEADER = (b"content-type", b"application/json")
CLOSE_HEADER = (b"connection", b"close")
NOT_JSON = "the body is not valid JSON; send an admission.k8s.io/v1 AdmissionReview"
BODY_LATE = "the body did not arrive within the admission timeout"
BODIES_OVER_BUDGET = "the webhook holds too many request bodies arriving at once; retry"


class BodyBudget:
    """Bytes of request bodies held while they arrive, over every connection of the listener's event loop (one
    thread: no lock)."""

    def __init__(self, limit: int = BODY_BUDGET_BYTES) -> None:
        self.limit = limit
        self.held = 0

    def take(self, size: int) -> bool:
        """Hold `size` more bytes; False (nothing held) when that would pass the limit."""
        if self.held + size > self.limit:
            return False
        self.held += size
        return True

    def give(self, size: int) -> None:
        """Bytes no longer held."""
        self.held -= size


def error_body(reason: str) -> bytes:
    """The one-line JSON error every 4xx carries."""
    return json.dumps({"error": reason}).encode()


class ClientMistake(Exception):
    """A request the webhook refuses with a 4xx and a reason."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


def is_json(content_type: str) -> bool:
    """application/json or application/*+json, parameters ignored."""
    mimetype = content_type.split(";", 1)[0].strip().lower()
    return mimetype == "application/json" or (mimetype.startswith("application/") and mimetype.endswith("+json"))


def screen(path: str, method: str, headers: Mapping[bytes, bytes]) -> ClientMistake | None:
    """The webhook's HTTP rules for a request that is not the self-probe's GET /healthz, in one place for the
    connection's fast path and the ASGI app: None for a POST /mutate whose body may be read (JSON, no longer than
    MAX_REVIEW_BYTES when its length is told), else the client's mistake."""
    if path != "/mutate":
        return ClientMistake(404, f"no such path {path!r}; the webhook serves POST /mutate and GET /healthz")
    if method != "POST":
        return ClientMistake(405, f"{method} is not allowed on /mutate; POST an AdmissionReview")
    if not is_json(headers.get(b"content-type", b"").decode("latin-1")):
        return ClientMistake(415, "send the AdmissionReview as application/json")
    length = headers.get(b"content-length", b"").lstrip(b"0")  # the HTTP parser lets any run of zeros through
    if length.isdigit() and (len(length) > len(str(MAX_REVIEW_BYTES)) or int(length) > MAX_REVIEW_BYTES):
        return ClientMistake(413, too_large())
    return None


class MutateApp:
    """POST /mutate within the webhook's timeoutSeconds; GET /healthz for the self-probe behind /readyz."""

    def __init__(
        self,
        admitter: Admitter,
        metrics: Metrics,
        *,
        admission_timeout: float = DEFAULTS.admission_timeout,
    ) -> None:
        self.admitter = admitter
        self.metrics = metrics
        self.admission_timeout = admission_timeout
        self.claims = ThreadPoolExecutor(max_workers=CLAIM_THREADS, thread_name_prefix="claim")
        self.bodies = BodyBudget()
        # Set by the drain: every answer then closes its connection, so the client reconnects through the Service.
        self.draining = False
        self.in_flight = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        self.in_flight += 1
        try:
            try:
                status, body = await self._route(scope, receive)
            except ClientMistake as mistake:
                if scope["path"] == "/mutate":
                    self.metrics.admissions.labels(INVALID).inc()
                status, body = mistake.status, error_body(str(mistake))
            headers = [JSON_HEADER, (b"content-length", str(len(body)).encode())]
            if self.draining:
                headers.append(CLOSE_HEADER)
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": body})
        finally:
            self.in_flight -= 1

    async def _route(self, scope: Scope, receive: Receive) -> tuple[int, bytes]:
        path, method = scope["path"], scope["method"]
        if path == "/healthz":
            if method not in ("GET", "HEAD"):
                raise ClientMistake(405, f"{method} is not allowed on /healthz; use GET")
            return 200, HEALTHY
        started = time.perf_counter()
        deadline = Deadline.for_webhook_timeout(self.admission_timeout)
        mistake = screen(path, method, dict(scope["headers"]))
        if mistake is not None:
            raise mistake
        try:
            async with asyncio.timeout(deadline.remaining()):  # a timer on this task, not a task of its own
                data = await read_body(receive, self.bodies)
        except TimeoutError:
            raise ClientMistake(408, BODY_LATE) from None
        return await self._answer(data, started, deadline)

    async def _answer(self, data: bytes, started: float, deadline: Deadline) -> tuple[int, bytes]:
        review = parsed_review(data)
        answer = self.admitter.admit_review(review, started, cache_only=True)
        if answer is None:
            loop = asyncio.get_running_loop()
            answer = await loop.run_in_executor(self.claims, self._admit_in_thread, review, started, deadline)
        return 200, orjson.dumps(answer)

    def answer_on_loop(self, data: bytes, started: float) -> tuple[int, bytes] | None:
        """(status, body) for a whole /mutate body when the cache decides it, a client's mistake included; None
        when the review needs the API server (the ASGI path then takes it to a thread)."""
        try:
            review = parsed_review(data)
        except ClientMistake as mistake:
            self.metrics.admissions.labels(INVALID).inc()
            return mistake.status, error_body(str(mistake))
        answer = self.admitter.admit_review(review, started, cache_only=True)
        return None if answer is None else (200, orjson.dumps(answer))

    def _admit_in_thread(self, review: Review, started: float, deadline: Deadline) -> dict[str, Any]:
        """The full admission, API calls included, each cut to what is left of the deadline."""
        with admitting(deadline):
            answer = self.admitter.admit_review(review, started)
        assert answer is not None  # without cache_only every review is answered
        return answer

    def close(self) -> None:
        """Let the claims being written finish; accept no more."""
        self.claims.shutdown(wait=True)


def parsed_review(data: bytes) -> Review:
    """The review in a /mutate body; ClientMistake (400) when it is not JSON or not an AdmissionReview."""
    try:
        body = orjson.loads(data)
    except (ValueError, RecursionError):
        raise ClientMistake(400, NOT_JSON) from None
    try:
        return parse_review(body)
    except ReviewError as error:
        raise ClientMistake(400, str(error)) from None


def too_large() -> str:
    return f"the body is larger than {MAX_REVIEW_BYTES} bytes; an AdmissionReview never is"


async def read_body(receive: Receive, bodies: BodyBudget) -> bytes:
    """The request body, refused once it grows past MAX_REVIEW_BYTES (a chunked body says no length up front) or
    would pass what the listener may hold of bodies arriving (503)."""
    parts: list[bytes] = []
    size = 0
    try:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise ClientMistake(400, "the client went away before the body was complete")
            chunk = message.get("body", b"")
            if size + len(chunk) > MAX_REVIEW_BYTES:
                raise ClientMistake(413, too_large())
            if not bodies.take(len(chunk)):
                raise ClientMistake(503, BODIES_OVER_BUDGET)
            size += len(chunk)
            parts.append(chunk)
            if not message.get("more_body", False):
                return b"".join(parts)
    finally:
        bodies.give(size)
