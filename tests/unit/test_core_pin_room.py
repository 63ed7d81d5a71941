"""A pin's node room as kube-scheduler's NodeResourcesFit counts it, before HAMi's filter sees the cards: the pod
template's requests against what the pinned node has left, on plain data."""

from __future__ import annotations

from typing import Any

import pytest

from kubectl_hami_place.core.attach_limits import attach_limits_of
from kubectl_hami_place.core.node_resources import Resources
from kubectl_hami_place.core.pin_check import (
    node_room,
    room_short,
    room_warning,
    with_node_needs,
    with_volumes,
    workload_from_pod,
    workload_from_request,
)
from kubectl_hami_place.core.requests import card_request
from kubectl_hami_place.core.volumes import Volumes, volumes_of

GIB = 2**30


def template(requests: dict[str, str], node: str = "") -> dict[str, Any]:
    """A pod (template) asking one card and `requests` of its node, bound to `node` when given."""
    resources = {"limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1", **requests}}
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": resources}]}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": "x", "namespace": "team-a", "labels": {"app": "x"}}, "spec": spec}


def test_a_node_without_the_cpu_the_pod_asks_is_short_in_kube_schedulers_words() -> None:
    workload = workload_from_pod(template({"cpu": "4", "memory": "8Gi"}), "Deployment x", template=True)
    room = Resources(cpu=2500, memory=16 * GIB, pods=10)
    short = room_short(workload, "gpu-1", room)
    assert short is not None and (short.reason, short.message) == (
        "NodeResourcesShort",
        "node gpu-1: kube-scheduler: Insufficient cpu (the node has 2500m CPU, 16384 MiB memory and 10 pod(s) left; "
        "the pod asks 4000m, 8192 MiB)",
    )
    assert room_short(workload, "gpu-1", Resources(cpu=4000, memory=8 * GIB, pods=1)) is None
    assert room_warning(workload, short) == (
        "the pods of Deployment x: node gpu-1: kube-scheduler: Insufficient cpu (the node has 2500m CPU, 16384 MiB "
        "memory and 10 pod(s) left; the pod asks 4000m, 8192 MiB), so they would wait Pending there until room is "
        "freed; pin another node, add --evict POD, or lower their requests"
    )


def test_the_evicted_pod_gives_its_room_back_only_on_the_pinned_node() -> None:
    """A move to the node the pod runs on, or `pin --evict` of a pod there, frees what that pod asks."""
    workload = workload_from_pod(template({"cpu": "4"}), "Deployment x", template=True)
    room = Resources(cpu=1000, memory=GIB, pods=0)
    assert room_short(workload, "gpu-1", room, template({"cpu": "3"}, node="gpu-1")) is None
    elsewhere = room_short(workload, "gpu-1", room, template({"cpu": "3"}, node="gpu-2"))
    assert elsewhere is not None and "Insufficient cpu, Too many pods" in elsewhere.message


def test_only_the_scalars_the_room_counts_are_checked_and_hamis_cards_never() -> None:
    """The adapter counts the scalar resources the pod asks less HAMi's own (its chart has kube-scheduler ignore
    them): a node without an extended resource the pod asks is short of it; the cards are HAMi's to judge."""
    workload = workload_from_pod(template({"rdma/hca": "1"}), "Deployment x", template=True)
    short = room_short(workload, "gpu-1", Resources(cpu=1000, memory=GIB, pods=5, scalars=(("rdma/hca", 0),)))
    assert short is not None and short.message.startswith("node gpu-1: kube-scheduler: Insufficient rdma/hca (")
    assert short.message.endswith("; rdma/hca: 0 left, 1 asked)")
    assert room_short(workload, "gpu-1", Resources(cpu=1000, memory=GIB, pods=5)) is None


def test_a_pod_known_by_its_card_request_alone_or_a_node_of_unknown_room_is_not_judged() -> None:
    flags = workload_from_request(card_request(1), "flags", own_memory=False)
    assert flags.needs is None
    assert room_short(flags, "gpu-1", Resources()) is None
    workload = workload_from_pod(template({"cpu": "4"}), "Deployment x", template=True)
    assert room_short(workload, "gpu-1", None) is None


def test_request_flags_stand_for_the_card_request_alone() -> None:
    """`evict --to-node --request-memory`: the flags give the cards' request; the pod still says where it may go and
    what it asks of its node, so a move with flags is refused where one without would be."""
    pod = template({"cpu": "4"})
    pod["spec"]["nodeSelector"] = {"pool": "a"}
    from_pod = workload_from_pod(pod, "Deployment x", template=True)
    flags = workload_from_request(card_request(1, 2048), "--request-memory/--request-cores", own_memory=True)
    workload = with_node_needs(flags, from_pod)
    assert (workload.containers, workload.source) == (
        flags.containers,
        "Deployment x (its request from --request-memory/--request-cores)",
    )
    assert (workload.scheduling, workload.needs) == (
        {"nodeSelector": {"pool": "a"}},
        Resources(cpu=4000, pods=1, scalars=(("nvidia.com/gpu", 1),)),
    )
    assert room_short(workload, "gpu-1", Resources(cpu=1000, memory=GIB, pods=5)) is not None


EBS = "ebs.csi.aws.com"
ATTACH = f"attachable-volumes-csi-{EBS}"


def claiming(name: str, claim: str, node: str = "") -> dict[str, Any]:
    """A pod asking a card, 1 CPU and mounting the claim `claim`, bound to `node` when given."""
    pod = template({"cpu": "1"}, node)
    pod["metadata"]["name"] = name
    pod["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]
    return pod


def ebs_volumes(limit: int) -> Volumes:
    """Claims `a`, `b` and `c` of team-a bound to EBS volumes; gpu-1's and gpu-2's CSINodes limit EBS to `limit`."""
    claims = [{"metadata": {"namespace": "team-a", "name": n}, "spec": {"volumeName": f"pv-{n}"}} for n in "abc"]
    volumes = [{"metadata": {"name": f"pv-{n}"}, "spec": {"csi": {"driver": EBS, "volumeHandle": n}}} for n in "abc"]
    drivers = [{"name": EBS, "allocatable": {"count": limit}}]
    csi_nodes = [{"metadata": {"name": node}, "spec": {"drivers": drivers}} for node in ("gpu-1", "gpu-2")]
    return volumes_of(claims, volumes, attach=attach_limits_of(csi_nodes, []))


NODE = {
    "metadata": {"name": "gpu-1"},
    "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}},
}


@pytest.mark.parametrize(("limit", "short"), [(1, True), (2, False)])
def test_a_pin_whose_volume_would_take_the_node_over_its_attach_limit_is_short(limit: int, short: bool) -> None:
    """The pod mounts claim `a`; gpu-1 runs a pod mounting `b` (and one on gpu-2 mounting `c`, not counted there):
    with an EBS limit of 1 the node has no room for a second volume, in kube-scheduler's words."""
    volumes = ebs_volumes(limit)
    workload = with_volumes(workload_from_pod(claiming("x", "a"), "pod x"), volumes, "team-a")
    assert workload.needs is not None and workload.needs.scalar(ATTACH) == 1
    pods = [claiming("there", "b", "gpu-1"), claiming("away", "c", "gpu-2")]
    room = node_room(NODE, pods, workload, volumes=volumes)
    assert room is not None and room.scalar(ATTACH) == limit - 1
    found = room_short(workload, "gpu-1", room, volumes=volumes)
    assert (found is not None) is short
    if found is not None:
        assert found.message.startswith("node gpu-1: kube-scheduler: node(s) exceed max volume count ("), found
        assert found.message.endswith(f"; {ATTACH}: 0 left, 1 asked)"), found
        assert room_short(workload, "gpu-1", room, pods[0], volumes) is None, "evicting the pod there frees its volume"
        assert room_short(workload, "gpu-1", room, pods[0]) is not None, "its volume is freed only when counted"


def test_a_pin_is_judged_without_attach_counts_when_the_limits_were_not_read_or_it_attaches_nothing() -> None:
    """No limits read, or the pod mounts no claim: the node's room is its CPU, memory and pods alone."""
    unread = with_volumes(workload_from_pod(claiming("x", "a"), "pod x"), volumes_of([], []), "team-a")
    assert unread.needs is not None and unread.needs.scalar(ATTACH) == 0
    plain = with_volumes(workload_from_pod(template({"cpu": "1"}), "pod x"), ebs_volumes(0), "team-a")
    assert plain.needs is not None and plain.needs.scalar(ATTACH) == 0
    room = node_room(NODE, [claiming("there", "b", "gpu-1")], plain, volumes=ebs_volumes(0))
    assert room is not None and ATTACH not in dict(room.scalars)


def test_request_flags_keep_the_volumes_the_pod_attaches() -> None:
    """`evict --to-node --request-memory`: the pod's volumes still count against the target's attach limit."""
    from_pod = workload_from_pod(claiming("x", "a"), "pod x", template=True)
    flags = workload_from_request(card_request(1, 2048), "--request-memory/--request-cores", own_memory=True)
    assert with_node_needs(flags, from_pod).attaches == from_pod.attaches != flags.attaches


def test_a_volume_attached_for_a_pod_there_counts_once_and_one_no_pod_uses_counts_too() -> None:
    """gpu-1 has VolumeAttachments of `b`, which its pod mounts (counted with the pod, not again), and of `c`, which
    no pod there mounts (still attached after its pod left: kube-scheduler counts it): of a limit of 3, one is left."""
    attachments = [
        {"spec": {"attacher": EBS, "nodeName": "gpu-1", "source": {"persistentVolumeName": f"pv-{name}"}}}
        for name in "bc"
    ]
    volumes = volumes_of(
        [{"metadata": {"namespace": "team-a", "name": n}, "spec": {"volumeName": f"pv-{n}"}} for n in "abc"],
        [{"metadata": {"name": f"pv-{n}"}, "spec": {"csi": {"driver": EBS, "volumeHandle": n}}} for n in "abc"],
        attach=attach_limits_of(
            [{"metadata": {"name": "gpu-1"}, "spec": {"drivers": [{"name": EBS, "allocatable": {"count": 3}}]}}],
            attachments,
        ),
    )
    workload = with_volumes(workload_from_pod(claiming("x", "a"), "pod x"), volumes, "team-a")
    room = node_room(NODE, [claiming("there", "b", "gpu-1")], workload, volumes=volumes)
    assert room is not None and room.scalar(ATTACH) == 1


def test_a_pods_own_ephemeral_volume_counts_by_the_claim_named_after_it() -> None:
    """An ephemeral volume's claim is `<pod>-<volume>`: pod x's claim `x-scratch` is bound to an EBS volume, so the
    pin counts it though the classes (for the claim a replacement gets anew) were not read."""
    pod = template({"cpu": "1"})
    pod["spec"]["volumes"] = [{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}]
    volumes = volumes_of(
        [{"metadata": {"namespace": "team-a", "name": "x-scratch"}, "spec": {"volumeName": "pv-x"}}],
        [{"metadata": {"name": "pv-x"}, "spec": {"csi": {"driver": EBS, "volumeHandle": "x"}}}],
        attach=attach_limits_of(
            [{"metadata": {"name": "gpu-1"}, "spec": {"drivers": [{"name": EBS, "allocatable": {"count": 3}}]}}], []
        ),
    )
    workload = with_volumes(workload_from_pod(pod, "pod x"), volumes, "team-a")
    assert workload.needs is not None and workload.needs.scalar(ATTACH) == 1


def test_a_pod_whose_requests_cannot_be_read_keeps_its_volumes_unjudged_and_its_node_room_unknown() -> None:
    """A CPU request that is no quantity: the pin is not judged for room (kube-scheduler would refuse the pod
    anyway, and says so itself) rather than failing on it; no volumes read leaves a workload as it was."""
    broken = claiming("x", "a")
    broken["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    workload = workload_from_pod(broken, "pod x")
    assert workload.needs is None
    assert with_volumes(workload, ebs_volumes(2), "team-a") is workload
    assert node_room(NODE, [], workload, volumes=ebs_volumes(2)) is None
    readable = workload_from_pod(claiming("x", "a"), "pod x")
    assert with_volumes(readable, None, "team-a") is readable
