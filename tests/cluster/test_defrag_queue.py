"""The defragmentation controller on its work queue: a look plans from the server's watch caches, so that with
nothing Pending the leader lists no pods, nodes or Events cluster-wide, though keep-room plans every second.

The server acts as the sandbox's audited user: the API server's audit log holds every call it makes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from sandbox.cluster import AUDITED_USER, Sandbox, wait_for
from sandbox.webhook import Webhook, start

pytestmark = pytest.mark.cluster
POLICY = "defrag-policy"
KEEP_ROOM_LOOKS = 'hami_place_defrag_looks_total{key="keep_room"}'


def write_policy(cluster: Sandbox, home: str, namespace: str) -> None:
    """Mode on for the test's namespace, with a keep-room goal no cluster meets, looked at every second."""
    policy = {
        "apiVersion": "scheduling.hami.placement.com/v1alpha1",
        "kind": "DefragPolicy",
        "mode": "on",
        "namespaces": {"include": [namespace]},
        "rescue": {"enabled": True, "pendingFor": "1s"},
        "keepRoom": {"enabled": True, "interval": "1s", "wholeFreeCards": {"count": 1000}},
    }
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": POLICY, "namespace": home},
        "data": {"policy.yaml": json.dumps(policy)},
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(body))


def said_on_policy(cluster: Sandbox, home: str, reason: str) -> str:
    """The message of the controller's latest Event of that reason on the policy's ConfigMap, "" when none."""
    listed = client.CoreV1Api(cluster.api_client()).list_namespaced_event(
        home, field_selector=f"involvedObject.name={POLICY},reason={reason}"
    )
    ours = [e for e in listed.items if (e.source.component if e.source else "") == "hami-place-defrag"]
    return ours[-1].message if ours else ""


def audited_calls(cluster: Sandbox, since: int) -> list[dict[str, Any]]:
    """The server's API calls recorded after the first `since` audit events."""
    return [e for e in cluster.audit_events()[since:] if (e.get("user") or {}).get("username") == AUDITED_USER]


def test_keep_room_every_second_lists_no_pods_nodes_or_events_cluster_wide(
    cluster: Sandbox, namespace: str, server_namespace: str, tmp_path: Path, webhooks: list[Webhook]
) -> None:
    if cluster.authority is None:
        pytest.skip("needs a sandbox this test session started: an attached one has no audit log")
    write_policy(cluster, server_namespace, namespace)
    server = start(
        cluster,
        tmp_path,
        "--defrag-policy",
        f"{server_namespace}/{POLICY}",
        "--defrag-namespace",
        server_namespace,
        "--defrag-interval",
        "1",
        kubeconfig=cluster.identity_kubeconfig(AUDITED_USER),
    )
    webhooks.append(server)
    wait_for(lambda: server.metric("hami_place_defrag_leader") == 1, "the server to lead")
    message = wait_for(lambda: said_on_policy(cluster, server_namespace, "DefragNoPlan"), "keep-room's first plan")
    assert "no plan" in message, message
    looks = server.metric(KEEP_ROOM_LOOKS)
    since = len(cluster.audit_events())
    wait_for(lambda: server.metric(KEEP_ROOM_LOOKS) >= looks + 4, "four more looks of keep-room", timeout=90)
    calls = audited_calls(cluster, since)
    listed = [
        f"{e['verb']} {e['requestURI']}"
        for e in calls
        if e["verb"] == "list" and (e.get("objectRef") or {}).get("resource") in ("pods", "nodes", "events")
    ]
    assert listed == [], f"the looks listed the cluster instead of reading the watch caches: {listed[:5]}"
    assert any((e.get("objectRef") or {}).get("resource") == "leases" for e in calls), (
        "the leader's Lease renewals are on record: the audit log was read over the right span"
    )
