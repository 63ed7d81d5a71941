"""Seeded fragmented clusters and goals for the planner's regression test (`test_core_planner_search`).

Shares of one card and whole cards of two, placed at random until the cards are nearly full; some pods may only run
on some nodes (as the trace replay's CPU and memory limit them), some never move. The goals: a pod that fits no card
now (one share, one whole card or two whole cards, some limited to some nodes) and whole free cards.
"""

from __future__ import annotations

import random

from kubectl_hami_place.core.allocations import ContainerDevice
from kubectl_hami_place.core.cards import Card
from kubectl_hami_place.core.planner import DO_NOT_MOVE, FitGoal, FreeCardsGoal, Goal, PlanNode, PlanPod, Snapshot
from kubectl_hami_place.core.requests import card_request
from kubectl_hami_place.core.usage import PodAllocation

CARD_MIB = 16384
CASES = 30


def fragmented(seed: int, nodes: int = 24, cards: int = 4) -> tuple[Snapshot, list[Goal]]:
    """A cluster filled at random to nearly full, and the goals to plan on it."""
    rng = random.Random(seed)
    names = [f"node-{n:02d}" for n in range(nodes)]
    plan_nodes = tuple(
        PlanNode(
            name=name,
            cards=tuple(
                Card(
                    uuid=f"GPU-{name}-{c}",
                    index=c,
                    count=10,
                    devmem=CARD_MIB,
                    devcore=100,
                    type="NVIDIA-T4",
                    health=True,
                    mode="hami-core",
                    numa=c // 2,
                )
                for c in range(cards)
            ),
        )
        for name in names
    )
    free = {card.uuid: [CARD_MIB, 100, 10] for node in plan_nodes for card in node.cards}
    pods = []
    for p in range(nodes * cards * 4):
        whole = rng.random() < 0.12
        nums = 2 if whole and rng.random() < 0.4 else 1
        percent = 100 if whole else rng.choice((10, 20, 25, 30, 40, 50, 60, 75))
        mem, cores = CARD_MIB * percent // 100, percent
        node = rng.choice(plan_nodes)
        fitting = [
            c.uuid for c in node.cards if free[c.uuid][0] >= mem and free[c.uuid][1] >= cores and free[c.uuid][2]
        ]
        if len(fitting) < nums:
            continue
        uuids = sorted(rng.sample(fitting, nums))
        for uuid in uuids:
            free[uuid][0] -= mem
            free[uuid][1] -= cores
            free[uuid][2] -= 1
        request = card_request(nums, mem_percentage=percent, coresreq=percent)
        name = f"pod-{p:03d}"
        devices = tuple(ContainerDevice(uuid, "NVIDIA", mem, cores) for uuid in uuids)
        limited = rng.random() < 0.3
        pods.append(
            PlanPod(
                namespace="trace",
                name=name,
                uid=name,
                requests=(request,),
                annotations={DO_NOT_MOVE: "true"} if rng.random() < 0.05 else {},
                allocation=PodAllocation("trace", name, name, node.name, "Running", (devices,)),
                owner_kind="ReplicaSet",
                nodes=frozenset(rng.sample(names, nodes // 2)) | {node.name} if limited else None,
            )
        )
    goals: list[Goal] = []
    for g in range(3):
        nums = rng.choice((1, 1, 1, 2))
        percent = 100 if nums == 2 else rng.choice((50, 60, 75, 90, 100))
        nodes_of = frozenset(rng.sample(names, nodes // 3)) if rng.random() < 0.3 else None
        goals.append(
            FitGoal(
                PlanPod(
                    namespace="trace",
                    name=f"pending-{g}",
                    requests=(card_request(nums, mem_percentage=percent, coresreq=percent),),
                    owner_kind="ReplicaSet",
                    nodes=nodes_of,
                )
            )
        )
    goals.append(FreeCardsGoal(rng.choice((1, 3, 8))))
    return Snapshot(nodes=plan_nodes, pods=tuple(pods)), goals
