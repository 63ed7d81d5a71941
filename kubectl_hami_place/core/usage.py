"""Per-card usage built from pods' allocations, counted the way HAMi v2.10's scheduler counts it.

Which pods count (`onAddPod`, `pkg/scheduler/scheduler.go`): every pod carrying `hami.io/vgpu-node`, decoded
from `hami.io/vgpu-devices-allocated`, on the node that annotation names (not `spec.nodeName`). A pod stops
counting only when its phase is Failed or Succeeded, or once it is deleted; a terminating pod still counts, and
`hami.io/bind-phase` is not consulted.

How much a pod takes of a card (`CollapseInitContainerUsage`, `pkg/device`): init containers run one after
another and app containers together, so per card the pod takes, in each of memory, cores and slots, the larger
of the init peak (the biggest init container's memory, the biggest cores, one slot) and the app sum (memory and
cores summed, one slot per app container on the card). Once the pod's status lists its init containers all
terminated with exit code 0 (`AllInitContainersSucceeded`, whatever the phase), only the app containers count
(`AppContainersOnlyDeviceUsage`: their plain sums, negative ones included, where the collapse above never goes below
0). A device counts on the card whose UUID is exactly its own (`getNodesUsage`, `pkg/scheduler/scheduler.go`): a
legacy MIG entry (`UUID[t-s]`) counts on no card.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from kubectl_hami_place.core.allocations import (
    ALLOCATED_ANNOTATION,
    NODE_ANNOTATION,
    ContainerDevices,
    parse_allocation,
)
from kubectl_hami_place.core.cards import Card
from kubectl_hami_place.core.errors import AllocationError
from kubectl_hami_place.core.fields import as_mapping
from kubectl_hami_place.core.names import ENDED_PHASES


@dataclass(frozen=True)
class CardShare:
    """What one pod takes of one card once its containers are collapsed: slots, memory (MiB), cores (%)."""

    uuid: str
    slots: int
    mem: int
    cores: int


@dataclass(frozen=True)
class PodAllocation:
    """A pod HAMi placed: where, its phase, and the devices of each container (init containers first)."""

    namespace: str
    name: str
    uid: str
    node: str
    phase: str
    containers: tuple[ContainerDevices, ...]
    deleting: bool = False
    init_containers: int = 0
    init_done: bool = False

    @property
    def counted(self) -> bool:
        """True while HAMi counts the pod: it has not ended (Failed/Succeeded); terminating pods still count."""
        return self.phase not in ENDED_PHASES

    @property
    def key(self) -> str:
        """`namespace/name`, how messages name the pod."""
        return f"{self.namespace}/{self.name}"

    def shares(self) -> tuple[CardShare, ...]:
        """The pod's take of each card it holds, in first-seen card order."""
        return tuple(CardShare(uuid, slots, mem, cores) for uuid, slots, mem, cores in self.takes())

    def takes(self) -> list[tuple[str, int, int, int]]:
        """`shares` as (uuid, slots, mem, cores), without a dataclass each: the tally reads 40,000 of them a status run,
        the planner's state every pod's at each plan."""
        if not self.init_containers and len(self.containers) == 1 and len(self.containers[0]) == 1:
            device = self.containers[0][0]  # the common pod: one container on one card, as the loop below counts it
            if self.init_done:
                return [(device.uuid, 1, device.usedmem, device.usedcores)]
            return [(device.uuid, 1, max(0, device.usedmem), max(0, device.usedcores))]
        init_peak: dict[str, tuple[int, int]] = {}
        app_sum: dict[str, tuple[int, int, int]] = {}
        order: list[str] = []
        for position, devices in enumerate(self.containers):
            is_init = position < self.init_containers
            if is_init and self.init_done:
                continue
            for device in devices:
                uuid = device.uuid
                if uuid not in init_peak and uuid not in app_sum:
                    order.append(uuid)
                if is_init:
                    mem, cores = init_peak.get(uuid, (0, 0))
                    init_peak[uuid] = (max(mem, device.usedmem), max(cores, device.usedcores))
                else:
                    mem, cores, slots = app_sum.get(uuid, (0, 0, 0))
                    app_sum[uuid] = (mem + device.usedmem, cores + device.usedcores, slots + 1)
        if self.init_done:
            return [(uuid, slots, mem, cores) for uuid, (mem, cores, slots) in app_sum.items()]
        result = []
        for uuid in order:
            init_mem, init_cores = init_peak.get(uuid, (0, 0))
            app_mem, app_cores, app_slots = app_sum.get(uuid, (0, 0, 0))
            result.append((uuid, max(app_slots, 1), max(init_mem, app_mem), max(init_cores, app_cores)))
        return result


@dataclass(frozen=True)
class PodOnCard:
    """A pod as seen from one card it uses: who, and what it takes of that card."""

    namespace: str
    name: str
    uid: str
    phase: str
    slots: int
    mem: int
    cores: int
    deleting: bool = False


@dataclass(frozen=True)
class CardUsage:
    """What HAMi counts as used on one card: slots, memory (MiB), cores (%), and the pods that use it."""

    uuid: str
    used_slots: int = 0
    used_mem: int = 0
    used_cores: int = 0
    pods: tuple[PodOnCard, ...] = ()


def pod_allocation(pod: Mapping[str, Any]) -> PodAllocation | None:
    """The allocation of a pod object (JSON dict form); None when HAMi has not placed it (no node or devices)."""
    if not isinstance(pod, Mapping):
        raise AllocationError(f"a pod must be an object, got {type(pod).__name__}")
    metadata = as_mapping(pod.get("metadata"))
    annotations = as_mapping(metadata.get("annotations"))
    node = annotations.get(NODE_ANNOTATION)
    text = annotations.get(ALLOCATED_ANNOTATION)
    if not isinstance(node, str) or not node or text is None:
        return None
    namespace = _text(metadata.get("namespace"))
    name = _text(metadata.get("name"))
    try:
        containers = parse_allocation(text)
    except AllocationError as err:
        raise AllocationError(f"pod {namespace}/{name}: {err}") from None
    spec = as_mapping(pod.get("spec"))
    status = as_mapping(pod.get("status"))
    init_specs = spec.get("initContainers")
    init_count = len(init_specs) if isinstance(init_specs, list) else 0
    phase = _text(status.get("phase"))
    return PodAllocation(
        namespace=namespace,
        name=name,
        uid=_text(metadata.get("uid")),
        node=node,
        phase=phase,
        containers=containers,
        deleting=metadata.get("deletionTimestamp") is not None,
        init_containers=init_count,
        init_done=init_count > 0 and _init_containers_succeeded(status),
    )


def card_usage(
    cards: Iterable[Card], allocations: Iterable[PodAllocation], node: str | None = None
) -> dict[str, CardUsage]:
    """Usage of each card (by UUID) from the allocations that count; `node` keeps only allocations on that node."""
    tally = UsageTally(cards, node)
    for allocation in allocations:
        tally.add(allocation)
    return tally.usage()


class UsageTally:
    """`card_usage` summed one allocation at a time, for a caller that gets them a page at a time."""

    def __init__(self, cards: Iterable[Card], node: str | None = None) -> None:
        self._node = node
        # Summed in place and frozen once per card: a CardUsage per share made 40,000 of them at 5,000 nodes.
        self._totals: dict[str, tuple[list[int], list[PodOnCard]]] = {card.uuid: ([0, 0, 0], []) for card in cards}

    def add(self, allocation: PodAllocation) -> None:
        """Count the allocation if it counts, on this node, on these cards."""
        if not allocation.counted or (self._node is not None and allocation.node != self._node):
            return
        for uuid, slots, mem, cores in allocation.takes():
            total = self._totals.get(uuid)
            if total is None:
                continue
            used, pods = total
            used[0] += slots
            used[1] += mem
            used[2] += cores
            pods.append(_pod_on_card(allocation, slots, mem, cores))

    def usage(self) -> dict[str, CardUsage]:
        """Each card's usage so far."""
        return {
            uuid: CardUsage(uuid=uuid, used_slots=slots, used_mem=mem, used_cores=cores, pods=pods)
            for uuid, (slots, mem, cores, pods) in self.totals().items()
        }

    def totals(self) -> dict[str, tuple[int, int, int, tuple[PodOnCard, ...]]]:
        """Each card's used slots, memory and cores and its pods so far: `usage` without a CardUsage per card."""
        return {uuid: (used[0], used[1], used[2], tuple(pods)) for uuid, (used, pods) in self._totals.items()}


def release(usage: Mapping[str, CardUsage], allocation: PodAllocation) -> dict[str, CardUsage]:
    """The usage once the allocation is released (its pod evicted): its shares and its entry leave every card."""
    result = dict(usage)
    if not allocation.counted:
        return result
    for share in allocation.shares():
        current = result.get(share.uuid)
        if current is None or not any(_same_pod(pod, allocation) for pod in current.pods):
            continue
        result[share.uuid] = replace(
            current,
            used_slots=max(current.used_slots - share.slots, 0),
            used_mem=max(current.used_mem - share.mem, 0),
            used_cores=max(current.used_cores - share.cores, 0),
            pods=tuple(pod for pod in current.pods if not _same_pod(pod, allocation)),
        )
    return result


def _pod_on_card(allocation: PodAllocation, slots: int, mem: int, cores: int) -> PodOnCard:
    """The card-side view of one pod's share."""
    return PodOnCard(
        namespace=allocation.namespace,
        name=allocation.name,
        uid=allocation.uid,
        phase=allocation.phase,
        slots=slots,
        mem=mem,
        cores=cores,
        deleting=allocation.deleting,
    )


def _same_pod(pod: PodOnCard, allocation: PodAllocation) -> bool:
    """Match by UID when both have one, else by namespace and name."""
    if pod.uid and allocation.uid:
        return pod.uid == allocation.uid
    return (pod.namespace, pod.name) == (allocation.namespace, allocation.name)


def _init_containers_succeeded(status: Mapping[str, Any]) -> bool:
    """HAMi's AllInitContainersSucceeded: the pod lists init container statuses, each terminated with exit code 0.

    Whatever the phase and however many are listed; HAMi drops the init containers' share on the pod's next update.
    """
    statuses = status.get("initContainerStatuses")
    if not isinstance(statuses, list) or not statuses:
        return False
    for entry in statuses:
        state = as_mapping(as_mapping(entry).get("state"))
        terminated = as_mapping(state.get("terminated"))
        if not terminated or terminated.get("exitCode") != 0:
            return False
    return True


def _text(value: object) -> str:
    """The value when it is a string, else ""."""
    return value if isinstance(value, str) else ""
