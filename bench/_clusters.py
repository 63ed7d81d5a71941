"""Random fragmented clusters for the planner bench: nodes of identical cards, pods of one or two cards."""

from __future__ import annotations

import random

from kubectl_hami_place.core.allocations import ContainerDevice
from kubectl_hami_place.core.cards import Card
from kubectl_hami_place.core.planner import PlanNode, PlanPod, Snapshot
from kubectl_hami_place.core.requests import card_request
from kubectl_hami_place.core.usage import PodAllocation

CARD_MIB = 40960
SIZES = (2048, 4096, 4096, 8192, 8192, 10240, 16384, 20480)


def cluster(seed: int, nodes: int, cards: int, pods: int, *, slots: int = 10, multi: float = 0.0) -> Snapshot:
    """A cluster with `pods` placed at random (first card that fits), so free memory ends up scattered."""
    rng = random.Random(seed)
    plan_nodes = []
    free: dict[str, list[int]] = {}
    used_slots: dict[str, int] = {}
    for n in range(nodes):
        name = f"node-{n:04d}"
        node_cards = tuple(
            Card(
                uuid=f"GPU-{n:04d}-{c}",
                index=c,
                count=slots,
                devmem=CARD_MIB,
                devcore=100,
                type="NVIDIA-A100-SXM4-40GB",
                health=True,
                mode="hami-core",
            )
            for c in range(cards)
        )
        plan_nodes.append(PlanNode(name=name, cards=node_cards))
        for card in node_cards:
            free[card.uuid] = [CARD_MIB, 100]
            used_slots[card.uuid] = 0
    plan_pods = []
    for p in range(pods):
        mem = rng.choice(SIZES)
        cores = rng.choice((0, 10, 20, 30))
        nums = 2 if rng.random() < multi else 1
        for _ in range(20):
            node = rng.choice(plan_nodes)
            choices = [
                c.uuid
                for c in node.cards
                if free[c.uuid][0] >= mem and free[c.uuid][1] >= cores and used_slots[c.uuid] < slots
            ]
            if len(choices) >= nums:
                break
        else:
            continue
        uuids = sorted(rng.sample(choices, nums))
        for uuid in uuids:
            free[uuid][0] -= mem
            free[uuid][1] -= cores
            used_slots[uuid] += 1
        request = card_request(nums, memreq=mem, coresreq=cores)
        devices = tuple(ContainerDevice(uuid, "NVIDIA", mem, cores) for uuid in uuids)
        plan_pods.append(
            PlanPod(
                namespace="bench",
                name=f"pod-{p:05d}",
                uid=f"uid-{p}",
                requests=(request,),
                allocation=PodAllocation(
                    namespace="bench",
                    name=f"pod-{p:05d}",
                    uid=f"uid-{p}",
                    node=node.name,
                    phase="Running",
                    containers=(devices,),
                ),
                owner_kind="ReplicaSet",
            )
        )
    return Snapshot(nodes=tuple(plan_nodes), pods=tuple(plan_pods))
