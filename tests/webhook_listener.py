"""The /mutate listener for tests: served on a loopback port from a thread, and its app called directly (ASGI)."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from webhook.listener import HEADER_SECONDS, MutateListener, drain
from webhook.mutate import MutateApp
from webhook.settings import DEFAULTS
from webhook.tls import ReloadingCertificate

STARTUP_SECONDS = 10.0


@contextmanager
def serving(
    app: MutateApp,
    certs: Path,
    *,
    client_ca: str = "",
    idle_seconds: float = DEFAULTS.idle_timeout,
    header_seconds: float = HEADER_SECONDS,
    max_connections: int = DEFAULTS.max_connections,
    client_names: frozenset[str] = frozenset(),
) -> Iterator[MutateListener]:
    """The listener on a free loopback port with the certificate in `certs` (tls.crt, tls.key); drained on exit."""
    certificate = ReloadingCertificate(str(certs / "tls.crt"), str(certs / "tls.key"), client_ca)
    listener = MutateListener(
        ("127.0.0.1", 0),
        app,
        certificate.serving_context(),
        idle_seconds=idle_seconds,
        header_seconds=header_seconds,
        max_connections=max_connections,
        client_names=client_names,
    )
    listener.start()
    deadline = time.monotonic() + STARTUP_SECONDS
    while not listener.started():
        assert time.monotonic() < deadline, "the listener did not start"
        time.sleep(0.01)
    try:
        yield listener
    finally:
        if listener.thread.is_alive():
            drain(listener, listen=0.0, finish=5.0)


def call(
    app: MutateApp,
    method: str,
    path: str,
    body: bytes = b"",
    *,
    content_type: str | None = "application/json",
    chunks: int = 1,
) -> tuple[int, dict[str, str], bytes]:
    """One request through the ASGI app, its body in `chunks` messages: (status, headers, body)."""
    headers = [(b"content-type", content_type.encode())] if content_type is not None else []
    if chunks == 1:
        headers.append((b"content-length", str(len(body)).encode()))
    size = max(1, -(-len(body) // chunks))
    parts = [body[i : i + size] for i in range(0, len(body), size)] or [b""]
    messages = [
        {"type": "http.request", "body": part, "more_body": index < len(parts) - 1} for index, part in enumerate(parts)
    ]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": method, "path": path, "headers": headers}
    asyncio.run(app(scope, receive, send))
    start, answer = sent
    return (
        int(start["status"]),
        {name.decode(): value.decode() for name, value in start["headers"]},
        bytes(answer["body"]),
    )


def refused(port: int, timeout: float) -> bool:
    """Whether nothing listens on the loopback port; a connect the closing listener had queued is reset, so poll
    again."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=timeout).close()
    except ConnectionRefusedError:
        return True
    except ConnectionResetError:
        return False
    return False
