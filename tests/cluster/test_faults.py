"""The fault suite: the webhook behind the sandbox's real API server while something breaks under it.

Each test ends on the same three checks: no placement consumed twice (a claim token on at most one stored pod, every
pinned pod holding its placement's current claim), none lost (every consumed placement's pod is stored; claims no
pod carries are released), and no pod blocked by our fault (every creation succeeded: pinned when the webhook
answered, unpinned through failurePolicy Ignore when it could not). Forged and malformed reviews and idle
connections have their own tests (test_webhook_placement.py, test_webhook_hardening.py).
"""

from __future__ import annotations

import copy
import dataclasses
import os
import signal
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from sandbox import gpu_nodes
from sandbox.cluster import KWOK_NODE_ANNOTATION, Sandbox, wait_for
from sandbox.pki import Authority
from sandbox.webhook import Webhook, start
from tests.cluster.webhook_harness import (
    CLAIM,
    GROUP,
    PLACEMENT,
    PLURAL,
    VERSION,
    assert_consumed_at_most_once,
    claims_settled,
    create_in_threads,
    create_placement,
    established_to,
    events_of,
    expired_serving_pair,
    gpu_pod,
    install_pair,
    read_placement,
    register,
    sees_placement,
    served_certificate,
    slow_validation,
    status_of,
    total_admissions,
    wait_for_events,
    wall_clock_ahead,
)

pytestmark = pytest.mark.cluster
# One card per placement, so that no two placements could ever pin two pods to one card.
CARDS = [("gpu-a100-0", 0), ("gpu-a100-0", 1), ("gpu-a100-1", 0), ("gpu-a100-1", 1)]
CARDS += [("gpu-h100-0", index) for index in range(8)]


def test_sigkill_of_one_of_two_replicas_during_a_burst_leaves_no_claim_twice_used_or_lost(
    cluster: Sandbox, namespace: str, tmp_path: Path, webhooks: list[Webhook], configurations: list[str]
) -> None:
    """Both replicas answer for the same placements (half the pods each); one is killed -9 while a burst is being
    admitted. Its pods in flight are created unpinned (failurePolicy Ignore). Two of its claims outlive it, their
    pods held by a slow validator: one pod is stored afterwards, and the survivor ties the claim to it; the other is
    refused, and the survivor releases its claim after the grace, for the next pod to take."""
    # The grace outlasts the validator's hold (as the default outlasts the API server's longest admission).
    doomed = start(cluster, tmp_path, "--claim-grace", "8")
    survivor = start(cluster, tmp_path, "--claim-grace", "8")
    webhooks.extend([doomed, survivor])
    register(
        cluster,
        configurations,
        namespace,
        [(doomed, {"matchLabels": {"half": "a"}}), (survivor, {"matchLabels": {"half": "b"}})],
    )
    names = [f"burst-{index:02d}" for index in range(len(CARDS))]
    for name, (node, card) in zip(names, CARDS, strict=True):
        create_placement(cluster, namespace, name, {"app": "burst"}, [f"gpu-{card}/10"], node=node)
    for webhook in (doomed, survivor):
        wait_for(lambda w=webhook: sees_placement(w, namespace, names[-1]), "both replicas to see every placement")

    core = client.CoreV1Api(cluster.api_client())
    late: list[client.V1Pod] = []
    refusals: list[ApiException] = []

    def create_late(labels: dict[str, str]) -> None:
        try:
            late.append(core.create_namespaced_pod(namespace, gpu_pod("late-", labels)))
        except ApiException as error:
            refusals.append(error)

    pods = [gpu_pod("burst-", {"app": "burst", "half": "ab"[index % 2]}) for index in range(2 * len(CARDS))]
    created: list[client.V1Pod] = []
    with slow_validation(cluster, namespace, doomed.certs, 3.0, {"slow": "yes"}) as validator:
        held = [
            threading.Thread(target=create_late, args=({"app": "burst", "half": "a", "slow": "yes", **extra},))
            for extra in ({}, {"deny": "yes"})
        ]
        for thread in held:
            thread.start()
        wait_for(lambda: validator.calls == 2, "both pods, claimed by the doomed replica, to reach the validator")
        before = total_admissions(doomed)
        burst = threading.Thread(target=lambda: created.extend(create_in_threads(core, namespace, pods)))
        burst.start()
        wait_for(lambda: total_admissions(doomed) >= before + 2, "the replica to be answering the burst", interval=0.02)
        doomed.process.send_signal(signal.SIGKILL)
        for thread in (burst, *held):
            thread.join()
    assert doomed.process.wait(timeout=10) == -signal.SIGKILL
    assert len(created) == len(pods), "every creation of the burst succeeded: none blocked"
    assert len(late) == 1 and [e.status for e in refusals] == [403], "one held pod stored, the other refused"
    assert "refused by the test's validator" in str(refusals[0].body)

    wait_for(lambda: claims_settled(cluster, namespace), "every claim tied to its pod or released by the survivor")
    consumed = assert_consumed_at_most_once(cluster, namespace)
    assert late[0].metadata.name in consumed.values(), "the claim of the pod stored late is tied by the survivor"
    (dropped,) = validator.refused
    assert dropped not in consumed
    wait_for_events(cluster, namespace, dropped, "ClaimReleased")

    # Whatever the kill left open (released claims included) is taken by the next pods, each placement once.
    for _ in [name for name in names if name not in consumed]:
        pod = core.create_namespaced_pod(namespace, gpu_pod("after-", {"app": "burst", "half": "b"}))
        assert CLAIM in (pod.metadata.annotations or {}), "an open placement was lost"
    wait_for(lambda: claims_settled(cluster, namespace), "the new claims tied to their pods")
    assert sorted(assert_consumed_at_most_once(cluster, namespace)) == names
    extra = core.create_namespaced_pod(namespace, gpu_pod("extra-", {"app": "burst", "half": "b"}))
    assert CLAIM not in (extra.metadata.annotations or {}), "every placement is consumed once, never again"


def sync_time(webhook: Webhook) -> datetime:
    status, body = webhook.get("/readyz")
    assert status == 200, body
    return datetime.fromisoformat(body["lastSyncTime"].replace("Z", "+00:00"))


def test_an_api_server_restart_under_the_webhook_keeps_it_ready_and_its_watches_recover(
    cluster: Sandbox, namespace: str, tmp_path: Path, webhooks: list[Webhook], configurations: list[str]
) -> None:
    """Readiness says whether /mutate answers (docs/architecture.md): with the API server down the webhook keeps
    its last view and stays ready (no API server calls it meanwhile, and a replica turned unready would only be
    dropped from the Service when the API server comes back); the watches relist once it is back."""
    if not cluster.owns_workdir:
        pytest.skip("restarting kube-apiserver needs a sandbox this session started")
    webhook = start(cluster, tmp_path, "--claim-grace", "4")
    webhooks.append(webhook)
    register(cluster, configurations, namespace, [(webhook, {})])
    create_placement(cluster, namespace, "before", {"app": "before"}, ["gpu-0"])
    wait_for(lambda: sees_placement(webhook, namespace, "before"), "the webhook to see the placement")
    synced_before = sync_time(webhook)

    with cluster.restart_apiserver():
        down_at = datetime.now(synced_before.tzinfo)
        answers = []
        for _ in range(5):
            answers.append(webhook.get("/readyz"))
            assert sees_placement(webhook, namespace, "before"), "the last view is still served"
            time.sleep(0.2)
        # The self-probe may miss its 1 s on two cores busy with the restart; the cache's view never makes it unready.
        assert any(status == 200 for status, _ in answers), f"unready while the API server is away: {answers}"
        assert all(status == 200 or "/mutate does not answer" in body["reason"] for status, body in answers), answers

    wait_for(lambda: sync_time(webhook) > down_at, "every watch to have listed again after the restart", timeout=90)
    create_placement(cluster, namespace, "after", {"app": "after"}, ["gpu-1"])
    wait_for(lambda: sees_placement(webhook, namespace, "after"), "the webhook to see a placement made after it")
    core = client.CoreV1Api(cluster.api_client())
    pod = core.create_namespaced_pod(namespace, gpu_pod("after-", {"app": "after"}))
    assert (pod.metadata.annotations or {}).get(PLACEMENT) == "after"
    wait_for(lambda: claims_settled(cluster, namespace), "the claim tied to the stored pod (the pod watch works)")
    assert assert_consumed_at_most_once(cluster, namespace) == {"after": pod.metadata.name}
    assert status_of(cluster, namespace, "before").get("phase", "Pending") == "Pending"
    assert webhook.get("/readyz")[0] == 200


def test_serving_certificates_replaced_expired_and_restored_without_a_restart(
    cluster: Sandbox, namespace: str, tmp_path: Path, webhooks: list[Webhook], configurations: list[str]
) -> None:
    """The files the server reloads are rotated under it. Between steps the test waits until the new certificate is
    served and the API server's kept-alive connections (which keep the one they began with) have timed out, so the
    next admission's handshake meets the new certificate."""
    served = tmp_path / "served"
    served.mkdir()
    authority = Authority(served)
    cert_file, key_file = served / "tls.crt", served / "tls.key"

    def rotate(stem: str, *, expired: bool = False) -> None:
        pair = (
            expired_serving_pair(authority, stem)
            if expired
            else authority.issue(stem, "hami-place-webhook", server=True, ips=("127.0.0.1",))
        )
        pem = install_pair(pair, cert_file, key_file)
        wait_for(lambda: served_certificate(webhook.port) == pem, f"the server to serve the {stem} certificate")
        wait_for(lambda: established_to(webhook.port) == 0, "the API server's connections to close", timeout=30)

    install_pair(authority.issue("first", "hami-place-webhook", server=True, ips=("127.0.0.1",)), cert_file, key_file)
    started = start(
        cluster,
        tmp_path,
        "--admission-timeout",
        "4",
        "--idle-timeout",
        "4",
        "--tls-cert-file",
        str(cert_file),
        "--tls-key-file",
        str(key_file),
    )
    webhooks.append(started)
    webhook = dataclasses.replace(started, certs=served)  # the caBundle registered is the authority's
    register(cluster, configurations, namespace, [(webhook, {})])
    for name, card in (("replaced", "gpu-0"), ("while-expired", "gpu-1")):
        create_placement(cluster, namespace, name, {"app": name}, [card])
        wait_for(lambda n=name: sees_placement(webhook, namespace, n), "the webhook to see the placement")
    core = client.CoreV1Api(cluster.api_client())

    rotate("replacement")
    pod = core.create_namespaced_pod(namespace, gpu_pod("replaced-", {"app": "replaced"}))
    assert (pod.metadata.annotations or {}).get(PLACEMENT) == "replaced", "pinned through the replaced certificate"

    rotate("expired", expired=True)
    pod = core.create_namespaced_pod(namespace, gpu_pod("expired-", {"app": "while-expired"}))
    assert CLAIM not in (pod.metadata.annotations or {}), "the API server refused the expired certificate"
    status = status_of(cluster, namespace, "while-expired")
    assert "claim" not in status and status.get("phase", "Pending") == "Pending", "nothing half-claimed"

    rotate("restored")
    pod = core.create_namespaced_pod(namespace, gpu_pod("restored-", {"app": "while-expired"}))
    assert (pod.metadata.annotations or {}).get(PLACEMENT) == "while-expired", "pinned again, no restart"
    assert started.process.poll() is None
    wait_for(lambda: claims_settled(cluster, namespace), "the claims tied to their pods")
    assert sorted(assert_consumed_at_most_once(cluster, namespace)) == ["replaced", "while-expired"]


def phase_seen(webhook: Webhook, namespace: str, name: str) -> str:
    """The placement's phase in the webhook's cache ('' when it does not list it)."""
    _, body = webhook.get(f"/api/v1/placements?namespace={namespace}")
    return next((p["phase"] for p in body.get("placements") or [] if p["name"] == name), "")


def doomed_node(name: str) -> dict[str, Any]:
    """A GPU node shaped like gpu-a100-1 under another name, outside kwok (so never Ready: nothing runs there)."""
    entry = copy.deepcopy(next(e for e in gpu_nodes.load() if e["name"] == "gpu-a100-1"))
    entry["name"] = name
    node = gpu_nodes.node_object(entry)
    del node["metadata"]["annotations"][KWOK_NODE_ANNOTATION]
    return node


def test_a_placements_node_deleted_mid_flight_fails_it_and_blocks_no_pod(
    cluster: Sandbox, namespace: str, tmp_path: Path, webhooks: list[Webhook], configurations: list[str]
) -> None:
    """Three placements on one node: one open, one claimed by a replica that died before its pod was stored, one
    consumed by a pod not yet scheduled (the node is not Ready). The node is deleted: the open one fails at once, the
    claimed one once its claim is released, the consumed one stays consumed by its pod, never by a second."""
    node = f"gpu-doomed-{namespace}"
    core = client.CoreV1Api(cluster.api_client())
    core.create_node(doomed_node(node))
    try:
        webhook = start(cluster, tmp_path, "--claim-grace", "3")
        webhooks.append(webhook)
        register(cluster, configurations, namespace, [(webhook, {"matchLabels": {"placed": "yes"}})])
        for name, card in (("open", "gpu-0"), ("in-flight", "gpu-1"), ("placed", "gpu-0/50")):
            create_placement(cluster, namespace, name, {"app": name}, [card], node=node)
            wait_for(lambda n=name: sees_placement(webhook, namespace, n), "the webhook to see the placement")
        placed = core.create_namespaced_pod(namespace, gpu_pod("placed-", {"app": "placed", "placed": "yes"}))
        assert (placed.metadata.annotations or {}).get(PLACEMENT) == "placed"
        custom = client.CustomObjectsApi(cluster.api_client())
        # The webhook may write its acknowledgement between our read and our write: read again on a conflict.
        for _ in range(5):
            in_flight = read_placement(cluster, namespace, "in-flight")
            now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            in_flight["status"] = {
                "phase": "Consumed",
                "message": "claimed by a pod (name given at creation)",
                "claim": {"token": "never-stored", "claimedAt": now},
                "consumedAt": now,
            }
            try:
                custom.replace_namespaced_custom_object_status(
                    GROUP, VERSION, namespace, PLURAL, "in-flight", in_flight
                )
                break
            except client.exceptions.ApiException as error:
                if error.status != 409:
                    raise
        wait_for(lambda: phase_seen(webhook, namespace, "in-flight") == "Consumed", "the webhook to see the claim")
    finally:
        core.delete_node(node)

    for name in ("open", "in-flight"):
        failed = wait_for(
            lambda n=name: (s := status_of(cluster, namespace, n)).get("phase") == "Failed" and s,
            f"placement {name} to fail",
        )
        assert failed["message"] == f"node {node} not found", failed
        assert "claim" not in failed
    wait_for_events(cluster, namespace, "in-flight", "ClaimReleased")

    for app in ("open", "in-flight", "placed"):
        pod = core.create_namespaced_pod(namespace, gpu_pod(f"{app}-", {"app": app, "placed": "yes"}))
        assert CLAIM not in (pod.metadata.annotations or {}), "created, not pinned to the node that is gone"
        wait_for(
            lambda p=pod.metadata.name: core.read_namespaced_pod(p, namespace).spec.node_name,
            "a pod of a placement whose node is gone to be scheduled elsewhere",
        )
    assert assert_consumed_at_most_once(cluster, namespace) == {"placed": placed.metadata.name}


def test_a_replica_whose_wall_clock_runs_ten_minutes_ahead_does_not_release_a_claim_early(
    cluster: Sandbox,
    namespace: str,
    tmp_path: Path,
    webhooks: list[Webhook],
    configurations: list[str],
) -> None:
    """Replica A claims a placement for a pod that a slow validating webhook keeps from being stored for 5 s.
    Replica B, whose wall clock is 10 minutes ahead, sees a claim dated 10 minutes back with no pod carrying it;
    the grace (15 s) runs on B's monotonic clock from when B first saw it, so B keeps it: the pod is stored
    carrying a claim that still holds, and the placement is consumed once."""
    grace = "15"
    first = start(cluster, tmp_path, "--claim-grace", grace)
    webhooks.append(first)
    # B serves A's certificate: one made under B's fake clock would not be valid yet for the API server.
    with mock.patch.dict(os.environ, wall_clock_ahead(600)):
        second = start(
            cluster,
            tmp_path,
            "--claim-grace",
            grace,
            "--tls-cert-file",
            str(first.certs / "tls.crt"),
            "--tls-key-file",
            str(first.certs / "tls.key"),
        )
    webhooks.append(second)
    skew = sync_time(second) - sync_time(first)
    assert skew.total_seconds() > 500, f"replica B's wall clock is not ahead: {skew}"
    register(
        cluster,
        configurations,
        namespace,
        [
            (first, {"matchLabels": {"half": "a"}}),
            (dataclasses.replace(second, certs=first.certs), {"matchLabels": {"half": "b"}}),
        ],
    )
    create_placement(cluster, namespace, "late", {"app": "late"}, ["gpu-0"])
    for webhook in (first, second):
        wait_for(lambda w=webhook: sees_placement(w, namespace, "late"), "both replicas to see the placement")

    core = client.CoreV1Api(cluster.api_client())
    stored: list[client.V1Pod] = []
    with slow_validation(cluster, namespace, first.certs, 5.0, {"slow": "yes"}) as validator:
        creation = threading.Thread(
            target=lambda: stored.append(
                core.create_namespaced_pod(namespace, gpu_pod("late-", {"app": "late", "half": "a", "slow": "yes"}))
            )
        )
        creation.start()
        wait_for(lambda: validator.calls == 1, "the pod, claimed by replica A, to reach the slow validator")
        seen = []
        while creation.is_alive():
            seen.append((status_of(cluster, namespace, "late").get("claim") or {}).get("token"))
            time.sleep(0.2)
        creation.join()
    assert len(stored) == 1
    (pod,) = stored
    token = pod.metadata.annotations[CLAIM]
    assert set(seen) == {token}, f"the claim was released while its pod was on its way to storage: {seen}"
    wait_for(lambda: claims_settled(cluster, namespace), "the claim tied to the pod stored late")
    assert assert_consumed_at_most_once(cluster, namespace) == {"late": pod.metadata.name}
    assert "ClaimReleased" not in events_of(cluster, namespace, "late")
    for half in "ab":
        again = core.create_namespaced_pod(namespace, gpu_pod("again-", {"app": "late", "half": half}))
        assert CLAIM not in (again.metadata.annotations or {}), f"replica {half.upper()} pinned a second pod"
