"""Properties of the pin over generated pods: idempotent on reinvocation, never drops what the pod had."""

from __future__ import annotations

import base64
import copy
import dataclasses
import json
from datetime import UTC, datetime
from typing import Any

import jsonpatch
from hypothesis import given, settings
from hypothesis import strategies as st

from kubectl_hami_place.core import admission
from kubectl_hami_place.core.admission import PINNED, REINVOKED, AdmissionView, Decision, Settings
from kubectl_hami_place.core.placement import PlacementStatus, placement_from_object
from kubectl_hami_place.core.reviews import parse_review

NODE = {
    "metadata": {
        "name": "gpu-0",
        "annotations": {
            "hami.io/node-nvidia-register": json.dumps(
                [
                    {
                        "id": "GPU-a",
                        "index": 0,
                        "count": 10,
                        "devmem": 40960,
                        "devcore": 100,
                        "type": "NVIDIA-A",
                        "health": True,
                    },
                    {
                        "id": "GPU-b",
                        "index": 1,
                        "count": 10,
                        "devmem": 40960,
                        "devcore": 100,
                        "type": "NVIDIA-A",
                        "health": True,
                    },
                ]
            )
        },
    }
}
HOSTNAME_IN = {"key": "kubernetes.io/hostname", "operator": "In", "values": ["gpu-0"]}

words = st.text(alphabet="abcdefghij", min_size=1, max_size=6)
expressions = st.lists(
    st.fixed_dictionaries(
        {"key": words, "operator": st.sampled_from(["In", "NotIn"]), "values": st.lists(words, min_size=1, max_size=2)}
    ),
    max_size=2,
)
terms = st.lists(
    st.fixed_dictionaries(
        {},
        optional={
            "matchExpressions": expressions,
            "matchFields": st.just([{"key": "metadata.name", "operator": "In", "values": ["gpu-0"]}]),
        },
    ),
    max_size=3,
)
affinities = st.one_of(
    st.none(),
    st.just({}),
    terms.map(lambda t: {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": t}}}),
    st.just({"podAffinity": {}}),
)
limits = st.fixed_dictionaries(
    {"nvidia.com/gpu": st.just("1")},
    optional={
        "nvidia.com/gpumem": st.sampled_from(["1000", "4096"]),
        "nvidia.com/gpumem-percentage": st.sampled_from(["10", "25"]),
        "cpu": st.just("1"),
    },
)
containers = st.lists(
    st.one_of(
        limits.map(lambda lim: {"name": "gpu", "image": "x", "resources": {"limits": lim}}),
        st.just({"name": "plain", "image": "x"}),
    ),
    min_size=1,
    max_size=3,
).filter(lambda cs: any("resources" in c for c in cs))


def review_of(pod: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "operation": "CREATE",
            "namespace": "ns",
            "object": pod,
        },
    }


def placement(devices: list[str]) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "resourceVersion": "1",
        },
        "spec": {
            "reqID": "req-1",
            "podSelector": {"matchLabels": {"app": "a"}},
            "nodeName": "gpu-0",
            "gpuDevices": devices,
        },
    }


def decide(body: dict[str, Any], snap: AdmissionView) -> Decision:
    return admission.decide(parse_review(body), snap)


def view(token: str, devices: list[str], status: PlacementStatus | None = None) -> AdmissionView:
    stored = placement_from_object(placement(devices))
    return AdmissionView(
        placements=[stored if status is None else dataclasses.replace(stored, status=status)],
        nodes={"gpu-0": NODE},
        settings=Settings(),
        token=token,
        now=datetime(2026, 1, 1, tzinfo=UTC),
    )


def apply(pod: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    if "patch" not in response["response"]:
        return copy.deepcopy(pod)
    result: dict[str, Any] = jsonpatch.apply_patch(pod, json.loads(base64.b64decode(response["response"]["patch"])))
    return result


@settings(max_examples=150, deadline=None)
@given(affinity=affinities, containers=containers, devices=st.sampled_from([["gpu-0"], ["gpu-1/50"], ["GPU-b"]]))
def test_the_pin_is_idempotent_and_keeps_the_pods_own_affinity(
    affinity: dict[str, Any] | None, containers: list[dict[str, Any]], devices: list[str]
) -> None:
    pod: dict[str, Any] = {
        "metadata": {"labels": {"app": "a"}},
        "spec": {"schedulerName": "hami-scheduler", "containers": containers},
    }
    if affinity is not None:
        pod["spec"]["affinity"] = affinity
    first = decide(review_of(pod), view("t1", devices))
    if first.result != PINNED:
        return  # the pod asks more than its share: covered by the example tests
    pinned = apply(pod, first.response())
    assert first.claim is not None
    again = decide(review_of(pinned), view("t2", devices, first.claim.status))
    assert again.result == REINVOKED and again.claim is None
    assert apply(pinned, again.response()) == pinned

    required = pinned["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    old_terms = ((affinity or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution", {})
    old_terms = old_terms.get("nodeSelectorTerms") or [{}]
    assert len(required["nodeSelectorTerms"]) == len(old_terms)
    for old, new in zip(old_terms, required["nodeSelectorTerms"], strict=True):
        assert HOSTNAME_IN in new["matchExpressions"]
        for expression in old.get("matchExpressions", []):
            assert expression in new["matchExpressions"]
        assert new.get("matchFields") == old.get("matchFields")
    for key, value in (affinity or {}).items():
        if key != "nodeAffinity":
            assert pinned["spec"]["affinity"][key] == value
    assert "nodeName" not in pinned["spec"]
    for before, after in zip(containers, pinned["spec"]["containers"], strict=True):
        for name, quantity in ((before.get("resources") or {}).get("limits") or {}).items():
            if name == "nvidia.com/gpucores" and name not in after["resources"]["limits"]:
                # HAMi's default 100 cores go from a container given a part of a card (core.pin_check).
                assert str(quantity) == "100" and "/" in devices[0]
                continue
            assert after["resources"]["limits"][name] == quantity


scalars = st.one_of(st.none(), st.integers(-2, 2), st.sampled_from(["a", "b", ""]))
"""No booleans: Python holds 1 == True, and no change of the pin's writes one for the other."""
documents = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(["a", "b", "c", "~", "/"]), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=1500, deadline=None)
@given(st.dictionaries(st.sampled_from(["a", "b", "c"]), documents, max_size=3), st.data())
def test_the_patch_by_diff_of_the_parts_that_differ_turns_one_document_into_the_other(
    before: dict[str, Any], data: st.DataObject
) -> None:
    """The diff is taken of the pods with what they share set aside (a forged review's million tolerations took
    jsonpatch 5 s): applied to the first, it gives the second exactly, however they share their members and items."""
    after = copy.deepcopy(before)
    for key, value in data.draw(st.dictionaries(st.sampled_from(["a", "b", "c"]), documents, max_size=2)).items():
        place = after
        while isinstance(place.get(key), dict) and data.draw(st.booleans()):
            place = place[key]
        place[key] = value
    patch = admission._diff(before, after)
    patched = jsonpatch.apply_patch(copy.deepcopy(before), list(patch))
    assert json.dumps(patched, sort_keys=True) == json.dumps(after, sort_keys=True)
    assert admission._SAME not in json.dumps(patch)


def test_the_patch_of_items_that_each_take_the_next_ones_value_writes_no_placeholder() -> None:
    """Two containers alike but for their names, each given the value the next one had: matched up by their pruned
    forms, the diff would remove the first and add a pruned copy of the second (its name a placeholder)."""
    before = {"spec": {"containers": [{"name": "a", "gpumem": "10"}, {"name": "b", "gpumem": "20"}]}}
    after = {"spec": {"containers": [{"name": "a", "gpumem": "20"}, {"name": "b", "gpumem": "30"}]}}
    assert jsonpatch.apply_patch(copy.deepcopy(before), list(admission._diff(before, after))) == after
