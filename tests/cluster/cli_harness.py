"""Runs the plugin against the sandbox, a process a run (`sandbox.forked`), and builds the objects the plugin's cluster
tests need. test_cli_plugin and test_krew run the installed executables themselves."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import pty
import select
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client

from kubectl_hami_place.core.names import GROUP, PLURAL, VERSION
from kubectl_hami_place.kube.client import Kube
from sandbox import forked, gpu_nodes
from sandbox.cluster import Sandbox

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = REPO / ".venv" / "bin"
PLUGIN = VENV_BIN / "kubectl-hami_place"


@dataclass(frozen=True)
class Run:
    """One plugin run: exit code, stdout, stderr."""

    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)

    @property
    def error_lines(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.startswith("error: ")]

    @property
    def warning_lines(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.startswith("warning: ")]


def plugin(cluster: Sandbox, *args: str, env: dict[str, str] | None = None) -> Run:
    """`kubectl-hami_place --kubeconfig <sandbox> ARGS`, stdin not a terminal; asserts no traceback ever."""
    argv = [str(PLUGIN), *args, "--kubeconfig", str(cluster.kubeconfig)]
    with tempfile.TemporaryDirectory(prefix="plugin-") as tmp:
        out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
        out.touch()
        err.touch()
        code = forked.run(argv, dict(os.environ) if env is None else env, str(out), str(err), timeout=120)
        stdout, stderr = out.read_text(), err.read_text()
    assert "Traceback" not in stderr, stderr
    return Run(code, stdout, stderr)


QUESTION = "? [y/N]: "


def declining(cluster: Sandbox, *args: str) -> Run:
    """The plugin on a terminal where the user answers no (`answering`)."""
    return answering(cluster, *args, answer="n")


def answering(cluster: Sandbox, *args: str, answer: str, meanwhile: Callable[[], None] = lambda: None) -> Run:
    """The plugin on a terminal (stdin a pty, so it asks before it changes anything): once it asked, on stderr,
    `meanwhile` runs (what changes in the cluster while the user reads the question), then the user types `answer`.
    Started with subprocess, since a forked run's stdin is /dev/null. Asserts it asked once; its stderr as the user
    reads it, the answer echoed after the question."""
    main, terminal = pty.openpty()
    proc = subprocess.Popen(
        [str(PLUGIN), *args, "--kubeconfig", str(cluster.kubeconfig)],
        stdin=terminal,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stderr is not None
        asked = read_until(proc.stderr.fileno(), lambda seen: seen.endswith(QUESTION.encode()), 120)
        assert asked.endswith(QUESTION.encode()), f"the plugin did not ask (within 120 s): {asked.decode()}"
        meanwhile()
        os.write(main, f"{answer}\n".encode())
        out, rest = proc.communicate(timeout=900)  # room for apply's waits, as test_cli_apply's `run` gives
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(terminal)
        os.close(main)
    err = (asked + rest).decode()
    assert "Traceback" not in err and err.count(QUESTION) == 1, err
    return Run(proc.returncode, out.decode(), err.replace(QUESTION, f"{QUESTION}{answer}\n"))


def read_until(stream: int, enough: Callable[[bytes], bool], timeout: float = 60) -> bytes:
    """Bytes read from a file descriptor until `enough` of them came, it closed, or the time is up."""
    seen = b""
    deadline = time.monotonic() + timeout
    while not enough(seen) and time.monotonic() < deadline:
        ready, _, _ = select.select([stream], [], [], 1)
        if ready:
            chunk = os.read(stream, 65536)
            if not chunk:
                break
            seen += chunk
    return seen


def cut_off(kube: Kube) -> Kube:
    """The same client pointed at an address nothing listens on: every request fails at once."""
    configuration = copy.copy(kube.api.configuration)
    configuration.host = "https://127.0.0.1:1"
    return dataclasses.replace(kube, api=client.ApiClient(configuration))


def card_uuids(node: str) -> dict[int, str]:
    """index -> UUID of the node's cards, from the data the sandbox registered."""
    entry = next(e for e in gpu_nodes.load() if e["name"] == node)
    return {card["index"]: card["id"] for card in entry["cards"]}


def node_register_uuids(cluster: Sandbox, node: str) -> dict[int, str]:
    """index -> UUID read back from the node's register annotation on the API server."""
    obj = json.loads(cluster.kubectl("get", "node", node, "-o", "json").stdout)
    cards = json.loads(obj["metadata"]["annotations"][gpu_nodes.REGISTER_ANNOTATION])
    return {card.get("index", 0): card["id"] for card in cards}


def allocated_pod(
    name: str,
    namespace: str,
    node: str,
    allocation: str,
    *,
    labels: dict[str, str] | None = None,
    containers: int = 1,
) -> dict[str, Any]:
    """A pod as HAMi leaves it after Filter: bound to `node`, with `hami.io/vgpu-node` and `-devices-allocated`."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            # Created as HAMi leaves it, already bound: HAMi's own webhook would refuse a GPU pod with a nodeName.
            "labels": {**(labels or {"app": name}), "hami.io/webhook": "ignore"},
            "annotations": {
                "hami.io/vgpu-node": node,
                "hami.io/vgpu-devices-allocated": allocation,
                "hami.io/bind-phase": "success",
            },
        },
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": f"c{i}",
                    "image": "registry.invalid/gpu-job:1",
                    "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}},
                }
                for i in range(containers)
            ],
        },
    }


def apply(cluster: Sandbox, *objects: dict[str, Any]) -> None:
    """Creates or updates objects, as `kubectl apply` would (`Sandbox.apply`)."""
    cluster.apply(*objects)


def grant(cluster: Sandbox, namespace: str, user: str, name: str, rule: dict[str, Any]) -> None:
    """A Role `name` of one rule on placements in `namespace`, bound to `user` (RBAC reaches the authorizer through
    its own watch: callers wait until the right shows)."""
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": name, "namespace": namespace},
        "rules": [{"apiGroups": ["scheduling.hami.placement.com"], "resources": ["hamipodplacements"], **rule}],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }
    apply(cluster, role, binding)


def get(cluster: Sandbox, *args: str) -> dict[str, Any] | None:
    """`kubectl get ... -o json`, None when it does not exist."""
    proc = cluster.kubectl("get", *args, "-o", "json", check=False)
    if proc.returncode != 0:
        assert "NotFound" in proc.stderr, proc.stderr
        return None
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def placements(cluster: Sandbox, namespace: str) -> list[dict[str, Any]]:
    """The placements of the namespace as stored."""
    found = client.CustomObjectsApi(cluster.api_client()).list_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL
    )
    return list(found.get("items", []))


def custom_node(name: str, register: str | None) -> dict[str, Any]:
    """A node object (not kwok-managed) with the given register annotation, or none."""
    annotations = {gpu_nodes.REGISTER_ANNOTATION: register} if register is not None else {}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}, "annotations": annotations},
    }


def route_webhook_service(cluster: Sandbox, namespace: str, address: str, port: int) -> None:
    """A webhook Service in the namespace whose api port leads to `address:port`, as `status` finds the chart's."""
    labels = {"app.kubernetes.io/name": "gpu-descheduler-webhook"}
    # The service proxy only dials endpoint addresses backed by a pod with that IP: a host-network pod stands in.
    apply(
        cluster,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "webhook-stand-in", "namespace": namespace},
            "spec": {
                "nodeName": "gpu-a100-1",
                "hostNetwork": True,
                "containers": [{"name": "api", "image": "registry.invalid/stand-in:1"}],
            },
        },
    )
    ip_status = json.dumps({"status": {"podIP": address, "podIPs": [{"ip": address}]}})
    cluster.kubectl(
        "patch", "pod", "webhook-stand-in", "-n", namespace, "--subresource=status", "--type=merge", "-p", ip_status
    )
    apply(
        cluster,
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "hami-place", "namespace": namespace, "labels": labels},
            "spec": {"ports": [{"name": "api", "port": 8083, "targetPort": port}]},
        },
        {
            "apiVersion": "v1",
            "kind": "Endpoints",
            "metadata": {"name": "hami-place", "namespace": namespace, "labels": labels},
            "subsets": [
                {
                    "addresses": [
                        {
                            "ip": address,
                            "targetRef": {"kind": "Pod", "name": "webhook-stand-in", "namespace": namespace},
                        }
                    ],
                    "ports": [{"name": "api", "port": port}],
                }
            ],
        },
    )
