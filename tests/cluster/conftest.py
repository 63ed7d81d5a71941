"""Fixtures of the cluster tests: webhook processes registered with the API server, and GPU nodes of their own."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from sandbox.cluster import Sandbox
from sandbox.webhook import Webhook
from tests.cluster.hami_harness import GpuNode, card_entries, delete_nodes, fresh_node

# Lines of a webhook's log shown with a failed test.
LOG_TAIL = 80


@pytest.fixture
def webhooks(cluster: Sandbox, tmp_path: Path) -> Iterator[list[Webhook]]:
    """Webhook processes a test starts (through the returned list's owner); all stopped afterwards.

    The end of each one's log is printed at teardown, which pytest shows only when the test failed. All are told to
    stop before any is waited for: replicas drain together.
    """
    started: list[Webhook] = []
    yield started
    for webhook in started:
        webhook.terminate()
    for webhook in started:
        webhook.stop()
        lines = webhook.log.read_text(errors="replace").splitlines() if webhook.log.is_file() else []
        print(f"--- the last {LOG_TAIL} lines of {webhook.log} ---", *lines[-LOG_TAIL:], sep="\n")


@pytest.fixture
def server_namespace(cluster: Sandbox) -> Iterator[str]:
    """The namespace the controller's server runs in: its policy ConfigMap and its leader Lease live there."""
    name = f"ctl-{uuid.uuid4().hex[:8]}"
    cluster.kubectl("create", "namespace", name)
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def configurations(cluster: Sandbox) -> Iterator[list[str]]:
    """Names of the MutatingWebhookConfigurations a test registers; all deleted afterwards."""
    names: list[str] = []
    yield names
    api = client.AdmissionregistrationV1Api(cluster.api_client())
    for name in names:
        try:
            api.delete_mutating_webhook_configuration(name)
        except ApiException as error:
            if error.status != 404:
                raise


@pytest.fixture
def node(cluster: Sandbox) -> Iterator[GpuNode]:
    """A fresh node of two 40 GiB A100 cards that only this test's pods go to, deleted afterwards. HAMi v2.10 goes
    on counting a pod deleted between its Filter and its Bind (seen in its log: 20 of some 390 pods created and
    deleted at once, each card's 10 slots taken), so what earlier tests did on the shared nodes' cards can refuse a
    test's pod. test_hami_renamed has a one-card node of its own under this name."""
    node = fresh_node(cluster, card_entries(2))
    yield node
    delete_nodes(cluster, [node])
