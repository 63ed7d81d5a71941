"""The webhook's own small PKI: a CA and a serving certificate, so that no cert-manager is needed.

The API server trusts the CA through the MutatingWebhookConfiguration's caBundle; the server presents the serving
certificate. A bundle that is still good (signed by its CA, covering every requested name, valid for 30 more days)
is reused, so re-running the generator (every `helm upgrade`) does not rotate the CA under running replicas.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_DAYS = 3650
SERVING_DAYS = 825
MIN_REMAINING = timedelta(days=30)


@dataclass(frozen=True)
class CertBundle:
    """PEM bytes of the CA certificate, the serving certificate and the serving key."""

    ca_crt: bytes
    tls_crt: bytes
    tls_key: bytes

    def write(self, out_dir: Path) -> None:
        """Write ca.crt, tls.crt and tls.key; the key readable by its owner only; each file replaced atomically."""
        out_dir.mkdir(parents=True, exist_ok=True)
        for name, data, mode in (
            ("ca.crt", self.ca_crt, 0o644),
            ("tls.crt", self.tls_crt, 0o644),
            ("tls.key", self.tls_key, 0o600),
        ):
            partial = out_dir / f".{name}.tmp"
            fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            partial.replace(out_dir / name)


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attrs)


def pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    """A private key as unencrypted PKCS#8 PEM, the form the servers and Kubernetes components read."""
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def new_ca(
    common_name: str, start: datetime, end: datetime, *, path_length: int | None = 0
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A self-signed CA (ECDSA P-256) that may sign leaves only; shared by the webhook's PKI and the sandbox's."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name(common_name)
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=path_length), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return ca_key, ca_cert


def issue_leaf(
    ca_key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    common_name: str,
    start: datetime,
    end: datetime,
    *,
    organization: str | None = None,
    dns_names: Sequence[str] = (),
    ips: Sequence[str] = (),
    server: bool = True,
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A leaf signed by the CA: a serving certificate (with the names as SANs) or, server=False, a client one."""
    key = ec.generate_private_key(ec.SECP256R1())
    usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name, organization))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
    )
    alt_names: list[x509.GeneralName] = [x509.DNSName(name) for name in dns_names]
    alt_names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    if alt_names:
        builder = builder.add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
    return key, builder.sign(ca_key, hashes.SHA256())


def generate(dns_names: list[str], ips: list[str], *, now: datetime | None = None) -> CertBundle:
    """A fresh CA and a serving certificate for the given DNS names and IP addresses (ECDSA P-256)."""
    if not dns_names and not ips:
        raise ValueError("give at least one --dns name or --ip address for the serving certificate")
    now = now or datetime.now(UTC)
    start = now - timedelta(minutes=5)
    ca_key, ca_cert = new_ca("hami-place-webhook-ca", start, now + timedelta(days=CA_DAYS))
    key, cert = issue_leaf(
        ca_key, ca_cert, (dns_names or ips)[0], start, now + timedelta(days=SERVING_DAYS), dns_names=dns_names, ips=ips
    )
    return CertBundle(
        ca_crt=ca_cert.public_bytes(serialization.Encoding.PEM),
        tls_crt=cert.public_bytes(serialization.Encoding.PEM),
        tls_key=pem_key(key),
    )


def still_good(bundle: CertBundle, dns_names: list[str], ips: list[str], *, now: datetime | None = None) -> bool:
    """Whether an existing bundle can be kept: signed by its CA, key matches, every name covered, 30+ days left."""
    now = now or datetime.now(UTC)
    try:
        ca = x509.load_pem_x509_certificate(bundle.ca_crt)
        cert = x509.load_pem_x509_certificate(bundle.tls_crt)
        key = serialization.load_pem_private_key(bundle.tls_key, password=None)
        cert.verify_directly_issued_by(ca)
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (ValueError, TypeError, InvalidSignature, x509.ExtensionNotFound):
        return False
    if key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ) != cert.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo):
        return False
    covered_dns = set(names.get_values_for_type(x509.DNSName))
    covered_ips = {str(ip) for ip in names.get_values_for_type(x509.IPAddress)}
    if not set(dns_names) <= covered_dns or not {str(ipaddress.ip_address(ip)) for ip in ips} <= covered_ips:
        return False
    return min(cert.not_valid_after_utc, ca.not_valid_after_utc) - now >= MIN_REMAINING
