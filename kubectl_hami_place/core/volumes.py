"""Where a pod may go by its PersistentVolumeClaims, as kube-scheduler's VolumeBinding and VolumeZone filters read
them: each claim's bound PersistentVolume keeps the pod off a node its required node affinity does not match (on the
node's labels only, as `CheckNodeAffinity` builds a node of labels alone), and off a node whose zone or region labels
are not among the volume's legacy topology labels' (a node with none of those labels passes). A claim whose
StorageClass waits for its pod (WaitForFirstConsumer) keeps the pod off a node where no available volume matches it
and its class cannot provision one (`FindPodVolumes`)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import ROUND_CEILING, Decimal
from functools import cached_property
from typing import TYPE_CHECKING, Any

from kubectl_hami_place.core.errors import ModelError
from kubectl_hami_place.core.fields import as_mapping
from kubectl_hami_place.core.names import HOSTNAME_LABEL
from kubectl_hami_place.core.node_selection import node_allows
from kubectl_hami_place.core.requests import parse_quantity
from kubectl_hami_place.core.selectors import LabelSelector, matches, selector_from_dict

if TYPE_CHECKING:
    from kubectl_hami_place.core.attach_limits import AttachLimits

VOLUME_BINDING, VOLUME_ZONE = "VolumeBinding", "VolumeZone"
"""kube-scheduler's names of the two filters, which `why` gives as the reason a node is out."""
VOLUME_REFUSALS = (
    "didn't match PersistentVolume's node affinity",
    "had volume node affinity conflict",
    "had no available volume zone",
    "didn't find available persistent volumes to bind",
    "did not have enough free storage",
)
"""kube-scheduler's words for a node a claim keeps the pod off (VolumeBinding's ErrReasonNodeConflict, in 1.25+ and
in 1.24's words, its ErrReasonBindConflict and ErrReasonNotEnoughSpace; VolumeZone's ErrReasonConflict): what
`volume_reach` reads once every claim is read."""
UNREAD_CLAIMS = "pods that claim a volume stay on their nodes"
UNREAD_CLASSES = "where a claim not bound yet may bind stays unread"
UNREAD_CAPACITIES = "where a capacity-checking driver may provision stays unread"
"""What a plan leaves unread without the claims and volumes, without the StorageClasses and CSIDrivers, and without
the CSIStorageCapacities: the words the CLI and the controller say when they may not read them."""
BETA_CLASS = "volume.beta.kubernetes.io/storage-class"
"""The annotation a claim or volume names its StorageClass by, read before spec.storageClassName (as kube-scheduler
reads it)."""
SELECTED_NODE = "volume.kubernetes.io/selected-node"
"""The node kube-scheduler chose for a claim being provisioned: the pod may go there only."""
DEFAULT_CLASS = ("storageclass.kubernetes.io/is-default-class", "storageclass.beta.kubernetes.io/is-default-class")
"""The annotations ("true") that make a StorageClass the one a claim naming none gets at admission."""
NO_PROVISIONER = "kubernetes.io/no-provisioner"
"""The provisioner of a class whose volumes are made by hand (local volumes): it provisions none."""
FILESYSTEM = "Filesystem"
BETA_ZONE, BETA_REGION = "failure-domain.beta.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/region"
ZONE, REGION = "topology.kubernetes.io/zone", "topology.kubernetes.io/region"
ZONE_LABELS = (BETA_ZONE, BETA_REGION, ZONE, REGION)
"""The labels VolumeZone matches between a volume and a node (a beta key on the volume matches the GA key too)."""
IN_TREE = (
    "awsElasticBlockStore",
    "gcePersistentDisk",
    "azureDisk",
    "azureFile",
    "cinder",
    "vsphereVolume",
    "portworxVolume",
)
"""Volume sources kube-scheduler translates to CSI before it reads their node affinity, which this module does not."""
MIGRATIONS = (
    ("awsElasticBlockStore", "kubernetes.io/aws-ebs", "ebs.csi.aws.com"),
    ("gcePersistentDisk", "kubernetes.io/gce-pd", "pd.csi.storage.gke.io"),
    ("azureDisk", "kubernetes.io/azure-disk", "disk.csi.azure.com"),
    ("cinder", "kubernetes.io/cinder", "cinder.csi.openstack.org"),
    ("portworxVolume", "kubernetes.io/portworx-volume", "pxd.portworx.com"),
)
"""The in-tree volume sources kube-scheduler counts toward the attach limit of the CSI driver they migrate to (those
`isCSIMigrationOn` names; Azure File's and vSphere's are not counted): each source, the in-tree provisioner a
StorageClass names for it, and the driver."""
MIGRATED = {source: driver for source, _, driver in MIGRATIONS}
"""The migrated driver by in-tree volume source."""


@dataclass(frozen=True)
class Offer:
    """What a volume offers a claim that waits for its pod, as `FindMatchingVolume` checks it on any node: the claim it
    is reserved for (namespace, name, UID; None: none), its class, size, access and volume modes, attributes class,
    labels, and whether it is available and being deleted."""

    reserved: tuple[str, str, str] | None = None
    storage_class: str = ""
    capacity: Decimal = Decimal(0)
    access_modes: frozenset[str] = frozenset()
    volume_mode: str = FILESYSTEM
    attributes_class: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    available: bool = False
    deleting: bool = False


@dataclass(frozen=True)
class Volume:
    """A PersistentVolume as the two filters read it: its required nodeSelectorTerms (None: any node), each legacy
    topology label's values, why it cannot be read once bound ("" when it can), what it offers a waiting claim, and the
    CSI driver that attaches it ("" for none; an in-tree source's migrated driver) and whether its source is CSI's own
    (only those are counted by their VolumeAttachments)."""

    name: str
    terms: tuple[Mapping[str, Any], ...] | None = None
    zones: tuple[tuple[str, frozenset[str]], ...] = ()
    unread: str = ""
    offer: Offer = field(default_factory=Offer)
    driver: str = ""
    csi: bool = False

    def keeps_off(self, labels: Mapping[str, Any]) -> tuple[str, str] | None:
        """The filter and the words of why the volume keeps a pod off a node of these labels; None when it does not."""
        if self.terms is not None and not node_allows(self.terms, "", labels):
            return VOLUME_BINDING, f"its volume {self.name}'s node affinity excludes it"
        if not self.zones or not any(key in labels for key in ZONE_LABELS):
            return None
        for key, values in self.zones:
            value = labels.get(key, labels.get(_ga(key)))
            if value is None or str(value) not in values:
                return VOLUME_ZONE, f"its volume {self.name} is in {key}={'__'.join(sorted(values))}"
        return None


def _ga(key: str) -> str:
    """The GA label a beta topology label matches on a node (translateToGALabel)."""
    return {BETA_ZONE: ZONE, BETA_REGION: REGION}.get(key, key)


def volume_of(volume: Mapping[str, Any]) -> Volume:
    """A PersistentVolume object as the filters read it; a label whose zone list does not parse is skipped, as
    VolumeZone skips it."""
    metadata, spec = as_mapping(volume.get("metadata")), as_mapping(volume.get("spec"))
    name = str(metadata.get("name", ""))
    required = as_mapping(spec.get("nodeAffinity")).get("required")
    terms = None
    if isinstance(required, Mapping):
        listed = required.get("nodeSelectorTerms")
        terms = tuple(t for t in listed if isinstance(t, Mapping)) if isinstance(listed, list) else ()
    labels = as_mapping(metadata.get("labels"))
    zones = []
    for key in ZONE_LABELS:
        value = labels.get(key)
        if isinstance(value, str):
            parts = [part.strip() for part in value.split("__")]
            if all(parts):
                zones.append((key, frozenset(parts)))
    source = next((key for key in IN_TREE if key in spec), "")
    unread = f"volume {name} is an in-tree {source} volume, whose CSI translation is not read" if source else ""
    offer = _offer(metadata, spec, as_mapping(volume.get("status")))
    csi = as_mapping(spec.get("csi")).get("driver")
    driver = csi if isinstance(csi, str) else MIGRATED.get(source, "")
    return Volume(name, terms, tuple(zones), unread, offer, driver, isinstance(csi, str))


def _offer(metadata: Mapping[str, Any], spec: Mapping[str, Any], status: Mapping[str, Any]) -> Offer:
    """What the volume offers a waiting claim; one whose size does not parse offers nothing (it is never available
    nor reserved)."""
    reserved = as_mapping(spec.get("claimRef"))
    try:
        capacity = parse_quantity(as_mapping(spec.get("capacity")).get("storage", 0), "capacity.storage")
    except ModelError:
        return Offer()
    return Offer(
        reserved=(
            (str(reserved.get("namespace", "")), str(reserved.get("name", "")), str(reserved.get("uid") or ""))
            if reserved
            else None
        ),
        storage_class=_class_name(metadata, spec),
        capacity=capacity,
        access_modes=_strings(spec.get("accessModes")),
        volume_mode=str(spec.get("volumeMode") or FILESYSTEM),
        attributes_class=str(spec.get("volumeAttributesClassName") or ""),
        labels={str(key): str(value) for key, value in as_mapping(metadata.get("labels")).items()},
        available=status.get("phase") == "Available",
        deleting=bool(metadata.get("deletionTimestamp")),
    )


def _class_name(metadata: Mapping[str, Any], spec: Mapping[str, Any]) -> str:
    """A claim's or volume's StorageClass: the beta annotation first, then spec.storageClassName ("" for none)."""
    annotated = as_mapping(metadata.get("annotations")).get(BETA_CLASS)
    if isinstance(annotated, str):
        return annotated
    named = spec.get("storageClassName")
    return named if isinstance(named, str) else ""


def _strings(listed: object) -> frozenset[str]:
    """The strings of a list field (none when it is not a list)."""
    return frozenset(str(item) for item in listed) if isinstance(listed, list) else frozenset()


@dataclass(frozen=True)
class Want:
    """What an unbound claim asks of a volume, as `FindMatchingVolume` and `checkVolumeProvisions` read it: its UID,
    class, size (None: no size asked), access and volume modes, attributes class, selector, the node chosen for its
    provisioning (None: none yet), and why it cannot be read ("" when it can)."""

    uid: str = ""
    storage_class: str = ""
    requested: Decimal | None = None
    access_modes: frozenset[str] = frozenset()
    volume_mode: str = FILESYSTEM
    attributes_class: str = ""
    selector: LabelSelector | None = None
    selected_node: str | None = None
    unread: str = ""


@dataclass(frozen=True)
class Claim:
    """A PersistentVolumeClaim as a pod's placement reads it: the volume it is bound to ("" while unbound), whether it
    is being deleted, and what it asks of a volume while unbound."""

    volume: str
    deleting: bool = False
    want: Want = field(default_factory=Want)


def claim_of(claim: Mapping[str, Any]) -> tuple[tuple[str, str], Claim]:
    """A PersistentVolumeClaim object by (namespace, name)."""
    metadata, spec = as_mapping(claim.get("metadata")), as_mapping(claim.get("spec"))
    key = (str(metadata.get("namespace", "")), str(metadata.get("name", "")))
    volume = _bound_to(spec)
    return key, Claim(volume, bool(metadata.get("deletionTimestamp")), Want() if volume else _want(metadata, spec))


def _bound_to(spec: Mapping[str, Any]) -> str:
    """The volume a claim's spec is bound to ("" while unbound)."""
    bound = spec.get("volumeName")
    return bound if isinstance(bound, str) else ""


def _want(metadata: Mapping[str, Any], spec: Mapping[str, Any]) -> Want:
    """What an unbound claim asks; unread when its size or selector does not parse (kube-scheduler errs on both)."""
    selected = as_mapping(metadata.get("annotations")).get(SELECTED_NODE)
    asked = as_mapping(as_mapping(spec.get("resources")).get("requests")).get("storage")
    try:
        requested = None if asked is None else parse_quantity(asked, "resources.requests.storage")
        selector = None if spec.get("selector") is None else selector_from_dict(spec.get("selector"))
    except ModelError as err:
        return Want(unread=f"cannot be read: {err}")
    return Want(
        uid=str(metadata.get("uid") or ""),
        storage_class=_class_name(metadata, spec),
        requested=requested,
        access_modes=_strings(spec.get("accessModes")),
        volume_mode=str(spec.get("volumeMode") or FILESYSTEM),
        attributes_class=str(spec.get("volumeAttributesClassName") or ""),
        selector=selector,
        selected_node=selected if isinstance(selected, str) else None,
    )


@dataclass(frozen=True)
class StorageClass:
    """A StorageClass as VolumeBinding reads it for a claim that waits for its pod: whether it waits
    (WaitForFirstConsumer), its provisioner and its allowedTopologies terms (none: every node); and whether it is a
    default class, and when it was made (the newest default is the one a claim naming none gets)."""

    name: str
    waits: bool
    provisioner: str = ""
    topologies: tuple[Mapping[str, Any], ...] = ()
    default: bool = False
    created: str = ""

    def provisions_on(self, labels: Mapping[str, Any]) -> bool:
        """Whether the class may provision a volume a pod on a node of these labels reaches (MatchTopologySelectorTerms:
        any term whose every expression's key has one of its values; an empty term matches nothing)."""
        if self.provisioner in ("", NO_PROVISIONER):
            return False
        if not self.topologies:
            return True
        for term in self.topologies:
            expressions = [e for e in _listed(term.get("matchLabelExpressions")) if isinstance(e, Mapping)]
            if expressions and all(_topology_holds(e, labels) for e in expressions):
                return True
        return False


def _listed(value: object) -> list[Any]:
    """A list field's items (none when it is not a list)."""
    return value if isinstance(value, list) else []


def _topology_holds(expression: Mapping[str, Any], labels: Mapping[str, Any]) -> bool:
    """One topology requirement: the node's label of its key is one of its values (no values: it errs, and holds
    nowhere)."""
    values = {str(value) for value in _listed(expression.get("values"))}
    have = labels.get(str(expression.get("key", "")))
    return bool(values) and have is not None and str(have) in values


def storage_class_of(storage_class: Mapping[str, Any]) -> StorageClass:
    """A StorageClass object as VolumeBinding reads it (no binding mode: Immediate, the API server's default)."""
    metadata = as_mapping(storage_class.get("metadata"))
    terms = tuple(t for t in _listed(storage_class.get("allowedTopologies")) if isinstance(t, Mapping))
    annotations = as_mapping(metadata.get("annotations"))
    return StorageClass(
        str(metadata.get("name", "")),
        storage_class.get("volumeBindingMode") == "WaitForFirstConsumer",
        str(storage_class.get("provisioner") or ""),
        terms,
        any(annotations.get(key) == "true" for key in DEFAULT_CLASS),
        str(metadata.get("creationTimestamp") or ""),
    )


def default_class(classes: Iterable[StorageClass]) -> str:
    """The class a claim that names none gets at admission (`GetDefaultClass`): the newest default, by name among
    those made at once; "" when there is none."""
    defaults = sorted((c for c in classes if c.default), key=lambda c: c.name)
    return max(defaults, key=lambda c: c.created).name if defaults else ""


@dataclass(frozen=True)
class StorageCapacity:
    """A CSIStorageCapacity as `hasEnoughCapacity` reads it: its class, the largest volume it may provision (its
    maximumVolumeSize, else its capacity; None: neither, or one that does not parse) and the nodes it serves (None:
    none)."""

    storage_class: str
    limit: Decimal | None
    topology: LabelSelector | None

    def serves(self, storage_class: str, size: Decimal, labels: Mapping[str, Any]) -> bool:
        """Whether it may provision a volume of `size` of the class for a pod on a node of these labels (both sizes
        rounded up to whole bytes, as Quantity.Value() does: the limit's rounding alone decides)."""
        if self.storage_class != storage_class or self.limit is None or self.topology is None:
            return False
        return self.limit.to_integral_value(ROUND_CEILING) >= size and matches(self.topology, _string_labels(labels))


def _string_labels(labels: Mapping[str, Any]) -> dict[str, str]:
    """A node's labels as strings, as a label selector matches them."""
    return {str(key): str(value) for key, value in labels.items()}


def storage_capacity_of(capacity: Mapping[str, Any]) -> StorageCapacity:
    """A CSIStorageCapacity object as `hasEnoughCapacity` reads it; a size or topology that does not parse serves no
    node (kube-scheduler logs it and passes over the object)."""
    storage_class = str(capacity.get("storageClassName") or "")
    size = capacity.get("maximumVolumeSize", capacity.get("capacity"))
    try:
        limit = None if size is None else parse_quantity(size, "capacity")
    except ModelError:
        limit = None
    topology = capacity.get("nodeTopology")
    try:
        selector = None if topology is None else selector_from_dict(topology)
    except ModelError:
        selector = None
    return StorageCapacity(storage_class, limit, selector)


def capacity_driver_of(driver: Mapping[str, Any]) -> str:
    """A CSIDriver's name when it asks kube-scheduler to check its storage capacity (spec.storageCapacity), else ""."""
    checks = as_mapping(driver.get("spec")).get("storageCapacity") is True
    return str(as_mapping(driver.get("metadata")).get("name", "")) if checks else ""


@dataclass(frozen=True)
class Volumes:
    """Every claim and volume read, the StorageClasses, the CSI drivers that check storage capacity and the
    CSIStorageCapacities (each None: not read), the nodes' CSI attach limits and VolumeAttachments (None: no limit
    counted), and which nodes each volume keeps pods off, worked out once per volume: one `Volumes` serves the nodes of
    one snapshot."""

    claims: Mapping[tuple[str, str], Claim]
    volumes: Mapping[str, Volume]
    classes: Mapping[str, StorageClass] | None = None
    capacity_drivers: frozenset[str] | None = None
    capacities: tuple[StorageCapacity, ...] | None = None
    attach: AttachLimits | None = None
    _kept_off: dict[str, Mapping[str, tuple[str, str]]] = field(default_factory=dict, compare=False, repr=False)
    _new_unmet: dict[tuple[tuple[str, Want], ...], Mapping[str, tuple[str, str]] | str | None] = field(
        default_factory=dict, compare=False, repr=False
    )

    def kept_off(self, volume: Volume, labels: Mapping[str, Mapping[str, Any]]) -> Mapping[str, tuple[str, str]]:
        """The nodes (of `labels`, each node's labels) the volume keeps pods off, with the filter and why."""
        if volume.name not in self._kept_off:
            found = ((node, volume.keeps_off(have)) for node, have in labels.items())
            self._kept_off[volume.name] = {node: why for node, why in found if why is not None}
        return self._kept_off[volume.name]

    @cached_property
    def default_class(self) -> str:
        """The class a claim that names none gets at admission (`default_class`), worked out once: "" when the
        classes were not read or none is a default."""
        return default_class(self.classes.values()) if self.classes is not None else ""

    def new_claims_unmet(
        self, made: tuple[tuple[str, Want], ...], labels: Mapping[str, Mapping[str, Any]]
    ) -> Mapping[str, tuple[str, str]] | str | None:
        """`_waiting_unmet` for the claims a replacement's ephemeral volumes get anew (by volume name), worked out once
        per such set: the replicas of a template ask alike, and no volume is reserved for a claim not made yet
        (`_offered` matches it to no claimRef)."""
        if made not in self._new_unmet:
            waiting = [_Waiting(f"ephemeral volume {name}'s new claim", "", want) for name, want in made]
            self._new_unmet[made] = _waiting_unmet(waiting, "", self, labels)
        return self._new_unmet[made]


def volumes_of(
    claims: Iterable[Mapping[str, Any]],
    volumes: Iterable[Mapping[str, Any]],
    classes: Iterable[Mapping[str, Any]] | None = None,
    drivers: Iterable[Mapping[str, Any]] | None = None,
    capacities: Iterable[Mapping[str, Any]] | None = None,
    *,
    attach: AttachLimits | None = None,
) -> Volumes:
    """The claims and volumes as read from the API server, with the StorageClasses, CSI drivers and
    CSIStorageCapacities when read (None: a claim that waits for its pod, or needs them, stays unread), and the
    attach limits (`attach_limits.attach_limits_of`; None: none counted)."""
    return parsed_volumes(
        map(claim_of, claims),
        map(volume_of, volumes),
        None if classes is None else map(storage_class_of, classes),
        None if drivers is None else map(capacity_driver_of, drivers),
        None if capacities is None else map(storage_capacity_of, capacities),
        attach=attach,
    )


def parsed_volumes(
    claims: Iterable[tuple[tuple[str, str], Claim]],
    volumes: Iterable[Volume],
    classes: Iterable[StorageClass] | None = None,
    drivers: Iterable[str] | None = None,
    capacities: Iterable[StorageCapacity] | None = None,
    *,
    attach: AttachLimits | None = None,
) -> Volumes:
    """`volumes_of` of objects already read (`claim_of`, `volume_of`, `storage_class_of`, `capacity_driver_of`,
    `storage_capacity_of`): a watch cache reads each once, when it changes, not at every snapshot."""
    return Volumes(
        dict(claims),
        {volume.name: volume for volume in volumes},
        None if classes is None else {c.name: c for c in classes},
        None if drivers is None else frozenset(name for name in drivers if name),
        None if capacities is None else tuple(capacities),
        attach,
    )


def waits_unbound(claims: Iterable[Mapping[str, Any]]) -> bool:
    """Whether a claim is unbound: only then are the StorageClasses, CSI drivers and CSIStorageCapacities read."""
    return any(not _bound_to(as_mapping(claim.get("spec"))) for claim in claims)


def is_claim(volume: object) -> bool:
    """Whether a pod's volume is a claim: its own PersistentVolumeClaim or an ephemeral volume's."""
    return isinstance(volume, Mapping) and ("persistentVolumeClaim" in volume or "ephemeral" in volume)


@dataclass(frozen=True)
class VolumeReach:
    """Where a pod's claims let it go: the nodes they keep it off, each with the filter and why, or why they cannot be
    read (`unread`, and then no node is known to be out)."""

    kept_off: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    unread: str = ""


NO_CLAIM = VolumeReach()


def claim_names(spec: Mapping[str, Any], pod_name: str, *, replacement: bool) -> tuple[str, ...] | str:
    """The claims the pod mounts (an ephemeral volume's is `<pod>-<volume>`), or why they cannot be known; a
    replacement of the pod (`replacement`) gets a new claim for each ephemeral volume instead (`new_claims`)."""
    volumes = spec.get("volumes")
    names = []
    for volume in volumes if isinstance(volumes, list | tuple) else ():
        if not isinstance(volume, Mapping):
            continue
        if "ephemeral" in volume:
            if not replacement:
                names.append(ephemeral_claim(pod_name, volume))
        elif "persistentVolumeClaim" in volume:
            claim = as_mapping(volume.get("persistentVolumeClaim")).get("claimName")
            if not isinstance(claim, str) or not claim:
                return f"its volume {volume.get('name', '')} names no claim"
            names.append(claim)
    return tuple(names)


def ephemeral_claim(pod_name: str, volume: Mapping[str, Any]) -> str:
    """The name of the claim an ephemeral volume of the pod gets (`<pod>-<volume>`)."""
    return f"{pod_name}-{volume.get('name', '')}"


def new_claims(spec: Mapping[str, Any], default: str) -> tuple[tuple[str, Want], ...]:
    """What the claim a replacement's ephemeral volume gets anew asks, by the volume's name: its volumeClaimTemplate,
    of the default class `default` when it names none (the DefaultStorageClass admission's)."""
    volumes = spec.get("volumes")
    made = []
    for volume in volumes if isinstance(volumes, list | tuple) else ():
        if isinstance(volume, Mapping) and "ephemeral" in volume:
            template = as_mapping(as_mapping(volume.get("ephemeral")).get("volumeClaimTemplate"))
            metadata, asked = as_mapping(template.get("metadata")), as_mapping(template.get("spec"))
            # the beta annotation, when the template has it, names the class before either (`_class_name`)
            named = asked if isinstance(asked.get("storageClassName"), str) else {**asked, "storageClassName": default}
            made.append((str(volume.get("name", "")), _want(metadata, named)))
    return tuple(made)


def volume_reach(
    spec: Mapping[str, Any],
    namespace: str,
    pod_name: str,
    volumes: Volumes,
    labels: Mapping[str, Mapping[str, Any]],
    *,
    replacement: bool,
) -> VolumeReach:
    """Where the pod's volumes let it (or, `replacement`, a pod its controller makes in its place, whose ephemeral
    volumes are claimed anew) run among the nodes of `labels`; unread when a claim is missing, being deleted, or its
    volume missing or unread, or when a claim not bound yet cannot be read (`_waiting_unmet`)."""
    names = claim_names(spec, pod_name, replacement=replacement)
    if isinstance(names, str):
        return VolumeReach(unread=names)
    kept: dict[str, tuple[str, str]] = {}
    waiting: list[_Waiting] = []
    for name in names:
        claim = volumes.claims.get((namespace, name))
        if claim is None:
            return VolumeReach(unread=f"its claim {name} was not found")
        if claim.deleting:
            return VolumeReach(unread=f"its claim {name} is being deleted")
        if not claim.volume:
            waiting.append(_Waiting(f"claim {name}", name, claim.want))
            continue
        volume = volumes.volumes.get(claim.volume)
        if volume is None:
            return VolumeReach(unread=f"its claim {name}'s volume {claim.volume} was not found")
        if volume.unread:
            return VolumeReach(unread=f"its claim {name}'s {volume.unread}")
        for node, why in volumes.kept_off(volume, labels).items():
            if node not in kept or (why[0] == VOLUME_BINDING and kept[node][0] != VOLUME_BINDING):
                kept[node] = why
    if replacement and waiting:
        # A claim unbound while its pod runs: nothing says where it would bind.
        return VolumeReach(unread=f"its {waiting[0].label} is not bound")
    unmet: Mapping[str, tuple[str, str]] | str | None = {}
    unread = ""
    if replacement:
        made = new_claims(spec, volumes.default_class)
        unmet = volumes.new_claims_unmet(made, labels) if made else {}
        unread = f"its ephemeral volume {made[0][0]} is claimed anew by a replacement" if made else ""
    elif waiting:
        unmet, unread = _waiting_unmet(waiting, namespace, volumes, labels), f"its {waiting[0].label} is not bound"
    if unmet is None or isinstance(unmet, str):
        return VolumeReach(unread=unmet or unread)
    for node, why in unmet.items():
        kept.setdefault(node, why)
    return VolumeReach(kept) if kept else NO_CLAIM


@dataclass(frozen=True)
class _Waiting:
    """A claim not bound yet: how messages name it, its name (a volume may be reserved for it; "" for a claim a
    replacement will make) and what it asks."""

    label: str
    name: str
    want: Want


def _waiting_unmet(
    waiting: list[_Waiting], namespace: str, volumes: Volumes, labels: Mapping[str, Mapping[str, Any]]
) -> Mapping[str, tuple[str, str]] | str | None:
    """For claims not bound yet, each node where one of them finds neither an available volume nor a class that may
    provision one (one whose CSI driver checks storage capacity: with a CSIStorageCapacity that serves the node), with
    why (`FindPodVolumes`: the claims by size, each taking the smallest match left); or why they cannot be read: the
    classes not read (None), a claim that does not wait for its pod (kube-scheduler refuses the pod everywhere until it
    is bound), a driver's storage capacity not read."""
    if volumes.classes is None:
        return None
    classes: dict[str, StorageClass] = {}
    for claim in waiting:
        if claim.want.unread:
            return f"its {claim.label} {claim.want.unread}"
        found = volumes.classes.get(claim.want.storage_class) if claim.want.storage_class else None
        if found is None or not found.waits:
            return f"its {claim.label} is not bound, and its storage class does not wait for a pod to bind it"
        classes[claim.label] = found
    ordered = sorted(waiting, key=lambda claim: claim.want.requested or Decimal(0))
    reach = _Reach(labels)
    offered = {claim.label: _offered(claim, namespace, volumes.volumes.values(), reach) for claim in ordered}
    unmet: dict[str, tuple[str, str]] = {}
    served = _Served(volumes.capacities or ())
    for node, have in labels.items():
        chosen: set[str] = set()
        for claim in ordered:
            selected, storage_class = claim.want.selected_node, classes[claim.label]
            match = None if selected is not None else offered[claim.label].take(node, chosen)
            if match is not None:
                continue
            if selected not in (None, node) or not storage_class.provisions_on(have):
                unmet[node] = (VOLUME_BINDING, f"no volume can be bound or provisioned there for its {claim.label}")
                break
            size, provisioner, checked = claim.want.requested, storage_class.provisioner, volumes.capacity_drivers
            if size is None or (checked is not None and provisioner not in checked):
                continue
            if checked is None or volumes.capacities is None:
                return f"its {claim.label} would be provisioned by {provisioner}, whose storage capacity is not read"
            if not served.serves(storage_class.name, size, have):
                unmet[node] = (VOLUME_BINDING, f"{provisioner} has no storage there for its {claim.label}")
                break
    return unmet


class _Served:
    """The CSIStorageCapacities by the first label their nodeTopology asks (a driver publishes one per node or
    segment, by label): a node is looked up among those of its labels, not matched against every capacity."""

    def __init__(self, capacities: Iterable[StorageCapacity]) -> None:
        self.by_label: dict[tuple[str, str], list[StorageCapacity]] = defaultdict(list)
        self.others: list[StorageCapacity] = []
        for capacity in capacities:
            first = capacity.topology.match_labels[:1] if capacity.topology is not None else ()
            (self.by_label[first[0]] if first else self.others).append(capacity)

    def serves(self, storage_class: str, size: Decimal, labels: Mapping[str, Any]) -> bool:
        """Whether a capacity of the class may provision a volume of `size` for a pod on a node of these labels."""
        labelled = (c for key, value in labels.items() for c in self.by_label.get((str(key), str(value)), ()))
        return any(c.serves(storage_class, size, labels) for c in (*self.others, *labelled))


class _Reach:
    """The nodes a volume's node affinity lets a pod reach, by hostname when that is all it asks (a local volume's)."""

    def __init__(self, labels: Mapping[str, Mapping[str, Any]]) -> None:
        self.labels = labels
        self.by_hostname: dict[str, list[str]] = defaultdict(list)
        for node, have in labels.items():
            if HOSTNAME_LABEL in have:
                self.by_hostname[str(have[HOSTNAME_LABEL])].append(node)

    def nodes(self, volume: Volume) -> Iterable[str]:
        """The nodes the volume reaches (CheckNodeAffinity, on the node's labels alone)."""
        if volume.terms is None:
            return self.labels
        hosts = _hostnames(volume.terms)
        if hosts is not None:
            return [node for host in hosts for node in self.by_hostname.get(host, ())]
        return [node for node, have in self.labels.items() if node_allows(volume.terms, "", have)]


def _hostnames(terms: tuple[Mapping[str, Any], ...]) -> list[str] | None:
    """The hostnames of node affinity that is one term of one `hostname In (...)` requirement; None for any other."""
    if len(terms) != 1 or set(terms[0]) - {"matchExpressions"}:
        return None
    expressions = _listed(terms[0].get("matchExpressions"))
    if len(expressions) != 1 or not isinstance(expressions[0], Mapping):
        return None
    only = expressions[0]
    if only.get("key") != HOSTNAME_LABEL or only.get("operator") != "In":
        return None
    return sorted({str(value) for value in _listed(only.get("values"))})


@dataclass(frozen=True)
class _Offered:
    """The volumes a waiting claim may take, by node: the one reserved for it (its name and the nodes it reaches; then
    only it), else those it matches on any node, smallest first."""

    reserved: tuple[str, frozenset[str]] | None
    by_node: Mapping[str, list[str]]

    def take(self, node: str, chosen: set[str]) -> str | None:
        """The volume the claim takes on the node (added to `chosen`, the node's volumes taken), None for none."""
        if self.reserved is not None:
            return self.reserved[0] if node in self.reserved[1] else None
        match = next((name for name in self.by_node.get(node, ()) if name not in chosen), None)
        if match is not None:
            chosen.add(match)
        return match


def _offered(claim: _Waiting, namespace: str, volumes: Iterable[Volume], reach: _Reach) -> _Offered:
    """The claim's volumes (`FindMatchingVolume`): one reserved for it binds it on the nodes it reaches and nowhere
    else; any other must be available, of its class, as large, of its modes and attributes class, labelled as its
    selector asks and not being deleted."""
    want = claim.want
    found: list[Volume] = []
    for volume in volumes:
        offer = volume.offer
        # A claim a replacement will make (no name yet) is one no volume is reserved for, whatever a claimRef says.
        if offer.reserved is not None and (not claim.name or offer.reserved[:2] != (namespace, claim.name)):
            continue
        if offer.reserved is not None and offer.reserved[2] and offer.reserved[2] != want.uid:
            continue
        if (want.requested or 0) > offer.capacity or want.volume_mode != offer.volume_mode:
            continue
        if want.attributes_class != offer.attributes_class or offer.deleting:
            continue
        if offer.reserved is not None:
            return _Offered((volume.name, frozenset(reach.nodes(volume))), {})
        if not offer.available or offer.storage_class != want.storage_class:
            continue
        if want.selector is not None and not matches(want.selector, offer.labels):
            continue
        if want.access_modes <= offer.access_modes:
            found.append(volume)
    by_node: dict[str, list[str]] = defaultdict(list)
    for volume in sorted(found, key=lambda v: v.offer.capacity):
        for node in reach.nodes(volume):
            by_node[node].append(volume.name)
    return _Offered(None, by_node)
