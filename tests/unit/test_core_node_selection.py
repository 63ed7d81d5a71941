"""Where kube-scheduler lets a pod go by its node filters, as `pin` warns of it: the pod template's node selection
and tolerations against the pinned node, on plain data."""

from __future__ import annotations

from typing import Any

from kubectl_hami_place.core.node_selection import kept_off
from kubectl_hami_place.core.pin_check import (
    move_kept_off,
    node_warnings,
    workload_from_pod,
    workload_from_request,
)
from kubectl_hami_place.core.requests import CardRequest

NODE = {
    "metadata": {"name": "gpu-0", "labels": {"kubernetes.io/hostname": "gpu-0", "pool": "train"}},
    "spec": {"taints": [{"key": "team", "value": "a", "effect": "NoSchedule"}]},
}
TOLERATING = [{"key": "team", "operator": "Equal", "value": "a", "effect": "NoSchedule"}]


def template(**spec: Any) -> dict[str, Any]:
    """A Deployment's pod template asking one card."""
    container = {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
    return {"metadata": {"labels": {"app": "x"}}, "spec": {"containers": [container], **spec}}


def test_a_pod_is_kept_off_a_node_by_a_taint_it_does_not_tolerate_or_by_its_node_selection() -> None:
    assert kept_off(template()["spec"], NODE) == "node gpu-0's taint team=a:NoSchedule is not tolerated"
    assert kept_off(template(tolerations=TOLERATING)["spec"], NODE) == ""
    elsewhere = template(tolerations=TOLERATING, nodeSelector={"pool": "serve"})
    assert kept_off(elsewhere["spec"], NODE) == "the node selection excludes node gpu-0"
    term = {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["train"]}]}
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}
    assert kept_off(template(tolerations=TOLERATING, affinity=affinity)["spec"], NODE) == ""
    term["matchExpressions"][0]["values"] = ["serve"]
    assert kept_off(template(tolerations=TOLERATING, affinity=affinity)["spec"], NODE) == (
        "the node selection excludes node gpu-0"
    )


def test_pin_warns_when_the_pinned_node_would_leave_the_pod_pending() -> None:
    """Only a workload read from a pod or template says where it may go; one known by its request alone gets no
    warning, nor does a node that takes it."""
    untolerating = workload_from_pod(template(), "Deployment x", template=True)
    assert node_warnings(untolerating, NODE) == [
        "the pods of Deployment x: node gpu-0's taint team=a:NoSchedule is not tolerated, so the webhook will not "
        "pin them there (kube-scheduler would leave them Pending); pin another node or change the pods' tolerations "
        "or node selection"
    ]
    assert node_warnings(workload_from_pod(template(tolerations=TOLERATING), "Deployment x", template=True), NODE) == []
    assert node_warnings(untolerating, None) == []
    flags = workload_from_request(CardRequest(1), "the --request-* flags", own_memory=False)
    assert node_warnings(flags, NODE) == []


def test_a_move_is_refused_where_its_replacement_is_kept_off_but_not_for_the_pin_it_carries_itself() -> None:
    """A pod without a controller is its own replacement: our webhook's hostname pin to the node it runs on binds it
    alone, so it keeps the replacement off no other node; its own node selection and the target's taints do."""
    pinned = template(tolerations=TOLERATING)
    hostname = {"key": "kubernetes.io/hostname", "operator": "In", "values": ["gpu-7"]}
    term = {"matchExpressions": [hostname]}
    pinned["spec"]["affinity"] = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
    }
    itself = workload_from_pod(pinned, "pod x", template=True)
    assert move_kept_off(itself, NODE, "gpu-7") is None
    refused = move_kept_off(itself, NODE, "")
    assert refused is not None and (refused.reason, refused.message) == (
        "KeptOffNode",
        "the node selection excludes node gpu-0, so the webhook would not pin its replacement there",
    )
    untolerating = workload_from_pod(template(), "pod x", template=True)
    assert move_kept_off(untolerating, NODE, "gpu-7") is not None
