"""The webhook's own small PKI: a CA and a serving certificate, so that no cert-manager is needed.

The API server trusts the CA through the MutatingWebhookConfiguration's caBundle; the server presents the serving
certificate. A bundle that is still good (signed by its CA, covering every requested name, valid for 30 more days)
is reused, so re-running the generator (every `helm upgrade`) does not rotate the CA under running replicas. A
rotation (kubectl_hami_place.core.rotation) goes through the Secret's data: `stage` puts a new CA beside the old one
and its serving pair under NEXT_CRT/NEXT_KEY, `switch` serves that pair, `drop` keeps only the serving pair's CA.
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
# The Secret's keys: the served pair, the CA bundle the API server should trust, and a staged pair.
TLS_CRT, TLS_KEY, CA_CRT = "tls.crt", "tls.key", "ca.crt"
NEXT_CRT, NEXT_KEY = "next.crt", "next.key"
# A new certificate is valid from this long ago, for clocks a little behind ours.
BACKDATE = timedelta(minutes=5)


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


def generate(
    dns_names: Sequence[str], ips: Sequence[str], *, now: datetime | None = None, validity: timedelta | None = None
) -> CertBundle:
    """A fresh CA and a serving certificate for the given DNS names and IP addresses (ECDSA P-256); with a
    validity, both end then (a CA per rotation), else the CA after CA_DAYS and the certificate after SERVING_DAYS."""
    if not dns_names and not ips:
        raise ValueError("give at least one --dns name or --ip address for the serving certificate")
    now = now or datetime.now(UTC)
    start = now - BACKDATE
    ca_end = now + (validity or timedelta(days=CA_DAYS))
    ca_key, ca_cert = new_ca("hami-place-webhook-ca", start, ca_end)
    end = now + (validity or timedelta(days=SERVING_DAYS))
    key, cert = issue_leaf(ca_key, ca_cert, (list(dns_names) or list(ips))[0], start, end, dns_names=dns_names, ips=ips)
    return CertBundle(
        ca_crt=ca_cert.public_bytes(serialization.Encoding.PEM),
        tls_crt=cert.public_bytes(serialization.Encoding.PEM),
        tls_key=pem_key(key),
    )


def still_good(bundle: CertBundle, dns_names: list[str], ips: list[str], *, now: datetime | None = None) -> bool:
    """Whether an existing bundle can be kept: signed by its CA, key matches, every name covered, 30+ days left."""
    now = now or datetime.now(UTC)
    ca = usable_issuer(bundle.ca_crt, bundle.tls_crt, bundle.tls_key, now=now)
    if ca is None:
        return False
    cert = x509.load_pem_x509_certificate(bundle.tls_crt)
    covered_dns, covered_ips = names_of(cert)
    if not set(dns_names) <= set(covered_dns) or not {str(ipaddress.ip_address(ip)) for ip in ips} <= set(covered_ips):
        return False
    return min(cert.not_valid_after_utc, ca.not_valid_after_utc) - now >= MIN_REMAINING


def _public(key: object) -> bytes:
    return key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)  # type: ignore[attr-defined]


def issuer_in(ca_pem: bytes, cert: x509.Certificate) -> x509.Certificate | None:
    """The CA of the bundle that signed the certificate, if any."""
    try:
        cas = x509.load_pem_x509_certificates(ca_pem)
    except ValueError:
        return None
    for ca in cas:
        try:
            cert.verify_directly_issued_by(ca)
        except (ValueError, TypeError, InvalidSignature):
            continue
        return ca
    return None


def usable_issuer(ca_pem: bytes, crt_pem: bytes, key_pem: bytes, *, now: datetime) -> x509.Certificate | None:
    """The bundle's CA of a pair that can be served now (key matches, signed by a CA of the bundle, both within
    their validity, a SAN present); None when the pair cannot be served."""
    try:
        cert = x509.load_pem_x509_certificate(crt_pem)
        key = serialization.load_pem_private_key(key_pem, password=None)
        cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    except (ValueError, TypeError, x509.ExtensionNotFound):
        return None
    if _public(key.public_key()) != _public(cert.public_key()):
        return None
    ca = issuer_in(ca_pem, cert)
    if ca is None or not cert.not_valid_before_utc <= now < min(cert.not_valid_after_utc, ca.not_valid_after_utc):
        return None
    return ca


def names_of(cert: x509.Certificate) -> tuple[list[str], list[str]]:
    """The certificate's DNS names and IP addresses (as text)."""
    try:
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return [], []
    return list(names.get_values_for_type(x509.DNSName)), [str(ip) for ip in names.get_values_for_type(x509.IPAddress)]


def pem(cert: x509.Certificate) -> bytes:
    """A certificate as PEM."""
    return cert.public_bytes(serialization.Encoding.PEM)


def stage(
    data: dict[str, bytes], *, now: datetime, dns_names: Sequence[str] = (), ips: Sequence[str] = ()
) -> dict[str, bytes]:
    """The Secret's data with a new CA beside the served pair's own and a pair it signed under NEXT_CRT/NEXT_KEY:
    for the served pair's names and lifetime unless names are given."""
    current = x509.load_pem_x509_certificate(data[TLS_CRT])
    if not dns_names and not ips:
        dns_names, ips = names_of(current)
    validity = current.not_valid_after_utc - current.not_valid_before_utc - BACKDATE
    fresh = generate(dns_names, ips, now=now, validity=validity)
    old = issuer_in(data[CA_CRT], current)
    return {
        **data,
        CA_CRT: (pem(old) if old is not None else b"") + fresh.ca_crt,
        NEXT_CRT: fresh.tls_crt,
        NEXT_KEY: fresh.tls_key,
    }


def switch(data: dict[str, bytes]) -> dict[str, bytes]:
    """The Secret's data serving the staged pair."""
    kept = {key: value for key, value in data.items() if key not in (NEXT_CRT, NEXT_KEY)}
    return {**kept, TLS_CRT: data[NEXT_CRT], TLS_KEY: data[NEXT_KEY]}


def drop(data: dict[str, bytes]) -> dict[str, bytes]:
    """The Secret's data whose bundle keeps only the CA of the served pair (all of it if none of it signed it)."""
    issuer = issuer_in(data[CA_CRT], x509.load_pem_x509_certificate(data[TLS_CRT]))
    return {**data, CA_CRT: pem(issuer)} if issuer is not None else dict(data)


def ca_count(ca_pem: bytes) -> int:
    """How many certificates a PEM bundle holds (0 when it is unreadable)."""
    try:
        return len(x509.load_pem_x509_certificates(ca_pem))
    except ValueError:
        return 0
