"""The defragmentation controller on the HAMi sandbox: HAMi's scheduler refuses a pod for want of room on one card,
and the controller, with no command run, makes the room (or says why it will not).

Each test gets a fresh node with two (or three) 40 GiB cards where Deployments' pods of 10,000 MiB sit one per card
(HAMi's spread policy), and a pod asking 35,000 MiB that fits no card. The server runs with `--defrag-policy`
pointing at a ConfigMap in a namespace of its own (the server's namespace is always out of the policy), the policy
limited to the test's namespace, `rescue.pendingFor: 1s` and a pass every second.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import urllib3
import yaml
from kubernetes import client, watch

from kubectl_hami_place.core.defrag.seal import move_sealed, seal_move
from kubectl_hami_place.core.names import (
    DEFRAG_FROM_CARDS_ANNOTATION,
    DEFRAG_FROM_NODE_ANNOTATION,
    DEFRAG_LEASE,
    DEFRAG_POD_ANNOTATION,
    DEFRAG_POD_UID_ANNOTATION,
    DEFRAG_RUN_LABEL,
    DEFRAG_TO_CARDS_ANNOTATION,
    GROUP,
    NOUSE_GPUUUID_ANNOTATION,
    PLACEMENT_ANNOTATION,
    PLURAL,
    ROOM_RESERVED_ANNOTATION,
    USE_GPUUUID_ANNOTATION,
    VERSION,
)
from kubectl_hami_place.core.planner import Move
from kubectl_hami_place.core.planner.apply import placement_for, req_id_for
from kubectl_hami_place.core.reservation import reserve
from kubectl_hami_place.kube.client import Kube
from kubectl_hami_place.kube.defrag import change_pod_annotations
from kubectl_hami_place.kube.errors import KubeInvalid
from kubectl_hami_place.kube.pods import change_pod
from sandbox import binaries, gpu_nodes
from sandbox.cluster import Sandbox, wait_for
from sandbox.webhook import Webhook, room_key, start
from tests.cluster import scopes
from tests.cluster.cli_harness import PLUGIN, REPO, get, placements, plugin
from tests.cluster.hami_harness import (
    HOLD,
    Evictions,
    GpuNode,
    allocation,
    card_entries,
    create,
    delete_nodes,
    deployment,
    evicted_pod,
    fresh_node,
    let_go,
    pod,
    scale_up,
    scheduling_failures,
)
from tests.cluster.webhook_harness import register, sa_kubeconfig, sees_placement

pytestmark = pytest.mark.cluster
SMALL = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "10000"}
BIG = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "35000"}
POLICY = "defrag-policy"
# In a case of the holds test, the PriorityClass it creates (named after the test's namespace).
HIGH = "<the test's class>"
# The churn test: how long pods arrive and leave, and the policy it runs under (a short cooldown, a small budget;
# movesPerNode and movesPerNamespace out of the way, so the hour's budget is the one that binds).
CHURN_SECONDS = 180
CHURN_COOLDOWN_SECONDS = 60
CHURN_MOVES_PER_HOUR = 2
# A pause between one big pod's end and the next one's arrival: a big pod still waits most of the time, and the churn
# beside the module's other tests costs about 26 s of CPU, not 43 s with none (which had 175 pods arrive in its 180 s).
CHURN_PAUSE_SECONDS = 1.0
KILLED_LEADER_LEASE_SECONDS = 6


def write_policy(
    cluster: Sandbox,
    server_namespace: str,
    namespace: str,
    mode: str,
    name: str = POLICY,
    *,
    also: tuple[str, ...] = (),
    reserve_for: str = "",
    priority_threshold: int | None = None,
    priority_class: str = "",
    min_replicas: int = 0,
    label_selector: dict[str, Any] | None = None,
    min_pod_age: str = "",
    node_selector: str = "",
    ignore_pods_without_pdb: bool = False,
    evict_local_storage_pods: bool = True,
    ignore_pvc_pods: bool = False,
    **budgets: int | str,
) -> None:
    """The DefragPolicy ConfigMap `name` for the test's namespace (and `also` these), created or replaced; the room
    kept for `reserve_for` when given, else for the policy's default; pods of `priority_threshold` (or of the value
    of the PriorityClass `priority_class`) or more held, and those whose controller has fewer than `min_replicas`
    running pods, that `label_selector` does not select, that were placed less than `min_pod_age` ago, that are on a
    node `node_selector` does not select, with `ignore_pods_without_pdb` that no PodDisruptionBudget covers,
    without `evict_local_storage_pods` that mount an emptyDir or hostPath volume, or with `ignore_pvc_pods` that mount
    a PersistentVolumeClaim."""
    policy = {
        "apiVersion": "scheduling.hami.placement.com/v1alpha1",
        "kind": "DefragPolicy",
        "mode": mode,
        "namespaces": {"include": [namespace, *also]},
        "rescue": {"enabled": True, "pendingFor": "1s", **({"reserveFor": reserve_for} if reserve_for else {})},
        "budgets": {"cooldown": "1h", **budgets},
        **({"priorityThreshold": {"value": priority_threshold}} if priority_threshold is not None else {}),
        **({"priorityThreshold": {"name": priority_class}} if priority_class else {}),
        **({"minReplicas": min_replicas} if min_replicas else {}),
        **({"labelSelector": label_selector} if label_selector is not None else {}),
        **({"minPodAge": min_pod_age} if min_pod_age else {}),
        **({"nodeSelector": node_selector} if node_selector else {}),
        **({"ignorePodsWithoutPDB": True} if ignore_pods_without_pdb else {}),
        **({} if evict_local_storage_pods else {"evictLocalStoragePods": False}),
        **({"ignorePvcPods": True} if ignore_pvc_pods else {}),
    }
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": server_namespace},
        "data": {"policy.yaml": json.dumps(policy)},
    }
    cluster.apply(body)


def controller(
    cluster: Sandbox,
    tmp_path: Path,
    webhooks: list[Webhook],
    configurations: list[str],
    *,
    namespace: str,
    home: str,
    flags: tuple[str, ...] = (),
    account: ChartAccount | None = None,
) -> Webhook:
    """A server with the controller on (`serve_controller`), registered for the test's namespace (it pins the moves'
    replacements)."""
    webhook = serve_controller(cluster, tmp_path, webhooks, home=home, flags=flags, account=account)
    register(cluster, configurations, namespace, [(webhook, {})])
    return webhook


def serve_controller(
    cluster: Sandbox,
    tmp_path: Path,
    webhooks: list[Webhook],
    *,
    home: str,
    flags: tuple[str, ...] = (),
    account: ChartAccount | None = None,
) -> Webhook:
    """A server with the controller on, its policy and Lease in `home`; `flags` go to `serve` besides. As the
    sandbox's admin, or as the chart's ServiceAccount with `account`."""
    if account is not None:
        flags = (*account.flags, *flags)
    webhook = start(
        cluster,
        tmp_path,
        "--defrag-policy",
        f"{home}/{account.policy if account else POLICY}",
        "--defrag-namespace",
        home,
        "--defrag-interval",
        "1",
        *flags,
        kubeconfig=account.kubeconfig if account else None,
    )
    webhooks.append(webhook)
    return webhook


@dataclass(frozen=True)
class ChartAccount:
    """The chart's ServiceAccount and RBAC for a release in the server's namespace: the kubeconfig of its token, the
    policy ConfigMap its Role may read, and the flags the chart's Deployment gives the server besides."""

    kubeconfig: Path
    policy: str
    flags: tuple[str, ...] = (
        "--hami-config",
        "kube-system/hami-scheduler-device",
        "--hami-scheduler",
        "kube-system/hami-scheduler",
    )


@pytest.fixture
def chart_account(
    request: pytest.FixtureRequest, cluster: Sandbox, server_namespace: str, tmp_path: Path
) -> Iterator[ChartAccount]:
    """The chart's RBAC and ServiceAccount (`helm template --show-only`), applied for a release named after the
    server's namespace, so that a server run with it has exactly the rights an install gives it (its ClusterRole
    without the rules of the resources a test parametrizes it with: an operator's narrower one); the cluster-wide
    objects and those in kube-system are deleted afterwards."""
    release = server_namespace
    shown = ["--show-only", "templates/rbac.yaml", "--show-only", "templates/serviceaccount.yaml"]
    # The Leases in the server's namespace, where a server run without --lease-namespace keeps them.
    shown += ["--set", f"leases.namespace={server_namespace}"]
    rendered = subprocess.run(
        [str(binaries.resolve("helm")), "template", release, str(REPO / "chart"), "-n", server_namespace, *shown],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    narrowed = set(getattr(request, "param", ()))
    if narrowed:
        objects = list(yaml.safe_load_all(rendered))
        for role in (obj for obj in objects if obj["kind"] == "ClusterRole"):
            role["rules"] = [rule for rule in role["rules"] if not narrowed & set(rule["resources"])]
        rendered = yaml.safe_dump_all(objects)
    cluster.kubectl("apply", "-f", "-", input=rendered)
    try:
        kubeconfig = sa_kubeconfig(cluster, server_namespace, f"{release}-webhook", tmp_path / "chart.kubeconfig")
        yield ChartAccount(kubeconfig, f"{release}-defrag-policy")
    finally:
        instance = f"app.kubernetes.io/instance={release}"
        cluster.kubectl("delete", "clusterrole,clusterrolebinding", "-l", instance, "--wait=false", check=False)
        cluster.kubectl("delete", "role,rolebinding", "-n", "kube-system", "-l", instance, "--wait=false", check=False)


def events(cluster: Sandbox, namespace: str, name: str) -> list[tuple[str, str]]:
    """(reason, message) of the controller's Events on the object, oldest first."""
    listed = client.CoreV1Api(cluster.api_client()).list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={name}"
    )
    ours = [e for e in listed.items if (e.source.component if e.source else "") == "hami-place-defrag"]
    return [(e.reason, e.message) for e in sorted(ours, key=lambda e: e.metadata.creation_timestamp)]


def said(cluster: Sandbox, namespace: str, name: str, reason: str) -> str:
    """The message of the controller's latest Event of that reason on the object, "" when none."""
    found = [message for r, message in events(cluster, namespace, name) if r == reason]
    return found[-1] if found else ""


def two_pods_one_per_card(
    cluster: Sandbox, namespace: str, node: GpuNode, priority_class: str = "", template: dict[str, Any] | None = None
) -> dict[str, tuple[str, str]]:
    """Deployments keep and move, one 10,000 MiB pod each, spread one per card: app -> (pod name, its card).
    `template` is merged into each pod template's metadata and spec."""
    held = {}
    for app in ("keep", "move"):
        body = deployment(app, 0, SMALL, node=node.name)
        if priority_class:
            body["spec"]["template"]["spec"]["priorityClassName"] = priority_class
        for part, values in (template or {}).items():
            body["spec"]["template"][part].update(values)
        create(cluster, namespace, body)
        name = scale_up(cluster, namespace, app)
        held[app] = (name, allocation(cluster, namespace, name).uuids[0])
    assert held["keep"][1] != held["move"][1], "HAMi's spread policy puts the two pods on two cards"
    return held


def pending_big(
    cluster: Sandbox, namespace: str, node: GpuNode, volumes: tuple[dict[str, Any], ...] = (), priority_class: str = ""
) -> None:
    """The pod that fits no card, Pending on HAMi's reasons; mounting `volumes`, of `priority_class` when given."""
    big = pod("big", BIG, node=node.name)
    if volumes:
        big["spec"]["volumes"] = list(volumes)
    if priority_class:
        big["spec"]["priorityClassName"] = priority_class
    create(cluster, namespace, big)
    wait_for(lambda: scheduling_failures(cluster, namespace, "big"), "HAMi to leave the big pod Pending")


def forged_refusal(cluster: Sandbox, where: str, namespace: str, name: str) -> None:
    """A FailedScheduling Event written in namespace `where` naming the pod `namespace/name` under another UID, last
    seen in 2099: once eventTime is set the API server lets an Event of one namespace name a pod of another."""
    now = datetime.now(UTC)
    event = client.CoreV1Event(
        metadata=client.V1ObjectMeta(name=f"forged-{secrets.token_hex(4)}", namespace=where),
        involved_object=client.V1ObjectReference(kind="Pod", namespace=namespace, name=name, uid="not-the-pod"),
        reason="FailedScheduling",
        message="0/1 nodes are available: 1 1/2 CardInsufficientMemory.",
        type="Warning",
        event_time=now,
        action="Scheduling",
        reporting_component="forger",
        reporting_instance="forger",
        first_timestamp=now,
        last_timestamp=datetime(2099, 1, 1, tzinfo=UTC),
        count=1,
    )
    client.CoreV1Api(cluster.api_client()).create_namespaced_event(where, event)


def uids(cluster: Sandbox, namespace: str) -> set[str]:
    """UIDs of the namespace's pods."""
    return {p.metadata.uid for p in client.CoreV1Api(cluster.api_client()).list_namespaced_pod(namespace).items}


def test_mode_on_rescues_the_pending_pod_without_any_command(  # noqa: PLR0917 - the fixtures
    cluster: Sandbox,
    namespace: str,
    server_namespace: str,
    node: GpuNode,
    serving: dict[str, Any],
    chart_account: ChartAccount,
) -> None:
    """The server runs as the chart's ServiceAccount: every call of a rescue is one the chart's RBAC grants. The big
    pod mounts a claim not bound yet, of a class that waits for its pod, with a volume on the node: once room is made,
    kube-scheduler binds it there. A tenant of another namespace forged the scheduler's last word on it, naming
    another UID: read as the pod's, it would have vetoed the rescue."""
    held = dict(two_pods_one_per_card(cluster, namespace, node).values())
    write_policy(cluster, server_namespace, namespace, "on", name=chart_account.policy)
    forged_refusal(cluster, server_namespace, namespace, "big")
    evictions = Evictions(cluster, namespace)
    api = client.CoreV1Api(cluster.api_client())
    try:
        data = waiting_claim(cluster, namespace, "data", node.name)
        server = controller(cluster, **serving, namespace=namespace, home=server_namespace, account=chart_account)
        pending_big(cluster, namespace, node, (data,))
        big = allocation(cluster, namespace, "big", timeout=240)
        bound = api.read_namespaced_persistent_volume_claim("data", namespace)
        assert (bound.status.phase, bound.spec.volume_name) == ("Bound", f"{namespace}-data")
    finally:
        evictions.stop()
        with contextlib.suppress(client.ApiException):
            api.delete_persistent_volume(f"{namespace}-data")
        with contextlib.suppress(client.ApiException):
            client.StorageV1Api(cluster.api_client()).delete_storage_class(f"{namespace}-local")
    assert len(evictions.deleted) == 1 and all(evictions.deleted.values()), evictions.deleted
    [moved] = evictions.deleted
    assert (big.node, big.uuids) == (node.name, [held[moved]]), "the big pod runs on the card the move freed"
    index = {str(card["id"]): card["index"] for card in node.cards}
    story = wait_for(lambda: said(cluster, namespace, "big", "DefragRescued"), "the rescue's last Event")
    assert story == f"rescued by 1 move(s): scheduled on {node.name}/gpu-{index[held[moved]]}", "HAMi's card"
    run = said(cluster, namespace, "big", "DefragRun")
    assert run.startswith("run ") and f"moving {namespace}/{moved} from {node.name}/gpu-" in run, run
    assert f"to rescue {namespace}/big" in run, run
    [made] = placements(cluster, namespace)
    assert made["metadata"]["name"].startswith(f"move-{moved}-")
    run_id = made["metadata"]["labels"][DEFRAG_RUN_LABEL]
    [kept] = set(held) - {moved}
    left, went = f"gpu-{index[held[moved]]}", f"gpu-{index[held[kept]]}"
    assert said(cluster, namespace, moved, "DefragMoved") == (
        f"evicted by run {run_id} to rescue {namespace}/big (CardInsufficientMemory); its replacement is pinned to "
        f"{node.name}/{went} by placement {made['metadata']['name']}"
    )
    annotations = made["metadata"]["annotations"]
    assert (annotations[DEFRAG_FROM_CARDS_ANNOTATION], annotations[DEFRAG_TO_CARDS_ANNOTATION]) == (left, went)
    assert f"moving {namespace}/{moved} from {node.name}/{left} to {node.name}/{went} " in run, run
    assert made["metadata"]["labels"][DEFRAG_RUN_LABEL] in run
    assert made["status"]["phase"] == "Consumed"
    assert server.metric("hami_place_defrag_rescued_pods_total") == 1
    assert server.metric('hami_place_defrag_moves_total{result="done"}') == 1
    assert server.metric("hami_place_defrag_leader") == 1
    refused = [line for line in server.log.read_text().splitlines() if "forbidden" in line.lower()]
    assert refused == [], "the chart's RBAC refused a call of the server"


def test_dry_run_moves_nothing_and_names_the_moves(
    cluster: Sandbox, namespace: str, server_namespace: str, node: GpuNode, serving: dict[str, Any]
) -> None:
    two_pods_one_per_card(cluster, namespace, node)
    write_policy(cluster, server_namespace, namespace, "dry-run")
    before = uids(cluster, namespace)
    server = controller(cluster, **serving, namespace=namespace, home=server_namespace)
    pending_big(cluster, namespace, node)
    message = wait_for(lambda: said(cluster, namespace, "big", "DefragDryRun"), "the dry-run Event on the big pod")
    assert message.startswith(f"would move {namespace}/"), message
    assert f" from {node.name}/gpu-" in message and f" to {node.name}/gpu-" in message, message
    assert message.endswith(f"(dry-run) to rescue {namespace}/big (CardInsufficientMemory)"), message
    wait_for(
        lambda: server.metric('hami_place_defrag_runs_total{result="dry_run",trigger="rescue"}') == 1,
        "the dry-run to be counted",
    )
    assert f"defrag: DefragDryRun on pod {namespace}/big: {message}" in server.log.read_text(), "the operator's log"
    decided = wait_for(lambda: last_decisions(cluster, f"{server_namespace}/{POLICY}"), "the leader's Lease to say it")
    trigger = f"rescue {namespace}/big (CardInsufficientMemory)"
    assert [(d["trigger"], d["moves"], d["dryRun"], d["outcome"]) for d in decided] == [
        (trigger, 1, True, message.removesuffix(f" to {trigger}"))
    ], "defrag status shows what the dry-run would move, which no placement records, and its trigger apart"
    assert placements(cluster, namespace) == []
    assert before <= uids(cluster, namespace), "no pod was evicted"
    assert server.metric('hami_place_defrag_moves_total{result="done"}') == 0


UNREAD_WITHOUT = {
    "csidrivers": "where a claim not bound yet may bind stays unread",
    "csinodes": "CSI attach limits stay unread: pods that claim a volume stay on their nodes",
    "csistoragecapacities": "where a capacity-checking driver may provision stays unread",
    "namespaces": "pods whose pod affinity picks namespaces by label stay on their nodes",
    "persistentvolumeclaims": "pods that claim a volume stay on their nodes",
    "persistentvolumes": "pods that claim a volume stay on their nodes",
    "storageclasses": "where a claim not bound yet may bind stays unread",
    "volumeattachments": "CSI attach limits stay unread: pods that claim a volume stay on their nodes",
}
"""The watches a plan goes on without, and what it then leaves unread."""


@pytest.mark.parametrize("chart_account", [tuple(UNREAD_WITHOUT)], indirect=True, ids=["no storage nor namespaces"])
def test_a_narrower_cluster_role_is_said_and_plans_go_on_without_what_it_forbids(  # noqa: PLR0917 - the fixtures
    cluster: Sandbox,
    namespace: str,
    server_namespace: str,
    node: GpuNode,
    serving: dict[str, Any],
    chart_account: ChartAccount,
) -> None:
    """An operator's ClusterRole without the chart's rules for claims, volumes, storage and namespaces: the
    controller says on its policy which watches it may not keep and what its plans leave unread without them, still
    names the moves that rescue a pod that claims no volume, and takes a watch up once it is granted."""
    two_pods_one_per_card(cluster, namespace, node)
    write_policy(cluster, server_namespace, namespace, "dry-run", name=chart_account.policy)
    server = controller(cluster, **serving, namespace=namespace, home=server_namespace, account=chart_account)
    pending_big(cluster, namespace, node)
    message = wait_for(lambda: said(cluster, namespace, "big", "DefragDryRun"), "the dry-run Event on the big pod")
    assert message.startswith(f"would move {namespace}/"), message
    told = [m for r, m in events(cluster, server_namespace, chart_account.policy) if r == "DefragWatchForbidden"]
    assert sorted(told) == [
        f"cannot watch {kind} (403 Forbidden): {without}; grant list and watch on {kind} (the chart's ClusterRole does)"
        for kind, without in UNREAD_WITHOUT.items()
    ]
    assert server.metric('hami_place_defrag_watch_forbidden{kind="namespaces"}') == 1
    assert server.metric('hami_place_defrag_watch_forbidden{kind="poddisruptionbudgets"}') == 0
    ref = f"{server_namespace}/{chart_account.policy}"
    wait_for(lambda: leader_forbids(cluster, ref) == sorted(UNREAD_WITHOUT), "the leader's Lease to name them all")
    table = plugin(cluster, "defrag", "status", "--policy", ref)
    assert table.code == 0, table.err
    assert (
        "Unread:  the leader may not watch csinodes: CSI attach limits stay unread: pods that claim a volume stay on "
        "their nodes; grant list and watch on csinodes (the chart's ClusterRole does)\n"
    ) in table.out, table.out
    listed = client.RbacAuthorizationV1Api(cluster.api_client()).list_cluster_role(
        label_selector=f"app.kubernetes.io/instance={server_namespace}"
    )
    [role] = [role for role in listed.items if any("pods" in rule.resources for rule in role.rules)]
    granted = {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]}
    cluster.kubectl(
        "patch",
        "clusterrole",
        role.metadata.name,
        "--type=json",
        "-p",
        json.dumps([{"op": "add", "path": "/rules/-", "value": granted}]),
    )
    wait_for(
        lambda: server.metric('hami_place_defrag_watch_forbidden{kind="namespaces"}') == 0,
        "the namespaces' watch to be taken up once granted (the watch retries at least every 30 s)",
        timeout=90,
    )
    assert server.metric('hami_place_defrag_watch_forbidden{kind="persistentvolumes"}') == 1
    wait_for(
        lambda: leader_forbids(cluster, ref) == sorted(set(UNREAD_WITHOUT) - {"namespaces"}),
        "defrag status to drop the watch granted",
    )


def last_decisions(cluster: Sandbox, ref: str) -> list[dict[str, Any]]:
    """The leader's last decisions `defrag status` shows, newest first."""
    shown = plugin(cluster, "defrag", "status", "--policy", ref, "-o", "json")
    assert shown.code == 0, shown.err
    decisions: list[dict[str, Any]] = shown.json()["leader"]["lastDecisions"]
    return decisions


def leader_forbids(cluster: Sandbox, ref: str) -> list[str]:
    """The watches `defrag status` says the leader may not keep."""
    shown = plugin(cluster, "defrag", "status", "--policy", ref, "-o", "json")
    assert shown.code == 0, shown.err
    forbidden: list[str] = shown.json()["leader"]["forbiddenWatches"]
    return forbidden


def spread_for_two_moves(cluster: Sandbox, namespace: str, node: GpuNode) -> None:
    """On the node's three cards, 15,000 and 25,000 MiB pods spread, then 25,000 and 15,000: the big pod's rescue
    takes two moves."""
    for app, mib in {"a": "15000", "b": "25000", "c": "25000", "d": "15000"}.items():
        body = deployment(app, 0, {"nvidia.com/gpu": "1", "nvidia.com/gpumem": mib}, node.name)
        create(cluster, namespace, body)
        allocation(cluster, namespace, scale_up(cluster, namespace, app))


def test_a_rescue_over_budget_does_nothing_and_says_why(
    cluster: Sandbox, namespace: str, server_namespace: str, serving: dict[str, Any]
) -> None:
    """Three cards (15,000 and 25,000 MiB pods spread, then 25,000 and 15,000): the big pod needs two moves, and
    one move an hour is allowed."""
    node = fresh_node(cluster, card_entries(3))
    try:
        spread_for_two_moves(cluster, namespace, node)
        before = uids(cluster, namespace)
        # The hour's budget is the cluster's, the moves sealed with the sandbox's key: those of earlier tests go with
        # their namespaces first (the churn's controller, beside, seals with a key of its own).
        key = room_key(cluster)
        wait_for(
            lambda: (
                not [
                    made
                    for made in (get(cluster, "hamipodplacements", "-A", "-l", DEFRAG_RUN_LABEL) or {}).get("items", [])
                    if move_sealed(made, key)
                ]
            ),
            "earlier tests' moves to be deleted with their namespaces",
            timeout=120,
        )
        # Labelled with a run by hand, it spends none of the hour's budget: no run sealed it.
        create(cluster, namespace, forged_run_placement("forged-1", f"{namespace}/a-0", "u-0", node, "no-such"))
        write_policy(cluster, server_namespace, namespace, "on", movesPerHour=1)
        server = controller(cluster, **serving, namespace=namespace, home=server_namespace)
        pending_big(cluster, namespace, node)
        message = wait_for(lambda: said(cluster, namespace, "big", "DefragNoPlan"), "the budget's Event")
        assert message == "budget: 1 move left this hour, the rescue needs 2", message
        assert [p["metadata"]["name"] for p in placements(cluster, namespace)] == ["forged-1"]
        assert before <= uids(cluster, namespace), "no pod was evicted"
        assert server.metric('hami_place_defrag_runs_total{result="budget",trigger="rescue"}') == 1
    finally:
        delete_nodes(cluster, [node])


@pytest.mark.parametrize(
    ("holds", "held"),
    [
        ({}, "has priority 1000, above the rescued pod's 0"),
        ({"priority_threshold": 1000}, "has priority 1000, at or above the policy's priorityThreshold 1000"),
        (
            {"priority_class": HIGH},
            "has priority 1000, at or above the policy's priorityThreshold 1000 (PriorityClass high-",
        ),
        ({"min_replicas": 2}, "its ReplicaSet has 1 running pod(s), fewer than the policy's minReplicas 2"),
        (
            {"label_selector": {"matchLabels": {"hami-place/movable": "true"}}},
            "is not selected by the policy's labelSelector",
        ),
        ({"min_pod_age": "1h"}, "ago, less than the policy's minPodAge 1h"),
        ({"node_selector": "pool=elsewhere"}, "is on a node the policy's nodeSelector does not select"),
        (
            {"ignore_pods_without_pdb": True},
            "is covered by no PodDisruptionBudget, and the policy moves only pods one covers",
        ),
        (
            {"evict_local_storage_pods": False},
            "mounts local storage (emptyDir), and the policy keeps such pods in place",
        ),
        (
            {"ignore_pvc_pods": True},
            "mounts a PersistentVolumeClaim, and the policy keeps such pods in place (ignorePvcPods: true)",
        ),
    ],
    ids=[
        "rescued pod's priority",
        "priorityThreshold",
        "priorityThreshold.name",
        "minReplicas",
        "labelSelector",
        "minPodAge",
        "nodeSelector",
        "ignorePodsWithoutPDB",
        "evictLocalStoragePods",
        "ignorePvcPods",
    ],
)
def test_a_pod_of_higher_priority_or_the_policy_holds_is_never_evicted_for_a_rescue(  # noqa: PLR0917 - the fixtures and the case
    cluster: Sandbox,
    namespace: str,
    server_namespace: str,
    node: GpuNode,
    serving: dict[str, Any],
    holds: dict[str, Any],
    held: str,
) -> None:
    """The pods holding the cards have a PriorityClass of value 1000, one pod each of two Deployments. The rescued pod
    has none (priority 0); or it has the same class, which alone would let them move, and the policy's
    priorityThreshold (by value, or by the class's name, which the server reads), its minReplicas (the only running
    pod of a Deployment stays), its labelSelector (which selects neither), its minPodAge (both were bound to the node
    a moment ago, as their PodScheduled condition says), its nodeSelector (which selects no node of the sandbox), its
    ignorePodsWithoutPDB (no budget covers them), its evictLocalStoragePods: false (each mounts an emptyDir for
    /dev/shm, as GPU pods do) or its ignorePvcPods (for that case both also mount a claim bound to a volume on the
    node) holds them."""
    high = f"high-{namespace}"
    scheduling = client.SchedulingV1Api(cluster.api_client())
    scheduling.create_priority_class(client.V1PriorityClass(metadata=client.V1ObjectMeta(name=high), value=1000))
    try:
        volumes = [{"name": "shm", "emptyDir": {"medium": "Memory"}}]
        if "ignore_pvc_pods" in holds:
            volumes.append(local_volume(cluster, namespace, "data", node.name))
        two_pods_one_per_card(cluster, namespace, node, priority_class=high, template={"spec": {"volumes": volumes}})
        before = uids(cluster, namespace)
        holds = {key: high if value == HIGH else value for key, value in holds.items()}
        write_policy(cluster, server_namespace, namespace, "on", **holds)
        server = controller(cluster, **serving, namespace=namespace, home=server_namespace)
        pending_big(cluster, namespace, node, priority_class=high if holds else "")
        message = wait_for(lambda: said(cluster, namespace, "big", "DefragNoPlan"), "the controller's Event")
        assert message.startswith("no plan: ") and held in message, message
        assert placements(cluster, namespace) == []
        assert before <= uids(cluster, namespace), "no higher-priority pod was evicted"
        assert server.metric('hami_place_defrag_moves_total{result="done"}') == 0
    finally:
        scheduling.delete_priority_class(high)
        if "ignore_pvc_pods" in holds:
            with contextlib.suppress(client.ApiException):
                client.CoreV1Api(cluster.api_client()).delete_persistent_volume(f"{namespace}-data")


def test_two_replicas_one_leader_each_move_once(
    cluster: Sandbox, namespace: str, server_namespace: str, node: GpuNode, serving: dict[str, Any]
) -> None:
    two_pods_one_per_card(cluster, namespace, node)
    write_policy(cluster, server_namespace, namespace, "on")
    replicas = [
        serve_controller(cluster, serving["tmp_path"], serving["webhooks"], home=server_namespace) for _ in range(2)
    ]
    register(cluster, serving["configurations"], namespace, [(replica, {}) for replica in replicas])
    wait_for(lambda: sum(r.metric("hami_place_defrag_leader") for r in replicas) == 1, "one leader")
    evictions = Evictions(cluster, namespace)
    try:
        pending_big(cluster, namespace, node)
        allocation(cluster, namespace, "big", timeout=240)
        wait_for(
            lambda: sum(r.metric('hami_place_defrag_moves_total{result="done"}') for r in replicas) == 1,
            "the leader to count its move settled",
        )
        assert sum(r.metric("hami_place_defrag_leader") for r in replicas) == 1
        leader, follower = sorted(replicas, key=lambda r: -r.metric("hami_place_defrag_leader"))
        assert leader.metric('hami_place_defrag_moves_total{result="done"}') == 1, "the leader made the move"
        lease = client.CoordinationV1Api(cluster.api_client()).read_namespaced_lease(DEFRAG_LEASE, server_namespace)
        assert lease.spec.holder_identity, lease.spec
        leader.stop()
        wait_for(lambda: follower.metric("hami_place_defrag_leader") == 1, "the other replica to take the lease over")
        wait_for(lambda: follower.metric("hami_place_defrag_policy_valid") == 1, "the new leader's policy")
    finally:
        evictions.stop()
    assert len(evictions.deleted) == 1, f"one move, one eviction, across the leader change: {evictions.deleted}"
    assert len(placements(cluster, namespace)) == 1, "the new leader made no second move"
    assert follower.metric('hami_place_defrag_moves_total{result="done"}') == 0


def test_a_bad_policy_turns_the_controller_off_and_says_which_field(
    cluster: Sandbox, namespace: str, server_namespace: str, serving: dict[str, Any]
) -> None:
    write_policy(cluster, server_namespace, namespace, "sometimes")
    server = controller(cluster, **serving, namespace=namespace, home=server_namespace)
    warning = wait_for(
        lambda: said(cluster, server_namespace, POLICY, "DefragPolicyInvalid"), "the Warning on the ConfigMap"
    )
    assert warning == "nothing is moved until this is fixed: mode: 'sometimes' is not a mode; write off, dry-run or on"
    assert server.metric("hami_place_defrag_policy_valid") == 0
    assert server.get("/readyz")[0] == 200, "admission stays ready"
    assert "mode: 'sometimes' is not a mode" in server.log.read_text()
    write_policy(cluster, server_namespace, namespace, "dry-run")
    wait_for(lambda: server.metric("hami_place_defrag_policy_valid") == 1, "the fixed policy to be read")


def test_a_policy_naming_a_missing_priority_class_moves_nothing_until_the_class_is_created(
    cluster: Sandbox, namespace: str, server_namespace: str, serving: dict[str, Any]
) -> None:
    """priorityThreshold: {name: CLASS} before CLASS exists: the controller stays off and says why on the ConfigMap;
    once the class is created, the policy is read with its value (read again every 10 s)."""
    late = f"late-{namespace}"
    write_policy(cluster, server_namespace, namespace, "dry-run", priority_class=late)
    server = controller(cluster, **serving, namespace=namespace, home=server_namespace)
    warning = wait_for(
        lambda: said(cluster, server_namespace, POLICY, "DefragPolicyInvalid"), "the Warning on the ConfigMap"
    )
    assert warning == (
        f"nothing is moved until this is fixed: priorityThreshold.name: PriorityClass {late} not found (read again "
        "every 10s); create it, or write value: N (its VALUE in kubectl get priorityclass) instead"
    )
    assert server.metric("hami_place_defrag_policy_valid") == 0
    scheduling = client.SchedulingV1Api(cluster.api_client())
    scheduling.create_priority_class(client.V1PriorityClass(metadata=client.V1ObjectMeta(name=late), value=7))
    try:
        wait_for(lambda: server.metric("hami_place_defrag_policy_valid") == 1, "the policy read with the class")
        assert server.log.read_text().count(f"PriorityClass {late} not found") == 1, "said once while it waited"
    finally:
        scheduling.delete_priority_class(late)


def earlier_run_placement(  # noqa: PLR0917 - the placement's fields
    cluster: Sandbox, name: str, moved: str, uid: str, node: GpuNode, app: str, card: int = 0
) -> dict[str, Any]:
    """A move's placement as an earlier leader's run writes it, sealed with the key the servers share: moving
    `moved` (`namespace/name`, UID `uid`) off `node`, pinning the pod labelled app=`app` to the node's card `card`."""
    return seal_move(forged_run_placement(name, moved, uid, node, app, card), room_key(cluster), datetime.now(UTC))


def forged_run_placement(  # noqa: PLR0917 - the placement's fields
    name: str, moved: str, uid: str, node: GpuNode, app: str, card: int = 0
) -> dict[str, Any]:
    """The same placement as a person who may create placements writes it by hand: labelled with a run, not sealed."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "HamiPodPlacement",
        "metadata": {
            "name": name,
            "namespace": moved.split("/", 1)[0],
            "labels": {DEFRAG_RUN_LABEL: "earlier-run"},
            "annotations": {
                DEFRAG_POD_ANNOTATION: moved,
                DEFRAG_POD_UID_ANNOTATION: uid,
                DEFRAG_FROM_NODE_ANNOTATION: node.name,
            },
        },
        "spec": {
            "reqID": f"{name}-req",
            "podSelector": {"matchLabels": {"app": app}},
            "nodeName": node.name,
            "gpuDevices": [f"gpu-{card}"],
        },
    }


def test_a_new_leader_undoes_open_moves_whose_pod_was_never_evicted(
    cluster: Sandbox, namespace: str, server_namespace: str, node: GpuNode, serving: dict[str, Any]
) -> None:
    """Two placements an earlier leader left open: one whose pod still runs (its eviction never happened) is
    deleted, one whose pod is gone is left for the replacement to claim."""
    held = two_pods_one_per_card(cluster, namespace, node)
    api = client.CoreV1Api(cluster.api_client())
    running = api.read_namespaced_pod(held["move"][0], namespace)
    for name, pod_name, uid in (("move-a-1", running.metadata.name, running.metadata.uid), ("move-b-1", "gone", "u-0")):
        moved = f"{namespace}/{pod_name}"
        create(cluster, namespace, earlier_run_placement(cluster, name, moved, uid, node, f"no-such-{name}"))
    moved = f"{namespace}/{running.metadata.name}"
    forged = forged_run_placement("forged-1", moved, running.metadata.uid, node, "no-such-forged")
    create(cluster, namespace, forged)
    write_policy(cluster, server_namespace, namespace, "on")
    server = controller(cluster, **serving, namespace=namespace, home=server_namespace)
    wait_for(
        lambda: [p["metadata"]["name"] for p in placements(cluster, namespace)] == ["forged-1", "move-b-1"],
        "the new leader to undo the move whose pod still runs",
    )
    assert api.read_namespaced_pod(held["move"][0], namespace).metadata.uid == running.metadata.uid
    assert f"placement {namespace}/forged-1 is labelled with a run but no run sealed it; left alone" in (
        server.log.read_text()
    ), "no run made the forged placement: a new leader leaves it"


def test_a_placement_written_ahead_under_a_moves_name_is_not_taken_for_the_move(
    cluster: Sandbox, namespace: str, server_namespace: str, node: GpuNode, serving: dict[str, Any]
) -> None:
    """Someone who may create placements writes, before the controller, the very placement a move of their pod
    would create (its name and its pin, for either pod's move). No run sealed it, so the controller does not take it
    for an earlier attempt of the move, which would pin and evict with no budget counting it: the run stops and
    says why, and nothing is evicted."""
    held = two_pods_one_per_card(cluster, namespace, node)
    api, apps = client.CoreV1Api(cluster.api_client()), client.AppsV1Api(cluster.api_client())
    ahead = []
    for app, other in (("keep", "move"), ("move", "keep")):
        running = api.read_namespaced_pod(held[app][0], namespace)
        [owner] = running.metadata.owner_references
        selector = apps.read_namespaced_replica_set(owner.name, namespace).spec.selector.match_labels
        to_card = held[other][1]
        move = Move(
            f"{namespace}/{running.metadata.name}", running.metadata.uid, node.name, (), node.name, (to_card,), ""
        )
        ahead.append(placement_for(move))
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "HamiPodPlacement",
            "metadata": {"name": placement_for(move), "labels": {DEFRAG_RUN_LABEL: "written-ahead"}},
            "spec": {
                "reqID": req_id_for(move),
                "podSelector": {"matchLabels": selector},
                "nodeName": node.name,
                "gpuDevices": [to_card],
            },
        }
        create(cluster, namespace, body)
    before = uids(cluster, namespace)
    write_policy(cluster, server_namespace, namespace, "on")
    server = controller(cluster, **serving, namespace=namespace, home=server_namespace)
    pending_big(cluster, namespace, node)
    message = wait_for(lambda: said(cluster, namespace, "big", "DefragStopped"), "the stopped run's Event")
    assert "already exists and is not this move's: no run of the controller sealed it" in message, message
    assert any(f"placement {namespace}/{name} already" in message for name in ahead), message
    assert sorted(p["metadata"]["name"] for p in placements(cluster, namespace)) == sorted(ahead)
    assert before <= uids(cluster, namespace), "no pod was evicted"
    assert server.metric('hami_place_defrag_moves_total{result="done"}') == 0


def test_a_disruption_budget_at_its_limit_blocks_the_rescue_and_says_which(
    cluster: Sandbox, namespace: str, server_namespace: str, node: GpuNode, serving: dict[str, Any]
) -> None:
    """Both pods the rescue could move are covered by a PodDisruptionBudget that allows no disruption."""
    two_pods_one_per_card(cluster, namespace, node)
    create(cluster, namespace, budget_at_zero("hold"))
    wait_for(
        lambda: at_its_limit(cluster, namespace, "hold"), "the disruption controller to count the budget at its limit"
    )
    before = uids(cluster, namespace)
    write_policy(cluster, server_namespace, namespace, "on")
    evictions = Evictions(cluster, namespace)
    try:
        server = controller(cluster, **serving, namespace=namespace, home=server_namespace)
        pending_big(cluster, namespace, node)
        message = wait_for(lambda: said(cluster, namespace, "big", "DefragBlocked"), "the controller's Event")
        wait_for(
            lambda: server.metric('hami_place_defrag_runs_total{result="blocked",trigger="rescue"}') == 1,
            "the blocked run to be counted",
        )
    finally:
        evictions.stop()
    assert message.startswith("blocked: "), message
    assert f"PodDisruptionBudget {namespace}/hold" in message, message
    assert evictions.deleted == {}, "nothing was evicted"
    assert before <= uids(cluster, namespace), "the protected pods still run, the same ones"
    assert placements(cluster, namespace) == [], "no placement is left pinning"
    assert server.metric('hami_place_defrag_moves_total{result="done"}') == 0
    assert server.metric('hami_place_defrag_runs_total{result="no_plan",trigger="rescue"}') == 0


def test_a_disruption_budget_that_arrives_after_planning_stops_the_run_as_blocked(
    cluster: Sandbox, namespace: str, server_namespace: str, node: GpuNode, serving: dict[str, Any]
) -> None:
    """The plan counted on no budget; a PodDisruptionBudget allowing no disruption arrives while the leader is stopped
    right after it pinned its move: the eviction is refused, and the run is reported blocked, not failed."""
    two_pods_one_per_card(cluster, namespace, node)
    write_policy(cluster, server_namespace, namespace, "on")
    before = uids(cluster, namespace)
    evictions = Evictions(cluster, namespace)
    try:
        server = controller(cluster, **serving, namespace=namespace, home=server_namespace)
        frozen = freeze_when(cluster, namespace, server, "pinned")
        pending_big(cluster, namespace, node)
        wait_for(frozen.is_set, "the leader's move to be pinned", timeout=120, interval=0.05)
        create(cluster, namespace, budget_at_zero("late"))
        wait_for(lambda: at_its_limit(cluster, namespace, "late"), "the disruption controller to count the budget")
        server.process.send_signal(signal.SIGCONT)
        message = wait_for(lambda: said(cluster, namespace, "big", "DefragBlocked"), "the controller's Event")
        wait_for(
            lambda: server.metric('hami_place_defrag_runs_total{result="blocked",trigger="rescue"}') >= 1,
            "the blocked run to be counted",
        )
        wait_for(lambda: placements(cluster, namespace) == [], "the move's placement to be rolled back")
    finally:
        evictions.stop()
    assert message.startswith("run ") and "stopped after 0 of 1 move(s)" in message, message
    assert "PodDisruptionBudget late (2 healthy, 2 required, 0 disruption(s) allowed)" in message, message
    assert evictions.deleted == {}, "nothing was evicted"
    assert before <= uids(cluster, namespace), "the protected pods still run, the same ones"
    assert server.metric('hami_place_defrag_moves_total{result="blocked"}') == 1
    assert server.metric('hami_place_defrag_runs_total{result="failed",trigger="rescue"}') == 0


def budget_at_zero(name: str) -> dict[str, Any]:
    """A PodDisruptionBudget over both Deployments' pods that allows no disruption."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name},
        "spec": {
            "maxUnavailable": 0,
            "selector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["keep", "move"]}]},
        },
    }


def test_a_run_stops_before_its_next_move_once_its_pending_pod_is_gone(
    cluster: Sandbox, namespace: str, server_namespace: str, serving: dict[str, Any]
) -> None:
    """Three cards as `spread_for_two_moves` fills them, whose rescue takes two moves: the big pod is deleted after the
    first eviction (the leader frozen there): the second pod is not evicted for a pod that no longer waits."""
    node = fresh_node(cluster, card_entries(3))
    try:
        spread_for_two_moves(cluster, namespace, node)
        write_policy(cluster, server_namespace, namespace, "on", movesPerHour=100, movesPerNode=10)
        server = controller(cluster, **serving, namespace=namespace, home=server_namespace)
        evictions = Evictions(cluster, namespace)
        try:
            frozen = freeze_when(cluster, namespace, server, "evicted")
            pending_big(cluster, namespace, node)
            wait_for(frozen.is_set, "the run's first eviction", timeout=120, interval=0.05)
            client.CoreV1Api(cluster.api_client()).delete_namespaced_pod("big", namespace, grace_period_seconds=0)
            server.process.send_signal(signal.SIGCONT)
            message = wait_for(lambda: said(cluster, namespace, "big", "DefragNotNeeded"), "the stopped run's Event")
            time.sleep(3)  # a few of the controller's passes, for a second eviction to show if it would make one
        finally:
            evictions.stop()
        run = said(cluster, namespace, "big", "DefragRun")
        assert run.startswith("run ") and run.count(" from ") == 2, f"a two-move run: {run}"
        run_id = run.split()[1].rstrip(":")
        assert message == (
            f"run {run_id} stopped after 1 of 2 move(s): the pod it rescues is gone; no more moves are made for it"
        )
        assert len(evictions.deleted) == 2 and sorted(evictions.deleted.values()) == [False, True], (
            f"the big pod deleted, one pod evicted: {evictions.deleted}"
        )
        assert len(placements(cluster, namespace)) == 1, "one move pinned"
        assert server.metric('hami_place_defrag_runs_total{result="unneeded",trigger="rescue"}') == 1
        assert server.metric('hami_place_defrag_moves_total{result="done"}') == 1
    finally:
        delete_nodes(cluster, [node])


def test_a_move_waits_out_the_evicted_pods_grace_period_before_its_timeout_counts(
    cluster: Sandbox, namespace: str, server_namespace: str, node: GpuNode, serving: dict[str, Any]
) -> None:
    """The moved pods have 40 s to stop, longer than the move's timeout (5 s here, 180 s by default), and a finalizer
    holds the evicted one past the timeout, as a checkpoint would: HAMi counts its card until it is gone, so the move
    waits for that and the timeout counts from the grace period's end. Given up at the timeout, the move evicted the
    replacement and the rescue failed."""
    template = {"metadata": {"finalizers": [HOLD]}, "spec": {"terminationGracePeriodSeconds": 40}}
    evictions = Evictions(cluster, namespace)
    try:
        held = dict(two_pods_one_per_card(cluster, namespace, node, template=template).values())
        write_policy(cluster, server_namespace, namespace, "on")
        flags = ("--defrag-move-timeout", "5")
        controller(cluster, **serving, namespace=namespace, home=server_namespace, flags=flags)
        pending_big(cluster, namespace, node)
        evicted = evicted_pod(cluster, namespace)
        time.sleep(8)  # past the move's timeout counted from the eviction
        assert not said(cluster, namespace, "big", "DefragStopped"), "the move was not given up"
        let_go(cluster, namespace, evicted.metadata.name)
        big = allocation(cluster, namespace, "big", timeout=120)
        wait_for(lambda: said(cluster, namespace, "big", "DefragRescued"), "the rescue's last Event")
    finally:
        evictions.stop()
        let_go(cluster, namespace)
    assert (big.node, big.uuids) == (node.name, [held[evicted.metadata.name]])
    assert evictions.deleted == {evicted.metadata.name: True}, f"one eviction, no replacement's: {evictions.deleted}"


def at_its_limit(cluster: Sandbox, namespace: str, name: str) -> bool:
    """The disruption controller counted both pods healthy and allows no disruption."""
    status = client.PolicyV1Api(cluster.api_client()).read_namespaced_pod_disruption_budget(name, namespace).status
    return bool(status and status.observed_generation and status.current_healthy == 2) and (
        status.disruptions_allowed == 0
    )


def freeze_when(cluster: Sandbox, namespace: str, replica: Webhook, window: str) -> threading.Event:
    """Stops (SIGSTOP) the replica the moment its move reaches the window; the event is set once it is stopped.

    `pinned`: the move's placement was created (the replica then waits for the webhook's acknowledgement before it
    evicts). `evicted`: a pod of the namespace started going away (the replacement has still to be created,
    scheduled by HAMi and bound before the move settles). Watched, not polled, so the stop lands inside the window.
    """
    frozen = threading.Event()
    if window == "pinned":
        custom = client.CustomObjectsApi(cluster.api_client())
        lister: Any = custom.list_namespaced_custom_object
        args: tuple[str, ...] = (GROUP, VERSION, namespace, PLURAL)
        since = lister(*args)["metadata"]["resourceVersion"]
    else:
        lister, args = client.CoreV1Api(cluster.api_client()).list_namespaced_pod, (namespace,)
        since = lister(*args).metadata.resource_version
    watching = watch.Watch()

    def reached(event: dict[str, Any]) -> bool:
        if window == "pinned":
            return event["type"] == "ADDED"
        return event["type"] == "DELETED" or bool(event["object"].metadata.deletion_timestamp)

    def follow() -> None:
        try:
            for event in watching.stream(lister, *args, resource_version=since, timeout_seconds=600):
                # The client yields None for a line it cannot decode (an empty one as the stream closes).
                if event and reached(event):
                    replica.process.send_signal(signal.SIGSTOP)
                    frozen.set()
                    watching.stop()
                    return
        except urllib3.exceptions.HTTPError:
            return

    threading.Thread(target=follow, daemon=True).start()
    return frozen


@pytest.mark.parametrize("window", ["pinned", "evicted"])
def test_the_leader_killed_mid_move_each_pod_is_evicted_and_pinned_once(  # noqa: PLR0917 - the fixtures and the window
    cluster: Sandbox, namespace: str, server_namespace: str, node: GpuNode, serving: dict[str, Any], window: str
) -> None:
    """The leader is killed (SIGKILL) after it pinned a move's replacement, before (`pinned`) or after (`evicted`) its
    eviction; the other replica takes the Lease over and undoes the move whose pod still runs (then makes it
    itself), or leaves the open placement to the replacement. Either way: one eviction, one placement, and the big
    pod runs on the freed card."""
    held = dict(two_pods_one_per_card(cluster, namespace, node).values())
    write_policy(cluster, server_namespace, namespace, "on")
    # A killed leader says nothing: the other replica waits the lease out, shorter here than the default 15 s.
    lease = ("--defrag-lease-duration", str(KILLED_LEADER_LEASE_SECONDS))
    replicas = [
        serve_controller(cluster, serving["tmp_path"], serving["webhooks"], home=server_namespace, flags=lease)
        for _ in range(2)
    ]
    register(cluster, serving["configurations"], namespace, [(replica, {}) for replica in replicas])
    wait_for(lambda: sum(r.metric("hami_place_defrag_leader") for r in replicas) == 1, "one leader")
    leader, follower = sorted(replicas, key=lambda r: -r.metric("hami_place_defrag_leader"))
    api = client.CoreV1Api(cluster.api_client())
    before = {p.metadata.name: p.metadata.uid for p in api.list_namespaced_pod(namespace).items}
    evictions = Evictions(cluster, namespace)
    try:
        frozen = freeze_when(cluster, namespace, leader, window)
        pending_big(cluster, namespace, node)
        wait_for(frozen.is_set, f"the leader's move to be {window}", timeout=120, interval=0.05)
        [move] = placements(cluster, namespace)
        moved = move["metadata"]["annotations"][DEFRAG_POD_ANNOTATION].split("/", 1)[1]
        app = moved.split("-", 1)[0]
        now = {p.metadata.name: p for p in api.list_namespaced_pod(namespace, label_selector=f"app={app}").items}
        if window == "pinned":
            still = now.get(moved)
            assert still is not None and still.metadata.uid == before[moved], "the stop lands before the eviction"
            assert not still.metadata.deletion_timestamp, "the stop lands before the eviction"
        bound = [n for n, p in now.items() if n != moved and (p.metadata.annotations or {}).get("hami.io/bind-phase")]
        assert bound == [], f"the stop lands before the move settled: the replacement {bound} was already bound"
        leader.process.send_signal(signal.SIGKILL)
        leader.process.wait()
        wait_for(lambda: follower.metric("hami_place_defrag_leader") == 1, "the other replica to take the lease over")
        lease = client.CoordinationV1Api(cluster.api_client()).read_namespaced_lease(DEFRAG_LEASE, server_namespace)
        assert lease.spec.lease_duration_seconds == KILLED_LEADER_LEASE_SECONDS, lease.spec
        big = allocation(cluster, namespace, "big", timeout=240)
        wait_for(
            lambda: [p["status"].get("phase") for p in placements(cluster, namespace)] == ["Consumed"],
            "the replacement to consume the one placement",
        )
        time.sleep(5)  # a few of the new leader's passes, for a second move to show if it would make one
    finally:
        evictions.stop()
    assert evictions.deleted == {moved: True}, (
        f"one eviction, by the Eviction API, across the kill: {evictions.deleted}"
    )
    [made] = placements(cluster, namespace)
    assert made["metadata"]["annotations"][DEFRAG_POD_ANNOTATION] == f"{namespace}/{moved}", "nothing pinned twice"
    [replacement] = [p for p in api.list_namespaced_pod(namespace, label_selector=f"app={app}").items]
    assert made["status"]["consumedBy"]["name"] == replacement.metadata.name
    assert (big.node, big.uuids) == (node.name, [held[moved]]), "the big pod runs on the card the move freed"
    made_again = 1 if window == "pinned" else 0
    assert follower.metric('hami_place_defrag_moves_total{result="done"}') == made_again, "the new leader's moves"
    if window == "pinned":
        assert "was never evicted" in follower.log.read_text(), "the new leader undid the move left half-made"


def test_a_move_whose_target_hami_refuses_is_given_up_and_its_pinned_replacement_evicted(  # noqa: PLR0917 - the fixtures
    cluster: Sandbox,
    namespace: str,
    server_namespace: str,
    node: GpuNode,
    serving: dict[str, Any],
    chart_account: ChartAccount,
) -> None:
    """Between the move's pin and its replacement's bind, a pod of another namespace takes the target card's room
    (the controller is stopped, SIGSTOP, while it is created). HAMi refuses the pinned replacement; once the move's
    time is out the run stops and the replacement, Pending for good on a consumed placement, is evicted, so its
    Deployment makes an unpinned one; the target card is left out of plans for the cooldown, by the next leader too.
    The server runs as the chart's ServiceAccount: the chart's RBAC grants what a give-up writes."""
    held = two_pods_one_per_card(cluster, namespace, node)
    write_policy(cluster, server_namespace, namespace, "on", name=chart_account.policy)
    # A lease long beside the stop, so the controller still leads when it goes on. The move's time, the least the
    # server takes, counts from the eviction, after the stop: the refused replacement is Pending within it.
    flags = ("--defrag-move-timeout", "5", "--defrag-lease-duration", "120")
    server = controller(
        cluster, **serving, namespace=namespace, home=server_namespace, flags=flags, account=chart_account
    )
    frozen = freeze_when(cluster, namespace, server, "pinned")
    pending_big(cluster, namespace, node)
    wait_for(frozen.is_set, "the controller's move to be pinned", timeout=120, interval=0.05)
    try:
        [move] = placements(cluster, namespace)
        moved = move["metadata"]["annotations"][DEFRAG_POD_ANNOTATION].split("/", 1)[1]
        app = moved.split("-", 1)[0]
        target = next(card for other, (_, card) in held.items() if other != app)
        api = client.CoreV1Api(cluster.api_client())
        assert not api.read_namespaced_pod(moved, namespace).metadata.deletion_timestamp, "stopped before the eviction"
        filler = pod("filler", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "25000"}, node=node.name)
        filler["metadata"]["annotations"] = {USE_GPUUUID_ANNOTATION: target}
        create(cluster, server_namespace, filler)
        assert allocation(cluster, server_namespace, "filler").uuids == [target], "the filler takes the target's room"
    finally:
        server.process.send_signal(signal.SIGCONT)
    stopped = wait_for(lambda: said(cluster, namespace, "big", "DefragStopped"), "the move to be given up", timeout=180)
    assert "not settled within 5 s" in stopped, stopped
    assert "Pending on the target, was evicted for an unpinned one" in stopped, stopped
    assert "; its target cards are left out of plans until " in stopped, stopped
    assert server.metric("hami_place_defrag_refused_cards") == 1, "the target card, which HAMi refused"
    pinned = stopped.split("; its replacement ", 1)[1].split(",", 1)[0].split("/", 1)[1]
    assert pinned.startswith(f"{app}-") and pinned != moved, stopped
    refused = scheduling_failures(cluster, namespace, pinned)
    assert any("CardInsufficientMemory" in refusal for refusal in refused), refused
    wait_for(lambda: pinned not in pod_names(cluster, namespace), "the pinned replacement to go")
    # Not waited for to run: the card the eviction freed goes to it or to the big pod, whichever kube-scheduler
    # retries first, and a pod HAMi refused may wait for kube-scheduler's next flush of unschedulable pods (minutes).
    [fresh] = wait_for(
        lambda: [name for name in pod_names(cluster, namespace, f"app={app}") if name not in (moved, pinned)],
        "the Deployment's next pod",
    )
    assert PLACEMENT_ANNOTATION not in annotations_of(cluster, namespace, fresh), "no placement pins the new one"
    [consumed] = placements(cluster, namespace)
    assert (consumed["status"]["phase"], consumed["status"]["consumedBy"]["name"]) == ("Consumed", pinned)
    assert server.metric('hami_place_defrag_moves_total{result="failed"}') == 1
    assert consumed["status"]["defragRefused"]["cards"] == [target], "the give-up is written in the move's status"
    # The next leader (this one stopped: it gives the Lease up) reads the refusal off the move's placement.
    server.stop()
    successor = serve_controller(
        cluster, serving["tmp_path"], serving["webhooks"], home=server_namespace, flags=flags, account=chart_account
    )
    wait_for(lambda: successor.metric("hami_place_defrag_leader") == 1, "the next replica to lead")
    wait_for(
        lambda: successor.metric("hami_place_defrag_refused_cards") == 1, "the next leader to leave the card out too"
    )


def test_an_earlier_leaders_move_whose_replacement_hami_refuses_is_given_up_by_the_next_leader(
    cluster: Sandbox, namespace: str, server_namespace: str, node: GpuNode, serving: dict[str, Any]
) -> None:
    """What a leader killed while it followed a move leaves when HAMi refuses the move's target: the move's placement
    (written here as the leader writes it), consumed by a replacement pinned to a card without room for it. The
    leader now leaves that replacement alone (no rescue plans around it) until the move is due to be given up (its
    pin's acknowledgement and move times after the placement's creation), then evicts it: its Deployment's next pod
    is not pinned and runs on the other card."""
    create(cluster, namespace, deployment("keep", 0, SMALL, node=node.name))
    keep = scale_up(cluster, namespace, "keep")
    full = allocation(cluster, namespace, keep).uuids[0]
    full_index = next(card["index"] for card in node.cards if card["id"] == full)
    free = next(card["id"] for card in node.cards if card["id"] != full)
    write_policy(cluster, server_namespace, namespace, "on")
    server = controller(
        cluster, **serving, namespace=namespace, home=server_namespace, flags=("--defrag-move-timeout", "5")
    )
    moved = f"{namespace}/stranded-gone"
    stranded = earlier_run_placement(cluster, "move-stranded-1", moved, "u-0", node, "stranded", full_index)
    create(cluster, namespace, stranded)
    wait_for(lambda: sees_placement(server, namespace, "move-stranded-1"), "the server to see the placement")
    create(cluster, namespace, deployment("stranded", 1, BIG, node=node.name))
    pinned = wait_for(lambda: pod_names(cluster, namespace, "app=stranded"), "the replacement")[0]
    assert annotations_of(cluster, namespace, pinned)[USE_GPUUUID_ANNOTATION] == full, "pinned to the full card"
    refused = wait_for(lambda: scheduling_failures(cluster, namespace, pinned), "HAMi to refuse the replacement")
    assert any("CardInsufficientMemory" in refusal for refusal in refused), refused
    wait_for(lambda: pinned not in pod_names(cluster, namespace), "the replacement to be evicted", timeout=90)
    # The Event follows the eviction: wait for it
    given_up = wait_for(lambda: said(cluster, namespace, pinned, "DefragStopped"), "the replacement's DefragStopped")
    assert given_up.startswith(f"the move of placement {namespace}/move-stranded-1 is given up"), given_up
    assert "; its target cards are left out of plans until " in given_up, given_up
    assert server.metric("hami_place_defrag_refused_cards") == 1, "the card the replacement was pinned to"
    fresh = current_pod(cluster, namespace, "stranded")
    assert PLACEMENT_ANNOTATION not in annotations_of(cluster, namespace, fresh), "no placement pins the new one"
    assert allocation(cluster, namespace, fresh).uuids == [free], "HAMi placed it on the card with room"
    [consumed] = placements(cluster, namespace)
    assert (consumed["status"]["phase"], consumed["status"]["consumedBy"]["name"]) == ("Consumed", pinned)
    assert pod_names(cluster, namespace, "app=keep") == [keep], "no rescue moved the other card's pod meanwhile"
    assert server.metric('hami_place_defrag_moves_total{result="failed"}') == 1


def current_pod(cluster: Sandbox, namespace: str, app: str) -> str:
    """The one pod of the app that is not going away, once it is the only one and HAMi placed it."""
    api = client.CoreV1Api(cluster.api_client())

    def alone() -> str:
        pods = api.list_namespaced_pod(namespace, label_selector=f"app={app}").items
        return str(pods[0].metadata.name) if len(pods) == 1 and not pods[0].metadata.deletion_timestamp else ""

    name = wait_for(alone, f"the one pod of {app}", timeout=120)
    allocation(cluster, namespace, name, timeout=120)
    return name


def spread_apart(cluster: Sandbox, namespace: str) -> None:
    """Fragments the node again when keep and move share a card: keep's pod leaves and its new one arrives on the
    empty card (HAMi's spread policy)."""
    keep, move = (current_pod(cluster, namespace, app) for app in ("keep", "move"))
    if allocation(cluster, namespace, keep).uuids != allocation(cluster, namespace, move).uuids:
        return
    cluster.kubectl("scale", "deployment", "keep", "-n", namespace, "--replicas=0")
    api = client.CoreV1Api(cluster.api_client())
    wait_for(lambda: not api.list_namespaced_pod(namespace, label_selector="app=keep").items, "keep's pod to leave")
    keep = scale_up(cluster, namespace, "keep")
    assert allocation(cluster, namespace, keep).uuids != allocation(cluster, namespace, move).uuids


def moves_recorded(cluster: Sandbox, namespace: str) -> list[tuple[datetime, str, str]]:
    """The controller's own records of its moves, oldest first: (placement created, pod moved, its replacement)."""
    found = []
    for made in placements(cluster, namespace):
        metadata = made["metadata"]
        if DEFRAG_RUN_LABEL not in (metadata.get("labels") or {}):
            continue
        replacement = ((made.get("status") or {}).get("consumedBy") or {}).get("name", "")
        created = datetime.fromisoformat(metadata["creationTimestamp"])
        found.append((created, metadata["annotations"][DEFRAG_POD_ANNOTATION], f"{namespace}/{replacement}"))
    return sorted(found)


def one_card_nodes(cluster: Sandbox, *names: str) -> list[GpuNode]:
    """Nodes of one 40 GiB card each, 64 CPUs, by these names."""
    made = [GpuNode(name, card_entries(1)) for name in names]
    entries = [{"name": n.name, "cpu": "64", "memory": "512Gi", "pods": "110", "cards": n.cards} for n in made]
    gpu_nodes.create_nodes(cluster, entries)
    return made


def bound_pod(name: str, node: str, container: dict[str, Any]) -> dict[str, Any]:
    """A pod bound to `node` by its spec (no scheduler's, no card: HAMi's webhook leaves it alone) of one container."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"hami.io/webhook": "ignore"}},
        "spec": {"nodeName": node, "terminationGracePeriodSeconds": 0, "containers": [container]},
    }


def rescued_through_c(
    cluster: Sandbox,
    namespace: str,
    server_namespace: str,
    serving: dict[str, Any],
    *,
    moved: str,
    nodes: tuple[str, str, str],
) -> dict[str, Any]:
    """The big pod waits on A; the controller (dry-run) and `plan --for` both make room by moving `moved` to C and
    never to B, where its replacement would be refused. Returns the plan."""
    a, b, c = nodes
    write_policy(cluster, server_namespace, namespace, "dry-run")
    controller(cluster, **serving, namespace=namespace, home=server_namespace)
    create(cluster, namespace, pod("big", BIG, node=a))
    wait_for(lambda: scheduling_failures(cluster, namespace, "big"), "HAMi to leave the big pod Pending")
    message = wait_for(lambda: said(cluster, namespace, "big", "DefragDryRun"), "the dry-run Event on the big pod")
    assert f"would move {namespace}/{moved} from {a}/gpu-0 to {c}/gpu-0" in message, message
    assert b not in message, message
    run = plugin(cluster, "plan", "--for", "big", "-n", namespace, "-o", "json")
    assert run.code == 0, run.err
    planned: dict[str, Any] = run.json()
    assert [(m["pod"], m["to"]["node"]) for m in planned["moves"]] == [(f"{namespace}/{moved}", c)]
    return planned


def test_no_move_lands_where_another_schedulers_pod_holds_the_cpu_the_plan_and_the_cli_go_elsewhere(
    cluster: Sandbox, namespace: str, server_namespace: str, serving: dict[str, Any]
) -> None:
    """The big pod waits on node A, whose one card holds `move` (10,000 MiB, 2 CPUs; it may run on A, B or C). B's
    card is the fuller one (a 5,000 MiB pod), so a plan counting cards alone moves `move` there; but a pod of the
    default scheduler asks 63 of B's 64 CPUs, so kube-scheduler would refuse the replacement: the plan goes to C.
    Once C is gone there is no plan, and the reason names B's CPU."""
    tag = uuid.uuid4().hex[:6]
    a, b, c = (f"rooms-{side}-{tag}" for side in "abc")
    made = one_card_nodes(cluster, a)
    try:
        body = deployment("move", 0, SMALL)
        spec = body["spec"]["template"]["spec"]
        spec["containers"][0]["resources"]["requests"] = {"cpu": "2"}
        on_nodes(spec, a, b, c)
        create(cluster, namespace, body)
        moved = scale_up(cluster, namespace, "move")
        assert allocation(cluster, namespace, moved).node == a, "B and C do not exist yet"
        made += one_card_nodes(cluster, b, c)
        create(cluster, namespace, pod("filler", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "5000"}, node=b))
        assert allocation(cluster, namespace, "filler").node == b
        hog = bound_pod(
            "cpu-hog", b, {"name": "c", "image": "registry.invalid/web:1", "resources": {"requests": {"cpu": "63"}}}
        )
        create(cluster, namespace, hog)
        result = rescued_through_c(cluster, namespace, server_namespace, serving, moved=moved, nodes=(a, b, c))
        assert [m["from"]["node"] for m in result["moves"]] == [a]
        assert result["target"]["node"] == a

        delete_nodes(cluster, [made.pop()])
        refused = wait_for(lambda: said(cluster, namespace, "big", "DefragNoPlan"), "the no-plan Event once C is gone")
        assert f"{moved} fits no other card except on {b}, whose cpu would not hold it" in refused, refused
        run = plugin(cluster, "plan", "--for", "big", "-n", namespace, "-o", "json")
        assert run.code == 1 and run.json()["moves"] == [], run.out
        assert any(f"except on {b}, whose cpu would not hold it" in r for r in run.json()["reasons"]), run.out
    finally:
        delete_nodes(cluster, made)


def test_no_move_lands_on_a_node_whose_taint_the_pod_does_not_tolerate(
    cluster: Sandbox, namespace: str, server_namespace: str, serving: dict[str, Any]
) -> None:
    """As above, but B is kept for another team by a NoSchedule taint its filler tolerates and `move` does not, and C
    is a GPU pool's node whose taint `move` tolerates: kube-scheduler would refuse the replacement on B, so the
    controller (from its cache, which keeps taints and tolerations) and `plan` go to C."""
    tag = uuid.uuid4().hex[:6]
    a, b, c = (f"taints-{side}-{tag}" for side in "abc")
    made = one_card_nodes(cluster, a)
    try:
        body = deployment("move", 0, SMALL)
        pool = {"key": f"pool-{tag}", "value": "gpu", "effect": "NoSchedule"}
        body["spec"]["template"]["spec"]["tolerations"] = [{**pool, "operator": "Equal"}]
        on_nodes(body["spec"]["template"]["spec"], a, b, c)
        create(cluster, namespace, body)
        moved = scale_up(cluster, namespace, "move")
        assert allocation(cluster, namespace, moved).node == a, "B and C do not exist yet"
        made += one_card_nodes(cluster, b, c)
        taint = {"key": f"team-{tag}", "value": "other", "effect": "NoSchedule"}
        nodes = client.CoreV1Api(cluster.api_client())
        nodes.patch_node(b, {"spec": {"taints": [taint]}})
        nodes.patch_node(c, {"spec": {"taints": [pool]}})
        filler = pod("filler", {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "5000"}, node=b)
        filler["spec"]["tolerations"] = [{"key": taint["key"], "operator": "Exists"}]
        create(cluster, namespace, filler)
        assert allocation(cluster, namespace, "filler").node == b
        rescued_through_c(cluster, namespace, server_namespace, serving, moved=moved, nodes=(a, b, c))
    finally:
        delete_nodes(cluster, made)


def on_nodes(spec: dict[str, Any], *names: str) -> None:
    """Requires the pod spec's nodes to be among `names`."""
    hostname = {"key": "kubernetes.io/hostname", "operator": "In", "values": list(names)}
    spec["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [hostname]}]}
        }
    }


def big_on(*names: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """The big pod (35,000 MiB on one card), allowed on the nodes `names` only (`on_nodes`)."""
    big = pod("big", BIG, labels=labels)
    on_nodes(big["spec"], *names)
    return big


def light_then_fixed(
    cluster: Sandbox, namespace: str, made: list[GpuNode], *, nodes: tuple[str, str], fixed: tuple[str, str]
) -> str:
    """One-card nodes `first` and `second` (appended to `made`): `light` (10,000 MiB, a Deployment allowed on both)
    on `first`, made before `second` exists, then the pod `fixed` names (no controller, so it never moves) holding
    its MiB of `second`'s card. Returns light's pod."""
    first, second = nodes
    made += one_card_nodes(cluster, first)
    body = deployment("light", 0, SMALL)
    on_nodes(body["spec"]["template"]["spec"], first, second)
    create(cluster, namespace, body)
    light = scale_up(cluster, namespace, "light")
    assert allocation(cluster, namespace, light).node == first, f"{second} does not exist yet"
    made += one_card_nodes(cluster, second)
    name, mib = fixed
    create(cluster, namespace, pod(name, {"nvidia.com/gpu": "1", "nvidia.com/gpumem": mib}, node=second))
    assert allocation(cluster, namespace, name).node == second
    return light


def local_pv(cluster: Sandbox, name: str, nodes: tuple[str, ...], storage_class: str = "") -> None:
    """A 1 GiB ReadWriteOnce local PersistentVolume `name` of `storage_class`, reached from `nodes` (as a node's
    disk, or one shared by a few nodes, is)."""
    on_node = {"key": "kubernetes.io/hostname", "operator": "In", "values": list(nodes)}
    client.CoreV1Api(cluster.api_client()).create_persistent_volume(
        {
            "metadata": {"name": name},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "storageClassName": storage_class,
                "local": {"path": f"/mnt/{name}"},
                "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [on_node]}]}},
            },
        }
    )


def claim_asks(storage_class: str, **more: Any) -> dict[str, Any]:
    """A claim's spec: 1 GiB ReadWriteOnce of `storage_class`, and `more`."""
    return {
        "accessModes": ["ReadWriteOnce"],
        "storageClassName": storage_class,
        "resources": {"requests": {"storage": "1Gi"}},
        **more,
    }


def waiting_class(cluster: Sandbox, namespace: str, provisioner: str = "kubernetes.io/no-provisioner") -> str:
    """The StorageClass `<namespace>-local`, which waits for a claim's pod (WaitForFirstConsumer) and provisions by
    `provisioner` (by default, nothing: local volumes are made by hand); returns its name."""
    name = f"{namespace}-local"
    client.StorageV1Api(cluster.api_client()).create_storage_class(
        {"metadata": {"name": name}, "provisioner": provisioner, "volumeBindingMode": "WaitForFirstConsumer"}
    )
    return name


def local_volume(cluster: Sandbox, namespace: str, name: str, *nodes: str) -> dict[str, Any]:
    """A claim bound to a local volume reached from `nodes`; returns the pod volume that mounts it."""
    local_pv(cluster, f"{namespace}-{name}", nodes)
    return bound_claim(cluster, namespace, name)


def csi_claim(cluster: Sandbox, namespace: str, name: str, driver: str) -> dict[str, Any]:
    """A claim bound to a 1 GiB volume `driver` attaches, reached from any node; returns the pod volume that mounts
    it."""
    source = {"driver": driver, "volumeHandle": f"{namespace}-{name}"}
    volume_spec = {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "csi": source}
    client.CoreV1Api(cluster.api_client()).create_persistent_volume(
        {"metadata": {"name": f"{namespace}-{name}"}, "spec": volume_spec}
    )
    return bound_claim(cluster, namespace, name)


def bound_claim(cluster: Sandbox, namespace: str, name: str) -> dict[str, Any]:
    """The claim `name` of the volume `<namespace>-<name>`, once bound; returns the pod volume that mounts it."""
    api = client.CoreV1Api(cluster.api_client())
    claim = {"metadata": {"name": name}, "spec": claim_asks("", volumeName=f"{namespace}-{name}")}
    api.create_namespaced_persistent_volume_claim(namespace, claim)
    wait_for(
        lambda: api.read_namespaced_persistent_volume_claim(name, namespace).status.phase == "Bound",
        f"claim {name} to bind",
    )
    return {"name": name, "persistentVolumeClaim": {"claimName": name}}


def attach_limit(cluster: Sandbox, node: str, driver: str, count: int) -> None:
    """The node's CSINode, its driver limited to `count` attached volumes (as a node plugin registers it)."""
    limited = {"name": driver, "nodeID": node, "allocatable": {"count": count}}
    client.StorageV1Api(cluster.api_client()).create_csi_node(
        {"metadata": {"name": node}, "spec": {"drivers": [limited]}}
    )


def waiting_claim(cluster: Sandbox, namespace: str, name: str, node: str) -> dict[str, Any]:
    """A claim not bound yet of a class that waits for its pod and provisions nothing, with one available volume of
    it, on `node`; returns the pod volume that mounts it."""
    storage_class = waiting_class(cluster, namespace)
    local_pv(cluster, f"{namespace}-{name}", (node,), storage_class)
    api = client.CoreV1Api(cluster.api_client())
    api.create_namespaced_persistent_volume_claim(
        namespace, {"metadata": {"name": name}, "spec": claim_asks(storage_class)}
    )
    wait_for(
        lambda: api.read_persistent_volume(f"{namespace}-{name}").status.phase == "Available",
        f"volume {namespace}-{name} to be available",
    )
    return {"name": name, "persistentVolumeClaim": {"claimName": name}}


def scratch_volume(cluster: Sandbox, namespace: str, name: str, *nodes: str) -> dict[str, Any]:
    """An ephemeral volume of a class that waits for its pod and provisions nothing, with an available local volume of
    it on each of `nodes`; returns the pod volume."""
    storage_class = waiting_class(cluster, namespace)
    for node in nodes:
        local_pv(cluster, f"{namespace}-{name}-{node}", (node,), storage_class)
    return {"name": name, "ephemeral": {"volumeClaimTemplate": {"spec": claim_asks(storage_class)}}}


def provisioned_claim(cluster: Sandbox, namespace: str, name: str, node: str) -> dict[str, Any]:
    """A claim not bound yet of a class that waits for its pod, provisioned by a CSI driver that asks kube-scheduler to
    check its storage capacity, which has room on `node` alone; returns the pod volume that mounts it."""
    driver = f"{namespace}.csi.example.com"
    storage = client.StorageV1Api(cluster.api_client())
    storage.create_csi_driver({"metadata": {"name": driver}, "spec": {"storageCapacity": True}})
    storage_class = waiting_class(cluster, namespace, driver)
    storage.create_namespaced_csi_storage_capacity(
        namespace,
        {
            "metadata": {"name": f"{name}-room"},
            "storageClassName": storage_class,
            "capacity": "10Gi",
            "nodeTopology": {"matchLabels": {"kubernetes.io/hostname": node}},
        },
    )
    client.CoreV1Api(cluster.api_client()).create_namespaced_persistent_volume_claim(
        namespace, {"metadata": {"name": name}, "spec": claim_asks(storage_class)}
    )
    return {"name": name, "persistentVolumeClaim": {"claimName": name}}


FPGA = "example.com/fpga"
"""An extended resource one node advertises: kube-scheduler counts it, and so does the plan."""


def test_a_pending_pods_term_that_picks_namespaces_by_label_is_read_and_is_unread_only_by_who_may_not_list_them(
    cluster: Sandbox, namespace: str, server_namespace: str, serving: dict[str, Any]
) -> None:
    """The big pod (35,000 MiB on A or B) is kept apart from web pods of the namespaces labelled with this test's
    team (a namespaceSelector that names labels), and one runs on B. A's card holds a pod that cannot move (20,000
    MiB, no controller), B's the movable `light` (10,000 MiB): a plan reading cards alone moves light to A and leaves
    B's card to the big pod, which kube-scheduler keeps off B. The controller watches the namespaces' labels, so it
    moves nothing and says no plan; `why` names the web pod that keeps the big pod off B, and `plan --for` finds no
    plan. A user who may not list namespaces gets the plan from `plan --for`, with warnings naming what is unread
    and the node the room would be made on."""
    tag = uuid.uuid4().hex[:6]
    a, b = f"unread-a-{tag}", f"unread-b-{tag}"
    made: list[GpuNode] = []
    try:
        light = light_then_fixed(cluster, namespace, made, nodes=(b, a), fixed=("heavy", "20000"))
        client.CoreV1Api(cluster.api_client()).patch_namespace(namespace, {"metadata": {"labels": {"team": tag}}})
        web = bound_pod("web", b, {"name": "c", "image": "registry.invalid/web:1"})
        web["metadata"]["labels"]["app"] = "web"
        create(cluster, namespace, web)
        write_policy(cluster, server_namespace, namespace, "dry-run")
        controller(cluster, **serving, namespace=namespace, home=server_namespace)
        big = big_on(a, b)
        apart = {**APART, "namespaceSelector": {"matchLabels": {"team": tag}}}
        big["spec"]["affinity"]["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [apart]}
        create(cluster, namespace, big)
        wait_for(lambda: scheduling_failures(cluster, namespace, "big"), "kube-scheduler to leave the big pod Pending")
        message = wait_for(lambda: said(cluster, namespace, "big", "DefragNoPlan"), "the no-plan Event on the big pod")
        assert message.startswith("no plan: ") and "does not read" not in message, message
        assert said(cluster, namespace, "big", "DefragDryRun") == ""

        told = plugin(cluster, "why", "big", "-n", namespace, "-o", "json")
        assert told.code == 0 and "warning" not in told.err, told.err
        [refused] = [node for node in told.json()["nodes"] if node["node"] == b]
        assert (refused["reason"], refused["message"]) == (
            "InterPodAffinity",
            f"kube-scheduler: the pod's anti-affinity (app=web): {namespace}/web runs on the node",
        ), refused
        none = plugin(cluster, "plan", "--for", "big", "-n", namespace, "-o", "json")
        assert none.code == 1 and none.json()["moves"] == [], none.out

        out, words = plugin_as(
            cluster, f"planner-{tag}", READS_BUT_NAMESPACES, "plan", "--for", "big", "-n", namespace, "-o", "json"
        )
        assert [(m["pod"], m["to"]["node"]) for m in json.loads(out)["moves"]] == [(f"{namespace}/{light}", a)]
        assert (
            f'warning: cannot read namespaces (forbidden: namespaces is forbidden: User "planner-{tag}" cannot list '
            'resource "namespaces" in API group "" at the cluster scope); pods whose pod affinity picks namespaces by '
            "label stay on their nodes"
        ) in words, words
        refusal = "1 node(s) didn't match pod anti-affinity rules"
        assert (
            f"warning: kube-scheduler keeps {namespace}/big off nodes for reasons the plan does not read ({refusal}): "
            f"check that {b} suits the pod"
        ) in words, words
    finally:
        delete_nodes(cluster, made)
        rbac = client.RbacAuthorizationV1Api(cluster.api_client())
        for delete in (rbac.delete_cluster_role_binding, rbac.delete_cluster_role):
            with contextlib.suppress(client.ApiException):
                delete(f"planner-{tag}")


@pytest.mark.parametrize("kept_by", ["extended resource", "volume", "waiting claim", "storage capacity"])
def test_a_pending_pods_extended_resource_and_bound_volume_are_read_and_no_room_is_made_where_they_refuse_it(
    cluster: Sandbox, namespace: str, server_namespace: str, serving: dict[str, Any], kept_by: str
) -> None:
    """The same nodes, the big pod asking an extended resource only A advertises, mounting a local volume of A, or
    mounting a claim not bound yet whose class (WaitForFirstConsumer) has an available volume on A only (no
    provisioner), or whose CSI driver checks storage capacity and has some on A only: kube-scheduler's refusal of B is
    read, the room could only be on A, whose pod cannot move, so there is no plan, and the controller and `why` say
    what keeps the pod off B. Users kept from one storage list each (claims or CSINodes for the volume, StorageClasses
    or CSIStorageCapacities for the claim the driver provisions) get `why`'s words on what that leaves unread."""
    tag = uuid.uuid4().hex[:6]
    a, b = f"kept-a-{tag}", f"kept-b-{tag}"
    made: list[GpuNode] = []
    try:
        light_then_fixed(cluster, namespace, made, nodes=(b, a), fixed=("heavy", "20000"))
        big = big_on(a, b)
        if kept_by == "volume":
            big["spec"]["volumes"] = [local_volume(cluster, namespace, "data", a)]
            reason, kept = "VolumeBinding", f"its volume {namespace}-data's node affinity excludes it"
        elif kept_by == "waiting claim":
            big["spec"]["volumes"] = [waiting_claim(cluster, namespace, "data", a)]
            reason, kept = "VolumeBinding", "no volume can be bound or provisioned there for its claim data"
        elif kept_by == "storage capacity":
            big["spec"]["volumes"] = [provisioned_claim(cluster, namespace, "data", a)]
            reason, kept = "VolumeBinding", f"{namespace}.csi.example.com has no storage there for its claim data"
        else:
            nodes = client.CoreV1Api(cluster.api_client())
            nodes.patch_node_status(a, {"status": {"allocatable": {FPGA: "1"}, "capacity": {FPGA: "1"}}})
            big["spec"]["containers"][0]["resources"]["limits"][FPGA] = "1"
            reason, kept = "NodeResourcesFit", f"Insufficient {FPGA}"
        write_policy(cluster, server_namespace, namespace, "dry-run")
        controller(cluster, **serving, namespace=namespace, home=server_namespace)
        create(cluster, namespace, big)
        wait_for(lambda: scheduling_failures(cluster, namespace, "big"), "kube-scheduler to leave the big pod Pending")
        message = wait_for(lambda: said(cluster, namespace, "big", "DefragNoPlan"), "the no-plan Event on the big pod")
        # The Event names the first few nodes only, and other tests' nodes may come first.
        assert message.startswith("no plan: ") and "does not read" not in message, message

        told = plugin(cluster, "why", "big", "-n", namespace, "-o", "json")
        assert told.code == 0 and "warning" not in told.err, told.err
        [refused] = [node for node in told.json()["nodes"] if node["node"] == b]
        assert refused["reason"] == reason, refused
        assert refused["message"].startswith(f"kube-scheduler: {kept}"), refused
        if kept_by == "volume":
            unread_without(
                cluster, namespace, tag, ("claims", "limits"), "1 node(s) didn't match PersistentVolume's node affinity"
            )
        if kept_by == "storage capacity":
            unread_without(
                cluster, namespace, tag, ("classes", "capacities"), "1 node(s) did not have enough free storage"
            )
    finally:
        delete_nodes(cluster, made)
        api = client.CoreV1Api(cluster.api_client())
        with contextlib.suppress(client.ApiException):
            api.delete_persistent_volume(f"{namespace}-data")
        storage = client.StorageV1Api(cluster.api_client())
        with contextlib.suppress(client.ApiException):
            storage.delete_storage_class(f"{namespace}-local")
        with contextlib.suppress(client.ApiException):
            storage.delete_csi_driver(f"{namespace}.csi.example.com")
        rbac = client.RbacAuthorizationV1Api(cluster.api_client())
        for delete in (rbac.delete_cluster_role_binding, rbac.delete_cluster_role):
            for suffix, *_ in STORAGE_UNREAD.values():
                with contextlib.suppress(client.ApiException):
                    delete(f"planner-{tag}{suffix}")


def unread_without(cluster: Sandbox, namespace: str, tag: str, lists: tuple[str, ...], refusal: str) -> None:
    """A user kept from each of these storage `lists` (and from none read after it): the big pod's volume is not
    read, and `why` says so, what it leaves unread, and kube-scheduler's `refusal` it does not read."""
    for unread in lists:
        suffix, rules, read, resource, group, without = STORAGE_UNREAD[unread]
        user = f"planner-{tag}{suffix}"
        _, words = plugin_as(cluster, user, rules, "why", "big", "-n", namespace)
        forbidden = f"{resource}.{group}" if group else resource
        assert (
            f'warning: cannot read {read} (forbidden: {forbidden} is forbidden: User "{user}" cannot list resource '
            f'"{resource}" in API group "{group}" at the cluster scope); {without}'
        ) in words, words
        assert f"off nodes for reasons hami-place does not read: {refusal}" in words, words


READS_BUT_VOLUMES = [
    {"apiGroups": [""], "resources": ["nodes", "pods", "configmaps"], "verbs": ["get", "list"]},
    {"apiGroups": ["policy"], "resources": ["poddisruptionbudgets"], "verbs": ["list"]},
]
"""What `why` reads, claims and volumes left out."""
READS_BUT_LIMITS = [
    *READS_BUT_VOLUMES,
    {"apiGroups": [""], "resources": ["persistentvolumeclaims", "persistentvolumes"], "verbs": ["list"]},
]
"""What `why` reads, CSINodes and VolumeAttachments left out."""
READS_BUT_NAMESPACES = [
    *READS_BUT_LIMITS,
    {"apiGroups": ["storage.k8s.io"], "resources": ["csinodes", "volumeattachments"], "verbs": ["list"]},
]
"""What `plan --for` reads, namespaces left out."""
READS_BUT_CAPACITIES = [
    *READS_BUT_NAMESPACES,
    {"apiGroups": ["storage.k8s.io"], "resources": ["storageclasses", "csidrivers"], "verbs": ["list"]},
]
"""What `why` reads for a claim not bound yet, CSIStorageCapacities left out."""
STORAGE_UNREAD = {
    "claims": (
        "",
        READS_BUT_VOLUMES,
        "claims and volumes",
        "persistentvolumeclaims",
        "",
        "pods that claim a volume stay on their nodes",
    ),
    "limits": (
        "-limits",
        READS_BUT_LIMITS,
        "CSI nodes and volume attachments",
        "csinodes",
        "storage.k8s.io",
        "CSI attach limits stay unread: pods that claim a volume stay on their nodes",
    ),
    "classes": (
        "-classes",
        READS_BUT_NAMESPACES,
        "storage classes and CSI drivers",
        "storageclasses",
        "storage.k8s.io",
        "where a claim not bound yet may bind stays unread",
    ),
    "capacities": (
        "-capacities",
        READS_BUT_CAPACITIES,
        "CSI storage capacities",
        "csistoragecapacities",
        "storage.k8s.io",
        "where a capacity-checking driver may provision stays unread",
    ),
}
"""For each storage list `why` may be kept from: the user's suffix, what `why` reads but that list, what it says it
cannot read, the resource and its group, and what it says that leaves unread."""


def plugin_as(cluster: Sandbox, user: str, rules: list[dict[str, Any]], *args: str) -> tuple[str, str]:
    """The plugin run as `user`, granted these rules (`identity_kubeconfig_with`), succeeding: its output, and its
    errors' words on one line."""
    kubeconfig = identity_kubeconfig_with(cluster, user, rules)
    proc = subprocess.run(
        [str(PLUGIN), *args, "--kubeconfig", str(kubeconfig)],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
        check=False,
    )
    words = " ".join(proc.stderr.split())
    assert proc.returncode == 0 and "Traceback" not in words, words
    return proc.stdout, words


def identity_kubeconfig_with(cluster: Sandbox, user: str, rules: list[dict[str, Any]]) -> Path:
    """A kubeconfig acting as `user`, bound cluster-wide to a ClusterRole of these rules (both named `user`)."""
    rbac = client.RbacAuthorizationV1Api(cluster.api_client())
    rbac.create_cluster_role({"metadata": {"name": user}, "rules": rules})
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": user},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": user},
            "subjects": [{"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}],
        }
    )
    return cluster.identity_kubeconfig(user, group="planners")


@pytest.mark.parametrize("needs", ["volume", "ephemeral volume", "extended resource", "anti-affinity", "attach limit"])
def test_a_moved_pod_goes_only_to_a_node_that_has_its_volume_or_extended_resource(
    cluster: Sandbox, namespace: str, server_namespace: str, serving: dict[str, Any], needs: str
) -> None:
    """`light` (10,000 MiB on A's one card) mounts a claim bound to a local volume of A and C, or an ephemeral volume
    whose class (WaitForFirstConsumer, no provisioner) has an available volume on A and one on C (its replacement's
    new claim may bind only C's), or asks an extended resource only A and C advertise, or has a required anti-affinity
    against the pod on B, or mounts a CSI volume whose driver B's CSINode limits to one volume, which B's pod holds
    (C's, to two); B's and C's cards each hold
    25,000 MiB of a pod that cannot move, so either has room for light, and the big pod (35,000 MiB) fits once light
    leaves A. In mode on the controller moves light to C, never to B, where kube-scheduler would refuse its
    replacement: the replacement runs on C and the big pod on A's card."""
    tag = uuid.uuid4().hex[:6]
    a, b, c = f"reach-a-{tag}", f"reach-b-{tag}", f"reach-c-{tag}"
    made: list[GpuNode] = []
    evictions = Evictions(cluster, namespace)
    nodes = client.CoreV1Api(cluster.api_client())
    with_fpga = {"status": {"allocatable": {FPGA: "1"}, "capacity": {FPGA: "1"}}}
    driver = f"{namespace}.attach.example.com"
    limited: list[str] = []
    try:
        made += one_card_nodes(cluster, a)
        body = deployment("light", 0, SMALL)
        template = body["spec"]["template"]["spec"]
        on_nodes(template, a, b, c)
        if needs == "volume":
            template["volumes"] = [local_volume(cluster, namespace, "data", a, c)]
        elif needs == "ephemeral volume":
            template["volumes"] = [scratch_volume(cluster, namespace, "scratch", a, c)]
        elif needs == "attach limit":
            template["volumes"] = [csi_claim(cluster, namespace, "data", driver)]
        elif needs == "anti-affinity":
            apart = {"labelSelector": {"matchLabels": {"role": "apart"}}, "topologyKey": "kubernetes.io/hostname"}
            template["affinity"]["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [apart]}
        else:
            nodes.patch_node_status(a, with_fpga)
            template["containers"][0]["resources"]["limits"][FPGA] = "1"
        create(cluster, namespace, body)
        light = scale_up(cluster, namespace, "light")
        assert allocation(cluster, namespace, light).node == a, "A is the only node yet"
        made += one_card_nodes(cluster, b, c)
        if needs == "extended resource":
            nodes.patch_node_status(c, with_fpga)
        if needs == "attach limit":
            for node, count in ((b, 1), (c, 2)):
                attach_limit(cluster, node, driver, count)
                limited.append(node)
        for node in (b, c):
            labels = {"app": node, "role": "apart"} if node == b else None
            fixed = pod(node, {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "25000"}, node=node, labels=labels)
            if needs == "attach limit" and node == b:
                fixed["spec"]["volumes"] = [csi_claim(cluster, namespace, "held", driver)]
            create(cluster, namespace, fixed)
            assert allocation(cluster, namespace, node).node == node
        write_policy(cluster, server_namespace, namespace, "on")
        controller(cluster, **serving, namespace=namespace, home=server_namespace)
        big = big_on(a, b, c)
        create(cluster, namespace, big)
        assert allocation(cluster, namespace, "big", timeout=240).node == a
        api = client.CoreV1Api(cluster.api_client())
        replacement = wait_for(
            lambda: [
                p.metadata.name
                for p in api.list_namespaced_pod(namespace, label_selector="app=light").items
                if p.metadata.name != light
            ],
            "light's replacement",
        )
        assert allocation(cluster, namespace, replacement[0]).node == c
    finally:
        evictions.stop()
        delete_nodes(cluster, made)
        if needs == "volume":
            nodes.delete_persistent_volume(f"{namespace}-data")
        if needs == "attach limit":
            for volume in ("data", "held"):
                nodes.delete_persistent_volume(f"{namespace}-{volume}")
            for node in limited:
                client.StorageV1Api(cluster.api_client()).delete_csi_node(node)
        if needs == "ephemeral volume":
            for node in (a, c):
                nodes.delete_persistent_volume(f"{namespace}-scratch-{node}")
            client.StorageV1Api(cluster.api_client()).delete_storage_class(f"{namespace}-local")
    assert list(evictions.deleted) == [light], evictions.deleted


APART = {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}
KEPT_APART = {
    "own anti-affinity": "the pod's anti-affinity (app=web): {namespace}/web runs on the node",
    "own spread": "the pod's topology spread (app=web, maxSkew 1): 1 such pod(s) run in its "
    "kubernetes.io/hostname={node}",
    "the web pod's anti-affinity": "{namespace}/web's anti-affinity (app=web) keeps it off the node",
    "the web pod's host port": "{namespace}/web holds host port 8080/TCP on the node",
}
"""How a web replica is kept apart from the others, and what `why` says of the node that refuses it."""
FILTERS = {"own spread": "PodTopologySpread", "the web pod's host port": "NodePorts"}
"""kube-scheduler's filter that refuses the node, where it is not InterPodAffinity."""


def keep_apart(big: dict[str, Any], web: dict[str, Any], kept_by: str) -> None:
    """Keeps the big pod of spec `big` (whose affinity `on_nodes` wrote) off the node of the web pod of spec `web`."""
    if kept_by == "own anti-affinity":
        big["affinity"]["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [APART]}
    elif kept_by == "own spread":
        big["topologySpreadConstraints"] = [{**APART, "maxSkew": 1, "whenUnsatisfiable": "DoNotSchedule"}]
    elif kept_by == "the web pod's host port":
        for spec in (big, web):
            spec["containers"][0]["ports"] = [{"containerPort": 8080, "hostPort": 8080}]
    else:
        web["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [APART]}}


@pytest.mark.parametrize("kept_by", KEPT_APART)
def test_a_pending_replica_kept_apart_from_the_others_is_rescued_on_the_node_it_may_go(
    cluster: Sandbox, namespace: str, server_namespace: str, serving: dict[str, Any], kept_by: str
) -> None:
    """The big pod (35,000 MiB on A or B) is a web replica kept apart from the others (by its required anti-affinity
    on the hostname, its hostname spread of maxSkew 1, the other web pod's anti-affinity, or the host port both take,
    which the controller keeps of another scheduler's pod), and a web pod runs on A. A's card holds `tiny` (6,000
    MiB), B's `light` (10,000 MiB), both movable to the other node: the cheaper room is A's, which kube-scheduler
    refuses the big pod. The plan reads that refusal once it has listed the pods the term or spread selects, or read
    the web pod's own terms and ports: the controller makes room on B by moving light to A, `plan --for` plans the
    same without a warning, and `why` says which filter keeps the big pod off A and for which pods."""
    tag = uuid.uuid4().hex[:6]
    a, b = f"apart-a-{tag}", f"apart-b-{tag}"
    made = one_card_nodes(cluster, a, b)
    nodes = client.CoreV1Api(cluster.api_client())
    try:
        placed = {}
        for name, limits, on, off in (("tiny", {**SMALL, "nvidia.com/gpumem": "6000"}, a, b), ("light", SMALL, b, a)):
            body = deployment(name, 0, limits)
            on_nodes(body["spec"]["template"]["spec"], a, b)
            create(cluster, namespace, body)
            nodes.patch_node(off, {"spec": {"unschedulable": True}})
            try:
                placed[name] = scale_up(cluster, namespace, name)
            finally:
                nodes.patch_node(off, {"spec": {"unschedulable": False}})
            assert allocation(cluster, namespace, placed[name]).node == on, f"{off} was cordoned"
        web = bound_pod("web", a, {"name": "c", "image": "registry.invalid/web:1"})
        web["metadata"]["labels"]["app"] = "web"
        big = big_on(a, b, labels={"app": "web"})
        keep_apart(big["spec"], web["spec"], kept_by)
        create(cluster, namespace, web)
        write_policy(cluster, server_namespace, namespace, "dry-run")
        controller(cluster, **serving, namespace=namespace, home=server_namespace)
        create(cluster, namespace, big)
        wait_for(lambda: scheduling_failures(cluster, namespace, "big"), "kube-scheduler to leave the big pod Pending")
        message = wait_for(lambda: said(cluster, namespace, "big", "DefragDryRun"), "the dry-run Event on the big pod")
        assert f"would move {namespace}/{placed['light']} from {b}/gpu-0 to {a}/gpu-0" in message, message

        run = plugin(cluster, "plan", "--for", "big", "-n", namespace, "-o", "json")
        assert run.code == 0, run.err
        assert [(m["pod"], m["to"]["node"]) for m in run.json()["moves"]] == [(f"{namespace}/{placed['light']}", a)]
        assert "warning" not in run.err, run.err
        told = plugin(cluster, "why", "big", "-n", namespace, "-o", "json")
        assert told.code == 0, told.err
        [refused] = [node for node in told.json()["nodes"] if node["node"] == a]
        assert refused["reason"] == FILTERS.get(kept_by, "InterPodAffinity"), refused
        assert KEPT_APART[kept_by].format(namespace=namespace, node=a) in refused["message"], refused
    finally:
        delete_nodes(cluster, made)


def test_plan_keeps_the_pods_a_pending_pods_affinity_counts_on_their_node(cluster: Sandbox, namespace: str) -> None:
    """The big pod (35,000 MiB) must run beside `light` (required pod affinity on the hostname), which holds 10,000
    MiB of A's one card; B's card holds 25,000 MiB of a pod that cannot move. Moving light to B would make room on A,
    where the big pod could then no longer go: `plan --for` moves light only between A's cards (there are none), so
    there is no plan, not that one."""
    tag = uuid.uuid4().hex[:6]
    a, b = f"beside-a-{tag}", f"beside-b-{tag}"
    made: list[GpuNode] = []
    try:
        light_then_fixed(cluster, namespace, made, nodes=(a, b), fixed=("stay", "25000"))
        big = big_on(a, b)
        beside = {"labelSelector": {"matchLabels": {"app": "light"}}, "topologyKey": "kubernetes.io/hostname"}
        big["spec"]["affinity"]["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [beside]}
        create(cluster, namespace, big)
        wait_for(lambda: scheduling_failures(cluster, namespace, "big"), "kube-scheduler to leave the big pod Pending")

        run = plugin(cluster, "plan", "--for", "big", "-n", namespace, "-o", "json")
        assert run.code == 1 and run.json()["moves"] == [], run.out
    finally:
        delete_nodes(cluster, made)


GATE = "hami-place.test/held"
RFC3339 = "%Y-%m-%dT%H:%M:%SZ"


def keep_room(cluster: Sandbox, namespace: str, name: str, cards: list[str], until: datetime) -> None:
    """Keeps `cards` for the Pending pod through the controller's own writer (`core.reservation.reserve` patched by
    `kube.defrag.change_pod_annotations`)."""
    uid = client.CoreV1Api(cluster.api_client()).read_namespaced_pod(name, namespace).metadata.uid
    key = room_key(cluster)

    def keep(annotations: dict[str, str]) -> dict[str, str]:
        wanted, why = reserve(annotations, f"{namespace}/{name}", cards, until, uid=uid, key=key)
        assert not why, why
        return wanted

    kube = Kube(cluster.api_client(), namespace, "", None)
    assert change_pod_annotations(kube, namespace, name, uid, keep, unscheduled=True) is not None


def test_a_room_kept_on_a_pod_without_annotations_keeps_those_hamis_scheduler_wrote_meanwhile(
    cluster: Sandbox, namespace: str
) -> None:
    """The controller keeps a room on a Pending pod that has no annotations while HAMi's scheduler annotates it with
    the cards it placed it on (a merge patch between our read and our write, as the run found it in CI): a diff from
    no annotations adds the whole map, which would drop HAMi's, and the pod would be bound with no devices to
    allocate. The write is read again and keeps both."""
    create(cluster, namespace, gated("bare"))
    api = client.CoreV1Api(cluster.api_client())
    stored = api.read_namespaced_pod("bare", namespace)
    assert stored.metadata.annotations is None
    seen: list[dict[str, str]] = []

    def keep(annotations: dict[str, str]) -> dict[str, str]:
        seen.append(dict(annotations))
        if len(seen) == 1:
            api.patch_namespaced_pod("bare", namespace, {"metadata": {"annotations": {"hami.io/vgpu-node": "gpu-0"}}})
        return {**annotations, "hami-place.test/kept": "yes"}

    kube = Kube(cluster.api_client(), namespace, "", None)
    written = change_pod_annotations(kube, namespace, "bare", stored.metadata.uid, keep, unscheduled=True)
    assert written is not None
    assert written["metadata"]["annotations"] == {"hami.io/vgpu-node": "gpu-0", "hami-place.test/kept": "yes"}
    assert seen == [{}, {"hami.io/vgpu-node": "gpu-0"}]

    tried: list[str] = []

    def refused(stored: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
        """A change whose own test fails: nobody wrote the pod meanwhile, so it is not tried again."""
        tried.append(stored["metadata"]["resourceVersion"])
        return {}, {"metadata": {"labels": {"a": "b"}}}, [{"op": "test", "path": "/metadata/name", "value": "other"}]

    with pytest.raises(KubeInvalid):
        change_pod(kube, namespace, "bare", stored.metadata.uid, refused)
    assert len(tried) == 1, tried


def gated(name: str, annotations: dict[str, str] | None = None, node: str = "") -> dict[str, Any]:
    """A big pod held back from the scheduler by a scheduling gate: it stays Pending until the gate goes."""
    body = pod(name, BIG, node=node, annotations=annotations)
    body["spec"]["schedulingGates"] = [{"name": GATE}]
    return body


def annotations_of(cluster: Sandbox, namespace: str, name: str) -> dict[str, str]:
    """The pod's annotations as stored."""
    stored = client.CoreV1Api(cluster.api_client()).read_namespaced_pod(name, namespace)
    return stored.metadata.annotations or {}


def test_a_room_kept_for_a_pending_pod_is_not_taken_by_a_pod_admitted_meanwhile(
    cluster: Sandbox, namespace: str, server_namespace: str, node: GpuNode, serving: dict[str, Any]
) -> None:
    """The card a rescue freed, kept for its pod: a pod admitted meanwhile is kept off it by HAMi, which then gives
    it to the kept pod. The kept pod's retry is held back by a scheduling gate (in place of the scheduler's backoff,
    whose length no test can choose), so the newcomer is surely scheduled first, on a node where the kept card is
    the only one with room; the controller runs in mode on and must not move a pod onto the kept card either."""
    held = two_pods_one_per_card(cluster, namespace, node)
    freed, other = held["move"][1], held["keep"][1]
    write_policy(cluster, server_namespace, namespace, "on")
    server = controller(cluster, **serving, namespace=namespace, home=server_namespace)
    # A tenant's own Pending pod claiming the other card with an annotation no server sealed: no room is kept.
    forged = json.dumps({"cards": [other], "until": (datetime.now(UTC) + timedelta(minutes=5)).strftime(RFC3339)})
    create(cluster, namespace, gated("forger", {ROOM_RESERVED_ANNOTATION: forged}, node=node.name))
    create(cluster, namespace, gated("big", node=node.name))
    keep_room(cluster, namespace, "big", [freed], datetime.now(UTC) + timedelta(minutes=5))
    cluster.kubectl("scale", "deployment", "move", "--replicas=0", "-n", namespace)
    wait_for(lambda: held["move"][0] not in pod_names(cluster, namespace), "the card's pod to go")
    newcomer = pod("newcomer", BIG, node=node.name)

    def kept_off() -> list[str]:
        tried = cluster.kubectl(
            "create", "--dry-run=server", "-o", "json", "-n", namespace, "-f", "-", input=json.dumps(newcomer)
        )
        notes = json.loads(tried.stdout)["metadata"].get("annotations") or {}
        return notes.get(NOUSE_GPUUUID_ANNOTATION, "").split(",")

    wait_for(lambda: freed in kept_off(), "the server's cache to see the kept room")
    assert other not in kept_off(), "the forged room is kept from no one (the cache saw it before the sealed one)"
    code, info = server.get("/api/v1/cluster-info")
    assert code == 200, info
    ours = [(room["pod"], room["cards"]) for room in info["keptRooms"] if room["pod"].startswith(f"{namespace}/")]
    assert ours == [(f"{namespace}/big", [freed])], "status is told of the sealed room alone"
    create(cluster, namespace, newcomer)
    assert freed in annotations_of(cluster, namespace, "newcomer")[NOUSE_GPUUUID_ANNOTATION].split(",")
    refusals = wait_for(lambda: scheduling_failures(cluster, namespace, "newcomer"), "HAMi to refuse the newcomer")
    assert any("CardUuidMismatch" in refusal for refusal in refusals), refusals
    assert not client.CoreV1Api(cluster.api_client()).read_namespaced_pod("newcomer", namespace).spec.node_name
    cluster.kubectl(
        "patch", "pod", "big", "-n", namespace, "--type=json", "-p", '[{"op":"remove","path":"/spec/schedulingGates"}]'
    )
    big = allocation(cluster, namespace, "big", timeout=120)
    assert (big.node, big.uuids) == (node.name, [freed]), "HAMi gives the kept pod the kept card"
    wait_for(
        lambda: ROOM_RESERVED_ANNOTATION not in annotations_of(cluster, namespace, "big"), "the kept room to be settled"
    )
    assert annotations_of(cluster, namespace, "big")[USE_GPUUUID_ANNOTATION] == freed, "it names the cards it holds"
    assert placements(cluster, namespace) == [], "the controller moved no pod onto the kept card"


def test_a_room_kept_past_its_deadline_is_given_back(
    cluster: Sandbox, namespace: str, server_namespace: str, node: GpuNode, serving: dict[str, Any]
) -> None:
    """A room kept for a pod still Pending at the deadline: the controller gives the pod back its own card choice and
    takes the reservation off, as it does for one an earlier leader left."""
    write_policy(cluster, server_namespace, namespace, "on")
    controller(cluster, **serving, namespace=namespace, home=server_namespace)
    create(cluster, namespace, gated("late", {USE_GPUUUID_ANNOTATION: "GPU-own-a,GPU-own-b"}, node=node.name))
    keep_room(cluster, namespace, "late", ["GPU-own-b"], datetime.now(UTC) + timedelta(seconds=5))
    assert annotations_of(cluster, namespace, "late")[USE_GPUUUID_ANNOTATION] == "GPU-own-b"
    wait_for(
        lambda: ROOM_RESERVED_ANNOTATION not in annotations_of(cluster, namespace, "late"), "the room to be given back"
    )
    assert annotations_of(cluster, namespace, "late")[USE_GPUUUID_ANNOTATION] == "GPU-own-a,GPU-own-b"


def test_a_rescue_whose_pod_is_not_scheduled_by_the_rooms_deadline_counts_the_room_lost_and_gives_it_back(
    cluster: Sandbox, namespace: str, server_namespace: str, node: GpuNode, serving: dict[str, Any]
) -> None:
    """The big pod also asks an extended resource that the node stops advertising while the moved pod terminates
    (a finalizer holds it): the move is made and the freed card kept for the pod (5 s here), but the scheduler cannot
    place it there by the deadline. The controller counts the room lost, says so on the pod, and gives the pod its
    own card choice back (it had none)."""
    api = client.CoreV1Api(cluster.api_client())

    def advertise(count: str) -> None:
        api.patch_node_status(node.name, {"status": {"allocatable": {FPGA: count}, "capacity": {FPGA: count}}})

    advertise("1")
    try:
        two_pods_one_per_card(cluster, namespace, node, template={"metadata": {"finalizers": [HOLD]}})
        write_policy(cluster, server_namespace, namespace, "on", reserve_for="5s")
        server = controller(cluster, **serving, namespace=namespace, home=server_namespace)
        create(cluster, namespace, pod("big", {**BIG, FPGA: "1"}, node=node.name))
        evicted = evicted_pod(cluster, namespace)
        advertise("0")
        let_go(cluster, namespace, evicted.metadata.name)
        kept = wait_for(lambda: said(cluster, namespace, "big", "DefragRoomKept"), "the room to be kept")
        lost = wait_for(lambda: said(cluster, namespace, "big", "DefragRoomLost"), "the room to be counted lost")
        wait_for(
            lambda: ROOM_RESERVED_ANNOTATION not in annotations_of(cluster, namespace, "big"), "the room given back"
        )
        assert USE_GPUUUID_ANNOTATION not in annotations_of(cluster, namespace, "big"), "its own choice: none"
        assert server.metric("hami_place_defrag_room_lost_total") == 1
        assert server.metric("hami_place_defrag_rescued_pods_total") == 0
    finally:
        let_go(cluster, namespace)
    until = kept.split(" are kept for the pod until ", 1)[1].split(" ", 1)[0]
    assert lost == (
        f"the room 1 move(s) made was kept for the pod until {until} and the pod was not scheduled meanwhile; it is "
        "planned for again once it qualifies"
    )


def pod_names(cluster: Sandbox, namespace: str, selector: str = "") -> list[str]:
    """The names of the namespace's pods (those the label selector selects)."""
    listed = client.CoreV1Api(cluster.api_client()).list_namespaced_pod(namespace, label_selector=selector)
    return [p.metadata.name for p in listed.items]


@dataclass(frozen=True)
class ChurnOutcome:
    """What the churn did: pods that arrived, the controller's moves as recorded, and the pods deleted meanwhile
    (name: evicted through the Eviction API)."""

    arrived: int
    records: list[tuple[datetime, str, str]]
    deleted: dict[str, bool]


class Churn:
    """The churn test's scenario in a thread of its own: it lasts CHURN_SECONDS of wall clock but takes little CPU, so
    the module's other tests (each with its own namespaces, node and controller) run meanwhile; the churn test then
    waits for its end and checks what it did."""

    def __init__(self, cluster: Sandbox, tmp_path: Path) -> None:
        self.stopping = threading.Event()
        self._outcome: ChurnOutcome | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(cluster, tmp_path), name="churn", daemon=True)
        self._thread.start()

    def _run(self, cluster: Sandbox, tmp_path: Path) -> None:
        try:
            self._outcome = churn(cluster, tmp_path, self.stopping)
        except BaseException as error:  # handed to the churn test, which raises it
            self._error = error

    def outcome(self) -> ChurnOutcome:
        """The churn's outcome once it ended; what it raised, raised again."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._outcome is not None
        return self._outcome

    def stop(self) -> None:
        """Ends the churn early (the module ended without the churn test) and waits for its cleanup."""
        self.stopping.set()
        self._thread.join()


CHURN_TEST = "test_under_churn_no_pod_moves_twice_within_its_cooldown_nor_beyond_the_hourly_budget"


@pytest.fixture(scope="module", autouse=True)
def churn_in_background(
    request: pytest.FixtureRequest, cluster: Sandbox, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Churn | None]:
    """The churn, started before the module's first test when the churn test is to run (None otherwise)."""
    if not any(item.name == CHURN_TEST and item.module is request.module for item in request.session.items):
        yield None
        return
    background = Churn(cluster, tmp_path_factory.mktemp("churn"))
    try:
        yield background
    finally:
        background.stop()


def churn(cluster: Sandbox, tmp_path: Path, stopping: threading.Event) -> ChurnOutcome:
    """For CHURN_SECONDS (or until `stopping`), big pods arrive one after another, each left once it ran or the
    controller declined, the next CHURN_PAUSE_SECONDS later; keep's pod leaves and comes back on the freed card
    whenever a move consolidated the node; in a namespace, node and server of its own, as a test's fixtures would
    give it."""
    with contextlib.ExitStack() as scope:
        namespace = scope.enter_context(scopes.fresh_namespace(cluster))
        home = scope.enter_context(scopes.server_namespace(cluster))
        node = scope.enter_context(scopes.gpu_node(cluster))
        webhooks = scope.enter_context(scopes.running_webhooks())
        configurations = scope.enter_context(scopes.webhook_configurations(cluster))
        high = f"high-{namespace}"
        scheduling = client.SchedulingV1Api(cluster.api_client())
        scheduling.create_priority_class(client.V1PriorityClass(metadata=client.V1ObjectMeta(name=high), value=1000))
        scope.callback(scheduling.delete_priority_class, high)
        api = client.CoreV1Api(cluster.api_client())
        for app, priority_class in (("keep", high), ("move", "")):
            body = deployment(app, 0, SMALL, node=node.name)
            if priority_class:
                body["spec"]["template"]["spec"]["priorityClassName"] = priority_class
            create(cluster, namespace, body)
            scale_up(cluster, namespace, app)
        budgets = {"movesPerHour": CHURN_MOVES_PER_HOUR, "movesPerNode": 10, "movesPerNamespace": 10}
        write_policy(cluster, home, namespace, "on", cooldown=f"{CHURN_COOLDOWN_SECONDS}s", **budgets)
        evictions = Evictions(cluster, namespace)
        scope.callback(evictions.stop)
        # A room key of its own: the hour's budget is the cluster's, counted over the moves sealed with the key a
        # server holds, so the other tests' controllers, which hold the sandbox's, do not count the churn's moves.
        key_file = tmp_path / "churn-room.key"
        key_file.write_text(secrets.token_urlsafe(48))
        flags = ("--room-key-file", str(key_file))
        server = controller(cluster, tmp_path, webhooks, configurations, namespace=namespace, home=home, flags=flags)
        try:
            arrived = 0
            deadline = time.monotonic() + CHURN_SECONDS
            while time.monotonic() < deadline and not stopping.is_set():
                spread_apart(cluster, namespace)
                name = f"big-{arrived}"
                create(cluster, namespace, pod(name, BIG, node=node.name))
                arrived += 1

                def ran_or_declined(name: str = name) -> bool:
                    stored = api.read_namespaced_pod(name, namespace)
                    bound = (stored.metadata.annotations or {}).get("hami.io/bind-phase") == "success"
                    return bound or bool(said(cluster, namespace, name, "DefragNoPlan")) or stopping.is_set()

                wait_for(ran_or_declined, f"{name} to run or the controller to decline it", timeout=240)
                api.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
                stopping.wait(CHURN_PAUSE_SECONDS)
            return ChurnOutcome(arrived, moves_recorded(cluster, namespace), dict(evictions.deleted))
        except BaseException as error:
            error.add_note(f"--- the last lines of the churn's controller log ---\n{scopes.log_tail(server)}")
            raise


def test_under_churn_no_pod_moves_twice_within_its_cooldown_nor_beyond_the_hourly_budget(
    churn_in_background: Churn | None,
) -> None:
    """Under the churn (see `churn`), keep has a higher priority than the big pods, so every rescue needs the same
    move: move's pod (the replacement of the last one moved) onto keep's card; only the cooldown and the budget stop
    the controller from making it every time. The churn ran beside the module's other tests."""
    assert churn_in_background is not None, "the module starts the churn when this test is to run"
    done = churn_in_background.outcome()
    records = done.records
    assert done.arrived > CHURN_MOVES_PER_HOUR and len(records) >= 2, (
        f"the churn asked for more: {done.arrived}, {records}"
    )
    assert len(records) <= CHURN_MOVES_PER_HOUR, f"more moves than the hour's budget: {records}"
    for later, (created, moved, _) in enumerate(records):
        for earlier, pod_then, replacement in records[:later]:
            if moved in (pod_then, replacement):
                rested = (created - earlier).total_seconds()
                assert rested >= CHURN_COOLDOWN_SECONDS, f"{moved} moved again {rested:g} s after its move: {records}"
    assert sum(done.deleted.values()) == len(records), f"the records are every eviction: {done.deleted}"
