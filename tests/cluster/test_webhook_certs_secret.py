"""`hami-place-webhook certs` against the API server: the TLS Secret (created, then reused) and the caBundle patch."""

from __future__ import annotations

import base64
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from kubernetes import client

from sandbox.cluster import Sandbox

pytestmark = pytest.mark.cluster


def certs(cluster: Sandbox, *args: str) -> subprocess.CompletedProcess[str]:
    beside = Path(sys.executable).with_name("hami-place-webhook")
    command = str(beside) if beside.exists() else shutil.which("hami-place-webhook")
    assert command, "hami-place-webhook is not installed (pip install -e .)"
    return subprocess.run(
        [command, "certs", "--kubeconfig", str(cluster.kubeconfig), *args], capture_output=True, text=True, check=False
    )


def test_the_secret_is_created_then_reused_while_it_is_still_good(
    cluster: Sandbox, namespace: str, tmp_path: Path
) -> None:
    dns = ["gpu-descheduler-webhook." + namespace + ".svc"]
    first = certs(cluster, "--secret", f"{namespace}/webhook-tls", "--dns", *dns)
    assert first.returncode == 0, first.stderr
    assert "new certificate stored" in first.stdout
    core = client.CoreV1Api(cluster.api_client())
    stored = core.read_namespaced_secret("webhook-tls", namespace)
    assert stored.type == "kubernetes.io/tls"
    assert set(stored.data) == {"tls.crt", "tls.key", "ca.crt"}

    again = certs(cluster, "--secret", f"{namespace}/webhook-tls", "--dns", *dns, "--out-dir", str(tmp_path))
    assert again.returncode == 0, again.stderr
    assert "still good, reused" in again.stdout
    kept = core.read_namespaced_secret("webhook-tls", namespace)
    assert kept.data == stored.data
    assert (tmp_path / "ca.crt").read_bytes() == base64.b64decode(stored.data["ca.crt"])

    # New names: a rotation is staged (the server, serving the Secret, finishes it with an overlap), never a
    # replacement of the pair in use; both CAs are trusted meanwhile.
    wider = certs(cluster, "--secret", f"{namespace}/webhook-tls", "--dns", *dns, "other.example")
    assert "a new certificate is staged" in wider.stdout
    staged = core.read_namespaced_secret("webhook-tls", namespace).data
    assert staged["tls.crt"] == stored.data["tls.crt"]
    assert base64.b64decode(staged["ca.crt"]).startswith(base64.b64decode(stored.data["ca.crt"]))
    assert base64.b64decode(staged["ca.crt"]).count(b"BEGIN CERTIFICATE") == 2
    assert {"next.crt", "next.key"} <= set(staged)
    underway = certs(cluster, "--secret", f"{namespace}/webhook-tls", "--dns", *dns, "other.example")
    assert "a certificate rotation is under way" in underway.stdout
    assert core.read_namespaced_secret("webhook-tls", namespace).data == staged


def test_patch_webhook_sets_the_ca_bundle_of_every_webhook_and_tolerates_a_missing_configuration(
    cluster: Sandbox, namespace: str, tmp_path: Path
) -> None:
    name = f"hami-place-certs-{namespace}"
    hook = {
        "clientConfig": {"url": "https://127.0.0.1:1/mutate"},
        "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}],
        "namespaceSelector": {"matchLabels": {"hami-place-test": namespace}},
        "objectSelector": {"matchLabels": {"never": "matches"}},
        "sideEffects": "NoneOnDryRun",
        "failurePolicy": "Ignore",
        "admissionReviewVersions": ["v1"],
    }
    api = client.AdmissionregistrationV1Api(cluster.api_client())
    missing = certs(cluster, "--out-dir", str(tmp_path / "a"), "--ip", "127.0.0.1", "--patch-webhook", name)
    assert missing.returncode == 0, missing.stderr
    assert "does not exist yet" in missing.stdout
    api.create_mutating_webhook_configuration(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [{"name": "one.hami-place.test", **hook}, {"name": "two.hami-place.test", **hook}],
        }
    )
    try:
        done = certs(cluster, "--out-dir", str(tmp_path / "b"), "--ip", "127.0.0.1", "--patch-webhook", name)
        assert done.returncode == 0, done.stderr
        assert "caBundle set on 2 webhook(s)" in done.stdout
        ca = (tmp_path / "b" / "ca.crt").read_bytes()
        stored = api.read_mutating_webhook_configuration(name)
        assert [base64.b64decode(w.client_config.ca_bundle) for w in stored.webhooks] == [ca, ca]
        assert [w.client_config.url for w in stored.webhooks] == ["https://127.0.0.1:1/mutate"] * 2
    finally:
        api.delete_mutating_webhook_configuration(name)
