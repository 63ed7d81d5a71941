"""The admission decision on plain dicts: which pod claims which placement, how it is pinned, when it cannot be."""

from __future__ import annotations

import base64
import copy
import json
from datetime import UTC, datetime
from typing import Any

import jsonpatch
import pytest

from kubectl_hami_place.core.admission import (
    CLAIM_ANNOTATION,
    IGNORED,
    NO_PLACEMENT,
    NOT_HONOURED,
    PINNED,
    PLACEMENT_ANNOTATION,
    REINVOKED,
    REQ_ID_ANNOTATION,
    USE_GPUUUID_ANNOTATION,
    Decision,
    ReviewError,
    Settings,
    Snapshot,
    decide,
    merge_condition,
    parse_review,
)

NOW = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
NS = "team-a"
UUID0 = "GPU-aaaa0000"
UUID1 = "GPU-bbbb1111"
A100 = {"count": 10, "devmem": 40960, "devcore": 100, "type": "NVIDIA-A100", "health": True}
HOSTNAME_IN = {"key": "kubernetes.io/hostname", "operator": "In", "values": ["gpu-0"]}


def node(name: str = "gpu-0", cards: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    if cards is None:
        cards = [dict(A100, id=UUID0, index=0), dict(A100, id=UUID1, index=1)]
    return {"metadata": {"name": name, "annotations": {"hami.io/node-nvidia-register": json.dumps(cards)}}}


def placement(
    name: str = "p1",
    *,
    devices: list[str] | None = None,
    node_name: str = "gpu-0",
    selector: dict[str, Any] | None = None,
    created: str = "2026-11-29T10:00:00Z",
    req_id: str | None = None,
    evict: str | None = None,
    status: dict[str, Any] | None = None,
    namespace: str = NS,
    resource_version: str = "100",
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "reqID": req_id or f"req-{name}",
        "podSelector": selector if selector is not None else {"matchLabels": {"app": "train"}},
        "nodeName": node_name,
        "gpuDevices": devices if devices is not None else ["gpu-0"],
    }
    if evict:
        spec["evictPod"] = evict
    obj: dict[str, Any] = {
        "apiVersion": "scheduling.hami.placement.com/v1",
        "kind": "HamiPodPlacement",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "creationTimestamp": created,
            "resourceVersion": resource_version,
            "uid": f"uid-{name}",
        },
        "spec": spec,
    }
    if status is not None:
        obj["status"] = status
    return obj


def gpu_container(name: str = "main", gpus: int = 1, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """A container asking for `gpus` cards, plus any other nvidia.com/ limits."""
    return {"name": name, "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": gpus, **(extra or {})}}}


def pod(
    *,
    labels: dict[str, str] | None = None,
    containers: list[dict[str, Any]] | None = None,
    scheduler: str = "hami-scheduler",
    annotations: dict[str, str] | None = None,
    affinity: dict[str, Any] | None = None,
    name: str = "trainer-0",
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"namespace": NS, "labels": labels if labels is not None else {"app": "train"}},
        "spec": {"schedulerName": scheduler, "containers": containers or [gpu_container()]},
    }
    if name:
        obj["metadata"]["name"] = name
    if annotations:
        obj["metadata"]["annotations"] = annotations
    if affinity is not None:
        obj["spec"]["affinity"] = affinity
    return obj


def review(
    obj: dict[str, Any], *, operation: str = "CREATE", dry_run: bool = False, kind: str = "Pod", uid: str = "req-uid-1"
) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": kind},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "operation": operation,
            "namespace": NS,
            "name": obj["metadata"].get("name", ""),
            "object": obj,
            "dryRun": dry_run,
        },
    }


def snapshot(
    placements: list[dict[str, Any]],
    nodes: list[dict[str, Any]] | None = None,
    *,
    token: str = "tok-1",
    excluded: frozenset[str] = frozenset(),
) -> Snapshot:
    nodes = [node()] if nodes is None else nodes
    return Snapshot(
        placements=placements,
        nodes={n["metadata"]["name"]: n for n in nodes},
        settings=Settings(scheduler_name="hami-scheduler", excluded_namespaces=excluded),
        token=token,
        now=NOW,
    )


def patched(obj: dict[str, Any], decision: Decision) -> dict[str, Any]:
    """The pod as the API server stores it after applying the decision's response patch."""
    response = decision.response()["response"]
    if "patch" not in response:
        return copy.deepcopy(obj)
    assert response["patchType"] == "JSONPatch"
    operations = json.loads(base64.b64decode(response["patch"]))
    result: dict[str, Any] = jsonpatch.apply_patch(obj, operations)
    return result


# Which requests are considered -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"operation": "UPDATE"}, "not a CREATE"),
        ({"kind": "Deployment"}, "not a Pod"),
    ],
)
def test_only_pod_creation_is_considered(changes: dict[str, Any], why: str) -> None:
    decision = decide(review(pod(), **changes), snapshot([placement()]))
    assert decision.result == IGNORED, why
    assert decision.claim is None
    assert decision.response()["response"] == {"uid": "req-uid-1", "allowed": True}


def test_a_pod_of_another_scheduler_is_not_pinned() -> None:
    decision = decide(review(pod(scheduler="default-scheduler")), snapshot([placement()]))
    assert decision.result == IGNORED
    assert decision.claim is None and not decision.patch


def test_an_excluded_namespace_is_never_touched() -> None:
    decision = decide(review(pod()), snapshot([placement()], excluded=frozenset({NS})))
    assert decision.result == IGNORED


def test_a_pod_no_placement_selects_is_admitted_unchanged() -> None:
    decision = decide(review(pod(labels={"app": "web"})), snapshot([placement()]))
    assert decision.result == NO_PLACEMENT
    assert decision.claim is None and not decision.failures and not decision.patch


def test_a_placement_in_another_namespace_is_not_used() -> None:
    decision = decide(review(pod()), snapshot([placement(namespace="team-b")]))
    assert decision.result == NO_PLACEMENT


# The pin -------------------------------------------------------------------------------------------------------


def test_pinned_pod_gets_hostname_affinity_card_uuids_and_our_annotations() -> None:
    original = pod(containers=[gpu_container(gpus=2)])
    decision = decide(review(original), snapshot([placement(devices=["gpu-1", "gpu-0"])], token="tok-9"))
    assert decision.result == PINNED
    stored = patched(original, decision)
    annotations = stored["metadata"]["annotations"]
    assert annotations[USE_GPUUUID_ANNOTATION] == f"{UUID1},{UUID0}"
    assert annotations[PLACEMENT_ANNOTATION] == "p1"
    assert annotations[REQ_ID_ANNOTATION] == "req-p1"
    assert annotations[CLAIM_ANNOTATION] == "tok-9"
    terms = stored["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"] == [{"matchExpressions": [HOSTNAME_IN]}]
    assert "nodeName" not in stored["spec"]
    assert "nvidia.com/gpumem-percentage" not in stored["spec"]["containers"][0]["resources"]["limits"]


def test_the_patch_is_a_diff_that_leaves_everything_else_alone() -> None:
    original = pod(annotations={"team": "ml"})
    original["spec"]["tolerations"] = [{"key": "gpu", "operator": "Exists"}]
    stored = patched(original, decide(review(original), snapshot([placement()])))
    assert stored["metadata"]["annotations"]["team"] == "ml"
    assert stored["spec"]["tolerations"] == original["spec"]["tolerations"]
    assert stored["metadata"]["labels"] == original["metadata"]["labels"]


def test_affinity_is_merged_into_every_existing_term_never_overwritten() -> None:
    zone = {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z1"]}
    fields = {"key": "metadata.name", "operator": "In", "values": ["gpu-0"]}
    preferred = [{"weight": 1, "preference": {"matchExpressions": [zone]}}]
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [zone]}, {"matchFields": [fields]}]
            },
            "preferredDuringSchedulingIgnoredDuringExecution": preferred,
        },
        "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []},
    }
    stored = patched(pod(affinity=affinity), decide(review(pod(affinity=affinity)), snapshot([placement()])))
    node_affinity = stored["spec"]["affinity"]["nodeAffinity"]
    terms = node_affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [
        {"matchExpressions": [zone, HOSTNAME_IN]},
        {"matchFields": [fields], "matchExpressions": [HOSTNAME_IN]},
    ]
    assert node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] == preferred
    assert stored["spec"]["affinity"]["podAntiAffinity"] == affinity["podAntiAffinity"]


def test_an_affinity_without_required_terms_gets_one_term() -> None:
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}}
    stored = patched(pod(affinity=affinity), decide(review(pod(affinity=affinity)), snapshot([placement()])))
    terms = stored["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"] == [{"matchExpressions": [HOSTNAME_IN]}]


def test_percent_sets_gpumem_percentage_only_on_gpu_containers_without_a_memory_ask() -> None:
    containers = [
        gpu_container("a"),
        {"name": "sidecar", "image": "busybox"},
        gpu_container("b", extra={"nvidia.com/gpumem": 8000}),
    ]
    original = pod(containers=containers)
    stored = patched(original, decide(review(original), snapshot([placement(devices=["gpu-0/25"])])))
    a, sidecar, b = stored["spec"]["containers"]
    assert a["resources"]["limits"]["nvidia.com/gpumem-percentage"] == "25"
    assert "resources" not in sidecar
    assert "nvidia.com/gpumem-percentage" not in b["resources"]["limits"]
    assert b["resources"]["limits"]["nvidia.com/gpumem"] == 8000


def test_init_containers_with_gpus_are_pinned_too() -> None:
    original = pod()
    original["spec"]["initContainers"] = [gpu_container("init")]
    stored = patched(original, decide(review(original), snapshot([placement(devices=["gpu-1/50"])])))
    assert stored["spec"]["initContainers"][0]["resources"]["limits"]["nvidia.com/gpumem-percentage"] == "50"


def test_a_card_named_by_uuid_is_used_as_is() -> None:
    stored = patched(pod(), decide(review(pod()), snapshot([placement(devices=[UUID1])])))
    assert stored["metadata"]["annotations"][USE_GPUUUID_ANNOTATION] == UUID1


def test_legacy_register_resolves_too() -> None:
    legacy = {
        "metadata": {
            "name": "gpu-0",
            "annotations": {
                "hami.io/node-nvidia-register": f"{UUID0},10,32768,100,NVIDIA-Tesla V100,0,true,0,hami-core:"
            },
        }
    }
    stored = patched(pod(), decide(review(pod()), snapshot([placement()], nodes=[legacy])))
    assert stored["metadata"]["annotations"][USE_GPUUUID_ANNOTATION] == UUID0


def test_a_generate_name_pod_is_claimed_without_a_name() -> None:
    original = pod(name="")
    original["metadata"]["generateName"] = "trainer-"
    decision = decide(review(original), snapshot([placement()], token="tok-g"))
    assert decision.claim is not None
    assert "consumedBy" not in decision.claim.status
    assert decision.claim.status["claim"]["token"] == "tok-g"


# The claim --------------------------------------------------------------------------------------------------


def test_the_claim_carries_the_resource_version_read_and_the_token() -> None:
    decision = decide(review(pod()), snapshot([placement(resource_version="4711")], token="tok-x"))
    claim = decision.claim
    assert claim is not None
    assert (claim.namespace, claim.name, claim.resource_version) == (NS, "p1", "4711")
    assert claim.status["phase"] == "Consumed"
    assert claim.status["claim"] == {"token": "tok-x", "claimedAt": "2026-11-29T12:00:00Z"}
    assert claim.status["consumedBy"] == {"name": "trainer-0"}
    assert claim.status["conditions"][0]["type"] == "Claimed"
    assert claim.status["conditions"][0]["status"] == "True"


def test_a_claim_with_evict_pod_goes_evicting_first() -> None:
    decision = decide(review(pod()), snapshot([placement(evict="old-pod")]))
    assert decision.claim is not None
    status = decision.claim.status
    assert status["phase"] == "Evicting"
    assert status["eviction"]["pod"] == "old-pod"
    assert status["eviction"]["result"] == "Pending"
    assert status["eviction"]["attempts"] == 0
    assert {c["type"] for c in status["conditions"]} == {"Claimed", "Evicted"}


def test_the_oldest_matching_placement_is_claimed_first() -> None:
    newer = placement("newer", created="2026-11-29T11:00:00Z", devices=["gpu-1"])
    older = placement("older", created="2026-11-29T09:00:00Z")
    decision = decide(review(pod()), snapshot([newer, older]))
    assert decision.claim is not None and decision.claim.name == "older"
    assert decision.placement == "older"


def test_claimed_consumed_failed_expired_and_deleting_placements_are_not_candidates() -> None:
    taken = [
        placement("a", status={"phase": "Consumed", "claim": {"token": "t"}}),
        placement("b", status={"phase": "Evicting", "claim": {"token": "t"}}),
        placement("c", status={"phase": "Failed"}),
        placement("d", status={"phase": "Expired"}),
        placement("e", status={"phase": "Pending", "claim": {"token": "half"}}),
    ]
    deleting = placement("f", req_id="req-f-unique")
    deleting["metadata"]["deletionTimestamp"] = "2026-11-29T11:00:00Z"
    decision = decide(review(pod()), snapshot([*taken, deleting]))
    assert decision.result == NO_PLACEMENT


def test_a_pending_placement_with_empty_status_is_a_candidate() -> None:
    decision = decide(review(pod()), snapshot([placement(status={"phase": "Pending"})]))
    assert decision.result == PINNED


@pytest.mark.parametrize(
    "selector",
    [
        {"matchExpressions": [{"key": "app", "operator": "In", "values": ["train", "eval"]}]},
        {"matchLabels": {"app": "train"}, "matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]},
    ],
)
def test_selectors_with_expressions_match(selector: dict[str, Any]) -> None:
    assert decide(review(pod()), snapshot([placement(selector=selector)])).result == PINNED


def test_an_empty_selector_matches_nothing() -> None:
    assert decide(review(pod()), snapshot([placement(selector={})])).result == NO_PLACEMENT


# Dry run and reinvocation ----------------------------------------------------------------------------------------


def test_dry_run_shows_the_patch_but_writes_nothing() -> None:
    decision = decide(review(pod(), dry_run=True), snapshot([placement()]))
    assert decision.result == PINNED
    assert decision.patch
    assert decision.claim is None and decision.failures == ()


def test_dry_run_of_a_placement_that_cannot_be_honoured_writes_nothing() -> None:
    decision = decide(review(pod(), dry_run=True), snapshot([placement(node_name="gone")]))
    assert decision.result == NOT_HONOURED
    assert decision.failures == ()
    assert decision.warnings


def test_reinvocation_claims_nothing_and_keeps_the_pin() -> None:
    first = decide(review(pod()), snapshot([placement(devices=["gpu-0/30"])], token="tok-1"))
    stored = patched(pod(), first)
    claimed = placement(devices=["gpu-0/30"], status=first.claim.status if first.claim else {})
    again = decide(review(stored), snapshot([claimed], token="tok-2"))
    assert again.result == REINVOKED
    assert again.claim is None and again.failures == ()
    assert not again.patch
    assert patched(stored, again) == stored


def test_reinvocation_restores_a_pin_another_webhook_removed() -> None:
    first = decide(review(pod()), snapshot([placement()], token="tok-1"))
    stored = patched(pod(), first)
    del stored["spec"]["affinity"]
    again = decide(review(stored), snapshot([placement()], token="tok-2"))
    assert again.result == REINVOKED and again.claim is None
    restored = patched(stored, again)
    assert restored["metadata"]["annotations"][CLAIM_ANNOTATION] == "tok-1"
    terms = restored["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"] == [{"matchExpressions": [HOSTNAME_IN]}]


def test_reinvocation_when_the_cache_does_not_know_the_placement_changes_nothing() -> None:
    stored = patched(pod(), decide(review(pod()), snapshot([placement()])))
    again = decide(review(stored), snapshot([]))
    assert again.result == REINVOKED and not again.patch and again.claim is None


# Cannot honour ---------------------------------------------------------------------------------------------------


def _not_honoured(decision: Decision, fragment: str) -> None:
    assert decision.result == NOT_HONOURED
    assert not decision.patch and decision.claim is None
    assert len(decision.failures) == 1
    failure = decision.failures[0]
    assert failure.status["phase"] == "Failed"
    assert fragment in failure.status["message"]
    assert failure.resource_version == "100"
    assert failure.warning
    assert any(fragment in warning for warning in decision.warnings)
    assert any("admitted unchanged" in warning for warning in decision.warnings)


def test_node_gone() -> None:
    _not_honoured(decide(review(pod()), snapshot([placement(node_name="gpu-9")])), "node gpu-9 not found")


def test_node_without_register() -> None:
    bare = {"metadata": {"name": "gpu-0"}}
    _not_honoured(decide(review(pod()), snapshot([placement()], nodes=[bare])), "hami.io/node-nvidia-register")


def test_card_missing() -> None:
    _not_honoured(decide(review(pod()), snapshot([placement(devices=["gpu-7"])])), "no card with index 7")


def test_card_unhealthy() -> None:
    sick = node(cards=[{"id": UUID0, "index": 0, "count": 10, "devmem": 40960, "devcore": 100, "type": "NVIDIA"}])
    _not_honoured(decide(review(pod()), snapshot([placement()], nodes=[sick])), "unhealthy")


def test_card_count_mismatch() -> None:
    _not_honoured(decide(review(pod()), snapshot([placement(devices=["gpu-0", "gpu-1"])])), "asks for 1 card(s)")


def test_pod_without_gpus() -> None:
    plain = pod(containers=[{"name": "c", "image": "busybox"}])
    _not_honoured(decide(review(plain), snapshot([placement()])), "asks for no card")


def test_pod_asking_more_memory_than_its_share() -> None:
    greedy = pod(containers=[gpu_container(extra={"nvidia.com/gpumem": 30000})])
    _not_honoured(decide(review(greedy), snapshot([placement(devices=["gpu-0/50"])])), "more than its share")


def test_pod_asking_a_larger_percentage_than_its_share() -> None:
    greedy = pod(containers=[gpu_container(extra={"nvidia.com/gpumem-percentage": 80})])
    _not_honoured(decide(review(greedy), snapshot([placement(devices=["gpu-0/50"])])), "80% of card memory")


def test_pod_asking_a_smaller_percentage_keeps_its_own() -> None:
    modest = pod(containers=[gpu_container(extra={"nvidia.com/gpumem-percentage": 20})])
    stored = patched(modest, decide(review(modest), snapshot([placement(devices=["gpu-0/50"])])))
    assert stored["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem-percentage"] == 20


def test_pod_within_its_share_in_mib_is_pinned() -> None:
    fits = pod(containers=[gpu_container(extra={"nvidia.com/gpumem": 20480})])
    assert decide(review(fits), snapshot([placement(devices=["gpu-0/50"])])).result == PINNED


def test_mixed_percentages() -> None:
    two = pod(containers=[gpu_container(gpus=2)])
    _not_honoured(decide(review(two), snapshot([placement(devices=["gpu-0/50", "gpu-1/40"])])), "same memory")


def test_pod_with_node_name() -> None:
    direct = pod()
    direct["spec"]["nodeName"] = "gpu-1"
    _not_honoured(decide(review(direct), snapshot([placement()])), "spec.nodeName")


def test_req_id_already_consumed() -> None:
    consumed = placement(
        "first", req_id="shared-id", devices=["gpu-1"], status={"phase": "Consumed", "claim": {"token": "t"}}
    )
    second = placement("second", req_id="shared-id")
    _not_honoured(decide(review(pod()), snapshot([consumed, second])), "reqID already consumed by placement first")


def test_a_failed_candidate_does_not_stop_the_next_one() -> None:
    broken = placement("broken", node_name="gone", created="2026-11-29T08:00:00Z")
    good = placement("good", created="2026-11-29T09:00:00Z")
    decision = decide(review(pod()), snapshot([broken, good]))
    assert decision.result == PINNED
    assert decision.claim is not None and decision.claim.name == "good"
    assert [f.name for f in decision.failures] == ["broken"]
    assert any("broken" in warning for warning in decision.warnings)


def test_a_failure_keeps_the_status_it_had_and_adds_a_condition() -> None:
    decision = decide(review(pod()), snapshot([placement(node_name="gone", status={"phase": "Pending"})]))
    status = decision.failures[0].status
    assert status["phase"] == "Failed"
    assert status["conditions"] == [
        {
            "type": "Claimed",
            "status": "False",
            "lastTransitionTime": "2026-11-29T12:00:00Z",
            "reason": "CannotHonour",
            "message": "node gone not found",
        }
    ]


# The review itself ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ([], "JSON object"),
        ("text", "JSON object"),
        ({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {}}, "expected apiVersion"),
        ({"apiVersion": "admission.k8s.io/v1", "kind": "Pod"}, "expected apiVersion"),
        ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}, "no request"),
        (
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"operation": "CREATE"}},
            "no uid",
        ),
        ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u"}}, "no operation"),
        (
            {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "request": {"uid": "u", "operation": "CREATE", "object": "x"},
            },
            "must carry the object",
        ),
    ],
)
def test_malformed_reviews_are_refused_with_a_reason(body: object, fragment: str) -> None:
    with pytest.raises(ReviewError, match=fragment):
        parse_review(body)
    with pytest.raises(ReviewError):
        decide(body, snapshot([]))  # type: ignore[arg-type]


def test_the_response_echoes_the_uid_and_allows() -> None:
    response = decide(review(pod(), uid="abc-123"), snapshot([])).response()
    assert response == {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": "abc-123", "allowed": True},
    }


def test_unchanged_drops_the_pin_and_keeps_warnings() -> None:
    decision = decide(review(pod()), snapshot([placement()]))
    fallback = decision.unchanged("hami-place: claim not recorded")
    assert fallback.claim is None and not fallback.patch
    assert fallback.response()["response"]["warnings"] == ["hami-place: claim not recorded"]


def test_merge_condition_keeps_transition_time_when_status_is_unchanged() -> None:
    old = [{"type": "Evicted", "status": "False", "lastTransitionTime": "T0", "reason": "Pending", "message": "m"}]
    new = {"type": "Evicted", "status": "False", "lastTransitionTime": "T1", "reason": "Blocked", "message": "pdb"}
    assert merge_condition(old, new) == [{**new, "lastTransitionTime": "T0"}]
    flipped = {**new, "status": "True"}
    assert merge_condition(old, flipped) == [flipped]
