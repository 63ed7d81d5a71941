"""The sandbox's certificates: one CA, the API server's serving cert, and a client cert per component.

Built with the webhook's own CA and leaf builders (webhook/certs.py), so there is one way to make a certificate.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from webhook.certs import issue_leaf, new_ca, pem_key

_VALIDITY = datetime.timedelta(days=2)


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its key as files, as the Kubernetes components want them."""

    cert: Path
    key: Path


def _write_key(path: Path, pem: bytes) -> None:
    path.write_bytes(pem)
    path.chmod(0o600)


class Authority:
    """A throwaway CA that signs everything one sandbox needs; valid for two days."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        now = datetime.datetime.now(datetime.UTC)
        self.key, self.cert = new_ca(
            "hami-place-sandbox-ca", now - datetime.timedelta(minutes=5), now + _VALIDITY, path_length=None
        )
        self.cert_path = directory / "ca.crt"
        self.cert_path.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))
        _write_key(directory / "ca.key", pem_key(self.key))

    def issue(
        self,
        stem: str,
        common_name: str,
        *,
        organization: str | None = None,
        dns: tuple[str, ...] = (),
        ips: tuple[str, ...] = (),
        server: bool = False,
    ) -> KeyPair:
        """Signs a leaf: a serving cert when server=True (with SANs), else a client cert."""
        now = datetime.datetime.now(datetime.UTC)
        key, cert = issue_leaf(
            self.key,
            self.cert,
            common_name,
            now - datetime.timedelta(minutes=5),
            now + _VALIDITY,
            organization=organization,
            dns_names=dns,
            ips=ips,
            server=server,
        )
        pair = KeyPair(self.directory / f"{stem}.crt", self.directory / f"{stem}.key")
        pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(pair.key, pem_key(key))
        return pair


def service_account_keys(directory: Path) -> KeyPair:
    """The RSA pair that signs and verifies service account tokens."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pair = KeyPair(directory / "sa.pub", directory / "sa.key")
    _write_key(
        pair.key,
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
    )
    pair.cert.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return pair
