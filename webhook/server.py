"""`hami-place-webhook serve`: one process, one cache, two listeners (HTTPS uvicorn on uvloop, HTTP waitress).

/mutate is in the path of every pod creation: it runs on an event loop of its own (uvicorn with uvloop and the
httptools parser), where an idle or half-open connection holds only its own socket and a review the cache alone
decides is answered without a thread hand-off. On SIGTERM the replica turns unready, keeps answering while the
Service may still route to it (each answer closing its connection), then stops listening, finishes the admissions
in flight and exits, all within --shutdown-grace (see docs/architecture.md).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import shutil
import signal
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

from flask import Flask
from waitress.server import BaseWSGIServer, MultiSocketServer, create_server

from kubectl_hami_place.core.admission import Settings
from kubectl_hami_place.core.defrag.report import moves_document
from kubectl_hami_place.core.reservation import RoomKey
from kubectl_hami_place.kube.access import review_access, review_token
from kubectl_hami_place.kube.client import connect
from kubectl_hami_place.kube.crd import read_placement_crd
from kubectl_hami_place.kube.deadline import DeadlineApiClient
from kubectl_hami_place.kube.defrag import run_history
from kubectl_hami_place.kube.hami_config import read_hami_config
from kubectl_hami_place.kube.watch import with_pool_size
from webhook.access import ReaderGate
from webhook.admit import Admitter
from webhook.allocator import freeze_when_synced, return_freed_memory
from webhook.api import api_app, probe_app
from webhook.cache import ClusterCache
from webhook.crd_check import CrdCheck
from webhook.defrag import DefragController, DefragOptions
from webhook.hami_config import FollowedHamiConfig
from webhook.listener import MutateListener, MutateProbe, drain
from webhook.metrics import Metrics
from webhook.mutate import (
    CLAIM_THREADS,
    MutateApp,
)
from webhook.reconcile import Reconciler
from webhook.renewal import SecretCertificate
from webhook.settings import DEFAULTS
from webhook.tls import ReloadingCertificate
from webhook.writes import DEFAULT_GUARD_NAMESPACE, KubeWrites

log = logging.getLogger(__name__)

# The kube client's connection pool: three open watches, one per claim thread, and the background loop.
CONNECTION_POOL_SIZE = CLAIM_THREADS + 8
# The defragmentation controller's own pool: its twelve open watches, the Lease, and the worker's calls.
DEFRAG_POOL_SIZE = 16
# How long a thread may keep the GIL while another waits for it (Python's default is 5 ms).
SWITCH_INTERVAL_SECONDS = 0.001
# The HTTP API's limits (waitress keeps 100 connections, 120 s of idleness and 1 GiB bodies spooled to disk).
API_CONNECTIONS = 64
API_IDLE_SECONDS = 30
API_MAX_BODY_BYTES = 16 * 1024
API_MAX_HEADER_BYTES = 64 * 1024
# The probes' port: the kubelet's probes, one at a time each.
PROBE_CONNECTIONS = 8
# After SIGTERM, the share of --shutdown-grace spent still answering while unready (the Service and the API
# server's connections move to other replicas meanwhile); the rest is for the admissions still in flight.
LISTEN_SHARE = 1 / 3
# At shutdown, how long the Events still queued may take to be sent.
EVENTS_FLUSH_SECONDS = 5.0
# At shutdown, how long an HTTP API or probe answer in flight may take to finish.
API_CLOSE_SECONDS = 2.0


@dataclass(frozen=True)
class ServeOptions:
    """Everything `serve` takes (flags and env in docs/architecture.md; defaults in webhook/settings.py)."""

    kubeconfig: str | None
    webhook_port: int = DEFAULTS.webhook_port
    api_port: int = DEFAULTS.api_port
    probe_port: int = DEFAULTS.probe_port
    bind_address: str = DEFAULTS.bind_address
    tls_cert_file: str = ""
    tls_key_file: str = ""
    # NAMESPACE/NAME of the Secret to serve from and renew, and the configuration whose caBundle follows it.
    tls_secret: str = ""
    webhook_configuration: str = ""
    client_ca_file: str = ""
    client_cert_names: tuple[str, ...] = ()
    network_policy: str = ""
    max_connections: int = DEFAULTS.max_connections
    scheduler_name: str = DEFAULTS.scheduler_name
    hami_config: str = ""
    hami_config_reread: float = DEFAULTS.hami_config_reread
    hami_scheduler: str = ""
    gpu_scheduler_policy: str = ""
    exclude_namespaces: tuple[str, ...] = field(default_factory=tuple)
    placement_ttl: int = DEFAULTS.placement_ttl
    admission_timeout: float = DEFAULTS.admission_timeout
    shutdown_grace: float = DEFAULTS.shutdown_grace
    idle_timeout: float = DEFAULTS.idle_timeout
    claim_grace: int = DEFAULTS.claim_grace
    finished_ttl: int = DEFAULTS.finished_ttl
    room_key: RoomKey | None = None
    guard_namespace: str = DEFAULT_GUARD_NAMESPACE
    defrag: DefragOptions | None = None


def open_port_notices(options: ServeOptions) -> list[str]:
    """What cluster-info (and so `status`) must say when nothing restricts who may post a review to /mutate."""
    if options.client_ca_file or options.network_policy:
        return []
    return [
        f"the webhook port {options.webhook_port} takes an AdmissionReview from anyone who can reach it: a forged "
        "review can hold an open placement for the claim grace, again and again, and large ones slow every "
        "admission; admit only the API server (chart networkPolicy or server.clientCA; see docs/security.md)"
    ]


def probe_host(bind_address: str) -> str:
    """Where the self-probe connects: loopback when the listener binds every address."""
    return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(bind_address, bind_address)


class ShutdownSignal:
    """SIGTERM and SIGINT set the stop event, once: a second signal runs its handler on the main thread in the middle
    of the first one's `Event.set`, and a second `set` there waits for the lock its own thread holds, for ever."""

    def __init__(self, stop: threading.Event) -> None:
        self.stop = stop
        self.received: list[int] = []

    def __call__(self, signum: int, _frame: FrameType | None) -> None:
        first = not self.received
        self.received.append(signum)
        if first:
            self.stop.set()


def serve(options: ServeOptions) -> None:
    """Run until SIGTERM (graceful, within --shutdown-grace) or SIGINT (in-flight admissions only)."""
    if not return_freed_memory():
        log.warning("this libc has no mallopt: memory freed after large responses may stay with the process")
    renewal = None
    cert_file, key_file = options.tls_cert_file, options.tls_key_file
    if options.tls_secret:
        namespace, _, name = options.tls_secret.partition("/")
        # Its own connection pool, and a private directory for the pair it serves.
        renewal = SecretCertificate(
            connect(options.kubeconfig),
            namespace,
            name,
            options.webhook_configuration,
            Path(tempfile.mkdtemp(prefix="hami-place-tls-")),
        )
        renewal.settle()
        cert_file, key_file = str(renewal.cert_file), str(renewal.key_file)
    certificate = ReloadingCertificate(cert_file, key_file, options.client_ca_file)
    pooled = with_pool_size(connect(options.kubeconfig), CONNECTION_POOL_SIZE)
    kube = dataclasses.replace(pooled, api=DeadlineApiClient(pooled.api.configuration))
    hami = FollowedHamiConfig(
        lambda: read_hami_config(kube, options.hami_config, options.gpu_scheduler_policy, options.hami_scheduler),
        every=options.hami_config_reread,
    )
    settings = Settings(
        scheduler_name=options.scheduler_name,
        excluded_namespaces=frozenset(options.exclude_namespaces),
        hami=hami.refresh(),
    )
    metrics = Metrics()
    crd_check = CrdCheck(lambda: read_placement_crd(kube), metrics.crd_fields_pruned)
    metrics.watch_certificate(certificate)
    cache = ClusterCache(
        kube.api, options.scheduler_name, planning=options.defrag is not None, room_key=options.room_key
    )
    if options.room_key is None and options.defrag is not None:
        log.warning(
            "no --room-key-file: the rooms this replica's controller keeps for rescued pods are honoured by this "
            "replica's admission alone, and its moves are not told apart from placements labelled with a run by "
            "hand; give every replica the same key (the chart does)"
        )
    metrics.watch_cache(cache)
    writes = KubeWrites(kube, options.guard_namespace)
    admitter = Admitter(kube, cache, settings, metrics, writes=writes)
    hami.on_change = lambda config: setattr(admitter, "settings", dataclasses.replace(admitter.settings, hami=config))
    reconciler = Reconciler(
        kube,
        cache,
        metrics,
        options.placement_ttl,
        claim_grace=options.claim_grace,
        finished_ttl=options.finished_ttl,
        writes=writes,
    )

    controller = None
    if options.defrag is not None:
        # Its own connection pool (its watches hold twelve): the controller's reads and waits never hold a
        # connection admission needs. Its plans read the cache, whose pod events it follows from the first list;
        # HAMi's config is the one admissions follow.
        controller = DefragController(
            with_pool_size(connect(options.kubeconfig), DEFRAG_POOL_SIZE),
            options.defrag,
            metrics.defrag,
            cache,
            lambda: admitter.settings.hami,
        )
        for reflector in controller.reflectors():
            metrics.watch_sync_age(reflector)
        admitter.other_pods = controller.other_pods

    mutate = MutateApp(admitter, metrics, admission_timeout=options.admission_timeout)
    https = MutateListener(
        (options.bind_address, options.webhook_port),
        mutate,
        certificate.serving_context(),
        idle_seconds=options.idle_timeout,
        max_connections=options.max_connections,
        client_names=frozenset(options.client_cert_names),
    )
    probe = MutateProbe(
        probe_host(options.bind_address), options.webhook_port, client_cert_required=bool(options.client_ca_file)
    )

    def mutate_serving() -> str | None:
        return "shutting down" if mutate.draining else probe()

    notices = open_port_notices(options)
    for notice in notices:
        log.warning("%s", notice)
    # The readers' reviews have a connection pool of their own: a burst of API reads never holds one an admission needs.
    reviewer = connect(options.kubeconfig)
    readers = ReaderGate(functools.partial(review_token, reviewer), functools.partial(review_access, reviewer))
    http = api_server(
        api_app(
            cache,
            metrics,
            mutate_serving,
            notices,
            readers=readers,
            defrag_moves=lambda: moves_document(run_history(kube, cache.room_key), seals_checked=cache.room_key.shared),
        ),
        options.bind_address,
        options.api_port,
    )
    probes = api_server(
        probe_app(cache, mutate_serving, probe),
        options.bind_address,
        options.probe_port,
        threads=1,
        connections=PROBE_CONNECTIONS,
    )
    stop = threading.Event()
    signals = ShutdownSignal(stop)
    signal.signal(signal.SIGTERM, signals)
    signal.signal(signal.SIGINT, signals)

    # A thread that computes (the reconciler's pass, a watch's decode, a cluster-info build) keeps the GIL for up to
    # the switch interval each time an admission's thread wants it back; 5 ms by default, paid several times per
    # admission (every socket read and write re-takes the GIL).
    sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)
    unwatch_collector = metrics.watch_collector()
    cache.start()
    https.start()
    threads = [
        threading.Thread(target=http.run, name="http", daemon=True),
        threading.Thread(target=probes.run, name="probes", daemon=True),
        threading.Thread(target=reconciler.run, args=(stop,), name="reconcile", daemon=True),
        threading.Thread(target=freeze_when_synced, args=(cache, stop), name="gc-freeze", daemon=True),
        threading.Thread(target=hami.run, args=(stop,), name="hami-config", daemon=True),
        threading.Thread(target=crd_check.run, args=(stop,), name="crd-check", daemon=True),
    ]
    if renewal is not None:
        threads.append(threading.Thread(target=renewal.run, args=(stop,), name="certificate", daemon=True))
    if controller is not None:
        threads += controller.threads(stop)
    for thread in threads:
        thread.start()
    log.info(
        "serving /mutate on https://%s:%d and the API on http://%s:%d (scheduler %s, placement TTL %ds)",
        options.bind_address,
        options.webhook_port,
        options.bind_address,
        options.api_port,
        options.scheduler_name,
        options.placement_ttl,
    )
    stop.wait()
    log.info("signal %s: shutting down", signals.received[0])
    if signals.received[0] == signal.SIGTERM:
        drain(https, listen=options.shutdown_grace * LISTEN_SHARE, finish=options.shutdown_grace)
    else:
        drain(https, listen=0.0, finish=options.admission_timeout)
    close_api_server(http)
    close_api_server(probes)
    writes.events.close(EVENTS_FLUSH_SECONDS)
    cache.stop()
    if controller is not None:
        controller.stop()
    unwatch_collector()
    if renewal is not None:
        shutil.rmtree(renewal.cert_file.parent, ignore_errors=True)  # the served key leaves no copy behind
    log.info("stopped")


def close_api_server(server: MultiSocketServer | BaseWSGIServer, timeout: float = API_CLOSE_SECONDS) -> None:
    """Let the answers in flight finish, then close: waitress's close() alone shut the socket its worker threads
    wake the loop through, so an answer still being written was lost and logged an OSError traceback."""
    server.task_dispatcher.shutdown(timeout=timeout)
    server.close()


def api_server(
    app: Flask, host: str, port: int, *, threads: int = 4, connections: int = API_CONNECTIONS
) -> MultiSocketServer | BaseWSGIServer:
    """waitress for the HTTP API, polling its sockets with poll(): select() fails on a descriptor above 1,024, and
    the /mutate listener's connections alone pass that under load, which stopped /readyz and /metrics for good.

    Its connections are capped, a connection idle (or sending its request slowly) for API_IDLE_SECONDS is closed,
    and a request body over API_MAX_BODY_BYTES gets 413 at once: it serves only GETs, so no client needs more."""
    return create_server(
        app,
        host=host,
        port=port,
        threads=threads,
        ident="hami-place-webhook",
        asyncore_use_poll=True,
        connection_limit=connections,
        channel_timeout=API_IDLE_SECONDS,
        max_request_body_size=API_MAX_BODY_BYTES,
        max_request_header_size=API_MAX_HEADER_BYTES,
    )
