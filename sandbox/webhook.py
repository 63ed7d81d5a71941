"""Runs `hami-place-webhook serve` beside a sandbox and registers it with the API server, for tests and the demo."""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandbox.cluster import Sandbox, free_port, wait_for


def webhook_command() -> str:
    """The console script installed beside this interpreter (the venv), else the one on PATH."""
    beside = Path(sys.executable).with_name("hami-place-webhook")
    found = str(beside) if beside.exists() else shutil.which("hami-place-webhook")
    if not found:
        raise FileNotFoundError("hami-place-webhook is not installed; run pip install -e . (make does)")
    return found


@dataclass
class Webhook:
    """One `hami-place-webhook serve` subprocess, with its ports, certificates and log."""

    process: subprocess.Popen[bytes]
    port: int
    api_port: int
    certs: Path
    log: Path
    probe_port: int = 0

    @property
    def api(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}/mutate"

    def ca_bundle(self) -> str:
        return base64.b64encode((self.certs / "ca.crt").read_bytes()).decode()

    def get(self, path: str) -> tuple[int, Any]:
        """GET from the plain-HTTP API: (status, decoded JSON body)."""
        try:
            with urllib.request.urlopen(self.api + path, timeout=10) as reply:
                return reply.status, json.loads(reply.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"null")

    def metric(self, sample: str) -> float:
        """The value of one Prometheus sample line from /metrics (0 when absent)."""
        with urllib.request.urlopen(self.api + "/metrics", timeout=10) as reply:
            for line in reply.read().decode().splitlines():
                if line.startswith(sample + " "):
                    return float(line.split()[-1])
        return 0.0

    def post_mutate(self, body: bytes, content_type: str = "application/json") -> tuple[int, Any]:
        """POST a raw body to /mutate over TLS, as the API server would."""
        context = ssl.create_default_context(cafile=str(self.certs / "ca.crt"))
        request = urllib.request.Request(self.url, data=body, method="POST", headers={"Content-Type": content_type})
        try:
            with urllib.request.urlopen(request, timeout=20, context=context) as reply:
                return reply.status, json.loads(reply.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"null")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start(
    sandbox: Sandbox,
    workdir: Path,
    *extra: str,
    timeout: float = 60,
    kubeconfig: Path | None = None,
    port: int | None = None,
) -> Webhook:
    """Certificates from `hami-place-webhook certs`, then `serve` on free loopback ports (the HTTPS one `port` when
    given), ready on return; as the sandbox's admin unless `kubeconfig` gives another identity."""
    certs = workdir / f"certs-{uuid.uuid4().hex[:6]}"
    subprocess.run(
        [webhook_command(), "certs", "--out-dir", str(certs), "--ip", "127.0.0.1", "--dns", "localhost"],
        check=True,
        capture_output=True,
    )
    port, api_port, probe_port = port or free_port(), free_port(), free_port()
    log = workdir / f"webhook-{port}.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [
                webhook_command(),
                "serve",
                "--kubeconfig",
                str(kubeconfig or sandbox.kubeconfig),
                "--bind-address",
                "127.0.0.1",
                "--webhook-port",
                str(port),
                "--api-port",
                str(api_port),
                "--probe-port",
                str(probe_port),
                "--tls-cert-file",
                str(certs / "tls.crt"),
                "--tls-key-file",
                str(certs / "tls.key"),
                # Nothing routes to a test's webhook through a Service: a short drain keeps teardowns quick.
                "--shutdown-grace",
                "3",
                *extra,
            ],
            stdout=sink,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    webhook = Webhook(process, port, api_port, certs, log, probe_port)

    def ready() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"hami-place-webhook exited with {process.returncode}: {log.read_text()[-2000:]}")
        try:
            return webhook.get("/readyz")[0] == 200
        except OSError:
            return False

    try:
        wait_for(ready, "hami-place-webhook to be ready", timeout)
    except BaseException:
        webhook.stop()
        raise
    return webhook


def configuration(
    name: str, entries: list[tuple[Webhook, dict[str, Any]]], namespace_selector: dict[str, Any]
) -> dict[str, Any]:
    """A MutatingWebhookConfiguration as the chart renders it, one webhook entry per (process, objectSelector)."""
    webhooks = [
        {
            "name": f"w{index}.placement.hami-place.sandbox",
            "clientConfig": {"url": webhook.url, "caBundle": webhook.ca_bundle()},
            "rules": [
                {
                    "operations": ["CREATE"],
                    "apiGroups": [""],
                    "apiVersions": ["v1"],
                    "resources": ["pods"],
                    "scope": "Namespaced",
                }
            ],
            "namespaceSelector": namespace_selector,
            "objectSelector": object_selector,
            "sideEffects": "NoneOnDryRun",
            "failurePolicy": "Ignore",
            "reinvocationPolicy": "IfNeeded",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 10,
        }
        for index, (webhook, object_selector) in enumerate(entries)
    ]
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": webhooks,
    }
