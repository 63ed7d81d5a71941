"""What a tenant reads of the controller: the Events on a pod of one namespace name nothing of another namespace.

The messages are the controller's own (`decide_run`'s, `keep_off`'s, the eviction's refusal), for a pod of `team-b`
rescued by moving pods of `secret-ns`, whose names are distinctive so that none can hide in other words.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from kubectl_hami_place.core.defrag.audience import failure_for_tenant, for_tenant, node_keys
from kubectl_hami_place.core.defrag.policy import Budgets
from kubectl_hami_place.core.defrag.runs import decide_run, keep_off
from kubectl_hami_place.core.planner import Snapshot
from kubectl_hami_place.core.reservation import Reservation
from tests.unit.test_core_defrag_runs import NOW, ON, node, placed, spent, waiting

NODES = frozenset({"a"})
SECRETS = ("secret-ns", "hidden-p", "hidden-q", "hold-it", "old-pod", "other-pod")


def fragmented() -> Snapshot:
    """Node a: gpu-0 holds hidden-p (24 GiB), gpu-1 hidden-q (10 GiB), both of secret-ns; a 32 GiB pod fits once
    hidden-q joins hidden-p."""
    return Snapshot(
        (node("a"),),
        (placed("hidden-p", "a0", 24, namespace="secret-ns"), placed("hidden-q", "a1", 10, namespace="secret-ns")),
    )


def rescue_of(snapshot: Snapshot, **kwargs: object) -> str:
    """decide_run's message for team-b's waiting 32 GiB pod."""
    policy = kwargs.pop("policy", ON)
    decision = decide_run(policy, snapshot, waiting(32, namespace="team-b"), kwargs.pop("history", []), NOW, "r1")
    return decision.message


def hides_the_secrets(message: str) -> str:
    """The message as team-b reads it, checked to name nothing of secret-ns."""
    said = for_tenant(message, "team-b", NODES)
    assert [word for word in SECRETS if word in said] == [], said
    return said


def test_a_rescue_names_the_pods_of_its_own_namespace_and_no_other() -> None:
    message = rescue_of(fragmented())
    assert (
        message == "moving secret-ns/hidden-q from a/gpu-1 to a/gpu-0 to rescue team-b/waiting (CardInsufficientMemory)"
    )
    assert hides_the_secrets(message) == (
        "moving a pod of another namespace from a/gpu-1 to a/gpu-0 to rescue team-b/waiting (CardInsufficientMemory)"
    )
    assert for_tenant(message, "secret-ns", NODES) == (
        "moving secret-ns/hidden-q from a/gpu-1 to a/gpu-0 to rescue a pod of another namespace "
        "(CardInsufficientMemory)"
    ), "the moved pod's own Event names it, and not the pod rescued"


def test_a_block_a_namespace_budget_and_a_kept_card_of_another_namespace_are_not_named() -> None:
    guarded = replace(
        fragmented(),
        pods=tuple(replace(p, budgets=("secret-ns/hold-it",)) for p in fragmented().pods),
        budgets={"secret-ns/hold-it": 0},
    )
    assert hides_the_secrets(rescue_of(guarded)) == (
        "blocked: the rescue must evict a pod of another namespace; a PodDisruptionBudget of another namespace "
        "allows 0 disruption(s), the rescue needs 1"
    )
    spent_there = [spent("secret-ns/old-pod", "z", 10)]
    per_namespace = replace(ON, budgets=Budgets(moves_per_namespace=1))
    assert hides_the_secrets(rescue_of(fragmented(), policy=per_namespace, history=spent_there)) == (
        "budget: 0 moves left in another namespace this hour, the rescue needs 1"
    )
    kept = (Reservation("secret-ns/other-pod", ("a0",), NOW + timedelta(seconds=60)),)
    said = hides_the_secrets(rescue_of(keep_off(fragmented(), kept, NOW)))
    assert "gpu-0 (a0) is kept for a pod of another namespace, whose rescue freed it" in said, said


def test_cards_resources_and_the_readers_own_names_stay() -> None:
    message = (
        "team-b/web.v2 asks nvidia.com/gpu on gpu-a100-0/gpu-1 and gpu-a100-0/GPU-8f2; namespace team-b's pods; "
        "2/4 CardInsufficientMemory"
    )
    assert for_tenant(message, "team-b", {"gpu-a100-0"}) == message
    assert for_tenant("team-a/web.v2's card; namespace team-a.", "team-b", NODES) == (
        "a pod of another namespace's card; another namespace."
    )
    assert for_tenant("a/web moves to a/gpu-0", "team-b", NODES) == "a pod of another namespace moves to a/gpu-0", (
        "a namespace named as a node keeps no pod's name: only a card's name follows a node's"
    )


def test_a_failed_move_of_another_namespace_is_told_without_the_api_errors_bare_names() -> None:
    cause = "eviction of pod secret-ns/hidden-q blocked by PodDisruptionBudget hold-it (0 disruption(s) allowed)"
    blocked = failure_for_tenant(cause, "secret-ns/hidden-q", "team-b", blocked=True)
    assert hides_the_secrets(blocked) == (
        "a PodDisruptionBudget of another namespace refused the eviction of a pod of another namespace"
    )
    failed = failure_for_tenant(
        'secret-ns/hidden-q: pods "hidden-q" is forbidden', "secret-ns/hidden-q", "team-b", blocked=False
    )
    assert hides_the_secrets(failed) == "the move of a pod of another namespace failed"
    assert failure_for_tenant(cause, "team-b/q", "team-b", blocked=True) == cause, "its own namespace's move"
    stopped = "the policy is now mode dry-run; the run stops before its next move"
    assert failure_for_tenant(stopped, "", "team-b", blocked=False) == stopped, "no move failed"


def test_a_pod_of_another_namespace_named_by_digits_is_hidden() -> None:
    """Only a count (digits on both sides) stays: a pod or namespace named by digits is still a name."""
    assert for_tenant("secret-ns/7 and 7/hidden-p moved", "team-b", NODES) == (
        "a pod of another namespace and a pod of another namespace moved"
    )


def test_a_nodes_taint_or_label_key_stays_and_a_pod_of_the_same_words_named_as_one_does_not() -> None:
    """`dedicated/gpu` reads as a pod `gpu` of namespace `dedicated`: it stays when it is a node's key, unless the
    message names it a pod; a dotted prefix (`nvidia.com/gpu`) is no namespace and stays whatever the keys."""
    nodes = [
        {
            "metadata": {"name": "a", "labels": {"pool/tier": "gold", "nvidia.com/gpu.product": "A100", 7: "x"}},
            "spec": {"taints": [{"key": "dedicated/gpu", "value": "a100", "effect": "NoSchedule"}, {"key": 3}, "x"]},
        },
        {"metadata": {"name": "b", "labels": None}, "spec": {"taints": [{"key": "plain", "effect": "NoSchedule"}]}},
        {},
    ]
    keys = node_keys(nodes)
    assert keys == {"pool/tier", "dedicated/gpu"}
    message = "the pod does not tolerate the taint dedicated/gpu=a100:NoSchedule; node a's pool/tier is gold"
    assert for_tenant(message, "team-b", NODES, keys) == message
    assert for_tenant(message, "team-b", NODES) == (
        "the pod does not tolerate the taint a pod of another namespace=a100:NoSchedule; node a's a pod of another "
        "namespace is gold"
    ), "with no key known, the safe side"
    assert for_tenant("moving pod dedicated/gpu and secret-ns/hidden-p", "team-b", NODES, keys) == (
        "moving a pod of another namespace and a pod of another namespace"
    )
