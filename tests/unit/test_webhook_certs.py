"""`hami-place-webhook certs`: a CA and a serving certificate the API server accepts, reused while still good."""

from __future__ import annotations

import ipaddress
import stat
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID
from kubernetes.client import ApiClient

from kubectl_hami_place.core.rotation import Step
from kubectl_hami_place.kube.client import Kube
from kubectl_hami_place.kube.errors import KubeError
from kubectl_hami_place.kube.webhook_config import StoredSecret
from webhook import renewal as renewal_module
from webhook.certs import (
    BACKDATE,
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
    issue_leaf,
    issuer_in,
    names_of,
    new_ca,
    pem,
    pem_key,
    stage,
    still_good,
    switch,
    usable_issuer,
)
from webhook.main import main
from webhook.renewal import SecretCertificate, _published, _time

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


def test_certs_command_gives_the_ca_and_certificate_the_validity_asked_from_its_least(tmp_path: Path) -> None:
    """A short `--validity` is how an operator rehearses a rotation: 90 s, the least, is taken as asked."""
    out = tmp_path / "out"
    started = datetime.now(UTC).replace(microsecond=0)
    assert main(["certs", "--out-dir", str(out), "--dns", *DNS, "--validity", "90"]) == 0
    ended = datetime.now(UTC)
    for name in ("ca.crt", "tls.crt"):
        certificate = x509.load_pem_x509_certificate((out / name).read_bytes())
        assert started + timedelta(seconds=90) <= certificate.not_valid_after_utc <= ended + timedelta(seconds=90), name


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
    ("argv", "line"),
    [
        (["certs", "--dns", "x"], "certs needs --out-dir DIR or --secret NAMESPACE/NAME"),
        (
            ["certs", "--secret", "kube-system/tls", "--dns", "x", "--validity", "60"],
            "--validity must be at least 90 seconds",
        ),
        (
            ["serve", "--tls-cert-file", "", "--tls-key-file", ""],
            "serve needs --tls-cert-file and --tls-key-file, or --tls-secret (make them with: hami-place-webhook certs "
            "--out-dir DIR --dns NAME)",
        ),
        (
            ["serve", "--tls-secret", "kube-system/../x", "--webhook-configuration", "w"],
            "--tls-secret 'kube-system/../x' must be NAMESPACE/NAME of a Secret",
        ),
        (
            ["serve", "--tls-secret", "kube-system/tls"],
            "--tls-secret needs --webhook-configuration NAME, the configuration to keep",
        ),
        (
            ["serve", "--tls-secret", "kube-system/tls", "--webhook-configuration", "w", "--tls-cert-file", "c"],
            "give either --tls-secret or --tls-cert-file and --tls-key-file, not both",
        ),
        (
            ["certs", "--secret", "kube-system/../x", "--dns", "x"],
            "--secret 'kube-system/../x' must be NAMESPACE/NAME",
        ),
        (
            ["certs", "--out-dir", "out", "--dns", "x", "--patch-webhook", "Bad/../Name"],
            "--patch-webhook 'Bad/../Name' must be the name of a MutatingWebhookConfiguration",
        ),
        (
            ["certs", "--out-dir", "out", "--dns", "x", "--ip", "999.1.1.1"],
            "'999.1.1.1' does not appear to be an IPv4 or IPv6 address",
        ),
        (
            ["check", "--api-url", "http://x", "--webhook-url", "https://x"],
            "check --webhook-url needs --ca-file or --ca-data (the release's CA)",
        ),
        (
            ["serve", "--tls-cert-file", "c", "--tls-key-file", "k", "--api-port", "65536"],
            "port 65536 is out of range 1..65535",
        ),
        (
            [
                "serve",
                "--tls-cert-file",
                "c",
                "--tls-key-file",
                "k",
                "--defrag-policy",
                "ns/p",
                "--defrag-interval",
                "0",
            ],
            "--defrag-interval must be 0.1..3600 seconds",
        ),
    ],
)
def test_a_bad_flag_is_one_usage_line_naming_it_before_any_call(
    argv: list[str], line: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each of certs', check's and serve's usage errors: exit 2 and the one line naming the flag, before any call or
    file, with no kubeconfig to read. A flag checked only after connecting said that the kubeconfig could not be read
    (exit 1), and a bad --patch-webhook name went into an API path unchecked."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    assert main(argv) == 2
    assert capsys.readouterr().err == f"hami-place-webhook: {line}\n"
    assert not (tmp_path / "out").exists(), "nothing written"


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


T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_the_ca_may_sign_leaves_only_and_the_leaf_serves_only() -> None:
    """Clients (the API server, Go's verifier) judge the chain by these extensions: a CA allowed sub-CAs or a leaf
    without critical constraints would be a wider trust than the webhook needs."""
    bundle = generate(DNS, IPS, now=T0)
    ca = x509.load_pem_x509_certificate(bundle.ca_crt)
    cert = x509.load_pem_x509_certificate(bundle.tls_crt)
    assert ca.subject == x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, "hami-place-webhook-ca")])
    assert [(e.value, e.critical) for e in ca.extensions][:2] == [
        (x509.BasicConstraints(ca=True, path_length=0), True),
        (
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            True,
        ),
    ]
    assert [(type(e.value).__name__, e.critical) for e in cert.extensions] == [
        ("BasicConstraints", True),
        ("ExtendedKeyUsage", False),
        ("AuthorityKeyIdentifier", False),
        ("SubjectAlternativeName", False),
    ]


def test_a_client_leaf_names_its_organization_and_is_for_clients_only() -> None:
    """Kubernetes reads a client certificate's O as its group: a leaf without it, or one that may serve, is wrong."""
    ca_key, ca = new_ca("sandbox-ca", T0, T0 + timedelta(days=1))
    _, leaf = issue_leaf(ca_key, ca, "admin", T0, T0 + timedelta(days=1), organization="system:masters", server=False)
    assert leaf.subject == x509.Name(
        [
            x509.NameAttribute(x509.NameOID.COMMON_NAME, "admin"),
            x509.NameAttribute(x509.NameOID.ORGANIZATION_NAME, "system:masters"),
        ]
    )
    assert list(leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [
        ExtendedKeyUsageOID.CLIENT_AUTH
    ]


def test_a_certificate_for_addresses_only_is_named_after_its_first_address() -> None:
    """A webhook reached by URL at an IP has no DNS name: its certificate must still be made, for that address."""
    cert = x509.load_pem_x509_certificate(generate([], ["10.0.0.1", "10.0.0.2"], now=T0).tls_crt)
    assert cert.subject == x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, "10.0.0.1")])
    assert str(cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value) == (
        "<SubjectAlternativeName(<GeneralNames([<IPAddress(value=10.0.0.1)>, <IPAddress(value=10.0.0.2)>])>)>"
    )


def test_no_name_at_all_is_refused_with_the_flags_to_give() -> None:
    """The operator reads this line only: it must name both ways to give a name."""
    with pytest.raises(ValueError) as refused:
        generate([], [])
    assert str(refused.value) == "give at least one --dns name or --ip address for the serving certificate"


def test_a_bundle_is_usable_from_its_first_second_and_still_good_with_exactly_30_days_left() -> None:
    """The bounds decide whether a `helm upgrade` rotates the CA under running replicas: each is inclusive as said."""
    bundle = generate(DNS, IPS, now=T0)
    end = T0 + timedelta(days=SERVING_DAYS)
    pair = (bundle.ca_crt, bundle.tls_crt, bundle.tls_key)
    assert [usable_issuer(*pair, now=now) is not None for now in (T0 - BACKDATE, end - timedelta(seconds=1), end)] == [
        True,
        True,
        False,
    ]
    left = end - timedelta(days=30)
    assert [still_good(bundle, DNS, IPS, now=now) for now in (left, left + timedelta(seconds=1))] == [True, False]


def test_a_rotation_staged_for_dns_names_only_covers_those_and_starts_when_staged() -> None:
    """New names given (`--dns` alone) replace the served ones, and the staged pair's lifetime runs from the stage."""
    old = generate(DNS, IPS, now=T0)
    staged = stage({CA_CRT: old.ca_crt, TLS_CRT: old.tls_crt, TLS_KEY: old.tls_key}, now=T0, dns_names=["new.svc"])
    upcoming = x509.load_pem_x509_certificate(staged[NEXT_CRT])
    assert str(upcoming.extensions.get_extension_for_class(x509.SubjectAlternativeName).value) == (
        "<SubjectAlternativeName(<GeneralNames([<DNSName(value='new.svc')>])>)>"
    )
    assert (upcoming.not_valid_before_utc, upcoming.not_valid_after_utc) == (
        T0 - BACKDATE,
        T0 + timedelta(days=SERVING_DAYS),
    )


def test_a_served_pair_no_bundled_ca_signed_is_rotated_to_the_new_ca_alone_and_never_dropped() -> None:
    """A bundle that lost the served pair's CA must still rotate (the new CA alone) and `drop` must not empty it."""
    served, foreign = generate(DNS, IPS, now=T0), generate(DNS, IPS, now=T0)
    data = {CA_CRT: foreign.ca_crt, TLS_CRT: served.tls_crt, TLS_KEY: served.tls_key}
    staged = stage(data, now=T0)
    issuer = issuer_in(staged[CA_CRT], x509.load_pem_x509_certificate(staged[NEXT_CRT]))
    assert issuer is not None and staged[CA_CRT] == pem(issuer)
    assert drop(data) == data


def test_an_unreadable_bundle_holds_no_ca() -> None:
    """The rotation counts the bundle's CAs to know its step: garbage must count as none, not as one."""
    assert [ca_count(b"garbage"), ca_count(generate(DNS, IPS, now=T0).ca_crt)] == [0, 1]


def test_a_brought_pair_without_a_subject_alternative_name_or_unreadable_is_never_kept() -> None:
    """The API server (Go 1.15+) ignores a certificate's common name: a pair stored in the serving Secret whose leaf
    names its host in the common name alone, or whose parts are not PEM, is not servable, so `certs --secret` (the
    chart's hook) replaces it rather than keeping it or staging a rotation from it."""
    ca_key, ca_cert = new_ca("brought-ca", T0, T0 + timedelta(days=CA_DAYS))
    key = ec.generate_private_key(ec.SECP256R1())
    common_name_only = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(x509.NameOID.COMMON_NAME, DNS[0])]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(T0)
        .not_valid_after(T0 + timedelta(days=SERVING_DAYS))
        .sign(ca_key, hashes.SHA256())
    )
    later = T0 + timedelta(hours=1)
    brought = CertBundle(ca_crt=pem(ca_cert), tls_crt=pem(common_name_only), tls_key=pem_key(key))
    assert names_of(common_name_only) == ([], [])
    assert usable_issuer(brought.ca_crt, brought.tls_crt, brought.tls_key, now=later) is None
    assert not still_good(brought, [], [], now=later)
    served = generate(DNS, IPS, now=T0)
    for parts in (
        (b"garbage", served.tls_crt, served.tls_key),
        (served.ca_crt, b"garbage", served.tls_key),
        (served.ca_crt, served.tls_crt, b"garbage"),
    ):
        assert usable_issuer(*parts, now=later) is None
    assert usable_issuer(served.ca_crt, served.tls_crt, served.tls_key, now=later) is not None


def test_a_bundle_is_written_into_a_directory_made_with_its_parents(tmp_path: Path) -> None:
    """`certs --out-dir` may name a path not made yet; the certificates are public, the key its owner's only."""
    bundle = generate(DNS, IPS, now=T0)
    out = tmp_path / "a" / "b"
    bundle.write(out)
    assert {p.name: (p.read_bytes(), stat.S_IMODE(p.stat().st_mode)) for p in out.iterdir()} == {
        "ca.crt": (bundle.ca_crt, 0o644),
        "tls.crt": (bundle.tls_crt, 0o644),
        "tls.key": (bundle.tls_key, 0o600),
    }


def test_the_renewal_writes_the_secrets_pair_to_its_files_once_per_change(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The listener reloads from these files: each new pair must reach them, the key private, and an unchanged pair
    must not be written again every pass."""
    renewal = SecretCertificate(Kube(ApiClient(), "ns", "", None), "ns", "tls", "webhook", tmp_path)
    one, two = generate(DNS, IPS, now=T0), generate(DNS, IPS, now=T0)
    caplog.set_level("INFO", logger="webhook.renewal")
    files = lambda: {p.name: (p.read_bytes(), stat.S_IMODE(p.stat().st_mode)) for p in tmp_path.iterdir()}  # noqa: E731
    renewal._serve(StoredSecret({TLS_CRT: one.tls_crt, TLS_KEY: one.tls_key, CA_CRT: one.ca_crt}, {}, "1"))
    assert files() == {"tls.crt": (one.tls_crt, 0o644), "tls.key": (one.tls_key, 0o600)}
    (tmp_path / "tls.crt").write_bytes(b"untouched")
    renewal._serve(StoredSecret({TLS_CRT: one.tls_crt, TLS_KEY: one.tls_key, CA_CRT: two.ca_crt}, {}, "2"))
    assert files()["tls.crt"] == (b"untouched", 0o644)
    renewal._serve(StoredSecret({TLS_CRT: two.tls_crt, TLS_KEY: two.tls_key, CA_CRT: two.ca_crt}, {}, "3"))
    assert files() == {"tls.crt": (two.tls_crt, 0o644), "tls.key": (two.tls_key, 0o600)}
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("INFO", "serving the certificate of secret ns/tls"),
    ] * 2


def test_the_renewal_annotations_read_back_as_written_and_anything_else_as_absent() -> None:
    """Anyone may edit the Secret's annotations: a malformed one must read as absent, never fail the pass."""
    assert [_published(v) for v in ("12 1767225600.5", "", " 1767225600", "12 soon", "12", "12 1 2")] == [
        ("12", 1767225600.5),
        None,
        None,
        None,
        None,
        None,
    ]
    assert [_time(v) for v in ("1767225600.5", None, "", "soon")] == [1767225600.5, None, None, None]


def test_a_failed_renewal_pass_is_logged_naming_the_secret_and_the_cause(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The pass itself is replaced (no API server): the operator learns of a stuck renewal from these lines only."""
    renewal = SecretCertificate(Kube(ApiClient(), "ns", "", None), "ns", "tls", "webhook", tmp_path)
    failures: list[Exception] = [KubeError("secret gone"), RuntimeError("not a KubeError")]
    stop = threading.Event()

    def settle() -> None:
        if not failures:
            stop.set()
            return
        raise failures.pop(0)

    monkeypatch.setattr(renewal_module, "PASS_SECONDS", 0.01)
    monkeypatch.setattr(renewal, "settle", settle)
    with caplog.at_level("WARNING", logger="webhook.renewal"):
        renewal.run(stop)
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", "certificate from secret ns/tls: secret gone"),
        ("ERROR", "certificate from secret ns/tls: the pass failed"),
    ]


@pytest.mark.parametrize(
    ("steps", "looks"),
    [
        ([Step.PUBLISH, Step.RECORD, Step.NONE, Step.STAGE], 3),
        ([Step.PUBLISH, Step.RECORD, Step.STAGE, Step.SWITCH, Step.DROP, Step.PUBLISH, Step.RECORD], 6),
    ],
)
def test_a_settle_takes_the_steps_due_until_a_wait_and_six_at_most(
    steps: list[Step], looks: int, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The look itself is replaced (no API server): a rotation's steps due now are taken in one pass, but a pass
    that never reaches a wait must still end."""
    renewal = SecretCertificate(Kube(ApiClient(), "ns", "", None), "ns", "tls", "webhook", tmp_path)
    due = iter(steps)
    taken: list[Step] = []

    def sync() -> Step:
        taken.append(next(due))
        return taken[-1]

    monkeypatch.setattr(renewal, "sync", sync)
    renewal.settle()
    assert taken == steps[:looks]


@pytest.mark.usefixtures("east_of_utc")
def test_a_bundle_made_without_a_time_is_good_at_once_whatever_the_local_time_zone() -> None:
    """`certs` runs in any container: a bundle dated by the local clock read as UTC would start hours late east of
    Greenwich, and the webhook would serve a certificate not yet valid."""
    assert still_good(generate(DNS, IPS), DNS, IPS)
