"""Generated nodes and pods for the differential test against HAMi's own scheduler, and the objects they become.

A case is one node (its register, cordoned cards, the pods HAMi already placed on it) and one pod to place there.
The values come from small sets so that exact boundaries (free memory equal to the request, the last slot, all cores
taken) turn up often. Cases are drawn by hypothesis, derandomized, in an interpreter that imports only this module,
so every run checks the same cases.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import pickle
import subprocess
import sys
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import hypothesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from kubectl_hami_place.core.allocations import (
    ALLOCATED_ANNOTATION,
    NODE_ANNOTATION,
    ContainerDevice,
    encode_allocation,
    parse_allocation,
)
from kubectl_hami_place.core.cards import PAIR_SCORE_ANNOTATION, REGISTER_ANNOTATION, Card, encode_register
from kubectl_hami_place.core.fit import (
    DEVICE_CORDON,
    GPU_SCHEDULER_POLICY,
    NOUSE_TYPE,
    NOUSE_UUID,
    NUMA_BIND,
    SCORING_WEIGHTS,
    USE_TYPE,
    USE_UUID,
    VGPU_MODE,
)
from kubectl_hami_place.core.hami_config import HAMI_DEFAULTS, HamiConfig
from kubectl_hami_place.core.node_selection import node_marks
from kubectl_hami_place.core.planner import FitGoal, plan
from kubectl_hami_place.core.planner.objects import pod_for_plan, snapshot_from_objects

ROOT = Path(__file__).resolve().parent.parent
# HAMi's scheduler writes "Requesting_<local time>" in each device's handshake on each pass to every node whose
# handshake is not a request of the last minute, a GET and a PATCH a node and device, one after another (`CheckHealth`,
# pkg/device/devices.go): a node as the scheduler left it a moment ago registers without them, 20 s sooner for 500
# nodes. Besides NVIDIA's, v2.10 writes these four on every node whatever its device config (seen on a sandbox node);
# without them each case's node took 8 more requests, half of them node writes that every node watcher receives.
HANDSHAKE_ANNOTATION = "hami.io/node-handshake"
OTHER_HANDSHAKE_ANNOTATIONS = (
    "hami.io/node-handshake-biren",
    "hami.io/node-handshake-dcu",
    "hami.io/node-handshake-va",
    "hami.io/node-handshake-xpu",
)
TYPES = ("NVIDIA-A100-SXM4-40GB", "NVIDIA-Tesla T4", "NVIDIA-H100-80GB-HBM3", "nvidia-a10", "Ascend910")
MEMORIES = (1000, 4096, 16384, 40960)
ALLOCATED_MEMORIES = (0, 1000, 2048, 4096, 10000, 40960)
ALLOCATED_CORES = (0, 10, 30, 50, 100)
INIT_MEMORIES = (4096, 10000, 16384, 40960)
INIT_CORES = (50, 100)
ASKED_MEMORIES = ("1", "1000", "2048", "3k", "4096", "4Ki", "16384", "40960", "50000")
ASKED_PERCENTAGES = (0, 25, 50, 100, 150)
ASKED_CORES = (0, 10, 30, 50, 100, 150)
POLICIES = (
    "binpack",
    "spread",
    "mutex",
    "binpack",
    "spread",
    "numa",
    "binpack,numa",
    "numa,spread",
    "topology-aware",
    "spread,topology-aware",
)
TYPE_WORDS = ("A100", "t4", "H100", "NVIDIA", "a10")
UNSERVED_SCHEDULER = "hami-place-differential-nobody"
IMAGE = "registry.invalid/cuda:12"
NO_SCHEDULING = {"key": "hami-place.io/differential", "value": "true", "effect": "NoSchedule"}
# The cases' pods tolerate it, so that the planner (which reads taints as kube-scheduler does) may place them there.
TOLERATES = {"key": "hami-place.io/differential", "operator": "Exists", "effect": "NoSchedule"}
# keys of HAMi's DeviceInfo the model does not use, each with a value of the right and of the wrong JSON type
REGISTER_EXTRAS: tuple[dict[str, Any], ...] = (
    {"migProfiles": [{"name": "1g.10gb", "memoryMB": 9856, "core": 14, "sliceCount": 1, "placements": []}]},
    {"custominfo": {"any": [1, "x"]}, "devicevendor": "NVIDIA"},
    {"migProfiles": "1g.10gb"},
    {"migProfiles": [{"memoryMB": "9856"}]},
    {"devicevendor": 7},
    {"custominfo": [1]},
    {"migtemplate": [{"Name": "1g"}]},
)
WEIGHTS = (
    "slot=3,core=1,memory=1",
    "slot=0,core=0,memory=1",
    " memory = 5, slot = 1, core = 0 ",
    "slot=1,core=1",
    "slot=1,core=x,memory=1",
    "slot=0,core=0,memory=0",
)
PAIR_SCORES = (
    '[{"uuid":"GPU-0","score":{"GPU-1":50}}]',
    '[{"uuid":"GPU-0","score":{"GPU-1":50,"GPU-2":10}},{"uuid":"GPU-1","score":{"GPU-0":50,"GPU-2":90}},'
    '{"uuid":"GPU-2","score":{"GPU-0":10,"GPU-1":90}},{"uuid":"GPU-3","score":{"GPU-0":70}}]',
    '[{"uuid":"GPU-1","score":{"GPU-0":-5,"GPU-2":30}},{"uuid":"GPU-2","score":{"GPU-1":30}}]',
    "null",
    "",
    "{",
    '[{"uuid":"GPU-0","score":{"GPU-1":0.5}}]',
)


@dataclass(frozen=True)
class Resident:
    """A pod HAMi already placed on the node: its init and app containers, allocation text, phase, init progress."""

    init_containers: int
    containers: int
    allocation: str
    phase: str = "Pending"
    init_done: bool = False

    def status(self) -> dict[str, Any] | None:
        """The status a kubelet would have written, None for a pod nobody ran."""
        if self.phase == "Pending" and not self.init_done:
            return None
        state = {"terminated": {"exitCode": 0, "reason": "Completed"}} if self.init_done else {"running": {}}
        statuses = [
            {"name": f"i{i}", "image": IMAGE, "imageID": "", "ready": self.init_done, "restartCount": 0, "state": state}
            for i in range(self.init_containers)
        ]
        return {"phase": self.phase, "initContainerStatuses": statuses}


@dataclass(frozen=True)
class Case:
    """One node and one pod to place on it; `init` and `app` are the containers' resource limits.

    `webhook` False: the pod does not go through HAMi's webhook (labelled or in a namespace it skips). `pin`: the
    pod goes through the pin's whole plan instead, naming these cards (`gpu-N` or `gpu-N/P`, every container asking
    that many cards), and HAMi is asked about the pod as the pin's patch leaves it.
    """

    cards: tuple[Card, ...]
    legacy: bool = False
    register_extra: dict[str, Any] = field(default_factory=dict)
    pair_scores: str | None = None
    cordoned: tuple[str, ...] = ()
    residents: tuple[Resident, ...] = ()
    init: tuple[dict[str, str], ...] = ()
    app: tuple[dict[str, str], ...] = ({"nvidia.com/gpu": "1"},)
    annotations: dict[str, str] = field(default_factory=dict)
    webhook: bool = True
    pin: tuple[str, ...] = ()


@st.composite
def card_lists(draw: st.DrawFn) -> tuple[Card, ...]:
    """1 to 5 cards, mostly healthy NVIDIA cards with 100 cores, some exhausted, odd or foreign."""
    size = draw(st.integers(1, 5))
    cards = []
    for index in range(size):
        cards.append(
            Card(
                uuid=f"GPU-{index}",
                index=index,
                count=draw(st.sampled_from((10, 10, 10, 3, 2, 1, 0))),
                devmem=draw(st.sampled_from((*MEMORIES, *MEMORIES, *MEMORIES, 0))),
                devcore=draw(st.sampled_from((100, 100, 100, 100, 50, 200, 0))),
                type=draw(st.sampled_from((*TYPES[:4], *TYPES))),
                numa=draw(st.sampled_from((0, 0, 1))),
                health=draw(st.sampled_from((True,) * 7 + (False,))),
                mode=draw(st.sampled_from(("hami-core", "hami-core", "mps"))),
            )
        )
    return tuple(cards)


@st.composite
def residents(draw: st.DrawFn, uuids: list[str]) -> Resident:
    """A pod already on the node: per container 0 to 2 of its cards (or a card it no longer has)."""
    init_containers = draw(st.sampled_from((0, 1)))
    containers = draw(st.integers(1, 2))
    entries = []
    for position in range(init_containers + containers):
        chosen = draw(st.lists(st.sampled_from([*uuids, "GPU-gone"]), max_size=2, unique=True))
        # init containers take much, so that whether their share still counts decides many cases
        memories = INIT_MEMORIES if position < init_containers else ALLOCATED_MEMORIES
        cores = INIT_CORES if position < init_containers else ALLOCATED_CORES
        entries.append(
            tuple(
                ContainerDevice(
                    # HAMi's decoder keeps a legacy MIG suffix (no card matches it), an empty vendor, negative numbers
                    uuid + ("[0-1]" if draw(_sometimes(12)) else ""),
                    "" if draw(_sometimes(12)) else "NVIDIA",
                    draw(st.sampled_from(memories)) * (-1 if draw(_sometimes(12)) else 1),
                    draw(st.sampled_from(cores)),
                )
                for uuid in chosen
            )
        )
    phase = draw(st.sampled_from(("Pending", "Pending", "Pending", "Running", "Running", "Succeeded", "Failed")))
    init_done = init_containers > 0 and draw(st.booleans())
    text = encode_allocation(entries)
    if draw(_sometimes(8)):
        # a device without a comma (HAMi skips it) or with too few fields (HAMi drops the pod)
        text = draw(st.sampled_from(("junk:", "GPU-0,NVIDIA,1:"))) + text
    return Resident(init_containers, containers, text, phase, init_done)


@st.composite
def limits(draw: st.DrawFn) -> dict[str, str]:
    """One container's resource limits: cards, memory by MiB or percent, cores, each maybe absent."""
    result: dict[str, str] = {}
    count = draw(st.sampled_from((1, 1, 1, 1, 1, 1, 2, 2, 3, None)))
    if count is not None:
        result["nvidia.com/gpu"] = str(count)
    if draw(st.booleans()):
        result["nvidia.com/gpumem"] = draw(st.sampled_from(ASKED_MEMORIES))
    if draw(_sometimes(4)):
        result["nvidia.com/gpumem-percentage"] = str(draw(st.sampled_from(ASKED_PERCENTAGES)))
    if draw(st.booleans()):
        result["nvidia.com/gpucores"] = str(draw(st.sampled_from(ASKED_CORES)))
    return result


@st.composite
def uuid_lists(draw: st.DrawFn, uuids: list[str]) -> str:
    """A comma list of card UUIDs, maybe naming a card the node lacks, with HAMi's tolerated blanks."""
    chosen = draw(st.lists(st.sampled_from([*uuids, "GPU-missing"]), min_size=1, max_size=2, unique=True))
    return draw(st.sampled_from((",", ", "))).join(chosen)


@st.composite
def cases(draw: st.DrawFn) -> Case:
    """A node with its residents and a pod with its containers and annotations."""
    cards = draw(card_lists())
    uuids = [card.uuid for card in cards]
    annotations: dict[str, str] = {}
    optional: list[tuple[str, st.SearchStrategy[str]]] = [
        (USE_UUID, uuid_lists(uuids)),
        (NOUSE_UUID, uuid_lists(uuids)),
        (USE_TYPE, st.sampled_from(TYPE_WORDS)),
        (NOUSE_TYPE, st.sampled_from(TYPE_WORDS)),
        (GPU_SCHEDULER_POLICY, st.sampled_from(POLICIES)),
        (NUMA_BIND, st.sampled_from(("true", "true", "1", "false", "yes"))),
        (SCORING_WEIGHTS, st.sampled_from(WEIGHTS)),
    ]
    for key, values in optional:
        if draw(_sometimes(6)):
            annotations[key] = draw(values)
    if draw(_sometimes(16)):
        annotations[VGPU_MODE] = draw(st.sampled_from(("hami-core", "mps")))
    init = (draw(limits()),) if draw(_sometimes(5)) else ()
    app = tuple(draw(st.lists(limits(), min_size=1, max_size=3))) if draw(_sometimes(3)) else (draw(limits()),)
    pin: tuple[str, ...] = ()
    if draw(_sometimes(4)):
        # as pin leaves a pod: one card named by UUID, one card per GPU container
        annotations[USE_UUID] = draw(st.sampled_from(uuids))
        init, app = (_one_card(lim) for lim in init), (_one_card(lim) for lim in app)
    elif draw(_sometimes(3)):
        # through the pin's whole plan: one or two cards, whole or a share, every container asking that many
        chosen = draw(st.lists(st.sampled_from(range(len(cards))), min_size=1, max_size=2, unique=True))
        share = draw(st.sampled_from(("", "", "/25", "/50", "/100")))
        pin = tuple(f"gpu-{index}{share}" for index in chosen)
        annotations.pop(USE_UUID, None)
        init, app = (_one_card(lim, len(pin)) for lim in init), (_one_card(lim, len(pin)) for lim in app)
    return Case(
        cards=cards,
        legacy=draw(_sometimes(30)),
        register_extra=draw(st.sampled_from(REGISTER_EXTRAS)) if draw(_sometimes(15)) else {},
        pair_scores=draw(st.sampled_from(PAIR_SCORES)) if draw(_sometimes(8)) else None,
        cordoned=(draw(st.sampled_from(uuids)),) if draw(_sometimes(6)) else (),
        residents=tuple(draw(st.lists(residents(uuids), max_size=3))),
        init=tuple(init),
        app=tuple(app),
        annotations=annotations,
        webhook=bool(pin) or not draw(_sometimes(5)),
        pin=pin,
    )


FOCUSED_WEIGHTS = (
    "slot=3,core=1,memory=1",
    "slot=0,core=0,memory=1",
    "slot=0,core=5,memory=1",
    "slot=1,core=0,memory=4",
)
FOCUSED_PAIR_SCORES = (
    '[{"uuid":"GPU-0","score":{"GPU-1":10,"GPU-2":80,"GPU-3":30}},{"uuid":"GPU-1","score":{"GPU-0":10,"GPU-2":20,'
    '"GPU-3":90}},{"uuid":"GPU-2","score":{"GPU-0":80,"GPU-1":20,"GPU-3":40}},{"uuid":"GPU-3","score":{"GPU-0":30,'
    '"GPU-1":90,"GPU-2":40}}]',
    '[{"uuid":"GPU-0","score":{"GPU-1":-5,"GPU-2":7}},{"uuid":"GPU-2","score":{"GPU-0":7,"GPU-3":60}},'
    '{"uuid":"GPU-3","score":{"GPU-2":60,"GPU-1":1}}]',
)


@st.composite
def focused_cases(draw: st.DrawFn) -> Case:
    """A node of healthy cards on two NUMA nodes, some in use, and a pod whose card turns on numa-bind, score
    weights or topology-aware pair scores: the plain draws above rarely make those decide anything."""
    cards = _healthy_cards(draw(st.sampled_from(((0, 1, 0, 1), (0, 0, 1, 1), (1, 0, 0, 1), (0, 1, 1)))))
    kind = draw(st.sampled_from(("numa", "weights", "topology")))
    # weights decide only between cards in use: then every card holds a pod, of another make-up each
    held = [card.uuid for card in cards] if kind == "weights" else []
    held += [draw(st.sampled_from([card.uuid for card in cards])) for _ in range(draw(st.integers(0, 3)))]
    placed = _residents(draw, held)
    annotations: dict[str, str] = {}
    pair_scores = None
    if kind == "numa":
        annotations[NUMA_BIND] = "true"
        policy = draw(st.sampled_from(("binpack", "spread", "binpack,numa", "spread,binpack", "mutex")))
    elif kind == "weights":
        annotations[SCORING_WEIGHTS] = draw(st.sampled_from(FOCUSED_WEIGHTS))
        policy = draw(st.sampled_from(("binpack", "spread")))
    else:
        policy = draw(st.sampled_from(("topology-aware", "binpack,topology-aware")))
        pair_scores = draw(st.sampled_from(FOCUSED_PAIR_SCORES))
    annotations[GPU_SCHEDULER_POLICY] = policy
    limits = {
        "nvidia.com/gpu": str(draw(st.integers(1, 2))),
        "nvidia.com/gpumem": draw(st.sampled_from(("1000", "4096", "30000"))),
        "nvidia.com/gpucores": draw(st.sampled_from(("0", "10", "30"))),
    }
    return Case(cards=cards, residents=tuple(placed), app=(limits,), annotations=annotations, pair_scores=pair_scores)


def _healthy_cards(numas: tuple[int, ...]) -> tuple[Card, ...]:
    """Healthy 40 GiB cards of one type, one per NUMA node given."""
    return tuple(Card(f"GPU-{i}", i, 10, 40960, 100, TYPES[0], numa, True, "hami-core") for i, numa in enumerate(numas))


def _residents(draw: st.DrawFn, held: list[str]) -> list[Resident]:
    """A running one-card pod on each card named, of a drawn memory and cores."""
    placed = []
    for uuid in held:
        memory = draw(st.sampled_from((1000, 4096, 10000, 20000)))
        device = ContainerDevice(uuid, "NVIDIA", memory, draw(st.sampled_from((0, 10, 30, 60))))
        placed.append(Resident(0, 1, encode_allocation([(device,)]), "Running"))
    return placed


def generate_focused(count: int) -> list[Case]:
    """`count` distinct focused cases, the same on every run."""
    return _distinct("focused_cases", count)


# devices without a comma, as HAMi's DecodeContainerDevices skips them: a word, a bare UUID, fields without commas
COMMALESS_DEVICES = ("junk", "GPU-0", "GPU-1 NVIDIA 1000 0", "x")


@st.composite
def commaless_cases(draw: st.DrawFn) -> Case:
    """Healthy cards each held by a running pod, most of whose allocations hold a device without a comma (before or
    after the card's device, or a container entry of its own), and a pod whose card turns on what each holder takes:
    drawn among everything else such a holder rarely decides a case (1 of 400)."""
    cards = _healthy_cards(draw(st.sampled_from(((0,), (0, 0), (0, 0, 0)))))
    placed = []
    for card in cards:
        device = ContainerDevice(card.uuid, "NVIDIA", draw(st.sampled_from((10000, 20000, 30000))), 30)
        text = encode_allocation([(device,)])
        containers = 1
        where = draw(st.sampled_from(("before", "after", "container", "container", None)))
        junk = draw(st.sampled_from(COMMALESS_DEVICES))
        if where == "before":
            text = f"{junk}:{text}"
        elif where == "after":
            text = text.replace(":;", f":{junk}:;")
        elif where == "container":
            text, containers = f"{junk};{text}", 2
        placed.append(Resident(0, containers, text, "Running"))
    limits = {
        "nvidia.com/gpu": "1",
        "nvidia.com/gpumem": draw(st.sampled_from(("10000", "20000", "30000"))),
        "nvidia.com/gpucores": draw(st.sampled_from(("0", "50", "70"))),
    }
    policy = draw(st.sampled_from(("binpack", "spread")))
    return Case(cards=cards, residents=tuple(placed), app=(limits,), annotations={GPU_SCHEDULER_POLICY: policy})


def generate_commaless(count: int) -> list[Case]:
    """`count` distinct cases where an allocation's device without a comma decides, the same on every run."""
    return _distinct("commaless_cases", count)


@st.composite
def default_policy_cases(draw: st.DrawFn) -> Case:
    """A pod naming no GPU policy on healthy cards some of which are in use (maybe all, maybe with pair scores), so
    HAMi's `--gpu-scheduler-policy` decides: under mutex whether a used card is refused and which idle one is
    taken, under topology-aware which cards the pair scores pick, under binpack or spread the card order."""
    cards = _healthy_cards(draw(st.sampled_from(((0, 1, 0, 1), (0, 0, 1, 1), (1, 0, 0, 1), (0, 1, 1), (0, 0)))))
    uuids = [card.uuid for card in cards]
    held = uuids if draw(_sometimes(4)) else draw(st.lists(st.sampled_from(uuids), min_size=1, max_size=3))
    placed = _residents(draw, held)
    annotations: dict[str, str] = {}
    if draw(_sometimes(4)):
        annotations[NUMA_BIND] = "true"
    count = draw(st.sampled_from((1, 1, 2, 2, 3)))
    pin: tuple[str, ...] = ()
    if draw(_sometimes(4)):
        # as pin leaves a pod: one card by UUID (pin's own card check is compared too)
        annotations[USE_UUID] = draw(st.sampled_from(uuids))
        count = 1
    elif draw(_sometimes(4)):
        # through the pin's whole plan, on cards that may be in use
        chosen = draw(st.lists(st.sampled_from(range(len(cards))), min_size=1, max_size=2, unique=True))
        share = draw(st.sampled_from(("", "/25", "/50")))
        pin = tuple(f"gpu-{index}{share}" for index in chosen)
        count = len(pin)
    limits = {
        "nvidia.com/gpu": str(count),
        "nvidia.com/gpumem": draw(st.sampled_from(("1000", "4096", "30000"))),
        "nvidia.com/gpucores": draw(st.sampled_from(("0", "10", "30"))),
    }
    return Case(
        cards=cards,
        pair_scores=draw(st.sampled_from(FOCUSED_PAIR_SCORES)) if draw(st.booleans()) else None,
        residents=tuple(placed),
        app=(limits,),
        annotations=annotations,
        pin=pin,
    )


def generate_default_policy(count: int) -> list[Case]:
    """`count` distinct cases where the cluster's default GPU policy decides, the same on every run."""
    return _distinct("default_policy_cases", count)


ROOM_PAIR_SCORES = (
    FOCUSED_PAIR_SCORES[0],
    '[{"uuid":"GPU-0","score":{"GPU-1":5,"GPU-2":50,"GPU-3":50}},{"uuid":"GPU-1","score":{"GPU-0":5,"GPU-2":5,'
    '"GPU-3":5}},{"uuid":"GPU-2","score":{"GPU-0":50,"GPU-1":5,"GPU-3":100}},{"uuid":"GPU-3","score":{"GPU-0":50,'
    '"GPU-1":5,"GPU-2":100}}]',
)
ROOM_PAIR_MEMORIES = (12000, 20000)
# the pods on a card outside the two-card pod: none, a small one (leaves room), one or two that leave none
ROOM_LOADS = ((), (4096,), (12000,), (20000,), (12000,), (4096, 20000), (12000, 12000))
ROOM_OWNER = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "differential", "uid": "rs", "controller": True}
SPARE = "hami-place-differential-spare"


@st.composite
def room_cases(draw: st.DrawFn) -> Case:
    """A topology-aware pod asking one to three cards of 30000 MiB on four healthy cards with pair scores, most cards
    holding pods of one or two cards (a pod of 12000 MiB or more leaves no room), so that the planner must move pods
    to make room, and which cards it frees decides whether HAMi then takes them (`after_room_plan`)."""
    cards = _healthy_cards(draw(st.sampled_from(((0, 0, 0, 0), (0, 1, 0, 1)))))
    uuids = [card.uuid for card in cards]
    placed = []
    pair = draw(st.sampled_from((None, *itertools.combinations(uuids, 2))))
    if pair is not None:
        # a two-card pod: moving it frees both cards, more than the one the planner may have wanted
        placed.append(_resident(pair, draw(st.sampled_from(ROOM_PAIR_MEMORIES))))
    for uuid in uuids:
        if pair is None or uuid not in pair:
            placed += [_resident((uuid,), memory) for memory in draw(st.sampled_from(ROOM_LOADS))]
    limits = {"nvidia.com/gpu": str(draw(st.sampled_from((1, 2, 2, 3)))), "nvidia.com/gpumem": "30000"}
    return Case(
        cards=cards,
        pair_scores=draw(st.sampled_from(ROOM_PAIR_SCORES)),
        residents=tuple(placed),
        app=(limits,),
        annotations={GPU_SCHEDULER_POLICY: draw(st.sampled_from(("topology-aware", "binpack,topology-aware")))},
    )


def _resident(uuids: tuple[str, ...], memory: int) -> Resident:
    """A running pod of one container holding `memory` MiB and no cores on each of the cards."""
    devices = tuple(ContainerDevice(uuid, "NVIDIA", memory, 0) for uuid in uuids)
    return Resident(0, 1, encode_allocation([devices]), "Running")


def generate_room(count: int) -> list[Case]:
    """`count` distinct cases where the planner must make room for a topology-aware pod, the same on every run."""
    return _distinct("room_cases", count)


@dataclass(frozen=True)
class RoomPlan:
    """A `fit` plan for a room case's pod on its node: the node as the moves leave it, the cards the plan targets,
    and the cards each move leaves (each move should leave one HAMi then takes, else it was made for nothing)."""

    after: Case
    target: tuple[str, ...]
    left: tuple[tuple[str, ...], ...]


def after_room_plan(name: str, namespace: str, case: Case, config: HamiConfig = HAMI_DEFAULTS) -> RoomPlan | None:
    """The planner's `fit` plan for the case's pod on node `name`, its residents movable (a ReplicaSet's running
    pods, each asking the share it holds) to their node's other cards or to an empty spare node of four cards; None
    when the plan is incomplete or makes no move. The case after it keeps the residents that stay, on their new cards
    where they moved within the node."""
    ready = {"type": "Ready", "status": "True"}
    node = node_object(name, case, config)
    node["status"]["conditions"] = [ready]
    spare_case = Case(
        cards=tuple(replace(card, uuid=f"GPU-spare-{card.index}") for card in _healthy_cards((0, 0, 0, 0)))
    )
    spare = node_object(SPARE, spare_case, config)
    spare["status"]["conditions"] = [ready]
    residents = [
        _movable(pod, resident)
        for pod, resident in zip(resident_pods(name, namespace, name, case), case.residents, strict=True)
    ]
    goal = pod_for_plan(case_pod(name, namespace, case, "", config), node_marks([node, spare]), config)
    snapshot, _ = snapshot_from_objects([node, spare], residents, [], datetime.now(UTC), config)
    result = plan(snapshot, FitGoal(replace(goal, nodes=frozenset({name}))))
    if not result.complete or not result.moves or result.target is None:
        return None
    moved = {move.pod: move for move in result.moves}
    kept = []
    for pod, resident in zip(residents, case.residents, strict=True):
        move = moved.get(f"{namespace}/{pod['metadata']['name']}")
        if move is None:
            kept.append(resident)
        elif move.to_node == name:
            [devices] = [c for c in parse_allocation(resident.allocation) if c]
            again = tuple(replace(device, uuid=uuid) for device, uuid in zip(devices, move.to_cards, strict=True))
            kept.append(replace(resident, allocation=encode_allocation([again])))
    left = tuple(move.from_cards for move in result.moves)
    return RoomPlan(replace(case, residents=tuple(kept)), result.target[1], left)


def _movable(pod: dict[str, Any], resident: Resident) -> dict[str, Any]:
    """The resident as the planner may move it: a ReplicaSet's running pod bound to its node, its one container
    asking the cards and the memory it holds."""
    [devices] = [c for c in parse_allocation(resident.allocation) if c]
    limits = {"nvidia.com/gpu": str(len(devices)), "nvidia.com/gpumem": str(devices[0].usedmem)}
    node = pod["metadata"]["annotations"][NODE_ANNOTATION]
    return {
        **pod,
        "metadata": {**pod["metadata"], "ownerReferences": [ROOM_OWNER]},
        "spec": {**pod["spec"], "nodeName": node, "containers": [_container("c0", limits)]},
        "status": {"phase": "Running"},
    }


def _one_card(resources: dict[str, str], count: int = 1) -> dict[str, str]:
    """The limits with a card count of `count` where they name one."""
    return {key: str(count) if key == "nvidia.com/gpu" else value for key, value in resources.items()}


def _sometimes(one_in: int) -> st.SearchStrategy[bool]:
    """True about once in `one_in` draws (away from the range's ends, which hypothesis favours)."""
    return st.integers(0, 9999).map(lambda n: n % one_in == 1)


def generate(count: int) -> list[Case]:
    """`count` distinct cases (hypothesis repeats some, so it draws more), the same on every run."""
    return _distinct("cases", count)


def _distinct(strategy: str, count: int) -> list[Case]:
    """`count` distinct cases of the named strategy, drawn in an interpreter that imports only this module.

    Derandomized Hypothesis still draws, now and then, a literal (an integer of 100 or more, a string) harvested from
    the project's non-test modules loaded in the process (`_get_local_constants` in hypothesis's
    `internal/conjecture/providers.py`), so a process that had imported more of them (another test file, the sandbox)
    drew other cases from the same seed. The child keeps what it drew in the cache beside the sandbox's binaries
    (`_cached_draw`), so a later run draws again only when what the cases depend on changed.
    """
    from sandbox.binaries import cache_root  # here, not at the top: the child must import no sandbox module

    cases_cache = cache_root() / "hami-cases"
    code = (
        "import sys; from tests import hami_cases; "
        f"sys.stdout.buffer.write(hami_cases._cached_draw({strategy!r}, {count}, {str(cases_cache)!r}))"
    )
    child = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, check=False)
    if child.returncode:
        raise RuntimeError(f"drawing {strategy} cases failed:\n{child.stderr.decode(errors='replace')[-3000:]}")
    # our own child's output, read back by the module that wrote it
    cases: list[Case] = pickle.loads(child.stdout)
    return cases


# Draws of one strategy and count kept in the cache, the newest: a change to the sources the cases depend on makes a
# new one (about 350 KB for all seven draws), and a switch back to another branch finds its own among them.
KEPT_DRAWS = 4


def _cached_draw(strategy: str, count: int, cache: str) -> bytes:
    """The pickled cases `_draw` gives, kept under `cache` by a digest of everything the draw depends on: the source of
    every project module this process loaded (the strategies and the literals Hypothesis harvests), Hypothesis's and
    Python's versions, the strategy and the count. Runs in the child, before the draw loads anything more."""
    digest = hashlib.sha256(repr((strategy, count, hypothesis.__version__, sys.version)).encode())
    venv = Path(sys.prefix).resolve()
    loaded = sorted(
        (name, path)
        for name, module in list(sys.modules.items())
        if (path := Path(getattr(module, "__file__", None) or "/").resolve()).is_relative_to(ROOT)
        and not path.is_relative_to(venv)
    )
    for name, path in loaded:
        source = path.read_bytes()
        digest.update(f"{name}\0{len(source)}\0".encode() + source)
    kept = Path(cache) / f"{strategy}-{count}-{digest.hexdigest()[:32]}.pickle"
    with contextlib.suppress(FileNotFoundError):
        return kept.read_bytes()
    drawn = pickle.dumps(_draw(strategy, count))
    kept.parent.mkdir(parents=True, exist_ok=True)
    partial = kept.with_suffix(f".{os.getpid()}.partial")
    partial.write_bytes(drawn)
    partial.replace(kept)
    newest_first = sorted(kept.parent.glob(f"{strategy}-{count}-*.pickle"), key=_written, reverse=True)
    for stale in newest_first[KEPT_DRAWS:]:
        stale.unlink(missing_ok=True)
    return drawn


def _written(path: Path) -> float:
    """When the cached draw was written; 0 when another process removed it meanwhile."""
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return 0.0


def _draw(strategy: str, count: int) -> list[Case]:
    """`count` distinct cases of the strategy named, drawn derandomized (in the child `_distinct` starts)."""
    found: dict[str, Case] = {}

    @settings(
        max_examples=count * 2,
        derandomize=True,
        database=None,
        phases=[Phase.generate],
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(globals()[strategy]())
    def collect(case: Case) -> None:
        """Keeps every generated case once."""
        found.setdefault(repr(case), case)

    collect()
    return list(found.values())[:count]


def rename(config: HamiConfig, resources: dict[str, str]) -> dict[str, str]:
    """Limits written with HAMi's default resource names, renamed to the ones `config` uses."""
    names = {
        HAMI_DEFAULTS.resource_count_name: config.resource_count_name,
        HAMI_DEFAULTS.resource_memory_name: config.resource_memory_name,
        HAMI_DEFAULTS.resource_memory_percentage_name: config.resource_memory_percentage_name,
        HAMI_DEFAULTS.resource_core_name: config.resource_core_name,
    }
    return {names.get(key, key): value for key, value in resources.items()}


def node_object(name: str, case: Case, config: HamiConfig = HAMI_DEFAULTS) -> dict[str, Any]:
    """The case's node as HAMi's device plugin leaves it (the register, and allocatable cards for HAMi's health), with
    the handshakes HAMi's scheduler writes."""
    requesting = "Requesting_" + datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    annotations = {
        REGISTER_ANNOTATION: register_text(case),
        **{key: requesting for key in (HANDSHAKE_ANNOTATION, *OTHER_HANDSHAKE_ANNOTATIONS)},
    }
    if case.pair_scores is not None:
        annotations[PAIR_SCORE_ANNOTATION] = case.pair_scores
    if case.cordoned:
        annotations[DEVICE_CORDON] = ",".join(case.cordoned)
    gpus = str(max(sum(card.count for card in case.cards), 1))
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}, "annotations": annotations},
        # HAMi's /filter ignores taints; this keeps kube-scheduler from binding other tests' pods to these nodes
        "spec": {"taints": [NO_SCHEDULING]},
        "status": {
            "allocatable": {config.resource_count_name: gpus},
            "capacity": {config.resource_count_name: gpus},
        },
    }


def register_text(case: Case) -> str:
    """The register as the device plugin writes it, with the case's extra keys on the first card."""
    text = encode_register(case.cards, legacy=case.legacy)
    if case.legacy or not case.register_extra:
        return text
    entries = json.loads(text)
    entries[0].update(case.register_extra)
    return json.dumps(entries, separators=(",", ":"))


def resident_pods(name: str, namespace: str, node: str, case: Case) -> list[dict[str, Any]]:
    """The case's residents as pods carrying HAMi's annotations; left Pending (nobody schedules them)."""
    return [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{name}-r{position}",
                "namespace": namespace,
                "annotations": {NODE_ANNOTATION: node, ALLOCATED_ANNOTATION: resident.allocation},
            },
            "spec": {
                "schedulerName": UNSERVED_SCHEDULER,
                "tolerations": [TOLERATES],
                "initContainers": [_container(f"i{i}", {}) for i in range(resident.init_containers)],
                "containers": [_container(f"c{i}", {}) for i in range(resident.containers)],
            },
        }
        for position, resident in enumerate(case.residents)
    ]


def case_pod(
    name: str, namespace: str, case: Case, scheduler: str, config: HamiConfig = HAMI_DEFAULTS
) -> dict[str, Any]:
    """The pod to place, as a user writes it, for `scheduler`."""
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "terminationGracePeriodSeconds": 0,
        "tolerations": [TOLERATES],
        "containers": [_container(f"c{i}", rename(config, lim)) for i, lim in enumerate(case.app)],
    }
    if case.init:
        spec["initContainers"] = [_container(f"i{i}", rename(config, lim)) for i, lim in enumerate(case.init)]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "annotations": dict(case.annotations)},
        "spec": spec,
    }


def _container(name: str, resources: dict[str, str]) -> dict[str, Any]:
    """A container that never runs (nothing schedules its pod), with these limits."""
    container: dict[str, Any] = {"name": name, "image": IMAGE}
    if resources:
        container["resources"] = {"limits": dict(resources)}
    return container
