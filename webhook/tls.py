"""TLS for the /mutate listener: TLS 1.2+, and a certificate that can be rotated on disk without a restart.

cheroot wraps every accepted connection with its adapter's `context`; ours is a property that looks at the cert
and key files' modification times (at most once a second) and, when they changed, builds a fresh context. New
connections get the new certificate; connections already open keep the one they started with.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
import time

from cheroot.ssl.builtin import BuiltinSSLAdapter

log = logging.getLogger(__name__)

CHECK_INTERVAL_SECONDS = 1.0


def server_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    """A server context offering TLS 1.2 and 1.3 only, with Python's default (strong) cipher list."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_file, key_file)
    return context


class ReloadingCertificate:
    """The current SSLContext for a cert/key pair on disk, rebuilt when either file changes."""

    def __init__(self, cert_file: str, key_file: str) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self._lock = threading.Lock()
        self._stamp = self._file_stamp()
        self._current = server_context(cert_file, key_file)
        self._checked = time.monotonic()
        self.reloads = 0

    def _file_stamp(self) -> tuple[int, int, int, int]:
        cert, key = os.stat(self.cert_file), os.stat(self.key_file)
        return (cert.st_mtime_ns, key.st_mtime_ns, cert.st_size, key.st_size)

    def context(self) -> ssl.SSLContext:
        """The context a new connection should use, rebuilt first when the files changed since the last look."""
        if time.monotonic() - self._checked < CHECK_INTERVAL_SECONDS:
            return self._current
        with self._lock:
            self._checked = time.monotonic()
            try:
                stamp = self._file_stamp()
                if stamp != self._stamp:
                    self._current, self._stamp = server_context(self.cert_file, self.key_file), stamp
                    self.reloads += 1
                    log.info("TLS certificate reloaded from %s", self.cert_file)
            except (OSError, ssl.SSLError) as error:
                # A rotation writes the two files one after the other: a mismatched pair is retried next time.
                log.warning("TLS certificate not reloaded yet (%s); serving the previous one", error)
            return self._current


class ReloadingSSLAdapter(BuiltinSSLAdapter):
    """cheroot's builtin adapter, wrapping each connection with the newest context of a ReloadingCertificate."""

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
