"""The oldest Kubernetes the chart supports, whole: kube-apiserver, kube-controller-manager and kube-scheduler
v1.24.17 (sandbox/binaries.py, `*-oldest`), kwok, and HAMi v2.10's scheduler extender and webhook, its
kube-scheduler configured by the v1beta2 KubeSchedulerConfiguration HAMi's chart renders before 1.26.

The current release's tests of what only HAMi can prove run here again, unchanged, on this module's own sandbox
(the `cluster` fixture below overrides the session's for this module): a pin is proven when HAMi's scheduler
allocated the card, a rescue when the pending pod runs on the card the controller's move freed, `apply
--wait-for-pod` when its pod runs after two moves (and `apply` without it here too), and a PodDisruptionBudget the
disruption controller counted blocks an eviction.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from kubectl_hami_place.core.names import RESCUED_BY_ANNOTATION, ROOM_ANNOTATION, USE_GPUUUID_ANNOTATION
from sandbox import binaries
from sandbox.cluster import OLDEST, Sandbox, wait_for
from sandbox.prepare import prepare
from sandbox.webhook import Webhook, start
from tests.cluster.cli_harness import plugin
from tests.cluster.hami_harness import Evictions, GpuNode, allocation, create, deployment, pod, scale_up
from tests.cluster.test_cli_apply import (  # noqa: F401 - run here on 1.24: the pod is sent back once its room is made
    test_a_two_move_plan_runs_move_after_move,
    two_move_apply,
)
from tests.cluster.test_cli_evict import test_budget_that_allows_no_disruption_blocks_with_exit_4  # noqa: F401
from tests.cluster.test_defrag import (  # noqa: F401 - its fixtures and tests, collected and run here on 1.24
    SMALL,
    chart_account,
    controller,
    events,
    keep_room,
    pending_big,
    said,
    test_a_disruption_budget_at_its_limit_blocks_the_rescue_and_says_which,
    test_a_disruption_budget_that_arrives_after_planning_stops_the_run_as_blocked,
    test_mode_on_rescues_the_pending_pod_without_any_command,
    two_pods_one_per_card,
    write_policy,
)
from tests.cluster.test_hami_e2e import (  # noqa: F401 - its fixtures and tests, collected and run here on 1.24
    nodes,
    test_a_placement_lands_on_its_card_where_hamis_policy_would_pick_another,
    test_a_two_card_placement_gives_the_pod_both_cards,
)
from tests.cluster.webhook_harness import register, sees_placement

pytestmark = pytest.mark.cluster
GIB40 = 40960


@pytest.fixture(scope="module")
def cluster() -> Iterator[Sandbox]:
    """A sandbox of Kubernetes v1.24.17 with HAMi, the CRD and the GPU nodes, for this module's tests."""
    sandbox = Sandbox.start(release=OLDEST)
    try:
        prepare(sandbox)
        assert sandbox.get("/version")["gitVersion"] == sandbox.release.version == binaries.OLDEST_KUBERNETES_VERSION
        yield sandbox
    finally:
        sandbox.stop()


def test_pin_with_evict_makes_room_without_a_scheduling_gate(  # noqa: PLR0917 - the fixtures
    cluster: Sandbox,
    namespace: str,
    node: GpuNode,
    tmp_path: Path,
    webhooks: list[Webhook],
    configurations: list[str],
) -> None:
    """1.24 has no scheduling gates (1.27+): the API server drops the gate the webhook adds, so kube-scheduler tries
    the pinned pod while the filler still holds its card and HAMi refuses it. Before kubernetes#122019's fix the
    filler's deletion does not send it back to be tried (only kube-scheduler's sweep does, 5 minutes later): the
    reconciler takes the pod's room annotation off once the filler is gone, the update that does, and HAMi allocates
    it the pinned card within the minute `allocation` waits."""
    webhook = start(cluster, tmp_path)
    webhooks.append(webhook)
    register(cluster, configurations, namespace, [(webhook, {})])
    create(cluster, namespace, pod("filler", {"nvidia.com/gpu": "1"}, node=node.name))
    [[(card, memory, cores)]] = allocation(cluster, namespace, "filler").containers
    assert (memory, cores) == (GIB40, 100), "the filler takes a whole card"
    index = next(c["index"] for c in node.cards if c["id"] == card)
    create(cluster, namespace, deployment("trainer", 0, {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "20000"}))
    evictions = Evictions(cluster, namespace)
    try:
        run = plugin(
            cluster,
            *("pin", "-n", namespace, "-l", "app=trainer", "--node", node.name, "--gpu", f"gpu-{index}"),
            *("--evict", "filler", "--yes", "-o", "json"),
        )
        assert run.code == 0, run.err
        name = run.json()["placement"]["metadata"]["name"]
        wait_for(lambda: sees_placement(webhook, namespace, name), "the webhook to see the placement")
        trainer = scale_up(cluster, namespace, "trainer")
        stored = client.CoreV1Api(cluster.api_client()).read_namespaced_pod(trainer, namespace)
        assert stored.metadata.annotations[USE_GPUUUID_ANNOTATION] == card, "the webhook pinned the pod"
        assert getattr(stored.spec, "scheduling_gates", None) is None, "1.24 drops the gate"
        assert stored.metadata.annotations[ROOM_ANNOTATION] == "waiting for pod filler to go"
        got = allocation(cluster, namespace, trainer)
    finally:
        evictions.stop()
    assert got.containers == (((card, 20000, 0),),), "HAMi allocated the pinned card, not the free one"
    assert evictions.deleted == {"filler": True}, "the filler went through the Eviction API"

    def room_made() -> list[str]:
        listed = client.CoreV1Api(cluster.api_client()).list_namespaced_event(
            namespace, field_selector=f"involvedObject.name={trainer},reason=RoomMade"
        )
        return [event.message for event in listed.items]

    said = wait_for(room_made, "the Event saying why the trainer was let go")
    assert said == [f"{ROOM_ANNOTATION} taken off: pod filler is gone"]


def test_a_rescue_that_keeps_no_room_sends_its_pod_back_to_the_scheduler_once_the_moved_pod_is_gone(
    cluster: Sandbox, namespace: str, server_namespace: str, node: GpuNode, serving: dict[str, Any]
) -> None:
    """With `reserveFor: 0s` nothing else writes the pending pod. kube-scheduler 1.24 does not retry a pod HAMi and
    NodeAffinity both refused when the moved pod goes (kubernetes#122019), only at its 5-minute sweep: the controller
    annotates the pod with its run once the moved pod is gone, and HAMi places it on the freed card within the minute
    `allocation` waits."""
    held = dict(two_pods_one_per_card(cluster, namespace, node).values())
    write_policy(cluster, server_namespace, namespace, "on", reserve_for="0s")
    controller(cluster, **serving, namespace=namespace, home=server_namespace)
    pending_big(cluster, namespace, node)
    big = allocation(cluster, namespace, "big")
    run = said(cluster, namespace, "big", "DefragRun")
    [moved] = [pod for pod in held if f"moving {namespace}/{pod} from" in run]
    assert (big.node, big.uuids) == (node.name, [held[moved]]), "the big pod runs on the card the move freed"
    stored = client.CoreV1Api(cluster.api_client()).read_namespaced_pod("big", namespace)
    assert stored.metadata.annotations[RESCUED_BY_ANNOTATION] == run.split(":")[0].removeprefix("run ")


def test_a_pending_pod_whose_room_a_departed_pod_made_is_sent_back_to_the_scheduler(
    cluster: Sandbox, namespace: str, server_namespace: str, node: GpuNode, serving: dict[str, Any]
) -> None:
    """No move makes this room: a pod without a controller (one the controller may not move) goes. kube-scheduler
    1.24 does not retry the big pod, which HAMi and NodeAffinity both refused (kubernetes#122019), until its 5-minute
    sweep; the controller finds it fits as the cards are, sends it back (annotated with the run), and HAMi places it
    on the card the departed pod held within the minute `allocation` waits."""
    held = {}
    for name in ("a", "b"):
        create(cluster, namespace, pod(name, SMALL, node=node.name))
        held[name] = allocation(cluster, namespace, name).uuids[0]
    assert held["a"] != held["b"], "HAMi's spread policy puts the two pods on two cards"
    write_policy(cluster, server_namespace, namespace, "on")
    controller(cluster, **serving, namespace=namespace, home=server_namespace)
    pending_big(cluster, namespace, node)
    refused = wait_for(lambda: said(cluster, namespace, "big", "DefragNoPlan"), "the controller's no-plan Event")
    assert f"{namespace}/a has no controller to recreate it" in refused, refused
    cluster.kubectl("delete", "pod", "a", "-n", namespace, "--grace-period=0", "--wait=true")
    big = allocation(cluster, namespace, "big")
    assert (big.node, big.uuids) == (node.name, [held["a"]])
    stored = client.CoreV1Api(cluster.api_client()).read_namespaced_pod("big", namespace)
    assert stored.metadata.annotations.get(RESCUED_BY_ANNOTATION), stored.metadata.annotations
    assert [reason for reason, _ in events(cluster, namespace, "big") if reason == "DefragRun"] == [], "no move"


def test_a_room_an_earlier_leader_kept_sends_its_pod_back_to_the_scheduler_once_it_is_made(
    cluster: Sandbox, namespace: str, server_namespace: str, node: GpuNode, serving: dict[str, Any]
) -> None:
    """An earlier leader's rescue kept the move pod's card for the big pod (its sealed reservation, written here by
    the controller's own writer) and went before the card's pod did: no rescue this leader follows names the pod.
    kube-scheduler 1.24 does not retry the big pod when the card's pod goes (kubernetes#122019), and the room's
    deadline is 8 minutes off: the controller finds the pod fits the kept card as the cards are, sends it back, and
    HAMi places it there within the minute `allocation` waits."""
    held = two_pods_one_per_card(cluster, namespace, node)
    freed = held["move"][1]
    pending_big(cluster, namespace, node)
    keep_room(cluster, namespace, "big", [freed], datetime.now(UTC) + timedelta(minutes=8))
    # The try the reservation's write causes (after the pod's backoff, 10 s at most) fails first: from then on
    # kube-scheduler 1.24 leaves the pod alone until its 5-minute sweep. Only a try of the pod as written names the
    # other card's CardUuidMismatch (the kept card is named, and full).
    wait_for(
        lambda: any("CardUuidMismatch" in reason for reason in hami_refusals(cluster, namespace, "big")),
        "HAMi to refuse the big pod on its kept card",
        timeout=30,
    )
    write_policy(cluster, server_namespace, namespace, "on")
    controller(cluster, **serving, namespace=namespace, home=server_namespace)
    cluster.kubectl("scale", "deployment", "move", "--replicas=0", "-n", namespace)
    big = allocation(cluster, namespace, "big")
    assert (big.node, big.uuids) == (node.name, [freed]), "the big pod runs on the kept card"
    stored = client.CoreV1Api(cluster.api_client()).read_namespaced_pod("big", namespace)
    assert stored.metadata.annotations.get(RESCUED_BY_ANNOTATION), stored.metadata.annotations
    assert [reason for reason, _ in events(cluster, namespace, "big") if reason == "DefragRun"] == [], "no move"


def hami_refusals(cluster: Sandbox, namespace: str, name: str) -> list[str]:
    """The reasons HAMi's scheduler gave for refusing the pod (its FilteringFailed Events, written at once, where
    kube-scheduler's FailedScheduling, an events.k8s.io series, is rewritten only at its heartbeats)."""
    listed = client.CoreV1Api(cluster.api_client()).list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={name},reason=FilteringFailed"
    )
    return [event.message for event in listed.items]


@pytest.mark.usefixtures("placing")
def test_an_apply_that_does_not_wait_for_its_pod_sends_it_back_to_the_scheduler_once(
    cluster: Sandbox, namespace: str, tmp_path: Path
) -> None:
    """Without `--wait-for-pod`, `apply` ends once its moves are done. kube-scheduler 1.24 would not retry the big
    pod, which HAMi and NodeAffinity both refused, when the moved pods go (kubernetes#122019), only at its 5-minute
    sweep: apply sends it back once the moved pods have been gone a moment, and HAMi places it within the minute
    `allocation` waits."""
    applied = two_move_apply(cluster, namespace, tmp_path)
    assert f"the evicted pods are gone: {namespace}/big sent back to the scheduler" in applied.err, applied.err
    stored = client.CoreV1Api(cluster.api_client()).read_namespaced_pod("big", namespace)
    assert stored.metadata.annotations[RESCUED_BY_ANNOTATION].startswith("kubectl hami-place apply at ")
