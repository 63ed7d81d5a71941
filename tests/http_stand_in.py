"""A local HTTP server answering each GET from a function of its path: a stand-in for a service that cannot be made
to answer that way on demand (an API server answering with another kind, another service at a URL, the webhook's
API on an address the API server proxies to)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@contextmanager
def answering_gets(answer: Callable[[str], tuple[int, bytes]], address: str = "127.0.0.1") -> Iterator[str]:
    """Serves on a free port of `address` until the block ends, each GET answered `answer(path)` (status, JSON body);
    yields the server's URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status, body = answer(self.path)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            """Quiet: a test reads what its client made of the answers, not the server's log."""

    server = ThreadingHTTPServer((address, 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{address}:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
