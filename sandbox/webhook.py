"""Runs `hami-place-webhook serve` beside a sandbox and registers it with the API server, for tests and the demo."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import shutil
import signal
import ssl
import stat
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubectl_hami_place.core.reservation import RoomKey
from sandbox import forked
from sandbox.cluster import Sandbox, die_with_parent_process, free_port, primary_address, wait_for

# --shutdown-grace of a webhook started here: it listens for a third of it after SIGTERM, paid at every stop.
SHUTDOWN_GRACE = 0.3
# How long `Webhook.stop` waits for the process after SIGTERM before it asks for its threads and kills it.
STOP_SECONDS = 15
CERT_FILES = ("ca.crt", "tls.crt", "tls.key")
# A process run under libfaketime (tests' wall_clock_ahead) dates its certificate by its own clock.
CLOCK_ENVIRONMENT = ("LD_PRELOAD", "FAKETIME", "FAKETIME_DONT_FAKE_MONOTONIC")
# What `certs` wrote, by (command, address, clock environment): file name -> (bytes, mode).
_issued: dict[tuple[str, ...], dict[str, tuple[bytes, int]]] = {}


def webhook_command() -> str:
    """The console script installed beside this interpreter (the venv), else the one on PATH."""
    beside = Path(sys.executable).with_name("hami-place-webhook")
    found = str(beside) if beside.exists() else shutil.which("hami-place-webhook")
    if not found:
        raise FileNotFoundError("hami-place-webhook is not installed; run pip install -e . (make does)")
    return found


@dataclass
class Webhook:
    """One `hami-place-webhook serve` process (forked or exec'd, see `start`), with its ports, certificates and log."""

    process: subprocess.Popen[bytes] | forked.Forked
    port: int
    api_port: int
    certs: Path
    log: Path
    probe_port: int = 0
    address: str = "127.0.0.1"

    @property
    def api(self) -> str:
        return f"http://{self.address}:{self.api_port}"

    @property
    def url(self) -> str:
        return f"https://{self.address}:{self.port}/mutate"

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

    def terminate(self) -> None:
        """SIGTERM, without waiting: the server drains for its --shutdown-grace, so stop several, then wait."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)

    def stop(self) -> None:
        """SIGTERM and wait; a server still running after STOP_SECONDS is made to print its threads (SIGABRT under
        PYTHONFAULTHANDLER) into a warning, then killed: it outlived its --shutdown-grace, and the stack says why."""
        self.terminate()
        try:
            self.process.wait(timeout=STOP_SECONDS)
        except subprocess.TimeoutExpired:
            self.process.send_signal(signal.SIGABRT)
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            warnings.warn(
                f"hami-place-webhook on port {self.port} still ran {STOP_SECONDS} s after SIGTERM; its log ends:\n"
                + self.log.read_text(errors="replace")[-6000:],
                stacklevel=2,
            )


def write_certificates(command: str, certs: Path, address: str) -> None:
    """ca.crt, tls.crt and tls.key for `address` in the new directory `certs`: `command certs` runs once per process
    and address (about a second each), then each webhook gets its own copy, which a test may replace under it."""
    key = (command, address, *(os.environ.get(name, "") for name in CLOCK_ENVIRONMENT))
    issued = _issued.get(key)
    if issued is None:
        subprocess.run(
            [command, "certs", "--out-dir", str(certs), "--ip", address, "--dns", "localhost"],
            check=True,
            capture_output=True,
        )
        _issued[key] = {
            name: ((certs / name).read_bytes(), stat.S_IMODE((certs / name).stat().st_mode)) for name in CERT_FILES
        }
        return
    certs.mkdir(parents=True)
    for name, (data, mode) in issued.items():
        with os.fdopen(os.open(certs / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode), "wb") as handle:
            handle.write(data)


def room_key_file(sandbox: Sandbox) -> Path:
    """The sandbox's room key (`--room-key-file`), written once: every server a test starts shares it, as the chart's
    replicas share theirs, and a test that keeps a room itself seals it with `room_key`."""
    path = sandbox.workdir / "room.key"
    if not path.exists():
        partial = path.with_name(f".room.key.{uuid.uuid4().hex}")
        partial.write_text(secrets.token_urlsafe(48))
        with contextlib.suppress(FileExistsError):
            os.link(partial, path)
        partial.unlink()
    return path


def room_key(sandbox: Sandbox) -> RoomKey:
    """The key the sandbox's servers seal rooms with, as they read it."""
    return RoomKey(room_key_file(sandbox).read_bytes().strip())


def start(
    sandbox: Sandbox,
    workdir: Path,
    *extra: str,
    timeout: float = 60,
    kubeconfig: Path | None = None,
    address: str = "127.0.0.1",
    die_with_parent: bool = False,
    tls_secret: str = "",
    port: int | None = None,
    command: str = "",
) -> Webhook:
    """Certificates from `hami-place-webhook certs` (see write_certificates), then `serve` on free ports of `address`
    (loopback unless a Service must reach it, see `expose`), ready on return; as the sandbox's admin unless
    `kubeconfig` gives another identity; the HTTPS port is `port` when given. With `tls_secret` (NAMESPACE/NAME, give
    --webhook-configuration in `extra`) it serves that Secret's certificate instead of files. `command` runs another
    build's console script (a bench's baseline) instead of this one's."""
    command = command or webhook_command()
    # another build (a bench's baseline) gets neither this build's room key nor a fork of this build's modules
    own_build = command == webhook_command()
    certs = workdir / f"certs-{uuid.uuid4().hex[:6]}"
    if tls_secret:
        tls = ["--tls-secret", tls_secret]
    else:
        write_certificates(command, certs, address)
        tls = ["--tls-cert-file", str(certs / "tls.crt"), "--tls-key-file", str(certs / "tls.key")]
    port, api_port, probe_port = port or free_port(), free_port(), free_port()
    log = workdir / f"webhook-{port}.log"
    argv = [
        command,
        "serve",
        "--kubeconfig",
        str(kubeconfig or sandbox.kubeconfig),
        "--bind-address",
        address,
        "--webhook-port",
        str(port),
        "--api-port",
        str(api_port),
        "--probe-port",
        str(probe_port),
        *tls,
        # Nothing routes to a test's webhook through a Service: a short drain keeps teardowns quick. A test
        # of the drain gives its own --shutdown-grace in `extra` (the later flag wins).
        "--shutdown-grace",
        str(SHUTDOWN_GRACE),
        *(("--room-key-file", str(room_key_file(sandbox))) if own_build else ()),
        *extra,
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONFAULTHANDLER": "1"}
    process: subprocess.Popen[bytes] | forked.Forked
    if die_with_parent or not own_build or any(env.get(name) for name in CLOCK_ENVIRONMENT):
        # exec'd: it must die with its starter, is another build, or loads libfaketime at exec
        with log.open("wb") as sink:
            process = subprocess.Popen(
                argv,
                stdout=sink,
                stderr=subprocess.STDOUT,
                env=env,
                preexec_fn=die_with_parent_process if die_with_parent else None,  # noqa: PLW1509
            )
    else:
        log.touch()
        process = forked.start(argv, env, str(log))
    webhook = Webhook(process, port, api_port, certs, log, probe_port, address)

    def ready() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"hami-place-webhook exited with {process.returncode}: {log.read_text()[-2000:]}")
        try:
            return webhook.get("/readyz")[0] == 200
        except OSError:
            return False

    try:
        # Ready about 0.7 s after it starts: polled every 0.3 s, each start waited some 0.17 s more than it needed.
        wait_for(ready, "hami-place-webhook to be ready", timeout, interval=0.05)
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


SERVICE_LABELS = {"app.kubernetes.io/name": "gpu-descheduler-webhook"}
STAND_IN_NODE = "gpu-a100-1"


def expose(sandbox: Sandbox, webhook: Webhook, namespace: str, name: str = "hami-place-webhook") -> None:
    """A Service for the webhook's API as the chart labels it, so that the plugin finds it (`status`, `version`).

    The API server's service proxy dials only endpoint addresses that a pod has, never loopback: a host-network
    pod on a kwok node stands in, with the webhook's (non-loopback) address as its IP.
    """
    stand_in = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{name}-stand-in", "namespace": namespace, "labels": {"hami-place-sandbox": "stand-in"}},
        "spec": {
            "nodeName": STAND_IN_NODE,
            "hostNetwork": True,
            "containers": [{"name": "api", "image": "registry.invalid/hami-place-stand-in:1"}],
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": SERVICE_LABELS},
        "spec": {"ports": [{"name": "api", "port": 8083, "targetPort": webhook.api_port}]},
    }
    endpoints = {
        "apiVersion": "v1",
        "kind": "Endpoints",
        "metadata": {"name": name, "namespace": namespace, "labels": SERVICE_LABELS},
        "subsets": [
            {
                "addresses": [
                    {
                        "ip": webhook.address,
                        "targetRef": {"kind": "Pod", "name": f"{name}-stand-in", "namespace": namespace},
                    }
                ],
                "ports": [{"name": "api", "port": webhook.api_port}],
            }
        ],
    }
    sandbox.kubectl("apply", "-f", "-", input=json.dumps(stand_in))
    ip = json.dumps({"status": {"podIP": webhook.address, "podIPs": [{"ip": webhook.address}]}})
    sandbox.kubectl(
        "patch", "pod", f"{name}-stand-in", "-n", namespace, "--subresource=status", "--type=merge", "-p", ip
    )
    manifest = {"apiVersion": "v1", "kind": "List", "items": [service, endpoints]}
    sandbox.kubectl("apply", "-f", "-", input=json.dumps(manifest))


def start_for_exploring(
    sandbox: Sandbox, workdir: Path, namespace: str, configuration_name: str, *extra: str
) -> Webhook:
    """The webhook as a cluster with the chart runs it, for `make sandbox-up` and the demo: registered for admission
    (every namespace but kube-system and its own) and, on a machine with a non-loopback address, reachable through a
    Service where the plugin looks (`status` reads its cluster-info, `version` its version). It dies with the
    process that started it."""
    address = primary_address() or "127.0.0.1"
    server = start(sandbox, workdir, *extra, address=address, die_with_parent=True)
    try:
        excluded = {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system", namespace]}
        # The cluster tests' namespaces carry this label and run webhooks of their own (a reused sandbox).
        not_a_test = {"key": "hami-place-test", "operator": "DoesNotExist"}
        config = configuration(configuration_name, [(server, {})], {"matchExpressions": [excluded, not_a_test]})
        sandbox.kubectl("apply", "-f", "-", input=json.dumps(config))
        if address != "127.0.0.1":
            expose(sandbox, server, namespace)
    except BaseException:
        server.stop()
        raise
    return server
