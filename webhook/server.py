"""`hami-place-webhook serve`: one process, one cache, two listeners (HTTPS cheroot, HTTP waitress), one loop.

The HTTPS listener is in the path of every pod creation, so no client may hold it up for another: cheroot's accept
loop only accepts and wraps (tls.ReloadingSSLAdapter); a new connection waits in cheroot's selector, costing no
thread, until it sends something or expires; only then does a worker run the TLS handshake, under a deadline of
its own. On SIGTERM the replica turns unready, keeps answering while the Service may still route to it, then stops
listening, finishes the admissions in flight and exits, all within --shutdown-grace (see docs/architecture.md).
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import signal
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import FrameType
from typing import Any

from cheroot import wsgi
from cheroot.server import HTTPConnection, HTTPRequest
from waitress.server import create_server

from kubectl_hami_place.core.admission import Settings
from kubectl_hami_place.kube.client import connect
from kubectl_hami_place.kube.hami_config import read_hami_config
from kubectl_hami_place.kube.watch import with_pool_size
from webhook.admit import Admitter
from webhook.api import api_app, mutate_app
from webhook.cache import ClusterCache
from webhook.deadline import DeadlineApiClient
from webhook.metrics import Metrics
from webhook.reconcile import CLAIM_GRACE_SECONDS, Reconciler
from webhook.tls import ReloadingCertificate, ReloadingSSLAdapter

log = logging.getLogger(__name__)

# Workers of the HTTPS listener. Idle connections cost none; a connection that sent part of a handshake holds one
# for at most the handshake deadline, so it takes this many such clients at once to delay an admission.
WORKER_THREADS = 32
# The kube client's connection pool: three open watches, one per worker, and the background loop.
CONNECTION_POOL_SIZE = WORKER_THREADS + 8
# The listen backlog: connections the kernel holds until the accept loop takes them (cheroot's default is 5).
LISTEN_BACKLOG = 128
# Connections kept open between requests (the API server reuses its connections); more are closed after answering.
KEEP_ALIVE_LIMIT = 256
# How long a thread may keep the GIL while another waits for it (Python's default is 5 ms).
SWITCH_INTERVAL_SECONDS = 0.001
# How often the wait for the first sync looks whether the process is stopping.
FREEZE_WAIT_SECONDS = 5.0
# The self-probe behind /readyz: each of connect, handshake and read must finish within this.
PROBE_TIMEOUT_SECONDS = 1.0
# After SIGTERM, the share of --shutdown-grace spent still answering while unready (the Service and the API
# server's connections move to other replicas meanwhile); the rest is for the admissions still in flight.
LISTEN_SHARE = 1 / 3
# cheroot's own answers to a client's mistake that carry a 5xx code; sent as a 400 with the reason instead.
CLIENT_MISTAKES = {
    "501": "unsupported Transfer-Encoding; send the body with Content-Length or chunked",
    "505": "unsupported HTTP version; send HTTP/1.1",
}


class ClientMistakesAre4xx(HTTPRequest):
    """cheroot's request parser, answering an unsupported transfer coding or HTTP version with a 400."""

    def simple_response(self, status: str | int, msg: str = "") -> None:
        """cheroot's plain-text answer, a 400 with a reason where cheroot would say 501 or 505."""
        reason = CLIENT_MISTAKES.get(str(status)[:3])
        if reason is not None:
            status, msg = "400 Bad Request", reason
        super().simple_response(status, msg)


class HandshakeInWorker(HTTPConnection):
    """A cheroot connection whose TLS handshake runs in the worker thread, bounded by the server's handshake time."""

    RequestHandlerClass = ClientMistakesAre4xx
    handshaken = False
    waited = False

    def communicate(self) -> bool:
        """Handshake first (once), then cheroot's request handling; False closes the connection."""
        if not self.handshaken and not self._handshake():
            return False
        return bool(super().communicate())

    def _handshake(self) -> bool:
        sock = self.socket
        if not isinstance(sock, ssl.SSLSocket):
            self.handshaken = True
            return True
        # Python's do_handshake applies the socket timeout to the whole handshake, not to each read.
        sock.settimeout(self.server.handshake_timeout)
        try:
            sock.do_handshake()
        except (OSError, ValueError) as error:
            log.debug("TLS handshake with %s failed: %s", self.remote_addr, error)
            return False
        sock.settimeout(self.server.timeout)
        self.handshaken = True
        return True


class AdmissionServer(wsgi.Server):
    """cheroot's WSGI server, with new connections parked in its selector until they send, and a drain switch."""

    ConnectionClass = HandshakeInWorker

    def __init__(self, *args: Any, handshake_timeout: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.handshake_timeout = handshake_timeout
        self.keep_alive_conn_limit = KEEP_ALIVE_LIMIT
        self.draining = False

    def process_conn(self, conn: HandshakeInWorker) -> None:
        """A new connection waits in the selector (no thread) until readable; a readable one goes to a worker."""
        if not conn.handshaken and not conn.waited:
            conn.waited = True
            self.put_conn(conn)
            return
        super().process_conn(conn)

    @property
    def can_add_keepalive_connection(self) -> bool:
        """While draining, every answer closes its connection, so the client reconnects through the Service."""
        return not self.draining and bool(super().can_add_keepalive_connection)


def https_server(
    bind: tuple[str, int],
    app: Callable[..., Iterable[bytes]],
    adapter: ReloadingSSLAdapter,
    *,
    timeout: float,
    handshake_timeout: float | None = None,
    threads: int = WORKER_THREADS,
) -> AdmissionServer:
    """The /mutate listener: `timeout` bounds each read and write, an idle connection's life, and (by default)
    the whole TLS handshake."""
    server = AdmissionServer(
        bind,
        app,
        numthreads=threads,
        server_name="hami-place-webhook",
        timeout=timeout,
        handshake_timeout=timeout if handshake_timeout is None else handshake_timeout,
        request_queue_size=LISTEN_BACKLOG,
    )
    server.ssl_adapter = adapter
    return server


class InFlight:
    """WSGI middleware counting the requests being answered (the drain logs how many it waits for)."""

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self.app = app
        self._lock = threading.Lock()
        self.count = 0

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        with self._lock:
            self.count += 1
        try:
            return list(self.app(environ, start_response))
        finally:
            with self._lock:
                self.count -= 1


class MutateProbe:
    """Whether the HTTPS listener answers: connect, handshake and GET /healthz through it, as the API server would.

    With client certificates required the probe has none to show: a completed TLS 1.3 handshake (a worker sent
    its Finished) is then the answer, whatever the refusal that follows.
    """

    def __init__(
        self, host: str, port: int, *, client_cert_required: bool = False, timeout: float = PROBE_TIMEOUT_SECONDS
    ) -> None:
        self.address = (host, port)
        self.timeout = timeout
        self.client_cert_required = client_cert_required
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_3
        self.context.check_hostname = False
        self.context.verify_mode = ssl.CERT_NONE  # it asks whether the listener works, not who it is

    def __call__(self) -> str | None:
        """None when it answered; else why not, in one line."""
        where = f"/mutate does not answer on port {self.address[1]}"
        try:
            with (
                socket.create_connection(self.address, timeout=self.timeout) as raw,
                self.context.wrap_socket(raw) as tls,
            ):
                if self.client_cert_required:
                    return None
                tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: self-probe\r\nConnection: close\r\n\r\n")
                head = tls.recv(64)
        except OSError as error:
            return f"{where}: {error}"
        status = head.partition(b"\r\n")[0]
        return None if status.startswith(b"HTTP/1.1 200") else f"{where}: it answered {status[:40]!r}"


@dataclass(frozen=True)
class ServeOptions:
    """Everything `serve` takes (flags and env in docs/architecture.md)."""

    kubeconfig: str | None
    webhook_port: int = 8443
    api_port: int = 8083
    bind_address: str = "0.0.0.0"
    tls_cert_file: str = ""
    tls_key_file: str = ""
    client_ca_file: str = ""
    scheduler_name: str = "hami-scheduler"
    hami_config: str = ""
    exclude_namespaces: tuple[str, ...] = field(default_factory=tuple)
    placement_ttl: int = 3600
    admission_timeout: float = 10.0
    shutdown_grace: float = 15.0
    claim_grace: int = CLAIM_GRACE_SECONDS


def probe_host(bind_address: str) -> str:
    """Where the self-probe connects: loopback when the listener binds every address."""
    return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(bind_address, bind_address)


def serve(options: ServeOptions) -> None:
    """Run until SIGTERM (graceful, within --shutdown-grace) or SIGINT (in-flight admissions only)."""
    certificate = ReloadingCertificate(options.tls_cert_file, options.tls_key_file, options.client_ca_file)
    pooled = with_pool_size(connect(options.kubeconfig), CONNECTION_POOL_SIZE)
    kube = dataclasses.replace(pooled, api=DeadlineApiClient(pooled.api.configuration))
    hami = read_hami_config(kube, options.hami_config)
    if hami.notice:
        log.warning("%s", hami.notice)
    settings = Settings(
        scheduler_name=options.scheduler_name,
        excluded_namespaces=frozenset(options.exclude_namespaces),
        hami=hami.config,
    )
    metrics = Metrics()
    cache = ClusterCache(kube.api, options.scheduler_name)
    for reflector in cache.reflectors():
        metrics.watch_sync_age(reflector)
    admitter = Admitter(kube, cache, settings, metrics)
    reconciler = Reconciler(kube, cache, metrics, options.placement_ttl, claim_grace=options.claim_grace)

    in_flight = InFlight(mutate_app(admitter, metrics, admission_timeout=options.admission_timeout))
    https = https_server(
        (options.bind_address, options.webhook_port),
        in_flight,
        ReloadingSSLAdapter(certificate),
        timeout=options.admission_timeout,
    )
    probe = MutateProbe(
        probe_host(options.bind_address), options.webhook_port, client_cert_required=bool(options.client_ca_file)
    )

    def mutate_serving() -> str | None:
        return "shutting down" if https.draining else probe()

    http = create_server(
        api_app(cache, metrics, mutate_serving),
        host=options.bind_address,
        port=options.api_port,
        threads=4,
        ident="hami-place-webhook",
    )
    stop = threading.Event()
    received: list[int] = []

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("signal %s: shutting down", signum)
        received.append(signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    # A thread that computes (the reconciler's pass, a watch's decode, a cluster-info build) keeps the GIL for up to
    # the switch interval each time an admission's thread wants it back; 5 ms by default, paid several times per
    # admission (every socket read and write re-takes the GIL).
    sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)
    cache.start()
    https.prepare()
    threads = [
        threading.Thread(target=https.serve, name="https", daemon=True),
        threading.Thread(target=http.run, name="http", daemon=True),
        threading.Thread(target=reconciler.run, args=(stop,), name="reconcile", daemon=True),
        threading.Thread(target=freeze_when_synced, args=(cache, stop), name="gc-freeze", daemon=True),
    ]
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
    if received[0] == signal.SIGTERM:
        drain(https, in_flight, listen=options.shutdown_grace * LISTEN_SHARE, finish=options.shutdown_grace)
    else:
        drain(https, in_flight, listen=0.0, finish=options.admission_timeout)
    http.close()
    cache.stop()
    log.info("stopped")


def freeze_when_synced(cache: ClusterCache, stop: threading.Event) -> None:
    """Once the first full sync is in, build the cluster-info views, then move every object alive to the collector's
    permanent generation.

    The cache's tens of thousands of dicts would otherwise be walked by every full collection, a pause of tens of
    milliseconds in whichever admission triggers it; the objects stay freed by reference counting when replaced.
    The views built now make the first `GET /api/v1/cluster-info` as cheap as the next (only changed nodes).
    """
    while not stop.is_set():
        if cache.wait_ready(FREEZE_WAIT_SECONDS):
            cache.cluster_info_document(datetime.now(UTC))
            gc.collect()
            gc.freeze()
            log.info("first sync in: %d objects frozen out of the collector's scans", gc.get_freeze_count())
            return


def drain(https: AdmissionServer, in_flight: InFlight, *, listen: float, finish: float) -> None:
    """Unready at once; keep answering for `listen` s; stop listening; in-flight admissions end by `finish` s."""
    started = time.monotonic()
    https.draining = True
    if listen > 0:
        log.info("unready; still answering for %.1fs while clients move to other replicas", listen)
        time.sleep(listen)
    https.shutdown_timeout = max(finish - (time.monotonic() - started), 1.0)
    busy = in_flight.count
    https.stop()
    log.info("listener stopped; %d admission(s) were in flight and are answered", busy)
