"""How many volumes a pod attaches to its node by CSI driver, and how many more a node may take, as kube-scheduler's
NodeVolumeLimits filter (`CSILimits`) counts them, so that a planned move never lands a pod on a node that would
exceed its CSINode's attach limit for a driver.

The counts join a node's room and a pod's needs as scalar resources named `attachable-volumes-csi-<driver>` (as
kube-scheduler once named them), so that the planner carries them through a plan's moves as it carries CPU and memory.
A node's count is its pods' volumes and the VolumeAttachments to it of no volume its pods use. kube-scheduler counts a
volume two pods on a node share once; here each pod counts its own, so a node's count is never below kube-scheduler's:
a move it would refuse is never planned, and a move to a node where two pods share a volume may be left out that it
would allow.
"""

from __future__ import annotations

import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from kubectl_hami_place.core.fields import as_mapping
from kubectl_hami_place.core.volumes import MIGRATED, MIGRATIONS, ephemeral_claim, new_claims

if TYPE_CHECKING:
    from kubectl_hami_place.core.volumes import Volumes

SCALAR_PREFIX = "attachable-volumes-csi-"
"""The scalar resource a driver's attached volumes are counted by, in a node's room and a pod's needs."""
UNLIMITED = 2**31
"""A node's room in a driver its CSINode sets no limit for: more than any node attaches."""
VOLUME_LIMITS = "NodeVolumeLimits"
"""kube-scheduler's name of the filter, which `why` gives as the reason a node is out."""
MAX_VOLUME_COUNT = "node(s) exceed max volume count"
"""kube-scheduler's words for a node a pod's volumes would take over a driver's limit
(ErrReasonMaxVolumeCountExceeded)."""
IN_TREE_PROVISIONERS = {provisioner: driver for _, provisioner, driver in MIGRATIONS}
"""The migrated drivers by the in-tree provisioner a StorageClass names (a claim not bound yet counts as its
class's)."""
UNREAD_LIMITS = "CSI attach limits stay unread: pods that claim a volume stay on their nodes"
"""What a plan leaves unread without the CSINodes or the VolumeAttachments: the words the CLI and the controller say."""

Scalars = tuple[tuple[str, int], ...]


def scalar_of(driver: str) -> str:
    """The scalar resource a driver's volumes are counted by."""
    return SCALAR_PREFIX + driver


def driver_of_scalar(name: str) -> str:
    """The driver a counted scalar names; "" when it is not an attach count."""
    return name.removeprefix(SCALAR_PREFIX) if name.startswith(SCALAR_PREFIX) else ""


def csi_node_limits(csi_node: Mapping[str, Any]) -> tuple[str, Mapping[str, int]]:
    """A CSINode's node name and the attach limit of each driver that states one (`allocatable.count`), as
    `getVolumeLimits` reads them."""
    metadata, spec = as_mapping(csi_node.get("metadata")), as_mapping(csi_node.get("spec"))
    limits = {}
    drivers = spec.get("drivers")
    for driver in drivers if isinstance(drivers, list) else ():
        count = as_mapping(as_mapping(driver).get("allocatable")).get("count")
        name = as_mapping(driver).get("name")
        if isinstance(name, str) and isinstance(count, int) and not isinstance(count, bool):
            limits[name] = count
    return str(metadata.get("name", "")), limits


@dataclass(frozen=True, slots=True)
class Attachment:
    """A VolumeAttachment as `getNodeVolumeAttachmentInfo` reads it: its node, the PersistentVolume attached and the
    driver attaching it."""

    node: str
    volume: str
    driver: str


def attachment_of(attachment: Mapping[str, Any]) -> Attachment | None:
    """A VolumeAttachment object; None when it names no attacher or no PersistentVolume (kube-scheduler skips it).
    Its node's and driver's names are shared with every other attachment's (the server keeps one per volume)."""
    spec = as_mapping(attachment.get("spec"))
    driver, node = spec.get("attacher"), spec.get("nodeName")
    volume = as_mapping(spec.get("source")).get("persistentVolumeName")
    if not (isinstance(driver, str) and driver and isinstance(volume, str) and volume and isinstance(node, str)):
        return None
    return Attachment(sys.intern(node), volume, sys.intern(driver))


@dataclass(frozen=True)
class AttachRefs:
    """What a pod's volumes attach, read from its spec once: its own claims by name, those of its ephemeral volumes
    (`<pod>-<volume>`), the classes of the claims a replacement gets anew for them instead ("" for the default
    class), and the migrated drivers of its inline in-tree volumes."""

    claims: tuple[str, ...] = ()
    ephemeral: tuple[str, ...] = ()
    new_classes: tuple[str, ...] = ()
    inline: tuple[str, ...] = ()


NO_REFS = AttachRefs()


def attach_refs(spec: Mapping[str, Any], pod_name: str) -> AttachRefs:
    """The pod's volumes as `filterAttachableVolumes` reads them, for the pod and for a replacement of it, in one pass
    (every pod's spec is read at each snapshot); a claim without a name counts nothing (the API server refuses such a
    pod)."""
    volumes = spec.get("volumes")
    claims: list[str] = []
    ephemeral: list[str] = []
    inline: list[str] = []
    for volume in volumes if isinstance(volumes, list | tuple) else ():
        if not isinstance(volume, Mapping):
            continue
        if "persistentVolumeClaim" in volume:
            name = as_mapping(volume["persistentVolumeClaim"]).get("claimName")
            if isinstance(name, str) and name:
                claims.append(name)
        elif "ephemeral" in volume:
            ephemeral.append(ephemeral_claim(pod_name, volume))
        else:
            inline.extend(driver for source, driver in MIGRATED.items() if source in volume)
    if not (claims or ephemeral or inline):
        return NO_REFS
    made = tuple(want.storage_class for _, want in new_claims(spec, "")) if ephemeral else ()
    return AttachRefs(tuple(claims), tuple(ephemeral), made, tuple(inline))


def attach_needs(refs: AttachRefs, namespace: str, volumes: Volumes, counted: frozenset[str]) -> Scalars:
    """What the pod's volumes ask of a node's attach counts, of the drivers some node limits (`counted`): one for each
    claim of a CSI (or migrated in-tree) volume, and for each claim not bound yet of a class whose provisioner is a
    CSI driver; a claim or volume not found counts nothing, as kube-scheduler counts an existing pod's. A pod moved
    frees on its node what its replacement takes on another, so each driver counts the more of the pod's and its
    replacement's (whose ephemeral volumes are claimed anew)."""
    if refs is NO_REFS or not counted:
        return ()
    found = Counter(refs.inline)
    found.update(_claim_driver(namespace, name, volumes) for name in refs.claims)
    if refs.ephemeral:
        own = Counter(_claim_driver(namespace, name, volumes) for name in refs.ephemeral)
        anew = Counter(_class_driver(name or volumes.default_class, volumes) for name in refs.new_classes)
        found += own | anew
    scalars = ((scalar_of(driver), count) for driver, count in found.items() if driver)
    return tuple(sorted((name, count) for name, count in scalars if name in counted))


def _claim_driver(namespace: str, name: str, volumes: Volumes) -> str:
    """The driver a claim's volume is attached by: its bound volume's, else its class's while it is not bound; "" when
    the claim or its volume is not found, or nothing attaches it."""
    claim = volumes.claims.get((namespace, name))
    if claim is None:
        return ""
    if not claim.volume:
        return _class_driver(claim.want.storage_class, volumes)
    volume = volumes.volumes.get(claim.volume)
    return volume.driver if volume is not None else ""


def _class_driver(name: str, volumes: Volumes) -> str:
    """The driver a claim of this class not bound yet is counted as (its provisioner); "" when the class is unknown."""
    found = volumes.classes.get(name) if volumes.classes is not None and name else None
    if found is None:
        return ""
    return IN_TREE_PROVISIONERS.get(found.provisioner, found.provisioner)


@dataclass(frozen=True)
class AttachLimits:
    """The CSINodes' attach limits by node name (a node with no CSINode has none) and the VolumeAttachments."""

    limits: Mapping[str, Mapping[str, int]]
    attachments: tuple[Attachment, ...] = ()

    @cached_property
    def counted(self) -> frozenset[str]:
        """The scalars of every driver some node limits: the only ones counted (worked out once; a snapshot and a pin's
        check ask it several times)."""
        return frozenset(scalar_of(driver) for limited in self.limits.values() for driver in limited)


def attach_limits_of(csi_nodes: Iterable[Mapping[str, Any]], attachments: Iterable[Mapping[str, Any]]) -> AttachLimits:
    """The CSINodes and VolumeAttachments as read from the API server."""
    return parsed_attach_limits(map(csi_node_limits, csi_nodes), map(attachment_of, attachments))


def parsed_attach_limits(
    limits: Iterable[tuple[str, Mapping[str, int]]], attachments: Iterable[Attachment | None]
) -> AttachLimits:
    """`attach_limits_of` of objects already read (`csi_node_limits`, `attachment_of`): a watch cache reads each
    once, when it changes."""
    return AttachLimits(
        {node: limited for node, limited in limits if limited},
        tuple(attachment for attachment in attachments if attachment is not None),
    )


def attach_allocatable(limits: Mapping[str, int], counted: frozenset[str]) -> Scalars:
    """A node's room in each counted driver before its pods: its limit, or `UNLIMITED` where its CSINode sets none."""
    return tuple(sorted((name, limits.get(driver_of_scalar(name), UNLIMITED)) for name in counted))


def unclaimed_attachments(
    attachments: Iterable[Attachment], used: Mapping[str, Set[str]], volumes: Volumes, counted: frozenset[str]
) -> dict[str, Scalars]:
    """By node, the VolumeAttachments of CSI volumes that no pod on that node uses (`used`: the volumes its pods'
    claims are bound to), which kube-scheduler counts besides the pods' (a volume still attached after its pod
    left)."""
    found: dict[str, Counter[str]] = defaultdict(Counter)
    for attachment in attachments:
        volume = volumes.volumes.get(attachment.volume)
        if volume is None or not volume.csi or attachment.volume in used.get(attachment.node, ()):
            continue
        name = scalar_of(attachment.driver)
        if name in counted:
            found[attachment.node][name] += 1
    return {node: tuple(sorted(counts.items())) for node, counts in found.items()}


def bound_volumes(refs: AttachRefs, namespace: str, volumes: Volumes) -> frozenset[str]:
    """The volumes a pod's claims are bound to (by name), which a VolumeAttachment to its node attaches for it."""
    names = (volumes.claims.get((namespace, name)) for name in (*refs.claims, *refs.ephemeral))
    return frozenset(claim.volume for claim in names if claim is not None and claim.volume)
