"""The serving certificate kept in a Secret (`serve --tls-secret`): every replica serves the Secret's pair and takes
whichever step of a rotation is due (kubectl_hami_place.core.rotation), so the certificate is renewed before it
expires, with the new CA trusted before it is served, and without a helm operation.

Each pass reads the Secret and the webhook configuration from the API server, makes at most one write, and writes
the Secret's served pair to files of its own, which the listener's ReloadingCertificate picks up. Every write to the
Secret is conditional on the version read, so of two replicas seeing the same step due one writes, the other reads
again.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from cryptography import x509

from kubectl_hami_place.core.rotation import Rotation, Step, next_step
from kubectl_hami_place.kube.client import Kube
from kubectl_hami_place.kube.errors import KubeConflict, KubeError
from kubectl_hami_place.kube.webhook_config import (
    StoredSecret,
    patch_ca_bundle,
    read_ca_bundles,
    read_secret,
    replace_secret,
)
from webhook.certs import (
    BACKDATE,
    CA_CRT,
    NEXT_CRT,
    NEXT_KEY,
    TLS_CRT,
    TLS_KEY,
    ca_count,
    drop,
    issuer_in,
    stage,
    switch,
)

log = logging.getLogger(__name__)

# How often each replica looks at the Secret and the configuration.
PASS_SECONDS = 5.0
# How long the configuration must have carried both CAs, unchanged, before the new pair is served: the API server
# takes a configuration change from its watch, within a second.
PUBLISH_SECONDS = 10.0
# How long after the switch the old CA stays trusted: every replica reads the Secret every PASS_SECONDS and
# reloads its files within a second; a replica that cannot reach the API server that long is not ready anyway.
RELOAD_SECONDS = 30.0
# Set on the Secret (any value) to rotate now; the chart's hook sets it when the names to cover changed.
REQUEST = "scheduling.hami.placement.com/rotate"
# "<configuration resourceVersion> <unix time>": when the two-CA bundle was first seen in that version.
PUBLISHED = "scheduling.hami.placement.com/ca-published"
# "<unix time>" of the switch to the new pair.
SWITCHED = "scheduling.hami.placement.com/switched-at"
# Steps of one settle, at most: a rotation takes five writes, spread over passes by its waits.
STEPS_PER_SETTLE = 6


def _write(path: Path, data: bytes, mode: int) -> None:
    """Replace the file in one rename."""
    partial = path.with_name(f".{path.name}.tmp")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    partial.replace(path)


def _published(value: str) -> tuple[str, float] | None:
    version, _, at = value.partition(" ")
    try:
        return (version, float(at)) if version else None
    except ValueError:
        return None


def _time(value: str | None) -> float | None:
    try:
        return float(value) if value else None
    except ValueError:
        return None


class SecretCertificate:
    """The pair served from the Secret NAMESPACE/NAME, its rotations, the caBundle of the configuration."""

    def __init__(
        self,
        kube: Kube,
        namespace: str,
        name: str,
        configuration: str,
        directory: Path,
        *,
        publish_seconds: float = PUBLISH_SECONDS,
        reload_seconds: float = RELOAD_SECONDS,
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.name = name
        self.configuration = configuration
        self.cert_file = directory / "tls.crt"
        self.key_file = directory / "tls.key"
        self.publish_seconds = publish_seconds
        self.reload_seconds = reload_seconds
        self._served: tuple[bytes, bytes] | None = None

    def _read(self) -> StoredSecret:
        secret = read_secret(self.kube, self.namespace, self.name)
        if secret is None or not all(secret.data.get(key) for key in (TLS_CRT, TLS_KEY, CA_CRT)):
            raise KubeError(
                f"secret {self.namespace}/{self.name} does not exist or lacks tls.crt, tls.key or ca.crt; create it "
                f"with: hami-place-webhook certs --secret {self.namespace}/{self.name} --dns NAME"
            )
        return secret

    def _serve(self, secret: StoredSecret) -> None:
        """Write the Secret's served pair to the listener's files when it changed (key first: a pair read between
        the two renames fails to load and the listener keeps the previous one until the next look)."""
        pair = (secret.data[TLS_CRT], secret.data[TLS_KEY])
        if pair != self._served:
            _write(self.key_file, pair[1], 0o600)
            _write(self.cert_file, pair[0], 0o644)
            self._served = pair
            log.info("serving the certificate of secret %s/%s", self.namespace, self.name)

    def _seen(self, secret: StoredSecret, now: float) -> tuple[Rotation, str]:
        cert = x509.load_pem_x509_certificate(secret.data[TLS_CRT])
        issuer = issuer_in(secret.data[CA_CRT], cert)
        # Signed by no CA the bundle holds: the API server cannot verify it, so it is renewed now.
        not_after = now if issuer is None else min(cert.not_valid_after_utc, issuer.not_valid_after_utc).timestamp()
        configuration = read_ca_bundles(self.kube, self.configuration)
        seen = Rotation(
            now=now,
            issued_at=min(cert.not_valid_before_utc + BACKDATE, cert.not_valid_after_utc).timestamp(),
            not_after=not_after,
            bundle_cas=ca_count(secret.data[CA_CRT]),
            staged=bool(secret.data.get(NEXT_CRT) and secret.data.get(NEXT_KEY)),
            requested=REQUEST in secret.annotations,
            switched_at=_time(secret.annotations.get(SWITCHED)),
            configuration_version=configuration.resource_version if configuration else None,
            configuration_current=bool(
                configuration
                and configuration.bundles
                and all(bundle == secret.data[CA_CRT] for bundle in configuration.bundles)
            ),
            published=_published(secret.annotations.get(PUBLISHED, "")),
        )
        return seen, configuration.resource_version if configuration else ""

    def sync(self) -> Step:
        """One look: serve the Secret's pair, then take the step due, if any. Returns the step taken."""
        secret = self._read()
        self._serve(secret)
        now = time.time()
        seen, version = self._seen(secret, now)
        step = next_step(seen, publish_seconds=self.publish_seconds, reload_seconds=self.reload_seconds)
        annotations = dict(secret.annotations)
        try:
            if step is Step.PUBLISH:
                patch_ca_bundle(self.kube, self.configuration, secret.data[CA_CRT])
            elif step is Step.RECORD:
                annotations[PUBLISHED] = f"{version} {now}"
                self._replace(secret, secret.data, annotations)
            elif step is Step.STAGE:
                for key in (REQUEST, PUBLISHED, SWITCHED):
                    annotations.pop(key, None)
                self._replace(secret, stage(secret.data, now=datetime.fromtimestamp(now, UTC)), annotations)
            elif step is Step.SWITCH:
                annotations.pop(PUBLISHED, None)
                annotations[SWITCHED] = str(now)
                self._replace(secret, switch(secret.data), annotations)
            elif step is Step.DROP:
                annotations.pop(SWITCHED, None)
                self._replace(secret, drop(secret.data), annotations)
        except KubeConflict:
            log.info("certificate rotation: another replica wrote secret %s/%s first", self.namespace, self.name)
            return Step.NONE
        if step is not Step.NONE:
            log.info("certificate rotation: %s done (secret %s/%s)", step.value, self.namespace, self.name)
        return step

    def _replace(self, secret: StoredSecret, data: dict[str, bytes], annotations: dict[str, str]) -> None:
        replace_secret(self.kube, self.namespace, self.name, secret, data, annotations=annotations)

    def settle(self) -> None:
        """Take the steps due now one after the other, until one is a wait."""
        for _ in range(STEPS_PER_SETTLE):
            if self.sync() is Step.NONE:
                return

    def run(self, stop: threading.Event) -> None:
        """Settle every PASS_SECONDS until stopped; a failed pass is logged and tried again at the next."""
        while not stop.wait(PASS_SECONDS):
            try:
                self.settle()
            except (KubeError, ValueError, OSError) as error:
                log.warning("certificate from secret %s/%s: %s", self.namespace, self.name, error)
            except Exception:
                # Renewal must outlive a pass that failed otherwise: the certificate expires if this thread ends.
                log.exception("certificate from secret %s/%s: the pass failed", self.namespace, self.name)
