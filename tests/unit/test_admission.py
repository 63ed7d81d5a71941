"""The pin decision on plain data: which pod claims which placement, how it is pinned, when a placement is skipped."""

from __future__ import annotations

import base64
import copy
import dataclasses
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import jsonpatch
import pytest

from kubectl_hami_place.core import admission
from kubectl_hami_place.core.admission import (
    IGNORED,
    NO_PLACEMENT,
    NOT_HONOURED,
    PINNED,
    REINVOKED,
    AdmissionView,
    Decision,
    Settings,
)
from kubectl_hami_place.core.hami_config import HamiConfig
from kubectl_hami_place.core.lifecycle import claim_digest
from kubectl_hami_place.core.names import (
    CLAIM_ANNOTATION,
    CLAIM_DIGEST_LABEL,
    NOUSE_GPUUUID_ANNOTATION,
    PLACEMENT_ANNOTATION,
    REQ_ID_ANNOTATION,
    ROOM_ANNOTATION,
    ROOM_GATE,
    USE_GPUUUID_ANNOTATION,
)
from kubectl_hami_place.core.node_resources import counted_pod
from kubectl_hami_place.core.placement import placements_from_objects, status_to_object
from kubectl_hami_place.core.reservation import Reservation
from kubectl_hami_place.core.reviews import Review, ReviewError, nests_deeper, parse_review

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


def view(
    placements: list[dict[str, Any]],
    nodes: list[dict[str, Any]] | None = None,
    *,
    token: str = "tok-1",
    excluded: frozenset[str] = frozenset(),
) -> AdmissionView:
    nodes = [node()] if nodes is None else nodes
    return AdmissionView(
        placements=placements_from_objects(placements),
        nodes={n["metadata"]["name"]: n for n in nodes},
        settings=Settings(scheduler_name="hami-scheduler", excluded_namespaces=excluded),
        token=token,
        now=NOW,
    )


def decide(body: dict[str, Any], snap: AdmissionView) -> Decision:
    """The decision on the review as the server parses it."""
    return admission.decide(parse_review(body), snap)


def claim_status(decision: Decision) -> dict[str, Any]:
    """The claim's status in the CRD's dict form."""
    assert decision.claim is not None
    return status_to_object(decision.claim.status)


def limits(stored: dict[str, Any], position: int = 0) -> dict[str, Any]:
    """One app container's limits."""
    return stored["spec"]["containers"][position]["resources"]["limits"]


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
    decision = decide(review(pod(), **changes), view([placement()]))
    assert decision.result == IGNORED, why
    assert decision.claim is None
    assert decision.response()["response"] == {"uid": "req-uid-1", "allowed": True}


def test_a_pod_of_another_scheduler_is_not_pinned() -> None:
    decision = decide(review(pod(scheduler="default-scheduler")), view([placement()]))
    assert decision.result == IGNORED
    assert decision.claim is None and not decision.patch


def test_an_excluded_namespace_is_never_touched() -> None:
    decision = decide(review(pod()), view([placement()], excluded=frozenset({NS})))
    assert decision.result == IGNORED


def test_a_pod_no_placement_selects_is_admitted_unchanged() -> None:
    decision = decide(review(pod(labels={"app": "web"})), view([placement()]))
    assert decision.result == NO_PLACEMENT
    assert decision.claim is None and not decision.patch


def test_a_placement_in_another_namespace_is_not_used() -> None:
    decision = decide(review(pod()), view([placement(namespace="team-b")]))
    assert decision.result == NO_PLACEMENT


# The pin -------------------------------------------------------------------------------------------------------


def test_pinned_pod_gets_hostname_affinity_card_uuids_and_our_annotations() -> None:
    original = pod(containers=[gpu_container(gpus=2)])
    decision = decide(review(original), view([placement(devices=["gpu-1", "gpu-0"])], token="tok-9"))
    assert decision.result == PINNED
    stored = patched(original, decision)
    annotations = stored["metadata"]["annotations"]
    assert annotations[USE_GPUUUID_ANNOTATION] == f"{UUID1},{UUID0}"
    assert annotations[PLACEMENT_ANNOTATION] == "p1"
    assert annotations[REQ_ID_ANNOTATION] == "req-p1"
    assert annotations[CLAIM_ANNOTATION] == "tok-9"
    assert stored["metadata"]["labels"][CLAIM_DIGEST_LABEL] == claim_digest("tok-9"), "found by label, not a scan"
    terms = stored["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"] == [{"matchExpressions": [HOSTNAME_IN]}]
    assert "nodeName" not in stored["spec"]
    assert "nvidia.com/gpumem-percentage" not in stored["spec"]["containers"][0]["resources"]["limits"]


def test_the_patch_is_a_diff_that_leaves_everything_else_alone() -> None:
    original = pod(annotations={"team": "ml"})
    original["spec"]["tolerations"] = [{"key": "gpu", "operator": "Exists"}]
    stored = patched(original, decide(review(original), view([placement()])))
    assert stored["metadata"]["annotations"]["team"] == "ml"
    assert stored["spec"]["tolerations"] == original["spec"]["tolerations"]
    digest = {CLAIM_DIGEST_LABEL: stored["metadata"]["labels"][CLAIM_DIGEST_LABEL]}
    assert stored["metadata"]["labels"] == {**original["metadata"]["labels"], **digest}


def test_a_claim_digest_label_the_pod_brings_itself_is_removed() -> None:
    forged = pod()
    forged["metadata"]["labels"] = {"app": "elsewhere", CLAIM_DIGEST_LABEL: claim_digest("tok-stolen")}
    decision = decide(review(forged), view([placement()]))
    assert decision.patch == ({"op": "remove", "path": "/metadata/labels/scheduling.hami.placement.com~1claim-digest"},)


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
    stored = patched(pod(affinity=affinity), decide(review(pod(affinity=affinity)), view([placement()])))
    node_affinity = stored["spec"]["affinity"]["nodeAffinity"]
    terms = node_affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [
        {"matchExpressions": [zone, HOSTNAME_IN]},
        {"matchFields": [fields], "matchExpressions": [HOSTNAME_IN]},
    ]
    assert node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] == preferred
    assert stored["spec"]["affinity"]["podAntiAffinity"] == affinity["podAntiAffinity"]


@pytest.mark.parametrize("terms", [[], [None]], ids=["no term", "a null term"])
def test_required_terms_that_select_no_node_claim_nothing_and_a_reinvocation_pins_them_anyway(terms: list[Any]) -> None:
    """No term, or a `null` one (only a forged review holds these: the API server refuses the first and decodes a typed
    Pod), select no node, so the placement is skipped rather than the pod pinned where it cannot go; a reinvocation of
    a claimed pod whose terms another webhook garbled so gets the hostname term alone, not a server error."""
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}
    _skipped(decide(review(pod(affinity=affinity)), view([placement()])), "the node selection excludes node gpu-0")
    first = decide(review(pod()), view([placement()], token="tok-1"))
    stored = patched(pod(), first)
    stored["spec"]["affinity"] = copy.deepcopy(affinity)
    again = decide(review(stored), view([claimed_copy(first)], token="tok-2"))
    assert again.result == REINVOKED
    restored = patched(stored, again)["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert restored["nodeSelectorTerms"] == [{"matchExpressions": [HOSTNAME_IN]}]


def test_a_decision_copies_what_it_changes_and_leaves_the_reviews_pod_as_it_came() -> None:
    """The pin is built on copies of the paths it changes only (a deep copy walked a forged review's million items),
    so the pod the review holds, its terms, gates and containers, is the diff's `before` and must stay as it came:
    changed in place, the patch would lack what it changed."""
    terms = [{"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["b"]}]}]
    original = pod(
        containers=[gpu_container("a", extra={"nvidia.com/gpucores": "100"})],
        affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}},
    )
    original["spec"]["containers"][0]["resources"]["requests"] = {"nvidia.com/gpucores": "100"}
    original["spec"]["schedulingGates"] = [{"name": "example.com/quota"}]
    came = copy.deepcopy(original)
    stored = dataclasses.replace(view([placement(devices=["gpu-0/25"], evict="old-pod")]), pod_uids={"old-pod": "u"})
    decision = decide(review(original), stored)
    assert original == came
    pinned = patched(copy.deepcopy(original), decision)
    [term] = pinned["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert term["matchExpressions"][-1] == {"key": "kubernetes.io/hostname", "operator": "In", "values": ["gpu-0"]}
    assert pinned["spec"]["schedulingGates"] == [{"name": "example.com/quota"}, {"name": ROOM_GATE}]
    assert limits(pinned) == {"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": "25"}, "HAMi's default cores go"
    assert pinned["spec"]["containers"][0]["resources"]["requests"] == {}


def test_percent_sets_gpumem_percentage_only_on_gpu_containers_without_a_memory_ask() -> None:
    """b's 8000 MiB take 20% of the pod's 25% share of the 40960 MiB card (rounded up): a gets the 5% left."""
    containers = [
        gpu_container("a"),
        {"name": "sidecar", "image": "busybox"},
        gpu_container("b", extra={"nvidia.com/gpumem": 8000}),
    ]
    original = pod(containers=containers)
    stored = patched(original, decide(review(original), view([placement(devices=["gpu-0/25"])])))
    a, sidecar, b = stored["spec"]["containers"]
    assert a["resources"]["limits"]["nvidia.com/gpumem-percentage"] == "5"
    assert "resources" not in sidecar
    assert "nvidia.com/gpumem-percentage" not in b["resources"]["limits"]
    assert b["resources"]["limits"]["nvidia.com/gpumem"] == 8000


def test_init_containers_with_gpus_are_pinned_too() -> None:
    original = pod()
    original["spec"]["initContainers"] = [gpu_container("init")]
    stored = patched(original, decide(review(original), view([placement(devices=["gpu-1/50"])])))
    assert stored["spec"]["initContainers"][0]["resources"]["limits"]["nvidia.com/gpumem-percentage"] == "50"


def test_a_card_named_by_uuid_is_used_as_is() -> None:
    stored = patched(pod(), decide(review(pod()), view([placement(devices=[UUID1])])))
    assert stored["metadata"]["annotations"][USE_GPUUUID_ANNOTATION] == UUID1


def test_a_legacy_register_is_skipped_as_hami_v2_10_does_not_read_it() -> None:
    legacy = {
        "metadata": {
            "name": "gpu-0",
            "annotations": {
                "hami.io/node-nvidia-register": f"{UUID0},10,32768,100,NVIDIA-Tesla V100,0,true,0,hami-core:"
            },
        }
    }
    decision = decide(review(pod()), view([placement()], nodes=[legacy]))
    assert decision.result == NOT_HONOURED and not decision.patch
    assert "legacy" in decision.warnings[0]


def test_a_generate_name_pod_is_claimed_without_a_name() -> None:
    original = pod(name="")
    original["metadata"]["generateName"] = "trainer-"
    decision = decide(review(original), view([placement()], token="tok-g"))
    assert "consumedBy" not in claim_status(decision)
    assert claim_status(decision)["claim"]["token"] == "tok-g"


def test_a_pod_whose_name_is_no_object_name_claims_nothing() -> None:
    """Mutating admission comes before the API server validates the name, which then refuses the pod: a claim would
    hold the placement for a pod that never exists, with escape codes in its status and Event."""
    original = pod(name="evil\x1b[2J\nfake")
    decision = decide(review(original), view([placement()]))
    assert decision.claim is None and decision.result == admission.NO_PLACEMENT
    assert decide(review(pod(name="evil")), view([placement()])).claim is not None


def test_a_username_is_cut_where_the_claim_logs_it() -> None:
    body = review(pod())
    body["request"]["userInfo"] = {"username": "u" * 10_000}
    assert parse_review(body).user == "u" * 512


@pytest.mark.parametrize("generate_name", ["NOT_A_NAME-", "bad\nname-" + "g" * 100_000, "", None, 7])
def test_a_pod_whose_generate_name_the_api_server_refuses_claims_nothing(generate_name: object) -> None:
    """Without a name, the API server makes one from generateName after mutating admission, and refuses a pod whose
    generateName is no name's prefix (or that has neither): nothing is claimed for it."""
    original = pod(name="")
    original["metadata"]["generateName"] = generate_name
    decision = decide(review(original), view([placement()]))
    assert decision.claim is None and decision.result == admission.NO_PLACEMENT
    original["metadata"]["generateName"] = "a-"
    assert decide(review(original), view([placement()])).claim is not None, "one letter and the dash: a prefix"


# The claim --------------------------------------------------------------------------------------------------


def test_the_claim_carries_the_resource_version_read_and_the_token() -> None:
    decision = decide(review(pod()), view([placement(resource_version="4711")], token="tok-x"))
    claim = decision.claim
    assert claim is not None
    assert (claim.namespace, claim.name, claim.resource_version) == (NS, "p1", "4711")
    status = claim_status(decision)
    assert status["phase"] == "Consumed"
    assert status["claim"] == {"token": "tok-x", "claimedAt": "2026-11-29T12:00:00Z"}
    assert status["consumedBy"] == {"name": "trainer-0"}
    assert status["conditions"][0]["type"] == "Claimed"
    assert status["conditions"][0]["status"] == "True"


def test_a_claim_with_evict_pod_goes_evicting_first() -> None:
    stored = dataclasses.replace(view([placement(evict="old-pod")]), pod_uids={"old-pod": "uid-old"})
    decision = decide(review(pod()), stored)
    status = claim_status(decision)
    assert status["phase"] == "Evicting"
    assert (status["eviction"]["pod"], status["eviction"]["uid"]) == ("old-pod", "uid-old")
    assert status["eviction"]["result"] == "Pending"
    assert status["eviction"]["attempts"] == 0
    assert {c["type"] for c in status["conditions"]} == {"Claimed", "Evicted"}


def test_a_pod_pinned_by_a_placement_that_evicts_is_gated_until_the_room_is_made_and_keeps_its_own_gates() -> None:
    own = pod()
    own["spec"]["schedulingGates"] = [{"name": "example.com/quota"}]
    stored = dataclasses.replace(view([placement(evict="old-pod")]), pod_uids={"old-pod": "uid-old"})
    first = decide(review(own), stored)
    gated = patched(own, first)
    assert gated["spec"]["schedulingGates"] == [{"name": "example.com/quota"}, {"name": ROOM_GATE}]
    again = decide(review(gated), view([claimed_copy(first, evict="old-pod")], token="tok-2"))
    assert again.result == REINVOKED and patched(gated, again) == gated, "a reinvocation adds no second gate"
    copied = pod()
    copied["spec"]["schedulingGates"] = [{"name": ROOM_GATE}]
    assert patched(copied, decide(review(copied), stored))["spec"]["schedulingGates"] == [{"name": ROOM_GATE}], (
        "a pod copied from a gated one is not given the gate twice (the API server refuses a repeated gate)"
    )
    for unneeded in (view([placement()]), view([placement(evict="old-pod")])):
        assert "schedulingGates" not in patched(pod(), decide(review(pod()), unneeded))["spec"], "nothing to wait for"


def test_a_claim_whose_evict_pod_is_not_stored_reports_it_missing_and_evicts_nothing() -> None:
    status = claim_status(decide(review(pod()), view([placement(evict="old-pod")])))
    assert status["phase"] == "Consumed"
    assert status["eviction"]["result"] == "NotFound" and "uid" not in status["eviction"]
    assert "pod old-pod did not exist when the placement was claimed" in status["eviction"]["message"]


def test_the_oldest_matching_placement_is_claimed_first() -> None:
    newer = placement("newer", created="2026-11-29T11:00:00Z", devices=["gpu-1"])
    older = placement("older", created="2026-11-29T09:00:00Z")
    decision = decide(review(pod()), view([newer, older]))
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
    decision = decide(review(pod()), view([*taken, deleting]))
    assert decision.result == NO_PLACEMENT


def test_a_pending_placement_with_empty_status_is_a_candidate() -> None:
    decision = decide(review(pod()), view([placement(status={"phase": "Pending"})]))
    assert decision.result == PINNED


@pytest.mark.parametrize(
    "selector",
    [
        {"matchExpressions": [{"key": "app", "operator": "In", "values": ["train", "eval"]}]},
        {"matchLabels": {"app": "train"}, "matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]},
    ],
)
def test_selectors_with_expressions_match(selector: dict[str, Any]) -> None:
    assert decide(review(pod()), view([placement(selector=selector)])).result == PINNED


def test_an_empty_selector_matches_nothing() -> None:
    assert decide(review(pod()), view([placement(selector={})])).result == NO_PLACEMENT


# Dry run and reinvocation ----------------------------------------------------------------------------------------


def test_dry_run_shows_the_patch_but_writes_nothing() -> None:
    decision = decide(review(pod(), dry_run=True), view([placement()]))
    assert decision.result == PINNED
    assert decision.patch
    assert decision.claim is None


def claimed_copy(first: Decision, **kwargs: Any) -> dict[str, Any]:
    """The placement as stored once `first`'s claim was written."""
    return placement(status=claim_status(first), **kwargs)


def test_reinvocation_claims_nothing_and_keeps_the_pin() -> None:
    first = decide(review(pod()), view([placement(devices=["gpu-0/30"])], token="tok-1"))
    stored = patched(pod(), first)
    again = decide(review(stored), view([claimed_copy(first, devices=["gpu-0/30"])], token="tok-2"))
    assert again.result == REINVOKED
    assert again.claim is None
    assert not again.patch
    assert patched(stored, again) == stored


def test_reinvocation_restores_a_pin_another_webhook_removed() -> None:
    first = decide(review(pod()), view([placement()], token="tok-1"))
    stored = patched(pod(), first)
    del stored["spec"]["affinity"]
    again = decide(review(stored), view([claimed_copy(first)], token="tok-2"))
    assert again.result == REINVOKED and again.claim is None
    restored = patched(stored, again)
    assert restored["metadata"]["annotations"][CLAIM_ANNOTATION] == "tok-1"
    terms = restored["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"] == [{"matchExpressions": [HOSTNAME_IN]}]


def test_our_annotations_without_the_stored_claim_are_removed_and_the_pod_goes_the_normal_way() -> None:
    copied = {CLAIM_ANNOTATION: "tok-old", PLACEMENT_ANNOTATION: "p1", REQ_ID_ANNOTATION: "req-p1", "team": "ml"}
    unknown = decide(review(pod(annotations=copied)), view([]))
    assert unknown.result == NO_PLACEMENT and unknown.claim is None
    assert patched(pod(annotations=copied), unknown)["metadata"]["annotations"] == {"team": "ml"}
    forged = decide(review(pod(annotations=copied)), view([placement()], token="tok-new"))
    assert forged.result == PINNED
    assert claim_status(forged)["claim"]["token"] == "tok-new"
    assert patched(pod(annotations=copied), forged)["metadata"]["annotations"][CLAIM_ANNOTATION] == "tok-new"
    stored_claim = claimed_copy(forged)
    pinned_annotations = patched(pod(annotations=copied), forged)["metadata"]["annotations"]
    reinvoked = decide(review(pod(annotations=pinned_annotations)), view([stored_claim]))
    assert reinvoked.result == REINVOKED
    copy_of_stored = decide(
        review(pod(annotations=pinned_annotations)),
        dataclasses.replace(view([stored_claim]), carried=frozenset({"tok-new"})),
    )
    assert copy_of_stored.result == NO_PLACEMENT and copy_of_stored.claim is None
    assert (
        CLAIM_ANNOTATION not in patched(pod(annotations=pinned_annotations), copy_of_stored)["metadata"]["annotations"]
    )
    fallback = forged.unchanged("hami-place: claim not recorded")
    assert patched(pod(annotations=copied), fallback)["metadata"]["annotations"] == {"team": "ml"}
    other = placement(status={"phase": "Consumed", "claim": {"token": "tok-other"}})
    assert decide(review(pod(annotations=copied)), view([other])).result == NO_PLACEMENT


# Skipped for this pod: the placement stays open ----------------------------------------------------------------


def _skipped(decision: Decision, fragment: str) -> None:
    assert decision.result == NOT_HONOURED
    assert not decision.patch and decision.claim is None
    assert any(fragment in warning for warning in decision.warnings), decision.warnings
    assert any("admitted without a pin" in warning for warning in decision.warnings)


def test_node_gone() -> None:
    _skipped(decide(review(pod()), view([placement(node_name="gpu-9")])), "node gpu-9 not found")


def test_node_without_register() -> None:
    bare = {"metadata": {"name": "gpu-0"}}
    _skipped(decide(review(pod()), view([placement()], nodes=[bare])), "hami.io/node-nvidia-register")


def test_card_missing() -> None:
    _skipped(decide(review(pod()), view([placement(devices=["gpu-7"])])), "no card with index 7")


def test_card_unhealthy() -> None:
    sick = node(cards=[{"id": UUID0, "index": 0, "count": 10, "devmem": 40960, "devcore": 100, "type": "NVIDIA"}])
    _skipped(decide(review(pod()), view([placement()], nodes=[sick])), "unhealthy")


def test_card_count_mismatch() -> None:
    _skipped(decide(review(pod()), view([placement(devices=["gpu-0", "gpu-1"])])), "asks 1 card(s)")


def test_pod_without_gpus() -> None:
    plain = pod(containers=[{"name": "c", "image": "busybox"}])
    _skipped(decide(review(plain), view([placement()])), "no container asks for nvidia.com/gpu")


def test_pod_asking_more_memory_than_its_share() -> None:
    greedy = pod(containers=[gpu_container(extra={"nvidia.com/gpumem": 30000})])
    _skipped(decide(review(greedy), view([placement(devices=["gpu-0/50"])])), "asks 30000 MiB, more than 50%")


def test_pod_asking_a_larger_percentage_than_its_share() -> None:
    greedy = pod(containers=[gpu_container(extra={"nvidia.com/gpumem-percentage": 80})])
    _skipped(decide(review(greedy), view([placement(devices=["gpu-0/50"])])), "asks 32768 MiB, more than 50%")


def test_pod_larger_than_the_card() -> None:
    huge = pod(containers=[gpu_container(extra={"nvidia.com/gpumem": 50000, "nvidia.com/gpucores": 10})])
    _skipped(decide(review(huge), view([placement()])), "CardInsufficientMemory")


def test_pod_asking_a_smaller_percentage_keeps_its_own() -> None:
    modest = pod(containers=[gpu_container(extra={"nvidia.com/gpumem-percentage": 20})])
    stored = patched(modest, decide(review(modest), view([placement(devices=["gpu-0/50"])])))
    assert limits(stored)["nvidia.com/gpumem-percentage"] == 20


def test_pod_within_its_share_in_mib_is_pinned() -> None:
    fits = pod(containers=[gpu_container(extra={"nvidia.com/gpumem": 20480})])
    assert decide(review(fits), view([placement(devices=["gpu-0/50"])])).result == PINNED


def test_mixed_percentages() -> None:
    two = pod(containers=[gpu_container(gpus=2)])
    _skipped(decide(review(two), view([placement(devices=["gpu-0/50", "gpu-1/40"])])), "mix memory percents")


def test_pod_with_node_name() -> None:
    direct = pod()
    direct["spec"]["nodeName"] = "gpu-1"
    _skipped(decide(review(direct), view([placement()])), "spec.nodeName")


def test_a_pod_with_a_privileged_container_claims_nothing() -> None:
    privileged = pod()
    privileged["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    _skipped(decide(review(privileged), view([placement()])), "is privileged")


def test_req_id_already_consumed() -> None:
    consumed = placement(
        "first", req_id="shared-id", devices=["gpu-1"], status={"phase": "Consumed", "claim": {"token": "t"}}
    )
    second = placement("second", req_id="shared-id")
    _skipped(decide(review(pod()), view([consumed, second])), "reqID already consumed by first")


def test_a_placement_whose_node_kube_scheduler_keeps_the_pod_off_is_skipped_and_evicts_nothing() -> None:
    """Pinned there, the pod would wait for good, and the pod the placement evicts would go for nothing."""
    tainted = node()
    tainted["spec"] = {"taints": [{"key": "team", "value": "b", "effect": "NoSchedule"}]}
    evicting = placement(evict="old-trainer")
    _skipped(decide(review(pod()), view([evicting], nodes=[tainted])), "node gpu-0's taint team=b:NoSchedule")
    _skipped(decide(review(pod()), view([evicting], nodes=[tainted])), "so kube-scheduler would leave it Pending there")
    # A newer placement on a node without the taint is tried next, and pins the pod.
    elsewhere = placement("p2", created="2026-11-29T11:00:00Z", node_name="gpu-1")
    pinned = decide(review(pod()), view([evicting, elsewhere], nodes=[tainted, node("gpu-1")]))
    assert (pinned.result, pinned.placement) == (PINNED, "p2"), pinned.warnings
    tolerating = pod()
    tolerating["spec"]["tolerations"] = [{"key": "team", "operator": "Exists"}]
    assert decide(review(tolerating), view([evicting], nodes=[tainted])).result == PINNED
    labelled = node()
    labelled["metadata"]["labels"] = {"pool": "train"}
    serving = pod()
    serving["spec"]["nodeSelector"] = {"pool": "serve"}
    _skipped(decide(review(serving), view([placement()], nodes=[labelled])), "the node selection excludes node gpu-0")
    serving["spec"]["nodeSelector"] = {"pool": "train"}
    assert decide(review(serving), view([placement()], nodes=[labelled])).result == PINNED


def _on_node(name: str, cpu: str, node_name: str = "gpu-0") -> dict[str, Any]:
    """A stored pod bound to the node, asking `cpu`."""
    stored = pod(name=name)
    stored["metadata"]["uid"] = f"uid-{name}"
    stored["spec"]["nodeName"] = node_name
    stored["spec"]["containers"][0]["resources"]["requests"] = {"cpu": cpu}
    return stored


def test_a_placement_that_evicts_for_a_pod_its_node_has_no_cpu_for_is_skipped_and_evicts_nothing() -> None:
    """kube-scheduler refuses the node for CPU before HAMi sees its cards: the eviction would free nothing the pod
    could use. The evicted pod's own CPU counts as free when it runs there; a placement that evicts nothing pins."""
    with_cpu = node()
    with_cpu["status"] = {"allocatable": {"cpu": "8", "memory": "64Gi", "pods": "110"}}
    victim, neighbour = _on_node("old-trainer", "4"), _on_node("neighbour", "3")
    elsewhere = _on_node("far", "4", node_name="gpu-1")
    hungry = pod()
    hungry["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "6"}
    evicting = placement(evict="old-trainer")

    def room_view(placements: list[dict[str, Any]], evicted: dict[str, Any], counted: bool = True) -> AdmissionView:
        return dataclasses.replace(
            view(placements, nodes=[with_cpu]),
            pod_uids={evicted["metadata"]["name"]: evicted["metadata"]["uid"]},
            evicted_pods={evicted["metadata"]["name"]: evicted},
            node_pods={"gpu-0": ([victim, neighbour, elsewhere], [])} if counted else {},
        )

    # 8 cores less the victim's 4 once it is gone and the neighbour's 3: 5 left for 6 asked.
    _skipped(
        decide(review(hungry), room_view([evicting], victim)),
        "placement p1 skipped for this pod: node gpu-0: kube-scheduler: Insufficient cpu (the node has 5000m CPU",
    )
    decision = decide(review(hungry), room_view([evicting], victim))
    assert any("even with pod old-trainer evicted, so it would stay Pending there" in w for w in decision.warnings)
    # Another scheduler's pod counts as the server keeps it (read once, `counted_pod`).
    others = dataclasses.replace(
        room_view([evicting], victim), node_pods={"gpu-0": ([victim], [counted_pod(neighbour)])}
    )
    _skipped(decide(review(hungry), others), "the node has 5000m CPU")
    # The pod evicted runs elsewhere: it gives nothing back here (1 core left).
    far = placement(evict="far")
    _skipped(decide(review(hungry), room_view([far], elsewhere)), "the node has 1000m CPU")
    # A newer placement that needs no eviction is tried next, and pins the pod.
    plain = placement("p2", created="2026-11-29T11:00:00Z", devices=["gpu-1"])
    pinned = decide(review(hungry), room_view([evicting, plain], victim))
    assert (pinned.result, pinned.placement) == (PINNED, "p2"), pinned.warnings
    hungry["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "5"}
    assert decide(review(hungry), room_view([evicting], victim)).result == PINNED
    hungry["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "6"}
    # Not judged when the server keeps no requests (its controller does not plan), nor for a pin that evicts nothing.
    assert decide(review(hungry), room_view([evicting], victim, counted=False)).result == PINNED
    assert decide(review(hungry), room_view([placement()], victim)).result == PINNED


@pytest.mark.parametrize(
    "required",
    [
        {"nodeSelectorTerms": 5},
        {"nodeSelectorTerms": [{"matchExpressions": 5, "matchFields": "x"}]},
        {"nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In", "values": 5}]}]},
    ],
)
def test_a_node_affinity_no_api_server_would_store_keeps_the_pod_off_every_node(required: dict[str, Any]) -> None:
    """A review sent to the server straight may hold anything: such terms select no node, as an empty term does."""
    labelled = node()
    labelled["metadata"]["labels"] = {"pool": "train"}
    forged = pod(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}})
    _skipped(decide(review(forged), view([placement()], nodes=[labelled])), "the node selection excludes node gpu-0")


def test_a_skipped_candidate_does_not_stop_the_next_one() -> None:
    broken = placement("broken", node_name="gone", created="2026-11-29T08:00:00Z")
    good = placement("good", created="2026-11-29T09:00:00Z")
    decision = decide(review(pod()), view([broken, good]))
    assert decision.result == PINNED
    assert decision.claim is not None and decision.claim.name == "good"
    assert any("broken" in warning for warning in decision.warnings)


def test_a_pod_that_does_not_fit_leaves_the_placement_for_the_next_one_that_does() -> None:
    wide = placement(devices=["gpu-0", "gpu-1"])
    assert decide(review(pod()), view([wide])).result == NOT_HONOURED
    two = pod(containers=[gpu_container(gpus=2)])
    assert decide(review(two), view([wide])).result == PINNED


# gpu-N/P is the share of the whole pod -------------------------------------------------------------------------


def test_two_gpu_containers_split_the_share_between_them() -> None:
    two = pod(containers=[gpu_container("a"), gpu_container("b")])
    stored = patched(two, decide(review(two), view([placement(devices=["gpu-0/70"])])))
    assert [limits(stored, i)["nvidia.com/gpumem-percentage"] for i in (0, 1)] == ["35", "35"]


def test_an_uneven_share_gives_the_remainder_to_the_first_containers() -> None:
    three = pod(containers=[gpu_container("a"), gpu_container("b"), gpu_container("c")])
    stored = patched(three, decide(review(three), view([placement(devices=["gpu-0/70"])])))
    assert [limits(stored, i)["nvidia.com/gpumem-percentage"] for i in (0, 1, 2)] == ["24", "23", "23"]


def test_a_container_with_its_own_memory_leaves_the_rest_of_the_share_to_the_others() -> None:
    mixed = pod(containers=[gpu_container("a", extra={"nvidia.com/gpumem-percentage": 20}), gpu_container("b")])
    stored = patched(mixed, decide(review(mixed), view([placement(devices=["gpu-0/70"])])))
    assert limits(stored, 0)["nvidia.com/gpumem-percentage"] == 20
    assert limits(stored, 1)["nvidia.com/gpumem-percentage"] == "50"


def test_memory_a_container_asks_in_its_requests_alone_is_its_own_too() -> None:
    """HAMi reads a resource from the limits, else the requests: a percentage asked in the requests alone is the
    container's own, as in the limits."""
    asking = gpu_container("a")
    asking["resources"]["requests"] = {"nvidia.com/gpumem-percentage": 20}
    mixed = pod(containers=[asking, gpu_container("b")])
    stored = patched(mixed, decide(review(mixed), view([placement(devices=["gpu-0/70"])])))
    assert "nvidia.com/gpumem-percentage" not in limits(stored, 0)
    assert limits(stored, 1)["nvidia.com/gpumem-percentage"] == "50"


def test_a_share_too_small_to_split_is_skipped() -> None:
    three = pod(containers=[gpu_container("a"), gpu_container("b"), gpu_container("c")])
    _skipped(decide(review(three), view([placement(devices=["gpu-0/2"])])), "too little to split")


def test_hamis_default_cores_are_dropped_from_a_share_below_the_whole_card() -> None:
    defaulted = pod(containers=[gpu_container(extra={"nvidia.com/gpucores": "100"})])
    stored = patched(defaulted, decide(review(defaulted), view([placement(devices=["gpu-0/50"])])))
    assert limits(stored) == {"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": "50"}
    whole = patched(defaulted, decide(review(defaulted), view([placement(devices=["gpu-0/100"])])))
    assert limits(whole)["nvidia.com/gpucores"] == "100"


def test_cores_the_pod_chose_are_kept() -> None:
    chosen = pod(containers=[gpu_container(extra={"nvidia.com/gpucores": 30})])
    stored = patched(chosen, decide(review(chosen), view([placement(devices=["gpu-0/50"])])))
    assert limits(stored)["nvidia.com/gpucores"] == 30
    with_memory = pod(containers=[gpu_container(extra={"nvidia.com/gpucores": 100, "nvidia.com/gpumem": 1000})])
    stored = patched(with_memory, decide(review(with_memory), view([placement(devices=["gpu-0/50"])])))
    assert limits(stored)["nvidia.com/gpucores"] == 100


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
            {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u" * 129}},
            "uid is 129 characters",
        ),
        (
            {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "request": {"uid": "u", "operation": "CREATE", "object": "x"},
            },
            "must carry the object",
        ),
        (
            {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "request": {"uid": "u", "operation": "CREATE", "object": {}, "namespace": {"not": "a string"}},
            },
            "namespace must be a string",
        ),
        (
            {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "request": {"uid": "u", "operation": "CREATE", "object": {}, "namespace": "ns", "name": 7},
            },
            "name must be a string",
        ),
    ],
)
def test_malformed_reviews_are_refused_with_a_reason(body: object, fragment: str) -> None:
    with pytest.raises(ReviewError, match=fragment):
        parse_review(body)


def _request(**fields: object) -> dict[str, Any]:
    """An AdmissionReview whose request holds exactly these fields."""
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": fields}


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ([], "the body must be a JSON object (an AdmissionReview)"),
        (
            {"apiVersion": "v" * 70, "kind": 7},
            f"expected apiVersion admission.k8s.io/v1 kind AdmissionReview, got '{'v' * 60}... int",
        ),
        (
            {"apiVersion": "admission.k8s.io/v1", "kind": "Pod"},
            "expected apiVersion admission.k8s.io/v1 kind AdmissionReview, got 'admission.k8s.io/v1' 'Pod'",
        ),
        (
            {"kind": "AdmissionReview"},
            "expected apiVersion admission.k8s.io/v1 kind AdmissionReview, got NoneType 'AdmissionReview'",
        ),
        ({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}, "the AdmissionReview has no request object"),
        (_request(uid="", operation="CREATE", object={}), "the AdmissionReview request has no uid"),
        (_request(uid=7, operation="CREATE", object={}), "the AdmissionReview request has no uid"),
        (_request(uid="u", operation="", object={}), "the AdmissionReview request has no operation"),
        (_request(uid="u", operation=7, object={}), "the AdmissionReview request has no operation"),
        (_request(uid="u", operation="CREATE"), "a CREATE AdmissionReview request must carry the object"),
        (
            _request(uid="u", operation="CREATE", object={}, subResource=["status"]),
            "the AdmissionReview request's subResource must be a string",
        ),
        (
            _request(uid="u", operation="CREATE", object={}, namespace="N" * 100),
            f"the AdmissionReview request's namespace '{'N' * 76}... is not a namespace name",
        ),
        (
            _request(uid="u", operation="CREATE", kind={"kind": "Pod"}, object={"metadata": {"namespace": NS}}),
            "a Pod's CREATE AdmissionReview request must name the namespace its object's metadata names",
        ),
        (
            _request(uid="u", operation="CREATE", kind={"kind": "Pod"}, object={}),
            "a Pod's CREATE AdmissionReview request must name the namespace its object's metadata names",
        ),
        (
            _request(
                uid="u", operation="CREATE", kind={"kind": "Pod"}, namespace=NS, object={"metadata": {"namespace": "b"}}
            ),
            "a Pod's CREATE AdmissionReview request must name the namespace its object's metadata names",
        ),
    ],
)
def test_a_malformed_review_is_refused_with_the_whole_reason(body: object, message: str) -> None:
    """The reason is the 400's body, which the API server shows the one who created the pod."""
    with pytest.raises(ReviewError) as caught:
        parse_review(body)
    assert str(caught.value) == message


def test_a_pods_review_names_its_namespace_in_the_request_and_the_metadata_alike_or_only_in_the_request() -> None:
    """One namespace decides which placements a pod may take and where its claim is looked up: a forged review whose
    request named none went by the metadata's, unchecked, and reached the adapters with the request's empty one."""
    for metadata in ({"namespace": NS}, {}, {"namespace": ""}):
        review = parse_review(
            _request(uid="u", operation="CREATE", kind={"kind": "Pod"}, namespace=NS, object={"metadata": metadata})
        )
        assert review.namespace == NS


def test_a_review_uid_of_128_characters_is_taken() -> None:
    assert parse_review(_request(uid="u" * 128, operation="CREATE", object={})).uid == "u" * 128


def test_a_review_is_parsed_whole() -> None:
    body = _request(
        uid="u-1",
        kind={"group": "apps", "version": "v1", "kind": "Deployment"},
        operation="UPDATE",
        subResource="status",
        namespace="team",
        name="web",
        dryRun=True,
        object={"metadata": {"name": "web"}},
        userInfo={"username": "alice"},
    )
    assert parse_review(body) == Review(
        uid="u-1",
        operation="UPDATE",
        kind="Deployment",
        group="apps",
        sub_resource="status",
        namespace="team",
        name="web",
        dry_run=True,
        pod={"metadata": {"name": "web"}},
        user="alice",
    )


def test_a_review_missing_or_garbling_its_optional_fields_reads_them_empty() -> None:
    """Only a CREATE must carry the object; a kind, object, dryRun or userInfo of the wrong type reads as absent."""
    body = _request(uid="u-1", operation="DELETE", kind="Pod", object="x", dryRun="true", userInfo={"username": 7})
    assert parse_review(body) == Review(
        uid="u-1", operation="DELETE", kind="", group="", sub_resource="", namespace="", name="", dry_run=False, pod={}
    )
    with_kind = _request(uid="u-1", operation="DELETE", kind={"kind": 7, "group": ["apps"]}, userInfo="alice")
    assert (parse_review(with_kind).kind, parse_review(with_kind).group, parse_review(with_kind).user) == ("", "", "")


def test_only_lists_and_objects_nest() -> None:
    assert nests_deeper(7, 0) is False
    assert nests_deeper("text", 0) is False
    assert nests_deeper([[]], 1) is True


def test_the_response_echoes_the_uid_and_allows() -> None:
    response = decide(review(pod(), uid="abc-123"), view([])).response()
    assert response == {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": "abc-123", "allowed": True},
    }


def test_unchanged_drops_the_pin_and_keeps_warnings() -> None:
    decision = decide(review(pod()), view([placement()]))
    fallback = decision.unchanged("hami-place: claim not recorded")
    assert fallback.claim is None and not fallback.patch
    assert fallback.response()["response"]["warnings"] == ["hami-place: claim not recorded"]


# HAMi as the cluster configures it ---------------------------------------------------------------------------

RENAMED = HamiConfig(
    resource_count_name="example.com/vgpu",
    resource_memory_name="example.com/vgpu-mem",
    resource_memory_percentage_name="example.com/vgpu-mem-percentage",
    resource_core_name="example.com/vgpu-cores",
    default_memory=4096,
)


def test_a_share_is_written_and_whole_card_cores_dropped_under_the_clusters_resource_names() -> None:
    """With renamed resources, a container asking only `example.com/vgpu: 1` (whole card, 100 cores from HAMi's
    webhook) pinned to gpu-0/30 gets the renamed percentage and loses the renamed cores, never nvidia.com/ names."""
    container = {
        "name": "main",
        "resources": {"limits": {"example.com/vgpu": 1, "example.com/vgpu-cores": 100}},
    }
    obj = pod(containers=[container])
    snap = view([placement(devices=["gpu-0/30"])])
    renamed = AdmissionView(snap.placements, snap.nodes, Settings(hami=RENAMED), snap.token, snap.now)
    decision = decide(review(obj), renamed)
    assert decision.result == "pinned", decision.warnings
    assert limits(patched(obj, decision)) == {"example.com/vgpu": 1, "example.com/vgpu-mem-percentage": "30"}


def test_a_pod_asking_only_the_default_resource_names_is_not_a_gpu_pod_for_a_renamed_hami() -> None:
    snap = view([placement()])
    renamed = AdmissionView(snap.placements, snap.nodes, Settings(hami=RENAMED), snap.token, snap.now)
    decision = decide(review(pod()), renamed)
    assert decision.result == "not_honoured"
    assert any("NoGpuRequest: no container asks for example.com/vgpu" in w for w in decision.warnings), (
        decision.warnings
    )


# Room kept for a rescued pod -------------------------------------------------------------------------------------


def kept(*cards: str, pod_key: str = f"{NS}/rescued", seconds: int = 60) -> Reservation:
    """A reservation of `cards` for a Pending pod, `seconds` past the decision's clock."""
    return Reservation(pod_key, cards, NOW + timedelta(seconds=seconds))


def test_a_new_pod_is_kept_off_the_cards_a_rescue_keeps_merged_with_its_own() -> None:
    original = pod(labels={"app": "web"}, annotations={NOUSE_GPUUUID_ANNOTATION: "GPU-own"})
    snap = dataclasses.replace(view([placement()]), reservations=(kept(UUID0), kept("GPU-far", pod_key="b/x")))
    decision = decide(review(original), snap)
    assert decision.result == NO_PLACEMENT
    stored = patched(original, decision)
    assert stored["metadata"]["annotations"][NOUSE_GPUUUID_ANNOTATION] == f"GPU-own,{UUID0},GPU-far"
    assert any("kept for a rescued pod" in warning for warning in decision.warnings)
    assert not any("rescued" in warning and "b/x" in warning for warning in decision.warnings), "no other pod named"


def test_an_expired_reservation_and_the_pod_s_own_keep_nothing_off() -> None:
    original = pod(labels={"app": "web"}, name="rescued")
    snap = dataclasses.replace(view([]), reservations=(kept(UUID0), kept(UUID1, pod_key="b/x", seconds=0)))
    decision = decide(review(original), snap)
    assert decision.result == NO_PLACEMENT and not decision.patch and not decision.warnings


def test_a_pod_of_another_scheduler_is_not_kept_off() -> None:
    snap = dataclasses.replace(view([]), reservations=(kept(UUID0),))
    assert not decide(review(pod(scheduler="default-scheduler")), snap).patch


def test_a_placement_s_pin_to_a_kept_card_wins_and_the_other_kept_cards_stay_off() -> None:
    original = pod()
    snap = dataclasses.replace(view([placement(devices=["gpu-0"])]), reservations=(kept(UUID0, "GPU-other"),))
    decision = decide(review(original), snap)
    assert decision.result == PINNED
    annotations = patched(original, decision)["metadata"]["annotations"]
    assert annotations[USE_GPUUUID_ANNOTATION] == UUID0
    assert annotations[NOUSE_GPUUUID_ANNOTATION] == "GPU-other"


def test_a_review_may_nest_a_hundred_levels_not_more() -> None:
    """The limit counts the review itself as the first level; a real Pod's review is about fifteen deep."""
    body = review(pod())

    def nested(levels: int) -> dict[str, Any]:
        deep = copy.deepcopy(body)
        value: list[Any] = []
        for _ in range(levels - 5):  # review, request, object, metadata and the outermost list are five
            value = [value]
        deep["request"]["object"]["metadata"]["extra"] = value
        return deep

    parse_review(nested(100))
    with pytest.raises(ReviewError, match="nests deeper than 100 levels"):
        parse_review(nested(101))


# Whole decisions -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("field", "value"), [("subResource", "status"), ("group", "example.com")])
def test_a_pod_review_of_a_subresource_or_another_group_is_ignored(field: str, value: str) -> None:
    body = review(pod())
    if field == "group":
        body["request"]["kind"]["group"] = value
    else:
        body["request"][field] = value
    assert decide(body, view([placement()])) == Decision(uid="req-uid-1", result=IGNORED)


def test_a_claim_digest_label_the_patch_removes_selects_no_placement() -> None:
    """The pod is matched as it will be stored: a forged digest label cannot make a placement select it."""
    forged = pod()
    forged["metadata"]["labels"] = {"app": "train", CLAIM_DIGEST_LABEL: claim_digest("tok-stolen")}
    by_digest = placement(selector={"matchLabels": {CLAIM_DIGEST_LABEL: claim_digest("tok-stolen")}})
    decision = decide(review(forged), view([by_digest]))
    removed = ({"op": "remove", "path": "/metadata/labels/scheduling.hami.placement.com~1claim-digest"},)
    assert decision == Decision(uid="req-uid-1", result=NO_PLACEMENT, patch=removed)


@pytest.mark.parametrize("held", [False, True])
def test_a_candidate_whose_req_id_is_taken_does_not_stop_the_next_one(held: bool) -> None:
    taken = placement("taken", req_id="shared-id", created="2026-11-29T08:00:00Z")
    good = placement("good", created="2026-11-29T09:00:00Z")
    placements = [taken, good]
    snap = view(placements)
    if held:
        snap = dataclasses.replace(snap, held_req_ids={"shared-id": "elsewhere"})
        skipped = "hami-place: placement taken skipped: reqID already held by elsewhere"
    else:
        placements.append(placement("first", req_id="shared-id", status={"phase": "Consumed", "claim": {"token": "t"}}))
        snap = view(placements)
        skipped = "hami-place: placement taken skipped: reqID already consumed by first"
    decision = decide(review(pod()), snap)
    assert (decision.result, decision.placement, decision.warnings) == (PINNED, "good", (skipped,))


def test_a_pod_no_placement_pins_is_told_why_each_was_skipped_and_what_it_is_kept_off() -> None:
    """Not honoured: the removal of forged annotations is still sent, with every warning in order."""
    original = pod(annotations={CLAIM_ANNOTATION: "tok-old", PLACEMENT_ANNOTATION: "p1"})
    original["spec"]["nodeName"] = "gpu-1"
    snap = dataclasses.replace(view([placement()]), reservations=(kept("GPU-far"),))
    decision = decide(review(original), snap)
    assert decision == Decision(
        uid="req-uid-1",
        result=NOT_HONOURED,
        patch=(
            {"op": "remove", "path": "/metadata/annotations/scheduling.hami.placement.com~1claim"},
            {"op": "remove", "path": "/metadata/annotations/scheduling.hami.placement.com~1placement"},
            {"op": "add", "path": "/metadata/annotations/nvidia.com~1nouse-gpuuuid", "value": "GPU-far"},
        ),
        warnings=(
            decision.warnings[0],
            "hami-place: the pod is admitted without a pin",
            "hami-place: 1 card(s) are kept for a rescued pod for a while; "
            f"{NOUSE_GPUUUID_ANNOTATION} keeps this pod off them",
        ),
    )
    assert decision.warnings[0].startswith("hami-place: placement p1 skipped for this pod: ")


def test_unchanged_is_the_same_review_not_honoured_with_the_unpinned_patch() -> None:
    original = pod(annotations={CLAIM_ANNOTATION: "tok-old", PLACEMENT_ANNOTATION: "p1"})
    decision = decide(review(original, uid="abc-1"), view([placement()]))
    assert decision.unpinned
    assert decision.unchanged("hami-place: claim not recorded") == Decision(
        uid="abc-1", result=NOT_HONOURED, patch=decision.unpinned, warnings=("hami-place: claim not recorded",)
    )


def test_a_reinvocation_is_a_decision_of_its_placement_and_review() -> None:
    first = decide(review(pod()), view([placement()], token="tok-1"))
    stored = patched(pod(), first)
    del stored["spec"]["affinity"]
    again = decide(review(stored, uid="re-1"), view([claimed_copy(first)], token="tok-2"))
    assert dataclasses.replace(again, patch=()) == Decision(uid="re-1", result=REINVOKED, placement="p1")
    assert again.patch
    gone = decide(review(stored, uid="re-2"), view([claimed_copy(first)], nodes=[], token="tok-2"))
    assert gone == Decision(uid="re-2", result=REINVOKED, placement="p1"), "no card to pin: nothing to restore"


def test_a_reinvocation_restores_the_share_under_the_clusters_resource_names() -> None:
    container = {"name": "main", "resources": {"limits": {"example.com/vgpu": 1}}}
    snap = view([placement(devices=["gpu-0/30"])])
    renamed = AdmissionView(snap.placements, snap.nodes, Settings(hami=RENAMED), "tok-1", snap.now)
    first = decide(review(pod(containers=[container])), renamed)
    stored = patched(pod(containers=[container]), first)
    del stored["spec"]["containers"][0]["resources"]["limits"]["example.com/vgpu-mem-percentage"]
    stored_claim = placements_from_objects([claimed_copy(first, devices=["gpu-0/30"])])
    again = decide(review(stored), dataclasses.replace(renamed, placements=stored_claim))
    assert again.result == REINVOKED
    assert limits(patched(stored, again)) == {"example.com/vgpu": 1, "example.com/vgpu-mem-percentage": "30"}


def test_the_cores_hami_defaults_are_dropped_from_requests_too() -> None:
    defaulted = pod(containers=[gpu_container(extra={"nvidia.com/gpucores": "100"})])
    defaulted["spec"]["containers"][0]["resources"]["requests"] = {"nvidia.com/gpucores": "100", "cpu": "1"}
    stored = patched(defaulted, decide(review(defaulted), view([placement(devices=["gpu-0/50"])])))
    assert stored["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "1"}


def test_a_pod_without_gates_pinned_by_a_placement_that_evicts_gets_the_room_gate_alone() -> None:
    stored = dataclasses.replace(view([placement(evict="old-pod")]), pod_uids={"old-pod": "uid-old"})
    assert patched(pod(), decide(review(pod()), stored))["spec"]["schedulingGates"] == [{"name": ROOM_GATE}]


def test_a_pod_that_waits_for_its_room_says_so_in_an_annotation_the_api_server_keeps_where_it_drops_the_gate() -> None:
    """Before 1.27 the API server drops the gate: the annotation is what the reconciler takes off once the room is
    made, the update that has kube-scheduler try the pod again; only an evicting placement's pod carries it."""
    stored = dataclasses.replace(view([placement(evict="old-pod")]), pod_uids={"old-pod": "uid-old"})
    first = decide(review(pod()), stored)
    waiting = patched(pod(), first)
    assert waiting["metadata"]["annotations"][ROOM_ANNOTATION] == "waiting for pod old-pod to go"
    again = decide(review(waiting), view([claimed_copy(first, evict="old-pod")], token="tok-2"))
    assert again.result == REINVOKED and patched(waiting, again) == waiting, "a reinvocation keeps it as it is"
    for unneeded in (view([placement()]), view([placement(evict="old-pod")])):
        assert ROOM_ANNOTATION not in patched(pod(), decide(review(pod()), unneeded))["metadata"]["annotations"]


def test_a_room_annotation_on_a_pod_no_placement_pins_is_removed() -> None:
    """Copied from a waiting pod, or forged: the pod waits for no room, and the reconciler never looks at it."""
    copied = pod(annotations={ROOM_ANNOTATION: "waiting for pod old-pod to go"})
    assert patched(copied, decide(review(copied), view([])))["metadata"]["annotations"] == {}


def test_a_pod_carrying_every_one_of_our_annotations_without_the_digest_label_is_stripped_of_them_all() -> None:
    """A waiting pod's annotations copied by a tool that drops labels grant nothing: neither a room to wait for nor
    a claim, whether or not a placement then pins the copy."""
    copied = {
        PLACEMENT_ANNOTATION: "p1",
        REQ_ID_ANNOTATION: "req-p1",
        CLAIM_ANNOTATION: "tok-old",
        ROOM_ANNOTATION: "waiting for pod old-pod to go",
        "team": "ml",
    }
    unpinned = decide(review(pod(annotations=copied)), view([]))
    assert (unpinned.result, unpinned.warnings, unpinned.claim) == (NO_PLACEMENT, (), None)
    assert patched(pod(annotations=copied), unpinned) == pod(annotations={"team": "ml"})
    pinned = decide(review(pod(annotations=copied)), view([placement()], token="tok-new"))
    assert pinned.result == PINNED
    assert patched(pod(annotations=copied), pinned)["metadata"]["annotations"] == {
        "team": "ml",
        USE_GPUUUID_ANNOTATION: UUID0,
        PLACEMENT_ANNOTATION: "p1",
        REQ_ID_ANNOTATION: "req-p1",
        CLAIM_ANNOTATION: "tok-new",
    }


def test_a_nouse_list_that_is_no_string_is_replaced_by_the_kept_cards() -> None:
    """Only a forged review carries one; the pod is still kept off the cards, and the admission does not fail."""
    original = pod(labels={"app": "web"}, annotations={NOUSE_GPUUUID_ANNOTATION: 7})  # type: ignore[dict-item]
    snap = dataclasses.replace(view([]), reservations=(kept(UUID0),))
    assert patched(original, decide(review(original), snap))["metadata"]["annotations"] == {
        NOUSE_GPUUUID_ANNOTATION: UUID0
    }


@pytest.mark.parametrize(
    "annotations",
    [{PLACEMENT_ANNOTATION: "p1"}, {PLACEMENT_ANNOTATION: "../p1", CLAIM_ANNOTATION: "tok"}, {}],
)
def test_a_pod_without_a_token_or_with_no_placement_name_claims_nothing_by_its_annotations(
    annotations: dict[str, str],
) -> None:
    assert admission.claimed_by_annotations(parse_review(review(pod(annotations=annotations)))) == ("", "")
    assert admission.claimed_by_annotations(
        parse_review(review(pod(annotations={PLACEMENT_ANNOTATION: "p1", CLAIM_ANNOTATION: "tok"})))
    ) == ("p1", "tok")
