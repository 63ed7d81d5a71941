"""The webhook's own small PKI: a CA and a serving certificate, so that no cert-manager is needed.

The API server trusts the CA through the MutatingWebhookConfiguration's caBundle; the server presents the serving
certificate. A bundle that is still good (signed by its CA, covering every requested name, valid for 30 more days)
is reused, so re-running the generator (every `helm upgrade`) does not rotate the CA under running replicas.
"""

from __future__ import annotations

import ipaddress
import os
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


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def generate(dns_names: list[str], ips: list[str], *, now: datetime | None = None) -> CertBundle:
    """A fresh CA and a serving certificate for the given DNS names and IP addresses (ECDSA P-256)."""
    if not dns_names and not ips:
        raise ValueError("give at least one --dns name or --ip address for the serving certificate")
    now = now or datetime.now(UTC)
    start = now - timedelta(minutes=5)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("hami-place-webhook-ca")
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(now + timedelta(days=CA_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
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
    key = ec.generate_private_key(ec.SECP256R1())
    alt_names: list[x509.GeneralName] = [x509.DNSName(name) for name in dns_names]
    alt_names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name((dns_names or ips)[0]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(now + timedelta(days=SERVING_DAYS))
        .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return CertBundle(
        ca_crt=ca_cert.public_bytes(serialization.Encoding.PEM),
        tls_crt=cert.public_bytes(serialization.Encoding.PEM),
        tls_key=key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
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
