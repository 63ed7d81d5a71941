"""CSI attach limits as kube-scheduler's NodeVolumeLimits counts them: a plan never moves a pod onto a node its volumes
would take over a driver's limit."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from kubectl_hami_place.core.attach_limits import (
    NO_REFS,
    UNLIMITED,
    Attachment,
    AttachRefs,
    attach_limits_of,
    attach_needs,
    attach_refs,
    attachment_of,
    bound_volumes,
    csi_node_limits,
    unclaimed_attachments,
)
from kubectl_hami_place.core.defrag.triggers import pending_pod
from kubectl_hami_place.core.hami_config import HAMI_DEFAULTS
from kubectl_hami_place.core.node_resources import Resources, counted_pod, shortfall
from kubectl_hami_place.core.node_selection import node_marks
from kubectl_hami_place.core.planner import FitGoal, plan
from kubectl_hami_place.core.planner.objects import snapshot_from_objects
from kubectl_hami_place.core.planner.why import why
from kubectl_hami_place.core.volumes import volumes_of
from tests.unit.test_core_volumes import big_refused, claim, mounting, three_nodes, whole_card

DRIVER = "ebs.csi.aws.com"
SCALAR = f"attachable-volumes-csi-{DRIVER}"


def csi_node(node: str, **limits: int) -> dict[str, Any]:
    """A CSINode whose drivers state these attach limits (by driver name, dots written as underscores)."""
    drivers = [{"name": name.replace("_", "."), "allocatable": {"count": count}} for name, count in limits.items()]
    return {"metadata": {"name": node}, "spec": {"drivers": drivers}}


def csi_volume(name: str, driver: str = DRIVER) -> dict[str, Any]:
    """A PersistentVolume a CSI driver attaches."""
    return {"metadata": {"name": name}, "spec": {"csi": {"driver": driver, "volumeHandle": f"vol-{name}"}}}


def attachment(node: str, volume: str, driver: str = DRIVER) -> dict[str, Any]:
    """A VolumeAttachment of a PersistentVolume to a node."""
    spec = {"attacher": driver, "nodeName": node, "source": {"persistentVolumeName": volume}}
    return {"metadata": {"name": f"csi-{volume}-{node}"}, "spec": spec}


EBS = DRIVER.replace(".", "_")


def test_a_csi_nodes_limits_are_those_its_drivers_state() -> None:
    """`allocatable.count` of each driver; a driver stating none, or no whole number, sets no limit."""
    found = csi_node_limits(
        {
            "metadata": {"name": "a"},
            "spec": {
                "drivers": [
                    {"name": DRIVER, "allocatable": {"count": 25}},
                    {"name": "none.example.com"},
                    {"name": "odd.example.com", "allocatable": {"count": "3"}},
                    {"name": "flag.example.com", "allocatable": {"count": True}},
                    "not a driver",
                ]
            },
        }
    )
    assert found == ("a", {DRIVER: 25})
    assert csi_node_limits({"metadata": {"name": "b"}}) == ("b", {})


@pytest.mark.parametrize(
    ("spec", "read"),
    [
        (
            {"attacher": DRIVER, "nodeName": "a", "source": {"persistentVolumeName": "pv"}},
            Attachment("a", "pv", DRIVER),
        ),
        ({"attacher": "", "nodeName": "a", "source": {"persistentVolumeName": "pv"}}, None),
        ({"attacher": DRIVER, "nodeName": "a", "source": {"inlineVolumeSpec": {}}}, None),
        ({"attacher": DRIVER, "source": {"persistentVolumeName": "pv"}}, None),
    ],
)
def test_a_volume_attachment_is_read_only_with_an_attacher_a_node_and_a_volume(
    spec: dict[str, Any], read: Attachment | None
) -> None:
    """kube-scheduler skips one without an attacher or a PersistentVolume's name."""
    assert attachment_of({"metadata": {"name": "x"}, "spec": spec}) == read


def test_what_a_pod_attaches_is_read_from_its_claims_ephemeral_volumes_and_in_tree_inline_volumes() -> None:
    """Its own claims, its ephemeral volumes' claims (and the classes its replacement's new claims get), and inline
    in-tree volumes of a driver kube-scheduler migrates (Azure File's is not counted)."""
    spec = {
        "volumes": [
            {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
            {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {"storageClassName": "fast"}}}},
            {"name": "tmp", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
            {"name": "disk", "awsElasticBlockStore": {"volumeID": "vol-1"}},
            {"name": "share", "azureFile": {"shareName": "s"}},
            {"name": "cfg", "configMap": {"name": "c"}},
        ]
    }
    assert attach_refs(spec, "p") == AttachRefs(("data",), ("p-scratch", "p-tmp"), ("fast", ""), (DRIVER,))
    nameless = [{"name": "v", "persistentVolumeClaim": {}}, {"name": "d", "gcePersistentDisk": {"pdName": "d"}}]
    assert attach_refs({"volumes": nameless}, "p") == AttachRefs(inline=("pd.csi.storage.gke.io",))
    assert attach_refs({"volumes": [{"name": "v", "persistentVolumeClaim": {}}]}, "p") is NO_REFS


def classes(*pairs: tuple[str, str], default: str = "") -> list[dict[str, Any]]:
    """StorageClasses by (name, provisioner); `default` the one marked default."""
    marked = {"storageclass.kubernetes.io/is-default-class": "true"}
    return [
        {
            "metadata": {"name": name, "annotations": marked if name == default else {}},
            "provisioner": provisioner,
            "volumeBindingMode": "WaitForFirstConsumer",
        }
        for name, provisioner in pairs
    ]


def test_a_claim_counts_toward_its_volumes_driver_or_its_classes_provisioner_while_unbound() -> None:
    """A bound CSI volume counts for its driver, an in-tree EBS volume for EBS's CSI driver, an unbound claim for its
    class's provisioner (an in-tree provisioner as the driver it migrates to); a claim or volume not found, a class
    not found, a volume nothing attaches and a driver no node limits count nothing."""
    claims = [
        claim("csi", "pv-csi"),
        claim("tree", "pv-tree"),
        claim("nfs", "pv-nfs"),
        claim("lost", "pv-lost"),
        claim("other", "pv-other"),
        {"metadata": {"namespace": "ns", "name": "new"}, "spec": {"storageClassName": "gp2"}},
        {"metadata": {"namespace": "ns", "name": "unknown"}, "spec": {"storageClassName": "nope"}},
    ]
    volumes = [
        csi_volume("pv-csi"),
        {"metadata": {"name": "pv-tree"}, "spec": {"awsElasticBlockStore": {"volumeID": "vol-t"}}},
        {"metadata": {"name": "pv-nfs"}, "spec": {"nfs": {"server": "s", "path": "/"}}},
        csi_volume("pv-other", "other.example.com"),
    ]
    read = volumes_of(claims, volumes, classes(("gp2", "kubernetes.io/aws-ebs")), [])
    names = ("csi", "tree", "nfs", "lost", "other", "new", "unknown", "missing")
    assert attach_needs(AttachRefs(names), "ns", read, frozenset({SCALAR})) == ((SCALAR, 3),)
    assert attach_needs(AttachRefs(names), "ns", read, frozenset()) == ()
    assert attach_needs(AttachRefs(("csi",)), "other-ns", read, frozenset({SCALAR})) == ()


@pytest.mark.parametrize(
    ("own_bound", "new_class", "count"),
    [(True, "gp3", 1), (True, "", 1), (False, "gp3", 1), (True, "local", 1), (False, "local", 0)],
)
def test_an_ephemeral_volume_counts_the_more_of_the_pods_claim_and_its_replacements(
    own_bound: bool, new_class: str, count: int
) -> None:
    """The pod frees on its node what its replacement takes elsewhere: its own claim's count or the new claim's,
    whichever is more (the default class when the template names none)."""
    own = claim("p-scratch", "pv-e") if own_bound else claim("p-scratch", "")
    read = volumes_of(
        [own],
        [csi_volume("pv-e")],
        classes(("gp3", DRIVER), ("local", "kubernetes.io/no-provisioner"), default="gp3"),
        [],
    )
    refs = AttachRefs(ephemeral=("p-scratch",), new_classes=(new_class,))
    assert attach_needs(refs, "ns", read, frozenset({SCALAR})) == (((SCALAR, count),) if count else ())


def limited_cluster(
    limits: dict[str, int], attachments: tuple[tuple[str, str], ...] = ()
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], Any]:
    """Three nodes (`three_nodes`): small-a's claim `data` is an EBS volume; small-b's `logs` is another; each node in
    `limits` has a CSINode limiting EBS to that many volumes; `attachments` (node, volume) are VolumeAttachments."""
    nodes, pods = three_nodes()
    for node in nodes:
        node["status"]["allocatable"] |= {"cpu": "8", "memory": "32Gi", "pods": "110"}
    pods[1]["spec"] |= mounting("logs")
    claims = [claim("data", "pv-data"), claim("logs", "pv-logs")]
    volumes = [csi_volume("pv-data"), csi_volume("pv-logs"), csi_volume("pv-gone")]
    attach = attach_limits_of(
        [csi_node(node, **{EBS: count}) for node, count in limits.items()],
        [attachment(node, volume) for node, volume in attachments],
    )
    return nodes, pods, volumes_of(claims, volumes, attach=attach)


@pytest.mark.parametrize(
    ("limits", "attachments", "moved_to"),
    [
        ({}, (), "b"),
        ({"b": 2}, (), "b"),
        ({"b": 1}, (), "c"),
        ({"b": 1, "c": 1}, (), "c"),
        ({"b": 2, "c": 1}, (("b", "pv-gone"),), "c"),
        ({"b": 2}, (("b", "pv-logs"),), "b"),
    ],
    ids=["no limit", "room on b", "b full", "c has room", "b holds an attachment", "b's attachment is its pod's"],
)
def test_a_move_goes_only_where_the_drivers_limit_has_room(
    limits: dict[str, int], attachments: tuple[tuple[str, str], ...], moved_to: str
) -> None:
    """small-a's replacement goes to b first, unless b's EBS limit is reached by small-b's volume, or by a volume
    still attached there that no pod of b uses; an attachment of small-b's own volume is not counted twice."""
    nodes, pods, volumes = limited_cluster(limits, attachments)
    snapshot, _ = snapshot_from_objects(nodes, pods, [], datetime.now(UTC), volumes=volumes)
    result = plan(snapshot, FitGoal(pending_pod(whole_card(), node_marks(nodes), HAMI_DEFAULTS, pods).pod))
    assert [(m.pod, m.to_node) for m in result.moves] == [("ns/small-a", moved_to)]


def test_no_move_takes_a_pod_over_a_limit_and_the_reason_names_the_limit() -> None:
    """Both other nodes full: no plan, and the limit is named."""
    nodes, pods, volumes = limited_cluster({"b": 1, "c": 0})
    snapshot, _ = snapshot_from_objects(nodes, pods, [], datetime.now(UTC), volumes=volumes)
    rooms = {node.name: node.room for node in snapshot.nodes}
    assert [rooms[node].scalar(SCALAR) if rooms[node] else None for node in "abc"] == [UNLIMITED - 1, 0, 0]
    [small] = [pod for pod in snapshot.pods if pod.name == "small-a"]
    assert small.needs.scalars == ((SCALAR, 1),)
    result = plan(snapshot, FitGoal(pending_pod(whole_card(), node_marks(nodes), HAMI_DEFAULTS, pods).pod))
    assert not result.moves
    moving = "a: moving ns/small-a would make room on gpu-0, but ns/small-a fits no other card except on b, whose "
    assert moving + f"CSI attach limit of {DRIVER} would not hold it (kube-scheduler's count)" in result.reasons
    verdicts = {verdict.node: verdict for verdict in why(snapshot, small)}
    assert (verdicts["b"].fits, verdicts["b"].reason) == (False, "NodeVolumeLimits")
    assert verdicts["b"].message.startswith("kube-scheduler: node(s) exceed max volume count ("), verdicts["b"].message
    assert f"{SCALAR}: 0 left, 1 asked" in verdicts["b"].message


def test_a_node_short_of_an_attach_count_is_worded_as_kube_scheduler_words_it() -> None:
    """One line of words per kind of shortfall, and the counts' figures."""
    room = Resources(8000, 2**34, 10, ((SCALAR, 0), ("other", 1)))
    asked = Resources(1000, 2**30, 1, ((SCALAR, 1), ("attachable-volumes-csi-x", 1)))
    assert shortfall(room, asked) == (
        "node(s) exceed max volume count (the node has 8000m CPU, 16384 MiB memory and 10 pod(s) left; the pod asks "
        f"1000m, 1024 MiB; {SCALAR}: 0 left, 1 asked; attachable-volumes-csi-x: 0 left, 1 asked)"
    )


def test_a_pending_pods_volumes_count_on_the_node_it_is_made_room_on() -> None:
    """big claims an EBS volume: a's limit is reached by small-a's own, so room is made on b, and kube-scheduler's
    refusal of a for the limit is read."""
    nodes, pods, volumes = limited_cluster({"a": 1})
    big = big_refused(pods, "0/3 nodes are available: 1 node(s) exceed max volume count, 2 1/1 CardInsufficientMemory.")
    read = volumes_of(
        [claim("data", "pv-data"), claim("logs", "pv-logs"), claim("model", "pv-model")],
        [csi_volume("pv-data"), csi_volume("pv-logs"), csi_volume("pv-model")],
        attach=volumes.attach,
    )
    snapshot, _ = snapshot_from_objects(nodes, pods, [], datetime.now(UTC), volumes=read)
    found = pending_pod(big, node_marks(nodes), HAMI_DEFAULTS, pods, snapshot, volumes=read)
    assert found.pod.needs.scalars == ((SCALAR, 1),)
    assert found.unread == ()
    result = plan(snapshot, FitGoal(found.pod))
    assert result.target is not None and result.target[0] == "b"


def test_another_schedulers_pods_volumes_count_on_their_node() -> None:
    """A pod another scheduler placed on b holds b's one EBS volume: small-a's replacement goes to c."""
    nodes, pods, volumes = limited_cluster({"b": 1})
    pods[1]["spec"].pop("volumes")
    other = counted_pod({"metadata": {"namespace": "ns", "name": "db"}, "spec": {"nodeName": "b", **mounting("logs")}})
    snapshot, _ = snapshot_from_objects(nodes, pods, [], datetime.now(UTC), others=[other], volumes=volumes)
    result = plan(snapshot, FitGoal(pending_pod(whole_card(), node_marks(nodes), HAMI_DEFAULTS, pods).pod))
    assert [(m.pod, m.to_node) for m in result.moves] == [("ns/small-a", "c")]


def test_a_node_short_of_cpu_too_is_named_for_node_resources_fit_which_filters_first() -> None:
    """small-a asks more CPU than b has and b's EBS limit is reached: `why` names NodeResourcesFit."""
    nodes, pods, volumes = limited_cluster({"b": 1})
    pods[0]["spec"]["containers"][0].setdefault("resources", {})["requests"] = {"cpu": "9"}
    snapshot, _ = snapshot_from_objects(nodes, pods, [], datetime.now(UTC), volumes=volumes)
    [small] = [pod for pod in snapshot.pods if pod.name == "small-a"]
    verdict = {verdict.node: verdict for verdict in why(snapshot, small)}["b"]
    assert (verdict.reason, verdict.message.split(" (")[0]) == (
        "NodeResourcesFit",
        "kube-scheduler: Insufficient cpu, node(s) exceed max volume count",
    )


def test_lingering_attachments_count_once_each_and_only_of_csi_volumes_no_pod_there_uses() -> None:
    """Two attachments to c of volumes no pod uses count 2 (the first passed over does not end the count); one of an
    in-tree volume, of a volume not found, of a volume a's pod uses, or of a driver no node limits count nothing;
    a node with no pod that attaches a volume counts its own."""
    volumes = volumes_of(
        [claim("data", "pv-data"), claim("gone")],
        [
            csi_volume("pv-data"),
            csi_volume("pv-1"),
            csi_volume("pv-2"),
            csi_volume("pv-x", "other.example.com"),
            {"metadata": {"name": "pv-tree"}, "spec": {"awsElasticBlockStore": {"volumeID": "v"}}},
        ],
    )
    linger = [
        Attachment("c", "pv-tree", DRIVER),
        Attachment("c", "pv-1", DRIVER),
        Attachment("c", "pv-missing", DRIVER),
        Attachment("c", "pv-2", DRIVER),
        Attachment("c", "pv-x", "other.example.com"),
        Attachment("a", "pv-data", DRIVER),
        Attachment("b", "pv-1", DRIVER),
    ]
    used = {"a": bound_volumes(AttachRefs(("data", "gone")), "ns", volumes)}
    assert used == {"a": frozenset({"pv-data"})}
    found = unclaimed_attachments(linger, used, volumes, frozenset({SCALAR}))
    assert found == {"c": ((SCALAR, 2),), "b": ((SCALAR, 1),)}


def test_a_pods_claims_inline_disks_and_ephemeral_volumes_all_count() -> None:
    """A claim and an ephemeral volume's claim beside it, and an inline EBS disk: three volumes (the ephemeral one
    the more of its own claim's and its replacement's); anything in the volume list that is not a volume is passed
    over, and a claim named by no string is not read."""
    spec = {
        "volumes": [
            "not a volume",
            {"name": "bad", "persistentVolumeClaim": {"claimName": 5}},
            {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
            {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {"storageClassName": "gp3"}}}},
            {"name": "disk", "awsElasticBlockStore": {"volumeID": "vol-1"}},
        ]
    }
    refs = attach_refs(spec, "p")
    assert refs == AttachRefs(("data",), ("p-scratch",), ("gp3",), (DRIVER,))
    read = volumes_of(
        [claim("data", "pv-data"), claim("p-scratch", "pv-e")], [csi_volume("pv-data"), csi_volume("pv-e")]
    )
    assert attach_needs(refs, "ns", read, frozenset({SCALAR})) == ((SCALAR, 3),)


def test_an_unbound_claim_counts_nothing_when_the_classes_were_not_read() -> None:
    """Without the StorageClasses no provisioner is known: kube-scheduler would not count such a claim either."""
    read = volumes_of([{"metadata": {"namespace": "ns", "name": "new"}, "spec": {"storageClassName": "gp2"}}], [])
    assert read.classes is None
    assert attach_needs(AttachRefs(("new",)), "ns", read, frozenset({SCALAR})) == ()


def test_a_pods_own_ephemeral_claim_is_read_by_its_name_and_unread_requests_leave_its_node_full() -> None:
    """A placed pod's ephemeral volume's claim is `<pod>-<volume>`, bound here to an EBS volume, while the template's
    class is unknown: the pod counts that volume. A pod whose requests cannot be read leaves its node counted full,
    its volumes with it, and the snapshot is still read."""
    read = volumes_of([claim("p-scratch", "pv-e")], [csi_volume("pv-e")])
    scratch = {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {"storageClassName": "nope"}}}}
    placed = counted_pod(
        {"metadata": {"namespace": "ns", "name": "p"}, "spec": {"nodeName": "a", "volumes": [scratch]}}
    )
    assert attach_needs(placed.attaches, "ns", read, frozenset({SCALAR})) == ((SCALAR, 1),)
    nodes, pods, volumes = limited_cluster({"b": 4})
    pods[1]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "lots"}}
    snapshot, warnings = snapshot_from_objects(nodes, pods, [], datetime.now(UTC), volumes=volumes)
    room = {node.name: node.room for node in snapshot.nodes}["b"]
    assert room is not None and (room.cpu, room.memory, room.pods) == (0, 0, 0)
    assert any("node b is counted as having no CPU or memory left" in warning for warning in warnings), warnings
