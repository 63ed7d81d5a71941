"""Fuzz targets: claims, volumes, StorageClasses and CSIDrivers shaped like the API's but wrong anywhere, read as a
Pending pod's claims are."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from kubectl_hami_place.core.names import HOSTNAME_LABEL
from kubectl_hami_place.core.volumes import SELECTED_NODE, VolumeReach, volume_reach, volumes_of
from tests.fuzz.strategies import FUZZ, either, json_values

NODES = {"a": {HOSTNAME_LABEL: "a", "zone": "z1"}, "b": {HOSTNAME_LABEL: "b", "zone": "z2"}}
ON_A = {"matchExpressions": [{"key": HOSTNAME_LABEL, "operator": "In", "values": ["a"]}]}


def shaped(fields: dict[str, Any]) -> st.SearchStrategy[Any]:
    """An object with some of these fields (each a strategy), or any JSON value in its place now and then."""
    return st.one_of(
        st.fixed_dictionaries({}, optional=fields), st.fixed_dictionaries({}, optional=fields), json_values
    )


claims = st.fixed_dictionaries(
    {"metadata": either({"namespace": "ns", "name": "data", "uid": "u"})},
    optional={
        "spec": shaped(
            {
                "storageClassName": either("local"),
                "volumeName": either("pv"),
                "accessModes": either(["ReadWriteOnce"]),
                "resources": shaped({"requests": shaped({"storage": either("1Gi")})}),
                "selector": either({"matchLabels": {"disk": "nvme"}}),
            }
        ),
    },
)
selected = st.fixed_dictionaries(
    {"metadata": either({"namespace": "ns", "name": "data", "annotations": {SELECTED_NODE: "a"}})},
    optional={"spec": shaped({"storageClassName": either("local")})},
)
volumes = st.fixed_dictionaries(
    {"metadata": shaped({"name": either("pv"), "labels": either({"disk": "nvme"})})},
    optional={
        "spec": shaped(
            {
                "storageClassName": either("local"),
                "capacity": shaped({"storage": either("2Gi")}),
                "accessModes": either(["ReadWriteOnce"]),
                "claimRef": shaped({"namespace": either("ns"), "name": either("data"), "uid": either("u")}),
                "nodeAffinity": shaped(
                    {"required": shaped({"nodeSelectorTerms": either(st.lists(either(ON_A), min_size=1, max_size=2))})}
                ),
            }
        ),
        "status": shaped({"phase": either("Available")}),
    },
)
topology = shaped({"key": either("zone"), "values": either(["z1"])})
classes = st.fixed_dictionaries(
    {"metadata": either({"name": "local"})},
    optional={
        "provisioner": either("csi.example.com"),
        "volumeBindingMode": either("WaitForFirstConsumer"),
        "allowedTopologies": either(
            st.lists(shaped({"matchLabelExpressions": st.lists(topology, max_size=2)}), min_size=1, max_size=2)
        ),
    },
)
capacities = st.fixed_dictionaries(
    {},
    optional={
        "storageClassName": either("local"),
        "capacity": either("10Gi"),
        "maximumVolumeSize": either("5Gi"),
        "nodeTopology": either({"matchLabels": {HOSTNAME_LABEL: "a"}}),
    },
)
drivers = st.fixed_dictionaries(
    {"metadata": either({"name": "csi.example.com"})}, optional={"spec": shaped({"storageCapacity": either(True)})}
)


@FUZZ
@given(
    st.lists(claims | selected, max_size=2),
    st.lists(volumes, max_size=3),
    st.none() | st.lists(classes, max_size=2),
    st.none() | st.lists(drivers, max_size=2),
    st.none() | st.lists(capacities, max_size=2),
)
def test_a_pending_pods_claims_are_read_or_left_unread(
    claim: Any, volume: Any, storage: Any, driver: Any, capacity: Any
) -> None:
    """The objects are read, and where the pod's claim lets it go is read or left unread, never an exception; an
    unread claim keeps it off no node."""
    read = volumes_of(claim, volume, storage, driver, capacity)
    spec = {"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]}
    found = volume_reach(spec, "ns", "p", read, NODES, replacement=False)
    assert isinstance(found, VolumeReach)
    assert not (found.unread and found.kept_off)
    assert set(found.kept_off) <= set(NODES)


fields = st.fixed_dictionaries(
    {},
    optional={
        "storageClassName": json_values,
        "accessModes": json_values,
        "volumeMode": json_values,
        "selector": json_values,
        "resources": st.fixed_dictionaries({"requests": st.fixed_dictionaries({"storage": json_values})}),
        "capacity": st.fixed_dictionaries({"storage": json_values}),
        "claimRef": json_values,
    },
)


@FUZZ
@given(fields, st.dictionaries(st.sampled_from(["annotations", "labels", "uid", "deletionTimestamp"]), json_values))
def test_an_unbound_claim_and_a_volume_are_read_whatever_their_fields(spec: Any, metadata: Any) -> None:
    """Any value in any field a waiting claim or a volume is read by: each is read (unread, or offering nothing),
    never an exception."""
    read = volumes_of([{"metadata": {"namespace": "ns", "name": "data", **metadata}, "spec": spec}], [{"spec": spec}])
    assert read.claims[("ns", "data")].volume == ""
    assert set(read.volumes) == {""}
