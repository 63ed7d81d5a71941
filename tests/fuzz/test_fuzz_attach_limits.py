"""Fuzz targets: CSINodes, VolumeAttachments, volumes and pod specs shaped like the API's but wrong anywhere, counted
as kube-scheduler's NodeVolumeLimits counts them: the watch hands the controller whatever the API server holds."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from kubectl_hami_place.core.attach_limits import (
    UNLIMITED,
    AttachRefs,
    attach_limits_of,
    attach_needs,
    attach_refs,
    scalar_of,
)
from kubectl_hami_place.core.planner.objects import snapshot_from_objects
from kubectl_hami_place.core.volumes import volumes_of
from tests.fuzz.strategies import FUZZ, either, json_values
from tests.fuzz.test_fuzz_volumes import shaped
from tests.unit.test_core_planner import node_object, pod_object

DRIVER = "csi.example.com"
SCALAR = scalar_of(DRIVER)

csi_nodes = st.fixed_dictionaries(
    {"metadata": shaped({"name": either("a")})},
    optional={
        "spec": shaped(
            {
                "drivers": either(
                    st.lists(shaped({"name": either(DRIVER), "allocatable": shaped({"count": either(1)})}), max_size=2)
                )
            }
        )
    },
)
limits_on_a = st.fixed_dictionaries(
    {
        "metadata": st.just({"name": "a"}),
        "spec": st.fixed_dictionaries(
            {
                "drivers": st.lists(
                    st.fixed_dictionaries(
                        {"name": either(DRIVER)}, optional={"allocatable": st.fixed_dictionaries({"count": either(1)})}
                    ),
                    max_size=2,
                )
            }
        ),
    }
)
"""A CSINode of node `a` whose drivers are mostly well formed but for their name or count."""
attached_to_a = st.fixed_dictionaries(
    {
        "spec": st.fixed_dictionaries(
            {
                "attacher": either(DRIVER),
                "nodeName": either("a"),
                "source": st.fixed_dictionaries({"persistentVolumeName": either("pv")}),
            }
        )
    }
)
"""A VolumeAttachment to `a` of the claimed volume but for one field."""
attachments = st.fixed_dictionaries(
    {},
    optional={
        "metadata": shaped({"name": either("va")}),
        "spec": shaped(
            {
                "attacher": either(DRIVER),
                "nodeName": either("a"),
                "source": shaped({"persistentVolumeName": either("pv"), "inlineVolumeSpec": json_values}),
            }
        ),
    },
)
volumes = st.fixed_dictionaries(
    {"metadata": either({"name": "pv"})},
    optional={
        "spec": shaped(
            {
                "csi": shaped({"driver": either(DRIVER), "volumeHandle": either("h")}),
                "awsElasticBlockStore": json_values,
            }
        )
    },
)
pod_volumes = st.lists(
    st.one_of(
        shaped({"name": either("d"), "persistentVolumeClaim": shaped({"claimName": either("data")})}),
        shaped({"name": either("e"), "ephemeral": shaped({"volumeClaimTemplate": json_values})}),
        shaped({"name": either("x"), "awsElasticBlockStore": json_values, "gcePersistentDisk": json_values}),
        json_values,
    ),
    max_size=3,
)


@FUZZ
@given(
    st.lists(csi_nodes | limits_on_a, max_size=2),
    st.lists(attachments | attached_to_a, max_size=2),
    st.lists(volumes, max_size=2),
    either(pod_volumes),
)
def test_attach_counts_are_read_whatever_the_objects_and_never_exceed_what_a_pod_mounts(
    nodes: Any, attached: Any, volume: Any, mounted: Any
) -> None:
    """Each object is read or left out, never an exception; a pod asks at most one count per volume it mounts, and a
    snapshot of it on node `a` is built with a room that is a limit read or unlimited, less what is counted there."""
    attach = attach_limits_of(nodes, attached)
    claim = {"metadata": {"namespace": "ns", "name": "data"}, "spec": {"volumeName": "pv"}}
    read = volumes_of([claim], volume, attach=attach)
    spec = {"volumes": mounted}
    refs = attach_refs(spec, "p")
    assert isinstance(refs, AttachRefs)
    asked = attach_needs(refs, "ns", read, frozenset({SCALAR}))
    assert sum(count for _, count in asked) <= 2 * len(mounted) if isinstance(mounted, list) else not asked
    pod = pod_object("p", "a", nodeName="a")
    pod["spec"]["volumes"] = mounted
    node = node_object("a")
    node["status"]["allocatable"] |= {"cpu": "8", "memory": "32Gi", "pods": "110"}
    snapshot, _ = snapshot_from_objects([node], [pod], [], datetime.now(UTC), volumes=read)
    room = {plan_node.name: plan_node.room for plan_node in snapshot.nodes}["a"]
    if SCALAR in attach.counted and room is not None:
        limits = {limit for limited in attach.limits.values() for limit in limited.values()}
        assert room.scalar(SCALAR) <= max(limits | {UNLIMITED})


@FUZZ
@given(st.lists(attachments | attached_to_a, max_size=3))
def test_a_lingering_attachment_counts_at_most_once_whatever_its_fields(attached: Any) -> None:
    """Attachments of a CSI volume no pod on `a` uses, wrong anywhere: each counts once on `a` or not at all."""
    limits = [{"metadata": {"name": "a"}, "spec": {"drivers": [{"name": DRIVER, "allocatable": {"count": 8}}]}}]
    volume = {"metadata": {"name": "pv"}, "spec": {"csi": {"driver": DRIVER, "volumeHandle": "h"}}}
    read = volumes_of([], [volume], attach=attach_limits_of(limits, attached))
    node = node_object("a")
    node["status"]["allocatable"] |= {"cpu": "8", "memory": "32Gi", "pods": "110"}
    snapshot, _ = snapshot_from_objects([node], [], [], datetime.now(UTC), volumes=read)
    room = snapshot.nodes[0].room
    assert room is not None and 8 - len(attached) <= room.scalar(SCALAR) <= 8
