"""Seeded fragmented clusters and goals for the planner's regression test (`test_core_planner_search`).

Shares of one card and whole cards of two, placed at random until the cards are nearly full; some pods may only run
on some nodes (as the trace replay's CPU and memory limit them), some never move. The goals: a pod that fits no card
now (one share, one whole card or two whole cards, some limited to some nodes) and whole free cards.
"""

from __future__ import annotations

import random
from dataclasses import replace

from kubectl_hami_place.core.allocations import ContainerDevice
from kubectl_hami_place.core.cards import Card
from kubectl_hami_place.core.fit import NOUSE_UUID, USE_UUID
from kubectl_hami_place.core.node_resources import Resources
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


def kept_rooms(seed: int) -> tuple[Snapshot, list[Goal]]:
    """The seed's cluster as the trace replay keeps rescued rooms: each node's CPU, memory and pods counted (some
    nearly full) and every pod's needs, some placed pods barred from cards by `nvidia.com/nouse-gpuuuid`, and each
    pending pod barred from a card or two (the kept room), one pinned to two nodes' cards by `use-gpuuuid`."""
    snapshot, goals = fragmented(seed)
    rng = random.Random(1000 + seed)
    uuids = [card.uuid for node in snapshot.nodes for card in node.cards]

    def needs() -> Resources:
        return Resources(cpu=rng.choice((500, 2000, 8000)), memory=rng.choice((1, 4, 16)) * 2**30, pods=1)

    def barred(count: int) -> dict[str, str]:
        return {NOUSE_UUID: ",".join(rng.sample(uuids, count))}

    nodes = tuple(
        replace(node, room=Resources(cpu=rng.choice((0, 4000, 16000)), memory=rng.choice((2, 8, 64)) * 2**30, pods=50))
        for node in snapshot.nodes
    )
    pods = tuple(
        replace(pod, needs=needs(), annotations={**pod.annotations, **(barred(2) if rng.random() < 0.2 else {})})
        for pod in snapshot.pods
    )
    kept: list[Goal] = []
    for position, goal in enumerate(goals):
        if not isinstance(goal, FitGoal):
            kept.append(goal)
            continue
        if position == 1:
            pinned = {USE_UUID: ",".join(card.uuid for node in rng.sample(nodes, 2) for card in node.cards)}
            kept.append(FitGoal(replace(goal.pod, needs=needs(), annotations=pinned)))
        else:
            kept.append(FitGoal(replace(goal.pod, needs=needs(), annotations=barred(rng.choice((1, 2))))))
    return Snapshot(nodes=nodes, pods=pods), kept
