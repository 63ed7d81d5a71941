"""`version` against the sandbox: the server's version from its webhook's API (through the service proxy), else
from its Deployment; a warning when the two differ by a minor version.

The first test runs before any other here has made a Service or Deployment of the server.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kubectl_hami_place import __version__
from kubectl_hami_place.core.versions import minor_of
from sandbox import webhook as sandbox_webhook
from sandbox.cluster import Sandbox, primary_address
from sandbox.webhook import SERVICE_LABELS, Webhook
from tests.cluster.cli_harness import apply, plugin

pytestmark = pytest.mark.cluster


def deployment(namespace: str, image: str, labels: dict[str, str] | None = None) -> dict[str, object]:
    """The server's Deployment as the chart labels it, scaled to 0: only its object is read."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "gpu-descheduler-webhook",
            "namespace": namespace,
            "labels": {**SERVICE_LABELS, **(labels or {})},
        },
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": SERVICE_LABELS},
            "template": {
                "metadata": {"labels": SERVICE_LABELS},
                "spec": {"containers": [{"name": "webhook", "image": image}]},
            },
        },
    }


def test_without_a_server_the_plugin_version_and_not_found(cluster: Sandbox) -> None:
    run = plugin(cluster, "version")
    assert run.code == 0, run.err
    assert run.out.splitlines() == [
        f"Plugin version: {__version__}",
        "Server version: not found (no hami-place webhook Service or Deployment labelled "
        "app.kubernetes.io/name=gpu-descheduler-webhook)",
    ]
    assert plugin(cluster, "version", "-o", "json").json() == {
        "plugin": __version__,
        "server": None,
        "problem": "not found (no hami-place webhook Service or Deployment labelled "
        "app.kubernetes.io/name=gpu-descheduler-webhook)",
    }


def test_the_deployment_says_the_version_and_a_minor_apart_warns(cluster: Sandbox, namespace: str) -> None:
    major, minor = minor_of(__version__) or (0, 0)
    patch_apart = f"{major}.{minor}.99"
    apply(cluster, deployment(namespace, f"ghcr.io/hami-place/hami-place-webhook:v{patch_apart}"))
    run = plugin(cluster, "version", "-o", "json")
    assert run.code == 0 and run.warning_lines == [], run.err
    assert run.json()["server"] == {
        "version": patch_apart,
        "source": f"deployment {namespace}/gpu-descheduler-webhook image "
        f"ghcr.io/hami-place/hami-place-webhook:v{patch_apart}",
    }
    minor_apart = f"{major}.{minor + 1}.0"
    digest = "sha256:" + "a" * 64
    apply(
        cluster,
        deployment(
            namespace, f"ghcr.io/hami-place/hami-place-webhook@{digest}", {"app.kubernetes.io/version": minor_apart}
        ),
    )
    run = plugin(cluster, "version")
    assert run.code == 0, run.err
    assert run.out.splitlines()[1] == (
        f"Server version: {minor_apart} "
        f"(deployment {namespace}/gpu-descheduler-webhook label app.kubernetes.io/version)"
    )
    assert run.warning_lines == [
        f"warning: the plugin is {__version__} and the server {minor_apart}: they differ by a minor version; "
        "install the plugin of the server's version (or upgrade the chart)"
    ]


@pytest.fixture
def exposed_webhook(cluster: Sandbox, tmp_path: Path, namespace: str) -> Iterator[Webhook]:
    """A real webhook process on this machine's address, found through a Service as the chart's would be."""
    address = primary_address()
    if address is None:
        pytest.skip("no non-loopback IPv4 address to serve on; the API server does not proxy to loopback")
    server = sandbox_webhook.start(cluster, tmp_path, address=address)
    try:
        sandbox_webhook.expose(cluster, server, namespace)
        yield server
    finally:
        server.stop()


def test_the_running_server_answers_its_version_through_the_service_proxy(
    cluster: Sandbox, namespace: str, exposed_webhook: Webhook
) -> None:
    # A Deployment saying another version is not asked: what runs answers first.
    apply(cluster, deployment(namespace, "ghcr.io/hami-place/hami-place-webhook:v9.9.9"))
    run = plugin(cluster, "version", "-o", "json")
    assert run.code == 0 and run.warning_lines == [], run.err
    assert run.json()["server"] == {"version": __version__, "source": f"webhook {namespace}/hami-place-webhook:8083"}
