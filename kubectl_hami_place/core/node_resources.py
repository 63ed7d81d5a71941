"""A node's CPU, memory and pod count as kube-scheduler's NodeResourcesFit counts them, so that a planned move never
lands a pod on a node whose cards hold it but whose CPU or memory kube-scheduler would refuse.

A pod asks what `computePodResourceRequest` (pkg/scheduler/framework/plugins/noderesources) says: its app and
restartable (sidecar) init containers' requests summed, at least each other init container's with the sidecars
started before it; pod-level `spec.resources.requests` replace the containers' where set; then the pod's overhead.
A node holds its allocatable less what every pod bound to it and not yet finished asks. The scalar resources
(extended resources such as `rdma/hca`, hugepages, ephemeral storage) are counted by name as kube-scheduler counts
them, those some node advertises (`counted_scalars`) and not HAMi's own (its cards are the planner's own count, and
its chart has kube-scheduler ignore them): a node that does not advertise one has none of it. The attach counts of
NodeVolumeLimits (`attach_limits`) ride in the same scalars: `with_attach_needs` adds a pod's, `attach_rooms` a
node's limits and lingering attachments.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple

from kubectl_hami_place.core.attach_limits import (
    MAX_VOLUME_COUNT,
    NO_REFS,
    SCALAR_PREFIX,
    AttachLimits,
    AttachRefs,
    attach_allocatable,
    attach_needs,
    attach_refs,
    bound_volumes,
    driver_of_scalar,
    unclaimed_attachments,
)
from kubectl_hami_place.core.errors import RequestError
from kubectl_hami_place.core.fields import as_mapping
from kubectl_hami_place.core.names import ENDED_PHASES
from kubectl_hami_place.core.pod_affinity import NO_PORTS, HostPort, PodTerm, host_ports, labels_of, repelling_terms
from kubectl_hami_place.core.requests import parse_quantity

if TYPE_CHECKING:
    from kubectl_hami_place.core.volumes import Volumes

Scalars = tuple[tuple[str, int], ...]
"""Scalar resources by name (sorted), each in its unit's Value (bytes for hugepages and storage)."""


@dataclass(frozen=True)
class Resources:
    """CPU in millicores, memory in bytes, pods and scalar resources: what a pod asks of a node, or what a node has
    left."""

    cpu: int = 0
    memory: int = 0
    pods: int = 0
    scalars: Scalars = ()

    def __add__(self, other: Resources) -> Resources:
        scalars = _merged(self.scalars, other.scalars, 1) if other.scalars else self.scalars
        return Resources(self.cpu + other.cpu, self.memory + other.memory, self.pods + other.pods, scalars)

    def __sub__(self, other: Resources) -> Resources:
        scalars = _merged(self.scalars, other.scalars, -1) if other.scalars else self.scalars
        return Resources(self.cpu - other.cpu, self.memory - other.memory, self.pods - other.pods, scalars)

    def holds(self, asked: Resources) -> bool:
        """Whether this remainder holds what is asked, on every count."""
        if not (self.cpu >= asked.cpu and self.memory >= asked.memory and self.pods >= asked.pods):
            return False
        return not asked.scalars or all(amount <= self.scalar(name) for name, amount in asked.scalars)

    def scalar(self, name: str) -> int:
        """How much of a scalar resource (0 when none)."""
        return next((amount for held, amount in self.scalars if held == name), 0)

    def short(self, asked: Resources) -> tuple[str, ...]:
        """The counts this remainder falls short on (`cpu`, `memory`, `pods`, a scalar's name), for a reason in
        words."""
        counts = (("cpu", self.cpu, asked.cpu), ("memory", self.memory, asked.memory), ("pods", self.pods, asked.pods))
        scalars = ((name, self.scalar(name), amount) for name, amount in asked.scalars)
        return tuple(name for name, have, want in (*counts, *scalars) if have < want)

    def only(self, names: frozenset[str]) -> Resources:
        """These resources with only the scalars of `names` (those kube-scheduler counts)."""
        if not self.scalars:
            return self
        return Resources(self.cpu, self.memory, self.pods, tuple(kept for kept in self.scalars if kept[0] in names))


def _merged(one: Scalars, other: Scalars, sign: int) -> Scalars:
    """The scalars of `one` with `other`'s added (`sign` 1) or taken away (-1)."""
    merged = dict(one)
    for name, amount in other:
        merged[name] = merged.get(name, 0) + sign * amount
    return tuple(sorted(merged.items()))


def is_scalar(name: str) -> bool:
    """Whether kube-scheduler's NodeResourcesFit counts a resource of this name by name: an extended resource (a
    domain-prefixed name outside kubernetes.io), hugepages, or ephemeral storage."""
    if name == "ephemeral-storage" or name.startswith("hugepages-"):
        return True
    domain = name.partition("/")[0] if "/" in name else ""
    return bool(domain) and not (domain == "kubernetes.io" or domain.endswith(".kubernetes.io"))


def counted_scalars(nodes: Iterable[Mapping[str, Any]], ignored: Iterable[str]) -> frozenset[str]:
    """The scalar resources some node advertises in its allocatable, less `ignored` (HAMi's own resources)."""
    found = {
        name
        for node in nodes
        for name in as_mapping(as_mapping(node.get("status")).get("allocatable"))
        if isinstance(name, str) and is_scalar(name)
    }
    return frozenset(found.difference(ignored))


KUBE_SCHEDULER_WORDS = {"cpu": "Insufficient cpu", "memory": "Insufficient memory", "pods": "Too many pods"}
"""How kube-scheduler's NodeResourcesFit names each count a node falls short on (a scalar: `Insufficient <name>`)."""


def shortfall(room: Resources, asked: Resources) -> str:
    """Why `room` does not hold `asked`, in kube-scheduler's words and with the figures; "" when it holds, so that
    every reader (`why`, a pin's check) words it alike."""
    short = room.short(asked)
    if not short:
        return ""
    words = ", ".join(dict.fromkeys(_words(count) for count in short))
    scalars = "".join(
        f"; {name}: {room.scalar(name)} left, {amount} asked" for name, amount in asked.scalars if name in short
    )
    return (
        f"{words} (the node has {room.cpu}m CPU, {room.memory // 2**20} MiB memory and {room.pods} pod(s) left; "
        f"the pod asks {asked.cpu}m, {asked.memory // 2**20} MiB{scalars})"
    )


def count_name(count: str) -> str:
    """A count a node falls short on (`Resources.short`) as a reason names it: an attach count as its driver's limit."""
    driver = driver_of_scalar(count)
    return f"CSI attach limit of {driver}" if driver else count


def _words(count: str) -> str:
    """kube-scheduler's words for a count a node falls short on (NodeVolumeLimits' for an attach count)."""
    if count.startswith(SCALAR_PREFIX):
        return MAX_VOLUME_COUNT
    return KUBE_SCHEDULER_WORDS.get(count, f"Insufficient {count}")


NOTHING = Resources()
"""What a pod not counted asks (a planner pod built without its spec)."""


class CountedPod(NamedTuple):
    """A bound, unfinished pod read apart from the planner's pods, counted on its node only (another scheduler's, as
    the server's watch keeps it): its namespace, name and node, what it asks or why that could not be read, the
    required anti-affinity terms by which it keeps other pods off (`pod_affinity.repelling_terms`), the host ports
    it holds (`pod_affinity.host_ports`), its labels, which a moved pod's own terms may select, and the volumes it
    attaches (`attach_limits.attach_refs`)."""

    namespace: str
    name: str
    node: str
    needs: Resources | str
    repels: tuple[PodTerm, ...] = ()
    ports: frozenset[HostPort] = NO_PORTS
    labels: Mapping[str, str] = MappingProxyType({})
    attaches: AttachRefs = NO_REFS


def counted_pod(pod: Mapping[str, Any]) -> CountedPod:
    """The pod as node_remainders counts it, read once (the server keeps this, not the pod)."""
    metadata, spec = as_mapping(pod.get("metadata")), as_mapping(pod.get("spec"))
    try:
        needs: Resources | str = pod_resources(spec)
    except RequestError as err:
        needs = str(err)
    namespace = str(metadata.get("namespace", ""))
    repels, ports = repelling_terms(spec, namespace), host_ports(spec)
    node, name = str(spec.get("nodeName") or ""), str(metadata.get("name", ""))
    return CountedPod(namespace, name, node, needs, repels, ports, labels_of(metadata), attach_refs(spec, name))


def pod_resources(spec: Mapping[str, Any]) -> Resources:
    """What the pod asks of its node (one pod, its CPU and memory requests); RequestError when a quantity is
    malformed (the API server validates them, so only a hand-made object has one)."""
    pod_level = _requests(spec.get("resources"))
    app = Resources()
    for container in _list(spec.get("containers")):
        app += _requests(as_mapping(container).get("resources"))
    sidecars = Resources()
    peak = Resources()
    for container in _list(spec.get("initContainers")):
        asked = _requests(as_mapping(container).get("resources"))
        if as_mapping(container).get("restartPolicy") == "Always":
            sidecars += asked
            app += asked
            continue
        peak = _most(peak, asked + sidecars)
    total = _most(app, peak)
    cpu = pod_level.cpu if _has(spec.get("resources"), "cpu") else total.cpu
    memory = pod_level.memory if _has(spec.get("resources"), "memory") else total.memory
    return Resources(cpu, memory, 1, total.scalars) + _requests({"requests": spec.get("overhead")})


def node_allocatable(node: Mapping[str, Any], counted: frozenset[str] = frozenset()) -> Resources | None:
    """The node's allocatable CPU, memory, pods and `counted` scalars (0 of one it does not advertise); None when it
    states no CPU or memory (not modelled then)."""
    allocatable = as_mapping(as_mapping(node.get("status")).get("allocatable"))
    if "cpu" not in allocatable or "memory" not in allocatable:
        return None
    try:
        pods = int(parse_quantity(allocatable.get("pods", 110), "allocatable pods"))
        scalars = tuple((name, _value(allocatable.get(name, 0), name)) for name in sorted(counted))
        return Resources(_milli(allocatable["cpu"], "allocatable cpu"), _bytes(allocatable["memory"]), pods, scalars)
    except RequestError:
        return None


def node_remainders(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    others: Iterable[CountedPod] = (),
    counted: frozenset[str] = frozenset(),
) -> tuple[dict[str, Resources], tuple[str, ...]]:
    """Each node's allocatable less what its bound, unfinished pods ask (`pods`, and `others` already read), by node
    name (nodes stating no CPU or memory left out), `counted` the scalars counted (`counted_scalars`), and a warning
    per pod whose requests cannot be read (its node is then counted as full)."""
    remainders: dict[str, Resources] = {}
    for node in nodes:
        allocatable = node_allocatable(node, counted)
        if allocatable is not None:
            remainders[str(as_mapping(node.get("metadata")).get("name", ""))] = allocatable
    warnings = []
    for other in itertools.chain(bound_pods(pods), others):
        if other.node not in remainders:
            continue
        if isinstance(other.needs, Resources):
            remainders[other.node] -= other.needs.only(counted)
            continue
        warnings.append(
            f"pod {other.namespace}/{other.name}: {other.needs}; "
            f"node {other.node} is counted as having no CPU or memory left"
        )
        remainders[other.node] = Resources()
    return remainders, tuple(warnings)


def with_attach_needs(pod: CountedPod, volumes: Volumes, counted: frozenset[str]) -> CountedPod:
    """The pod with what its volumes ask of its node's attach counts added to its needs (unread needs stay so)."""
    if pod.attaches is NO_REFS or not isinstance(pod.needs, Resources):
        return pod
    asked = attach_needs(pod.attaches, pod.namespace, volumes, counted)
    if not asked:
        return pod
    return pod._replace(needs=pod.needs + Resources(scalars=asked))


def attach_rooms(
    rooms: Mapping[str, Resources], bound: Iterable[CountedPod], attach: AttachLimits, volumes: Volumes
) -> dict[str, Resources]:
    """The rooms with each node's attach limits added (its pods' counts were taken with their needs) and the
    VolumeAttachments to it of volumes none of its pods uses taken away."""
    counted = attach.counted
    used: dict[str, set[str]] = defaultdict(set)
    if attach.attachments:
        for pod in bound:
            if pod.attaches is not NO_REFS:
                used[pod.node].update(bound_volumes(pod.attaches, pod.namespace, volumes))
    lingering = unclaimed_attachments(attach.attachments, used, volumes, counted)
    return {
        node: room
        + Resources(scalars=attach_allocatable(attach.limits.get(node, {}), counted))
        - Resources(scalars=lingering.get(node, ()))
        for node, room in rooms.items()
    }


def bound_pods(pods: Iterable[Mapping[str, Any]]) -> list[CountedPod]:
    """The pods bound to a node and not finished, each read once as node_remainders counts it."""
    return [
        counted_pod(pod)
        for pod in pods
        if as_mapping(pod.get("spec")).get("nodeName")
        and as_mapping(pod.get("status")).get("phase") not in ENDED_PHASES
    ]


def _requests(resources: object) -> Resources:
    """The CPU, memory and scalars of a `resources` block's requests (0 where absent)."""
    requests = as_mapping(as_mapping(resources).get("requests"))
    cpu = _milli(requests["cpu"], "cpu request") if "cpu" in requests else 0
    memory = _bytes(requests["memory"]) if "memory" in requests else 0
    scalars = tuple(
        sorted(
            (name, _value(amount, name))
            for name, amount in requests.items()
            if isinstance(name, str) and is_scalar(name)
        )
    )
    return Resources(cpu, memory, 0, scalars)


def _has(resources: object, name: str) -> bool:
    """Whether a pod-level `resources` block requests this resource."""
    return name in as_mapping(as_mapping(resources).get("requests"))


def _most(one: Resources, other: Resources) -> Resources:
    """The larger of each count."""
    scalars = one.scalars
    if other.scalars:
        most = dict(one.scalars)
        for name, amount in other.scalars:
            most[name] = max(most.get(name, 0), amount)
        scalars = tuple(sorted(most.items()))
    return Resources(max(one.cpu, other.cpu), max(one.memory, other.memory), max(one.pods, other.pods), scalars)


def _milli(value: object, key: str) -> int:
    """A CPU quantity in millicores, rounded up as Kubernetes' MilliValue does."""
    return math.ceil(parse_quantity(value, key) * 1000)


def _value(value: object, key: str) -> int:
    """A scalar quantity as Kubernetes' Value gives it, rounded up."""
    return math.ceil(parse_quantity(value, key))


def _bytes(value: object) -> int:
    """A memory quantity in bytes, rounded up as Kubernetes' Value does."""
    return math.ceil(parse_quantity(value, "memory"))


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []
