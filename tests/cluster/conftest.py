"""Fixtures of the cluster tests: webhook processes registered with the API server, and GPU nodes of their own (each
a scope of tests/cluster/scopes.py, for one test)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox.cluster import Sandbox
from sandbox.webhook import Webhook, start
from tests.cluster import scopes
from tests.cluster.hami_harness import GpuNode
from tests.cluster.webhook_harness import register


@pytest.fixture
def webhooks(cluster: Sandbox) -> Iterator[list[Webhook]]:
    """Webhook processes a test starts (through the returned list's owner); all stopped afterwards, the end of each
    one's log printed, which pytest shows only when the test failed."""
    with scopes.running_webhooks() as started:
        yield started


@pytest.fixture
def server_namespace(cluster: Sandbox) -> Iterator[str]:
    """The namespace the controller's server runs in: its policy ConfigMap and its leader Lease live there."""
    with scopes.server_namespace(cluster) as name:
        yield name


@pytest.fixture
def configurations(cluster: Sandbox) -> Iterator[list[str]]:
    """Names of the MutatingWebhookConfigurations a test registers; all deleted afterwards."""
    with scopes.webhook_configurations(cluster) as names:
        yield names


@pytest.fixture
def node(cluster: Sandbox) -> Iterator[GpuNode]:
    """A fresh node of two 40 GiB A100 cards that only this test's pods go to, deleted afterwards. HAMi v2.10 goes
    on counting a pod deleted between its Filter and its Bind (seen in its log: 20 of some 390 pods created and
    deleted at once, each card's 10 slots taken), so what earlier tests did on the shared nodes' cards can refuse a
    test's pod. test_hami_renamed has a one-card node of its own under this name."""
    with scopes.gpu_node(cluster) as made:
        yield made


@pytest.fixture
def serving(tmp_path: Path, webhooks: list[Webhook], configurations: list[str]) -> dict[str, Any]:
    """What test_defrag's `controller` needs besides the cluster and the namespaces."""
    return {"tmp_path": tmp_path, "webhooks": webhooks, "configurations": configurations}


@pytest.fixture
def placing(
    cluster: Sandbox, namespace: str, tmp_path: Path, webhooks: list[Webhook], configurations: list[str]
) -> Webhook:
    """Our webhook, registered for the test's namespace as the chart registers it."""
    webhook = start(cluster, tmp_path)
    webhooks.append(webhook)
    register(cluster, configurations, namespace, [(webhook, {})])
    return webhook
