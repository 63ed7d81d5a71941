"""`hami-place-webhook certs`: a CA and a serving certificate the API server accepts, reused while still good."""

from __future__ import annotations

import ipaddress
import stat
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID
from kubernetes.client import ApiClient

from kubectl_hami_place.kube.client import Kube
from webhook import renewal as renewal_module
from webhook.certs import (
    CA_CRT,
    CA_DAYS,
    NEXT_CRT,
    NEXT_KEY,
    SERVING_DAYS,
    TLS_CRT,
    TLS_KEY,
    CertBundle,
    ca_count,
    drop,
    generate,
    issuer_in,
    stage,
    still_good,
    switch,
)
from webhook.main import main
from webhook.renewal import SecretCertificate

DNS = ["gpu-descheduler-webhook.kube-system.svc", "gpu-descheduler-webhook.kube-system"]
IPS = ["127.0.0.1"]


def test_the_serving_certificate_is_signed_by_the_ca_for_every_name() -> None:
    bundle = generate(DNS, IPS)
    ca = x509.load_pem_x509_certificate(bundle.ca_crt)
    cert = x509.load_pem_x509_certificate(bundle.tls_crt)
    cert.verify_directly_issued_by(ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == DNS
    assert names.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in usages


def test_a_bundle_is_still_good_only_for_names_it_covers_and_while_it_lasts() -> None:
    now = datetime.now(UTC)
    bundle = generate(DNS, IPS, now=now)
    assert still_good(bundle, DNS, IPS, now=now)
    assert still_good(bundle, DNS[:1], [], now=now)
    assert not still_good(bundle, [*DNS, "other.svc"], IPS, now=now)
    assert not still_good(bundle, DNS, ["10.0.0.1"], now=now)
    assert not still_good(bundle, DNS, IPS, now=now + timedelta(days=SERVING_DAYS - 10))
    assert SERVING_DAYS < CA_DAYS


def test_a_bundle_with_a_foreign_key_or_ca_is_not_reused() -> None:
    one, two = generate(DNS, IPS), generate(DNS, IPS)
    assert not still_good(CertBundle(ca_crt=one.ca_crt, tls_crt=one.tls_crt, tls_key=two.tls_key), DNS, IPS)
    assert not still_good(CertBundle(ca_crt=two.ca_crt, tls_crt=one.tls_crt, tls_key=one.tls_key), DNS, IPS)
    assert not still_good(CertBundle(ca_crt=b"garbage", tls_crt=one.tls_crt, tls_key=one.tls_key), DNS, IPS)


def test_no_name_at_all_is_refused() -> None:
    with pytest.raises(ValueError, match="--dns"):
        generate([], [])


def test_certs_command_writes_the_three_files_with_a_private_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["certs", "--out-dir", str(tmp_path / "out"), "--dns", *DNS, "--ip", *IPS]) == 0
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == ["ca.crt", "tls.crt", "tls.key"]
    assert stat.S_IMODE((out / "tls.key").stat().st_mode) == 0o600
    bundle = CertBundle((out / "ca.crt").read_bytes(), (out / "tls.crt").read_bytes(), (out / "tls.key").read_bytes())
    assert still_good(bundle, DNS, IPS)
    assert "wrote ca.crt, tls.crt, tls.key" in capsys.readouterr().out


def test_certs_command_without_a_destination_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["certs", "--dns", "x"]) == 2
    assert "needs --out-dir" in capsys.readouterr().err


def test_serve_without_certificates_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--tls-cert-file", "", "--tls-key-file", ""]) == 2
    assert "needs --tls-cert-file" in capsys.readouterr().err


def test_serve_with_a_missing_certificate_file_says_which(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = str(tmp_path / "nope.crt")
    assert main(["serve", "--tls-cert-file", missing, "--tls-key-file", missing]) == 1
    assert "nope.crt" in capsys.readouterr().err


def test_a_rotation_trusts_both_cas_around_the_switch_and_keeps_names_and_lifetime() -> None:
    now = datetime.now(UTC)
    old = generate(DNS, IPS, now=now, validity=timedelta(seconds=600))
    data = {CA_CRT: old.ca_crt, TLS_CRT: old.tls_crt, TLS_KEY: old.tls_key}
    staged = stage(data, now=now + timedelta(seconds=450))
    assert staged[TLS_CRT] == old.tls_crt, "staging changes nothing served"
    assert ca_count(staged[CA_CRT]) == 2
    assert staged[CA_CRT].startswith(old.ca_crt)
    upcoming = x509.load_pem_x509_certificate(staged[NEXT_CRT])
    assert issuer_in(staged[CA_CRT], upcoming) is not None
    assert issuer_in(old.ca_crt, upcoming) is None, "a new CA, not the old one"
    current = x509.load_pem_x509_certificate(old.tls_crt)
    assert upcoming.extensions.get_extension_for_class(x509.SubjectAlternativeName) == (
        current.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    )
    lifetime = current.not_valid_after_utc - current.not_valid_before_utc
    assert upcoming.not_valid_after_utc - upcoming.not_valid_before_utc == lifetime

    switched = switch(staged)
    assert (switched[TLS_CRT], switched[TLS_KEY]) == (staged[NEXT_CRT], staged[NEXT_KEY])
    assert NEXT_CRT not in switched and NEXT_KEY not in switched
    assert switched[CA_CRT] == staged[CA_CRT], "both CAs still trusted right after the switch"
    dropped = drop(switched)
    assert ca_count(dropped[CA_CRT]) == 1
    assert issuer_in(dropped[CA_CRT], upcoming) is not None
    assert still_good(CertBundle(dropped[CA_CRT], dropped[TLS_CRT], dropped[TLS_KEY]), [], [], now=now) is False, (
        "10 minutes is less than the 30 days a reuse needs"
    )


def test_a_rotation_staged_for_new_names_covers_them() -> None:
    old = generate(DNS, IPS)
    staged = stage(
        {CA_CRT: old.ca_crt, TLS_CRT: old.tls_crt, TLS_KEY: old.tls_key},
        now=datetime.now(UTC),
        dns_names=[*DNS, "other.svc"],
        ips=IPS,
    )
    bundle = CertBundle(staged[CA_CRT], staged[NEXT_CRT], staged[NEXT_KEY])
    assert still_good(bundle, [*DNS, "other.svc"], IPS)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--tls-secret", "kube-system/../x", "--webhook-configuration", "w"], "must be NAMESPACE/NAME"),
        (["--tls-secret", "kube-system/tls"], "needs --webhook-configuration"),
        (["--tls-secret", "kube-system/tls", "--webhook-configuration", "w", "--tls-cert-file", "c"], "not both"),
    ],
)
def test_serve_from_a_secret_checks_its_flags_before_any_call(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["serve", *flags]) == 2
    assert message in capsys.readouterr().err


def test_certs_refuses_a_validity_too_short_for_a_rotation(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["certs", "--secret", "kube-system/tls", "--dns", "x", "--validity", "60"]) == 2
    assert "--validity must be at least 90" in capsys.readouterr().err


def test_a_renewal_pass_that_fails_in_any_way_leaves_the_thread_renewing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The pass itself is replaced (no API server): a failure no API error names cannot be had on demand, and if it
    ended the thread the served certificate would expire unrenewed."""
    renewal = SecretCertificate(Kube(ApiClient(), "ns", "", None), "ns", "tls", "webhook", tmp_path)
    passes: list[int] = []
    stop = threading.Event()

    def settle() -> None:
        passes.append(len(passes))
        if len(passes) == 1:
            raise RuntimeError("not a KubeError")
        stop.set()

    monkeypatch.setattr(renewal_module, "PASS_SECONDS", 0.01)
    monkeypatch.setattr(renewal, "settle", settle)
    thread = threading.Thread(target=renewal.run, args=(stop,), daemon=True)
    thread.start()
    thread.join(10)
    assert passes == [0, 1]
