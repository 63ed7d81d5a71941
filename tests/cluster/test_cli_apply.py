"""`plan --for` and `apply` end to end on the HAMi sandbox: HAMi's scheduler places every pod, our webhook pins
the replacements, and the card HAMi allocates is the proof.

One fresh node with two 40 GiB cards; two Deployments' pods of 10,000 MiB sit one per card (HAMi's spread
policy). The main story runs in one test, as each pod round trip through HAMi costs seconds: a `--compact` plan whose
pod is deleted meanwhile stops `apply` with the mismatch; a pod asking 35,000 MiB fits neither card and stays
Pending; a PodDisruptionBudget on both pods leaves `plan --for` no move; on one pod, the plan moves the other;
a budget added after the plan blocks `apply` (exit 4, nothing pinned); a placement someone wrote under the move's
name, pinning elsewhere, stops `apply` (it is no earlier attempt of the move); `--dry-run=server` changes nothing;
`apply` makes room through the Eviction API and the Pending pod runs on the card the plan freed; the same plan again
is a no-op; `plan --apply` prints the plan and the run as one document. A second test applies a two-move plan on
three cards, the second move possible only once the first settled.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest
from kubernetes import client

from kubectl_hami_place.core.names import GROUP, RESCUED_BY_ANNOTATION, VERSION
from kubectl_hami_place.core.planner import Move
from kubectl_hami_place.core.planner.apply import placement_for
from sandbox.cluster import Sandbox, wait_for
from sandbox.webhook import Webhook
from tests.cluster.cli_harness import PLUGIN, Run, answering, declining, placements, plugin
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
from tests.cluster.test_defrag import plugin_as

pytestmark = pytest.mark.cluster
SMALL = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "10000"}
BIG = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "35000"}


def run(cluster: Sandbox, *args: str) -> Run:
    """The plugin, with room for apply's waits (the harness's `plugin` gives a run 120 s)."""
    proc = subprocess.run(
        [str(PLUGIN), *args, "--kubeconfig", str(cluster.kubeconfig)],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=900,
        check=False,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return Run(proc.returncode, proc.stdout, proc.stderr)


def budget(cluster: Sandbox, namespace: str, app: str) -> None:
    """A PodDisruptionBudget that allows no disruption of the app's pods."""
    body = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": app},
        "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": app}}},
    }
    create(cluster, namespace, body)


def running_pod(cluster: Sandbox, namespace: str, app: str) -> client.V1Pod:
    """The app's one pod not being deleted."""
    pods = client.CoreV1Api(cluster.api_client()).list_namespaced_pod(namespace, label_selector=f"app={app}").items
    live = [p for p in pods if p.metadata.deletion_timestamp is None]
    assert len(live) == 1, [p.metadata.name for p in live]
    return live[0]


def replaced(cluster: Sandbox, namespace: str, old: client.V1Pod) -> bool:
    """Whether the app's pod is another than `old` and runs (the Eviction API ignores budgets for a Pending pod)."""
    app = old.metadata.labels["app"]
    pods = client.CoreV1Api(cluster.api_client()).list_namespaced_pod(namespace, label_selector=f"app={app}").items
    return any(
        p.metadata.uid != old.metadata.uid and p.metadata.deletion_timestamp is None and p.status.phase == "Running"
        for p in pods
    ) and not any(p.metadata.uid == old.metadata.uid for p in pods)


def write_plan(cluster: Sandbox, namespace: str, path: Path) -> Run:
    """`plan --for big -o json` into `path`."""
    done = plugin(cluster, "plan", "--for", "big", "-n", namespace, "-o", "json")
    path.write_text(done.out)
    return done


def test_plan_for_a_pending_pod_and_apply_it_through_the_eviction_api(
    cluster: Sandbox, namespace: str, node: GpuNode, placing: Webhook, tmp_path: Path
) -> None:
    for app in ("keep", "move"):
        create(cluster, namespace, deployment(app, 0, SMALL, node=node.name))
        scale_up(cluster, namespace, app)
    keep_pod, move_pod = (running_pod(cluster, namespace, app) for app in ("keep", "move"))
    keep_card = allocation(cluster, namespace, keep_pod.metadata.name).uuids
    move_card = allocation(cluster, namespace, move_pod.metadata.name).uuids
    assert keep_card != move_card, "HAMi's spread policy puts the two pods on two cards"
    budget(cluster, namespace, "keep")
    free = plugin(cluster, "plan", "--compact", node.name, "-o", "json")
    assert free.code == 0, free.err
    assert [m["pod"] for m in free.json()["moves"]] == [f"{namespace}/{move_pod.metadata.name}"]
    (tmp_path / "free.json").write_text(free.out)

    def replace_move_pod() -> None:
        client.CoreV1Api(cluster.api_client()).delete_namespaced_pod(move_pod.metadata.name, namespace)
        wait_for(lambda: replaced(cluster, namespace, move_pod), "the Deployment to replace the deleted pod")

    gone = (
        f"{namespace}/{move_pod.metadata.name} (uid {move_pod.metadata.uid}) is gone and no pod pinned by this plan "
        "replaced it: it was deleted or moved meanwhile; the cluster no longer matches the plan: make a new one "
        "(kubectl hami-place plan)"
    )
    # The plan still matched when apply read the cluster; the pod was replaced while the user read the question.
    answered = answering(
        cluster, "apply", "-f", str(tmp_path / "free.json"), "-o", "json", answer="y", meanwhile=replace_move_pod
    )
    assert answered.code == 1, answered.err
    assert [m["status"] for m in answered.json()["moves"]] == ["failed"]
    assert answered.err == (
        f"Carry out 1 move(s), evicting {namespace}/{move_pod.metadata.name}? [y/N]: y\n"
        f"error: move 1 ({namespace}/{move_pod.metadata.name}): {gone}\n"
    ), "stopped before its first step: no move was tried"
    assert placements(cluster, namespace) == [], "nothing was pinned"
    changed = run(cluster, "apply", "-f", str(tmp_path / "free.json"), "--yes", "-o", "json")
    assert changed.code == 1, changed.err
    assert changed.json()["moves"][0]["status"] == "failed"
    assert changed.error_lines == [f"error: move 1: {gone}"], "found before asking, this time"

    create(cluster, namespace, pod("big", BIG, node=node.name))
    wait_for(lambda: scheduling_failures(cluster, namespace, "big"), "HAMi to leave the big pod Pending")
    budget(cluster, namespace, "move")
    stuck = write_plan(cluster, namespace, tmp_path / "stuck.json")
    assert stuck.code == 1, stuck.err
    assert stuck.json()["moves"] == []
    assert "PodDisruptionBudget" in " ".join(stuck.json()["reasons"]), stuck.json()["reasons"]
    cluster.kubectl("delete", "pdb", "move", "-n", namespace)

    moved = running_pod(cluster, namespace, "move")
    moved_card = allocation(cluster, namespace, moved.metadata.name).uuids
    plan_file = tmp_path / "plan.json"
    planned = write_plan(cluster, namespace, plan_file)
    assert planned.code == 0, planned.err
    freed = planned.json()["target"]["cards"]
    assert [(m["pod"], m["from"]["cards"], m["to"]["cards"]) for m in planned.json()["moves"]] == [
        (f"{namespace}/{moved.metadata.name}", moved_card, keep_card)
    ], "the budget on keep leaves only the other pod to move, onto keep's card"
    assert freed == moved_card
    budget(cluster, namespace, "move")
    blocked = run(cluster, "apply", "-f", str(plan_file), "--yes")
    assert blocked.code == 4, blocked.err
    assert "PodDisruptionBudget move" in blocked.err, blocked.err
    assert placements(cluster, namespace) == [], "nothing is pinned when the eviction cannot happen"
    cluster.kubectl("delete", "pdb", "move", "-n", namespace)
    [planned_move] = planned.json()["moves"]
    move = Move(planned_move["pod"], planned_move["uid"], node.name, (), node.name, tuple(keep_card), "")
    squatter = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "HamiPodPlacement",
        "metadata": {"name": placement_for(move)},
        "spec": {
            "reqID": "written-ahead",
            "podSelector": {"matchLabels": {"app": "move"}},
            "nodeName": node.name,
            "gpuDevices": moved_card,
        },
    }
    create(cluster, namespace, squatter)
    taken = run(cluster, "apply", "-f", str(plan_file), "--yes")
    assert taken.code == 1, taken.err
    assert taken.error_lines == [
        f"error: move 1 ({planned_move['pod']}): placement {namespace}/{placement_for(move)} already exists and is "
        "not this move's: it asks another reqID, podSelector, gpuDevices; read it (kubectl hami-place list); delete "
        "it if no one needs it (kubectl hami-place delete), re-run"
    ], taken.err
    assert running_pod(cluster, namespace, "move").metadata.uid == moved.metadata.uid, "nothing was evicted"
    cluster.kubectl("delete", "hamipodplacement", placement_for(move), "-n", namespace)
    checked = run(cluster, "apply", "-f", str(plan_file), "--dry-run=server", "-o", "json")
    assert checked.code == 0, checked.err
    assert [m["status"] for m in checked.json()["moves"]] == ["ready"]
    declined = declining(cluster, "apply", "-f", str(plan_file))
    assert (declined.code, declined.err) == (
        1,
        f"Carry out 1 move(s), evicting {planned_move['pod']}? [y/N]: n\nerror: not confirmed; nothing was changed\n",
    )
    assert running_pod(cluster, namespace, "move").metadata.uid == moved.metadata.uid
    assert placements(cluster, namespace) == []
    previewed = plugin(cluster, "plan", "--for", "big", "-n", namespace, "--apply", "--dry-run=server", "-o", "json")
    assert previewed.code == 0, previewed.err
    assert [m["status"] for m in previewed.json()["apply"]["moves"]] == ["ready"]
    assert running_pod(cluster, namespace, "move").metadata.uid == moved.metadata.uid
    assert placements(cluster, namespace) == []

    evictions = Evictions(cluster, namespace)
    try:
        applied = run(
            cluster, "apply", "-f", str(plan_file), "--yes", "--wait-for-pod", "--timeout", "240", "-o", "json"
        )
    finally:
        evictions.stop()
    assert applied.code == 0, applied.err
    report = applied.json()
    assert [m["status"] for m in report["moves"]] == ["done"]
    assert report["pod"]["scheduled"] is True, report["pod"]
    big = allocation(cluster, namespace, "big")
    # Where it runs, its cards named as the node registers them (read by name, not from a list of the cluster).
    assert re.fullmatch(rf"{namespace}/big holds {big.node}/gpu-\d", report["pod"]["detail"]), report["pod"]
    assert allocation(cluster, namespace, "big").uuids == freed
    assert evictions.deleted == {moved.metadata.name: True}, "the one move went through the Eviction API"
    assert running_pod(cluster, namespace, "keep").metadata.uid == keep_pod.metadata.uid

    again = run(cluster, "apply", "-f", str(plan_file), "--yes", "-o", "json")
    assert again.code == 0, again.err
    assert [m["status"] for m in again.json()["moves"]] == ["already done"]
    assert again.json()["pod"]["scheduled"] is True

    compacted = run(cluster, "plan", "--compact", node.name, "--apply", "--yes", "-o", "json")
    assert compacted.code == 0, compacted.err
    assert compacted.json()["plan"]["moves"] == [], "the budget on keep and the big pod leave nothing to pack"
    assert compacted.json()["apply"]["moves"] == []
    assert compacted.json()["apply"]["complete"] is True


def test_a_two_move_plan_runs_move_after_move(
    cluster: Sandbox, namespace: str, placing: Webhook, tmp_path: Path
) -> None:
    """Three cards: a 15,000 and a 25,000 MiB pod spread one per card, then a 25,000 and a 15,000 MiB pod; the
    second 15,000 MiB pod joins the first. A 35,000 MiB pod fits no card, and no one move makes room: the plan has
    two, and each is checked and settled before the next."""
    applied = two_move_apply(cluster, namespace, tmp_path, "--wait-for-pod", "--timeout", "240")
    assert applied.json()["pod"]["scheduled"] is True, applied.json()["pod"]


def two_move_apply(cluster: Sandbox, namespace: str, tmp_path: Path, *flags: str) -> Run:
    """The two-move plan above for a Pending 35,000 MiB pod, applied with `flags`: both moves done through the
    Eviction API and the pod then running on the cards the plan made room on (within the minute `allocation`
    waits); the finished apply."""
    node = fresh_node(cluster, card_entries(3))
    try:
        sizes = {"a": "15000", "b": "25000", "c": "25000", "d": "15000"}
        for app, mib in sizes.items():
            limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": mib}
            create(cluster, namespace, deployment(app, 0, limits, node.name))
            allocation(cluster, namespace, scale_up(cluster, namespace, app))
        create(cluster, namespace, pod("big", BIG, node=node.name))
        wait_for(lambda: scheduling_failures(cluster, namespace, "big"), "HAMi to leave the big pod Pending")
        planned = write_plan(cluster, namespace, tmp_path / "plan.json")
        assert planned.code == 0, planned.err
        assert len(planned.json()["moves"]) == 2, planned.json()
        evictions = Evictions(cluster, namespace)
        try:
            applied = run(cluster, "apply", "-f", str(tmp_path / "plan.json"), "--yes", *flags, "-o", "json")
        finally:
            evictions.stop()
        assert applied.code == 0, applied.err
        assert [m["status"] for m in applied.json()["moves"]] == ["done", "done"]
        assert sorted(evictions.deleted.values()) == [True, True] and len(evictions.deleted) == 2, evictions.deleted
        assert allocation(cluster, namespace, "big").uuids == planned.json()["target"]["cards"]
        return applied
    finally:
        delete_nodes(cluster, [node])


def test_apply_waits_out_the_evicted_pods_grace_period_before_its_timeout_counts(
    cluster: Sandbox, namespace: str, node: GpuNode, placing: Webhook, tmp_path: Path
) -> None:
    """The moved pod has 40 s to stop and a finalizer holds it past `--timeout 3`, as a checkpoint would: HAMi counts
    its card until it is gone, so apply waits for that, and the timeout counts from the grace period's end. Given up
    at 3 s after the eviction, apply exited 1 with the move not settled."""
    applying: subprocess.Popen[str] | None = None
    try:
        for app in ("keep", "move"):
            body = deployment(app, 0, SMALL, node=node.name)
            body["spec"]["template"]["metadata"]["finalizers"] = [HOLD]
            body["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 40
            create(cluster, namespace, body)
            allocation(cluster, namespace, scale_up(cluster, namespace, app))
        create(cluster, namespace, pod("big", BIG, node=node.name))
        wait_for(lambda: scheduling_failures(cluster, namespace, "big"), "HAMi to leave the big pod Pending")
        planned = write_plan(cluster, namespace, tmp_path / "plan.json")
        assert planned.code == 0 and len(planned.json()["moves"]) == 1, planned.out
        args = ("apply", "-f", str(tmp_path / "plan.json"), "--yes", "--timeout", "3", "-o", "json")
        applying = subprocess.Popen(
            [str(PLUGIN), *args, "--kubeconfig", str(cluster.kubeconfig)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        evicted = evicted_pod(cluster, namespace)
        time.sleep(6)  # past the timeout counted from the eviction
        assert applying.poll() is None, "apply gave the move up while its pod was stopping"
        let_go(cluster, namespace, evicted.metadata.name)
        out, err = applying.communicate(timeout=300)
        assert applying.returncode == 0, err
        assert [m["status"] for m in json.loads(out)["moves"]] == ["done"], out
    finally:
        if applying is not None and applying.poll() is None:
            applying.kill()
        let_go(cluster, namespace)


def test_apply_that_times_out_names_the_placement_and_the_same_apply_resumes_once_the_move_settled(
    cluster: Sandbox, namespace: str, node: GpuNode, placing: Webhook, tmp_path: Path
) -> None:
    """A finalizer holds the moved pod past `--timeout 3` (it has no grace period to wait out): apply gives up with
    exit 1, one line naming the move, where it stands and its placement's phase, and the hint to re-run. Re-run once
    the pod is gone, the same apply finds the move made and carries the plan to its end."""
    api = client.CoreV1Api(cluster.api_client())
    try:
        for app in ("keep", "move"):
            body = deployment(app, 0, SMALL, node=node.name)
            if app == "move":
                body["spec"]["template"]["metadata"]["finalizers"] = [HOLD]
            create(cluster, namespace, body)
            allocation(cluster, namespace, scale_up(cluster, namespace, app))
        create(cluster, namespace, pod("big", BIG, node=node.name))
        wait_for(lambda: scheduling_failures(cluster, namespace, "big"), "HAMi to leave the big pod Pending")
        plan_file = tmp_path / "plan.json"
        planned = write_plan(cluster, namespace, plan_file)
        assert planned.code == 0, planned.err
        [planned_move] = planned.json()["moves"]
        to_cards = tuple(planned_move["to"]["cards"])
        move = Move(planned_move["pod"], planned_move["uid"], node.name, (), node.name, to_cards, "")
        timed_out = run(cluster, "apply", "-f", str(plan_file), "--yes", "--timeout", "3", "-o", "json")
        assert timed_out.code == 1, timed_out.err
        assert [m["status"] for m in timed_out.json()["moves"]] == ["failed"]
        [line] = timed_out.error_lines
        assert re.fullmatch(
            re.escape(
                f"error: move 1 ({move.pod}): not settled within 3 s: {move.pod} is terminating; placement "
                f"{placement_for(move)} is Consumed: consumed by pod "
            )
            + r"move-[a-z0-9]+-[a-z0-9]+"
            + re.escape("; re-run the same apply to resume once the replacement runs, or raise --timeout"),
            line,
        ), line
        evicted = api.read_namespaced_pod(move.pod.split("/", 1)[1], namespace)
        assert evicted.metadata.deletion_timestamp is not None, "evicted, held by its finalizer"
        let_go(cluster, namespace, evicted.metadata.name)
        resumed = run(
            cluster, "apply", "-f", str(plan_file), "--yes", "--wait-for-pod", "--timeout", "120", "-o", "json"
        )
    finally:
        let_go(cluster, namespace)
    assert resumed.code == 0, resumed.err
    assert [m["status"] for m in resumed.json()["moves"]] == ["already done"]
    assert resumed.json()["pod"]["scheduled"] is True


def test_apply_without_a_webhook_to_acknowledge_the_placement_evicts_nothing(
    cluster: Sandbox, namespace: str, node: GpuNode, tmp_path: Path
) -> None:
    for app in ("keep", "move"):
        create(cluster, namespace, deployment(app, 0, SMALL, node=node.name))
        scale_up(cluster, namespace, app)
    before = {app: running_pod(cluster, namespace, app).metadata.uid for app in ("keep", "move")}
    planned = plugin(cluster, "plan", "--compact", node.name, "-o", "json")
    assert planned.code == 0, planned.err
    [move] = planned.json()["moves"]
    (tmp_path / "plan.json").write_text(planned.out)
    applied = run(cluster, "apply", "-f", str(tmp_path / "plan.json"), "--yes", "--ack-timeout", "2", "-o", "json")
    assert applied.code == 1, applied.err
    assert applied.json()["moves"][0]["status"] == "failed"
    [line] = applied.error_lines
    assert line.startswith(f"error: move 1 ({move['pod']}): the hami-place webhook did not acknowledge placement "), (
        line
    )
    assert line.endswith(
        "within 2s, so the pod was not evicted; check that it runs "
        "(kubectl get pods -A -l app.kubernetes.io/name=gpu-descheduler-webhook), then retry"
    ), line
    assert placements(cluster, namespace) == [], "the placement is deleted again"
    assert {app: running_pod(cluster, namespace, app).metadata.uid for app in ("keep", "move")} == before


def test_an_apply_whose_user_may_not_patch_pods_says_its_pod_was_not_sent_back(
    cluster: Sandbox, namespace: str, node: GpuNode, tmp_path: Path
) -> None:
    """The big pod, held back by a scheduling gate, fits a free card as the cards are: its plan needs no move, and
    apply sends it back to the scheduler at once. Run by a user whose role lacks `patch pods`, apply says it was not
    sent back, why and what to ask for, and ends its run (exit 0), the pod left unannotated. The gate keeps
    kube-scheduler from placing the pod before apply looks, whatever it would retry on its own."""
    gated = pod("big", BIG, node=node.name)
    gated["spec"]["schedulingGates"] = [{"name": "example.com/held"}]
    create(cluster, namespace, gated)
    planned = write_plan(cluster, namespace, tmp_path / "plan.json")
    assert planned.code == 0, planned.err
    assert planned.json()["moves"] == [], planned.out
    reader = [
        {"apiGroups": ["*"], "resources": ["*"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
    ]
    user = f"applier-{namespace}"
    _, words = plugin_as(cluster, user, reader, "apply", "-f", str(tmp_path / "plan.json"), "--yes")
    assert words.endswith(
        f"warning: {namespace}/big was not sent back to the scheduler, which may take up to 5 minutes to try it: "
        f'forbidden: pods "big" is forbidden: User "{user}" cannot patch resource "pods" in API group "" in the '
        f'namespace "{namespace}"; ask your cluster admin for RBAC permission to get and patch pods in namespace '
        f"{namespace}"
    ), words
    stored = client.CoreV1Api(cluster.api_client()).read_namespaced_pod("big", namespace)
    assert RESCUED_BY_ANNOTATION not in (stored.metadata.annotations or {}), stored.metadata.annotations
    sent = run(cluster, "apply", "-f", str(tmp_path / "plan.json"), "--yes")
    assert sent.code == 0, sent.err
    assert f"the evicted pods are gone: {namespace}/big sent back to the scheduler" in sent.err, sent.err
    stored = client.CoreV1Api(cluster.api_client()).read_namespaced_pod("big", namespace)
    assert stored.metadata.annotations[RESCUED_BY_ANNOTATION].startswith("kubectl hami-place apply at ")
