"""`hami-place-webhook`: `serve` runs the webhook, `certs` makes its certificates (flags in docs/architecture.md)."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import secrets
import socket
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from kubectl_hami_place import __version__
from kubectl_hami_place.core.k8s_names import is_namespace, is_namespaced_name, is_object_name
from kubectl_hami_place.core.reservation import RoomKey
from kubectl_hami_place.kube.client import Kube, connect
from kubectl_hami_place.kube.errors import KubeError
from kubectl_hami_place.kube.leader import LeaseTimes
from kubectl_hami_place.kube.webhook_config import (
    patch_ca_bundle,
    read_secret,
    replace_secret,
    store_tls_secret,
)
from webhook import check
from webhook.certs import (
    CA_CRT,
    NEXT_CRT,
    TLS_CRT,
    TLS_KEY,
    CertBundle,
    ca_count,
    generate,
    stage,
    still_good,
    usable_issuer,
)
from webhook.defrag import DefragOptions
from webhook.logs import log_json
from webhook.server import ServeOptions, serve
from webhook.settings import DEFAULTS
from webhook.writes import DEFAULT_GUARD_NAMESPACE

log = logging.getLogger("hami-place-webhook")

# A shorter certificate would be renewed before a rotation's waits are over.
MIN_VALIDITY_SECONDS = 90
# The shortest room key `--room-key-file` may hold: an HMAC-SHA256 key of less than its output length is weak.
MIN_ROOM_KEY_BYTES = 32
# The longest --placement-ttl, --finished-ttl and --claim-grace: a year is past any use, and 2.5e11 s overflowed the
# dates every placement's wait is counted in.
MAX_TTL_SECONDS = 365 * 24 * 3600


def _say(message: str) -> None:
    """A progress line on stdout (the chart's hook Job log shows it)."""
    sys.stdout.write(message + "\n")


def _fail(message: str) -> None:
    """A one-line error on stderr."""
    sys.stderr.write(message + "\n")


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise SystemExit(f"hami-place-webhook: {name}={value!r} is not a port number; unset it or fix it") from None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hami-place-webhook", description="The hami-place placement admission webhook and its cluster API."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("serve", help="run the webhook (HTTPS /mutate) and the API (HTTP)")
    run.add_argument(
        "--kubeconfig",
        default=os.environ.get("KUBECONFIG") or None,
        help="kubeconfig file [KUBECONFIG]; in-cluster config when unset",
    )
    run.add_argument(
        "--webhook-port",
        type=int,
        default=_env_int("HAMI_PLACE_WEBHOOK_PORT", DEFAULTS.webhook_port),
        help=f"HTTPS port of /mutate [HAMI_PLACE_WEBHOOK_PORT] (default {DEFAULTS.webhook_port})",
    )
    run.add_argument(
        "--api-port",
        type=int,
        default=_env_int("HAMI_PLACE_API_PORT", DEFAULTS.api_port),
        help=f"HTTP port of the API, metrics and probes [HAMI_PLACE_API_PORT] (default {DEFAULTS.api_port})",
    )
    run.add_argument(
        "--probe-port",
        type=int,
        default=_env_int("HAMI_PLACE_PROBE_PORT", DEFAULTS.probe_port),
        help="HTTP port of /livez, /healthz and /readyz alone, for the kubelet's probes [HAMI_PLACE_PROBE_PORT] "
        f"(default {DEFAULTS.probe_port})",
    )
    run.add_argument(
        "--bind-address",
        default=DEFAULTS.bind_address,
        help=f"address both listeners bind (default {DEFAULTS.bind_address})",
    )
    run.add_argument(
        "--tls-cert-file",
        default=os.environ.get("HAMI_PLACE_TLS_CERT_FILE"),
        help="serving certificate, PEM [HAMI_PLACE_TLS_CERT_FILE]; reloaded when it changes",
    )
    run.add_argument(
        "--tls-key-file",
        default=os.environ.get("HAMI_PLACE_TLS_KEY_FILE"),
        help="serving key, PEM [HAMI_PLACE_TLS_KEY_FILE]; reloaded when it changes",
    )
    run.add_argument(
        "--tls-secret",
        default=os.environ.get("HAMI_PLACE_TLS_SECRET", ""),
        metavar="NAMESPACE/NAME",
        help="serve the certificate of this kubernetes.io/tls Secret (made by `certs --secret`) instead of files, "
        "and renew it before it expires, rotating its CA with an overlap [HAMI_PLACE_TLS_SECRET]",
    )
    run.add_argument(
        "--webhook-configuration",
        default=os.environ.get("HAMI_PLACE_WEBHOOK_CONFIGURATION", ""),
        metavar="NAME",
        help="with --tls-secret: the MutatingWebhookConfiguration whose caBundle follows the Secret's CAs "
        "[HAMI_PLACE_WEBHOOK_CONFIGURATION]",
    )
    run.add_argument(
        "--client-ca-file",
        default=os.environ.get("HAMI_PLACE_CLIENT_CA_FILE", ""),
        help="require a client certificate signed by this CA on the HTTPS port, i.e. the API server's "
        "[HAMI_PLACE_CLIENT_CA_FILE]; off when unset; needs --client-cert-name",
    )
    run.add_argument(
        "--client-cert-name",
        action="append",
        default=[n for n in os.environ.get("HAMI_PLACE_CLIENT_CERT_NAMES", "").split(",") if n],
        metavar="NAME",
        help="with --client-ca-file, the client certificate must carry this name as its subject CN or a DNS "
        "subjectAltName, else the connection is closed (repeatable) [HAMI_PLACE_CLIENT_CERT_NAMES, comma-separated]",
    )
    run.add_argument(
        "--network-policy",
        default="",
        metavar="NAME",
        help="the NetworkPolicy that admits the HTTPS port only from the API server (the chart's, when enabled); "
        "cluster-info names the port open to anyone when neither this nor --client-ca-file is given",
    )
    run.add_argument(
        "--max-connections",
        type=int,
        default=DEFAULTS.max_connections,
        metavar="COUNT",
        help="connections the HTTPS port holds at once; at the cap a new one closes the oldest that carried no "
        f"review yet (default {DEFAULTS.max_connections})",
    )
    run.add_argument(
        "--admission-timeout",
        type=float,
        default=DEFAULTS.admission_timeout,
        metavar="SECONDS",
        help="the webhook's timeoutSeconds: each admission ends within it, its body's arrival included "
        f"(default {DEFAULTS.admission_timeout:g})",
    )
    run.add_argument(
        "--idle-timeout",
        type=float,
        default=DEFAULTS.idle_timeout,
        metavar="SECONDS",
        help="an HTTPS connection that sends nothing for this long is closed, before its first request as after its "
        "last; keep it above the API server's 90 s idle timeout for its webhook connections "
        f"(default {DEFAULTS.idle_timeout:g})",
    )
    run.add_argument(
        "--shutdown-grace",
        type=float,
        default=DEFAULTS.shutdown_grace,
        metavar="SECONDS",
        help="on SIGTERM: unready at once, answering for a third of this, then finishing admissions in flight; "
        f"keep it below the pod's terminationGracePeriodSeconds (default {DEFAULTS.shutdown_grace:g})",
    )
    run.add_argument(
        "--scheduler-name",
        default=DEFAULTS.scheduler_name,
        help=f"only pods with this schedulerName are pinned (default {DEFAULTS.scheduler_name})",
    )
    run.add_argument(
        "--hami-config",
        default=os.environ.get("HAMI_PLACE_HAMI_CONFIG", ""),
        metavar="NAMESPACE/NAME",
        help="HAMi's device-config ConfigMap, read at start and every --hami-config-reread seconds "
        "[HAMI_PLACE_HAMI_CONFIG] (default: the one named hami-scheduler-device, in any namespace; HAMi's defaults "
        "if none)",
    )
    run.add_argument(
        "--hami-config-reread",
        type=float,
        default=DEFAULTS.hami_config_reread,
        metavar="SECONDS",
        help="seconds between reads of HAMi's device config: a change reaches admissions this late "
        f"(default {DEFAULTS.hami_config_reread:g})",
    )
    run.add_argument(
        "--hami-scheduler",
        default=os.environ.get("HAMI_PLACE_HAMI_SCHEDULER", ""),
        metavar="NAMESPACE/NAME",
        help="HAMi's scheduler Deployment, whose --gpu-scheduler-policy is the default GPU policy of a pod naming "
        "none [HAMI_PLACE_HAMI_SCHEDULER] (default: the Deployment labelled app.kubernetes.io/component="
        "hami-scheduler, in any namespace; HAMi's default spread, with a warning, if none)",
    )
    run.add_argument(
        "--gpu-scheduler-policy",
        default="",
        metavar="POLICY",
        help="HAMi's default GPU policy (binpack, spread, ...) instead of reading it from --hami-scheduler",
    )
    run.add_argument(
        "--exclude-namespace",
        action="append",
        default=[],
        metavar="NAMESPACE",
        help="never touch pods of this namespace (repeatable)",
    )
    run.add_argument(
        "--placement-ttl",
        type=int,
        default=DEFAULTS.placement_ttl,
        metavar="SECONDS",
        help="unclaimed placements expire, and blocked evictions give up, after this long "
        f"(default {DEFAULTS.placement_ttl})",
    )
    run.add_argument(
        "--finished-ttl",
        type=int,
        default=DEFAULTS.finished_ttl,
        metavar="SECONDS",
        help="placements that finished (Consumed, Failed, Expired) are deleted this long after; 0 keeps them "
        f"(default {DEFAULTS.finished_ttl})",
    )
    run.add_argument(
        "--claim-grace",
        type=int,
        default=DEFAULTS.claim_grace,
        metavar="SECONDS",
        help="a claim no stored pod carries is released after this long on the replica's own clock; keep it over "
        "twice the API server's longest admission plus its request timeout "
        f"(default {DEFAULTS.claim_grace})",
    )

    run.add_argument(
        "--defrag-policy",
        default=os.environ.get("HAMI_PLACE_DEFRAG_POLICY", ""),
        metavar="NAMESPACE/NAME",
        help="run the defragmentation controller with the DefragPolicy in this ConfigMap (key policy.yaml), "
        "on the replica holding the hami-place-defrag-leader Lease [HAMI_PLACE_DEFRAG_POLICY]; off when unset",
    )
    run.add_argument(
        "--defrag-interval",
        type=float,
        default=DEFAULTS.defrag_interval,
        metavar="SECONDS",
        help="seconds before the controller looks again at a Pending pod it found no plan for (twice as long after "
        "each such look in a row, to 300; one interval after its last once a pod leaves a node), or while its "
        "watches are stale "
        f"(default {DEFAULTS.defrag_interval:g})",
    )
    run.add_argument(
        "--defrag-move-timeout",
        type=float,
        default=DEFAULTS.defrag_move_timeout,
        metavar="SECONDS",
        help="seconds a move's replacement has to land on the target's cards, counted from the end of the evicted "
        "pod's grace period (at most 600 s after the eviction); then the run stops and a replacement "
        "still Pending there is evicted, so its controller makes one HAMi places itself "
        f"(default {DEFAULTS.defrag_move_timeout:g})",
    )
    run.add_argument(
        "--defrag-lease-duration",
        type=int,
        default=DEFAULTS.defrag_lease_duration,
        metavar="SECONDS",
        help="seconds the controller's leader Lease holds unrenewed: a leader gone without a word is replaced this "
        f"late; renewed every 2/15 of it, its holder acting until 2/3 of it (default {DEFAULTS.defrag_lease_duration})",
    )
    run.add_argument(
        "--room-key-file",
        default=os.environ.get("HAMI_PLACE_ROOM_KEY_FILE", ""),
        metavar="FILE",
        help="a secret of 32 bytes or more every replica shares, which seals the rooms a rescue keeps and the moves "
        "it makes, so that no one else can keep cards by writing the annotation nor pass a placement off as a move "
        "[HAMI_PLACE_ROOM_KEY_FILE] (the chart mounts one; default: a key of this process's own, whose rooms only "
        "this replica honours and with which no move's seal is checked)",
    )
    run.add_argument(
        "--defrag-namespace",
        default=os.environ.get("POD_NAMESPACE", ""),
        metavar="NAMESPACE",
        help="the server's namespace: its pods are never moved, and its Leases live there without --lease-namespace "
        "[POD_NAMESPACE] (default: the policy's namespace for the leader Lease, default for the reqID guards)",
    )
    run.add_argument(
        "--lease-namespace",
        default="",
        metavar="NAMESPACE",
        help="where the server's Leases live, the reqID guards and the controller's leader Lease: it creates, reads, "
        "lists and deletes Leases there, so a namespace of their own keeps those rights off other components' Leases "
        "(the chart makes one; default: --defrag-namespace)",
    )

    certs = commands.add_parser("certs", help="make a CA and a serving certificate; optionally store and install them")
    certs.add_argument("--out-dir", type=Path, help="write ca.crt, tls.crt and tls.key here")
    certs.add_argument(
        "--dns", nargs="+", action="extend", default=[], metavar="NAME", help="DNS names the certificate is valid for"
    )
    certs.add_argument(
        "--ip", nargs="+", action="extend", default=[], metavar="IP", help="IP addresses the certificate is valid for"
    )
    certs.add_argument(
        "--secret",
        metavar="NAMESPACE/NAME",
        help="store the files in this kubernetes.io/tls Secret, reusing it while it is still good",
    )
    certs.add_argument(
        "--patch-webhook", metavar="NAME", help="put the CA into this MutatingWebhookConfiguration's caBundle"
    )
    certs.add_argument(
        "--validity",
        type=int,
        metavar="SECONDS",
        help="lifetime of the CA and the certificate (default: the CA 10 years, the certificate 825 days); "
        "the server renews a certificate once a third of its lifetime is left, keeping the lifetime",
    )
    certs.add_argument(
        "--kubeconfig",
        default=os.environ.get("KUBECONFIG") or None,
        help="kubeconfig file [KUBECONFIG]; in-cluster config when unset",
    )
    checks = commands.add_parser(
        "check", help="check an installed server answers: a dry-run review on /mutate, /readyz and the version"
    )
    checks.add_argument("--api-url", required=True, metavar="URL", help="the server's HTTP API, e.g. http://svc:8083")
    checks.add_argument(
        "--webhook-url", metavar="URL", help="its /mutate, e.g. https://svc.ns.svc:443/mutate (unset: not checked)"
    )
    checks.add_argument("--ca-file", metavar="FILE", help="the CA that signed the serving certificate (PEM)")
    checks.add_argument("--ca-data", metavar="BASE64", help="the same CA as base64 PEM (the chart's certs.caBundle)")
    return parser


def _serve(args: argparse.Namespace) -> int:
    if args.tls_secret:
        namespace, _, name = args.tls_secret.partition("/")
        if not is_namespaced_name(namespace, name):
            _fail(f"hami-place-webhook: --tls-secret {args.tls_secret!r} must be NAMESPACE/NAME of a Secret")
            return 2
        if args.tls_cert_file or args.tls_key_file:
            _fail("hami-place-webhook: give either --tls-secret or --tls-cert-file and --tls-key-file, not both")
            return 2
        if not is_object_name(args.webhook_configuration):
            _fail("hami-place-webhook: --tls-secret needs --webhook-configuration NAME, the configuration to keep")
            return 2
    elif not args.tls_cert_file or not args.tls_key_file:
        _fail(
            "hami-place-webhook: serve needs --tls-cert-file and --tls-key-file, or --tls-secret "
            "(make them with: hami-place-webhook certs --out-dir DIR --dns NAME)"
        )
        return 2
    for port in (args.webhook_port, args.api_port, args.probe_port):
        if not 0 < port < 65536:
            _fail(f"hami-place-webhook: port {port} is out of range 1..65535")
            return 2
    if args.client_ca_file and not args.client_cert_name:
        _fail(
            "hami-place-webhook: --client-ca-file needs --client-cert-name NAME (the name the API server's client "
            "certificate carries): a CA alone admits every certificate it signed (a cluster CA: every user)"
        )
        return 2
    if args.client_cert_name and not args.client_ca_file:
        _fail("hami-place-webhook: --client-cert-name needs --client-ca-file (the CA that signs that certificate)")
        return 2
    if not 1 <= args.max_connections <= 65536:
        _fail("hami-place-webhook: --max-connections must be 1..65536")
        return 2
    if not 0 < args.placement_ttl <= MAX_TTL_SECONDS:
        _fail(f"hami-place-webhook: --placement-ttl must be a positive number of seconds, at most {MAX_TTL_SECONDS}")
        return 2
    if not 0 <= args.finished_ttl <= MAX_TTL_SECONDS:
        _fail(
            "hami-place-webhook: --finished-ttl must be 0 (keep) or a positive number of seconds, "
            f"at most {MAX_TTL_SECONDS}"
        )
        return 2
    if not 0 < args.claim_grace <= MAX_TTL_SECONDS:
        _fail(f"hami-place-webhook: --claim-grace must be a positive number of seconds, at most {MAX_TTL_SECONDS}")
        return 2
    if not 1 <= args.admission_timeout <= 30:
        _fail("hami-place-webhook: --admission-timeout must be 1..30 seconds, the range of a webhook's timeoutSeconds")
        return 2
    if not 1 <= args.idle_timeout <= 3600:
        _fail("hami-place-webhook: --idle-timeout must be 1..3600 seconds")
        return 2
    if not 1 <= args.hami_config_reread <= 3600:
        _fail("hami-place-webhook: --hami-config-reread must be 1..3600 seconds")
        return 2
    if not 0 <= args.shutdown_grace <= 3600:
        _fail("hami-place-webhook: --shutdown-grace must be 0..3600 seconds")
        return 2
    room_key = None
    if args.room_key_file:
        try:
            secret = Path(args.room_key_file).read_bytes().strip()
        except OSError as error:
            _fail(f"hami-place-webhook: --room-key-file {args.room_key_file}: {error.strerror}; give a readable file")
            return 2
        if len(secret) < MIN_ROOM_KEY_BYTES:
            _fail(
                f"hami-place-webhook: --room-key-file holds {len(secret)} bytes; write a random key of "
                f"{MIN_ROOM_KEY_BYTES} or more there (e.g. head -c 48 /dev/urandom | base64)"
            )
            return 2
        room_key = RoomKey(secret)
    if args.defrag_namespace and not is_namespace(args.defrag_namespace):
        _fail(f"hami-place-webhook: --defrag-namespace {args.defrag_namespace!r} is not a namespace name")
        return 2
    if args.lease_namespace and not is_namespace(args.lease_namespace):
        _fail(f"hami-place-webhook: --lease-namespace {args.lease_namespace!r} is not a namespace name")
        return 2
    defrag = None
    if args.defrag_policy:
        namespace, _, name = args.defrag_policy.partition("/")
        if not is_namespaced_name(namespace, name):
            _fail(f"hami-place-webhook: --defrag-policy {args.defrag_policy!r} must be NAMESPACE/NAME of a ConfigMap")
            return 2
        if not 0.1 <= args.defrag_interval <= 3600:
            _fail("hami-place-webhook: --defrag-interval must be 0.1..3600 seconds")
            return 2
        if not 5 <= args.defrag_move_timeout <= 3600:
            _fail("hami-place-webhook: --defrag-move-timeout must be 5..3600 seconds")
            return 2
        if not 3 <= args.defrag_lease_duration <= 3600:
            _fail("hami-place-webhook: --defrag-lease-duration must be 3..3600 seconds")
            return 2
        identity = f"{os.environ.get('POD_NAME') or socket.gethostname()}-{secrets.token_hex(3)}"
        defrag = DefragOptions(
            policy_namespace=namespace,
            policy_name=name,
            server_namespace=args.defrag_namespace or namespace,
            identity=identity,
            scheduler_name=args.scheduler_name,
            interval=args.defrag_interval,
            move_timeout=args.defrag_move_timeout,
            finished_ttl=args.finished_ttl,
            excluded_namespaces=tuple(args.exclude_namespace),
            lease=LeaseTimes.lasting(args.defrag_lease_duration),
            lease_namespace=args.lease_namespace,
        )
    serve(
        ServeOptions(
            kubeconfig=args.kubeconfig,
            webhook_port=args.webhook_port,
            api_port=args.api_port,
            probe_port=args.probe_port,
            bind_address=args.bind_address,
            tls_cert_file=args.tls_cert_file,
            tls_key_file=args.tls_key_file,
            tls_secret=args.tls_secret,
            webhook_configuration=args.webhook_configuration,
            client_ca_file=args.client_ca_file,
            client_cert_names=tuple(args.client_cert_name),
            network_policy=args.network_policy,
            max_connections=args.max_connections,
            scheduler_name=args.scheduler_name,
            hami_config=args.hami_config,
            hami_config_reread=args.hami_config_reread,
            hami_scheduler=args.hami_scheduler,
            gpu_scheduler_policy=args.gpu_scheduler_policy,
            exclude_namespaces=tuple(args.exclude_namespace),
            placement_ttl=args.placement_ttl,
            admission_timeout=args.admission_timeout,
            shutdown_grace=args.shutdown_grace,
            idle_timeout=args.idle_timeout,
            claim_grace=args.claim_grace,
            finished_ttl=args.finished_ttl,
            room_key=room_key,
            guard_namespace=args.lease_namespace or args.defrag_namespace or DEFAULT_GUARD_NAMESPACE,
            defrag=defrag,
        )
    )
    return 0


def _certs(args: argparse.Namespace) -> int:
    if not args.out_dir and not args.secret:
        _fail("hami-place-webhook: certs needs --out-dir DIR or --secret NAMESPACE/NAME")
        return 2
    if args.validity is not None and args.validity < MIN_VALIDITY_SECONDS:
        _fail(f"hami-place-webhook: --validity must be at least {MIN_VALIDITY_SECONDS} seconds")
        return 2
    namespace, _, name = (args.secret or "").partition("/")
    if args.secret and not is_namespaced_name(namespace, name):
        _fail(f"hami-place-webhook: --secret {args.secret!r} must be NAMESPACE/NAME")
        return 2
    if args.patch_webhook and not is_object_name(args.patch_webhook):
        _fail(
            f"hami-place-webhook: --patch-webhook {args.patch_webhook!r} must be the name of a "
            "MutatingWebhookConfiguration"
        )
        return 2
    validity = timedelta(seconds=args.validity) if args.validity is not None else None
    try:
        bundle = generate(args.dns, args.ip, validity=validity)
    except ValueError as error:
        _fail(f"hami-place-webhook: {error}")
        return 2
    if args.secret or args.patch_webhook:
        kube = connect(args.kubeconfig)
        if args.secret:
            bundle = _stored(kube, namespace, name, bundle, args)
        if args.patch_webhook:
            count = patch_ca_bundle(kube, args.patch_webhook, bundle.ca_crt)
            if count is None:
                _say(f"mutatingwebhookconfiguration {args.patch_webhook} does not exist yet; caBundle not patched")
            else:
                _say(f"mutatingwebhookconfiguration {args.patch_webhook}: caBundle set on {count} webhook(s)")
    if args.out_dir:
        bundle.write(args.out_dir)
        _say(f"wrote ca.crt, tls.crt, tls.key to {args.out_dir}")
    return 0


def _stored(kube: Kube, namespace: str, name: str, fresh: CertBundle, args: argparse.Namespace) -> CertBundle:
    """What the Secret serves after this run: kept while still good, left alone while a rotation is under way,
    a rotation staged (the server finishes it with an overlap) when its pair is servable but no longer good, and
    replaced by the fresh bundle only when nothing servable is stored."""
    stored = read_secret(kube, namespace, name)
    where = f"secret {namespace}/{name}"
    now = datetime.now(UTC)
    if stored is not None and all(stored.data.get(key) for key in (CA_CRT, TLS_CRT, TLS_KEY)):
        current = CertBundle(ca_crt=stored.data[CA_CRT], tls_crt=stored.data[TLS_CRT], tls_key=stored.data[TLS_KEY])
        if usable_issuer(current.ca_crt, current.tls_crt, current.tls_key, now=now) is not None:
            if stored.data.get(NEXT_CRT) or ca_count(current.ca_crt) > 1:
                _say(f"{where}: a certificate rotation is under way; the server finishes it")
            elif still_good(current, args.dns, args.ip, now=now):
                _say(f"{where}: existing certificate is still good, reused")
            else:
                data = stage(stored.data, now=now, dns_names=args.dns, ips=args.ip)
                replace_secret(kube, namespace, name, stored, data, annotations=stored.annotations)
                _say(f"{where}: a new certificate is staged; the server serves it once the webhook trusts its CA")
                current = dataclasses.replace(current, ca_crt=data[CA_CRT])
            return current
    store_tls_secret(kube, namespace, name, {CA_CRT: fresh.ca_crt, TLS_CRT: fresh.tls_crt, TLS_KEY: fresh.tls_key})
    _say(f"{where}: new certificate stored")
    return fresh


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `hami-place-webhook` console script."""
    log_json()
    logging.getLogger("urllib3").setLevel(logging.ERROR)  # our own warnings already say what failed, in one line
    args = _parser().parse_args(argv)
    try:
        if args.command == "serve":
            return _serve(args)
        if args.command == "check":
            if args.webhook_url and not (args.ca_file or args.ca_data):
                _fail("hami-place-webhook: check --webhook-url needs --ca-file or --ca-data (the release's CA)")
                return 2
            return check.run(args.webhook_url, args.api_url, args.ca_file, args.ca_data, _say)
        return _certs(args)
    except KubeError as error:
        _fail(f"hami-place-webhook: {error}")
        return 1
    except OSError as error:
        _fail(f"hami-place-webhook: {error.strerror or error}: {error.filename or ''}".rstrip(": "))
        return 1


if __name__ == "__main__":
    sys.exit(main())
