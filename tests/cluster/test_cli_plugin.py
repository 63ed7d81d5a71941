"""The plugin through kubectl itself: plugin discovery on PATH, and kubectl 1.26+'s plugin completion."""

from __future__ import annotations

import os
import subprocess

import pytest

from sandbox.cluster import Sandbox
from tests.cluster.cli_harness import VENV_BIN, apply

pytestmark = pytest.mark.cluster


def kubectl(cluster: Sandbox, *args: str) -> subprocess.CompletedProcess[str]:
    """The sandbox's kubectl with the venv's bin first on PATH, as a user who installed the plugin has it."""
    env = {**os.environ, "PATH": f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}", "NO_COLOR": "1"}
    return subprocess.run(
        [str(cluster.bin("kubectl")), *args], capture_output=True, text=True, env=env, check=False, timeout=120
    )


def test_kubectl_finds_the_plugin(cluster: Sandbox) -> None:
    listed = kubectl(cluster, "plugin", "list")
    assert str(VENV_BIN / "kubectl-hami_place") in listed.stdout


def test_kubectl_runs_the_plugin(cluster: Sandbox, namespace: str) -> None:
    run = kubectl(
        cluster,
        "hami-place",
        "pin",
        "-n",
        namespace,
        "-l",
        "app=x",
        "--node",
        "gpu-h100-0",
        "--gpu",
        "gpu-5",
        "--request-memory",
        "512",
        "--name",
        "via-kubectl",
        # No webhook runs here to acknowledge the placement: pin need not wait for one (5 s).
        "--ack-timeout",
        "0",
        "--kubeconfig",
        str(cluster.kubeconfig),
    )
    assert run.returncode == 0, run.stderr
    assert f"hamipodplacement {namespace}/via-kubectl created" in run.stdout
    listed = kubectl(
        cluster, "hami-place", "list", "-n", namespace, "-o", "json", "--kubeconfig", str(cluster.kubeconfig)
    )
    assert listed.returncode == 0, listed.stderr
    assert '"via-kubectl"' in listed.stdout
    refused = kubectl(
        cluster,
        "hami-place",
        "pin",
        "-n",
        namespace,
        "-l",
        "app=x",
        "--node",
        "nope",
        "--gpu",
        "gpu-0",
        "--request-memory",
        "1",
        "--kubeconfig",
        str(cluster.kubeconfig),
    )
    assert refused.returncode == 1
    assert refused.stderr.strip() == "error: node nope not found; check the name (kubectl get nodes)"


def test_kubectl_completes_through_the_plugin_completer(cluster: Sandbox) -> None:
    verbs = kubectl(cluster, "__complete", "hami-place", "")
    assert verbs.returncode == 0, verbs.stderr
    lines = verbs.stdout.splitlines()
    assert {"pin", "evict", "status", "list", "delete", "completion"} <= {line.split("\t")[0] for line in lines}
    nodes = kubectl(cluster, "__complete", "hami-place", "status", "--kubeconfig", str(cluster.kubeconfig), "gpu-h")
    assert nodes.returncode == 0, nodes.stderr
    assert "gpu-h100-0" in nodes.stdout.split()


def test_completion_hands_the_words_typed_before_it_to_the_lookups(cluster: Sandbox, namespace: str) -> None:
    """The completer parses the typed words itself (cli/_typer_app.py, sparing typer's pydantic coercion):
    --kubeconfig, -n and --node reach the namespace, pod and card lookups as typed."""
    apply(
        cluster,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "completed-pod", "namespace": namespace, "labels": {"hami.io/webhook": "ignore"}},
            "spec": {"nodeName": "gpu-h100-0", "containers": [{"name": "c", "image": "registry.invalid/job:1"}]},
        },
    )
    kubeconfig = str(cluster.kubeconfig)

    def candidates(*typed: str) -> list[str]:
        completed = kubectl(cluster, "__complete", "hami-place", *typed)
        assert completed.returncode == 0, completed.stderr
        return [line.split("\t")[0] for line in completed.stdout.splitlines()]

    assert namespace in candidates("list", "--kubeconfig", kubeconfig, "-n", namespace[:4])
    assert candidates("evict", "--kubeconfig", kubeconfig, "-n", namespace, "") == ["completed-pod", ":4"]
    cards = candidates("pin", "--kubeconfig", kubeconfig, "--node", "gpu-h100-0", "--gpu", "")
    assert "gpu-0" in cards, cards
