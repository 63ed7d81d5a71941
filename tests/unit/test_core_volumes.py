"""A pod's PersistentVolumeClaims read as kube-scheduler's VolumeBinding and VolumeZone filters read them, and the
plans that then move a pod that claims one only to a node its bound volumes reach."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from kubectl_hami_place.core.defrag.triggers import pending_pod
from kubectl_hami_place.core.hami_config import HAMI_DEFAULTS
from kubectl_hami_place.core.names import HOSTNAME_LABEL
from kubectl_hami_place.core.node_selection import node_marks
from kubectl_hami_place.core.planner import FitGoal, FreeCardsGoal, plan
from kubectl_hami_place.core.planner.model import DO_NOT_MOVE
from kubectl_hami_place.core.planner.objects import pod_for_plan, snapshot_from_objects
from kubectl_hami_place.core.planner.why import why
from kubectl_hami_place.core.volumes import (
    BETA_CLASS,
    BETA_ZONE,
    NO_PROVISIONER,
    SELECTED_NODE,
    VOLUME_BINDING,
    VOLUME_ZONE,
    ZONE,
    Volume,
    VolumeReach,
    claim_names,
    default_class,
    new_claims,
    storage_class_of,
    volume_of,
    volume_reach,
    volumes_of,
    waits_unbound,
)
from tests.unit.test_core_planner import node_object, pod_object, runs_on

NODES = {
    "a": {HOSTNAME_LABEL: "a", ZONE: "z1"},
    "b": {HOSTNAME_LABEL: "b", ZONE: "z1"},
    "c": {HOSTNAME_LABEL: "c", ZONE: "z2"},
}


def local(name: str, *hosts: str, labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    """A PersistentVolume reached from `hosts` by hostname (from any node when none)."""
    affinity = {"required": {"nodeSelectorTerms": [{"matchExpressions": [in_hosts(*hosts)]}]}} if hosts else None
    volume_spec = {"nodeAffinity": affinity} if affinity else {}
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": {**volume_spec, **spec}}


def in_hosts(*hosts: str) -> dict[str, Any]:
    """A node selector requirement: the hostname is one of `hosts`."""
    return {"key": HOSTNAME_LABEL, "operator": "In", "values": list(hosts)}


def claim(name: str, volume: str = "", namespace: str = "ns", **metadata: Any) -> dict[str, Any]:
    """A PersistentVolumeClaim bound to `volume` (unbound when empty)."""
    return {"metadata": {"namespace": namespace, "name": name, **metadata}, "spec": {"volumeName": volume}}


def mounting(*claims: str) -> dict[str, Any]:
    """A pod spec that mounts these claims."""
    return {"volumes": [{"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)]}


def test_a_volumes_node_affinity_is_matched_on_the_nodes_labels_alone() -> None:
    """As CheckNodeAffinity builds a node of labels only: a term on metadata.name matches no node, even that one."""
    assert volume_of(local("pv", "a", "b")).keeps_off(NODES["c"]) == (
        VOLUME_BINDING,
        "its volume pv's node affinity excludes it",
    )
    assert volume_of(local("pv", "a", "b")).keeps_off(NODES["a"]) is None
    assert volume_of(local("pv")) == Volume("pv", None, ())
    by_name = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a"]}]}
    named = volume_of(
        {"metadata": {"name": "pv"}, "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [by_name]}}}}
    )
    assert named.keeps_off(NODES["a"]) is not None


def test_a_volumes_zone_labels_are_matched_as_volume_zone_matches_them() -> None:
    """A node without zone labels passes; a beta key on the volume matches the node's GA one; a list joined by `__`
    holds any of its zones; a list that does not parse is skipped."""
    zonal = volume_of(local("pv", labels={BETA_ZONE: "z1__z3"}))
    assert zonal.zones == ((BETA_ZONE, frozenset({"z1", "z3"})),)
    assert zonal.keeps_off(NODES["a"]) is None
    assert zonal.keeps_off(NODES["c"]) == (VOLUME_ZONE, f"its volume pv is in {BETA_ZONE}=z1__z3")
    assert zonal.keeps_off({HOSTNAME_LABEL: "d"}) is None
    assert volume_of(local("pv", labels={ZONE: "z1__"})).zones == ()


def test_an_in_tree_volume_is_not_read() -> None:
    """kube-scheduler translates an in-tree cloud disk to CSI before it reads where it reaches; this does not."""
    found = volume_of(local("pv", gcePersistentDisk={"pdName": "d"}))
    assert found.unread == "volume pv is an in-tree gcePersistentDisk volume, whose CSI translation is not read"


def test_the_claims_of_a_pod_and_of_its_replacement() -> None:
    """An ephemeral volume's claim is the pod's own (`<pod>-<volume>`); a replacement's is made anew, as its template
    asks, of the default class when it names none (the newest default, by name among those made at once)."""
    template = {"spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}
    scratch = {
        "volumes": [
            {"name": "s", "ephemeral": {"volumeClaimTemplate": template}},
            {"name": "d", "persistentVolumeClaim": {"claimName": "x"}},
        ]
    }
    assert claim_names(scratch, "p", replacement=False) == ("p-s", "x")
    assert claim_names(scratch, "p", replacement=True) == ("x",)
    [(volume, want)] = new_claims(scratch, "fast")
    assert (volume, want.storage_class, want.requested, want.access_modes) == (
        "s",
        "fast",
        1024**3,
        frozenset({"ReadWriteOnce"}),
    )
    template["spec"]["storageClassName"] = ""
    assert new_claims(scratch, "fast")[0][1].storage_class == ""
    del template["spec"]["storageClassName"]
    template["metadata"] = {"annotations": {BETA_CLASS: "slow"}}
    assert new_claims(scratch, "fast")[0][1].storage_class == "slow", "the beta annotation names a class too"
    default = {"storageclass.kubernetes.io/is-default-class": "true"}
    made = [
        storage_class_of({"metadata": {"name": name, "creationTimestamp": at, "annotations": default}})
        for name, at in (("old", "2026-01-01T00:00:00Z"), ("b", "2026-06-01T00:00:00Z"), ("a", "2026-06-01T00:00:00Z"))
    ]
    assert default_class([*made, storage_class_of({"metadata": {"name": "z", "creationTimestamp": "2027"}})]) == "a"
    assert default_class(made[:1]) == "old" and default_class([]) == ""
    newest = storage_class_of(
        {"metadata": {"name": "z", "creationTimestamp": "2026-12-01T00:00:00Z", "annotations": default}}
    )
    assert default_class([*made, newest]) == "z"
    assert claim_names({"volumes": [{"name": "d", "persistentVolumeClaim": {}}]}, "p", replacement=False) == (
        "its volume d names no claim"
    )


@pytest.mark.parametrize(
    ("claims", "volumes", "unread"),
    [
        ([], [], "its claim data was not found"),
        ([claim("data")], [], "its claim data is not bound"),
        (
            [claim("data", "pv", deletionTimestamp="2026-12-05T00:00:00Z")],
            [local("pv")],
            "its claim data is being deleted",
        ),
        ([claim("data", "pv")], [], "its claim data's volume pv was not found"),
        (
            [claim("data", "pv")],
            [local("pv", azureDisk={})],
            "its claim data's volume pv is an in-tree azureDisk volume, whose CSI translation is not read",
        ),
    ],
)
def test_a_claim_or_volume_that_cannot_be_read_leaves_where_the_pod_may_go_unread(
    claims: list[dict[str, Any]], volumes: list[dict[str, Any]], unread: str
) -> None:
    """No node is kept off by guess."""
    found = volume_reach(mounting("data"), "ns", "p", volumes_of(claims, volumes), NODES, replacement=True)
    assert (found.unread, dict(found.kept_off)) == (unread, {})


def test_every_claims_volume_keeps_the_pod_off_and_node_affinity_is_named_before_zone() -> None:
    """VolumeBinding runs before VolumeZone: a node both exclude gets VolumeBinding's words."""
    volumes = volumes_of(
        [claim("one", "zonal"), claim("two", "local")],
        [local("zonal", labels={ZONE: "z2"}), local("local", "c")],
    )
    found = volume_reach(mounting("one", "two"), "ns", "p", volumes, NODES, replacement=True)
    assert found.unread == ""
    assert dict(found.kept_off) == {
        "a": (VOLUME_BINDING, "its volume local's node affinity excludes it"),
        "b": (VOLUME_BINDING, "its volume local's node affinity excludes it"),
    }
    zone_only = volume_reach(mounting("one"), "ns", "p", volumes, NODES, replacement=True)
    assert set(zone_only.kept_off) == {"a", "b"} and zone_only.kept_off["a"][0] == VOLUME_ZONE


def three_nodes() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Nodes a, b (zone z1) and c (z2), one 40 GiB card each holding an 8 GiB pod; small-a claims `data`, the others
    may not move."""
    nodes = [node_object(name) for name in NODES]
    for node in nodes:
        node["metadata"]["labels"] = NODES[node["metadata"]["name"]]
    pods = []
    for name in NODES:
        pod = pod_object(f"small-{name}", name, nodeName=name)
        if name == "a":
            pod["spec"] |= mounting("data")
        else:
            pod["metadata"]["annotations"][DO_NOT_MOVE] = "true"
        pods.append(pod)
    return nodes, pods


def whole_card() -> dict[str, Any]:
    """A Pending pod asking a whole 40 GiB card."""
    whole = [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "40960"}}}]
    return pod_object("big", None, containers=whole)


@pytest.mark.parametrize(
    ("volume", "moved_to"),
    [
        (local("pv"), "b"),
        (local("pv", "a", "b"), "b"),
        (local("pv", "a", "c"), "c"),
        (local("pv", labels={ZONE: "z2"}), "c"),
    ],
)
def test_a_pod_that_claims_a_volume_moves_only_where_its_volume_reaches(volume: dict[str, Any], moved_to: str) -> None:
    """small-a's room is the only one to make: its replacement goes where its volume reaches (b, of the other two,
    first in the plan's order, when any node will do)."""
    nodes, pods = three_nodes()
    volumes = volumes_of([claim("data", "pv")], [volume])
    snapshot, _ = snapshot_from_objects(nodes, pods, [], datetime.now(UTC), volumes=volumes)
    result = plan(snapshot, FitGoal(pending_pod(whole_card(), node_marks(nodes), HAMI_DEFAULTS, pods).pod))
    assert result.target == ("a", ("GPU-a",))
    assert [(m.pod, m.to_node) for m in result.moves] == [("ns/small-a", moved_to)]


@pytest.mark.parametrize(
    ("claims", "volumes", "why"),
    [
        (None, None, "of its node, where it stays (its volume claims were not read)"),
        (
            [claim("data", "pv")],
            [local("pv", "a")],
            "where kube-scheduler lets it go (b: its volume pv's node affinity excludes it; 1 more node(s) kept off)",
        ),
        ([claim("data")], [local("pv")], "of its node, where it stays (its claim data is not bound)"),
    ],
)
def test_no_move_takes_a_pod_where_its_volume_does_not_reach(
    claims: list[dict[str, Any]] | None, volumes: list[dict[str, Any]] | None, why: str
) -> None:
    """Volumes not read, one reached from a alone, an unbound claim: small-a stays on a, and there is no plan, whose
    reason says why small-a found no card."""
    nodes, pods = three_nodes()
    read = None if claims is None or volumes is None else volumes_of(claims, volumes)
    snapshot, _ = snapshot_from_objects(nodes, pods, [], datetime.now(UTC), volumes=read)
    [small] = [pod for pod in snapshot.pods if pod.name == "small-a"]
    assert runs_on(small, NODES) == {"a"}
    result = plan(snapshot, FitGoal(pending_pod(whole_card(), node_marks(nodes), HAMI_DEFAULTS, pods).pod))
    assert not result.moves
    moving = "a: moving ns/small-a would make room on gpu-0, but ns/small-a fits no other card "
    assert moving + why in result.reasons, result.reasons


def unschedulable(message: str) -> list[dict[str, str]]:
    """A Pending pod's conditions after kube-scheduler refused it with `message`."""
    return [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}]


def big_refused(pods: list[dict[str, Any]], message: str) -> dict[str, Any]:
    """Of `three_nodes`' pods, small-b alone may move; and the big pod, mounting `model`, refused by kube-scheduler
    with `message`."""
    pods[0]["metadata"]["annotations"][DO_NOT_MOVE] = "true"
    pods[1]["metadata"]["annotations"].pop(DO_NOT_MOVE)
    big = whole_card()
    big["spec"] |= mounting("model")
    big["status"]["conditions"] = unschedulable(message)
    return big


def test_a_pending_pods_bound_volume_keeps_it_off_and_kube_schedulers_refusal_is_read() -> None:
    """Its volume reaches b and c: room is made on b, a's refusal is read and `why` names the volume; an unbound
    claim leaves the refusal unread."""
    nodes, pods = three_nodes()
    big = big_refused(
        pods,
        "0/3 nodes are available: 1 node(s) didn't match PersistentVolume's node affinity, "
        "2 1/1 CardInsufficientMemory.",
    )
    volumes = volumes_of([claim("model", "pv")], [local("pv", "b", "c")])
    snapshot, _ = snapshot_from_objects(nodes, pods, [], datetime.now(UTC), volumes=volumes)
    found = pending_pod(big, node_marks(nodes), HAMI_DEFAULTS, pods, snapshot, volumes=volumes)
    assert found.unread == ()
    assert runs_on(found.pod, NODES) == {"b", "c"}
    result = plan(snapshot, FitGoal(found.pod))
    assert result.target == ("b", ("GPU-b",))
    verdict = {node.node: node for node in why(snapshot, found.pod)}["a"]
    assert (verdict.fits, verdict.reason) == (False, VOLUME_BINDING)
    assert verdict.message == "kube-scheduler: its volume pv's node affinity excludes it"
    unbound = volumes_of([claim("model")], [])
    unread = pending_pod(big, node_marks(nodes), HAMI_DEFAULTS, pods, snapshot, volumes=unbound).unread
    assert unread == ("1 node(s) didn't match PersistentVolume's node affinity",)
    assert pending_pod(big, node_marks(nodes), HAMI_DEFAULTS, pods, snapshot).unread == unread


def waiting(name: str, storage: str = "5Gi", **spec: Any) -> dict[str, Any]:
    """A claim of class `local` not bound yet, asking `storage` (none when empty), ReadWriteOnce."""
    metadata = {"namespace": "ns", "name": name, "uid": f"uid-{name}", **spec.pop("metadata", {})}
    asked = {"resources": {"requests": {"storage": storage}}} if storage else {}
    return {
        "metadata": metadata,
        "spec": {"storageClassName": "local", "accessModes": ["ReadWriteOnce"], **asked, **spec},
    }


def offered(name: str, *hosts: str, storage: str = "10Gi", phase: str = "Available", **spec: Any) -> dict[str, Any]:
    """A volume of class `local` on `hosts`, of `storage`, ReadWriteOnce, in `phase`."""
    offer = {"capacity": {"storage": storage}, "storageClassName": "local", "accessModes": ["ReadWriteOnce"]}
    volume = local(name, *hosts, **{**offer, **spec})
    volume["status"] = {"phase": phase}
    return volume


def storage_class(provisioner: str = NO_PROVISIONER, mode: str = "WaitForFirstConsumer", **more: Any) -> dict[str, Any]:
    """The StorageClass `local`."""
    return {"metadata": {"name": "local"}, "provisioner": provisioner, "volumeBindingMode": mode, **more}


def waiting_reach(
    claims: list[dict[str, Any]],
    volumes: list[dict[str, Any]],
    classes: list[dict[str, Any]] | None = None,
    drivers: list[dict[str, Any]] | None = None,
    capacities: list[dict[str, Any]] | None = None,
) -> tuple[str, dict[str, str]]:
    """Why the pod's claims are unread, and the nodes they keep it off with the claim named."""
    read = volumes_of(claims, volumes, [storage_class()] if classes is None else classes, drivers or [], capacities)
    found = volume_reach(mounting(*(c["metadata"]["name"] for c in claims)), "ns", "p", read, NODES, replacement=False)
    named = {
        node: words.removeprefix(UNMET).removeprefix(NO_STORAGE)
        for node, (where, words) in found.kept_off.items()
        if where == VOLUME_BINDING
    }
    assert len(named) == len(found.kept_off), found.kept_off
    return found.unread, named


DEFAULT = "storageclass.kubernetes.io/is-default-class"
CAPACITY_DRIVER = [{"metadata": {"name": "csi.example.com"}, "spec": {"storageCapacity": True}}]
UNMET = "no volume can be bound or provisioned there for its claim "
NO_STORAGE = "csi.example.com has no storage there for its claim "


@pytest.mark.parametrize(
    ("volumes", "kept_off"),
    [
        ([offered("pv", "a")], {"b": "data", "c": "data"}),
        ([offered("pv", "a", "b"), offered("small", "c", storage="1Gi")], {"c": "data"}),
        (
            [offered("pv", "a", phase="Bound"), offered("other", "b", storageClassName="fast")],
            dict.fromkeys(NODES, "data"),
        ),
        (
            [offered("pv", "a", accessModes=["ReadOnlyMany"]), offered("block", "b", volumeMode="Block")],
            dict.fromkeys(NODES, "data"),
        ),
        ([offered("pv", "a", volumeAttributesClassName="gold"), offered("gone", "b")], {"a": "data", "c": "data"}),
        ([offered("pv", "c", claimRef={"namespace": "ns", "name": "other"}), offered("any")], {}),
        (
            [offered("pv", "c", claimRef={"namespace": "ns", "name": "data"}), offered("any")],
            {"a": "data", "b": "data"},
        ),
        (
            [offered("pv", "c", claimRef={"namespace": "ns", "name": "data", "uid": "old"}), offered("b", "b")],
            {"a": "data", "c": "data"},
        ),
    ],
)
def test_a_claim_waiting_for_its_pod_reaches_the_nodes_of_the_volumes_it_matches(
    volumes: list[dict[str, Any]], kept_off: dict[str, str]
) -> None:
    """FindMatchingVolume, its class provisioning none: an available volume of its class, as large, of its access
    and volume modes and attributes class, on the node; one reserved for it (by name, and UID when given) is the only
    one it takes; one reserved for another claim is not its."""
    assert waiting_reach([waiting("data")], volumes) == ("", kept_off)


def test_a_waiting_claims_selector_picks_the_volumes_it_may_take_and_a_deleted_one_is_not_taken() -> None:
    """The claim's selector must match the volume's labels; a volume being deleted is out."""
    labelled = offered("pv", "a", labels={"disk": "nvme"})
    leaving = offered("gone", "b")
    leaving["metadata"]["deletionTimestamp"] = "2026-12-06T00:00:00Z"
    nvme = waiting("data", selector={"matchLabels": {"disk": "nvme"}})
    assert waiting_reach([nvme], [labelled, offered("c", "c")]) == ("", {"b": "data", "c": "data"})
    assert waiting_reach([waiting("data")], [leaving]) == ("", dict.fromkeys(NODES, "data"))


def test_the_claims_of_one_pod_take_a_volume_each_smallest_first() -> None:
    """Two claims, two volumes on a, one on b: both bind on a only. The smallest claim goes first (so it is the one
    named where no volume is) and takes its smallest match, so the large claim still finds the large volume."""
    volumes = [offered("small", "a", storage="2Gi"), offered("large", "a"), offered("one", "b")]
    claims = [waiting("big", "8Gi"), waiting("little", "1Gi")]
    assert waiting_reach(claims, volumes) == ("", {"b": "big", "c": "little"})
    assert waiting_reach([waiting("little", "1Gi"), waiting("other", "1Gi")], volumes) == (
        "",
        {"b": "other", "c": "little"},
    )


@pytest.mark.parametrize(
    ("classes", "kept_off"),
    [
        ([storage_class("csi.example.com")], {}),
        (
            [
                storage_class(
                    "csi.example.com",
                    allowedTopologies=[{"matchLabelExpressions": [{"key": ZONE, "values": ["z1"]}]}],
                )
            ],
            {"c": "data"},
        ),
        (
            [storage_class("csi.example.com", allowedTopologies=[{"matchLabelExpressions": []}])],
            dict.fromkeys(NODES, "data"),
        ),
        ([storage_class("")], dict.fromkeys(NODES, "data")),
    ],
)
def test_a_claim_no_volume_matches_goes_where_its_class_may_provision(
    classes: list[dict[str, Any]], kept_off: dict[str, str]
) -> None:
    """checkVolumeProvisions: a class with a provisioner provisions on every node, or on those its allowedTopologies
    match (a term with no expression matches none); no provisioner, none."""
    assert waiting_reach([waiting("data")], [], classes) == ("", kept_off)


def test_a_claim_being_provisioned_for_a_node_reaches_that_node_alone() -> None:
    """The selected-node annotation: the claim is being provisioned there."""
    chosen = waiting("data", metadata={"annotations": {SELECTED_NODE: "b"}})
    assert waiting_reach([chosen], [offered("pv", "a")], [storage_class("csi.example.com")]) == (
        "",
        {"a": "data", "c": "data"},
    )


@pytest.mark.parametrize(
    ("claims", "classes", "drivers", "unread"),
    [
        ([waiting("data")], [storage_class(mode="Immediate")], [], "is not bound, and its storage class does not wait"),
        ([waiting("data")], [], [], "is not bound, and its storage class does not wait"),
        ([waiting("data", storageClassName="")], [storage_class()], [], "is not bound, and its storage class does not"),
        ([waiting("data", storage="5x")], [storage_class()], [], "cannot be read: resources.requests.storage '5x'"),
        (
            [waiting("data")],
            [storage_class("csi.example.com")],
            CAPACITY_DRIVER,
            "would be provisioned by csi.example.com, whose storage capacity is not read",
        ),
        ([waiting("data")], [storage_class("csi.example.com")], None, "whose storage capacity is not read"),
    ],
)
def test_a_waiting_claim_that_cannot_be_read_leaves_where_the_pod_may_go_unread(
    claims: list[dict[str, Any]],
    classes: list[dict[str, Any]],
    drivers: list[dict[str, Any]] | None,
    unread: str,
) -> None:
    """A claim that does not wait for its pod (kube-scheduler refuses the pod everywhere until it binds), one that
    does not parse, one a capacity-checking CSI driver would provision when the capacities (or the drivers) were not
    read: no node is kept off by guess."""
    read = volumes_of(claims, [], classes, drivers)
    found = volume_reach(mounting("data"), "ns", "p", read, NODES, replacement=False)
    assert found.unread.startswith("its claim data ") and unread in found.unread, found.unread
    assert dict(found.kept_off) == {}


def test_a_local_volume_reaches_the_nodes_of_its_hostname_label_not_of_its_name() -> None:
    """Volumes are looked up by the nodes' hostname labels (a node's name may differ from its label, and a node may
    have none), as node affinity matches them."""
    nodes = {"x": {HOSTNAME_LABEL: "a"}, "a": {}, "y": {HOSTNAME_LABEL: "b"}}
    read = volumes_of([waiting("data")], [offered("pv", "a")], [storage_class()], [])
    found = volume_reach(mounting("data"), "ns", "p", read, nodes, replacement=False)
    assert (found.unread, set(found.kept_off)) == ("", {"a", "y"})


def test_a_capacity_checking_driver_is_not_read_for_a_claim_that_asks_no_size() -> None:
    """hasEnoughCapacity checks nothing for a claim without a storage request."""
    assert waiting_reach([waiting("data", "")], [], [storage_class("csi.example.com")], CAPACITY_DRIVER) == ("", {})


def capacity(size: str, *hosts: str, **more: Any) -> dict[str, Any]:
    """A CSIStorageCapacity of class `local` of `size`, for the nodes of `hosts` (none: no nodeTopology)."""
    topology = {"nodeTopology": {"matchExpressions": [in_hosts(*hosts)]}} if hosts else {}
    base = {"metadata": {"namespace": "driver", "name": f"c-{size}"}, "storageClassName": "local", "capacity": size}
    return base | topology | more


@pytest.mark.parametrize(
    ("capacities", "kept_off"),
    [
        ([capacity("10Gi", "a", "b")], ["c"]),
        ([capacity("5Gi", "a"), capacity("4Gi", "b")], ["b", "c"]),
        ([capacity("100Gi", "a", "b", "c", maximumVolumeSize="2Gi"), capacity("6Gi", "c")], ["a", "b"]),
        ([capacity("100Gi"), capacity("100Gi", "b", storageClassName="other")], ["a", "b", "c"]),
        ([capacity("100Gi", "a", nodeTopology={"matchLabels": {"": "x"}})], ["a", "b", "c"]),
        ([capacity("10Gi", nodeTopology={"matchLabels": {ZONE: "z1"}})], ["c"]),
        ([capacity("10Gi", nodeTopology={"matchLabels": {ZONE: "z1", HOSTNAME_LABEL: "b"}})], ["a", "c"]),
    ],
)
def test_a_class_whose_driver_checks_capacity_provisions_where_a_capacity_of_it_serves_the_node(
    capacities: list[dict[str, Any]], kept_off: list[str]
) -> None:
    """hasEnoughCapacity: a CSIStorageCapacity of the claim's class whose maximumVolumeSize (else capacity) holds the
    claim and whose nodeTopology selects the node; one with no topology, or one that does not parse, serves none."""
    found = waiting_reach([waiting("data")], [], [storage_class("csi.example.com")], CAPACITY_DRIVER, capacities)
    assert found == ("", dict.fromkeys(kept_off, "data"))


def test_a_capacity_holds_a_claim_of_its_size_rounded_up_to_whole_bytes() -> None:
    """Quantity.Value() rounds both up: a limit of 1.5 bytes holds a claim of 2; one of 1 does not hold 1.5."""
    classes = [storage_class("csi.example.com")]
    assert waiting_reach([waiting("data", "2")], [], classes, CAPACITY_DRIVER, [capacity("1500m", "a")])[1] == {
        "b": "data",
        "c": "data",
    }
    assert waiting_reach([waiting("data", "1500m")], [], classes, CAPACITY_DRIVER, [capacity("1", "a")])[1] == (
        dict.fromkeys(NODES, "data")
    )


def scratch(storage_class: str | None = "local", storage: str = "5Gi") -> dict[str, Any]:
    """A pod spec with the ephemeral volume `s` of `storage` (of class `storage_class`; None: names none)."""
    spec: dict[str, Any] = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": storage}}}
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    return {"volumes": [{"name": "s", "ephemeral": {"volumeClaimTemplate": {"spec": spec}}}]}


NEW = "no volume can be bound or provisioned there for its ephemeral volume s's new claim"


@pytest.mark.parametrize(
    ("spec", "classes", "volumes", "kept_off"),
    [
        (scratch(), [storage_class("csi.example.com")], [], []),
        (scratch(), [storage_class()], [offered("pv", "b")], ["a", "c"]),
        (
            scratch(None),
            [storage_class(metadata={"name": "local", "annotations": {DEFAULT: "true"}})],
            [],
            ["a", "b", "c"],
        ),
        (
            scratch(),
            [
                storage_class(
                    allowedTopologies=[{"matchLabelExpressions": [{"key": ZONE, "values": ["z2"]}]}],
                    provisioner="csi.example.com",
                )
            ],
            [offered("pv", "a", claimRef={"namespace": "ns", "name": "p-s"})],
            ["a", "b"],
        ),
    ],
)
def test_a_replacements_ephemeral_volume_reaches_where_its_new_claim_may_bind(
    spec: dict[str, Any], classes: list[dict[str, Any]], volumes: list[dict[str, Any]], kept_off: list[str]
) -> None:
    """The replacement's new claim, of its template's class (else the default), binds where an available volume of it
    waits or its class provisions; a volume reserved for the old pod's claim is not the new one's."""
    read = volumes_of([], volumes, classes, [])
    found = volume_reach(spec, "ns", "p", read, NODES, replacement=True)
    assert (found.unread, dict(found.kept_off)) == ("", {node: (VOLUME_BINDING, NEW) for node in kept_off})


@pytest.mark.parametrize(
    ("spec", "classes", "unread"),
    [
        (scratch(), None, "its ephemeral volume s is claimed anew by a replacement"),
        (
            scratch(),
            [storage_class(mode="Immediate")],
            "its ephemeral volume s's new claim is not bound, and its storage class does not wait for a pod to bind it",
        ),
        (
            scratch(None),
            [storage_class()],
            "its ephemeral volume s's new claim is not bound, and its storage class does not wait for a pod to bind it",
        ),
    ],
)
def test_a_replacements_ephemeral_volume_that_cannot_be_read_keeps_the_pod_on_its_node(
    spec: dict[str, Any], classes: list[dict[str, Any]] | None, unread: str
) -> None:
    """Classes not read, a class that binds at once, no class named and no default: the pod stays on its node."""
    found = volume_reach(spec, "ns", "p", volumes_of([], [], classes, []), NODES, replacement=True)
    assert (found.unread, dict(found.kept_off)) == (unread, {})


def test_a_pod_whose_ephemeral_volume_a_class_provisions_moves_where_the_class_reaches() -> None:
    """small-a's scratch volume is provisioned in zone z2 alone: its replacement goes to c, not b, and a plan with
    the classes not read keeps it on a."""
    nodes, pods = three_nodes()
    pods[0]["spec"] |= scratch()
    z2 = [{"matchLabelExpressions": [{"key": ZONE, "values": ["z2"]}]}]
    read = volumes_of(
        [claim("data", "pv")], [local("pv")], [storage_class("csi.example.com", allowedTopologies=z2)], []
    )
    snapshot, _ = snapshot_from_objects(nodes, pods, [], datetime.now(UTC), volumes=read)
    result = plan(snapshot, FitGoal(pending_pod(whole_card(), node_marks(nodes), HAMI_DEFAULTS, pods).pod))
    assert [(m.pod, m.to_node) for m in result.moves] == [("ns/small-a", "c")]
    unread = volumes_of([claim("data", "pv")], [local("pv")])
    snapshot, _ = snapshot_from_objects(nodes, pods, [], datetime.now(UTC), volumes=unread)
    [small] = [pod for pod in snapshot.pods if pod.name == "small-a"]
    assert runs_on(small, NODES) == {"a"}


def test_a_pending_pods_waiting_claim_keeps_it_off_and_kube_schedulers_refusal_is_read() -> None:
    """A volume of its class waits on b: room is made on b, c's refusal ("didn't find available persistent volumes to
    bind") is read, and `why` names the claim; without the classes the claim and the refusal stay unread."""
    nodes, pods = three_nodes()
    refusal = "2 node(s) didn't find available persistent volumes to bind"
    big = big_refused(pods, f"0/3 nodes are available: {refusal}, 1 1/1 CardInsufficientMemory.")
    claims, volumes = [waiting("model")], [offered("pv", "b")]
    read = volumes_of(claims, volumes, [storage_class()], [])
    snapshot, _ = snapshot_from_objects(nodes, pods, [], datetime.now(UTC), volumes=read)
    found = pending_pod(big, node_marks(nodes), HAMI_DEFAULTS, pods, snapshot, volumes=read)
    assert found.unread == ()
    assert runs_on(found.pod, NODES) == {"b"}
    assert plan(snapshot, FitGoal(found.pod)).target == ("b", ("GPU-b",))
    verdict = {node.node: node for node in why(snapshot, found.pod)}["c"]
    assert (verdict.fits, verdict.reason) == (False, VOLUME_BINDING)
    assert verdict.message == f"kube-scheduler: {UNMET}model"
    unread = pending_pod(big, node_marks(nodes), HAMI_DEFAULTS, pods, snapshot, volumes=volumes_of(claims, volumes))
    assert unread.unread == (refusal,)


def test_a_node_refused_by_several_filters_is_named_by_the_first_kube_scheduler_runs() -> None:
    """NodePorts runs before VolumeBinding: a node whose pod holds the host port the pod asks and that its volume does
    not reach is out for its port."""
    nodes, pods = three_nodes()
    port = [{"containerPort": 80, "hostPort": 80}]
    pods[0]["spec"]["containers"][0]["ports"] = port
    big = whole_card()
    big["spec"] |= mounting("model")
    big["spec"]["containers"][0]["ports"] = port
    volumes = volumes_of([claim("model", "pv")], [local("pv", "b", "c")])
    snapshot, _ = snapshot_from_objects(nodes, pods, [], datetime.now(UTC), volumes=volumes)
    found = pending_pod(big, node_marks(nodes), HAMI_DEFAULTS, pods, snapshot, volumes=volumes)
    assert found.pod.kept_off["a"][0] == "NodePorts"
    alone = pending_pod(big, node_marks(nodes), HAMI_DEFAULTS, pods, None, volumes=volumes)
    assert alone.pod.kept_off["a"][0] == VOLUME_BINDING


def test_a_card_a_pod_held_on_its_node_cannot_leave_says_why() -> None:
    """Freeing a card: small-a's claims were not read, so it may move only within its node, and the reason says so."""
    nodes, pods = three_nodes()
    snapshot, _ = snapshot_from_objects(nodes, pods, [], datetime.now(UTC))
    reasons = plan(snapshot, FreeCardsGoal(1)).reasons
    assert (
        "a/gpu-0: ns/small-a fits no other card in use of its node, where it stays (its volume claims were not read)"
        in (reasons)
    )


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ({"resourceClaims": [{"name": "gpu"}]}, "it claims devices through resource claims"),
        (
            {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": HOSTNAME_LABEL}]},
            "kube-scheduler places it by other pods (required pod affinity or a DoNotSchedule spread)",
        ),
        ({"containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 80}]}]}, "it takes a host port"),
        ({}, ""),
    ],
)
def test_a_placed_pod_held_on_its_node_says_why(spec: dict[str, Any], why: str) -> None:
    """What the plan does not read of a placed pod keeps it on its node, and the reason is kept for the plan's words."""
    nodes, _ = three_nodes()
    placed = pod_object("p", "a", nodeName="a")
    containers = placed["spec"]["containers"]
    placed["spec"] |= spec
    placed["spec"]["containers"] = [containers[0] | c for c in spec.get("containers", containers)]
    found = pod_for_plan(placed, node_marks(nodes))
    assert (found.stays, found.nodes) == (why, frozenset({"a"}) if why else None)


def affinity(*terms: dict[str, Any]) -> dict[str, Any]:
    """A volume's required node affinity of these terms."""
    return {"required": {"nodeSelectorTerms": list(terms)}}


ZONE_Z1 = {"key": ZONE, "operator": "In", "values": ["z1"]}


@pytest.mark.parametrize(
    ("node_affinity", "reached"),
    [
        (affinity({"matchExpressions": [in_hosts("a", "c")]}), {"a", "c"}),
        (affinity({"matchExpressions": [ZONE_Z1]}), {"a", "b"}),
        (affinity({"matchExpressions": [{"key": HOSTNAME_LABEL, "operator": "NotIn", "values": ["a"]}]}), {"b", "c"}),
        (affinity({"matchExpressions": [{"key": HOSTNAME_LABEL, "operator": "Exists"}]}), {"a", "b", "c"}),
        (affinity({"matchExpressions": [in_hosts("a", "c"), ZONE_Z1]}), {"a"}),
        (affinity({"matchExpressions": [in_hosts("a")]}, {"matchExpressions": [in_hosts("c")]}), {"a", "c"}),
        (
            affinity(
                {
                    "matchExpressions": [in_hosts("a")],
                    "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a"]}],
                }
            ),
            set(),
        ),
        ({"required": {}}, set()),
    ],
)
def test_an_available_volume_reaches_the_nodes_its_node_affinity_allows_whatever_its_shape(
    node_affinity: dict[str, Any], reached: set[str]
) -> None:
    """The hostname index is taken only for one term of one `hostname In` requirement; any other affinity (another
    key or operator, more requirements or terms, a field, no terms) is matched on each node's labels, as
    CheckNodeAffinity matches it."""
    volume = offered("pv", nodeAffinity=node_affinity)
    assert waiting_reach([waiting("data")], [volume]) == ("", {n: "data" for n in NODES if n not in reached})


@pytest.mark.parametrize(
    ("asks", "volumes", "kept_off"),
    [
        ({"volumeMode": "Block"}, [offered("fs", "a"), offered("block", "b", volumeMode="Block")], ["a", "c"]),
        (
            {"volumeAttributesClassName": "gold"},
            [offered("plain", "a"), offered("gold", "b", volumeAttributesClassName="gold")],
            ["a", "c"],
        ),
        ({}, [offered("pv", "c", claimRef={"namespace": "ns", "name": "data", "uid": "uid-data"})], ["a", "b"]),
        ({}, [offered("exact", "a", storage="5Gi")], ["b", "c"]),
        ({}, [offered("used", "a", phase="Bound"), offered("free", "b")], ["a", "c"]),
        (
            {"selector": {"matchLabels": {"disk": "nvme"}}},
            [offered("plain", "a"), offered("nvme", "b", labels={"disk": "nvme"})],
            ["a", "c"],
        ),
    ],
)
def test_a_waiting_claim_takes_a_volume_of_what_it_asks_and_looks_past_those_it_does_not_take(
    asks: dict[str, Any], volumes: list[dict[str, Any]], kept_off: list[str]
) -> None:
    """The claim's own volume mode, attributes class and UID are read; a volume exactly its size is as large; a
    volume passed over (taken, of another class, unlabelled) leaves the next one to be matched."""
    assert waiting_reach([waiting("data", **asks)], volumes) == ("", dict.fromkeys(kept_off, "data"))


def test_a_claim_that_asks_no_size_takes_a_volume_that_gives_none() -> None:
    """FindMatchingVolume compares a missing capacity as zero against a missing request, zero too."""
    sizeless = offered("pv", "a")
    del sizeless["spec"]["capacity"]
    assert waiting_reach([waiting("data", "")], [sizeless]) == ("", {"b": "data", "c": "data"})


def test_every_claim_of_a_pod_is_looked_at_on_each_node_after_one_its_class_provisions_anywhere() -> None:
    """A claim of a class that provisions on every node (no size, no capacity check) does not end the node's look:
    the next claim, which only a volume on a may hold, still keeps the pod off b and c."""
    fast = {"metadata": {"name": "fast"}, "provisioner": "csi.example.com", "volumeBindingMode": "WaitForFirstConsumer"}
    claims = [waiting("scratch", "", storageClassName="fast"), waiting("data")]
    assert waiting_reach(claims, [offered("pv", "a")], [storage_class(), fast]) == ("", {"b": "data", "c": "data"})


def test_a_capacity_whose_size_does_not_parse_serves_no_node_and_sizes_are_rounded_up() -> None:
    """A limit of 1.2 bytes is 2 (`Quantity.Value()` rounds up, not to the nearest), so it holds a claim of 2."""
    classes = [storage_class("csi.example.com")]
    unparsed = waiting_reach([waiting("data")], [], classes, CAPACITY_DRIVER, [capacity("lots", "a")])
    assert unparsed == ("", dict.fromkeys(NODES, "data"))
    assert waiting_reach([waiting("data", "2")], [], classes, CAPACITY_DRIVER, [capacity("1200m", "a")])[1] == {
        "b": "data",
        "c": "data",
    }


def test_a_beta_zone_label_on_both_the_volume_and_the_node_is_matched() -> None:
    """An old node labelled with the beta zone key alone: the volume's beta key reads it as it is."""
    zonal = volume_of(local("pv", labels={BETA_ZONE: "z1"}))
    assert zonal.keeps_off({BETA_ZONE: "z1"}) is None
    assert zonal.keeps_off({BETA_ZONE: "z2"}) == (VOLUME_ZONE, f"its volume pv is in {BETA_ZONE}=z1")


def test_whether_a_claim_is_not_bound_yet() -> None:
    """Only then are the StorageClasses, CSIDrivers and CSIStorageCapacities read."""
    assert not waits_unbound([claim("one", "pv"), claim("two", "pv2")])
    assert waits_unbound([claim("one", "pv"), claim("two")])
    assert waits_unbound([{"metadata": {"name": "bare"}}]) and not waits_unbound([])


def test_a_pending_pods_own_ephemeral_claim_is_read_and_a_volume_that_names_no_claim_leaves_it_unread() -> None:
    """A Pending pod's ephemeral volume is its claim `<pod>-<volume>`; a claim volume without a claim name, a volume
    entry that is not an object, are not guessed at."""
    template = {"volumeClaimTemplate": {"spec": {"resources": {"requests": {"storage": "1Gi"}}}}}
    spec = {"volumes": ["junk", {"name": "s", "ephemeral": template}, {"name": "d", "persistentVolumeClaim": {}}]}
    read = volumes_of([claim("p-s", "pv")], [local("pv", "a")])
    found = volume_reach(spec, "ns", "p", read, NODES, replacement=False)
    assert found.unread == "its volume d names no claim"
    del spec["volumes"][2]
    found = volume_reach(spec, "ns", "p", read, NODES, replacement=False)
    assert (found.unread, set(found.kept_off)) == ("", {"b", "c"})
    empty = {"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": ""}}]}
    assert claim_names(empty, "p", replacement=False) == "its volume d names no claim"


def test_a_node_two_volumes_keep_the_pod_off_is_named_by_the_first() -> None:
    """By the order the pod lists its claims, a VolumeBinding reason before any VolumeZone one."""
    volumes = volumes_of(
        [claim("one", "east"), claim("two", "west"), claim("three", "on-a"), claim("four", "on-b")],
        [
            local("east", labels={ZONE: "z2"}),
            local("west", labels={ZONE: "z3"}),
            local("on-a", "a"),
            local("on-b", "b"),
        ],
    )
    zones = volume_reach(mounting("one", "two"), "ns", "p", volumes, NODES, replacement=True).kept_off
    assert zones["a"] == (VOLUME_ZONE, f"its volume east is in {ZONE}=z2")
    hosts = volume_reach(mounting("three", "four"), "ns", "p", volumes, NODES, replacement=True).kept_off
    assert hosts["c"] == (VOLUME_BINDING, "its volume on-a's node affinity excludes it")


def test_an_available_volume_on_a_node_that_is_not_there_holds_the_claim_nowhere() -> None:
    """A local volume whose hostname no node has (its node gone) is passed over; the one on b still holds the claim."""
    assert waiting_reach([waiting("data")], [offered("gone", "d"), offered("pv", "b")]) == (
        "",
        {"a": "data", "c": "data"},
    )


def test_a_claim_that_asks_no_size_is_matched_before_one_that_asks_a_byte() -> None:
    """byPVCSize reads a missing request as zero: the sizeless claim, listed second, takes the one volume on a first,
    so the one-byte claim is named there, and the sizeless one is named where no volume is."""
    claims = [waiting("tiny", "1"), waiting("sizeless", "")]
    assert waiting_reach(claims, [offered("pv", "a")]) == ("", {"a": "tiny", "b": "sizeless", "c": "sizeless"})


def test_a_pod_without_volumes_reaches_every_node_as_itself_and_as_a_replacement() -> None:
    """No volumes list: no claim, and no ephemeral volume a replacement claims anew."""
    read = volumes_of([], [], [storage_class()], [])
    assert volume_reach({}, "ns", "p", read, NODES, replacement=False) == VolumeReach()
    assert volume_reach({}, "ns", "p", read, NODES, replacement=True) == VolumeReach()


def test_a_volume_reserved_for_no_claim_is_not_a_replacements_new_claims() -> None:
    """A claimRef naming no claim (the API takes one) matches no claim kube-scheduler checks (IsVolumeBoundToClaim
    compares the real `<pod>-<volume>` name), and FindMatchingVolume skips a volume reserved at all: the new claim is
    met by the free volume on b alone. It was read as reserved for the claim a replacement makes, of no name."""
    nobody = offered("pv", "a", claimRef={"kind": "PersistentVolumeClaim", "apiVersion": "v1"})
    read = volumes_of([], [nobody, offered("free", "b")], [storage_class()], [])
    found = volume_reach(scratch(), "ns", "p", read, NODES, replacement=True)
    assert (found.unread, dict(found.kept_off)) == ("", {node: (VOLUME_BINDING, NEW) for node in ("a", "c")})
