"""TLS for the /mutate listener: TLS 1.2+, a certificate rotated on disk without a restart, no handshake on accept.

cheroot wraps every accepted connection with its adapter's `context`; ours is a property that looks at the cert
and key files' modification times (at most once a second) and, when they changed, builds a fresh context. New
connections get the new certificate; connections already open keep the one they started with.

cheroot's own adapter runs the handshake inside `wrap()`, on its single accept loop, so one client that connects
and sends nothing stalls every other connection for the socket timeout. Ours only wraps; the handshake runs in a
worker thread with its own deadline (server.HandshakeInWorker).
"""

from __future__ import annotations

import logging
import os
import socket
import ssl
import threading
import time

from cheroot.ssl.builtin import BuiltinSSLAdapter

log = logging.getLogger(__name__)

CHECK_INTERVAL_SECONDS = 1.0


def server_context(cert_file: str, key_file: str, client_ca_file: str = "") -> ssl.SSLContext:
    """TLS 1.2 and 1.3 only, Python's default (strong) ciphers; with a client CA, a client certificate it signed."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_file, key_file)
    if client_ca_file:
        context.load_verify_locations(cafile=client_ca_file)
        context.verify_mode = ssl.CERT_REQUIRED
    return context


class ReloadingCertificate:
    """The current SSLContext for a cert/key pair (and client CA) on disk, rebuilt when any of the files changes."""

    def __init__(self, cert_file: str, key_file: str, client_ca_file: str = "") -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.client_ca_file = client_ca_file
        self._lock = threading.Lock()
        self._stamp = self._file_stamp()
        self._current = self._build()
        self._checked = time.monotonic()
        self.reloads = 0

    def _build(self) -> ssl.SSLContext:
        return server_context(self.cert_file, self.key_file, self.client_ca_file)

    def _file_stamp(self) -> tuple[int, ...]:
        files = [self.cert_file, self.key_file, *([self.client_ca_file] if self.client_ca_file else [])]
        return tuple(value for stat in map(os.stat, files) for value in (stat.st_mtime_ns, stat.st_size))

    def context(self) -> ssl.SSLContext:
        """The context a new connection should use, rebuilt first when the files changed since the last look."""
        if time.monotonic() - self._checked < CHECK_INTERVAL_SECONDS:
            return self._current
        with self._lock:
            self._checked = time.monotonic()
            try:
                stamp = self._file_stamp()
                if stamp != self._stamp:
                    self._current, self._stamp = self._build(), stamp
                    self.reloads += 1
                    log.info("TLS certificate reloaded from %s", self.cert_file)
            except (OSError, ssl.SSLError) as error:
                # A rotation writes the two files one after the other: a mismatched pair is retried next time.
                log.warning("TLS certificate not reloaded yet (%s); serving the previous one", error)
            return self._current


class ReloadingSSLAdapter(BuiltinSSLAdapter):
    """cheroot's builtin adapter, wrapping each connection with the newest context and deferring the handshake."""

    def __init__(self, certificate: ReloadingCertificate) -> None:
        self._certificate: ReloadingCertificate | None = None
        super().__init__(certificate.cert_file, certificate.key_file)
        self._certificate = certificate

    @property
    def context(self) -> ssl.SSLContext:
        """The context cheroot wraps the next connection with."""
        if self._certificate is None:
            return self._context
        return self._certificate.context()

    @context.setter
    def context(self, context: ssl.SSLContext) -> None:
        self._context = context

    def wrap(self, sock: socket.socket) -> tuple[ssl.SSLSocket, dict[str, str]]:
        """Wrap without handshaking: this runs on the accept loop, the handshake must not (see the module doc)."""
        wrapped = self.context.wrap_socket(sock, do_handshake_on_connect=False, server_side=True)
        return wrapped, {"wsgi.url_scheme": "https", "HTTPS": "on"}
