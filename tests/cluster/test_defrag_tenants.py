"""The controller's Events on a tenant's pod name nothing of another tenant: the pod to rescue is in one namespace,
the pods the controller would move, and the PodDisruptionBudget that stops it, in another. A namespace's `view`
role reads its own Events, so those say "a pod of another namespace"; the server's log names them for the operator.

The scene is test_defrag's: a node of two 40 GiB cards holding a 10,000 MiB pod each, and a 35,000 MiB pod that fits
neither card until one of them moves.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from sandbox.cluster import Sandbox, wait_for
from sandbox.webhook import Webhook
from tests.cluster import scopes
from tests.cluster.cli_harness import placements
from tests.cluster.hami_harness import Evictions, GpuNode, create
from tests.cluster.test_defrag import (
    at_its_limit,
    budget_at_zero,
    controller,
    events,
    freeze_when,
    pending_big,
    said,
    two_pods_one_per_card,
    write_policy,
)
from tests.cluster.webhook_harness import register

pytestmark = pytest.mark.cluster


def test_a_tenants_pod_hears_of_no_other_namespaces_pods_and_the_operator_reads_them_in_the_log(  # noqa: PLR0917
    cluster: Sandbox,
    namespace: str,
    server_namespace: str,
    node: GpuNode,
    tmp_path: Path,
    webhooks: list[Webhook],
    configurations: list[str],
) -> None:
    """A dry-run first, then mode on with a PodDisruptionBudget arriving while the move is pinned (test_defrag's
    late budget, under a name no word holds): the dry-run's moves, the run's moves and the refused eviction, each
    told to the big pod without the other namespace, its pods or its budget."""
    with scopes.fresh_namespace(cluster) as other:
        held = two_pods_one_per_card(cluster, other, node)
        secrets = [other, "guard-b7", *(name for name, _ in held.values())]
        write_policy(cluster, server_namespace, namespace, "dry-run", also=(other,))
        server = controller(cluster, tmp_path, webhooks, configurations, namespace=namespace, home=server_namespace)
        register(cluster, configurations, other, [(server, {})])
        pending_big(cluster, namespace, node)
        dry = wait_for(lambda: said(cluster, namespace, "big", "DefragDryRun"), "the dry-run Event on the big pod")
        assert dry.startswith("would move a pod of another namespace from "), dry
        assert dry.endswith(f"(dry-run) to rescue {namespace}/big (CardInsufficientMemory)"), dry
        wait_for(
            lambda: f"DefragDryRun on pod {namespace}/big: would move {other}/" in server.log.read_text(), "the log"
        )

        evictions = Evictions(cluster, other)
        try:
            frozen = freeze_when(cluster, other, server, "pinned")
            write_policy(cluster, server_namespace, namespace, "on", also=(other,))
            wait_for(frozen.is_set, "the leader's move to be pinned", timeout=120, interval=0.05)
            create(cluster, other, budget_at_zero("guard-b7"))
            wait_for(lambda: at_its_limit(cluster, other, "guard-b7"), "the disruption controller to count the budget")
            server.process.send_signal(signal.SIGCONT)
            stopped = wait_for(lambda: said(cluster, namespace, "big", "DefragBlocked"), "the blocked run's Event")
            wait_for(lambda: placements(cluster, other) == [], "the move's placement to be rolled back")
        finally:
            evictions.stop()
        assert evictions.deleted == {}, "nothing was evicted"
        run = said(cluster, namespace, "big", "DefragRun")
        assert "moving a pod of another namespace from " in run, run
        assert stopped.endswith(
            "stopped after 0 of 1 move(s): a PodDisruptionBudget of another namespace refused the eviction of a pod "
            "of another namespace"
        ), stopped
        told: list[tuple[str, str]] = events(cluster, namespace, "big")
        assert [(reason, m) for reason, m in told if any(word in m for word in secrets)] == [], told
        assert "PodDisruptionBudget guard-b7 (2 healthy, 2 required" in server.log.read_text(), (
            "the operator's whole story"
        )
