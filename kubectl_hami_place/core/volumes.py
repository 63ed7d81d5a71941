"""Where a pod may go by its PersistentVolumeClaims, as kube-scheduler's VolumeBinding and VolumeZone filters read
them: each claim's bound PersistentVolume keeps the pod off a node its required node affinity does not match (on the
node's labels only, as `CheckNodeAffinity` builds a node of labels alone), and off a node whose zone or region labels
are not among the volume's legacy topology labels' (a node with none of those labels passes)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubectl_hami_place.core.fields import as_mapping
from kubectl_hami_place.core.node_selection import node_allows

VOLUME_BINDING, VOLUME_ZONE = "VolumeBinding", "VolumeZone"
"""kube-scheduler's names of the two filters, which `why` gives as the reason a node is out."""
VOLUME_REFUSALS = (
    "didn't match PersistentVolume's node affinity",
    "had volume node affinity conflict",
    "had no available volume zone",
)
"""kube-scheduler's words for a node a bound volume keeps the pod off (VolumeBinding's ErrReasonNodeConflict, in
1.25+ and in 1.24's words; VolumeZone's ErrReasonConflict): what `volume_reach` reads once every claim is bound."""
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


@dataclass(frozen=True)
class Volume:
    """A PersistentVolume as the two filters read it: its required nodeSelectorTerms (None: any node), each legacy
    topology label's values, and why it cannot be read ("" when it can)."""

    name: str
    terms: tuple[Mapping[str, Any], ...] | None = None
    zones: tuple[tuple[str, frozenset[str]], ...] = ()
    unread: str = ""

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
    source = next((key for key in IN_TREE if key in spec), "")
    if source:
        return Volume(name, unread=f"volume {name} is an in-tree {source} volume, whose CSI translation is not read")
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
    return Volume(name, terms, tuple(zones))


@dataclass(frozen=True)
class Claim:
    """A PersistentVolumeClaim as a pod's placement reads it: the volume it is bound to ("" while unbound) and
    whether it is being deleted."""

    volume: str
    deleting: bool = False


def claim_of(claim: Mapping[str, Any]) -> tuple[tuple[str, str], Claim]:
    """A PersistentVolumeClaim object by (namespace, name)."""
    metadata = as_mapping(claim.get("metadata"))
    key = (str(metadata.get("namespace", "")), str(metadata.get("name", "")))
    bound = as_mapping(claim.get("spec")).get("volumeName")
    return key, Claim(bound if isinstance(bound, str) else "", bool(metadata.get("deletionTimestamp")))


@dataclass(frozen=True)
class Volumes:
    """Every claim and volume read, and which nodes each volume keeps pods off, worked out once per volume: one
    `Volumes` serves the nodes of one snapshot."""

    claims: Mapping[tuple[str, str], Claim]
    volumes: Mapping[str, Volume]
    _kept_off: dict[str, Mapping[str, tuple[str, str]]] = field(default_factory=dict, compare=False, repr=False)

    def kept_off(self, volume: Volume, labels: Mapping[str, Mapping[str, Any]]) -> Mapping[str, tuple[str, str]]:
        """The nodes (of `labels`, each node's labels) the volume keeps pods off, with the filter and why."""
        if volume.name not in self._kept_off:
            found = ((node, volume.keeps_off(have)) for node, have in labels.items())
            self._kept_off[volume.name] = {node: why for node, why in found if why is not None}
        return self._kept_off[volume.name]


def volumes_of(claims: Iterable[Mapping[str, Any]], volumes: Iterable[Mapping[str, Any]]) -> Volumes:
    """The claims and volumes as read from the API server (or a watch cache)."""
    read = (volume_of(volume) for volume in volumes)
    return Volumes(dict(map(claim_of, claims)), {volume.name: volume for volume in read})


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
    """The claims the pod mounts (an ephemeral volume's is `<pod>-<volume>`), or why they cannot be known: a
    replacement of the pod (`replacement`) gets a new claim for each ephemeral volume, bound where it is provisioned."""
    volumes = spec.get("volumes")
    names = []
    for volume in volumes if isinstance(volumes, list | tuple) else ():
        if not isinstance(volume, Mapping):
            continue
        if "ephemeral" in volume:
            if replacement:
                return f"its ephemeral volume {volume.get('name', '')} is claimed anew by a replacement"
            names.append(f"{pod_name}-{volume.get('name', '')}")
        elif "persistentVolumeClaim" in volume:
            claim = as_mapping(volume.get("persistentVolumeClaim")).get("claimName")
            if not isinstance(claim, str) or not claim:
                return f"its volume {volume.get('name', '')} names no claim"
            names.append(claim)
    return tuple(names)


def volume_reach(
    spec: Mapping[str, Any],
    namespace: str,
    pod_name: str,
    volumes: Volumes,
    labels: Mapping[str, Mapping[str, Any]],
    *,
    replacement: bool,
) -> VolumeReach:
    """Where the pod's bound volumes let it (or, `replacement`, a pod its controller makes in its place) run among the
    nodes of `labels`; unread when a claim is missing, unbound, being deleted, or its volume missing or unread."""
    names = claim_names(spec, pod_name, replacement=replacement)
    if isinstance(names, str):
        return VolumeReach(unread=names)
    kept: dict[str, tuple[str, str]] = {}
    for name in names:
        claim = volumes.claims.get((namespace, name))
        if claim is None:
            return VolumeReach(unread=f"its claim {name} was not found")
        if claim.deleting:
            return VolumeReach(unread=f"its claim {name} is being deleted")
        if not claim.volume:
            return VolumeReach(unread=f"its claim {name} is not bound")
        volume = volumes.volumes.get(claim.volume)
        if volume is None:
            return VolumeReach(unread=f"its claim {name}'s volume {claim.volume} was not found")
        if volume.unread:
            return VolumeReach(unread=f"its claim {name}'s {volume.unread}")
        for node, why in volumes.kept_off(volume, labels).items():
            if node not in kept or (why[0] == VOLUME_BINDING and kept[node][0] != VOLUME_BINDING):
                kept[node] = why
    return VolumeReach(kept) if kept else NO_CLAIM
