"""What the webhook tests share: registering a webhook process with the API server, pods and placements to create."""

from __future__ import annotations

import base64
import contextlib
import ipaddress
import json
import os
import ssl
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from kubernetes import client

from sandbox import binaries
from sandbox.cluster import Sandbox, wait_for
from sandbox.pki import Authority, KeyPair
from sandbox.webhook import Webhook, configuration
from tests.cluster.cli_harness import placements

GROUP, VERSION, PLURAL = "scheduling.hami.placement.com", "v1", "hamipodplacements"
A100_1 = "gpu-a100-1"


def sees_placement(webhook: Webhook, namespace: str, name: str) -> bool:
    """Whether the webhook's cache lists that placement yet."""
    status, body = webhook.get(f"/api/v1/placements?namespace={namespace}")
    return status == 200 and any(p["name"] == name for p in body["placements"])


def register(
    cluster: Sandbox, configurations: list[str], namespace: str, hooks: list[tuple[Webhook, dict[str, Any]]]
) -> None:
    """One MutatingWebhookConfiguration for the namespace; each webhook with its own objectSelector."""
    name = f"hami-place-test-{namespace}-{len(configurations)}"
    body = configuration(name, hooks, {"matchLabels": {"hami-place-test": namespace}})
    client.AdmissionregistrationV1Api(cluster.api_client()).create_mutating_webhook_configuration(body)
    configurations.append(name)
    core = client.CoreV1Api(cluster.api_client())
    for webhook, object_selector in hooks:
        labels = dict(object_selector.get("matchLabels") or {})

        def called(webhook: Webhook = webhook, labels: dict[str, str] = labels) -> bool:
            before = total_admissions(webhook)
            core.create_namespaced_pod(namespace, gpu_pod("probe-", {**labels, "probe": "yes"}), dry_run="All")
            return total_admissions(webhook) > before

        wait_for(called, "the API server to call the new webhook")


def total_admissions(webhook: Webhook) -> float:
    return sum(
        webhook.metric(f'hami_place_admissions_total{{result="{result}"}}')
        for result in ("ignored", "no_placement", "pinned", "reinvoked", "not_honoured", "dry_run", "error")
    )


def gpu_pod(generate_name: str, labels: dict[str, str], *, gpus: int = 1, name: str = "") -> dict[str, Any]:
    metadata: dict[str, Any] = {"labels": labels}
    if name:
        metadata["name"] = name
    else:
        metadata["generateName"] = generate_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "schedulerName": "hami-scheduler",
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {"name": "main", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
            ],
        },
    }


def create_placement(
    cluster: Sandbox,
    namespace: str,
    name: str,
    selector: dict[str, str],
    devices: list[str],
    *,
    node: str = A100_1,
    evict: str = "",
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "reqID": f"req-{name}-{uuid.uuid4().hex[:6]}",
        "podSelector": {"matchLabels": selector},
        "nodeName": node,
        "gpuDevices": devices,
    }
    if evict:
        spec["evictPod"] = evict
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "HamiPodPlacement",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
    created: dict[str, Any] = client.CustomObjectsApi(cluster.api_client()).create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, body
    )
    return created


def read_placement(cluster: Sandbox, namespace: str, name: str) -> dict[str, Any]:
    result: dict[str, Any] = client.CustomObjectsApi(cluster.api_client()).get_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, name
    )
    return result


def status_of(cluster: Sandbox, namespace: str, name: str) -> dict[str, Any]:
    return read_placement(cluster, namespace, name).get("status") or {}


def events_of(cluster: Sandbox, namespace: str, name: str) -> list[str]:
    listed = client.CoreV1Api(cluster.api_client()).list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={name},involvedObject.kind=HamiPodPlacement"
    )
    return [event.reason for event in listed.items]


def wait_for_events(cluster: Sandbox, namespace: str, name: str, *reasons: str) -> None:
    """Wait until the placement has Events of all these reasons: the server records them from its events thread,
    after the status write a test has just seen."""
    wait_for(lambda: set(reasons) <= set(events_of(cluster, namespace, name)), f"the {', '.join(reasons)} Event(s)")


def hostname_terms(pod: client.V1Pod) -> list[list[tuple[str, str, list[str]]]]:
    required = pod.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution
    return [
        [(e.key, e.operator, e.values) for e in term.match_expressions or []] for term in required.node_selector_terms
    ]


PLACEMENT = "scheduling.hami.placement.com/placement"
CLAIM = "scheduling.hami.placement.com/claim"


def claims_settled(cluster: Sandbox, namespace: str) -> bool:
    """True once no claim waits for its pod: every claimed placement is tied to the stored pod carrying it."""
    for placement in placements(cluster, namespace):
        status = placement.get("status") or {}
        if status.get("claim") and not (status.get("consumedBy") or {}).get("uid"):
            return False
    return True


def assert_consumed_at_most_once(cluster: Sandbox, namespace: str) -> dict[str, str]:
    """No placement consumed twice, none lost: each claim token on at most one stored pod, every pinned pod holding
    its placement's current claim and named as its consumer, every consumed placement's pod stored. Returns
    placement name -> the pod it was consumed by."""
    pods = client.CoreV1Api(cluster.api_client()).list_namespaced_pod(namespace).items
    pinned = [pod for pod in pods if CLAIM in (pod.metadata.annotations or {})]
    tokens = [pod.metadata.annotations[CLAIM] for pod in pinned]
    assert len(tokens) == len(set(tokens)), f"two stored pods carry one claim: {sorted(tokens)}"
    statuses = {p["metadata"]["name"]: p.get("status") or {} for p in placements(cluster, namespace)}
    for pod in pinned:
        annotations = pod.metadata.annotations
        status = statuses.get(annotations.get(PLACEMENT, ""), {})
        assert (status.get("claim") or {}).get("token") == annotations[CLAIM], (
            f"pod {pod.metadata.name} is pinned by a claim placement {annotations.get(PLACEMENT)} does not hold: "
            f"{status}"
        )
        assert (status.get("consumedBy") or {}).get("uid") == pod.metadata.uid, (pod.metadata.name, status)
    by_uid = {pod.metadata.uid: pod.metadata.name for pod in pinned}
    consumed = {}
    for name, status in statuses.items():
        uid = (status.get("consumedBy") or {}).get("uid")
        if uid:
            assert uid in by_uid, f"placement {name} is consumed by a pod that is not stored or not pinned: {status}"
            consumed[name] = by_uid[uid]
    return consumed


def create_in_threads(core: client.CoreV1Api, namespace: str, pods: list[dict[str, Any]]) -> list[client.V1Pod]:
    """Create the pods from as many threads, released together; every creation must succeed (none blocked)."""
    created: list[client.V1Pod] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(pods))

    def create(pod: dict[str, Any]) -> None:
        try:
            barrier.wait()
            created.append(core.create_namespaced_pod(namespace, pod))
        except BaseException as error:  # collected and asserted on in the test's thread
            errors.append(error)

    threads = [threading.Thread(target=create, args=(pod,)) for pod in pods]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, f"pod creations failed: {errors}"
    return created


def served_certificate(port: int) -> str:
    """The PEM certificate the listener on the port serves to a new connection (not verified)."""
    return ssl.get_server_certificate(("127.0.0.1", port))


def established_to(port: int) -> int:
    """How many established TCP connections (IPv4 loopback) have this local port: the API server's kept-alive
    connections to a webhook, once the test's own are closed."""
    count = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "01":
            count += 1
    return count


def expired_serving_pair(authority: Authority, stem: str) -> KeyPair:
    """A serving certificate for 127.0.0.1 signed by the authority, expired since yesterday."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, stem)]))
        .issuer_name(authority.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(days=2))
        .not_valid_after(now - timedelta(days=1))
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .sign(authority.key, hashes.SHA256())
    )
    pair = KeyPair(authority.directory / f"{stem}.crt", authority.directory / f"{stem}.key")
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pair.key.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return pair


def install_pair(pair: KeyPair, cert_file: Path, key_file: Path) -> str:
    """Rotate the served files to this pair, each replaced in one rename; returns the new certificate's PEM."""
    os.replace(pair.key, key_file)
    os.replace(pair.cert, cert_file)
    return cert_file.read_text()


def wall_clock_ahead(seconds: int) -> dict[str, str]:
    """The environment that runs a process with its wall clock `seconds` ahead, its monotonic clock untouched
    (libfaketime: the system's, else its Debian package unpacked into the binaries' cache)."""
    return {
        "LD_PRELOAD": str(binaries.libfaketime()),
        "FAKETIME": f"+{seconds}s",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }


class SlowValidator:
    """A validating admission webhook that answers each pod after `delay` seconds, so that a pod is stored that
    much after the mutating webhook wrote its claim (a pod stored late); a pod labelled deny=yes is refused then,
    so that it is never stored (as when the API server gives up on the creation). Serves with the given files."""

    def __init__(self, cert_file: Path, key_file: Path, delay: float) -> None:
        self.delay = delay
        self.calls = 0
        # The placement named on each pod it refused (by the mutating webhook's annotation).
        self.refused: list[str] = []
        validator = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                validator.calls += 1
                time.sleep(validator.delay)
                metadata = body["request"]["object"]["metadata"]
                response: dict[str, Any] = {"uid": body["request"]["uid"], "allowed": True}
                if (metadata.get("labels") or {}).get("deny") == "yes":
                    validator.refused.append((metadata.get("annotations") or {}).get(PLACEMENT, ""))
                    response.update(allowed=False, status={"code": 403, "message": "refused by the test's validator"})
                answer = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet: the test says what went wrong."""

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(cert_file), str(key_file))
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@contextlib.contextmanager
def slow_validation(
    cluster: Sandbox, namespace: str, certs: Path, delay: float, labels: dict[str, str]
) -> Iterator[SlowValidator]:
    """A SlowValidator registered for the namespace's pods with these labels (failurePolicy Fail, so a pod is never
    stored before it answered); unregistered and stopped afterwards."""
    validator = SlowValidator(certs / "tls.crt", certs / "tls.key", delay)
    name = f"hami-place-test-slow-{namespace}"
    body = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [
            {
                "name": "slow.placement.hami-place.sandbox",
                "clientConfig": {
                    "url": f"https://127.0.0.1:{validator.port}/validate",
                    "caBundle": base64.b64encode((certs / "ca.crt").read_bytes()).decode(),
                },
                "rules": [
                    {
                        "operations": ["CREATE"],
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "resources": ["pods"],
                        "scope": "Namespaced",
                    }
                ],
                "namespaceSelector": {"matchLabels": {"hami-place-test": namespace}},
                "objectSelector": {"matchLabels": labels},
                "sideEffects": "None",
                "failurePolicy": "Fail",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 30,
            }
        ],
    }
    api = client.AdmissionregistrationV1Api(cluster.api_client())
    api.create_validating_webhook_configuration(body)
    try:
        yield validator
    finally:
        api.delete_validating_webhook_configuration(name)
        validator.close()


def sa_kubeconfig(cluster: Sandbox, namespace: str, account: str, path: Path) -> Path:
    """A kubeconfig that authenticates as a ServiceAccount (a short-lived token), like the pod would."""
    token = cluster.kubectl("create", "token", account, "-n", namespace, "--duration=1h").stdout.strip()
    admin = json.loads(cluster.kubeconfig.read_text())
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "sa",
                "clusters": [{"name": "sandbox", "cluster": admin["clusters"][0]["cluster"]}],
                "users": [{"name": account, "user": {"token": token}}],
                "contexts": [
                    {"name": "sa", "context": {"cluster": "sandbox", "user": account, "namespace": namespace}}
                ],
            }
        )
    )
    return path
