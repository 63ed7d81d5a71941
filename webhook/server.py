"""`hami-place-webhook serve`: one process, one cache, two listeners (HTTPS cheroot, HTTP waitress), one loop."""

from __future__ import annotations

import logging
import signal
import threading
from dataclasses import dataclass, field
from types import FrameType

from cheroot import wsgi
from waitress.server import create_server

from kubectl_hami_place.core.admission import Settings
from kubectl_hami_place.kube.client import connect
from kubectl_hami_place.kube.watch import with_pool_size
from webhook.admit import Admitter
from webhook.api import api_app, mutate_app
from webhook.cache import ClusterCache
from webhook.metrics import Metrics
from webhook.reconcile import Reconciler
from webhook.tls import ReloadingCertificate, ReloadingSSLAdapter

log = logging.getLogger(__name__)

# The kube client's connection pool: three open watches plus concurrent admissions and the background loop.
CONNECTION_POOL_SIZE = 32


@dataclass(frozen=True)
class ServeOptions:
    """Everything `serve` takes (flags and env in docs/architecture.md)."""

    kubeconfig: str | None
    webhook_port: int = 8443
    api_port: int = 8083
    bind_address: str = "0.0.0.0"
    tls_cert_file: str = ""
    tls_key_file: str = ""
    scheduler_name: str = "hami-scheduler"
    exclude_namespaces: tuple[str, ...] = field(default_factory=tuple)
    placement_ttl: int = 3600


def serve(options: ServeOptions) -> None:
    """Run until SIGTERM or SIGINT; returns after a clean shutdown."""
    certificate = ReloadingCertificate(options.tls_cert_file, options.tls_key_file)
    kube = with_pool_size(connect(options.kubeconfig), CONNECTION_POOL_SIZE)
    settings = Settings(
        scheduler_name=options.scheduler_name, excluded_namespaces=frozenset(options.exclude_namespaces)
    )
    metrics = Metrics()
    cache = ClusterCache(kube.api, options.scheduler_name)
    for reflector in cache.reflectors():
        metrics.watch_sync_age(reflector)
    admitter = Admitter(kube, cache, settings, metrics)
    reconciler = Reconciler(kube, cache, metrics, options.placement_ttl)

    https = wsgi.Server(
        (options.bind_address, options.webhook_port),
        mutate_app(admitter, metrics),
        numthreads=8,
        server_name="hami-place-webhook",
    )
    https.ssl_adapter = ReloadingSSLAdapter(certificate)
    http = create_server(
        api_app(cache, metrics), host=options.bind_address, port=options.api_port, threads=4, ident="hami-place-webhook"
    )
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("signal %s: shutting down", signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    cache.start()
    https.prepare()
    threads = [
        threading.Thread(target=https.serve, name="https", daemon=True),
        threading.Thread(target=http.run, name="http", daemon=True),
        threading.Thread(target=reconciler.run, args=(stop,), name="reconcile", daemon=True),
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
    https.stop()
    http.close()
    cache.stop()
    log.info("stopped")
