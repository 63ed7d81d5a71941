"""Starts and stops a real control plane on loopback: etcd, kube-apiserver, controller-manager, scheduler, kwok."""

from __future__ import annotations

import collections
import contextlib
import ctypes
import json
import os
import random
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar

import yaml

from sandbox import binaries, hami
from sandbox.pki import Authority, KeyPair, service_account_keys

SERVICE_CIDR = "10.96.0.0/16"
POD_CIDR = "10.244.0.0/16"
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
# The API server's audit log records the requests of this user (metadata, once each): a process a test runs with
# `identity_kubeconfig(AUDITED_USER)` has every API call it makes on record, and nothing else is slowed. It also
# records every eviction, whoever asks: which pod went through the Eviction API, on every release (the pod's
# DisruptionTarget condition says so only from 1.26).
AUDITED_USER = "hami-place-audited"
# Who `Sandbox.apply` writes as: the owner of the fields it sets.
FIELD_MANAGER = "hami-place-sandbox"
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "Metadata", "users": [AUDITED_USER]},
        {"level": "Metadata", "verbs": ["create"], "resources": [{"group": "", "resources": ["pods/eviction"]}]},
        {"level": "None"},
    ],
}
T = TypeVar("T")


@dataclass(frozen=True)
class Release:
    """The Kubernetes a sandbox runs: the binaries of its API server, controller manager and scheduler, and the
    KubeSchedulerConfiguration version that release reads (HAMi's chart renders v1beta2 up to 1.25, v1 after)."""

    version: str
    suffix: str
    scheduler_config: str
    scheduler_stop_seconds: float
    """How long kube-scheduler is given to exit on SIGTERM: 1.24's stops serving at once but, with leader election
    off, never exits."""

    def binary(self, name: str) -> str:
        """The component's name in sandbox.binaries for this release."""
        return name + self.suffix if name in {"kube-apiserver", "kube-controller-manager", "kube-scheduler"} else name


CURRENT = Release(binaries.KUBERNETES_VERSION, "", "kubescheduler.config.k8s.io/v1", 15)
OLDEST = Release(binaries.OLDEST_KUBERNETES_VERSION, "-oldest", "kubescheduler.config.k8s.io/v1beta2", 2)


@dataclass(frozen=True)
class WebhookClient:
    """The API server presents a client certificate with this common name when it calls a webhook at one of these
    `host:port` targets (kube-apiserver's --admission-control-config-file, "Authenticate apiservers")."""

    name: str
    targets: tuple[str, ...]


def wait_for(predicate: Callable[[], T], what: str, timeout: float = 60, interval: float = 0.3) -> T:
    """Polls until the predicate gives something truthy; the TimeoutError names what never came. Every 0.3 s: polled
    every 0.1 s (three times the kubectl processes and Event lists of its predicates) a `make test` took 664 s, against
    645 s and 619 s at 0.3 s, with no wait shorter to show for it."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


class SandboxError(RuntimeError):
    """The sandbox could not start; the message carries the failing component's last log lines."""


_LISTEN_PORTS = (10000, 32768)
_recent: collections.deque[int] = collections.deque(maxlen=512)


def free_port() -> int:
    """A port nobody listens on right now, below the kernel's ephemeral range: a port the kernel hands out (bind to 0)
    can be taken by any outgoing connection before our server binds it ("Address already in use" in CI). Each
    pytest-xdist worker draws from its own slice, and a port handed out lately is not handed out again, so two
    servers started together never get the same one."""
    low, high = _LISTEN_PORTS
    with contextlib.suppress(OSError, ValueError, IndexError):
        high = max(low + 2048, min(high, int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])))
    index = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
    count = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    width = (high - low) // count
    start, first = low + (index % count) * width, random.randrange(width)
    for offset in range(width):
        port = start + (first + offset) % width
        if port in _recent:
            continue
        with socket.socket() as s:
            try:
                s.bind(("0.0.0.0", port))
            except OSError:
                continue
        _recent.append(port)
        return port
    raise SandboxError(f"no free port in {start}..{start + width - 1}")


def primary_address() -> str | None:
    """This machine's non-loopback IPv4 address (the API server refuses to proxy to loopback), None without one;
    the UDP connect only picks the route, it sends nothing."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("198.51.100.1", 9))
        except OSError:
            return None
        address: str = probe.getsockname()[0]
    return None if address.startswith("127.") else address


def alive(pid: int) -> bool:
    """Whether a process with this pid still exists."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def die_with_parent_process() -> None:
    """Runs in the child before exec: the kernel kills it when its supervisor dies, even by SIGKILL."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    pr_set_pdeathsig = 1
    libc.prctl(pr_set_pdeathsig, signal.SIGKILL)


def _kubeconfig(path: Path, server: str, ca: Path, client: KeyPair, user: str) -> None:
    """Writes a kubeconfig with embedded file paths; JSON is valid YAML, so no YAML writer is needed."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "hami-sandbox", "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": user, "user": {"client-certificate": str(client.cert), "client-key": str(client.key)}}],
        "contexts": [
            {"name": "hami-sandbox", "context": {"cluster": "hami-sandbox", "user": user, "namespace": "default"}}
        ],
        "current-context": "hami-sandbox",
    }
    path.write_text(json.dumps(config, indent=2))


@dataclass
class Process:
    """One running component, with the log file it writes."""

    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] | None = None
    stop_seconds: float = 15
    """How long stop() waits for it to exit on SIGTERM before it kills it."""

    def stop(self, seconds: float | None = None) -> None:
        """SIGTERM, then SIGKILL after `seconds`, else `stop_seconds` (1.24's kube-scheduler never exits on SIGTERM)."""
        if self.popen.poll() is None:
            self.popen.terminate()
        try:
            self.popen.wait(timeout=self.stop_seconds if seconds is None else seconds)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()

    def tail(self, lines: int = 25) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


@dataclass
class Sandbox:
    """A running control plane; stop() ends every process and removes the work dir it owns."""

    workdir: Path
    kubeconfig: Path
    server: str
    processes: list[Process] = field(default_factory=list)
    owns_workdir: bool = True
    hami_url: str = ""
    authority: Authority | None = None
    webhook_client: WebhookClient | None = None
    release: Release = CURRENT
    _api_client: Any = field(default=None, init=False, repr=False, compare=False)
    _dynamic_client: Any = field(default=None, init=False, repr=False, compare=False)

    @classmethod
    def start(
        cls,
        workdir: Path | None = None,
        kubeconfig: Path | None = None,
        log: Callable[[str], None] = lambda _msg: None,
        hami_settings: hami.HamiSettings | None = None,
        webhook_client: WebhookClient | None = None,
        *,
        release: Release = CURRENT,
    ) -> Sandbox:
        """Starts everything, HAMi included, waits until it is ready, and stops what it started when a step fails.
        With `webhook_client`, the API server presents that client certificate to those webhooks; `release` is the
        Kubernetes it runs."""
        owns = workdir is None
        root = Path(tempfile.mkdtemp(prefix="hami-place-sandbox-")) if workdir is None else workdir
        root.mkdir(parents=True, exist_ok=True)
        api_port = free_port()
        server = f"https://127.0.0.1:{api_port}"
        sandbox = cls(
            root,
            kubeconfig or root / "kubeconfig",
            server,
            owns_workdir=owns,
            webhook_client=webhook_client,
            release=release,
        )
        try:
            sandbox._boot(api_port, log)
            sandbox.start_hami(hami_settings or hami.HamiSettings(), log)
            # HAMi starts while kube-controller-manager starts its controllers, which takes seconds.
            sandbox._wait_for_default_service_account()
            log(f"sandbox ready at {sandbox.server}")
        except BaseException:
            sandbox.stop()
            raise
        return sandbox

    @classmethod
    def start_api(cls, release: Release = CURRENT, log: Callable[[str], None] = lambda _msg: None) -> Sandbox:
        """etcd and the release's API server alone (no controllers, scheduler, kwok or HAMi): what a test of the API
        itself needs, such as the compatibility tests against the oldest Kubernetes the chart supports."""
        root = Path(tempfile.mkdtemp(prefix="hami-place-sandbox-"))
        api_port = free_port()
        sandbox = cls(root, root / "kubeconfig", f"https://127.0.0.1:{api_port}", release=release)
        try:
            sandbox._boot_api(api_port, log)
        except BaseException:
            sandbox.stop()
            raise
        return sandbox

    @classmethod
    def attach(cls, kubeconfig: Path) -> Sandbox:
        """A handle on a sandbox another process runs (make sandbox-up); stop() leaves it running."""
        config = json.loads(kubeconfig.read_text())
        cluster = config["clusters"][0]["cluster"]
        workdir = Path(cluster["certificate-authority"]).parent.parent
        return cls(workdir, kubeconfig, cluster["server"], owns_workdir=False)

    def _boot(self, api_port: int, log: Callable[[str], None]) -> None:
        paths = {name: binaries.resolve(self.release.binary(name)) for name in binaries.CONTROL_PLANE}
        configs, sa, ca = self._boot_api(api_port, log)
        self._boot_controllers(paths, configs, sa, ca, log)

    def _boot_api(self, api_port: int, log: Callable[[str], None]) -> tuple[dict[str, Path], KeyPair, Authority]:
        """etcd and the API server, ready; the components' kubeconfigs, the service account keys and the CA."""
        paths = {name: binaries.resolve(self.release.binary(name)) for name in ("etcd", "kube-apiserver")}
        pki = self.workdir / "pki"
        pki.mkdir(exist_ok=True)
        ca = self.authority = Authority(pki)
        serving = ca.issue(
            "apiserver",
            "kube-apiserver",
            server=True,
            dns=("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"),
            ips=("127.0.0.1", "10.96.0.1"),
        )
        sa = service_account_keys(pki)
        identities = {
            "admin": ("kubernetes-admin", "system:masters"),
            "controller-manager": ("system:kube-controller-manager", None),
            "scheduler": ("system:kube-scheduler", None),
        }
        configs = {}
        for stem, (cn, org) in identities.items():
            pair = ca.issue(stem, cn, organization=org)
            configs[stem] = self.workdir / f"{stem}.kubeconfig"
            _kubeconfig(configs[stem], self.server, ca.cert_path, pair, cn)
        shutil.copyfile(configs["admin"], self.kubeconfig)

        log("starting etcd")
        etcd_port, peer_port = free_port(), free_port()
        self._spawn(
            "etcd",
            [
                str(paths["etcd"]),
                "--name=sandbox",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls=http://127.0.0.1:{etcd_port}",
                f"--advertise-client-urls=http://127.0.0.1:{etcd_port}",
                f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-cluster=sandbox=http://127.0.0.1:{peer_port}",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )
        self._wait(f"http://127.0.0.1:{etcd_port}/health", "etcd", tls=False)

        log("starting kube-apiserver")
        audit_policy = self.workdir / "audit-policy.json"
        audit_policy.write_text(json.dumps(AUDIT_POLICY))
        admission = self._admission_config(ca) if self.webhook_client else []
        self._spawn(
            "kube-apiserver",
            [
                str(paths["kube-apiserver"]),
                f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                f"--secure-port={api_port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--cert-dir={pki}",
                f"--tls-cert-file={serving.cert}",
                f"--tls-private-key-file={serving.key}",
                f"--client-ca-file={ca.cert_path}",
                "--authorization-mode=Node,RBAC",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--allow-privileged=true",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={sa.cert}",
                f"--service-account-signing-key-file={sa.key}",
                # A loopback advertise address is refused by the endpoint reconciler; envtest turns it off too.
                "--endpoint-reconciler-type=none",
                "--profiling=false",
                # A namespace's pods go in one DeleteCollection (a test's teardown, kube-controller-manager's namespace
                # deletion): with the default one worker, the differential test's took 9.5 s, with 4 7.2 s.
                "--delete-collection-workers=4",
                f"--audit-policy-file={audit_policy}",
                f"--audit-log-path={self.audit_log}",
                "--audit-log-mode=blocking",
                *admission,
                "--v=1",
            ],
        )
        self._wait(f"{self.server}/readyz", "kube-apiserver")
        return configs, sa, ca

    def _boot_controllers(
        self, paths: dict[str, Path], configs: dict[str, Path], sa: KeyPair, ca: Authority, log: Callable[[str], None]
    ) -> None:
        """kube-controller-manager, kube-scheduler and kwok, against the API server `_boot_api` started."""
        pki = self.workdir / "pki"
        log("starting kube-controller-manager, kube-scheduler and kwok")
        cm = configs["controller-manager"]
        self._spawn(
            "kube-controller-manager",
            [
                str(paths["kube-controller-manager"]),
                f"--kubeconfig={cm}",
                f"--authentication-kubeconfig={cm}",
                f"--authorization-kubeconfig={cm}",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                "--leader-elect=false",
                # The TTL controller writes each new node's kubelet cache TTL, one node write more that every node
                # watcher receives, for kubelets kwok does not have (548 writes in the differential test alone).
                "--controllers=*,-ttl",
                "--use-service-account-credentials=true",
                # Each controller's own account is read, made and given a token at start: at the default 20
                # requests a second, every sandbox's start waited 4.97 s for the default namespace's account (0.03 s
                # at 200).
                "--kube-api-qps=200",
                "--kube-api-burst=400",
                f"--service-account-private-key-file={sa.key}",
                f"--root-ca-file={ca.cert_path}",
                f"--cluster-signing-cert-file={ca.cert_path}",
                f"--cluster-signing-key-file={pki / 'ca.key'}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--v=1",
            ],
        )
        scheduler_config = self.workdir / "scheduler.yaml"
        scheduler_config.write_text(
            json.dumps(_scheduler_configuration(configs["scheduler"], self.release.scheduler_config), indent=2)
        )
        sc = configs["scheduler"]
        self._spawn(
            "kube-scheduler",
            [
                str(paths["kube-scheduler"]),
                f"--config={scheduler_config}",
                f"--authentication-kubeconfig={sc}",
                f"--authorization-kubeconfig={sc}",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                "--v=1",
            ],
            stop_seconds=self.release.scheduler_stop_seconds,
        )
        self._spawn(
            "kwok",
            [
                str(paths["kwok"]),
                f"--kubeconfig={configs['admin']}",
                f"--config={binaries.kwok_stages()}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake",
                f"--cidr={POD_CIDR}",
                "--node-lease-duration-seconds=40",
                f"--server-address=127.0.0.1:{free_port()}",
            ],
        )

    def _admission_config(self, ca: Authority) -> list[str]:
        """The flag and files that make the API server present `webhook_client`'s certificate to its webhooks: a
        kubeconfig whose users are named after the targets, from a WebhookAdmissionConfiguration."""
        assert self.webhook_client is not None
        pair = ca.issue("webhook-client", self.webhook_client.name)
        user = {"client-certificate": str(pair.cert), "client-key": str(pair.key)}
        kubeconfig = self.workdir / "webhook-client.kubeconfig"
        users = [{"name": target, "user": user} for target in self.webhook_client.targets]
        kubeconfig.write_text(json.dumps({"apiVersion": "v1", "kind": "Config", "users": users}, indent=2))
        webhook = {
            "apiVersion": "apiserver.config.k8s.io/v1",
            "kind": "WebhookAdmissionConfiguration",
            "kubeConfigFile": str(kubeconfig),
        }
        config = {
            "apiVersion": "apiserver.config.k8s.io/v1",
            "kind": "AdmissionConfiguration",
            "plugins": [{"name": "MutatingAdmissionWebhook", "configuration": webhook}],
        }
        path = self.workdir / "admission-config.json"
        path.write_text(json.dumps(config, indent=2))
        return [f"--admission-control-config-file={path}"]

    @property
    def audit_log(self) -> Path:
        """Where the API server writes the audit events of AUDITED_USER and the evictions, one JSON object a line."""
        return self.workdir / "logs" / "audit.log"

    def audit_events(self) -> list[dict[str, Any]]:
        """Every audit event written so far (none for a sandbox attached to, which has no audit log)."""
        if not self.audit_log.is_file():
            return []
        return [json.loads(line) for line in self.audit_log.read_text().splitlines() if line.strip()]

    def token_kubeconfig(self, token: str, path: Path) -> Path:
        """The sandbox's kubeconfig at `path` with a bearer token for its user instead of the admin's certificate:
        the credential `status` forwards to the webhook through the service proxy."""
        config = yaml.safe_load(self.kubeconfig.read_text())
        config["users"][0]["user"] = {"token": token}
        path.write_text(json.dumps(config))
        return path

    def identity_kubeconfig(self, user: str, group: str = "system:masters") -> Path:
        """A kubeconfig acting as `user` (in `group`), signed by the sandbox's CA: a process of its own identity."""
        if self.authority is None:
            raise SandboxError("identity_kubeconfig needs a sandbox this process started (not one attached to)")
        path = self.workdir / f"{user}.kubeconfig"
        _kubeconfig(
            path, self.server, self.authority.cert_path, self.authority.issue(user, user, organization=group), user
        )
        return path

    def start_hami(self, settings: hami.HamiSettings, log: Callable[[str], None] = lambda _msg: None) -> str:
        """HAMi as its chart installs it: the extender + webhook, its kube-scheduler, its webhook configuration, and
        the device-plugin stand-in; returns the extender's URL. Another call runs a second HAMi (another name)."""
        assert self.authority is not None, "start_hami needs a sandbox this process started"
        name = settings.scheduler_name
        log(f"starting HAMi ({name}): scheduler extender and webhook, its kube-scheduler, the device-plugin stand-in")
        serving = self.authority.issue(name, name, server=True, dns=("localhost",), ips=("127.0.0.1",))
        device_config = self.workdir / f"{name}-device-config.yaml"
        device_config.write_text(settings.device_config())
        port = free_port()
        url = f"https://127.0.0.1:{port}"
        metrics = f"127.0.0.1:{free_port()}"
        argv = hami.scheduler_args(
            settings, f"127.0.0.1:{port}", metrics, cert=serving.cert, key=serving.key, config=device_config
        )
        self._spawn(
            name, [str(binaries.resolve("hami-scheduler")), *argv], env={"KUBECONFIG": str(self.kubeconfig.resolve())}
        )
        self._wait(f"{url}/healthz", name)
        config = self.workdir / f"kube-scheduler-{name}.yaml"
        kubeconfig = self.workdir / "scheduler.kubeconfig"
        scheduler = hami.kube_scheduler_configuration(settings, kubeconfig, url, self.release.scheduler_config)
        config.write_text(json.dumps(scheduler, indent=2))
        self._spawn(
            f"kube-scheduler-{name}",
            [
                str(binaries.resolve(self.release.binary("kube-scheduler"))),
                f"--config={config}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                "--v=1",
            ],
            stop_seconds=self.release.scheduler_stop_seconds,
        )
        webhook = hami.webhook_configuration(settings, f"{url}/webhook", self.authority.cert_path.read_bytes())
        self.kubectl("apply", "-f", "-", input=json.dumps(webhook))
        self.kubectl("apply", "-f", "-", input=json.dumps(hami.device_configmap(settings)))
        self.kubectl("apply", "-f", "-", input=json.dumps(hami.scheduler_deployment(settings)))
        if not any(p.name == "device-plugin" for p in self.processes):
            stand_in = [sys.executable, "-m", "sandbox.device_plugin", f"--kubeconfig={self.kubeconfig.resolve()}"]
            self._spawn("device-plugin", stand_in, env={"PYTHONPATH": str(Path(__file__).resolve().parent.parent)})
        self.hami_url = self.hami_url or url
        return url

    @contextlib.contextmanager
    def restart_apiserver(self) -> Iterator[None]:
        """Stop kube-apiserver, run the with-block while it is down, then start it again with the same flags (same
        port, same etcd) and wait until it is ready; the other components reconnect, or are started again."""
        found = [(i, p) for i, p in enumerate(self.processes) if p.name == "kube-apiserver"]
        if not found:
            raise SandboxError("restart_apiserver needs a sandbox this process started (not one attached to)")
        index, old = found[0]
        # With watches open it drains them for over 30 s; a restart needs no more than a crash does.
        old.stop(3)
        try:
            yield
        finally:
            self._respawn(old)
            # Back in its place, so stop() still ends it before etcd.
            self.processes[index] = self.processes.pop()
            apiserver = self.processes[index]

            def answers() -> bool:
                if apiserver.popen.poll() is not None:
                    raise SandboxError(
                        f"kube-apiserver exited again; its log ({apiserver.log}) ends:\n{apiserver.tail()}"
                    )
                try:
                    with urllib.request.urlopen(f"{self.server}/readyz", context=self.ssl_context(), timeout=3) as resp:
                        return bool(resp.status == 200)
                except (urllib.error.URLError, OSError):
                    return False

            wait_for(answers, "kube-apiserver to be ready again", 90)
            # A component that gave up while it was away (the device-plugin stand-in does) starts again too.
            for at, proc in enumerate(list(self.processes)):
                if proc.popen.poll() is not None:
                    self._respawn(proc)
                    self.processes[at] = self.processes.pop()

    def _respawn(self, proc: Process) -> None:
        """The process started again as it was (name, argv, environment and stop grace), appended last."""
        self._spawn(proc.name, proc.argv, proc.env, proc.stop_seconds)

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None, stop_seconds: float = 15) -> None:
        logs = self.workdir / "logs"
        logs.mkdir(exist_ok=True)
        path = logs / f"{name}.log"
        out: IO[bytes]
        # preexec_fn is safe here: the sandbox spawns from one thread only, and nothing else can tie the
        # components' lives to their supervisor's when it is killed outright.
        with path.open("wb") as out:
            popen = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.workdir,
                env={**os.environ, **(env or {})},
                preexec_fn=die_with_parent_process,  # noqa: PLW1509
            )
        self.processes.append(Process(name, popen, path, argv, env, stop_seconds))

    def _check_alive(self) -> None:
        for proc in self.processes:
            if proc.popen.poll() is not None:
                raise SandboxError(
                    f"{proc.name} exited with code {proc.popen.returncode}; its log ({proc.log}) ends:\n{proc.tail()}"
                )

    def ssl_context(self) -> ssl.SSLContext:
        """A client TLS context with the admin identity, for plain HTTPS calls to the API server."""
        pki = self.workdir / "pki"
        ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        return ctx

    def get(self, path: str, timeout: float = 5) -> Any:
        """GET a JSON document from the API server as the admin."""
        with urllib.request.urlopen(f"{self.server}{path}", context=self.ssl_context(), timeout=timeout) as resp:
            return json.load(resp)

    def _wait(self, url: str, name: str, tls: bool = True, timeout: float = 90) -> None:
        def answers() -> bool:
            self._check_alive()
            try:
                with urllib.request.urlopen(url, context=self.ssl_context() if tls else None, timeout=3) as resp:
                    return bool(resp.status == 200)
            except (urllib.error.URLError, OSError):
                return False

        wait_for(answers, f"{name} to be ready", timeout)

    def _wait_for_default_service_account(self, timeout: float = 90) -> None:
        """The controller-manager is working once it has made the default namespace's service account."""

        def made() -> bool:
            self._check_alive()
            try:
                self.get("/api/v1/namespaces/default/serviceaccounts/default")
            except (urllib.error.URLError, OSError):
                return False
            return True

        wait_for(made, "kube-controller-manager to make the default service account", timeout)

    def kubectl(self, *args: str, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess[str]:
        """Runs the sandbox's own kubectl (same version as the server) against it."""
        return subprocess.run(
            [str(self.bin("kubectl")), f"--kubeconfig={self.kubeconfig}", *args],
            capture_output=True,
            text=True,
            check=check,
            input=input,
        )

    @staticmethod
    def bin(name: str) -> Path:
        return binaries.resolve(name)

    def api_client(self) -> Any:
        """The admin's kubernetes.client.ApiClient, made once: a new one parses the kubeconfig and opens a new TLS
        connection each time. Imported here so the sandbox needs the client library only when used."""
        if self._api_client is None:
            from kubernetes import config

            self._api_client = config.new_client_from_config(config_file=str(self.kubeconfig))
        return self._api_client

    def dynamic_client(self) -> Any:
        """The admin's kubernetes.dynamic.DynamicClient, made once; it reads each API group's resources when first
        asked for one of its kinds and keeps them in the work dir, so nothing is left behind in /tmp."""
        if self._dynamic_client is None:
            from kubernetes.dynamic import DynamicClient

            cache = self.workdir / f"discovery-{os.getpid()}.json"
            self._dynamic_client = DynamicClient(self.api_client(), cache_file=str(cache))
        return self._dynamic_client

    def create(self, obj: dict[str, Any], namespace: str = "default") -> None:
        """Creates the object (in `namespace` unless it names its own) as `kubectl create` does: every admission
        webhook sees it, and a field the API server does not know is refused (Strict), not dropped."""
        dynamic = self.dynamic_client()
        resource = dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        where = obj["metadata"].get("namespace", namespace) if resource.namespaced else None
        dynamic.create(resource, body=obj, namespace=where, query_params=[("fieldValidation", "Strict")])

    def apply(self, *objects: dict[str, Any], dry_run: bool = False) -> list[dict[str, Any]]:
        """Creates or updates each object by server-side apply, taking over fields another writer holds as `kubectl
        apply` overwrites them, and refusing unknown fields as kubectl does; a fraction of a kubectl process's CPU.
        The objects as the API server stores them (with `dry_run`, would store them, and stores nothing)."""
        dynamic = self.dynamic_client()
        stored = []
        for obj in objects:
            resource = dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
            answer = dynamic.server_side_apply(
                resource,
                body=obj,
                namespace=obj["metadata"].get("namespace", "default") if resource.namespaced else None,
                field_manager=FIELD_MANAGER,
                force_conflicts=True,
                query_params=[("fieldValidation", "Strict")],
                dry_run="All" if dry_run else None,
            )
            stored.append(dict(answer.to_dict()))
        return stored

    def pids(self) -> list[int]:
        return [p.popen.pid for p in self.processes]

    def stop(self) -> None:
        """Ends the components newest first, politely then by force, and removes the work dir it created.

        One at a time: kube-apiserver shuts down in about a second while etcd is still there, but retries for
        over ten when both are told at once.
        """
        for proc in reversed(self.processes):
            proc.stop()
        self.processes.clear()
        self._dynamic_client = None
        if self._api_client is not None:
            self._api_client.close()
            self._api_client = None
        if self.owns_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)


def _scheduler_configuration(kubeconfig: Path, api_version: str) -> dict[str, Any]:
    """The cluster's default scheduler; HAMi's pods go to the second kube-scheduler that start_hami runs."""
    return {
        "apiVersion": api_version,
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "leaderElection": {"leaderElect": False},
        "profiles": [{"schedulerName": "default-scheduler"}],
    }


@contextlib.contextmanager
def running(workdir: Path | None = None, log: Callable[[str], None] = lambda _msg: None) -> Iterator[Sandbox]:
    """A sandbox for the duration of a with-block, stopped however the block ends."""
    sandbox = Sandbox.start(workdir, log=log)
    try:
        yield sandbox
    finally:
        sandbox.stop()


def stop_on_signals() -> None:
    """Turns SIGTERM and SIGHUP into an orderly stop, as Ctrl-C (KeyboardInterrupt) already is."""

    def handler(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, handler)
