"""The HTTPS listener: TLS 1.2 at least, and a certificate rotated on disk is served without a restart."""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography import x509

from tests.unit.test_webhook_api import admitter, filled_cache
from tests.webhook_listener import serving
from webhook.certs import CertBundle, generate
from webhook.metrics import Metrics
from webhook.mutate import MutateApp
from webhook.tls import CHECK_INTERVAL_SECONDS, ReloadingCertificate


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[int, Path, CertBundle]]:
    """The /mutate listener on a free loopback port, its certificate in tmp_path; yields (port, cert dir, bundle)."""
    bundle = generate(["hami-place-webhook.test"], ["127.0.0.1"])
    bundle.write(tmp_path)
    metrics = Metrics()
    with serving(MutateApp(admitter(filled_cache([], []), metrics), metrics), tmp_path) as listener:
        yield listener.port, tmp_path, bundle


def served_certificate(port: int, ca: bytes, *, max_version: ssl.TLSVersion | None = None) -> x509.Certificate:
    """Handshake trusting only `ca`, send a request, return the certificate the server presented."""
    context = ssl.create_default_context(cadata=ca.decode())
    if max_version is not None:
        context.maximum_version = max_version
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert b'{"status":"ok"}' in tls.recv(4096) + tls.recv(4096)
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


def test_serves_the_certificate_from_the_files(served: tuple[int, Path, CertBundle]) -> None:
    port, _, bundle = served
    presented = served_certificate(port, bundle.ca_crt)
    assert presented == x509.load_pem_x509_certificate(bundle.tls_crt)


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1_1 is deprecated:DeprecationWarning")
def test_tls_1_2_is_accepted_and_older_versions_are_refused(served: tuple[int, Path, CertBundle]) -> None:
    port, _, bundle = served
    assert served_certificate(port, bundle.ca_crt, max_version=ssl.TLSVersion.TLSv1_2)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
    context.maximum_version = ssl.TLSVersion.TLSv1_1
    context.set_ciphers("ALL:@SECLEVEL=0")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, pytest.raises(ssl.SSLError):
        context.wrap_socket(raw, server_hostname="127.0.0.1")


def test_a_rotated_certificate_is_served_without_a_restart(served: tuple[int, Path, CertBundle]) -> None:
    port, directory, first = served
    assert served_certificate(port, first.ca_crt) == x509.load_pem_x509_certificate(first.tls_crt)
    second = generate(["hami-place-webhook.test"], ["127.0.0.1"])
    second.write(directory)
    expected = x509.load_pem_x509_certificate(second.tls_crt)
    deadline = time.monotonic() + 20
    while True:
        try:
            if served_certificate(port, second.ca_crt) == expected:
                break
        except ssl.SSLError:
            pass
        assert time.monotonic() < deadline, "the rotated certificate was never served"
        time.sleep(0.3)
    with pytest.raises(ssl.SSLError):
        served_certificate(port, first.ca_crt)


def test_a_half_written_rotation_keeps_the_previous_certificate(tmp_path: Path) -> None:
    first = generate(["a.test"], [])
    first.write(tmp_path)
    certificate = ReloadingCertificate(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"))
    before = certificate.context()
    (tmp_path / "tls.crt").write_bytes(generate(["a.test"], []).tls_crt)
    certificate._checked = 0.0  # the test skips the once-a-second throttle instead of sleeping through it
    assert certificate.context() is before
    assert certificate.reloads == 0


def test_the_files_are_looked_at_once_a_second_and_read_again_only_when_they_changed(tmp_path: Path) -> None:
    """Each new connection asks for the context: a stat of the files at most once a second, a rebuild only when they
    changed. The test moves the last look a second back instead of sleeping through the throttle."""
    generate(["a.test"], []).write(tmp_path)
    certificate = ReloadingCertificate(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"))
    first = certificate.context()
    certificate._checked -= CHECK_INTERVAL_SECONDS
    assert certificate.context() is first and certificate.reloads == 0, "unchanged files were read again"
    rotated = generate(["a.test"], [])
    rotated.write(tmp_path)
    assert certificate.context() is first, "the files were looked at within a second of the last look"
    certificate._checked -= CHECK_INTERVAL_SECONDS
    second = certificate.context()
    assert second is not first and certificate.reloads == 1
    not_after = x509.load_pem_x509_certificate(rotated.tls_crt).not_valid_after_utc.timestamp()
    assert certificate.expires_at() == not_after, "the expiry is the served certificate's"
    certificate._checked -= CHECK_INTERVAL_SECONDS
    assert certificate.context() is second and certificate.reloads == 1, "files unchanged since were read again"
    generate(["a.test"], []).write(tmp_path)
    certificate._checked -= CHECK_INTERVAL_SECONDS
    assert certificate.context() is not second and certificate.reloads == 2


def test_a_client_ca_replaced_alone_is_read_again(tmp_path: Path) -> None:
    generate(["a.test"], []).write(tmp_path)
    client_ca = tmp_path / "client-ca.crt"
    client_ca.write_bytes(generate(["client"], []).ca_crt)
    certificate = ReloadingCertificate(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"), str(client_ca))
    first = certificate.context()
    client_ca.write_bytes(generate(["client"], []).ca_crt)
    certificate._checked -= CHECK_INTERVAL_SECONDS
    assert certificate.context() is not first and certificate.reloads == 1
