"""The client-certificate option of the webhook port (issue 23 item 5), on a sandbox of its own whose API server
presents a client certificate to the webhook (kube-apiserver --admission-control-config-file, "Authenticate
apiservers"): the API server's reviews pin pods; a review posted without a certificate, or with one the same CA
signed for another name (the sandbox's admin), is refused before HTTP.
"""

from __future__ import annotations

import json
import socket
import ssl
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from sandbox.cluster import Sandbox, WebhookClient, alive, free_port, wait_for
from sandbox.prepare import prepare
from sandbox.webhook import Webhook, start
from tests.cluster.webhook_harness import create_placement, gpu_pod, register, sees_placement

pytestmark = pytest.mark.cluster
PLACEMENT = "scheduling.hami.placement.com/placement"
# The common name of the certificate the sandbox's API server presents to the webhook.
API_SERVER_NAME = "hami-place-apiserver-client"


@pytest.fixture(scope="module")
def webhook_port() -> int:
    """The webhook's HTTPS port, chosen before the API server starts: its admission kubeconfig names it."""
    return free_port()


@pytest.fixture(scope="module")
def cluster(webhook_port: int) -> Iterator[Sandbox]:
    """This file's own sandbox (the session's API server presents no client certificate)."""
    sandbox = Sandbox.start(webhook_client=WebhookClient(API_SERVER_NAME, (f"127.0.0.1:{webhook_port}",)))
    pids = sandbox.pids()
    try:
        prepare(sandbox)
        yield sandbox
    finally:
        sandbox.stop()
    assert not [pid for pid in pids if alive(pid)], "sandbox processes still running after stop"


def review(namespace: str, app: str) -> bytes:
    """An AdmissionReview for a pod labelled app=`app`, as a forger would post it."""
    pod = gpu_pod("forged-", {"app": app})
    pod["metadata"] |= {"name": "forged", "namespace": namespace}
    request = {
        "uid": str(uuid.uuid4()),
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": namespace,
        "name": "forged",
        "operation": "CREATE",
        "userInfo": {"username": "forger"},
        "object": pod,
    }
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}).encode()


def post(webhook: Webhook, body: bytes, certificate: tuple[Path, Path] | None) -> bytes:
    """POST /mutate over TLS, presenting `certificate` (cert, key) when given: the raw answer, b"" when closed."""
    context = ssl.create_default_context(cafile=str(webhook.certs / "ca.crt"))
    if certificate is not None:
        context.load_cert_chain(str(certificate[0]), str(certificate[1]))
    head = f"POST /mutate HTTP/1.1\r\nHost: w\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
    with (
        socket.create_connection(("127.0.0.1", webhook.port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        tls.sendall(head.encode() + b"Connection: close\r\n\r\n" + body)
        return tls.recv(65536)


def refused(webhook: Webhook, body: bytes, certificate: tuple[Path, Path] | None) -> bool:
    """Whether the post got no HTTP answer: a TLS alert or the connection closed."""
    try:
        return post(webhook, body, certificate) == b""
    except (ssl.SSLError, ConnectionError):
        return True


@pytest.fixture
def guarded(cluster: Sandbox, webhook_port: int, tmp_path: Path, webhooks: list[Webhook]) -> Webhook:
    """The webhook on the port the API server's admission kubeconfig names, requiring its certificate by name."""
    assert cluster.authority is not None
    webhook = start(
        cluster,
        tmp_path,
        f"--client-ca-file={cluster.authority.cert_path}",
        f"--client-cert-name={API_SERVER_NAME}",
        port=webhook_port,
    )
    webhooks.append(webhook)
    return webhook


def test_the_api_servers_certificate_pins_pods_and_a_certificate_of_another_name_or_none_is_refused(
    cluster: Sandbox, guarded: Webhook, namespace: str, configurations: list[str]
) -> None:
    webhook = guarded
    assert cluster.authority is not None
    # register() waits until the API server's dry-run reviews reach the webhook: it presented its certificate.
    register(cluster, configurations, namespace, [(webhook, {})])
    create_placement(cluster, namespace, "target", {"app": "target"}, ["gpu-0"], node="gpu-a100-0")
    wait_for(lambda: sees_placement(webhook, namespace, "target"), "the webhook to see the placement")

    # A forged review of a pod the placement selects: had it been answered, it would hold the placement.
    body = review(namespace, "target")
    pki = cluster.workdir / "pki"
    admin = (pki / "admin.crt", pki / "admin.key")  # signed by the same CA: kubernetes-admin, system:masters
    assert refused(webhook, body, None), "no client certificate: refused in the handshake"
    assert refused(webhook, body, admin), "the right CA, the wrong name: closed before HTTP"
    assert webhook.metric('hami_place_webhook_connections_refused_total{reason="client-certificate-name"}') >= 1
    named = cluster.authority.issue("named", API_SERVER_NAME)
    answer = post(webhook, review(namespace, "elsewhere"), (named.cert, named.key))
    assert answer.startswith(b"HTTP/1.1 200"), "the right name is answered"

    pod = client.CoreV1Api(cluster.api_client()).create_namespaced_pod(namespace, gpu_pod("t-", {"app": "target"}))
    assert (pod.metadata.annotations or {}).get(PLACEMENT) == "target", "the API server's review pinned the pod"
    status, info = webhook.get("/api/v1/cluster-info")
    assert status == 200 and not [w for w in info["warnings"] if "takes an AdmissionReview from anyone" in w]
