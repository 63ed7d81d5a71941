"""The cluster-info view: every HAMi GPU node, its cards, what HAMi counts as used on them, and the pods on each.

Built from plain node objects and each pod's `counted_allocation` by `cluster_info`, served by the webhook as
`GET /api/v1/cluster-info` (`ClusterInfo.to_dict()`), read back by the plugin with `cluster_info_from_dict`.
Usage is counted as HAMi's scheduler counts it (see `usage.py`). A node is listed when it has a card register
or allocatable `nvidia.com/gpu`; new GPU pods run on a node only while its allocatable `nvidia.com/gpu` is above 0
(`hamiUsable`): at 0 HAMi's `CheckHealth` drops and re-adds the node's cards as the device plugin's handshake
expires, and the kubelet refuses a pod asking cards there.

JSON shape of `to_dict()` (all memory in MiB, cores in percent of one card, times RFC 3339 UTC):

    {
      "generatedAt": "2026-01-02T03:04:05Z",
      "nodes": [
        {
          "name": "gpu-a100-0",
          "ready": true,                  # condition Ready is True
          "schedulable": true,            # not cordoned (spec.unschedulable)
          "hamiUsable": true,             # allocatable nvidia.com/gpu > 0
          "gpuAllocatable": 20,           # allocatable nvidia.com/gpu (HAMi: cards x split count)
          "registerError": null,          # one-line reason when the register is missing or undecodable
          "cards": [
            {
              "uuid": "GPU-...", "index": 0, "name": "gpu-0", "type": "NVIDIA-A100-SXM4-40GB",
              "numa": 0, "health": true, "mode": "hami-core",
              "nvidia": true,             # HAMi's NVIDIA scheduler considers it (type contains NVIDIA)
              "cordoned": false,          # listed in the node's hami.io/device-cordon
              "memory": {"total": 40960, "used": 3000, "free": 37960},
              "cores": {"total": 100, "used": 30, "free": 70},
              "slots": {"total": 10, "used": 1, "free": 9},
              "pods": [
                {"namespace": "default", "name": "train-0", "uid": "...", "phase": "Running",
                 "memory": 3000, "cores": 30, "slots": 1, "terminating": false}
              ]
            }
          ]
        }
      ],
      "fragmentation": { ... },           # fragmentation.Fragmentation.to_dict()
      "warnings": ["pod default/x: allocation ..."],  # pods HAMi cannot decode either, so not counted
      "keptRooms": [                      # cards a rescue keeps for its Pending pod (the server's, seals checked)
        {"pod": "team-a/big", "cards": ["GPU-..."], "until": "2026-01-02T03:05:05Z"}
      ]
    }
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from kubectl_hami_place.core.cards import REGISTER_ANNOTATION, Card, node_cards
from kubectl_hami_place.core.errors import ClusterInfoError, ModelError
from kubectl_hami_place.core.fields import rfc3339
from kubectl_hami_place.core.fit import cordoned_cards
from kubectl_hami_place.core.fragmentation import (
    Fragmentation,
    NodeFragmentation,
    combine,
    is_open,
    node_fragmentation,
    summarize,
)
from kubectl_hami_place.core.k8s_names import is_namespaced_name
from kubectl_hami_place.core.placement import parse_time
from kubectl_hami_place.core.requests import GPU, parse_quantity
from kubectl_hami_place.core.reservation import MAX_CARDS, Reservation, is_card_id
from kubectl_hami_place.core.usage import PodAllocation, PodOnCard, UsageTally, pod_allocation


@dataclass(frozen=True)
class CardInfo:
    """One card with its totals, HAMi's usage, and the pods on it."""

    uuid: str
    index: int
    type: str
    numa: int
    health: bool
    mode: str
    nvidia: bool
    cordoned: bool
    memory_total: int
    memory_used: int
    cores_total: int
    cores_used: int
    slots_total: int
    slots_used: int
    pods: tuple[PodOnCard, ...] = ()

    @property
    def name(self) -> str:
        """`gpu-N`."""
        return f"gpu-{self.index}"

    @property
    def memory_free(self) -> int:
        """MiB HAMi counts as free (negative when over-committed)."""
        return self.memory_total - self.memory_used

    @property
    def cores_free(self) -> int:
        """Percent of cores HAMi counts as free."""
        return self.cores_total - self.cores_used

    @property
    def slots_free(self) -> int:
        """Slots HAMi still lets pods take."""
        return self.slots_total - self.slots_used

    @property
    def schedulable(self) -> bool:
        """True when HAMi would place new pods on the card at all (NVIDIA, healthy, not cordoned)."""
        return self.nvidia and self.health and not self.cordoned

    def card(self) -> Card:
        """The register card this view was built from."""
        return Card(
            uuid=self.uuid,
            index=self.index,
            count=self.slots_total,
            devmem=self.memory_total,
            devcore=self.cores_total,
            type=self.type,
            numa=self.numa,
            health=self.health,
            mode=self.mode,
        )

    def to_dict(self) -> dict[str, Any]:
        """The card in the cluster-info JSON shape."""
        return {
            "uuid": self.uuid,
            "index": self.index,
            "name": self.name,
            "type": self.type,
            "numa": self.numa,
            "health": self.health,
            "mode": self.mode,
            "nvidia": self.nvidia,
            "cordoned": self.cordoned,
            "memory": {"total": self.memory_total, "used": self.memory_used, "free": self.memory_free},
            "cores": {"total": self.cores_total, "used": self.cores_used, "free": self.cores_free},
            "slots": {"total": self.slots_total, "used": self.slots_used, "free": self.slots_free},
            "pods": [
                {
                    "namespace": pod.namespace,
                    "name": pod.name,
                    "uid": pod.uid,
                    "phase": pod.phase,
                    "memory": pod.mem,
                    "cores": pod.cores,
                    "slots": pod.slots,
                    "terminating": pod.deleting,
                }
                for pod in self.pods
            ],
        }


@dataclass(frozen=True)
class NodeInfo:
    """One GPU node: readiness, cordon, HAMi's view of it, and its cards."""

    name: str
    ready: bool
    schedulable: bool
    hami_usable: bool
    gpu_allocatable: int
    register_error: str | None
    cards: tuple[CardInfo, ...] = ()

    @property
    def usable(self) -> bool:
        """True when new GPU pods can land here: ready, not cordoned, HAMi-usable, register readable."""
        return self.ready and self.schedulable and self.hami_usable and self.register_error is None

    def card(self, uuid: str) -> CardInfo | None:
        """The card with that UUID, or None."""
        return next((card for card in self.cards if card.uuid == uuid), None)

    def to_dict(self) -> dict[str, Any]:
        """The node in the cluster-info JSON shape."""
        return {
            "name": self.name,
            "ready": self.ready,
            "schedulable": self.schedulable,
            "hamiUsable": self.hami_usable,
            "gpuAllocatable": self.gpu_allocatable,
            "registerError": self.register_error,
            "cards": [card.to_dict() for card in self.cards],
        }


@dataclass(frozen=True)
class ClusterInfo:
    """Every GPU node with its cards and usage at one moment, plus warnings about pods HAMi cannot count, and the
    rooms kept for rescued Pending pods (only the server, which checks their seals, knows them)."""

    generated_at: datetime
    nodes: tuple[NodeInfo, ...]
    warnings: tuple[str, ...] = ()
    kept: tuple[Reservation, ...] = ()

    def node(self, name: str) -> NodeInfo | None:
        """The node with that name, or None."""
        return next((node for node in self.nodes if node.name == name), None)

    def only(self, names: Collection[str]) -> ClusterInfo:
        """The view of the named nodes alone, with the rooms kept on their cards."""
        nodes = tuple(node for node in self.nodes if node.name in names)
        cards = {card.uuid for node in nodes for card in node.cards}
        return replace(self, nodes=nodes, kept=tuple(room for room in self.kept if cards.intersection(room.cards)))

    def kept_view(self) -> ClusterInfo:
        """The view of the nodes a kept room's card is on, with those rooms (what the fleet summary shows of them)."""
        cards = {uuid for room in self.kept for uuid in room.cards}
        return self.only({node.name for node in self.nodes if any(card.uuid in cards for card in node.cards)})

    def to_dict(self, fragmentation: Fragmentation | None = None) -> dict[str, Any]:
        """The `GET /api/v1/cluster-info` document (shape in the module docstring); `fragmentation` is
        `summarize(self)` when the caller has it already (at 5,000 nodes it costs 0.2 s)."""
        return {
            "generatedAt": rfc3339(self.generated_at),
            "nodes": [node.to_dict() for node in self.nodes],
            "fragmentation": (summarize(self) if fragmentation is None else fragmentation).to_dict(),
            "warnings": list(self.warnings),
            "keptRooms": kept_rooms_data(self.kept),
        }


def kept_rooms(reservations: Iterable[Reservation], now: datetime) -> tuple[Reservation, ...]:
    """The rooms still kept at `now`, by deadline then pod."""
    return tuple(sorted((kept for kept in reservations if kept.holds(now)), key=lambda kept: (kept.until, kept.pod)))


def kept_rooms_data(kept: Iterable[Reservation]) -> list[dict[str, Any]]:
    """The document's `keptRooms`."""
    return [{"pod": room.pod, "cards": list(room.cards), "until": rfc3339(room.until)} for room in kept]


def counted_allocation(pod: Mapping[str, Any]) -> PodAllocation | str | None:
    """What one pod adds to the view: its allocation, a warning when HAMi cannot decode it, None when unplaced."""
    try:
        return pod_allocation(pod)
    except ModelError as err:
        return f"{err}; HAMi cannot decode it either, so it is not counted"


def cluster_info(
    nodes: Iterable[Mapping[str, Any]], counted: Iterable[PodAllocation | str], now: datetime
) -> ClusterInfo:
    """The view from node objects and each pod's `counted_allocation` (a cache may keep those per pod)."""
    count = ClusterCount(nodes)
    for allocation in counted:
        count.add(allocation)
    return count.view(now)


class ClusterCount:
    """`cluster_info` with the pods added one at a time: status computed from the API counts each page of pods
    while the next one is read (at 5,000 nodes, the count was half the view built after the last page)."""

    def __init__(self, nodes: Iterable[Mapping[str, Any]]) -> None:
        self._nodes: list[_NodeCount] = []
        # By name, so that each pod reaches only its own node: linear in nodes + pods, not their product.
        self._by_name: dict[str, list[_NodeCount]] = {}
        self._warnings: list[str] = []
        for node in nodes:
            count = _NodeCount.of(node)
            if count is not None:
                self._nodes.append(count)
                self._by_name.setdefault(count.name, []).append(count)

    def add(self, allocation: PodAllocation | str) -> None:
        """One pod's `counted_allocation`, in list order."""
        if isinstance(allocation, str):
            self._warnings.append(allocation)
            return
        for node in self._by_name.get(allocation.node, ()):
            node.tally.add(allocation)

    def view(self, now: datetime) -> ClusterInfo:
        """The view of the pods added so far, nodes sorted by name."""
        infos = sorted((node.info() for node in self._nodes), key=lambda info: info.name)
        return ClusterInfo(generated_at=now, nodes=tuple(infos), warnings=tuple(self._warnings))


def cluster_info_from_dict(data: object) -> ClusterInfo:
    """Read a cluster-info document back (what the plugin gets from the webhook); ClusterInfoError when malformed."""
    try:
        root = _map(data, "document")
        nodes = tuple(_node_from_dict(item, f"nodes[{i}]") for i, item in enumerate(_list(root, "nodes", "")))
        warnings = tuple(_str(w, "warnings[]") for w in _list(root, "warnings", ""))
        kept = tuple(_kept_from_dict(item, f"keptRooms[{i}]") for i, item in enumerate(_list(root, "keptRooms", "")))
        return ClusterInfo(
            generated_at=parse_time(root.get("generatedAt"), "generatedAt"), nodes=nodes, warnings=warnings, kept=kept
        )
    except ClusterInfoError:
        raise
    except ModelError as err:
        raise ClusterInfoError(f"cluster-info: {err}") from None


def node_info(node: Mapping[str, Any], allocations: Iterable[PodAllocation]) -> NodeInfo | None:
    """One node's view from its object and the allocations on it (in the order `cluster_info` reads them), None
    for a node that is not a GPU node at all: what a cache may keep per node until that node or its pods change."""
    count = _NodeCount.of(node)
    if count is None:
        return None
    for allocation in allocations:
        count.tally.add(allocation)
    return count.info()


@dataclass
class _NodeCount:
    """What a node's view reads of its object, and the usage of its cards as its pods are added."""

    name: str
    ready: bool
    schedulable: bool
    allocatable: int
    register_error: str | None
    cards: tuple[Card, ...]
    cordoned: frozenset[str]
    tally: UsageTally

    @classmethod
    def of(cls, node: Mapping[str, Any]) -> _NodeCount | None:
        """The node's part, None for a node that is not a GPU node at all."""
        name = _node_name(node)
        if not name:
            return None
        metadata = node["metadata"]
        annotations = metadata.get("annotations")
        annotations = annotations if isinstance(annotations, Mapping) else {}
        allocatable = _gpu_allocatable(node)
        if REGISTER_ANNOTATION not in annotations and allocatable == 0:
            return None
        register_error = None
        cards: tuple[Card, ...] = ()
        try:
            cards = node_cards(node)
        except ModelError as err:
            register_error = str(err)
        spec = node.get("spec")
        unschedulable = isinstance(spec, Mapping) and spec.get("unschedulable") is True
        return cls(
            name=name,
            ready=_ready(node),
            schedulable=not unschedulable,
            allocatable=allocatable,
            register_error=register_error,
            cards=cards,
            cordoned=cordoned_cards({k: v for k, v in annotations.items() if isinstance(v, str)}),
            tally=UsageTally(cards, node=name),
        )

    def info(self) -> NodeInfo:
        """The node's view with the allocations added so far."""
        usage = self.tally.totals()
        return NodeInfo(
            name=self.name,
            ready=self.ready,
            schedulable=self.schedulable,
            hami_usable=self.allocatable > 0,
            gpu_allocatable=self.allocatable,
            register_error=self.register_error,
            cards=tuple(_card_info(card, usage[card.uuid], card.uuid in self.cordoned) for card in self.cards),
        )


def _card_info(card: Card, usage: tuple[int, int, int, tuple[PodOnCard, ...]], cordoned: bool) -> CardInfo:
    """One card's view: its register entry and HAMi's usage of it (`UsageTally.totals`)."""
    slots, mem, cores, pods = usage
    return CardInfo(
        uuid=card.uuid,
        index=card.index,
        type=card.type,
        numa=card.numa,
        health=card.health,
        mode=card.mode,
        nvidia=card.is_nvidia,
        cordoned=cordoned,
        memory_total=card.devmem,
        memory_used=mem,
        cores_total=card.devcore,
        cores_used=cores,
        slots_total=card.count,
        slots_used=slots,
        pods=pods,
    )


@dataclass(frozen=True)
class NodeShare:
    """One node's part of the fragmentation summary, kept per node by the webhook's cache."""

    fragmentation: NodeFragmentation


def node_share(node: NodeInfo) -> NodeShare:
    """The node's share of `fragmentation.summarize`, so that a cache keeping it per node sums the summary."""
    return NodeShare(node_fragmentation(node.name, [card for card in node.cards if is_open(node, card)]))


def fragmentation_of(shares: Sequence[NodeShare]) -> Fragmentation:
    """The summary `fragmentation.summarize` gives for the nodes these shares are of (same order)."""
    return combine([share.fragmentation for share in shares])


def _node_name(node: Mapping[str, Any]) -> str:
    """The node's name ("" when it has none)."""
    metadata = node.get("metadata") if isinstance(node, Mapping) else None
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    return name if isinstance(name, str) else ""


def _ready(node: Mapping[str, Any]) -> bool:
    """True when the node's Ready condition is True."""
    status = node.get("status")
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    if not isinstance(conditions, list):
        return False
    return any(isinstance(c, Mapping) and c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _gpu_allocatable(node: Mapping[str, Any]) -> int:
    """The node's allocatable `nvidia.com/gpu` (0 when absent or unreadable), at most int64's largest, as the API
    server's Quantity.Value() reports it: one node's 1e30 made every cluster-info read fail to serialize."""
    status = node.get("status")
    allocatable = status.get("allocatable") if isinstance(status, Mapping) else None
    if not isinstance(allocatable, Mapping) or GPU not in allocatable:
        return 0
    try:
        value = parse_quantity(allocatable[GPU], GPU)
    except ModelError:
        return 0
    return min(max(int(value), 0), 2**63 - 1)


def _node_from_dict(data: object, where: str) -> NodeInfo:
    """One node of a cluster-info document."""
    node = _map(data, where)
    error = node.get("registerError")
    if error is not None and not isinstance(error, str):
        raise ClusterInfoError(f"cluster-info {where}.registerError must be a string or null")
    return NodeInfo(
        name=_str(node.get("name"), f"{where}.name"),
        ready=_bool(node.get("ready"), f"{where}.ready"),
        schedulable=_bool(node.get("schedulable"), f"{where}.schedulable"),
        hami_usable=_bool(node.get("hamiUsable"), f"{where}.hamiUsable"),
        gpu_allocatable=_int(node.get("gpuAllocatable"), f"{where}.gpuAllocatable"),
        register_error=error,
        cards=tuple(_card_from_dict(item, f"{where}.cards[{i}]") for i, item in enumerate(_list(node, "cards", where))),
    )


def _card_from_dict(data: object, where: str) -> CardInfo:
    """One card of a cluster-info document."""
    card = _map(data, where)
    memory = _map(card.get("memory"), f"{where}.memory")
    cores = _map(card.get("cores"), f"{where}.cores")
    slots = _map(card.get("slots"), f"{where}.slots")
    pods = []
    for i, item in enumerate(_list(card, "pods", where)):
        pod = _map(item, f"{where}.pods[{i}]")
        at = f"{where}.pods[{i}]"
        pods.append(
            PodOnCard(
                namespace=_str(pod.get("namespace"), f"{at}.namespace"),
                name=_str(pod.get("name"), f"{at}.name"),
                uid=_str(pod.get("uid"), f"{at}.uid"),
                phase=_str(pod.get("phase"), f"{at}.phase"),
                mem=_int(pod.get("memory"), f"{at}.memory"),
                cores=_int(pod.get("cores"), f"{at}.cores"),
                slots=_int(pod.get("slots"), f"{at}.slots"),
                deleting=_bool(pod.get("terminating"), f"{at}.terminating"),
            )
        )
    return CardInfo(
        uuid=_str(card.get("uuid"), f"{where}.uuid"),
        index=_int(card.get("index"), f"{where}.index"),
        type=_str(card.get("type"), f"{where}.type"),
        numa=_int(card.get("numa"), f"{where}.numa"),
        health=_bool(card.get("health"), f"{where}.health"),
        mode=_str(card.get("mode"), f"{where}.mode"),
        nvidia=_bool(card.get("nvidia"), f"{where}.nvidia"),
        cordoned=_bool(card.get("cordoned"), f"{where}.cordoned"),
        memory_total=_int(memory.get("total"), f"{where}.memory.total"),
        memory_used=_int(memory.get("used"), f"{where}.memory.used"),
        cores_total=_int(cores.get("total"), f"{where}.cores.total"),
        cores_used=_int(cores.get("used"), f"{where}.cores.used"),
        slots_total=_int(slots.get("total"), f"{where}.slots.total"),
        slots_used=_int(slots.get("used"), f"{where}.slots.used"),
        pods=tuple(pods),
    )


def _kept_from_dict(item: object, where: str) -> Reservation:
    """One kept room of the document (a server before them sends none)."""
    data = _map(item, where)
    pod = _str(data.get("pod"), f"{where}.pod")
    namespace, _, name = pod.partition("/")
    if not is_namespaced_name(namespace, name):
        raise ClusterInfoError(f"cluster-info {where}.pod must be namespace/name")
    cards = _list(data, "cards", where)
    if not cards or len(cards) > MAX_CARDS or not all(is_card_id(card) for card in cards):
        raise ClusterInfoError(f"cluster-info {where}.cards must be 1 to {MAX_CARDS} card UUIDs")
    return Reservation(pod, tuple(cards), parse_time(data.get("until"), f"{where}.until"))


def _map(value: object, where: str) -> Mapping[str, Any]:
    """An object, or ClusterInfoError."""
    if not isinstance(value, Mapping):
        raise ClusterInfoError(f"cluster-info {where} must be an object")
    return value


def _list(data: Mapping[str, Any], key: str, where: str) -> list[Any]:
    """A list field (absent = empty), or ClusterInfoError."""
    value = data.get(key, [])
    if not isinstance(value, list):
        raise ClusterInfoError(f"cluster-info {where + '.' if where else ''}{key} must be a list")
    return value


def _str(value: object, where: str) -> str:
    """A string, or ClusterInfoError."""
    if not isinstance(value, str):
        raise ClusterInfoError(f"cluster-info {where} must be a string")
    return value


def _int(value: object, where: str) -> int:
    """An integer, or ClusterInfoError."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ClusterInfoError(f"cluster-info {where} must be an integer")
    return value


def _bool(value: object, where: str) -> bool:
    """A boolean, or ClusterInfoError."""
    if not isinstance(value, bool):
        raise ClusterInfoError(f"cluster-info {where} must be true or false")
    return value
