"""TLS for the /mutate listener: TLS 1.2+, a certificate rotated on disk served without a restart.

The listener's context swaps each new connection to the newest context in its ClientHello callback; that context
is rebuilt when the cert, key or client CA files change (looked at at most once a second). Connections already
open keep the certificate they started with. Handshakes run on the listener's event loop, so a client that
connects and sends nothing holds only its own socket.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
import time
from pathlib import Path
from typing import Any

from cryptography import x509

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


def certificate_names(peercert: dict[str, Any] | None) -> frozenset[str]:
    """The subject common names and DNS subjectAltNames of a verified peer certificate (`getpeercert()`)."""
    if not peercert:
        return frozenset()
    common = (value for rdn in peercert.get("subject", ()) for key, value in rdn if key == "commonName")
    dns = (value for kind, value in peercert.get("subjectAltName", ()) if kind == "DNS")
    return frozenset((*common, *dns))


def named_client(peercert: dict[str, Any] | None, allowed: frozenset[str]) -> bool:
    """Whether a client certificate (already verified against the client CA) carries one of the allowed names: a CA
    such as the cluster's signs every kubelet and user too, so its signature alone says little about who calls."""
    return not certificate_names(peercert).isdisjoint(allowed)


class ReloadingCertificate:
    """The current SSLContext for a cert/key pair (and client CA) on disk, rebuilt when any of the files changes."""

    def __init__(self, cert_file: str, key_file: str, client_ca_file: str = "") -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self.client_ca_file = client_ca_file
        self._lock = threading.Lock()
        self._stamp = self._file_stamp()
        self.not_after = 0.0
        self._current = self._build()
        self._checked = time.monotonic()
        self.reloads = 0

    def _build(self) -> ssl.SSLContext:
        context = server_context(self.cert_file, self.key_file, self.client_ca_file)
        try:
            served = x509.load_pem_x509_certificate(Path(self.cert_file).read_bytes())
        except ValueError as error:
            raise ssl.SSLError(f"{self.cert_file}: {error}") from error
        self.not_after = served.not_valid_after_utc.timestamp()
        return context

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

    def expires_at(self) -> float:
        """When the certificate served to new connections expires (Unix time), after a reload due."""
        self.context()
        return self.not_after

    def seconds_left(self) -> float:
        """Seconds until the certificate served to new connections expires (negative once it has)."""
        return self.expires_at() - time.time()

    def serving_context(self) -> ssl.SSLContext:
        """The listener's context: at each ClientHello (SNI or not) it hands the connection the newest context, so a
        rotated certificate serves new connections while open ones keep theirs."""
        listening = self._build()

        def newest(connection: ssl.SSLObject, _server_name: str | None, _context: ssl.SSLContext) -> None:
            connection.context = self.context()

        listening.sni_callback = newest
        return listening
