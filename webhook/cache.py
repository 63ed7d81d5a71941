"""The one in-memory view of the cluster both listeners share: nodes, HAMi's pods and the placements."""

from __future__ import annotations

import itertools
import secrets
import sys
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, fields, replace
from datetime import datetime
from typing import Any, TypeVar, cast

import orjson

from kubectl_hami_place.core.allocations import ALLOCATED_ANNOTATION, NODE_ANNOTATION
from kubectl_hami_place.core.attach_limits import attachment_of, csi_node_limits
from kubectl_hami_place.core.cards import REGISTER_ANNOTATION
from kubectl_hami_place.core.cluster_info import (
    NodeInfo,
    NodeShare,
    counted_allocation,
    fragmentation_of,
    kept_rooms,
    kept_rooms_data,
    node_info,
    node_share,
)
from kubectl_hami_place.core.errors import PlacementError
from kubectl_hami_place.core.fields import rfc3339
from kubectl_hami_place.core.fit import DEVICE_CORDON
from kubectl_hami_place.core.lifecycle import gated, waits_for_room
from kubectl_hami_place.core.names import CLAIM_ANNOTATION, GROUP, ROOM_GATE, USE_GPUUUID_ANNOTATION
from kubectl_hami_place.core.node_resources import Resources, counted_pod, is_scalar
from kubectl_hami_place.core.placement import Placement, placement_from_object
from kubectl_hami_place.core.planner.objects import is_local
from kubectl_hami_place.core.requests import GPU
from kubectl_hami_place.core.reservation import Reservation, RoomKey, reservation_of
from kubectl_hami_place.core.usage import PodAllocation
from kubectl_hami_place.core.volumes import (
    BETA_CLASS,
    capacity_driver_of,
    claim_of,
    is_claim,
    storage_capacity_of,
    storage_class_of,
    volume_of,
)
from kubectl_hami_place.kube.client import ApiClient
from kubectl_hami_place.kube.watch import Reflector, node_reflector, object_key, placement_reflector, pod_reflector

_Part = TypeVar("_Part")
_Key = TypeVar("_Key")
_Item = TypeVar("_Item")
# A pod's entry in the allocation index: the stored pod, what it adds to the cluster-info view, when it entered.
_Entry = tuple[dict[str, Any], PodAllocation | str, int]


class ClusterCache:
    """Three list+watch reflectors, ready once each has completed a full list.

    With `planning` (the defragmentation controller runs) pods and nodes keep also what the planner reads, so that
    its snapshot comes from here rather than from lists of the whole cluster."""

    def __init__(
        self, api_client: ApiClient, scheduler_name: str, *, planning: bool = False, room_key: RoomKey | None = None
    ) -> None:
        # The key that seals the rooms a rescue keeps (see core.reservation); without one, a key of this process's
        # own: the rooms its controller keeps are then honoured by this replica alone.
        self.room_key = room_key if room_key is not None else RoomKey(secrets.token_bytes(32), shared=False)
        self.nodes = node_reflector(api_client, project=project_node_for_planning if planning else project_node)
        self.pods = pod_reflector(
            api_client, scheduler_name, project=project_pod_for_planning if planning else project_pod
        )
        self.placements = placement_reflector(api_client, project=project_placement)
        # The placements as the store keeps them (parsed once per stored version, see project_placement), indexed
        # from the placement events (see _PlacementIndex).
        self._placements = _PlacementIndex()
        self._parsed_lock = threading.Lock()
        self._index_listeners: list[Callable[[Placement | None, Placement | None], None]] = []
        self.placements.add_listener(self._index_placement)
        # (namespace, claim token) -> the pods carrying it, by store key: kept from the pod watch's events, so that
        # the reconciler's every pass does not read all of HAMi's pods to find the few that carry a claim.
        self._claims: dict[tuple[str, str], dict[tuple[str, str], dict[str, Any]]] = {}
        self._claim_of: dict[tuple[str, str], tuple[str, str]] = {}
        self._claims_lock = threading.Lock()
        self.pods.add_listener(self._index_claim)
        # (namespace, name) -> (the stored pod, what it adds to the cluster-info view, when it entered this dict):
        # decoded once per stored version from the pod events, so that GET /api/v1/cluster-info does not decode
        # every allocation again. The same entries by node (the tuples themselves, not copies), so that a node's
        # view reads its pods in the order they entered, as the whole view would; and a version per node, bumped
        # when its pods change.
        self._allocations: dict[tuple[str, str], _Entry] = {}
        self._on_node: dict[str, dict[tuple[str, str], _Entry]] = {}
        self._pod_versions: dict[str, int] = {}
        self._entered = itertools.count(1)  # 0: the version of a node no pod is on
        self._allocations_lock = threading.Lock()
        self.pods.add_listener(self._index_allocation)
        # (namespace, name) -> the room a rescue keeps for that Pending pod: every admission reads these few, not
        # every pod (a pod that is bound, gone or carries a malformed annotation holds none).
        self._reservations: dict[tuple[str, str], Reservation] = {}
        self._reservations_lock = threading.Lock()
        self.pods.add_listener(self._index_reservation)
        # (namespace, name) -> the stored pods that wait (ROOM_GATE, ROOM_ANNOTATION) until the pod their placement
        # evicts is gone: the reconciler's every pass looks at these few.
        self._waiting: dict[tuple[str, str], dict[str, Any]] = {}
        self._waiting_lock = threading.Lock()
        self.pods.add_listener(self._index_waiting)
        # Node name -> its view as served, kept until its node object or its pods' version changes (see
        # cluster_info_document); only a cluster-info request writes it, under this lock.
        self._views: dict[str, _NodeView] = {}
        self._views_lock = threading.Lock()
        self._stop = threading.Event()

    def reflectors(self) -> tuple[Reflector, ...]:
        """Nodes, pods, placements."""
        return (self.nodes, self.pods, self.placements)

    def start(self) -> None:
        """Start listing and watching in daemon threads."""
        for reflector in self.reflectors():
            thread = threading.Thread(
                target=reflector.run, args=(self._stop,), name=f"watch-{reflector.kind}", daemon=True
            )
            thread.start()

    def stop(self) -> None:
        """Stop the watches; their daemon threads end with the process, so shutdown never waits on a read."""
        self._stop.set()
        for reflector in self.reflectors():
            reflector.stop()

    def ready(self) -> bool:
        """True once every kind has been listed in full at least once."""
        return all(reflector.synced.is_set() for reflector in self.reflectors())

    def wait_ready(self, timeout: float) -> bool:
        """Block until ready or timeout; returns readiness."""
        return all(reflector.synced.wait(timeout) for reflector in self.reflectors())

    def last_sync_time(self) -> float | None:
        """The oldest of the three kinds' last sync (epoch seconds): the age of the least fresh part of the view."""
        stamps = [reflector.last_sync for reflector in self.reflectors()]
        if any(stamp is None for stamp in stamps):
            return None
        return min(stamp for stamp in stamps if stamp is not None)

    def nodes_by_name(self) -> Mapping[str, dict[str, Any]]:
        """Every node, by name: a live view of the store, so that an admission reading one node copies none."""
        return _NodesByName(self.nodes)

    def parsed_placements(self, namespace: str | None = None) -> list[Placement]:
        """The placements of one namespace (None: all) that parse, each parsed once per stored version."""
        with self._parsed_lock:
            return self._placements.parsed(namespace)

    def placements_for(self, namespace: str, labels: Mapping[str, str]) -> list[Placement]:
        """What an admission of a pod with these labels reads of one namespace: the open placements whose
        matchLabels it has (or that select by expressions only), and the claimed ones sharing their reqIDs."""
        with self._parsed_lock:
            return self._placements.for_labels(namespace, labels)

    def parsed_placement(self, namespace: str, name: str) -> Placement | None:
        """One placement as the index holds it (None: gone, or its stored spec or status is broken)."""
        with self._parsed_lock:
            return self._placements.one(namespace, name)

    def closed_sharing(self, namespace: str, req_id: str) -> list[Placement]:
        """The placements of the namespace with this reqID that are not open: among them is the one that consumed
        it, if one did."""
        with self._parsed_lock:
            return self._placements.closed(namespace, req_id)

    def placement_keys_on(self, node_name: str) -> list[tuple[str, str]]:
        """(namespace, name) of every parsed placement on the node: what a change of the node may concern."""
        with self._parsed_lock:
            return self._placements.on_node(node_name)

    def placement_keys_sharing(self, namespace: str, req_id: str) -> list[tuple[str, str]]:
        """(namespace, name) of every parsed placement of the namespace with this reqID, open or not."""
        with self._parsed_lock:
            return self._placements.sharing(namespace, req_id)

    def add_index_listener(self, listener: Callable[[Placement | None, Placement | None], None]) -> None:
        """Call listener(old, new) after a placement event replaced the parsed version indexed under its key (None:
        none, or broken), so that a listener still sees what the old version was."""
        self._index_listeners.append(listener)

    def _index_placement(self, _kind: str, obj: dict[str, Any]) -> None:
        """Follow one placement event: whatever the event, the index takes what the store holds now, so that two
        writers notifying out of order still leave the newest version indexed."""
        namespace, name = object_key(obj)
        with self._parsed_lock:
            replaced = self._placements.update(namespace, name, self.placements.get(namespace, name))
        if replaced is not None:
            for listener in self._index_listeners:
                listener(*replaced)

    def pods_by_claim(self, claims: Iterable[tuple[str, str]] | None = None) -> dict[tuple[str, str], dict[str, Any]]:
        """(namespace, claim token) -> the stored pod carrying that token (the last stored, when copies carry it
        too), of every claim or of these only; ties a claim to its pod."""
        with self._claims_lock:
            if claims is None:
                return {claim: list(pods.values())[-1] for claim, pods in self._claims.items()}
            return {claim: list(pods.values())[-1] for claim in claims if (pods := self._claims.get(claim))}

    def cluster_info_document(self, now: datetime) -> dict[str, Any]:
        """`core.cluster_info.cluster_info(nodes, <the kept allocations>, now).to_dict()` with each node encoded (bytes,
        see json_pieces), built again only for the nodes whose object or pods changed since the last request (the
        rest is reused), and the rooms kept now (their seals checked as the pod watch saw them)."""
        nodes = self.nodes.items()
        with self._views_lock:
            views: dict[str, _NodeView] = {}
            stale = []
            with self._allocations_lock:
                warnings = [counted for _pod, counted, _ in self._allocations.values() if isinstance(counted, str)]
                for node in nodes:
                    name = str((node.get("metadata") or {}).get("name") or "")
                    version = self._pod_versions.get(name, 0)
                    known = self._views.get(name)
                    if known is not None and known.node is node and known.version == version:
                        views[name] = known
                    elif name:
                        pods = sorted(self._on_node.get(name, {}).values(), key=lambda entry: entry[2])
                        allocations = [entry[1] for entry in pods if isinstance(entry[1], PodAllocation)]
                        stale.append((name, node, version, allocations))
            for name, node, version, allocations in stale:
                views[name] = _NodeView.of(node, version, node_info(node, allocations))
            self._views = views
        shown = [views[name] for name in sorted(views) if views[name].share is not None]
        fragmentation = fragmentation_of([view.share for view in shown if view.share is not None]).to_dict()
        fragmentation["nodes"] = [view.encoded_share for view in shown]
        return {
            "generatedAt": rfc3339(now),
            "nodes": [view.encoded for view in shown],
            "fragmentation": fragmentation,
            "warnings": warnings,
            "keptRooms": kept_rooms_data(kept_rooms(self.reservations(), now)),
        }

    def decoded_allocations(self) -> dict[tuple[str, str], tuple[dict[str, Any], PodAllocation | str]]:
        """Each placed pod's allocation as decoded once per stored version, with the stored pod it was decoded from
        (`snapshot_from_objects`' `allocations`: the controller's snapshot does not decode them again)."""
        with self._allocations_lock:
            return {key: (pod, counted) for key, (pod, counted, _) in self._allocations.items()}

    def _index_allocation(self, _kind: str, pod: dict[str, Any]) -> None:
        """Follow one pod event: decode what the store holds now (the newest version, whatever the order of
        notifications), once per stored version; the nodes it leaves or lands on get a new pod version."""
        key = object_key(pod)
        with self._allocations_lock:
            current = self.pods.get(*key)
            known = self._allocations.get(key)
            if known is not None and known[0] is current:
                return
            counted = counted_allocation(current) if current is not None else None
            if isinstance(counted, PodAllocation):
                counted = _interned(counted)
            if current is None or counted is None:
                self._allocations.pop(key, None)
            elif known is not None and known[1] == counted:
                # The same allocation, so no view changes; the new one replaces the old in both dicts, or after a
                # relist every pod's allocation was kept twice, the old one holding the old pod's strings (+35 MiB
                # traced at 5,000 nodes / 40,000 pods).
                entry = self._allocations[key] = (current, counted, known[2])
                if isinstance(counted, PodAllocation):
                    self._on_node[counted.node][key] = entry
                return
            else:
                entered = known[2] if known is not None else next(self._entered)
                self._allocations[key] = (current, counted, entered)
            if known is not None and isinstance(known[1], PodAllocation):
                self._leave(key, known[1].node)
            if counted is not None and not isinstance(counted, str):
                self._on_node.setdefault(counted.node, {})[key] = self._allocations[key]
                self._pod_versions[counted.node] = next(self._entered)

    def _leave(self, key: tuple[str, str], node: str) -> None:
        """The pod's allocation leaves the node's (under the allocations lock)."""
        on_node = self._on_node[node]
        del on_node[key]
        if on_node:
            self._pod_versions[node] = next(self._entered)
        else:
            # The name may be any a pod's annotation wrote: nothing of it stays once no pod names it (version 0).
            del self._on_node[node], self._pod_versions[node]

    def reservations(self) -> list[Reservation]:
        """The rooms kept for rescued Pending pods, as the pod watch last saw them (deadlines not checked here)."""
        with self._reservations_lock:
            return list(self._reservations.values())

    def _index_reservation(self, kind: str, pod: dict[str, Any]) -> None:
        """Follow one pod event in the reservation index."""
        key = object_key(pod)
        found = reservation_of(pod, self.room_key) if kind != "DELETED" else None
        with self._reservations_lock:
            if found is None:
                self._reservations.pop(key, None)
            else:
                self._reservations[key] = found

    def waiting_pods(self) -> list[dict[str, Any]]:
        """The stored pods that wait for their room (`waits_for_room`), as the pod watch last saw them."""
        with self._waiting_lock:
            return list(self._waiting.values())

    def _index_waiting(self, kind: str, pod: dict[str, Any]) -> None:
        """Follow one pod event in the index of pods that wait for their room."""
        key = object_key(pod)
        with self._waiting_lock:
            if kind != "DELETED" and waits_for_room(pod):
                self._waiting[key] = pod
            else:
                self._waiting.pop(key, None)

    def _index_claim(self, kind: str, pod: dict[str, Any]) -> None:
        """Follow one pod event in the claim index (the pod watch is the only writer of the pod store)."""
        key = object_key(pod)
        meta = pod.get("metadata") or {}
        token = (meta.get("annotations") or {}).get(CLAIM_ANNOTATION)
        claim = (key[0], str(token)) if token and kind != "DELETED" else None
        with self._claims_lock:
            old = self._claim_of.get(key)
            if old is not None and old != claim:
                del self._claim_of[key]
                carriers = self._claims[old]
                del carriers[key]
                if not carriers:
                    del self._claims[old]
            if claim is not None:
                self._claim_of[key] = claim
                self._claims.setdefault(claim, {})[key] = pod


# What of a pod or node the readers use (the cluster-info view, the claim index, the reconciler and its pin Event,
# /mutate's evictPod UIDs and the placements document); the rest of the API server's object (~17 KiB a pod as
# dicts) is not kept.
POD_ANNOTATIONS = frozenset({NODE_ANNOTATION, ALLOCATED_ANNOTATION, USE_GPUUUID_ANNOTATION})
NODE_ANNOTATIONS = frozenset({REGISTER_ANNOTATION, DEVICE_CORDON})


def project_pod(pod: dict[str, Any]) -> dict[str, Any]:
    """The pod as its readers see it: names, uid, version, deletion, HAMi's and our annotations, node name, our
    scheduling gate, phase, how many init containers and whether they exited 0; same shape as the API server's,
    nothing else."""
    spec = _dict(pod.get("spec"))
    status = _dict(pod.get("status"))
    kept_spec: dict[str, Any] = {}
    if isinstance(spec.get("nodeName"), str):
        kept_spec["nodeName"] = sys.intern(spec["nodeName"])
    init = spec.get("initContainers")
    if isinstance(init, list):
        kept_spec["initContainers"] = [{"name": _dict(c).get("name")} for c in init]
    if gated(pod):
        kept_spec["schedulingGates"] = [{"name": ROOM_GATE}]
    kept_status: dict[str, Any] = {}
    if isinstance(status.get("phase"), str):
        kept_status["phase"] = sys.intern(status["phase"])
    states = status.get("initContainerStatuses")
    if isinstance(states, list):
        kept_status["initContainerStatuses"] = [_init_state(entry) for entry in states]
    return {
        "metadata": _metadata(pod, lambda key: key in POD_ANNOTATIONS or key.startswith(GROUP + "/")),
        "spec": _shared(kept_spec),
        "status": _shared(kept_status),
    }


# Never read by a plan, and often the largest annotation of a pod made by kubectl apply.
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
# What else of a pod the planner reads (core.planner.objects.pod_for_plan, core.defrag.triggers): the rest of the
# pod's spec (volumes, commands, probes, environment) is not kept.
PLANNED_METADATA = ("labels", "ownerReferences", "creationTimestamp")
PLANNED_SPEC = (
    "schedulerName",
    "priority",
    "priorityClassName",
    "nodeSelector",
    "affinity",
    "overhead",
    "resources",
    "topologySpreadConstraints",
    "tolerations",
    "resourceClaims",
)
# Of each container, what the plan reads: its name, resources and (an init container's) restartPolicy, which makes it
# a sidecar that kube-scheduler counts for the pod's whole life; and its ports only when they take the node's.
PLANNED_CONTAINER = ("name", "resources", "restartPolicy")


_SCHEDULED_KEYS = {
    False: ("type", "status", "lastTransitionTime"),
    True: ("type", "status", "lastTransitionTime", "reason", "message"),
}
"""What a plan reads of the PodScheduled condition: why the scheduler refused the pod only while it is refused."""


def project_pod_for_planning(pod: dict[str, Any]) -> dict[str, Any]:
    """project_pod's pod and what a defragmentation plan reads besides: labels, controller, creation, every annotation
    but kubectl's last applied one, node selection, tolerations, priority, resource claims, its claimed, emptyDir and
    hostPath volumes, the containers' names, resources, restart policies and host ports, the pod's overhead and
    pod-level resources, and the PodScheduled condition (its reason and message while the pod is refused: the rescue
    trigger reads them). The parts pods of one template hold alike are kept once (`_kept_alike`)."""
    kept = project_pod(pod)
    meta, spec, status = _dict(pod.get("metadata")), _dict(pod.get("spec")), _dict(pod.get("status"))
    metadata = {**kept["metadata"], **{key: _kept_alike(meta[key]) for key in PLANNED_METADATA if key in meta}}
    metadata["annotations"] = {
        key: value for key, value in _dict(meta.get("annotations")).items() if key != LAST_APPLIED
    }
    planned_spec = {**kept["spec"], **{key: _kept_alike(spec[key]) for key in PLANNED_SPEC if key in spec}}
    volumes = spec.get("volumes")
    read = [_planned_volume(v) for v in volumes if is_claim(v) or is_local(v)] if isinstance(volumes, list) else []
    if read:
        planned_spec["volumes"] = _kept_alike(read)
    for key in ("initContainers", "containers"):
        containers = spec.get(key)
        if isinstance(containers, list):
            planned_spec[key] = _kept_alike([_planned_container(_dict(c)) for c in containers])
    conditions = status.get("conditions")
    if not isinstance(conditions, list):
        return {"metadata": metadata, "spec": planned_spec, "status": kept["status"]}
    scheduled = [
        {key: c.get(key) for key in _SCHEDULED_KEYS[c.get("status") == "False"]}
        for c in conditions
        if isinstance(c, dict) and c.get("type") == "PodScheduled"
    ]
    return {"metadata": metadata, "spec": planned_spec, "status": {**kept["status"], "conditions": scheduled}}


def _planned_volume(volume: dict[str, Any]) -> dict[str, Any]:
    """What a plan reads of a claimed volume: its name, and its claim's name or, ephemeral, what of its claim template
    a volume must match (`volumes.new_claims`); of an emptyDir or hostPath volume its name and kind (the policy's
    evictLocalStoragePods)."""
    if kind := is_local(volume):
        return {"name": volume.get("name"), kind: {}}
    if "ephemeral" in volume:
        template = _dict(_dict(volume.get("ephemeral")).get("volumeClaimTemplate"))
        kept: dict[str, Any] = {"spec": _claim_asks(_dict(template.get("spec")))}
        annotations = _dict(_dict(template.get("metadata")).get("annotations"))
        if BETA_CLASS in annotations:
            kept["metadata"] = {"annotations": {BETA_CLASS: annotations[BETA_CLASS]}}
        return {"name": volume.get("name"), "ephemeral": {"volumeClaimTemplate": kept}}
    claim = _dict(volume.get("persistentVolumeClaim"))
    return {"name": volume.get("name"), "persistentVolumeClaim": {"claimName": claim.get("claimName")}}


def _planned_container(container: dict[str, Any]) -> dict[str, Any]:
    """What a plan reads of a container (PLANNED_CONTAINER), and its ports that take one of the node's
    (`takes_host_port`)."""
    kept = {part: container[part] for part in PLANNED_CONTAINER if part in container}
    ports = container.get("ports")
    taken = [p for p in ports if isinstance(p, dict) and p.get("hostPort")] if isinstance(ports, list) else []
    if taken:
        kept["ports"] = taken
    return kept


class _KeptAlike:
    """The parts equal to a kept one's are that one (labels, controller, containers of pods of one template, the
    conditions of nodes alike); read-only like every stored object. Cleared when it holds `limit` parts or `budget`
    bytes of their JSON, so that a tenant who relabels a pod again and again grows nothing for good; the objects keep
    what they share."""

    def __init__(self, limit: int, budget: int) -> None:
        self.limit, self.budget = limit, budget
        self.parts: dict[bytes, Any] = {}
        self.size = 0

    def __call__(self, part: Any) -> Any:
        """The one kept part equal to this one (by its JSON): bench/generate's 40,000 pods kept 2,694 B a pod without
        it, 1,316 B with it (tracemalloc; project_pod alone 915 B)."""
        try:
            key = orjson.dumps(part, option=orjson.OPT_SORT_KEYS)
        except TypeError:
            return part
        kept = self.parts.get(key)
        if kept is None:
            if len(self.parts) >= self.limit or self.size + len(key) > self.budget:
                self.parts.clear()
                self.size = 0
            kept = self.parts.setdefault(key, part)
            self.size += len(key)
        return kept


# The pods' parts that many pods hold alike ({"nodeName": n}, {"phase": p}), each kept once: stored objects are
# read-only, so pods may share them (~200 B a pod each, 15 MiB at 40,000 pods). Cleared when it reaches the limit
# (names of nodes long gone); the pods keep what they share.
_SHARED: dict[tuple[tuple[str, Any], ...], dict[str, Any]] = {}
SHARED_LIMIT = 65536
PLANNED_BUDGET_BYTES = 16 * 2**20
_kept_alike = _KeptAlike(SHARED_LIMIT, PLANNED_BUDGET_BYTES)


def _shared(part: dict[str, Any]) -> dict[str, Any]:
    """The one kept dict equal to part, when its values are strings (init containers' lists are the pod's own)."""
    if not all(isinstance(value, str) for value in part.values()):
        return part
    key = tuple(part.items())
    kept = _SHARED.get(key)
    if kept is None:
        if len(_SHARED) >= SHARED_LIMIT:
            _SHARED.clear()
        kept = _SHARED.setdefault(key, part)
    return kept


def _interned(counted: PodAllocation) -> PodAllocation:
    """The allocation with its cards' UUIDs and vendor words interned: decoded from each pod's annotation they are
    copies, ~150 B a card a pod (the pod's own strings, name, uid and node, are the stored pod's already)."""
    containers = tuple(
        tuple(replace(device, uuid=sys.intern(device.uuid), vendor=sys.intern(device.vendor)) for device in devices)
        for devices in counted.containers
    )
    return replace(counted, containers=containers)


def project_node(node: dict[str, Any]) -> dict[str, Any]:
    """The node as its readers see it: name, version, register and card cordons, its labels and the taints that keep
    pods off (an admission skips a pin to a node kube-scheduler keeps the pod off), cordon, Ready, GPUs allocatable."""
    return _projected_node(node, GPU.__eq__)


def _projected_node(node: dict[str, Any], allocatable_kept: Callable[[str], bool]) -> dict[str, Any]:
    """project_node's node with the allocatable resources `allocatable_kept` names."""
    metadata = _metadata(node, NODE_ANNOTATIONS.__contains__)
    labels = _dict(node.get("metadata")).get("labels")
    if isinstance(labels, dict):
        # Nodes share most of their label values (zone, instance type, GPU feature discovery's): one string of each
        # for all nodes, where each parsed node had its own (orjson already shares the keys).
        metadata["labels"] = {
            key: sys.intern(value) if isinstance(value, str) else value for key, value in labels.items()
        }
    spec = _dict(node.get("spec"))
    status = _dict(node.get("status"))
    allocatable = _dict(status.get("allocatable"))
    conditions = status.get("conditions")
    kept_status: dict[str, Any] = {}
    # Nodes alike hold one allocatable and one conditions part between them (a node's are ~1.2 KB of dicts).
    kept_allocatable = {key: value for key, value in allocatable.items() if allocatable_kept(key)}
    if kept_allocatable:
        kept_status["allocatable"] = _shared(kept_allocatable)
    if isinstance(conditions, list):
        kept_status["conditions"] = _kept_alike(
            [{"type": c.get("type"), "status": c.get("status")} for c in conditions if isinstance(c, dict)]
        )
    kept_spec = {"unschedulable": spec["unschedulable"]} if "unschedulable" in spec else {}
    taints = spec.get("taints")
    if isinstance(taints, list) and taints:
        kept_spec["taints"] = taints
    return {"metadata": metadata, "spec": kept_spec, "status": kept_status}


# What of a node's allocatable a plan reads besides its GPUs: the room kube-scheduler's NodeResourcesFit counts (and
# every scalar resource, `node_resources.is_scalar`).
PLANNED_ALLOCATABLE = ("cpu", "memory", "pods")


def project_node_for_planning(node: dict[str, Any]) -> dict[str, Any]:
    """project_node's node and its allocatable CPU, memory, pods and scalar resources (rarely changed, so same_node
    still finds a heartbeat's node the same)."""
    return _projected_node(node, _planned_allocatable)


def _planned_allocatable(key: str) -> bool:
    """Whether a plan reads this allocatable resource of a node: its GPUs and what NodeResourcesFit counts."""
    return key == GPU or key in PLANNED_ALLOCATABLE or is_scalar(key)


# Where the counted form of another scheduler's pod is kept beside its key and version (see project_counted_pod).
COUNTED = "counted"


def project_counted_pod(pod: dict[str, Any]) -> dict[str, Any]:
    """Another scheduler's bound pod as the controller keeps it: name, namespace and resourceVersion (the reflector's
    key and order), and what it asks of its node, its required anti-affinity terms, host ports and labels, read once
    (`node_resources.counted_pod`), its namespace and node name interned and its ask and labels shared with equal
    ones: bench/memory.py's 40,000 such pods kept 605 B a pod (23.1 MiB, tracemalloc; 586 B before the labels, 911 B
    as project_pod_for_planning keeps a pod, 11,116 B whole without managedFields)."""
    meta = _dict(pod.get("metadata"))
    kept: dict[str, Any] = {key: meta[key] for key in ("name", "resourceVersion") if key in meta}
    counted = counted_pod(pod)
    kept["namespace"] = namespace = sys.intern(counted.namespace)
    needs = _alike(counted.needs) if isinstance(counted.needs, Resources) else counted.needs
    return {
        "metadata": kept,
        COUNTED: counted._replace(
            namespace=namespace, node=sys.intern(counted.node), needs=needs, labels=_kept_alike(counted.labels)
        ),
    }


def project_volume_claim(claim: dict[str, Any]) -> dict[str, Any]:
    """A PersistentVolumeClaim as the controller keeps it: its key and version, and the claim read once
    (`volumes.claim_of`: the volume it is bound to, whether it is being deleted, while unbound what it asks of a
    volume), not at each snapshot."""
    return {"metadata": _key_of(claim), CLAIM: claim_of(claim)}


def _claim_asks(spec: dict[str, Any]) -> dict[str, Any]:
    """What of an ephemeral volume's claim template spec its new claim asks of a volume: its size and `_CLAIM_ASKS`."""
    asked = {k: spec[k] for k in _CLAIM_ASKS if k in spec}
    storage = _dict(_dict(spec.get("resources")).get("requests")).get("storage")
    if storage is not None:
        asked["resources"] = {"requests": {"storage": storage}}
    return asked


_CLAIM_ASKS = ("storageClassName", "accessModes", "volumeMode", "volumeAttributesClassName", "selector")
"""What of a claim template's spec a volume must match, besides its size."""


def project_namespace(namespace: dict[str, Any]) -> dict[str, Any]:
    """A Namespace as the controller keeps it: its name, version and labels (`pod_affinity.namespace_labels_of`)."""
    meta = _dict(namespace.get("metadata"))
    return {"metadata": {key: meta[key] for key in ("name", "resourceVersion", "labels") if key in meta}}


def project_storage_class(storage_class: dict[str, Any]) -> dict[str, Any]:
    """A StorageClass as the controller keeps it: its name and version, and the class read once
    (`volumes.storage_class_of`)."""
    return {"metadata": _key_of(storage_class), STORAGE_CLASS: storage_class_of(storage_class)}


def project_csi_driver(driver: dict[str, Any]) -> dict[str, Any]:
    """A CSIDriver as the controller keeps it: its name and version, and its name again when it asks for storage
    capacity checks (`volumes.capacity_driver_of`)."""
    return {"metadata": _key_of(driver), CAPACITY_DRIVER: capacity_driver_of(driver)}


def project_storage_capacity(capacity: dict[str, Any]) -> dict[str, Any]:
    """A CSIStorageCapacity as the controller keeps it: its key and version, and the capacity read once
    (`volumes.storage_capacity_of`)."""
    return {"metadata": _key_of(capacity), STORAGE_CAPACITY: storage_capacity_of(capacity)}


def project_csi_node(csi_node: dict[str, Any]) -> dict[str, Any]:
    """A CSINode as the controller keeps it: its name and version, and its node's attach limits read once
    (`attach_limits.csi_node_limits`)."""
    return {"metadata": _key_of(csi_node), ATTACH_LIMITS: csi_node_limits(csi_node)}


def project_volume_attachment(attachment: dict[str, Any]) -> dict[str, Any]:
    """A VolumeAttachment as the controller keeps it: its name and version, and its node, volume and driver read once
    (`attach_limits.attachment_of`)."""
    return {"metadata": _key_of(attachment), ATTACHMENT: attachment_of(attachment)}


def _key_of(obj: dict[str, Any]) -> dict[str, Any]:
    """An object's name, namespace and resourceVersion: the reflector's key and order."""
    meta = _dict(obj.get("metadata"))
    return {key: meta[key] for key in ("name", "namespace", "resourceVersion") if key in meta}


def project_volume(volume: dict[str, Any]) -> dict[str, Any]:
    """A PersistentVolume as the controller keeps it: its name and version, and the volume read once
    (`volumes.volume_of`: its node affinity, zones, in-tree source, and what it offers a claim not bound yet), not at
    each snapshot (`bench/volume_reads.py`: 9,704 volumes and their claims, 2.3 ms a snapshot, 198 ms before)."""
    return {"metadata": _key_of(volume), VOLUME: volume_of(volume)}


CLAIM, VOLUME, STORAGE_CLASS, CAPACITY_DRIVER, STORAGE_CAPACITY, ATTACH_LIMITS, ATTACHMENT = (
    "claim",
    "volume",
    "storageClass",
    "capacityDriver",
    "storageCapacity",
    "attachLimits",
    "attachment",
)
"""Where a kept claim, volume, StorageClass, CSIDriver, CSIStorageCapacity, CSINode and VolumeAttachment hold their
read form."""


def same_node(stored: Mapping[str, Any] | None, other: Mapping[str, Any] | None) -> bool:
    """Whether two of project_node's nodes differ at most in resourceVersion: a kubelet's heartbeat or HAMi's
    handshake gives a new stored node every few seconds, with nothing a placement reads changed."""
    if stored is other:
        return True
    if stored is None or other is None:
        return False
    return (
        stored.get("spec") == other.get("spec")
        and stored.get("status") == other.get("status")
        and _sans_version(stored) == _sans_version(other)
    )


def _sans_version(node: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in _dict(node.get("metadata")).items() if key != "resourceVersion"}


# What the placement store keeps beside a placement's key and version: its parsed form, the only one read (None:
# its spec or status is broken, so it takes no part); the API server's JSON was kept too (+1.6 KiB a placement).
PARSED = "parsed"


def project_placement(obj: dict[str, Any]) -> dict[str, Any]:
    """The placement as the store keeps it: name, namespace and resourceVersion (the reflector's key and order),
    and the placement parsed (status writes and admissions read that form, nothing reads the JSON)."""
    meta = _dict(obj.get("metadata"))
    kept = {key: meta[key] for key in ("name", "namespace", "resourceVersion") if key in meta}
    parsed = _parse(obj)
    return {"metadata": kept, PARSED: _alike_parts(parsed) if parsed is not None else None}


# Parts of placements equal to a kept one's are that one (frozen values, so sharing is safe): open placements hold
# the same status, and often the same selector and card references (~0.6 KiB a placement in the benches' shape).
# Weak: a part leaves with the last placement holding it.
_ALIKE: weakref.WeakValueDictionary[tuple[Any, ...], Any] = weakref.WeakValueDictionary()


def _alike(part: _Part) -> _Part:
    """The kept part equal to this one, or this one, kept from now on. Keyed by its type and fields, not by itself:
    a key is held strongly, and the part would then never leave."""
    key = (type(part), *(getattr(part, field.name) for field in fields(cast(Any, part))))
    try:
        return cast(_Part, _ALIKE.setdefault(key, part))
    except TypeError:  # a part holding something unhashable is kept as it is
        return part


def _alike_parts(placement: Placement) -> Placement:
    """The placement with its status, selector and card references shared with equal ones, and its namespace and
    node name interned."""
    spec = replace(
        placement.spec,
        node_name=sys.intern(placement.spec.node_name),
        pod_selector=_alike(placement.spec.pod_selector),
        gpu_devices=tuple(_alike(ref) for ref in placement.spec.gpu_devices),
    )
    return replace(placement, namespace=sys.intern(placement.namespace), spec=spec, status=_alike(placement.status))


def _metadata(obj: dict[str, Any], keep: Any) -> dict[str, Any]:
    """Name, namespace, uid, resourceVersion, deletionTimestamp (when set) and the annotations `keep` says yes to."""
    meta = _dict(obj.get("metadata"))
    kept: dict[str, Any] = {
        key: sys.intern(meta[key]) if key == "namespace" and isinstance(meta[key], str) else meta[key]
        for key in ("name", "namespace", "uid", "resourceVersion", "deletionTimestamp")
        if key in meta
    }
    annotations = _dict(meta.get("annotations"))
    kept["annotations"] = {
        key: sys.intern(value) if key == NODE_ANNOTATION and isinstance(value, str) else value
        for key, value in annotations.items()
        if keep(key)
    }
    return kept


def _init_state(entry: object) -> dict[str, Any]:
    """An init container's status reduced to what HAMi reads: whether and how it terminated."""
    terminated = _dict(_dict(_dict(entry).get("state")).get("terminated"))
    return {"state": {"terminated": {"exitCode": terminated.get("exitCode")}}} if terminated else {"state": {}}


def _dict(value: object) -> dict[str, Any]:
    """The value when it is a dict, else an empty one (readers treat malformed parts as missing)."""
    return value if isinstance(value, dict) else {}


class _PlacementIndex:
    """The parsed placements by namespace, with the open ones indexed by one of their matchLabels pairs (a pod
    they select has every pair) and the others by reqID, so that an admission reads no unrelated placement."""

    def __init__(self) -> None:
        self._stored: dict[tuple[str, str], dict[str, Any]] = {}
        self._by_namespace: dict[str, dict[str, Placement]] = {}
        self._open_by_label: dict[str, dict[tuple[str, str] | None, dict[str, Placement]]] = {}
        self._closed_by_req_id: dict[str, dict[str, dict[str, Placement]]] = {}
        # Keys only, open or not: what a node's change or a reqID's consumer may concern (see the reconciler).
        self._on_node: dict[str, set[tuple[str, str]]] = {}
        self._sharing: dict[tuple[str, str], set[str]] = {}

    def parsed(self, namespace: str | None) -> list[Placement]:
        if namespace is None:
            return [p for placements in self._by_namespace.values() for p in placements.values()]
        return list(self._by_namespace.get(namespace, {}).values())

    def one(self, namespace: str, name: str) -> Placement | None:
        return self._by_namespace.get(namespace, {}).get(name)

    def closed(self, namespace: str, req_id: str) -> list[Placement]:
        return list(self._closed_by_req_id.get(namespace, {}).get(req_id, {}).values())

    def on_node(self, node_name: str) -> list[tuple[str, str]]:
        return list(self._on_node.get(node_name, ()))

    def sharing(self, namespace: str, req_id: str) -> list[tuple[str, str]]:
        return [(namespace, name) for name in self._sharing.get((namespace, req_id), ())]

    def for_labels(self, namespace: str, labels: Mapping[str, str]) -> list[Placement]:
        by_label = self._open_by_label.get(namespace, {})
        found = list(by_label.get(None, {}).values())
        for pair in labels.items():
            found.extend(by_label.get(pair, {}).values())
        closed = self._closed_by_req_id.get(namespace, {})
        for req_id in {p.spec.req_id for p in found}:
            found.extend(closed.get(req_id, {}).values())
        return found

    def update(
        self, namespace: str, name: str, obj: dict[str, Any] | None
    ) -> tuple[Placement | None, Placement | None] | None:
        """Index the stored placement (project_placement's form) in place of the one known under its key; the parsed
        versions replaced (old, new), None when the stored one was already indexed."""
        key = (namespace, name)
        known = self._stored.get(key)
        if known is obj:
            return None
        if known is not None:
            del self._stored[key]
            if known[PARSED] is not None:
                self._forget(known[PARSED])
        if obj is not None:
            self._stored[key] = obj
            if obj[PARSED] is not None:
                self._add(obj[PARSED])
        return (known[PARSED] if known is not None else None, obj[PARSED] if obj is not None else None)

    def _slot(self, placement: Placement) -> dict[str, Placement]:
        """The innermost dict the placement is indexed in (created when missing)."""
        if placement.open:
            pairs = placement.spec.pod_selector.match_labels
            by_label = self._open_by_label.setdefault(placement.namespace, {})
            return by_label.setdefault(pairs[0] if pairs else None, {})
        closed = self._closed_by_req_id.setdefault(placement.namespace, {})
        return closed.setdefault(placement.spec.req_id, {})

    def _add(self, placement: Placement) -> None:
        self._by_namespace.setdefault(placement.namespace, {})[placement.name] = placement
        self._slot(placement)[placement.name] = placement
        self._on_node.setdefault(placement.spec.node_name, set()).add((placement.namespace, placement.name))
        self._sharing.setdefault((placement.namespace, placement.spec.req_id), set()).add(placement.name)

    def _forget(self, placement: Placement) -> None:
        names = self._by_namespace[placement.namespace]
        del names[placement.name]
        if not names:
            del self._by_namespace[placement.namespace]
        slot = self._slot(placement)
        del slot[placement.name]
        if not slot:
            self._prune(placement)
        _discard(self._on_node, placement.spec.node_name, (placement.namespace, placement.name))
        _discard(self._sharing, (placement.namespace, placement.spec.req_id), placement.name)

    def _prune(self, placement: Placement) -> None:
        """Drop the empty dicts a placement leaves behind."""
        for index in (self._open_by_label, self._closed_by_req_id):
            inner: dict[Any, dict[str, Placement]] = index.get(placement.namespace, {})
            for key in [key for key, names in inner.items() if not names]:
                del inner[key]
            if placement.namespace in index and not inner:
                del index[placement.namespace]


def _discard(index: dict[_Key, set[_Item]], at: _Key, item: _Item) -> None:
    """Take the item out of index[at], and index[at] out of the index once empty."""
    items = index.get(at)
    if items is not None:
        items.discard(item)
        if not items:
            del index[at]


def _parse(obj: dict[str, Any]) -> Placement | None:
    """The placement, or None when its stored spec or status is broken (it then takes no part)."""
    try:
        return placement_from_object(obj)
    except PlacementError:
        return None


@dataclass(frozen=True)
class _NodeView:
    """One node's part of the cluster-info document, encoded, with the node object and pod version it is of."""

    node: dict[str, Any]
    version: int
    encoded: bytes | None  # None: not a GPU node, not in the document
    share: NodeShare | None
    encoded_share: bytes | None

    @classmethod
    def of(cls, node: dict[str, Any], version: int, info: NodeInfo | None) -> _NodeView:
        if info is None:
            return cls(node, version, None, None, None)
        share = node_share(info)
        return cls(
            node,
            version,
            _encoded(info.to_dict()),
            share,
            _encoded(share.fragmentation.to_dict()),
        )


def _encoded(part: dict[str, Any]) -> bytes:
    """The part as JSON, copied to its exact size: orjson's own result keeps its growth buffer (twice the text for
    a node's view, 62 -> 23 MiB kept at 5,000 nodes)."""
    return bytes(memoryview(orjson.dumps(part)))


def json_pieces(value: Any) -> Iterator[bytes]:
    """orjson.dumps(value) in pieces, its bytes taken as JSON already encoded: the kept views are served as they
    are, so that no copy of the whole ~20 MiB document is made (each one stayed with the process after it)."""
    if isinstance(value, bytes):
        yield value
    elif isinstance(value, dict):
        for index, (key, item) in enumerate(value.items()):
            yield (b"{" if index == 0 else b",") + orjson.dumps(key) + b":"
            yield from json_pieces(item)
        yield b"}" if value else b"{}"
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield b"[" if index == 0 else b","
            yield from json_pieces(item)
        yield b"]" if value else b"[]"
    else:
        yield orjson.dumps(value)


class _NodesByName(Mapping[str, dict[str, Any]]):
    """Nodes by name, read through to the reflector's store (cluster-scoped: namespace "")."""

    def __init__(self, reflector: Reflector) -> None:
        self._reflector = reflector

    def __getitem__(self, name: str) -> dict[str, Any]:
        node = self._reflector.get("", name)
        if node is None:
            raise KeyError(name)
        return node

    def __iter__(self) -> Iterator[str]:
        return iter([str((node.get("metadata") or {}).get("name")) for node in self._reflector.items()])

    def __len__(self) -> int:
        return len(self._reflector.items())
