"""`serve --tls-secret`: the server renews its own certificate before it expires, moving to a new CA with an overlap,
while pods keep being created and pinned."""

from __future__ import annotations

import base64
import socket
import ssl
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from kubernetes import client

from kubectl_hami_place.kube.client import Kube
from kubectl_hami_place.kube.webhook_config import store_tls_secret
from sandbox.cluster import Sandbox, free_port, wait_for
from sandbox.webhook import Webhook, start
from tests.cluster.hami_harness import GpuNode
from tests.cluster.webhook_harness import CLAIM, create_placement, gpu_pod, sees_placement, total_admissions
from webhook.certs import CA_CRT, TLS_CRT, TLS_KEY, generate

pytestmark = pytest.mark.cluster

SECRET = "webhook-tls"
# The certificate's lifetime. It is written two thirds of that old (renewal_due: a third left), so the server starts
# renewing it on its first pass, with LEFT_SECONDS before it expires: more than the 10 s between publishing a bundle
# and serving a pair it alone trusts, plus a 5 s pass or two. Written fresh it would wait 80 s for that.
VALIDITY_SECONDS = 120
LEFT_SECONDS = 38
# A bundle the configuration carried this recently must still verify the served certificate: an API server that
# took a configuration change this late (its watch, or one of several API servers) must not meet a certificate it
# cannot verify. Below the server's 10 s wait between publishing a bundle and serving a pair it alone trusts.
LATE_SECONDS = 5.0
# Give up on the rotation finishing after this long.
ROTATION_DEADLINE_SECONDS = 240


def make_secret(cluster: Sandbox, namespace: str) -> None:
    """The Secret as the chart's hook makes it, as it stands once two thirds of the certificate's lifetime passed."""
    issued = datetime.now(UTC) - timedelta(seconds=VALIDITY_SECONDS - LEFT_SECONDS)
    pair = generate([], ["127.0.0.1"], now=issued, validity=timedelta(seconds=VALIDITY_SECONDS))
    kube = Kube(cluster.api_client(), namespace, "", None)
    store_tls_secret(kube, namespace, SECRET, {CA_CRT: pair.ca_crt, TLS_CRT: pair.tls_crt, TLS_KEY: pair.tls_key})


def secret_data(cluster: Sandbox, namespace: str) -> dict[str, bytes]:
    stored = client.CoreV1Api(cluster.api_client()).read_namespaced_secret(SECRET, namespace)
    return {key: base64.b64decode(value) for key, value in stored.data.items()}


def configuration_bundle(cluster: Sandbox, name: str) -> bytes:
    stored = client.AdmissionregistrationV1Api(cluster.api_client()).read_mutating_webhook_configuration(name)
    bundles = {base64.b64decode(hook.client_config.ca_bundle or "") for hook in stored.webhooks}
    assert len(bundles) == 1, "every webhook of the configuration carries one bundle"
    return bundles.pop()


def verifies(port: int, bundle: bytes) -> str | None:
    """None when a new TLS connection to the port verifies the served certificate with the bundle; else why not."""
    context = ssl.create_default_context(cadata=bundle.decode())
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
            context.wrap_socket(raw, server_hostname="127.0.0.1"),
        ):
            return None
    except ssl.SSLError as error:
        return str(error)


class BundleHistory:
    """The configuration's caBundle, read every 0.5 s from a thread: what an API server may still hold."""

    def __init__(self, cluster: Sandbox, name: str) -> None:
        self.cluster = cluster
        self.name = name
        self.seen: list[tuple[float, bytes]] = [(time.monotonic(), configuration_bundle(cluster, name))]
        self.most_cas = 1
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._follow, daemon=True)
        self.thread.start()

    def _follow(self) -> None:
        while not self.stop.wait(0.5):
            bundle = configuration_bundle(self.cluster, self.name)
            self.most_cas = max(self.most_cas, len(x509.load_pem_x509_certificates(bundle)))
            if bundle != self.seen[-1][1]:
                self.seen.append((time.monotonic(), bundle))

    def recent(self, within: float) -> list[bytes]:
        """Every bundle the configuration carried within the last `within` seconds."""
        now = time.monotonic()
        kept = [bundle for at, bundle in self.seen if now - at <= within]
        older = [bundle for at, bundle in self.seen if now - at > within]
        return [*older[-1:], *kept]


def test_a_rotation_under_a_stream_of_pod_creations_leaves_no_pod_unpinned(  # noqa: PLR0917 - the fixtures
    cluster: Sandbox,
    namespace: str,
    tmp_path: Path,
    webhooks: list[Webhook],
    configurations: list[str],
    node: GpuNode,
) -> None:
    """A certificate of 120 s, a third of it left, is renewed by the server itself (no helm, no restart) while pods
    matching placements are created one after another through the API server, the configuration failing closed: every
    pod is created and pinned, and every new connection verifies with every bundle the configuration carried in the
    last 5 s. The pods go to a node of their own: some are deleted while HAMi binds them, and HAMi goes on counting
    those."""
    make_secret(cluster, namespace)
    first = secret_data(cluster, namespace)
    name = f"hami-place-test-{namespace}-rotation"
    port = free_port()
    # The configuration is there before the server: with none, its first pass would serve the new pair at once.
    hook = {
        "name": "rotation.placement.hami-place.sandbox",
        "clientConfig": {
            "url": f"https://127.0.0.1:{port}/mutate",
            "caBundle": base64.b64encode(first["ca.crt"]).decode(),
        },
        "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
        "namespaceSelector": {"matchLabels": {"hami-place-test": namespace}},
        "sideEffects": "NoneOnDryRun",
        # Fail closed: a pod the API server could not have admitted for a TLS failure is refused, not let through.
        "failurePolicy": "Fail",
        "reinvocationPolicy": "IfNeeded",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": 10,
    }
    client.AdmissionregistrationV1Api(cluster.api_client()).create_mutating_webhook_configuration(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [hook],
        }
    )
    configurations.append(name)
    webhook = start(cluster, tmp_path, "--webhook-configuration", name, tls_secret=f"{namespace}/{SECRET}", port=port)
    webhooks.append(webhook)
    assert webhook.url == hook["clientConfig"]["url"]
    core = client.CoreV1Api(cluster.api_client())

    def called() -> bool:
        before = total_admissions(webhook)
        core.create_namespaced_pod(namespace, gpu_pod("probe-", {"probe": "yes"}), dry_run="All")
        return total_admissions(webhook) > before

    wait_for(called, "the API server to call the webhook")

    history = BundleHistory(cluster, name)
    pinned: list[str] = []
    unverified: list[str] = []
    deadline = time.monotonic() + ROTATION_DEADLINE_SECONDS
    try:
        index = 0
        while True:
            data = secret_data(cluster, namespace)
            done = (
                data["tls.crt"] != first["tls.crt"]
                and len(x509.load_pem_x509_certificates(data["ca.crt"])) == 1
                and configuration_bundle(cluster, name) == data["ca.crt"]
            )
            if done or time.monotonic() > deadline:
                break
            index += 1
            placement = f"stream-{index}"
            create_placement(
                cluster, namespace, placement, {"stream": str(index)}, [f"gpu-{index % 2}/10"], node=node.name
            )
            wait_for(lambda p=placement: sees_placement(webhook, namespace, p), "the webhook to see the placement")
            pod = core.create_namespaced_pod(namespace, gpu_pod("stream-", {"stream": str(index)}))
            assert CLAIM in (pod.metadata.annotations or {}), f"pod {pod.metadata.name} was admitted unpinned"
            pinned.append(pod.metadata.name)
            core.delete_namespaced_pod(pod.metadata.name, namespace, grace_period_seconds=0)
            for bundle in history.recent(LATE_SECONDS):
                why = verifies(webhook.port, bundle)
                if why is not None:
                    unverified.append(f"pod {index}: a bundle of the last {LATE_SECONDS:g} s does not verify: {why}")
    finally:
        history.stop.set()
    assert done, f"the rotation did not finish in {ROTATION_DEADLINE_SECONDS} s: {webhook.log.read_text()[-3000:]}"
    assert unverified == []
    assert len(pinned) == index, "every pod created while the certificate moved was pinned"
    assert history.most_cas == 2, "the configuration trusted both CAs for a while"

    served = x509.load_pem_x509_certificate(ssl.get_server_certificate(("127.0.0.1", webhook.port)).encode())
    renewed = x509.load_pem_x509_certificate(data["tls.crt"])
    assert served == renewed, "the listener serves the renewed certificate, without a restart"
    old_ca = x509.load_pem_x509_certificate(first["ca.crt"])
    new_ca = x509.load_pem_x509_certificate(data["ca.crt"])
    assert new_ca != old_ca
    renewed.verify_directly_issued_by(new_ca)
    lifetime = renewed.not_valid_after_utc - renewed.not_valid_before_utc
    assert abs(lifetime.total_seconds() - (VALIDITY_SECONDS + 300)) < 2, "the renewal keeps the lifetime"
    assert webhook.metric("hami_place_serving_certificate_not_after_timestamp_seconds") == pytest.approx(
        renewed.not_valid_after_utc.timestamp()
    )
    assert 0 < webhook.metric("hami_place_serving_certificate_expiry_seconds") <= VALIDITY_SECONDS
