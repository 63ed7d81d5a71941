"""The webhook as a real process behind a real API server: pin, exactly-once under a race, eviction, failures.

Each test registers its own MutatingWebhookConfiguration, scoped by namespaceSelector to the test's namespace (the
`namespace` fixture labels it), pointing at `https://127.0.0.1:<port>/mutate` of a `hami-place-webhook serve`
subprocess, and deletes it afterwards.
"""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from sandbox.cluster import Sandbox, wait_for
from sandbox.webhook import Webhook, start
from tests.cluster.hami_harness import GpuNode
from tests.cluster.test_defrag import serve_controller
from tests.cluster.webhook_harness import (
    GROUP,
    PLURAL,
    VERSION,
    create_placement,
    events_of,
    gpu_pod,
    hostname_terms,
    read_placement,
    register,
    sees_placement,
    status_of,
    total_admissions,
    wait_for_events,
)

pytestmark = pytest.mark.cluster
REPO = Path(__file__).resolve().parents[2]
A100_1 = "gpu-a100-1"
A100_1_CARD1 = "GPU-c2804935-f5e1-530a-853c-9a81dbf1a9a6"
A100_1_CARD0 = "GPU-d82baece-45bc-55ae-b942-82c9f62ededd"
CLAIM = "scheduling.hami.placement.com/claim"


def post_huge(webhook: Webhook, size: int) -> tuple[int, Any]:
    """Announce a body of `size` bytes, send its first KiB, and read the answer (refused on the size alone)."""
    context = ssl.create_default_context(cafile=str(webhook.certs / "ca.crt"))
    with (
        socket.create_connection(("127.0.0.1", webhook.port), timeout=20) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        tls.sendall(
            f"POST /mutate HTTP/1.1\r\nHost: webhook\r\nContent-Type: application/json\r\n"
            f"Content-Length: {size}\r\n\r\n".encode()
            + b"{"
            + b" " * 1023
        )
        received = b""
        while b"\r\n\r\n" not in received or not received.rstrip().endswith(b"}"):
            chunk = tls.recv(4096)
            if not chunk:
                break
            received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


# -----------------------------------------------------------------------------------------------------------------


def test_a_pod_created_through_the_api_server_is_pinned_and_consumes_the_placement(
    cluster: Sandbox, namespace: str, placing: Webhook
) -> None:
    webhook = placing
    create_placement(cluster, namespace, "pin-train", {"app": "train"}, ["gpu-1/50"])
    wait_for(lambda: sees_placement(webhook, namespace, "pin-train"), "the webhook to see the placement")

    core = client.CoreV1Api(cluster.api_client())
    created = core.create_namespaced_pod(namespace, gpu_pod("trainer-", {"app": "train"}))
    stored = core.read_namespaced_pod(created.metadata.name, namespace)
    annotations = stored.metadata.annotations
    assert annotations["nvidia.com/use-gpuuuid"] == A100_1_CARD1
    assert annotations["scheduling.hami.placement.com/placement"] == "pin-train"
    assert annotations["scheduling.hami.placement.com/req-id"].startswith("req-pin-train-")
    assert hostname_terms(stored) == [[("kubernetes.io/hostname", "In", [A100_1])]]
    assert stored.spec.containers[0].resources.limits["nvidia.com/gpumem-percentage"] == "50"

    status = wait_for(
        lambda: (s := status_of(cluster, namespace, "pin-train")).get("consumedBy", {}).get("uid") and s,
        "consumedBy to be filled",
    )
    assert status["phase"] == "Consumed"
    assert status["consumedBy"] == {"name": created.metadata.name, "uid": created.metadata.uid}
    assert status["claim"]["token"] == annotations[CLAIM]
    wait_for(
        lambda: core.read_namespaced_pod(created.metadata.name, namespace).spec.node_name == A100_1,
        "the pod to be scheduled onto the placement's node",
    )
    wait_for_events(cluster, namespace, "pin-train", "Claimed", "Consumed")

    second = core.create_namespaced_pod(namespace, gpu_pod("trainer-", {"app": "train"}))
    assert CLAIM not in (second.metadata.annotations or {}), "a consumed placement must never be used again"


def test_a_pod_that_does_not_suit_a_placement_leaves_it_open_for_one_that_does(
    cluster: Sandbox, namespace: str, placing: Webhook
) -> None:
    """A one-card pod for a two-card placement is admitted without a pin, as is a two-card pod that does not
    tolerate the node's taint (its creator is told why); the placement stays open (no review alone fails it), the
    next pod that asks two cards claims it, and a copy of that pinned pod's annotations pins nothing."""
    webhook = placing
    create_placement(cluster, namespace, "pair", {"app": "pair"}, ["gpu-0", "gpu-1"])
    wait_for(lambda: sees_placement(webhook, namespace, "pair"), "the webhook to see the placement")

    core = client.CoreV1Api(cluster.api_client())
    single = core.create_namespaced_pod(namespace, gpu_pod("single-", {"app": "pair"}))
    assert CLAIM not in (single.metadata.annotations or {})
    assert single.spec.affinity is None
    assert webhook.metric('hami_place_admissions_total{result="not_honoured"}') >= 1
    assert status_of(cluster, namespace, "pair").get("phase", "Pending") == "Pending"

    def pinned_in_a_dry_run() -> bool:
        shown = core.create_namespaced_pod(namespace, gpu_pod("probe-", {"app": "pair"}, gpus=2), dry_run="All")
        return CLAIM in (shown.metadata.annotations or {})

    taint = {"key": "hami-place-test", "value": "pair", "effect": "NoSchedule"}
    core.patch_node(A100_1, {"spec": {"taints": [taint]}})
    try:
        wait_for(lambda: not pinned_in_a_dry_run(), "the webhook to see the node's taint")
        created = cluster.kubectl(
            "create",
            "-n",
            namespace,
            "-o",
            "json",
            "-f",
            "-",
            input=json.dumps(gpu_pod("kept-off-", {"app": "pair"}, gpus=2)),
        )
        kept_off = json.loads(created.stdout)["metadata"]
        core.delete_namespaced_pod(kept_off["name"], namespace, grace_period_seconds=0)
        assert CLAIM not in (kept_off.get("annotations") or {})
        assert (
            f"Warning: hami-place: placement pair skipped for this pod: node {A100_1}'s taint "
            "hami-place-test=pair:NoSchedule is not tolerated, so kube-scheduler would leave it Pending there"
        ) in created.stderr, created.stderr
        assert status_of(cluster, namespace, "pair").get("phase", "Pending") == "Pending"
    finally:
        core.patch_node(A100_1, {"spec": {"taints": None}})
    wait_for(pinned_in_a_dry_run, "the webhook to see the taint gone")

    double = core.create_namespaced_pod(namespace, gpu_pod("double-", {"app": "pair"}, gpus=2))
    assert (double.metadata.annotations or {}).get("scheduling.hami.placement.com/placement") == "pair"
    assert status_of(cluster, namespace, "pair")["claim"]["token"] == double.metadata.annotations[CLAIM]

    copied = gpu_pod("copy-", {"app": "pair"}, gpus=2)
    copied["metadata"]["annotations"] = {
        key: value for key, value in double.metadata.annotations.items() if key.startswith("scheduling.hami")
    }
    copy = core.create_namespaced_pod(namespace, copied)
    assert not any(key.startswith("scheduling.hami") for key in copy.metadata.annotations or {})
    assert copy.spec.affinity is None


def test_a_placement_whose_node_is_gone_fails_from_the_background_loop_without_a_pod(
    cluster: Sandbox, namespace: str, tmp_path: Path, webhooks: list[Webhook]
) -> None:
    webhook = start(cluster, tmp_path)
    webhooks.append(webhook)
    create_placement(cluster, namespace, "nowhere", {"app": "x"}, ["gpu-0"], node="gpu-gone-0")
    status = wait_for(
        lambda: (s := status_of(cluster, namespace, "nowhere")).get("phase") == "Failed" and s, "the placement to fail"
    )
    assert status["message"] == "node gpu-gone-0 not found"
    wait_for_events(cluster, namespace, "nowhere", "CannotHonour")


def test_the_webhook_acknowledges_each_placement_generation_it_has_seen_without_an_event(
    cluster: Sandbox, namespace: str, tmp_path: Path, webhooks: list[Webhook]
) -> None:
    webhook = start(cluster, tmp_path)
    webhooks.append(webhook)
    created = create_placement(cluster, namespace, "seen", {"app": "x"}, ["gpu-0"])
    generation = created["metadata"]["generation"]
    status = wait_for(
        lambda: (s := status_of(cluster, namespace, "seen")).get("observedGeneration") == generation and s,
        "the webhook to acknowledge the placement",
    )
    assert status["phase"] == "Pending"
    assert events_of(cluster, namespace, "seen") == []


def create_concurrently(core: client.CoreV1Api, namespace: str, round_name: str, count: int) -> list[str]:
    """Create `count` pods labelled for the race from as many threads, released together by a barrier."""
    names: list[str] = []
    errors: list[BaseException] = []
    start = threading.Barrier(count)

    def create(index: int) -> None:
        try:
            start.wait()
            pod = gpu_pod(
                "", {"app": "race", "half": "ab"[index % 2], "round": round_name}, name=f"{round_name}-{index:02d}"
            )
            names.append(core.create_namespaced_pod(namespace, pod).metadata.name)
        except BaseException as error:  # collected and asserted on in the test's thread
            errors.append(error)

    threads = [threading.Thread(target=create, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    return names


def two_halves(
    cluster: Sandbox, namespace: str, tmp_path: Path, webhooks: list[Webhook], configurations: list[str]
) -> tuple[Webhook, Webhook]:
    """Two webhook processes, registered so that A answers for pods labelled half=a and B for half=b."""
    first, second = start(cluster, tmp_path), start(cluster, tmp_path)
    webhooks.extend([first, second])
    register(
        cluster,
        configurations,
        namespace,
        [(first, {"matchLabels": {"half": "a"}}), (second, {"matchLabels": {"half": "b"}})],
    )
    return first, second


def test_two_webhook_processes_and_thirty_concurrent_pods_consume_a_placement_once(
    cluster: Sandbox, namespace: str, tmp_path: Path, webhooks: list[Webhook], configurations: list[str]
) -> None:
    first, second = two_halves(cluster, namespace, tmp_path, webhooks, configurations)
    core = client.CoreV1Api(cluster.api_client())
    for round_name in ("race-1", "race-2"):
        create_placement(cluster, namespace, round_name, {"app": "race"}, ["gpu-0"])
        for webhook in (first, second):
            wait_for(lambda w=webhook, r=round_name: sees_placement(w, namespace, r), "both webhooks to see it")
        answered = [total_admissions(first), total_admissions(second)]
        names = create_concurrently(core, namespace, round_name, 30)
        assert len(names) == 30
        assert total_admissions(first) - answered[0] >= 15, "webhook A took part in the race"
        assert total_admissions(second) - answered[1] >= 15, "webhook B took part in the race"
        pods = core.list_namespaced_pod(namespace, label_selector=f"round={round_name}").items
        pinned = [p for p in pods if CLAIM in (p.metadata.annotations or {})]
        assert len(pinned) == 1, [p.metadata.name for p in pinned]
        assert pinned[0].metadata.annotations["scheduling.hami.placement.com/placement"] == round_name
        status = wait_for(
            lambda r=round_name: (s := status_of(cluster, namespace, r)).get("consumedBy", {}).get("uid") and s,
            "consumedBy to be filled",
        )
        assert status["consumedBy"] == {"name": pinned[0].metadata.name, "uid": pinned[0].metadata.uid}
        assert status["claim"]["token"] == pinned[0].metadata.annotations[CLAIM]


# Six reqIDs, each shared by two placements on cards of their own: one placement that only webhook A's pods suit,
# one that only B's suit. Each replica takes its oldest open placement for each pod, so the two race on every reqID.
SHARED_CARDS = [("gpu-a100-1", 0), ("gpu-a100-1", 1), ("gpu-a100-0", 0), ("gpu-a100-0", 1)]
SHARED_CARDS += [("gpu-h100-0", index) for index in range(8)]


def test_two_placements_sharing_a_req_id_claimed_by_two_replicas_in_one_burst_are_consumed_once(
    cluster: Sandbox, namespace: str, tmp_path: Path, webhooks: list[Webhook], configurations: list[str]
) -> None:
    """Webhook A sees only half-a pods, which suit only the shared-a-N placements; B half-b and shared-b-N. The
    pairs shared-a-N and shared-b-N have one reqID; a 40-pod burst has both replicas claim the pairs in step, each
    before its cache shows the other's claim: only the reqID's guard (a Lease only one can create) keeps one pod
    per reqID."""
    first, second = two_halves(cluster, namespace, tmp_path, webhooks, configurations)
    custom = client.CustomObjectsApi(cluster.api_client())
    pairs = len(SHARED_CARDS) // 2
    for index in range(pairs):
        for half, (node, card) in zip("ab", SHARED_CARDS[2 * index : 2 * index + 2], strict=True):
            spec = {
                "reqID": f"req-shared-{index}",
                "podSelector": {"matchLabels": {"half": half, "round": "shared"}},
                "nodeName": node,
                "gpuDevices": [f"gpu-{card}/10"],
            }
            body = {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "HamiPodPlacement",
                "metadata": {"name": f"shared-{half}-{index}"},
            }
            custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, {**body, "spec": spec})
    for webhook in (first, second):
        for half in "ab":
            wait_for(
                lambda w=webhook, h=half: sees_placement(w, namespace, f"shared-{h}-{pairs - 1}"), "both to see all"
            )
    core = client.CoreV1Api(cluster.api_client())
    assert len(create_concurrently(core, namespace, "shared", 40)) == 40
    pods = core.list_namespaced_pod(namespace, label_selector="round=shared").items
    pinned = [p for p in pods if CLAIM in (p.metadata.annotations or {})]
    req_ids = sorted(p.metadata.annotations["scheduling.hami.placement.com/req-id"] for p in pinned)
    assert req_ids == sorted(f"req-shared-{index}" for index in range(pairs)), "one pod per reqID, every reqID used"
    claimed = {
        f"{h}-{index}": status_of(cluster, namespace, f"shared-{h}-{index}").get("claim")
        for index in range(pairs)
        for h in "ab"
    }
    # The guards live in the server's namespace ("default" for a server not told one), named after the placement's.
    leases = client.CoordinationV1Api(cluster.api_client()).list_namespaced_lease("default").items
    guards = {
        lease.metadata.annotations["scheduling.hami.placement.com/placement"]
        for lease in leases
        if lease.metadata.name.startswith("hami-place-reqid-")
        and lease.metadata.annotations.get("scheduling.hami.placement.com/placement-namespace") == namespace
    }
    for index in range(pairs):
        winners = [h for h in "ab" if claimed[f"{h}-{index}"]]
        assert len(winners) == 1, f"req-shared-{index} claimed by {winners}"
        assert f"shared-{winners[0]}-{index}" in guards, "the reqID's guard names the placement that claimed it"
        loser = f"shared-{'b' if winners == ['a'] else 'a'}-{index}"
        failed = wait_for(
            lambda n=loser: (s := status_of(cluster, namespace, n)).get("phase") == "Failed" and s,
            "the other placement to fail on the consumed reqID",
        )
        assert "reqID already consumed" in failed["message"]
    assert len(guards) == pairs


def test_evict_pod_behind_a_blocking_budget_is_retried_until_the_budget_is_relaxed(
    cluster: Sandbox, namespace: str, tmp_path: Path, webhooks: list[Webhook], configurations: list[str]
) -> None:
    core = client.CoreV1Api(cluster.api_client())
    policy = client.PolicyV1Api(cluster.api_client())
    victim = gpu_pod("", {"app": "victim"}, name="victim")
    victim["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [A100_1]}]}
                ]
            }
        }
    }
    core.create_namespaced_pod(namespace, victim)
    wait_for(lambda: core.read_namespaced_pod("victim", namespace).status.phase == "Running", "the victim to run")
    policy.create_namespaced_pod_disruption_budget(
        namespace,
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "keep-victim"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "victim"}}},
        },
    )
    wait_for(
        lambda: (
            (s := policy.read_namespaced_pod_disruption_budget("keep-victim", namespace).status)
            and s.observed_generation
            and s.current_healthy == 1
        ),
        "the budget's status",
    )

    webhook = start(cluster, tmp_path)
    webhooks.append(webhook)
    register(cluster, configurations, namespace, [(webhook, {"matchLabels": {"app": "newcomer"}})])
    create_placement(cluster, namespace, "make-room", {"app": "newcomer"}, ["gpu-0"], evict="victim")
    wait_for(lambda: sees_placement(webhook, namespace, "make-room"), "the webhook to see the placement")
    newcomer = core.create_namespaced_pod(namespace, gpu_pod("newcomer-", {"app": "newcomer"}))
    assert newcomer.metadata.annotations[CLAIM]

    blocked = wait_for(
        lambda: (s := status_of(cluster, namespace, "make-room")).get("eviction", {}).get("result") == "Blocked" and s,
        "the eviction to be blocked",
    )
    assert blocked["phase"] == "Evicting"
    assert "keep-victim" in blocked["eviction"]["message"]
    assert core.read_namespaced_pod("victim", namespace).metadata.deletion_timestamp is None

    # Retried while blocked (5 s later): one EvictionBlocked Event, counted again, not one per attempt. Two attempts
    # prove both; the budget is relaxed before the third (10 s after the second), which then succeeds.
    def blocked_events() -> list[client.CoreV1Event]:
        selector = "involvedObject.name=make-room,involvedObject.kind=HamiPodPlacement,reason=EvictionBlocked"
        return client.CoreV1Api(cluster.api_client()).list_namespaced_event(namespace, field_selector=selector).items

    counted = wait_for(
        lambda: (found := blocked_events()) and sum(e.count for e in found) >= 2 and found,
        "two blocked attempts to be counted",
    )
    assert len(counted) == 1, [(e.metadata.name, e.count) for e in counted]
    assert counted[0].count >= 2
    assert counted[0].last_timestamp > counted[0].first_timestamp
    assert status_of(cluster, namespace, "make-room")["eviction"]["attempts"] >= counted[0].count

    # The placed pod tells its pin to `kubectl describe pod`.
    placed = core.read_namespaced_pod(newcomer.metadata.name, namespace)
    pins = client.CoreV1Api(cluster.api_client()).list_namespaced_event(
        namespace,
        field_selector=f"involvedObject.uid={placed.metadata.uid},involvedObject.kind=Pod,reason=Pinned",
    )
    assert [e.message for e in pins.items] == [
        f"pinned by placement make-room to node {A100_1}, cards gpu-0 ({A100_1_CARD0})"
    ]
    described = cluster.kubectl("describe", "pod", newcomer.metadata.name, "-n", namespace).stdout
    assert "Pinned" in described and "pinned by placement make-room" in described

    policy.patch_namespaced_pod_disruption_budget("keep-victim", namespace, {"spec": {"minAvailable": 0}})
    done = wait_for(
        lambda: (s := status_of(cluster, namespace, "make-room")).get("phase") == "Consumed" and s,
        "the eviction to succeed once the budget allows it",
        timeout=150,
    )
    assert done["eviction"]["result"] == "Evicted"
    assert done["eviction"]["attempts"] > counted[0].count, "the attempt that succeeded came after those blocked"
    assert done["consumedBy"]["name"] == newcomer.metadata.name
    wait_for_events(cluster, namespace, "make-room", "Evicted")

    def victim_evicted() -> bool:
        try:
            return core.read_namespaced_pod("victim", namespace).metadata.deletion_timestamp is not None
        except ApiException as error:
            return error.status == 404

    wait_for(victim_evicted, "the victim to be evicted")


def on_a100_1(pod: dict[str, Any]) -> dict[str, Any]:
    """The pod, required onto gpu-a100-1 (where the placements' cards are)."""
    term = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [A100_1]}]}
    pod["spec"]["affinity"] = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
    }
    return pod


def test_evictions_go_by_identity_a_pod_re_created_under_the_name_is_kept_and_a_missing_one_is_reported(
    cluster: Sandbox, namespace: str, tmp_path: Path, webhooks: list[Webhook], configurations: list[str]
) -> None:
    core = client.CoreV1Api(cluster.api_client())
    policy = client.PolicyV1Api(cluster.api_client())
    first = core.create_namespaced_pod(namespace, on_a100_1(gpu_pod("", {"app": "victim"}, name="victim")))
    wait_for(lambda: core.read_namespaced_pod("victim", namespace).status.phase == "Running", "the victim to run")
    budget = {"minAvailable": 1, "selector": {"matchLabels": {"app": "victim"}}}
    policy.create_namespaced_pod_disruption_budget(
        namespace,
        {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "keep"}, "spec": budget},
    )
    wait_for(
        lambda: (
            (s := policy.read_namespaced_pod_disruption_budget("keep", namespace).status) and s.current_healthy == 1
        ),
        "the budget's status",
    )
    webhook = start(cluster, tmp_path)
    webhooks.append(webhook)
    register(cluster, configurations, namespace, [(webhook, {"matchLabels": {"tier": "placed"}})])
    create_placement(cluster, namespace, "make-room", {"app": "newcomer"}, ["gpu-0"], evict="victim")
    create_placement(cluster, namespace, "misspelled", {"app": "other"}, ["gpu-1"], evict="no-such-pod")
    for name in ("make-room", "misspelled"):
        wait_for(lambda n=name: sees_placement(webhook, namespace, n), "the webhook to see the placements")

    core.create_namespaced_pod(namespace, gpu_pod("newcomer-", {"app": "newcomer", "tier": "placed"}))
    blocked = wait_for(
        lambda: (s := status_of(cluster, namespace, "make-room")).get("eviction", {}).get("result") == "Blocked" and s,
        "the eviction to be blocked",
    )
    assert blocked["eviction"]["uid"] == first.metadata.uid

    core.delete_namespaced_pod("victim", namespace, grace_period_seconds=0)

    def victim_gone() -> bool:
        try:
            core.read_namespaced_pod("victim", namespace)
        except ApiException as error:
            return error.status == 404
        return False

    wait_for(victim_gone, "the first victim to be gone")
    second = core.create_namespaced_pod(namespace, on_a100_1(gpu_pod("", {"app": "victim"}, name="victim")))
    # Relaxed at once, so the next retry (5 s after the block) is the one that meets the second pod: while it is
    # blocked by the budget, each retry waits twice as long as the one before.
    policy.patch_namespaced_pod_disruption_budget("keep", namespace, {"spec": {"minAvailable": 0}})
    wait_for(lambda: core.read_namespaced_pod("victim", namespace).status.phase == "Running", "the second to run")
    done = wait_for(
        lambda: (s := status_of(cluster, namespace, "make-room")).get("phase") == "Consumed" and s,
        "the eviction to end once the budget allows it",
        timeout=150,
    )
    assert done["eviction"]["result"] == "NotFound", done["eviction"]
    assert "a newer pod of that name is kept" in done["eviction"]["message"]
    kept = core.read_namespaced_pod("victim", namespace)
    assert (kept.metadata.uid, kept.metadata.deletion_timestamp) == (second.metadata.uid, None)

    other = core.create_namespaced_pod(namespace, gpu_pod("other-", {"app": "other", "tier": "placed"}))
    assert other.metadata.annotations[CLAIM]
    missing = status_of(cluster, namespace, "misspelled")
    assert (missing["phase"], missing["eviction"]["result"]) == ("Consumed", "NotFound")
    assert "pod no-such-pod did not exist when the placement was claimed" in missing["eviction"]["message"]
    assert "Evicted" not in events_of(cluster, namespace, "misspelled")


def test_a_placement_that_evicts_for_a_pod_its_node_has_no_cpu_for_is_skipped_and_evicts_nothing(
    cluster: Sandbox, namespace: str, server_namespace: str, node: GpuNode, serving: dict[str, Any]
) -> None:
    """A placement written by hand with evictPod: a pod the node has no CPU for, even once that pod is gone, is
    admitted without a pin (told why) and nothing is evicted for it; one it has room for is pinned and the pod evicted.
    The room counts another scheduler's pod on the node and gives back the evicted pod's own CPU. The server's
    controller keeps what the pods ask (no policy here: it plans nothing, its watches run)."""
    core = client.CoreV1Api(cluster.api_client())
    webhook = serve_controller(cluster, serving["tmp_path"], serving["webhooks"], home=server_namespace)
    register(cluster, serving["configurations"], namespace, [(webhook, {"matchLabels": {"tier": "placed"}})])
    on_node = {"key": "kubernetes.io/hostname", "operator": "In", "values": [node.name]}
    required = {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [on_node]}]}
    }
    neighbour = {
        "metadata": {"name": "neighbour"},
        "spec": {
            "nodeName": node.name,
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "20"}}}],
        },
    }
    core.create_namespaced_pod(namespace, neighbour)
    victim = gpu_pod("", {"app": "victim"}, name="victim")
    victim["spec"]["affinity"] = {"nodeAffinity": required}
    victim["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "40"}
    core.create_namespaced_pod(namespace, victim)
    wait_for(lambda: core.read_namespaced_pod("victim", namespace).status.phase == "Running", "the victim to run")
    create_placement(cluster, namespace, "make-room", {"app": "newcomer"}, ["gpu-1"], node=node.name, evict="victim")
    wait_for(lambda: sees_placement(webhook, namespace, "make-room"), "the webhook to see the placement")
    synced = 'hami_place_cache_sync_age_seconds{kind="other-pods"}'
    wait_for(lambda: webhook.metric(synced) < 60, "the controller's watch of other schedulers' pods to list")

    def newcomer(cpu: str) -> subprocess.CompletedProcess[str]:
        pod = gpu_pod(f"newcomer-{cpu}-", {"app": "newcomer", "tier": "placed"})
        pod["spec"]["containers"][0]["resources"]["requests"] = {"cpu": cpu}
        return cluster.kubectl("create", "-n", namespace, "-o", "json", "-f", "-", input=json.dumps(pod))

    # 64 cores, less the neighbour's 20 (the victim's 40 given back): 44 left for 50.
    wide = newcomer("50")
    assert CLAIM not in (json.loads(wide.stdout)["metadata"].get("annotations") or {})
    assert (
        f"Warning: hami-place: placement make-room skipped for this pod: node {node.name}: kube-scheduler: "
        "Insufficient cpu (the node has 44000m CPU"
    ) in wide.stderr, wide.stderr
    assert "even with pod victim evicted, so it would stay Pending there" in wide.stderr, wide.stderr
    assert status_of(cluster, namespace, "make-room").get("phase", "Pending") == "Pending"
    assert core.read_namespaced_pod("victim", namespace).metadata.deletion_timestamp is None

    fits = json.loads(newcomer("30").stdout)["metadata"]
    assert fits["annotations"]["scheduling.hami.placement.com/placement"] == "make-room"
    done = wait_for(
        lambda: (s := status_of(cluster, namespace, "make-room")).get("eviction", {}).get("result") == "Evicted" and s,
        "the victim's eviction",
    )
    assert done["claim"]["token"] == fits["annotations"][CLAIM], done


def test_with_the_webhook_killed_pods_are_still_created_and_nothing_is_half_claimed(
    cluster: Sandbox, namespace: str, tmp_path: Path, webhooks: list[Webhook], configurations: list[str]
) -> None:
    webhook = start(cluster, tmp_path, "--placement-ttl", "3600")
    webhooks.append(webhook)
    register(cluster, configurations, namespace, [(webhook, {})])
    create_placement(cluster, namespace, "orphan", {"app": "lonely"}, ["gpu-0"])
    wait_for(lambda: sees_placement(webhook, namespace, "orphan"), "the webhook to see the placement")
    webhook.process.kill()
    webhook.process.wait()

    core = client.CoreV1Api(cluster.api_client())
    pod = core.create_namespaced_pod(namespace, gpu_pod("lonely-", {"app": "lonely"}))
    assert core.read_namespaced_pod(pod.metadata.name, namespace).metadata.uid
    assert CLAIM not in (pod.metadata.annotations or {})
    status = status_of(cluster, namespace, "orphan")
    assert "claim" not in status and status.get("phase", "Pending") == "Pending"


def test_a_claim_no_stored_pod_carries_is_released(
    cluster: Sandbox, namespace: str, tmp_path: Path, webhooks: list[Webhook]
) -> None:
    """A claim written by a replica that died before answering: the next replica puts the placement back.

    Both claims say claimedAt months ago (a writer whose clock ran ahead): the grace still runs on the deciding
    replica's own monotonic clock from when it first saw them. One claim is carried by a stored pod of another
    scheduler (outside the webhook's pod cache): the API server is asked, and that claim is never released.
    """
    custom = client.CustomObjectsApi(cluster.api_client())
    for name, token in (("stale", "never-stored"), ("carried", "carried-elsewhere")):
        create_placement(cluster, namespace, name, {"app": "x"}, ["gpu-0"])
        placement = read_placement(cluster, namespace, name)
        placement["status"] = {
            "phase": "Consumed",
            "message": "claimed by a pod (name given at creation)",
            "claim": {"token": token, "claimedAt": "2026-01-01T00:00:00Z"},
            "consumedAt": "2026-01-01T00:00:00Z",
        }
        custom.replace_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL, name, placement)
    elsewhere = gpu_pod("", {"app": "elsewhere"}, name="elsewhere")
    elsewhere["spec"]["schedulerName"] = "another-scheduler"
    elsewhere["metadata"]["annotations"] = {CLAIM: "carried-elsewhere"}
    client.CoreV1Api(cluster.api_client()).create_namespaced_pod(namespace, elsewhere)
    webhooks.append(start(cluster, tmp_path, "--claim-grace", "3"))
    released = wait_for(
        lambda: (s := status_of(cluster, namespace, "stale")).get("phase") == "Pending" and s,
        "the stale claim to be released after the grace (3 s) on the replica's own clock",
    )
    assert "claim" not in released
    assert "claim released" in released["message"]
    wait_for_events(cluster, namespace, "stale", "ClaimReleased")
    kept = status_of(cluster, namespace, "carried")
    assert (kept["phase"], kept["claim"]["token"]) == ("Consumed", "carried-elsewhere")


def test_an_unclaimed_placement_expires_after_the_ttl(
    cluster: Sandbox, namespace: str, tmp_path: Path, webhooks: list[Webhook]
) -> None:
    webhooks.append(start(cluster, tmp_path, "--placement-ttl", "3"))
    create_placement(cluster, namespace, "unwanted", {"app": "nobody"}, ["gpu-0"])
    expired = wait_for(
        lambda: (s := status_of(cluster, namespace, "unwanted")).get("phase") == "Expired" and s,
        "the placement to expire",
    )
    assert expired["message"] == "not claimed within 3s"
    wait_for_events(cluster, namespace, "unwanted", "Expired")


def test_malformed_bodies_get_a_4xx_and_the_server_keeps_serving(
    cluster: Sandbox, namespace: str, tmp_path: Path, webhooks: list[Webhook]
) -> None:
    webhook = start(cluster, tmp_path)
    webhooks.append(webhook)
    wrong_kind = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "Pod", "request": {"uid": "u"}}).encode()
    no_uid = json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {"operation": "CREATE", "object": {}},
        }
    ).encode()
    for body, status, fragment in (
        (b"this is not json", 400, "not valid JSON"),
        (wrong_kind, 400, "expected apiVersion"),
        (no_uid, 400, "no uid"),
    ):
        code, reply = webhook.post_mutate(body)
        assert code == status
        assert fragment in reply["error"]
        assert webhook.process.poll() is None
    code, reply = post_huge(webhook, 5 * 1024 * 1024)
    assert code == 413
    assert "larger than" in reply["error"]
    assert webhook.process.poll() is None
    good = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "still-serving",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "operation": "CREATE",
            "namespace": namespace,
            "object": gpu_pod("x-", {"app": "none"}),
        },
    }
    code, reply = webhook.post_mutate(json.dumps(good).encode())
    assert code == 200
    assert reply["response"] == {"uid": "still-serving", "allowed": True}


def test_a_server_side_dry_run_consumes_nothing(
    cluster: Sandbox, namespace: str, tmp_path: Path, webhooks: list[Webhook], configurations: list[str]
) -> None:
    webhook = start(cluster, tmp_path)
    webhooks.append(webhook)
    register(cluster, configurations, namespace, [(webhook, {"matchLabels": {"app": "dry"}})])
    create_placement(cluster, namespace, "dry", {"app": "dry"}, ["gpu-1"])
    wait_for(lambda: sees_placement(webhook, namespace, "dry"), "the webhook to see the placement")
    # Its acknowledgement is the last write before a pod comes: the resourceVersion compared is the one after it.
    before = wait_for(
        lambda: (p := read_placement(cluster, namespace, "dry")).get("status", {}).get("observedGeneration") and p,
        "the webhook to acknowledge the placement",
    )
    preview = cluster.kubectl(
        "create",
        "-n",
        namespace,
        "--dry-run=server",
        "-o",
        "json",
        "-f",
        "-",
        input=json.dumps(gpu_pod("", {"app": "dry"}, name="dry-run-pod")),
    )
    shown = json.loads(preview.stdout)
    assert shown["metadata"]["annotations"]["nvidia.com/use-gpuuuid"] == A100_1_CARD1
    after = read_placement(cluster, namespace, "dry")
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert "claim" not in (after.get("status") or {})
    real = client.CoreV1Api(cluster.api_client()).create_namespaced_pod(
        namespace, gpu_pod("", {"app": "dry"}, name="real-pod")
    )
    assert real.metadata.annotations[CLAIM], "the placement is still there for a real creation"


def curl(url: str) -> Any:
    """GET with curl, as an operator would; the body is shown when the status is not 200."""
    done = subprocess.run(["curl", "-s", "-w", "\n%{http_code}", url], check=True, capture_output=True, text=True)
    body, _, code = done.stdout.rpartition("\n")
    assert code == "200", f"{url}: HTTP {code}: {body[:2000]}"
    return json.loads(body)


def test_the_api_returns_the_documented_shapes(
    cluster: Sandbox, namespace: str, tmp_path: Path, webhooks: list[Webhook]
) -> None:
    webhook = start(cluster, tmp_path)
    webhooks.append(webhook)
    create_placement(cluster, namespace, "shown", {"app": "shown"}, ["gpu-0", "gpu-1"])
    wait_for(lambda: sees_placement(webhook, namespace, "shown"), "the webhook to see the placement")
    schemas = yaml.safe_load((REPO / "webhook" / "openapi.yaml").read_text())["components"]["schemas"]

    info = curl(f"{webhook.api}/api/v1/cluster-info")
    assert set(schemas["ClusterInfo"]["required"]) <= set(info)
    nodes = {node["name"]: node for node in info["nodes"]}
    assert {"gpu-a100-0", "gpu-a100-1", "gpu-h100-0"} <= set(nodes)
    for node in nodes.values():
        assert set(schemas["Node"]["required"]) <= set(node)
        for card in node["cards"]:
            assert set(schemas["Card"]["required"]) <= set(card)
    assert [card["uuid"] for card in nodes[A100_1]["cards"]] == [A100_1_CARD0, A100_1_CARD1]
    assert nodes[A100_1]["cards"][0]["memory"]["total"] == 40960

    listed = curl(f"{webhook.api}/api/v1/placements?namespace={namespace}")
    assert set(schemas["PlacementList"]["required"]) <= set(listed)
    (shown,) = listed["placements"]
    assert set(schemas["Placement"]["required"]) <= set(shown)
    assert shown["name"] == "shown" and shown["phase"] == "Pending" and shown["matchedPod"] is None
    assert shown["spec"]["gpuDevices"] == ["gpu-0", "gpu-1"]
