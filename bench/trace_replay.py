"""The Alibaba GPU trace v2023 replayed in the pure core: HAMi alone beside HAMi with the defragmentation controller.

Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation Gradient Descent",
USENIX ATC '23, published the trace (github.com/alibaba/clusterdata, `cluster-trace-gpu-v2023`): 1,213 nodes with
6,212 cards, and task lists. Each node becomes a HAMi node whose cards are registered as HAMi's device plugin
registers them (`Card`, 10 slots, 100 cores, `NVIDIA-<model>`); a task asks what a HAMi pod would ask (see
`task_request`). HAMi alone places each task where HAMi v2.10 would: kube-scheduler keeps the nodes whose CPU and
memory remainder hold the task, HAMi's own fit (`fit.fit_pod`, card order by its GPU policy) keeps the nodes whose
cards hold it, and HAMi's node policy picks among them by its node score (`pkg/scheduler/policy/node_policy.go`).
The controller adds its two triggers on top, with the existing planner: "rescue a Pending pod" (`FitGoal`) and
"keep room" (`FreeCardsGoal`); each move is an eviction and the moved task is re-placed at once.

Two replays per task list and policy: workload inflation (the paper's method) and a timeline of the trace's own
arrivals and departures, arrivals compressed. `python bench/trace_replay.py --help` lists the knobs.
"""

from __future__ import annotations

import argparse
import copyreg
import csv
import functools
import heapq
import importlib.util
import io
import json
import math
import os
import pickle
import random
import re
import shlex
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.fgd import WHOLE, Measure, best_choice, free_percent, popular_classes
from kubectl_hami_place.core.allocations import ContainerDevice
from kubectl_hami_place.core.cards import Card
from kubectl_hami_place.core.fit import NOUSE_UUID, USE_TYPE, USE_UUID, fit_pod
from kubectl_hami_place.core.hami_config import HAMI_DEFAULTS
from kubectl_hami_place.core.node_resources import NOTHING, Resources
from kubectl_hami_place.core.planner import (
    DO_NOT_MOVE,
    SEARCH_STEPS,
    FitGoal,
    FreeCardsGoal,
    Limits,
    Plan,
    PlanNode,
    PlanPod,
    Snapshot,
    plan,
)
from kubectl_hami_place.core.requests import CardRequest, card_request, cores_for, memory_for
from kubectl_hami_place.core.usage import CardUsage, PodAllocation

ROOT = Path(__file__).resolve().parent.parent
TRACE_DIR = ROOT.parent / "shared" / "third_party" / "alibaba-gpu-v2023"
NODE_FILE = "openb_node_list_gpu_node.csv"
TASK_FILES = ("default", "gpushare40", "multigpu20", "gpuspec33")
# MiB per card model. Every task asks a share of a card (a percentage), so the figures do not depend on these.
# V100M16/V100M32/P100/T4/A10 as sold; G1-G3 are undisclosed in the trace: chosen 16, 32 and 48 GiB.
CARD_MIB = {
    "V100M16": 16384,
    "V100M32": 32768,
    "P100": 16384,
    "T4": 16384,
    "A10": 24576,
    "G1": 16384,
    "G2": 32768,
    "G3": 49152,
}
SLOTS = 10  # HAMi's deviceSplitCount default
MIB = 2**20
NODE_PODS = 1_000_000
"""The pod count each node has room for: the trace states none, so it never binds."""
NAMESPACE = "trace"
DEFAULT = "default"
SPREAD_BINPACK = "spread-binpack"
POLICIES = ("binpack", "spread", SPREAD_BINPACK)
"""Replayed unless `--policies` says otherwise. HAMi's default pair (`default`) only on request: measured alone, it beat
the best of these only in the timeline, by 0.2% of GPU-hours Pending (docs/performance.md)."""
PAIRS = {
    "binpack": ("binpack", "binpack"),
    "spread": ("spread", "spread"),
    DEFAULT: ("binpack", "spread"),
    SPREAD_BINPACK: ("spread", "binpack"),
}
"""Each HAMi policy replayed as (node policy, GPU policy); `default` is HAMi v2.10's own pair when its scheduler runs
without `--node-scheduler-policy` and `--gpu-scheduler-policy` (cmd/scheduler/main.go, and its chart's values.yaml);
`spread-binpack` is the fourth pair its two flags make."""
DEFAULT_LABEL = "default (node binpack, GPU spread)"
SPREAD_BINPACK_LABEL = "node spread, GPU binpack"
FGD = "fgd"
"""The FGD paper's policy (`bench/fgd.py`), replayed beside HAMi's as a reference: HAMi has no such policy."""
FGD_LABEL = "FGD (paper, reference)"
UNPLACED_CAUSES = ("capacity", "cpu_memory", "fragmented")
"""Why a task stayed unplaced (`Cluster.unplaced_cause`): GPUs short in the whole cluster, no node with its CPU and
memory free, or room in total but on no one node (what moving GPU tasks can cure)."""


# The trace ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TraceNode:
    """One node of the trace: its CPU (millicores), memory (MiB), card count and card model."""

    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str


@dataclass(frozen=True)
class Task:
    """One task of the trace; `gpu_milli` is the part of each card in thousandths, `gpu_spec` the models it accepts.

    Times are seconds; a task list without them (multigpu20) reads 0, so only workload inflation replays it.
    """

    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    gpu_spec: tuple[str, ...] = ()
    creation: int = 0
    deletion: int = 0
    scheduled: int | None = None

    @property
    def gpus(self) -> float:
        """The GPUs the task asks: cards times the part of each."""
        return self.num_gpu * self.gpu_milli / 1000 if self.num_gpu else 0.0

    @property
    def duration(self) -> int:
        """How long it runs once placed: from its start (scheduled, else created) to its deletion."""
        start = self.creation if self.scheduled is None else self.scheduled
        return max(self.deletion - start, 0)

    @property
    def ask(self) -> str:
        """Its kind of GPU ask, for the unplaced breakdown: `share` of one card, or its count of whole cards."""
        if not self.num_gpu:
            return "none"
        return "share" if self.gpu_milli < 1000 else str(self.num_gpu)

    @functools.cached_property
    def shape(self) -> tuple[int, int, int, int, tuple[str, ...]]:
        """What the scheduler sees of it: tasks of one shape fit the same nodes."""
        return self.cpu_milli, self.memory_mib, self.num_gpu, self.gpu_milli, self.gpu_spec


def read_nodes(path: Path) -> list[TraceNode]:
    """The trace's node list."""
    with path.open(newline="") as handle:
        return [
            TraceNode(row["sn"], int(row["cpu_milli"]), int(row["memory_mib"]), int(row["gpu"]), row["model"])
            for row in csv.DictReader(handle)
        ]


def read_tasks(path: Path) -> list[Task]:
    """A task list of the trace, in file order; absent columns read as no constraint and time 0."""
    with path.open(newline="") as handle:
        return [parse_task(row) for row in csv.DictReader(handle)]


def parse_task(row: dict[str, str]) -> Task:
    """One CSV row as a task."""
    spec = tuple(part for part in (row.get("gpu_spec") or "").split("|") if part)
    scheduled = row.get("scheduled_time") or ""
    return Task(
        name=row["name"],
        cpu_milli=int(row["cpu_milli"]),
        memory_mib=int(row["memory_mib"]),
        num_gpu=int(row["num_gpu"]),
        gpu_milli=int(row["gpu_milli"]),
        gpu_spec=spec,
        creation=int(row.get("creation_time") or 0),
        deletion=int(row.get("deletion_time") or 0),
        scheduled=int(scheduled) if scheduled else None,
    )


def has_times(tasks: Sequence[Task]) -> bool:
    """Whether the list carries creation and deletion times (a timeline can be replayed)."""
    return any(task.deletion for task in tasks)


def card_type(model: str) -> str:
    """The register type HAMi's device plugin would write for the model (HAMi schedules types naming NVIDIA)."""
    return f"NVIDIA-{model}"


def node_cards(node: TraceNode) -> tuple[Card, ...]:
    """The node's cards as HAMi registers them."""
    mib = CARD_MIB[node.model]
    return tuple(
        Card(
            uuid=f"GPU-{node.name}-{index}",
            index=index,
            count=SLOTS,
            devmem=mib,
            devcore=100,
            type=card_type(node.model),
            health=True,
            mode="hami-core",
        )
        for index in range(node.gpus)
    )


def task_request(task: Task) -> CardRequest | None:
    """The task as a HAMi container asks: a share of one card, or whole cards, or none.

    A share (`num_gpu` 1, `gpu_milli` < 1000) asks `nvidia.com/gpumem-percentage` = gpu_milli/10 and
    `nvidia.com/gpucores` = gpu_milli/10 (rounded up to whole percent); whole cards ask `nvidia.com/gpu` alone,
    which HAMi's webhook makes exclusive (100% memory, 100 cores).
    """
    return _request(task.num_gpu, task.gpu_milli)


@functools.lru_cache(maxsize=1024)
def _request(num_gpu: int, gpu_milli: int) -> CardRequest | None:
    """`task_request` by what it reads, computed once per shape."""
    if num_gpu <= 0:
        return None
    if num_gpu == 1 and gpu_milli < 1000:
        percent = max(1, math.ceil(gpu_milli / 10))
        return card_request(1, mem_percentage=percent, coresreq=percent)
    return card_request(num_gpu)


def task_annotations(task: Task) -> dict[str, str]:
    """The pod annotations the task's card-model constraint becomes (`nvidia.com/use-gputype`)."""
    return {USE_TYPE: ",".join(task.gpu_spec)} if task.gpu_spec else {}


def inflate(tasks: Sequence[Task], capacity: float, limit: float = 1.0) -> Iterator[Task]:
    """The paper's workload inflation: tasks in list order, again from the top when the list ends (renamed
    `<name>#<round>`), until the GPUs asked reach `limit` x `capacity`; the task that crosses it is the last."""
    if not any(task.gpus for task in tasks):
        return
    asked = 0.0
    for round_ in range(1_000_000):
        for task in tasks:
            yield task if round_ == 0 else replace(task, name=f"{task.name}#{round_}")
            asked += task.gpus
            if asked >= limit * capacity - 1e-9:
                return


def arrivals(tasks: Sequence[Task], compress: float, rounds: int = 1) -> list[tuple[float, Task]]:
    """The timeline's arrivals: creation times from the trace's dense part on, divided by `compress`, the list played
    `rounds` times back to back (later rounds renamed `<name>@<round>`).

    The trace's first 1% of tasks were created over its first ~10 million seconds (the rest within ~3 million); they
    arrive at time 0 of each round, so a round does not open on a long near-empty stretch.
    """
    if not tasks:
        return []
    created = sorted(task.creation for task in tasks)
    start = created[len(created) // 100]
    span = (created[-1] - start) / compress
    timed = []
    for round_ in range(rounds):
        for task in tasks:
            named = task if round_ == 0 else replace(task, name=f"{task.name}@{round_}")
            timed.append((round_ * span + max(task.creation - start, 0) / compress, named))
    return timed


@dataclass
class InflationLedger:
    """Workload-inflation bookkeeping: GPUs asked, placed and left unplaced, evictions, a row per 10% of load."""

    capacity: float
    step: float = 0.1
    asked: float = 0.0
    placed: float = 0.0
    tasks_placed: int = 0
    evictions: int = 0
    rows: list[dict[str, float]] = field(default_factory=list)
    unplaced_by: dict[str, float] = field(default_factory=lambda: dict.fromkeys(UNPLACED_CAUSES, 0.0))
    unplaced_tasks: list[Task] = field(default_factory=list)

    def record(self, task: Task, placed: bool, evictions: int = 0, cause: str = "fragmented") -> None:
        """Count one task drawn (`cause`: why it stayed unplaced, see `Cluster.unplaced_cause`); add a row each time
        the asked load crosses the next step."""
        self.asked += task.gpus
        self.evictions += evictions
        if placed:
            self.placed += task.gpus
            self.tasks_placed += 1
        else:
            self.unplaced_by[cause] += task.gpus
            self.unplaced_tasks.append(task)
        while self.asked >= (len(self.rows) + 1) * self.step * self.capacity - 1e-9:
            self.rows.append(self.row((len(self.rows) + 1) * self.step))

    def row(self, load: float) -> dict[str, float]:
        """The figures at this asked load; what is unplaced, in all and by ask, summed from the tasks left."""
        asking: dict[str, float] = {}
        for task in self.unplaced_tasks:
            asking[task.ask] = asking.get(task.ask, 0.0) + task.gpus
        unplaced = sum(task.gpus for task in self.unplaced_tasks)
        return {
            "load": round(load, 4),
            "unallocated": 1 - self.placed / self.capacity,
            "unplaced": unplaced / self.asked if self.asked else 0.0,
            "evictions_per_placed": self.evictions / self.tasks_placed if self.tasks_placed else 0.0,
            "tasks_placed": self.tasks_placed,
            "tasks_unplaced": len(self.unplaced_tasks),
            "evictions": self.evictions,
            **{
                f"unplaced_{cause}": gpus / self.asked if self.asked else 0.0
                for cause, gpus in self.unplaced_by.items()
            },
            **{
                f"unplaced_asking_{ask}": gpus / self.asked if self.asked else 0.0
                for ask, gpus in sorted(asking.items())
            },
        }


def unplaced_by_models(left: Iterable[Task], asked: float) -> dict[str, float]:
    """The share of the asked GPUs left unplaced by the card models the tasks accept (`any`: every model)."""
    shares: dict[str, float] = defaultdict(float)
    for task in left:
        shares[",".join(task.gpu_spec) or "any"] += task.gpus / asked
    return dict(sorted(shares.items(), key=lambda item: -item[1]))


# The cluster ----------------------------------------------------------------------------------------------------


@dataclass
class Running:
    """A placed task: where, and the planner's view of it."""

    task: Task
    node: int
    cards: tuple[int, ...]
    pod: PlanPod | None
    moved_at: float | None = None


class Cluster:
    """The replay's cluster: per-card usage as HAMi counts it, per-node CPU and memory as kube-scheduler counts them.

    `policy` names HAMi's node policy (`--node-scheduler-policy`) and its GPU policy (`--gpu-scheduler-policy`) by
    `PAIRS` (`binpack` and `spread` set both, `default` is HAMi's node binpack with GPU spread), or `fgd`: the FGD
    paper's node and card choice against the `workload`'s most popular classes covering `coverage` of its GPU tasks,
    each choice checked by HAMi's fit on exactly its cards. `resources` False leaves node CPU and memory out (GPU
    tasks only then; tasks without cards are skipped).
    """

    def __init__(
        self,
        nodes: Sequence[TraceNode],
        policy: str,
        *,
        resources: bool = True,
        seed: int = 0,
        workload: Sequence[Task] = (),
        coverage: float = 0.95,
    ) -> None:
        """An empty cluster; ties between nodes of equal score break in a fixed random order (HAMi's are random)."""
        self.trace_nodes = list(nodes)
        self.policy = policy
        node_policy, gpu_policy = ("binpack", "binpack") if policy == FGD else PAIRS[policy]
        self.config = HAMI_DEFAULTS.with_policy(gpu_policy)
        self.resources = resources
        self.cards = [node_cards(node) for node in nodes]
        self.plan_nodes = tuple(
            PlanNode(name=node.name, cards=cards) for node, cards in zip(nodes, self.cards, strict=True)
        )
        self.index = {node.name: i for i, node in enumerate(nodes)}
        self.card_at = {card.uuid: (i, c) for i, cards in enumerate(self.cards) for c, card in enumerate(cards)}
        self.used = [[[0, 0, 0] for _ in cards] for cards in self.cards]
        self.free_cpu = [node.cpu_milli for node in nodes]
        self.free_mem = [node.memory_mib for node in nodes]
        self.empty = [len(cards) for cards in self.cards]
        self.room_cores = [100 if cards else -1 for cards in self.cards]
        self.room_mem = [cards[0].devmem if cards else -1 for cards in self.cards]
        self.devmem = [cards[0].devmem if cards else 0 for cards in self.cards]
        self.rooms = [[(card.devcore, card.devmem) for card in cards] for cards in self.cards]
        self.sums = [[0, 0, 0] for _ in nodes]
        self.totals = [(SLOTS * len(cards), 100 * len(cards), sum(c.devmem for c in cards)) for cards in self.cards]
        order = list(range(len(nodes)))
        random.Random(seed).shuffle(order)
        self.rank = {node: position for position, node in enumerate(order)}
        self.sign = -1 if node_policy == "binpack" else 1
        self.order = [(0.0, self.rank[node]) for node in range(len(nodes))]
        self.running: dict[str, Running] = {}
        # What the server wrote on a task's pod for a kept room: the rescued task's use-gpuuuid (its target cards),
        # a task admitted while a room was kept its nouse-gpuuuid; and the cards kept, by the task they are kept for.
        self.extra: dict[str, dict[str, str]] = {}
        self.kept: dict[str, tuple[str, ...]] = {}
        self.capacity = float(sum(len(cards) for cards in self.cards))
        self.allocated = 0.0
        self._types: dict[tuple[str, ...], list[int]] = {}
        self.fgd = FgdState(self, workload, coverage) if policy == FGD else None

    # What HAMi and kube-scheduler decide --------------------------------------------------------------------

    def typed(self, spec: tuple[str, ...]) -> list[int]:
        """The nodes with a card of an accepted model (all nodes with cards when `spec` is empty)."""
        nodes = self._types.get(spec)
        if nodes is None:
            nodes = [i for i, cards in enumerate(self.cards) if cards and accepts(spec, cards[0].type)]
            self._types[spec] = nodes
        return nodes

    def resources_fit(self, task: Task, node: int) -> bool:
        """kube-scheduler's NodeResourcesFit on CPU and memory (always true when resources are left out)."""
        return not self.resources or (self.free_cpu[node] >= task.cpu_milli and self.free_mem[node] >= task.memory_mib)

    def may_fit(self, task: Task, request: CardRequest, node: int) -> bool:
        """Necessary conditions for HAMi's fit, cheap: CPU and memory, then enough free cards or a card with a free
        slot, cores and memory enough (HAMi's `fit_pod` still decides)."""
        if not self.resources_fit(task, node):
            return False
        if request.exclusive:
            return self.empty[node] >= request.nums
        cores, mem = request.coresreq, self.devmem[node] * (request.mem_percentage or 100) // 100
        return any(free_cores >= cores and free_mem >= mem for free_cores, free_mem in self.rooms[node])

    def may_fit_nodes(self, task: Task, request: CardRequest) -> list[int]:
        """`may_fit` over every node of an accepted model, inlined: it runs for each task on each node."""
        typed = self.typed(task.gpu_spec)
        cpu, mem = (task.cpu_milli, task.memory_mib) if self.resources else (-math.inf, -math.inf)
        free_cpu, free_mem = self.free_cpu, self.free_mem
        if request.exclusive:
            empty, nums = self.empty, request.nums
            return [n for n in typed if empty[n] >= nums and free_cpu[n] >= cpu and free_mem[n] >= mem]
        room_cores, room_mem, devmem = self.room_cores, self.room_mem, self.devmem
        cores, percent = request.coresreq, request.mem_percentage or 100
        return [
            n
            for n in typed
            if room_cores[n] >= cores
            and room_mem[n] >= devmem[n] * percent // 100
            and free_cpu[n] >= cpu
            and free_mem[n] >= mem
        ]

    def hami_fit(self, task: Task, request: CardRequest, node: int) -> tuple[int, ...] | None:
        """HAMi's own verdict for the task on the node (`fit_pod`, cards sorted by the GPU policy): its cards."""
        cards = self.cards[node]
        usage = {card.uuid: CardUsage(card.uuid, *self.used[node][c]) for c, card in enumerate(cards)}
        verdict = fit_pod(cards, usage, (request,), 0, self.annotations(task), config=self.config)
        if not verdict.ok:
            return None
        return tuple(self.card_at[uuid][1] for uuid in verdict.devices[0])

    def hami_fit_on(self, task: Task, node: int, cards: tuple[int, ...]) -> tuple[int, ...] | None:
        """HAMi's verdict on exactly the cards a plan targets (`fit_pod` over them alone): the cards, or None."""
        request = task_request(task)
        if request is None:
            return ()
        chosen = [self.cards[node][c] for c in cards]
        usage = {card.uuid: CardUsage(card.uuid, *self.used[node][c]) for c, card in zip(cards, chosen, strict=True)}
        verdict = fit_pod(chosen, usage, (request,), 0, self.annotations(task), config=self.config)
        return cards if verdict.ok else None

    def annotations(self, task: Task) -> dict[str, str]:
        """The task's pod annotations HAMi reads: its own, and what the server wrote for a kept room."""
        extra = self.extra.get(task.name)
        own = task_annotations(task)
        return {**own, **extra} if extra else own

    def node_score(self, node: int) -> float:
        """HAMi's ComputeDefaultScore: 10 x (slots + cores + memory in use, each over the node's total)."""
        slots, mem, cores = self.sums[node]  # as `_change` adds them, a card's `used`: slots, memory, cores
        total_slots, total_cores, total_mem = self.totals[node]
        return 10 * (slots / total_slots + cores / total_cores + mem / total_mem)

    def choose(self, task: Task) -> tuple[int, tuple[int, ...]] | None:
        """Where HAMi places the task now: among the nodes that fit, the highest score (binpack) or lowest (spread).

        `order` keeps each node's sort key (policy-signed score, tie rank) fresh as its cards change.
        """
        if self.fgd is not None:
            return self.fgd.choose(task)
        request = task_request(task)
        if request is None:
            return self.choose_cpu_only(task)
        candidates = self.may_fit_nodes(task, request)
        if not candidates:
            return None
        order = self.order.__getitem__
        best = min(candidates, key=order)
        cards = self.hami_fit(task, request, best)
        if cards is not None:
            return best, cards
        candidates.sort(key=order)
        for node in candidates[1:]:
            cards = self.hami_fit(task, request, node)
            if cards is not None:
                return node, cards
        return None

    def choose_cpu_only(self, task: Task) -> tuple[int, tuple[int, ...]] | None:
        """A task without cards: HAMi passes every node, kube-scheduler's LeastAllocated picks the emptiest."""
        best: tuple[float, int] | None = None
        for node, trace_node in enumerate(self.trace_nodes):
            if not self.resources_fit(task, node):
                continue
            score = self.free_cpu[node] / trace_node.cpu_milli + self.free_mem[node] / trace_node.memory_mib
            key = (-score, self.rank[node])
            if best is None or key < (best[0], self.rank[best[1]]):
                best = (-score, node)
        return None if best is None else (best[1], ())

    def fits_node(self, task: Task, node: int) -> tuple[int, ...] | None:
        """The task's cards on this one node if HAMi and kube-scheduler would place it there now."""
        if not self.may_fit_node(task, node):
            return None
        if self.fgd is not None:
            return self.fgd.fits_node(task, node)
        request = task_request(task)
        return () if request is None else self.hami_fit(task, request, node)

    def may_fit_node(self, task: Task, node: int) -> bool:
        """`may_fit` for any task on one node: a cheap, necessary condition for `fits_node`."""
        request = task_request(task)
        if request is None:
            return self.resources_fit(task, node)
        return node in self._typed_set(task.gpu_spec) and self.may_fit(task, request, node)

    def _typed_set(self, spec: tuple[str, ...]) -> frozenset[int]:
        """`typed` as a set."""
        key = ("set", *spec)
        found = self._types.get(key)
        if found is None:
            found = self._types[key] = frozenset(self.typed(spec))  # type: ignore[assignment]
        return found  # type: ignore[return-value]

    # Changes ------------------------------------------------------------------------------------------------

    def put(self, task: Task, node: int, cards: tuple[int, ...]) -> None:
        """Record the task on the node's cards (and its CPU and memory)."""
        request = task_request(task)
        self.free_cpu[node] -= task.cpu_milli
        self.free_mem[node] -= task.memory_mib
        if self.fgd is not None:
            self.fgd.changed(node)
        pod = None
        if request is not None:
            card_list = self.cards[node]
            mem, cores = memory_for(request, card_list[0]), cores_for(request)
            for c in cards:
                self._change(node, c, (1, mem, cores))
            self.allocated += task.gpus
            pod = self._plan_pod(task, request, node, cards, mem=mem, cores=cores)
        self.running[task.name] = Running(task, node, cards, pod)

    def take(self, name: str) -> Running:
        """Remove a running task and give back what it held."""
        entry = self.running.pop(name)
        task, node = entry.task, entry.node
        self.free_cpu[node] += task.cpu_milli
        self.free_mem[node] += task.memory_mib
        if self.fgd is not None:
            self.fgd.changed(node)
        request = task_request(task)
        if request is not None:
            mem, cores = memory_for(request, self.cards[node][0]), cores_for(request)
            for c in entry.cards:
                self._change(node, c, (-1, -mem, -cores))
            self.allocated -= task.gpus
        return entry

    def _change(self, node: int, card: int, delta: tuple[int, int, int]) -> None:
        """Add a share to a card and refresh the node's summaries."""
        used = self.used[node][card]
        was_empty = used[0] == 0
        for k in range(3):
            used[k] += delta[k]
            self.sums[node][k] += delta[k]
        self.empty[node] += (used[0] == 0) - was_empty
        self.order[node] = (self.sign * self.node_score(node), self.rank[node])
        cards = self.cards[node]
        rooms = [
            (cards[c].devcore - u[2], cards[c].devmem - u[1])
            for c, u in enumerate(self.used[node])
            if u[0] < cards[c].count
        ]
        self.rooms[node] = rooms
        self.room_cores[node] = max((room[0] for room in rooms), default=-1)
        self.room_mem[node] = max((room[1] for room in rooms), default=-1)

    def held_by_flexible(self) -> dict[str, float]:
        """Per card model, the GPUs on its cards held by tasks that accept another model too: what moving them off
        could give the tasks bound to that model alone."""
        held: dict[str, float] = defaultdict(float)
        for running in self.running.values():
            model = self.trace_nodes[running.node].model
            if running.task.num_gpu and set(running.task.gpu_spec) != {model}:
                held[model] += running.task.gpus
        return dict(sorted(held.items()))

    def needs(self, task: Task) -> Resources:
        """What the task asks of a node's CPU, memory and pods, as the planner counts them (nothing counted when
        node resources are left out, so tasks of one card shape share the planner's remembered walks)."""
        return Resources(task.cpu_milli, task.memory_mib * MIB, 1) if self.resources else NOTHING

    def _plan_pod(
        self, task: Task, request: CardRequest, node: int, cards: tuple[int, ...], *, mem: int, cores: int
    ) -> PlanPod:
        """The task as the planner sees it: a pod of a ReplicaSet with HAMi's allocation and its CPU and memory."""
        devices = tuple(ContainerDevice(self.cards[node][c].uuid, "NVIDIA", mem, cores) for c in cards)
        name = self.trace_nodes[node].name
        return PlanPod(
            namespace=NAMESPACE,
            name=task.name,
            uid=task.name,
            requests=(request,),
            annotations=self.annotations(task),
            allocation=PodAllocation(NAMESPACE, task.name, task.name, name, "Running", (devices,)),
            owner_kind="ReplicaSet",
            needs=self.needs(task),
        )

    # The planner's view -------------------------------------------------------------------------------------

    def plan_nodes_now(self) -> tuple[PlanNode, ...]:
        """The planner's nodes with the CPU, memory and pods each has left now (not counted when node resources are
        left out), so the planner keeps each node's remainder through its moves as kube-scheduler would."""
        if not self.resources:
            return self.plan_nodes
        return tuple(
            PlanNode(node.name, node.cards, room=Resources(cpu, memory * MIB, NODE_PODS))
            for node, cpu, memory in zip(self.plan_nodes, self.free_cpu, self.free_mem, strict=True)
        )

    def snapshot(self, now: float | None = None, cooldown: float = math.inf, rescued: str = "") -> Snapshot:
        """The planner's snapshot: every running GPU task, each node's CPU and memory left; those moved within
        `cooldown` are `do-not-move`; the cards kept for tasks other than `rescued` device-cordoned
        (`runs.keep_off`)."""
        pods = []
        for entry in self.running.values():
            pod = entry.pod
            if pod is None:
                continue
            if entry.moved_at is not None and (now is None or now - entry.moved_at < cooldown):
                pod = replace(pod, annotations={**pod.annotations, DO_NOT_MOVE: "true"})
            pods.append(pod)
        nodes = self.plan_nodes_now()
        kept = frozenset(card for name, cards in self.kept.items() if name != rescued for card in cards)
        if kept:
            nodes = tuple(
                replace(node, cordoned=node.cordoned | held) if (held := kept & {c.uuid for c in node.cards}) else node
                for node in nodes
            )
        return Snapshot(nodes=nodes, pods=tuple(pods))

    def pending_pod(self, task: Task) -> PlanPod:
        """A pending task as the planner's FitGoal pod, with the CPU and memory it asks of its node."""
        return PlanPod(
            namespace=NAMESPACE,
            name=task.name,
            uid=task.name,
            requests=(task_request(task),),
            annotations=self.annotations(task),
            owner_kind="ReplicaSet",
            needs=self.needs(task),
        )

    def free_share(self, spec: tuple[str, ...]) -> float:
        """GPUs free (in cards) on the cards of the accepted models: an upper bound on what any move can open."""
        total = 0.0
        for node in self.typed(spec):
            for used in self.used[node]:
                total += (100 - used[2]) / 100
        return total

    def unplaced_cause(self, task: Task) -> str:
        """Why no node takes the task now: `capacity` when the cards of its models have fewer GPUs free in all than
        it asks (no placement whatever could place it), `cpu_memory` when the nodes of its models whose CPU and
        memory hold it have fewer GPUs free in all than it asks (the room is on nodes kube-scheduler refuses; moving
        cards alone cannot help), else `fragmented` (room enough on such nodes, but split across cards or nodes)."""
        if not task.num_gpu:
            return "cpu_memory"
        if self.free_share(task.gpu_spec) < task.gpus - 1e-9:
            return "capacity"
        fitting = (node for node in self.typed(task.gpu_spec) if self.resources_fit(task, node))
        if sum((100 - used[2]) / 100 for node in fitting for used in self.used[node]) < task.gpus - 1e-9:
            return "cpu_memory"
        return "fragmented"

    def resources_anywhere(self, task: Task) -> bool:
        """Whether any node of the task's models has its CPU and memory free (kube-scheduler would pass it)."""
        nodes = self.typed(task.gpu_spec) if task.num_gpu else range(len(self.trace_nodes))
        return any(self.resources_fit(task, node) for node in nodes)

    def whole_free(self) -> int:
        """Cards nobody holds."""
        return sum(self.empty)

    def moves_into_freed(self, result: Plan) -> int:
        """The plan's moves to a node whose CPU or memory did not hold the moved task before the plan: room an
        earlier move of the same plan freed."""
        count = 0
        for move in result.moves:
            task = self.running[move.pod.split("/", 1)[1]].task
            count += move.to_node != move.from_node and not self.resources_fit(task, self.index[move.to_node])
        return count

    def carry_out(self, result: Plan, now: float | None) -> tuple[int, str]:
        """Carry a plan's moves out (each an eviction and an immediate re-placement); (moves, "" or why not).

        The planner counts each node's CPU and memory through its moves, so no move should overfill a node; should
        one (a planner bug), the whole plan is refused before anything moves and the reason returned.
        """
        free_cpu, free_mem = list(self.free_cpu), list(self.free_mem)
        for move in result.moves:
            task = self.running[move.pod.split("/", 1)[1]].task
            source, target = self.index[move.from_node], self.index[move.to_node]
            free_cpu[source] += task.cpu_milli
            free_mem[source] += task.memory_mib
            free_cpu[target] -= task.cpu_milli
            free_mem[target] -= task.memory_mib
            if self.resources and (free_cpu[target] < 0 or free_mem[target] < 0):
                return 0, f"move of {move.pod} to {move.to_node} exceeds its CPU or memory"
        for move in result.moves:
            entry = self.take(move.pod.split("/", 1)[1])
            target = self.index[move.to_node]
            cards = tuple(self.card_at[uuid][1] for uuid in move.to_cards)
            self.put(entry.task, target, cards)
            self.running[entry.task.name].moved_at = now if now is not None else 0.0
        return len(result.moves), ""


class FgdState:
    """FGD's view of a cluster (`bench/fgd.py`): each node's cards as free percents and slots left, the measure of its
    card model, and per task shape FGD's best cards on it; a node's entries are dropped whenever the node changes, so
    a placement re-scores only the nodes changed since a task of its shape was last placed."""

    def __init__(self, cluster: Cluster, workload: Sequence[Task], coverage: float) -> None:
        """The workload's classes, and one measure per card model."""
        self.cluster = cluster
        gpu_tasks = [task for task in workload if task.num_gpu]
        self.classes = popular_classes(((*fgd_ask(task), task.gpu_spec) for task in gpu_tasks), coverage)
        self.gpu_tasks = len(gpu_tasks)
        measures: dict[str, Measure] = {}
        self.measures = []
        for cards in cluster.cards:
            kind = cards[0].type if cards else ""
            if kind not in measures:
                measures[kind] = Measure(self.classes, functools.partial(accepts, kind=kind))
            self.measures.append(measures[kind])
        self.state: list[tuple[tuple[int, ...], tuple[int, ...]] | None] = [None] * len(cluster.cards)
        self.best: list[dict[tuple[Any, ...], tuple[int, tuple[int, ...]] | None]] = [{} for _ in cluster.cards]
        self.refused = 0

    def summary(self) -> dict[str, Any]:
        """The classes kept and the choices HAMi's fit refused (any is a mismatch between the two views of a card)."""
        kept = sum(task.weight for task in self.classes)
        return {
            "classes": len(self.classes),
            "gpu_tasks": self.gpu_tasks,
            "covered": kept / self.gpu_tasks if self.gpu_tasks else 0.0,
            "refused_by_hami": self.refused,
        }

    def changed(self, node: int) -> None:
        """The node's cards, CPU or memory changed: its scores are stale."""
        self.state[node] = None
        self.best[node].clear()

    def cards(self, node: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The node's cards' free percents and slots left, from the cluster's usage."""
        found = self.state[node]
        if found is None:
            free, slots = [], []
            for card, (used_slots, used_mem, used_cores) in zip(
                self.cluster.cards[node], self.cluster.used[node], strict=True
            ):
                slots.append(card.count - used_slots)
                free.append(free_percent(slots[-1], card.devcore - used_cores, card.devmem - used_mem, card.devmem))
            found = self.state[node] = (tuple(free), tuple(slots))
        return found

    def on_node(self, task: Task, node: int) -> tuple[int, tuple[int, ...]] | None:
        """FGD's best cards for the task on the node and the rise of F_n(M), remembered until the node changes."""
        best = self.best[node]
        shape = task.shape
        if shape in best:
            return best[shape]
        cluster = self.cluster
        room = (cluster.free_cpu[node], cluster.free_mem[node]) if cluster.resources else (math.inf, math.inf)
        found = best[shape] = best_choice(self.measures[node], *self.cards(node), room, fgd_ask(task))
        return found

    def choose(self, task: Task) -> tuple[int, tuple[int, ...]] | None:
        """FGD's node and cards: the least rise of F_n(M) among the nodes that may fit (ties by the cluster's fixed
        node order), checked by HAMi's fit on exactly those cards; the next best when HAMi refuses."""
        cluster = self.cluster
        request = task_request(task)
        if request is None:
            candidates = [node for node in range(len(cluster.cards)) if cluster.resources_fit(task, node)]
        else:
            candidates = cluster.may_fit_nodes(task, request)
        rank = cluster.rank
        scored = []
        for node in candidates:
            found = self.on_node(task, node)
            if found is not None:
                scored.append((found[0], rank[node], node, found[1]))
        if not scored:
            return None
        first = min(scored)
        if self.hami_accepts(task, first[2], first[3]):
            return first[2], first[3]
        for _, _, node, cards in sorted(scored)[1:]:
            if self.hami_accepts(task, node, cards):
                return node, cards
        return None

    def fits_node(self, task: Task, node: int) -> tuple[int, ...] | None:
        """FGD's cards for the task on this one node, if HAMi's fit takes them (a retry on a node that gained room)."""
        found = self.on_node(task, node)
        if found is None or not self.hami_accepts(task, node, found[1]):
            return None
        return found[1]

    def hami_accepts(self, task: Task, node: int, cards: tuple[int, ...]) -> bool:
        """HAMi's fit on exactly FGD's cards (a task without cards needs none); a refusal is counted."""
        if not cards or self.cluster.hami_fit_on(task, node, cards) is not None:
            return True
        self.refused += 1
        return False


def fgd_ask(task: Task) -> tuple[int, int, int, int]:
    """What FGD reads of a task: its share of each card in percent (whole cards: 100), cards, CPU and memory."""
    request = task_request(task)
    if request is None:
        return 0, 0, task.cpu_milli, task.memory_mib
    percent = WHOLE if request.exclusive else request.mem_percentage or WHOLE
    return percent, request.nums, task.cpu_milli, task.memory_mib


def accepts(spec: tuple[str, ...], kind: str) -> bool:
    """Whether a card of this register type is of a model the task accepts (any model when `spec` is empty)."""
    return bool(kind) and (not spec or any(word.upper() in kind.upper() for word in spec))


# The controller -------------------------------------------------------------------------------------------------


@dataclass
class ControllerPolicy:
    """The controller's budgets and goals, as an operator's DefragPolicy would set them."""

    moves_per_run: int = 4
    moves_per_node: int = 4
    moves_per_hour: int = 100
    cooldown: float = 3600.0
    keep_free_cards: int = 0
    keep_whole_node: int = 0
    keep_moves_per_run: int = 8
    replan_after: float = 600.0
    plan_budget: float = math.inf
    max_moves_per_plan: int = 8
    search_steps: int = SEARCH_STEPS
    evictions_per_placed: float = math.inf
    """Inflation only: evictions at most this share of the tasks placed so far (no clock, so no hourly budget)."""


@dataclass
class ControllerStats:
    """What the controller did: runs by trigger, plans carried out, refusals, moves, planning times."""

    rescue_runs: int = 0
    rescued: int = 0
    keep_runs: int = 0
    keep_moves: int = 0
    refused_resources: int = 0
    refusals: list[str] = field(default_factory=list)
    rescued_into_freed: int = 0
    moves_into_freed: int = 0
    skipped_no_room: int = 0
    skipped_cpu_memory: int = 0
    no_plan_share: int = 0
    no_plan_multi: int = 0
    no_plan_budget: int = 0
    search_stopped: int = 0
    skipped_budget: int = 0
    skipped_plan_budget: int = 0
    room_lost: int = 0
    room_lost_meanwhile: int = 0
    moves: int = 0
    plan_seconds: list[float] = field(default_factory=list)
    snapshot_seconds: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The counters, and planning time as median / p95 / max."""
        data: dict[str, Any] = {
            key: value for key, value in self.__dict__.items() if key not in ("plan_seconds", "snapshot_seconds")
        }
        data["plan_seconds"] = spread_of(self.plan_seconds)
        data["plan_seconds_all"] = list(self.plan_seconds)
        data["snapshot_seconds"] = spread_of(self.snapshot_seconds)
        return data


def spread_of(values: Sequence[float]) -> dict[str, float | int]:
    """Median, p95, max and count."""
    if not values:
        return {"runs": 0, "median": 0.0, "p95": 0.0, "max": 0.0}
    ordered = sorted(values)
    return {
        "runs": len(ordered),
        "median": statistics.median(ordered),
        "p95": ordered[min(len(ordered) - 1, math.ceil(0.95 * len(ordered)) - 1)],
        "max": ordered[-1],
    }


@dataclass
class Corpus:
    """Where planner runs' inputs are pickled for `bench/planner_corpus.py`: runs of at least `slower` CPU seconds and
    every `every`-th run (0: none by count), as `{label}-{run}.pickle` holding the snapshot, goal, limits and the
    run's CPU seconds."""

    directory: Path
    slower: float = math.inf
    every: int = 0
    label: str = ""
    kept: int = 0

    def offer(
        self, run: int, snapshot: Snapshot, goal: FitGoal | FreeCardsGoal, limits: Limits, seconds: float
    ) -> None:
        """Keep the run's inputs if it is slow enough or its turn came."""
        if seconds < self.slower and not (self.every and run % self.every == 0):
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        record = {"snapshot": snapshot, "goal": goal, "limits": limits, "seconds": seconds, "label": self.label}
        path = self.directory / f"{self.label}-{run:05d}.pickle"
        path.write_bytes(corpus_bytes(record))
        self.kept += 1


def corpus_bytes(record: dict[str, Any]) -> bytes:
    """The record pickled, its read-only mappings (`MappingProxyType`, which pickle refuses) as dicts: the planner
    only reads them."""
    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.dispatch_table = {**copyreg.dispatch_table, MappingProxyType: lambda proxy: (dict, (dict(proxy),))}
    pickler.dump(record)
    return buffer.getvalue()


class Controller:
    """The defragmentation controller's two triggers over the cluster, with the planner and the policy's budgets."""

    def __init__(self, cluster: Cluster, policy: ControllerPolicy, corpus: Corpus | None = None) -> None:
        """A controller with nothing done yet; `corpus` keeps some planner runs' inputs."""
        self.cluster = cluster
        self.policy = policy
        self.corpus = corpus
        self.stats = ControllerStats()
        self.recent: list[float] = []
        self._failed: dict[tuple[Any, ...], int] = {}
        self._failed_at: dict[str, float] = {}
        self.version = 0
        self.awaiting: dict[str, int] = {}
        self.targets: dict[str, tuple[str, ...]] = {}

    def budget_left(self, now: float | None) -> int:
        """Moves left this run under the hourly budget (no hourly budget without a clock)."""
        if now is None:
            return self.policy.moves_per_run
        self.recent = [t for t in self.recent if now - t < 3600]
        return min(self.policy.moves_per_run, self.policy.moves_per_hour - len(self.recent))

    def planning_left(self) -> bool:
        """Whether the replay's planner CPU budget (a bench bound, not a controller one) has any left."""
        if sum(self.stats.plan_seconds) < self.policy.plan_budget:
            return True
        self.stats.skipped_plan_budget += 1
        return False

    def _plan(self, snapshot: Snapshot, goal: FitGoal | FreeCardsGoal, limits: Limits) -> Plan:
        """One planner run, timed."""
        start = time.process_time()
        result = plan(snapshot, goal, limits)
        seconds = time.process_time() - start
        self.stats.plan_seconds.append(seconds)
        if self.corpus is not None:
            self.corpus.offer(len(self.stats.plan_seconds), snapshot, goal, limits, seconds)
        return result

    def _limits(self, moves: int) -> Limits:
        """A run's bounds: `moves` in all, the policy's moves off one node and its search bound."""
        return Limits(
            max_moves=moves, max_moves_per_node=self.policy.moves_per_node, max_steps=self.policy.search_steps
        )

    def _snapshot(self, now: float | None, pod: str = "") -> Snapshot:
        """The planner's snapshot (for a rescue of `pod`), timed."""
        start = time.process_time()
        snapshot = self.cluster.snapshot(now, self.policy.cooldown, pod)
        self.stats.snapshot_seconds.append(time.process_time() - start)
        return snapshot

    def rescue(self, task: Task, now: float | None, *, place: bool = True, max_moves: int | None = None) -> int | None:
        """Rescue a Pending task: plan room for it within budget, carry it out, place it on the target; its moves.

        None when no plan was carried out. Without a clock (inflation) a task shape whose plan failed is not planned
        again until a move or a departure changed the cluster (placements only take room away); with one, a task whose
        plan failed is planned again only `replan_after` seconds later. Without `place` the task is left Pending with
        its target node in `awaiting`, for the scheduler's retry to find the room, or not (`settled`).
        """
        cluster = self.cluster
        request = task_request(task)
        if request is None or not self._due(task, now):
            return None
        if cluster.free_share(task.gpu_spec) < task.gpus - 1e-9:
            self.stats.skipped_no_room += 1
            self._fail(task, now)
            return None
        if not cluster.resources_anywhere(task):
            # kube-scheduler refuses every node for CPU or memory before HAMi's filter runs: the pod's
            # FailedScheduling carries no HAMi fit reason, so the rescue trigger does not fire.
            self.stats.skipped_cpu_memory += 1
            self._fail(task, now)
            return None
        left = self.budget_left(now) if max_moves is None else min(self.budget_left(now), max_moves)
        if left <= 0:
            self.stats.skipped_budget += 1
            return None
        if not self.planning_left():
            return None
        self.stats.rescue_runs += 1
        snapshot, pod = self._snapshot(now, task.name), cluster.pending_pod(task)
        result = self._plan(
            snapshot,
            FitGoal(pod),
            self._limits(left),
        )
        if not result.complete or result.target is None:
            if result.reasons and result.reasons[0].startswith("the search stopped"):
                self.stats.search_stopped += 1
            elif self._over_budget(snapshot, pod, left):
                self.stats.no_plan_budget += 1
            elif task.num_gpu > 1:
                self.stats.no_plan_multi += 1
            else:
                self.stats.no_plan_share += 1
            self._fail(task, now)
            return None
        node = cluster.index[result.target[0]]
        freed = not cluster.resources_fit(task, node)
        moves = self._carry_out(result, now)
        if moves is None:
            self._fail(task, now)
            return None
        if not place:
            self.awaiting[task.name] = node
            self.targets[task.name] = result.target[1]
            return moves
        cards = tuple(cluster.card_at[uuid][1] for uuid in result.target[1])
        if not cluster.resources_fit(task, node) or cluster.hami_fit_on(task, node, cards) is None:
            self.stats.room_lost += 1
            return moves
        cluster.put(task, node, cards)
        self.stats.rescued += 1
        self.stats.rescued_into_freed += freed
        return moves

    def _carry_out(self, result: Plan, now: float | None) -> int | None:
        """Carry the plan out and count its moves; None when the replay's guard refused it (a planner bug)."""
        into_freed = self.cluster.moves_into_freed(result)
        moves, why = self.cluster.carry_out(result, now)
        if why:
            self.stats.refused_resources += 1
            self.stats.refusals.append(why)
            return None
        self.stats.moves_into_freed += into_freed
        self._moved(moves, now)
        return moves

    def settled(self, task: Task, running: bool, now: float, *, taken_meanwhile: bool) -> None:
        """A rescue's moves have settled: the task is running (rescued), or the room went to others (lost; the task
        is planned again `replan_after` later, as a failed plan is), `taken_meanwhile` by arrivals or departures'
        retries before the scheduler's retry, else by older Pending tasks at that retry."""
        del self.awaiting[task.name]
        self.targets.pop(task.name, None)
        if running:
            self.stats.rescued += 1
            return
        self.stats.room_lost += 1
        self.stats.room_lost_meanwhile += taken_meanwhile
        self._fail(task, now)

    def _over_budget(self, snapshot: Snapshot, pod: PlanPod, left: int) -> bool:
        """Whether a plan within the policy's own bound on a plan's moves exists where the run's budget found none,
        as `decide_run` asks to say "over budget" (not timed: the replay's planning time is one `plan` a run)."""
        if left >= self.policy.max_moves_per_plan and self.policy.moves_per_node >= self.policy.max_moves_per_plan:
            return False
        bound = self.policy.max_moves_per_plan
        return plan(snapshot, FitGoal(pod), Limits(max_moves=bound, max_moves_per_node=bound)).complete

    def _due(self, task: Task, now: float | None) -> bool:
        """Whether a rescue of the task may be planned now (see `rescue`)."""
        if now is None:
            return self._failed.get(task.shape) != self.version
        return now - self._failed_at.get(task.name, -math.inf) >= self.policy.replan_after

    def _fail(self, task: Task, now: float | None) -> None:
        """Remember a failed rescue."""
        if now is None:
            self._failed[task.shape] = self.version
        else:
            self._failed_at[task.name] = now

    def keep_room(self, now: float | None) -> int:
        """Keep room: when fewer than `keep_free_cards` cards are whole and free, plan toward it within budget; when
        no node has `keep_whole_node` whole free cards, plan to gather them on one."""
        want = self.policy.keep_free_cards - self.cluster.whole_free()
        gather = self.policy.keep_whole_node
        if gather and max(self.cluster.empty) < gather:
            goal = FreeCardsGoal(gather, on_one_node=True)
        elif want > 0:
            goal = FreeCardsGoal(want)
        else:
            return 0
        left = min(self.budget_left(now), self.policy.keep_moves_per_run)
        if left <= 0:
            self.stats.skipped_budget += 1
            return 0
        if not self.planning_left():
            return 0
        self.stats.keep_runs += 1
        result = self._plan(
            self._snapshot(now),
            goal,
            self._limits(left),
        )
        if not result.moves:
            return 0
        moves = self._carry_out(result, now)
        if moves is None:
            return 0
        self.stats.keep_moves += moves
        return moves

    def _moved(self, moves: int, now: float | None) -> None:
        """Count moves against the budgets."""
        self.stats.moves += moves
        if moves:
            self.version += 1
        if now is not None:
            self.recent.extend([now] * moves)

    def changed(self) -> None:
        """The cluster gained room (a departure): failed plans may succeed now."""
        self.version += 1


# The replays ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Setup:
    """One replay's settings: task list, HAMi policy, with the controller or not, node resources modelled or not."""

    tasks: str
    policy: str
    controller: bool
    resources: bool = True

    @property
    def label(self) -> str:
        """`binpack + controller`, `spread`, `default (node binpack, GPU spread)`, `FGD (paper, reference)` ..."""
        labels = {FGD: FGD_LABEL, DEFAULT: DEFAULT_LABEL, SPREAD_BINPACK: SPREAD_BINPACK_LABEL}
        policy = labels.get(self.policy, self.policy)
        return policy + (" + controller" if self.controller else "") + ("" if self.resources else " (no CPU/mem)")

    def cluster(self, nodes: Sequence[TraceNode], tasks: Sequence[Task], coverage: float) -> Cluster:
        """The replay's empty cluster; FGD's workload is the replayed list. FGD with the controller is refused: the
        controller is measured beside HAMi's own policies, FGD only as a reference placement alone."""
        if self.policy == FGD and self.controller:
            raise ValueError(
                "fgd is a reference placement policy replayed alone; run the controller with binpack, spread or default"
            )
        return Cluster(nodes, self.policy, resources=self.resources, workload=tasks, coverage=coverage)


def replay_inflation(
    nodes: Sequence[TraceNode],
    tasks: Sequence[Task],
    setup: Setup,
    policy: ControllerPolicy,
    *,
    limit: float = 1.0,
    keep_every: float = 0.02,
    rescues_per_step: int = 2,
    corpus: Corpus | None = None,
    coverage: float = 0.95,
) -> dict[str, Any]:
    """Workload inflation: tasks drawn in order with no departures until the GPUs asked reach `limit` x capacity.

    The controller rescues a task HAMi leaves Pending at once, at most `rescues_per_step` planner runs per 1% of
    capacity asked (a failed rescue costs the planner seconds at this size), each with no more moves than keep the
    evictions within the policy's `evictions_per_placed` of the tasks placed, and runs keep-room each `keep_every`
    of capacity asked. A task without cards is skipped when node resources are left out. `coverage`: FGD's workload
    classes cover that share of the list's GPU tasks.
    """
    cluster = setup.cluster(nodes, tasks, coverage)
    controller = Controller(cluster, policy, corpus) if setup.controller else None
    ledger = InflationLedger(cluster.capacity)
    next_keep = keep_every * cluster.capacity
    runs_in: dict[int, int] = {}
    started = time.process_time()
    for task in inflate(tasks, cluster.capacity, limit):
        if not setup.resources and not task.num_gpu:
            continue
        choice = cluster.choose(task)
        moves = 0
        if choice is not None:
            cluster.put(task, *choice)
        elif controller is not None:
            step = int(100 * ledger.asked / cluster.capacity)
            if runs_in.get(step, 0) < rescues_per_step:
                runs = controller.stats.rescue_runs
                allowed = policy.evictions_per_placed * (ledger.tasks_placed + 1) - ledger.evictions
                moves = controller.rescue(task, None, max_moves=None if math.isinf(allowed) else int(allowed)) or 0
                runs_in[step] = runs_in.get(step, 0) + controller.stats.rescue_runs - runs
        placed = task.name in cluster.running
        cause = "" if placed else cluster.unplaced_cause(task)
        keeps = policy.keep_free_cards or policy.keep_whole_node
        if controller is not None and keeps and ledger.asked + task.gpus >= next_keep:
            moves += controller.keep_room(None)
            next_keep += keep_every * cluster.capacity
        ledger.record(task, placed, moves, cause)
    return {
        "setup": setup.__dict__,
        "label": setup.label,
        "capacity": cluster.capacity,
        "rows": ledger.rows,
        "final": ledger.row(ledger.asked / cluster.capacity),
        "unplaced_by_models": unplaced_by_models(ledger.unplaced_tasks, ledger.asked),
        "held_by_flexible": cluster.held_by_flexible(),
        "controller": controller.stats.to_dict() if controller else None,
        "fgd": cluster.fgd.summary() if cluster.fgd else None,
        "cpu_seconds": time.process_time() - started,
    }


@dataclass
class _Waiting:
    """A Pending task and when it arrived."""

    task: Task
    arrived: float
    order: int


def replay_timeline(
    nodes: Sequence[TraceNode],
    tasks: Sequence[Task],
    setup: Setup,
    policy: ControllerPolicy,
    *,
    compress: float,
    rounds: int = 1,
    tick: float = 60.0,
    pending_for: float = 60.0,
    rescues_per_tick: int = 1,
    settle: float = 0.0,
    reserve_for: float = 0.0,
    keep_off_older: bool = False,
    corpus: Corpus | None = None,
    coverage: float = 0.95,
) -> dict[str, Any]:
    """The trace's own arrivals (`arrivals`: creation times divided by `compress`, `rounds` times) and departures
    (each task runs its duration once placed).

    A Pending task is retried whenever a node gains room (kube-scheduler requeues on such events). Every `tick`
    seconds the controller plans at most `rescues_per_tick` rescues, oldest Pending task first among those Pending
    for at least `pending_for` (a failed one is planned again `replan_after` later), then keep-room. A moved task
    keeps its departure time. With `settle` the moves take effect at once and arrivals go on taking room for `settle`
    seconds (the pending pod's scheduling backoff, up to kube-scheduler's 10 s, once the evicted pods are gone), then
    the nodes the moves freed retry their Pending tasks oldest first (older tasks may take the room too); the rescued
    task then runs, or its room was lost (counted). Without it the task is placed on the plan's target at once.

    With `reserve_for` too, the room is kept as the server keeps it (`core.reservation`) from the moves until the
    task runs or `reserve_for` has passed: the rescued task may use only its target cards (`use-gpuuuid`), a task
    arriving meanwhile gets them in its `nouse-gpuuuid` for good (admission writes it once), tasks Pending from
    before are not kept off them (admission had passed them), and plans put no pod on them (`runs.keep_off`). With
    `keep_off_older` too, tasks Pending from before are kept off them as well (a server patching their nouse-gpuuuid),
    until the room ends: what such a patch would buy.
    Under FGD a retry on a node takes FGD's cards there; FGD's workload is the list (`coverage` as in inflation).
    """
    cluster = setup.cluster(nodes, tasks, coverage)
    controller = Controller(cluster, policy, corpus) if setup.controller else None
    events: list[tuple[float, int, int, str]] = []
    by_name = {}
    for seq, (arrival, task) in enumerate(arrivals(tasks, compress, rounds)):
        if task.num_gpu or setup.resources:
            events.append((arrival, 1, seq, task.name))
            by_name[task.name] = task
    heapq.heapify(events)
    times = sorted(e[0] for e in events)
    first = times[0] if times else 0.0
    window = (times[len(times) // 10], times[len(times) * 9 // 10]) if times else (0.0, 0.0)
    pending: dict[str, _Waiting] = {}
    shapes: dict[tuple[Any, ...], dict[str, _Waiting]] = {}
    waits: dict[str, float] = {}
    departures = 0
    seq = len(events)
    allocated_area = 0.0
    clock = first
    next_tick = first
    evictions = 0
    started = time.process_time()
    settling: dict[str, set[int]] = {}
    # The kept rooms' release events, by task: a release of an earlier reservation of the task does nothing.
    releases: dict[str, int] = {}
    # Under `keep_off_older`: the nouse-gpuuuid admission wrote on a task, and the cards each kept room bars to a task
    # Pending from before it (by task, then by the task the room is kept for); a task's pod carries both.
    admitted: dict[str, tuple[str, ...]] = {}
    barred: dict[str, dict[str, tuple[str, ...]]] = {}

    def write_nouse(name: str) -> None:
        """The task's nouse-gpuuuid now: what admission wrote and what the kept rooms bar to it."""
        cards = {*admitted.get(name, ()), *(card for room in barred.get(name, {}).values() for card in room)}
        extra = cluster.extra.setdefault(name, {})
        if cards:
            extra[NOUSE_UUID] = ",".join(sorted(cards))
            return
        extra.pop(NOUSE_UUID, None)
        if not extra:
            del cluster.extra[name]

    def bar_older(room: str, cards: tuple[str, ...]) -> None:
        """A kept room starts under `keep_off_older`: its cards barred to every GPU task Pending from before it."""
        for name, waiting in pending.items():
            if name != room and waiting.task.num_gpu:
                barred.setdefault(name, {})[room] = cards
                write_nouse(name)

    def unbar(room: str) -> None:
        """A kept room ends: the tasks it barred get its cards back."""
        for name in [name for name, rooms in barred.items() if room in rooms]:
            rooms = barred[name]
            del rooms[room]
            if not rooms:
                del barred[name]
            write_nouse(name)

    def release(name: str) -> None:
        """A kept room ends: the task gets its own card choice back (a running task keeps the cards it holds)."""
        releases.pop(name, None)
        unbar(name)
        if cluster.kept.pop(name, None) is not None and name not in cluster.running:
            cluster.extra.get(name, {}).pop(USE_UUID, None)

    def placed(task: Task, now: float, arrived: float) -> None:
        """Schedule the departure of a task just placed and record its wait."""
        nonlocal seq
        waits[task.name] = now - arrived
        if task.name in cluster.kept:
            release(task.name)
        seq += 1
        heapq.heappush(events, (now + task.duration, 0, seq, task.name))

    def retry(node: int, now: float) -> None:
        """Pending tasks, oldest first, on the node that just gained room.

        The node only loses room while they are tried, so a task that does not fit rules out the rest of its shape:
        only the shapes whose oldest task fits are walked, merged in arrival order.
        """
        queues = [queue for queue in shapes.values() if cluster.may_fit_node(next(iter(queue.values())).task, node)]
        if not queues:
            return
        candidates = sorted((w for queue in queues for w in queue.values()), key=lambda w: w.order)
        refused: set[tuple[Any, ...]] = set()
        for waiting in candidates:
            task = waiting.task
            if task.shape in refused:
                continue
            cards = cluster.fits_node(task, node)
            if cards is None:
                if task.name not in cluster.extra:
                    # A task kept off cards (or kept to its own) fits where its shape does, not the other way.
                    refused.add(task.shape)
                continue
            cluster.put(task, node, cards)
            unqueue(task)
            placed(task, now, waiting.arrived)

    def queue(task: Task, now: float) -> None:
        """A task goes Pending."""
        waiting = _Waiting(task, now, len(pending) + len(waits))
        pending[task.name] = waiting
        shapes.setdefault(task.shape, {})[task.name] = waiting

    def unqueue(task: Task) -> None:
        """A Pending task was placed."""
        del pending[task.name]
        same = shapes[task.shape]
        del same[task.name]
        if not same:
            del shapes[task.shape]

    def advance(now: float) -> None:
        """Integrate the allocated share over the middle 80% of arrivals (the trace's sparse head left out)."""
        nonlocal allocated_area, clock
        lo, hi = max(clock, window[0]), min(now, window[1])
        if hi > lo:
            allocated_area += cluster.allocated * (hi - lo)
        clock = now

    def controller_tick(now: float) -> None:
        """The controller's run: rescue the oldest long-Pending tasks, then keep room."""
        nonlocal evictions, seq
        assert controller is not None
        runs = controller.stats.rescue_runs
        for name in list(pending):
            if controller.stats.rescue_runs - runs >= rescues_per_tick:
                break
            waiting = pending[name]
            if now - waiting.arrived < pending_for or not waiting.task.num_gpu:
                continue
            if name in controller.awaiting:
                continue
            before = {n: e.node for n, e in cluster.running.items()}
            moves = controller.rescue(waiting.task, now, place=settle <= 0)
            if moves is None:
                continue
            evictions += moves
            freed = {before[n] for n, e in cluster.running.items() if n in before and e.node != before[n]}
            if name in controller.awaiting:
                seq += 1
                heapq.heappush(events, (now + settle, 2, seq, name))
                settling[name] = freed
                if reserve_for > 0:
                    cards = controller.targets[name]
                    cluster.kept[name] = cards
                    cluster.extra.setdefault(name, {})[USE_UUID] = ",".join(cards)
                    if keep_off_older:
                        bar_older(name, cards)
                    seq += 1
                    releases[name] = seq
                    heapq.heappush(events, (now + reserve_for, 3, seq, name))
                continue
            if name in cluster.running:
                unqueue(waiting.task)
                placed(waiting.task, now, waiting.arrived)
            for node in freed:
                retry(node, now)
        before = {n: e.node for n, e in cluster.running.items()}
        moves = controller.keep_room(now)
        evictions += moves
        if moves:
            for node in {before[n] for n, e in cluster.running.items() if n in before and e.node != before[n]}:
                retry(node, now)

    while events:
        now, kind, order, name = heapq.heappop(events)
        if controller is not None:
            # Ticks up to this event, but none past an event a tick made due earlier (a retry, a kept room's end).
            while next_tick <= now and not (events and events[0][0] < next_tick):
                if pending:
                    advance(next_tick)
                    controller_tick(next_tick)
                next_tick += tick
            if events and events[0][0] < now:
                # A tick made an event due before this one (a retry, a kept room's end): that one goes first.
                heapq.heappush(events, (now, kind, order, name))
                continue
        advance(now)
        task = by_name[name]
        if kind == 3:
            if releases.get(name) == order:
                release(name)
            continue
        if kind == 2:
            assert controller is not None
            target = controller.awaiting[name]
            taken = name in pending and cluster.fits_node(task, target) is None
            for node in [target, *sorted(settling.pop(name) - {target})]:
                retry(node, now)
            controller.settled(task, name in cluster.running, now, taken_meanwhile=taken)
            continue
        if kind == 0:
            if name not in cluster.running:
                continue
            entry = cluster.take(name)
            departures += 1
            if controller is not None:
                controller.changed()
            retry(entry.node, now)
            continue
        kept = sorted({card for cards in cluster.kept.values() for card in cards})
        if kept and task.num_gpu:
            cluster.extra[name] = {NOUSE_UUID: ",".join(kept)}
            admitted[name] = tuple(kept)
        choice = cluster.choose(task)
        if choice is None:
            queue(task, now)
            continue
        cluster.put(task, *choice)
        placed(task, now, now)
    for name, waiting in pending.items():
        waits[name] = clock - waiting.arrived
    gpu_tasks = [by_name[name] for name in waits if by_name[name].num_gpu]
    ordered = sorted(waits[t.name] for t in gpu_tasks)
    placed_tasks = len(waits) - len(pending)

    def pct(q: float) -> float:
        """A percentile of the GPU tasks' waits."""
        return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)] if ordered else 0.0

    span = window[1] - window[0]
    return {
        "setup": setup.__dict__,
        "label": setup.label,
        "compress": compress,
        "rounds": rounds,
        "settle_s": settle,
        "reserve_s": reserve_for,
        "keep_off_older": keep_off_older,
        "capacity": cluster.capacity,
        "allocated_share": allocated_area / (span * cluster.capacity) if span > 0 else 0.0,
        "simulated_hours": (clock - first) / 3600,
        "gpu_tasks": len(gpu_tasks),
        "waited": sum(1 for t in gpu_tasks if waits[t.name] > 0),
        "never_placed": len(pending),
        "pending_p50_s": pct(0.5),
        "pending_p95_s": pct(0.95),
        "pending_gpu_hours": sum(t.gpus * waits[t.name] for t in gpu_tasks) / 3600,
        "evictions": evictions,
        "evictions_per_placed": evictions / placed_tasks if placed_tasks else 0.0,
        "controller": controller.stats.to_dict() if controller else None,
        "fgd": cluster.fgd.summary() if cluster.fgd else None,
        "cpu_seconds": time.process_time() - started,
    }


# Reporting ------------------------------------------------------------------------------------------------------


def _room_lost(result: dict[str, Any]) -> str:
    """Rescues whose room was lost, meanwhile / to older tasks; `-` when the replay placed rescued tasks at once."""
    settle = result.get("settle_s", 0.0)
    if not settle:
        return "-"
    c = result["controller"]
    meanwhile = c.get("room_lost_meanwhile", 0)
    kept = result.get("reserve_s", 0.0)
    held = f", kept {kept:g} s" if kept else ""
    held += ", older kept off" if kept and result.get("keep_off_older") else ""
    return f"{c['room_lost']} ({meanwhile} / {c['room_lost'] - meanwhile}) in {settle:g} s{held}"


def verdict(ok: bool) -> str:
    """PASS or MISS."""
    return "PASS" if ok else "MISS"


def pct(value: float) -> str:
    """A share in percent, one decimal."""
    return f"{100 * value:.1f}%"


def print_inflation(name: str, results: list[dict[str, Any]], tasks: int, nodes: int) -> None:
    """One table per task list: each 10% of asked load, each setup side by side."""
    capacity = results[0]["capacity"]
    print(f"\ninflation: {name} ({tasks} tasks in the list, {nodes} nodes, {capacity:.0f} GPUs)")
    print("  per setup: GPU capacity unallocated / asked GPUs unplaced / evictions per placed task")
    width = max(len(r["label"]) for r in results) + 2
    print("  load " + "".join(f"{r['label']:>{max(width, 26)}}" for r in results))
    for position in range(len(results[0]["rows"])):
        cells = []
        for result in results:
            rows = result["rows"]
            row = rows[position] if position < len(rows) else result["final"]
            cells.append(f"{pct(row['unallocated'])} / {pct(row['unplaced'])} / {row['evictions_per_placed']:.3f}")
        print(f"  {results[0]['rows'][position]['load']:>4.0%} " + "".join(f"{c:>{max(width, 26)}}" for c in cells))


def hami_alone(results: list[dict[str, Any]], resources: bool) -> list[dict[str, Any]]:
    """The replays of HAMi's own policies without the controller (FGD, a reference, is not HAMi)."""
    return [
        r
        for r in results
        if not r["setup"]["controller"] and r["setup"]["resources"] == resources and r["setup"]["policy"] != FGD
    ]


def inflation_targets(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """At 100% asked load: each controller setup against HAMi's best policy alone (same task list, same resources)."""
    verdicts = []
    for result in results:
        setup = result["setup"]
        if not setup["controller"]:
            continue
        alone = hami_alone(results, setup["resources"])
        best = min(alone, key=lambda r: r["final"]["unplaced"])
        unplaced, evictions = result["final"]["unplaced"], result["final"]["evictions_per_placed"]
        verdicts.append(
            {
                "tasks": setup["tasks"],
                "label": result["label"],
                "unplaced": unplaced,
                "best_alone": best["label"],
                "best_alone_unplaced": best["final"]["unplaced"],
                "unplaced_ok": unplaced <= best["final"]["unplaced"] / 4,
                "evictions_per_placed": evictions,
                "evictions_ok": evictions <= 0.05,
            }
        )
    return verdicts


def print_timeline(name: str, results: list[dict[str, Any]]) -> None:
    """The timeline table: allocation, pending time, GPU-hours Pending, evictions."""
    first = results[0]
    print(
        f"\ntimeline: {name} (arrivals compressed {first['compress']:g}x, the list played {first['rounds']} times; "
        f"{first['gpu_tasks']} GPU tasks)"
    )
    print(
        f"  {'setup':<34}{'allocated':>10}{'waited':>8}{'never':>7}{'p50 s':>9}{'p95 s':>9}"
        f"{'GPU-h Pending':>15}{'evict/task':>12}{'CPU s':>8}"
    )
    for r in results:
        print(
            f"  {r['label']:<34}{pct(r['allocated_share']):>10}{r['waited']:>8}{r['never_placed']:>7}"
            f"{r['pending_p50_s']:>9.0f}{r['pending_p95_s']:>9.0f}{r['pending_gpu_hours']:>15.1f}"
            f"{r['evictions_per_placed']:>12.4f}{r['cpu_seconds']:>8.0f}"
        )


def timeline_targets(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each controller setup's GPU-hours Pending against HAMi's best policy alone (same list, same resources)."""
    verdicts = []
    for result in results:
        setup = result["setup"]
        if not setup["controller"]:
            continue
        alone = hami_alone(results, setup["resources"])
        best = min(alone, key=lambda r: r["pending_gpu_hours"])
        verdicts.append(
            {
                "tasks": setup["tasks"],
                "label": result["label"],
                "pending_gpu_hours": result["pending_gpu_hours"],
                "best_alone": best["label"],
                "best_alone_gpu_hours": best["pending_gpu_hours"],
                "pending_ok": result["pending_gpu_hours"] <= best["pending_gpu_hours"] / 2,
                "evictions_per_placed": result["evictions_per_placed"],
                "evictions_ok": result["evictions_per_placed"] <= 0.05,
            }
        )
    return verdicts


def plot(results: dict[str, Any], path: Path) -> None:
    """Unallocated capacity and unplaced GPUs against asked load (default list), and timeline GPU-hours Pending."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    inflation = results["inflation"].get("default") or next(iter(results["inflation"].values()), [])
    figure, axes = plt.subplots(1, 3, figsize=(16, 4.8))
    palette = plt.get_cmap("tab20").colors
    for index, result in enumerate(inflation):
        loads = [row["load"] * 100 for row in result["rows"]]
        reference = result["setup"]["policy"] == FGD
        style: dict[str, Any] = {
            "linestyle": ":" if reference else "-" if result["setup"]["controller"] else "--",
            "marker": "s" if reference else "o",
            "ms": 3,
            "label": result["label"],
            "color": "black" if reference else palette[index % len(palette)],
        }
        axes[0].plot(loads, [100 * row["unallocated"] for row in result["rows"]], **style)
        axes[1].plot(loads, [100 * row["unplaced"] for row in result["rows"]], **style)
    axes[0].set(
        xlabel="GPUs asked, % of capacity",
        ylabel="GPU capacity unallocated, %",
        title="workload inflation (default list)",
    )
    axes[1].set(xlabel="GPUs asked, % of capacity", ylabel="asked GPUs unplaced, %", title="asked GPUs left unplaced")
    for axis in axes[:2]:
        axis.grid(alpha=0.3)
        if inflation:
            axis.legend(fontsize=7)
    timeline = results["timeline"].get("default") or []
    if timeline:
        labels = [r["label"].replace(" + ", "\n+ ").replace(" (", "\n(").replace(", ", ",\n") for r in timeline]
        axes[2].bar(
            range(len(timeline)),
            [r["pending_gpu_hours"] for r in timeline],
            color=[
                "black" if r["setup"]["policy"] == FGD else "tab:blue" if r["setup"]["controller"] else "tab:gray"
                for r in timeline
            ],
        )
        axes[2].set_xticks(range(len(timeline)), labels, fontsize=7)
        axes[2].set(ylabel="GPU-hours Pending", title="timeline (default list)")
        axes[2].grid(alpha=0.3, axis="y")
    else:
        axes[2].set_axis_off()
        axes[2].text(0.5, 0.5, "timeline not replayed in this run", ha="center", va="center", fontsize=9)
    reference = any(
        r["setup"]["policy"] == FGD for kind in ("inflation", "timeline") for rs in results[kind].values() for r in rs
    )
    figure.suptitle(
        "Alibaba GPU trace v2023 (Weng et al., ATC '23) replayed in hami-place's core: HAMi alone vs "
        "HAMi + defragmentation controller"
        + ("; the paper's FGD (not HAMi) as a reference, dotted" if reference else ""),
        fontsize=10,
    )
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def subset(nodes: list[TraceNode], count: int | None) -> list[TraceNode]:
    """Every k-th node, so a slice keeps the models' mix."""
    if count is None or count >= len(nodes):
        return nodes
    step = len(nodes) / count
    return [nodes[int(i * step)] for i in range(count)]


def main(argv: list[str] | None = None) -> None:
    """Run the replays (or combine earlier runs' JSON), print the tables and targets, write the JSON and the plot."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--trace-dir", type=Path, default=TRACE_DIR)
    parser.add_argument("--files", default=",".join(TASK_FILES), help="task lists for workload inflation")
    parser.add_argument("--timeline-files", default="default", help="task lists for the timeline (need times)")
    parser.add_argument(
        "--no-resources-files", default="default", help="task lists replayed again without node CPU and memory"
    )
    parser.add_argument(
        "--policies",
        default=",".join(POLICIES),
        help=f"HAMi's policies, each alone and with the controller: `binpack` and `spread` set both HAMi's node and "
        f"GPU policy, `{DEFAULT}` is HAMi's default pair (node binpack, GPU spread), `{SPREAD_BINPACK}` the fourth "
        f"pair (node spread, GPU binpack); `{FGD}` adds the FGD paper's "
        "policy alone, as a reference",
    )
    parser.add_argument(
        "--alone", action="store_true", help="HAMi's policies alone only, no replay with the controller"
    )
    parser.add_argument(
        "--fgd-coverage",
        type=float,
        default=0.95,
        help="FGD: its workload is the list's most popular task classes covering this share of its GPU tasks",
    )
    parser.add_argument("--nodes", type=int, help="replay on every k-th node only, this many (development)")
    parser.add_argument("--tasks", type=int, help="the first this many tasks of each list only (development)")
    parser.add_argument("--compress", type=float, default=5000.0, help="timeline arrivals compressed this many times")
    parser.add_argument("--rounds", type=int, default=5, help="timeline: the task list played this many times")
    parser.add_argument(
        "--rescues-per-step", type=int, default=1, help="inflation: planner runs for rescues per 1%% of capacity asked"
    )
    parser.add_argument(
        "--rescues-per-tick", type=int, default=1, help="timeline: planner runs for rescues per controller tick"
    )
    parser.add_argument("--tick", type=float, default=300.0, help="timeline: seconds between controller runs")
    parser.add_argument(
        "--rescue-settle",
        type=float,
        default=10.0,
        help="timeline: seconds from a rescue's room freed to the scheduler's retry of its task (kube-scheduler's "
        "longest pod backoff by default), arrivals taking room meanwhile (0: the task placed on the plan's target "
        "at once, room lost never)",
    )
    parser.add_argument(
        "--reserve-for",
        type=float,
        default=60.0,
        help="timeline: seconds the room a rescue freed is kept for its task, as the server's rescue.reserveFor "
        "(its default); tasks arriving meanwhile are kept off the cards, older Pending tasks are not (0: not kept)",
    )
    parser.add_argument(
        "--keep-off-older",
        action="store_true",
        help="timeline: a kept room keeps tasks Pending from before it off its cards too, until it ends (what a "
        "server patching their nouse-gpuuuid would buy)",
    )
    parser.add_argument(
        "--plan-budget", type=float, default=math.inf, help="planner CPU seconds per replay, then no more runs"
    )
    parser.add_argument(
        "--no-resources-timeline", action="store_true", help="the timeline too without node CPU and memory"
    )
    parser.add_argument("--keep-free-cards", type=int, default=0, help="keep-room goal: whole free cards (0: off)")
    parser.add_argument(
        "--keep-whole-node", type=int, default=0, help="keep-room goal: this many whole free cards on one node (0: off)"
    )
    parser.add_argument("--moves-per-run", type=int, default=4, help="controller: moves a run may make (movesPerRun)")
    parser.add_argument(
        "--moves-per-node", type=int, default=4, help="controller: moves off one node a run may make (movesPerNode)"
    )
    parser.add_argument(
        "--max-moves-per-plan", type=int, default=8, help="controller: the bound decide_run checks (maxMovesPerPlan)"
    )
    parser.add_argument(
        "--search-steps",
        type=int,
        default=SEARCH_STEPS,
        help=f"controller: the planner's search bound a run (Limits.max_steps, default {SEARCH_STEPS:,})",
    )
    parser.add_argument(
        "--evictions-per-placed",
        type=float,
        default=math.inf,
        help="inflation: the controller evicts at most this share of the tasks placed so far, its budget where no "
        "clock bounds moves an hour (default: no bound)",
    )
    parser.add_argument("--skip-timeline", action="store_true")
    parser.add_argument(
        "--corpus", type=Path, help="pickle planner runs' inputs here, for bench/planner_corpus.py (see --corpus-*)"
    )
    parser.add_argument(
        "--corpus-slower", type=float, default=math.inf, help="corpus: runs of at least this many CPU seconds"
    )
    parser.add_argument("--corpus-every", type=int, default=0, help="corpus: and every this-many-th run (0: none)")
    parser.add_argument("--combine", type=Path, nargs="+", help="merge these runs' JSON instead of replaying")
    parser.add_argument("--json", type=Path, default=ROOT / "docs" / "performance-trace.json")
    parser.add_argument("--plot", type=Path, help="the plot (default: beside --json, as .png)")
    args = parser.parse_args(argv)
    args.plot = plot_path(args.json, args.plot)
    unknown = [policy for policy in args.policies.split(",") if policy not in (*PAIRS, FGD)]
    if unknown:
        parser.error(f"unknown policies {', '.join(unknown)}: choose among {', '.join((*PAIRS, FGD))}")
    if importlib.util.find_spec("matplotlib") is None:
        parser.error("the plot needs matplotlib, the bench extra: make bench, or pip install -e '.[bench]'")
    command = "python bench/trace_replay.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    if args.combine:
        report = combine(args.combine)
        report["commands"].append(command)
    else:
        report = replay_all(args, command)
    finish(report, args.json, args.plot)


def plot_path(report: Path, plot: Path | None) -> Path:
    """The plot asked for, else one beside the report: a run whose report goes elsewhere leaves the docs' plot be."""
    return plot or report.with_suffix(".png")


def replay_all(args: argparse.Namespace, command: str) -> dict[str, Any]:
    """Every replay the arguments ask for."""
    nodes = subset(read_nodes(args.trace_dir / NODE_FILE), args.nodes)
    policies = args.policies.split(",")
    controller_policy = ControllerPolicy(
        moves_per_run=args.moves_per_run,
        moves_per_node=args.moves_per_node,
        max_moves_per_plan=args.max_moves_per_plan,
        keep_free_cards=args.keep_free_cards,
        keep_whole_node=args.keep_whole_node,
        plan_budget=args.plan_budget,
        search_steps=args.search_steps,
        evictions_per_placed=args.evictions_per_placed,
    )
    lists = {
        name: read_tasks(args.trace_dir / f"openb_pod_list_{name}.csv")[: args.tasks]
        for name in dict.fromkeys(_names(args.files) + _names(args.timeline_files))
    }
    no_resources = set(_names(args.no_resources_files))
    corpus = None if args.corpus is None else Corpus(args.corpus, args.corpus_slower, args.corpus_every)
    report: dict[str, Any] = {
        "trace": "Alibaba cluster-trace-gpu-v2023 (Weng et al., USENIX ATC '23)",
        "nodes": len(nodes),
        "gpus": sum(node.gpus for node in nodes),
        "tasks": {name: len(tasks) for name, tasks in lists.items()},
        "card_mib": CARD_MIB,
        "slots_per_card": SLOTS,
        "controller_policy": controller_policy.__dict__,
        "commands": [command],
        "load_average": [os.getloadavg()[0]],
        "inflation": {},
        "timeline": {},
    }
    for name in _names(args.files):
        results = []
        for resources in (True, False) if name in no_resources else (True,):
            for policy in policies:
                for controlled in controlled_runs(policy, args.alone):
                    setup = Setup(name, policy, controlled, resources)
                    results.append(
                        replay_inflation(
                            nodes,
                            lists[name],
                            setup,
                            controller_policy,
                            rescues_per_step=args.rescues_per_step,
                            corpus=_corpus_for(corpus, "inflation", setup),
                            coverage=args.fgd_coverage,
                        )
                    )
                    _progress("inflation", setup, results[-1])
        report["inflation"][name] = results
    for name in [] if args.skip_timeline else _names(args.timeline_files):
        if not has_times(lists[name]):
            print(f"timeline: {name} has no creation/deletion times; inflation only", file=sys.stderr)
            continue
        results = []
        for resources in (True, False) if name in no_resources and args.no_resources_timeline else (True,):
            for policy in policies:
                for controlled in controlled_runs(policy, args.alone):
                    setup = Setup(name, policy, controlled, resources)
                    results.append(
                        replay_timeline(
                            nodes,
                            lists[name],
                            setup,
                            controller_policy,
                            compress=args.compress,
                            rounds=args.rounds,
                            rescues_per_tick=args.rescues_per_tick,
                            tick=args.tick,
                            settle=args.rescue_settle,
                            reserve_for=args.reserve_for,
                            keep_off_older=args.keep_off_older,
                            corpus=_corpus_for(corpus, "timeline", setup),
                            coverage=args.fgd_coverage,
                        )
                    )
                    _progress("timeline", setup, results[-1])
        report["timeline"][name] = results
    return report


def controlled_runs(policy: str, alone: bool) -> tuple[bool, ...]:
    """Whether each replay of the policy runs the controller: alone, then with it (FGD, a reference, alone only)."""
    return (False,) if policy == FGD or alone else (False, True)


def _corpus_for(corpus: Corpus | None, kind: str, setup: Setup) -> Corpus | None:
    """The corpus of one replay, its files named after it (`inflation-default-spread`, `-nores` without CPU/mem)."""
    if corpus is None:
        return None
    return replace(corpus, label=f"{kind}-{setup.tasks}-{setup.policy}" + ("" if setup.resources else "-nores"))


def _names(text: str) -> list[str]:
    """A comma list."""
    return [name for name in text.split(",") if name]


def _progress(kind: str, setup: Setup, result: dict[str, Any]) -> None:
    """One line on stderr per replay done."""
    print(f"  [{kind} {setup.tasks}: {setup.label} in {result['cpu_seconds']:.0f} s CPU]", file=sys.stderr, flush=True)


def combine(paths: Sequence[Path]) -> dict[str, Any]:
    """Earlier runs' reports as one (e.g. inflation and timeline run side by side as two processes)."""
    reports = [json.loads(path.read_text()) for path in paths]
    merged = dict(reports[0])
    for key in ("commands", "load_average"):
        merged[key] = [item for report in reports for item in report[key]]
    for kind in ("inflation", "timeline"):
        merged[kind] = {}
        for report in reports:
            for name, results in report[kind].items():
                merged[kind].setdefault(name, []).extend(results)
    merged["tasks"] = {name: count for report in reports for name, count in report["tasks"].items()}
    return merged


def finish(report: dict[str, Any], json_path: Path, plot_path: Path) -> None:
    """Tables, targets and planning time printed; the JSON and the plot written."""
    for name, results in report["inflation"].items():
        print_inflation(name, results, report["tasks"][name], report["nodes"])
    for name, results in report["timeline"].items():
        print_timeline(name, results)
    plan_times = [
        seconds
        for kind in ("inflation", "timeline")
        for results in report[kind].values()
        for result in results
        if result["controller"]
        for seconds in result["controller"]["plan_seconds_all"]
    ]
    planning = spread_of(plan_times)
    report["planning_seconds"] = planning
    report["targets"] = {
        "inflation": [v for results in report["inflation"].values() for v in inflation_targets(results)],
        "timeline": [v for results in report["timeline"].values() for v in timeline_targets(results)],
        "planning_under_1s": planning["max"] < 1.0,
    }
    print("\ntargets")
    for v in report["targets"]["inflation"]:
        print(
            f"  inflation {v['tasks']:<11} {v['label']:<34} unplaced at 100% {pct(v['unplaced'])} vs best alone "
            f"({v['best_alone']}) {pct(v['best_alone_unplaced'])} / 4: {verdict(v['unplaced_ok'])};  "
            f"evictions/task {v['evictions_per_placed']:.3f} <= 0.05: {verdict(v['evictions_ok'])}"
        )
    for v in report["targets"]["timeline"]:
        print(
            f"  timeline  {v['tasks']:<11} {v['label']:<34} GPU-h Pending {v['pending_gpu_hours']:.1f} vs best alone "
            f"({v['best_alone']}) {v['best_alone_gpu_hours']:.1f} / 2: {verdict(v['pending_ok'])};  "
            f"evictions/task {v['evictions_per_placed']:.3f} <= 0.05: {verdict(v['evictions_ok'])}"
        )
    print(
        f"  planning at {report['nodes']} nodes, {planning['runs']} runs: median {planning['median']:.2f} s, "
        f"p95 {planning['p95']:.2f} s, max {planning['max']:.2f} s CPU; under 1 s: "
        f"{verdict(report['targets']['planning_under_1s'])}"
    )
    replays = [r for kind in ("inflation", "timeline") for results in report[kind].values() for r in results]
    report["cpu_seconds"] = sum(r["cpu_seconds"] for r in replays)
    print(f"  ({report['cpu_seconds']:.0f} s CPU in all replays; load average at the start {report['load_average']})")
    json_path.write_text(json.dumps(report, indent=1) + "\n")
    plot(report, plot_path)
    print(f"  wrote {json_path} and {plot_path}")


def markdown(
    report: dict[str, Any],
    before: dict[str, Any] | None = None,
    more: dict[str, Any] | None = None,
    budgets: Sequence[dict[str, Any]] = (),
) -> list[str]:
    """The `docs/performance.md` section (bench/plot.py writes it from docs/performance-trace.json, the earlier
    report it replaced, `before`, a run with more planner runs, `more`, and runs with larger move budgets,
    `budgets`, when there are)."""
    policy = report["controller_policy"]
    lines = [
        "## Measured on a real trace (Alibaba GPU trace v2023)",
        "",
        "![trace replay](performance-trace.png)",
        "",
        f'`bench/trace_replay.py` replays the trace of Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing '
        "Workloads with Fragmentation Gradient Descent\" (USENIX ATC '23; `cluster-trace-gpu-v2023` in "
        f"github.com/alibaba/clusterdata) in the pure core, in-process: {report['nodes']:,} nodes, {report['gpus']:,} "
        "cards registered as HAMi registers them (10 slots, 100 cores, `NVIDIA-<model>`). A task sharing a card "
        "(`num_gpu` 1, `gpu_milli` < 1000) asks `nvidia.com/gpumem-percentage` and `nvidia.com/gpucores` of "
        "gpu_milli/10; whole-card and multi-card tasks ask `nvidia.com/gpu` alone (exclusive, as HAMi's webhook makes "
        "them); `gpu_spec` becomes `nvidia.com/use-gputype`. A task fits a node only if its CPU and memory fit the "
        "node's remainder (kube-scheduler's NodeResourcesFit) and HAMi's own fit (`fit.fit_pod`, cards ordered by the "
        "GPU policy) finds its cards; among those nodes HAMi's node policy picks by its node score "
        "(`pkg/scheduler/policy/node_policy.go`: highest for binpack, lowest for spread). `binpack` and `spread` "
        "below set both HAMi's node and GPU policy; `node spread, GPU binpack` is the pair its two flags also make "
        "(`--node-scheduler-policy spread --gpu-scheduler-policy binpack`). The controller adds the rescue trigger "
        "with the existing planner "
        f"(`plan(snapshot, FitGoal(pod), Limits(max_moves={policy['moves_per_run']}, "
        f"max_moves_per_node={policy['moves_per_node']}))`, {policy['moves_per_hour']} moves an hour, a moved task "
        "not moved again within an hour, or never in inflation); each move is an eviction and the moved task is "
        "re-placed at once on the planner's target cards; the rescued task is placed on the plan's target. "
        "`defrag-core`'s `decide_run` did not exist when this was wired, so the planner is called directly.",
        "",
    ]
    for name, results in report["inflation"].items():
        lines += [
            f"**Workload inflation, `{name}` list** ({report['tasks'][name]:,} tasks, drawn in list order and again "
            "from the top, no departures, until the GPUs asked reach the capacity). Each cell: GPU capacity "
            "unallocated / asked GPUs left unplaced / evictions per placed task.",
            "",
            "| asked | " + " | ".join(r["label"] for r in results) + " |",
            "| --- |" + " --- |" * len(results),
        ]
        if name != "default":
            rows = [(1.0, [r["final"] for r in results])]
        else:
            rows = [
                (results[0]["rows"][k]["load"], [r["rows"][k] if k < len(r["rows"]) else r["final"] for r in results])
                for k in range(len(results[0]["rows"]))
            ]
        for load, cells in rows:
            lines.append(
                f"| {load:.0%} | "
                + " | ".join(
                    f"{pct(c['unallocated'])} / {pct(c['unplaced'])} / {c['evictions_per_placed']:.3f}" for c in cells
                )
                + " |"
            )
        lines.append("")
    for name, results in report["timeline"].items():
        first = results[0]
        lines += [
            f"**Timeline, `{name}` list**: the trace's arrivals compressed {first['compress']:g}x and the list played "
            f"{first['rounds']} times back to back ({first['gpu_tasks']:,} GPU tasks); each task runs its own duration "
            "once placed. Allocated: the share of GPU capacity allocated, averaged over the middle 80% of arrivals.",
            "",
            "| setup | allocated | tasks that waited | p50 pending | p95 pending | GPU-hours Pending | evictions per "
            "placed task | planner runs |",
            "| --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for r in results:
            runs = r["controller"]["plan_seconds"]["runs"] if r["controller"] else 0
            lines.append(
                f"| {r['label']} | {pct(r['allocated_share'])} | {r['waited']:,} | {r['pending_p50_s']:.0f} s | "
                f"{r['pending_p95_s']:.0f} s | {r['pending_gpu_hours']:,.1f} | {r['evictions_per_placed']:.4f} | "
                f"{runs} |"
            )
        lines.append("")
    lines += [
        "**What the controller did** (per replay with it: planner runs for rescues, tasks rescued, moves, plans "
        "the replay's guard refused for overfilling a node's CPU or memory (a planner bug), rescues skipped for "
        "the replay's planner budget, `plan` CPU median / max; room lost: rescues whose task the scheduler's retry "
        "did not place, the room taken by arrivals meanwhile / by older Pending tasks at the retry, `-` where the "
        "replay places the rescued task at once):",
        "",
        "| replay | setup | planner runs | rescued | moves | refused | skipped | plan median | plan max | room lost |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for kind in ("inflation", "timeline"):
        for name, results in report[kind].items():
            for r in results:
                c = r["controller"]
                if not c:
                    continue
                lines.append(
                    f"| {kind} `{name}` | {r['label']} | {c['rescue_runs']} | {c['rescued']} | {c['moves']} | "
                    f"{c['refused_resources']} | {c['skipped_plan_budget']} | {c['plan_seconds']['median']:.2f} s | "
                    f"{c['plan_seconds']['max']:.2f} s | {_room_lost(r)} |"
                )
    lines += ["", *failures(report), *causes(report)]
    planning = report["planning_seconds"]
    lines += ["**Targets**", ""]
    for v in report["targets"]["inflation"]:
        lines.append(
            f"- inflation `{v['tasks']}`, {v['label']}: asked GPUs unplaced at 100% {pct(v['unplaced'])}, target <= "
            f"{pct(v['best_alone_unplaced'] / 4)} (a quarter of {v['best_alone']} alone): "
            f"**{verdict(v['unplaced_ok'])}**; evictions per placed task {v['evictions_per_placed']:.3f} <= 0.05: "
            f"**{verdict(v['evictions_ok'])}**"
        )
    for v in report["targets"]["timeline"]:
        lines.append(
            f"- timeline `{v['tasks']}`, {v['label']}: {v['pending_gpu_hours']:,.1f} GPU-hours Pending, target <= "
            f"{v['best_alone_gpu_hours'] / 2:,.1f} (half of {v['best_alone']} alone): **{verdict(v['pending_ok'])}**; "
            f"evictions per placed task {v['evictions_per_placed']:.4f} <= 0.05: **{verdict(v['evictions_ok'])}**"
        )
    lines += [
        f"- planning, {planning['runs']} controller runs at {report['nodes']:,} nodes (CPU seconds of `plan`): median "
        f"{planning['median']:.2f} s, p95 {planning['p95']:.2f} s, max {planning['max']:.2f} s; every run under 1 s: "
        f"**{verdict(report['targets']['planning_under_1s'])}**",
        "",
        *(before_after(report, before) if before else []),
        *(more_runs(more) if more else []),
        *(larger_budgets(budgets) if budgets else []),
        "Reproduce (the full run took "
        f"{report['cpu_seconds'] / 60:.0f} min of CPU; the replay commands ran side by side, then were combined):",
        "",
        "```sh",
        ".venv/bin/pip install -e '.[test,bench]'",
        *[
            (".venv/bin/" if "--combine" in command else "nice -n 10 .venv/bin/") + command
            for command in report["commands"]
        ],
        ".venv/bin/python bench/plot.py   # this page and the plot",
        "```",
        "",
        *notes(report),
    ]
    return lines


def fgd_section(report: dict[str, Any]) -> list[str]:
    """The `docs/performance.md` subsection "FGD beside HAMi's policies" (bench/plot.py writes it from
    docs/performance-trace-fgd.json): each list at 100% asked under HAMi's policies and FGD, the default list step by
    step, what FGD cost, and how it is built here."""
    commands = [c for c in report["commands"] if "--combine" not in c]
    alone = {
        r["setup"]["policy"]: r["label"] for results in report["inflation"].values() for r in hami_alone(results, True)
    }
    lines = [
        "### FGD beside HAMi's policies",
        "",
        "![trace replay with FGD](performance-trace-fgd.png)",
        "",
        "The paper whose trace this is proposes its own placement policy, fragmentation gradient descent (FGD); "
        "`bench/fgd.py` implements it from the paper's description and the replay runs it beside HAMi's "
        f"{_listed(list(alone.values()))} as a "
        f"reference (`--policies {','.join([*alone, FGD])}`): **{FGD_LABEL} is not HAMi** (HAMi has no such "
        "policy) and runs alone, without the controller. Same cluster, lists and node CPU and memory as above, on "
        f"{report['nodes']:,} nodes and {report['gpus']:,} cards; the controller's targets still compare with HAMi's "
        "best policy alone, never with FGD. At 100% asked load (each cell a share of the GPU capacity or of the GPUs "
        "asked; CPU s: the replay's CPU seconds, planner included):",
        "",
        "| list | setup | capacity unallocated | asked GPUs unplaced | GPUs short / CPU-memory / fragmented | "
        "evictions per placed task | CPU s |",
        "| --- | --- | ---: | ---: | --- | ---: | ---: |",
    ]
    for name, results in report["inflation"].items():
        for r in results:
            final = r["final"]
            lines.append(
                f"| `{name}` | {r['label']} | {pct(final['unallocated'])} | {pct(final['unplaced'])} | "
                f"{pct(final['unplaced_capacity'])} / {pct(final['unplaced_cpu_memory'])} / "
                f"{pct(final['unplaced_fragmented'])} | {final['evictions_per_placed']:.3f} | {r['cpu_seconds']:.1f} |"
            )
    default = report["inflation"].get("default", [])
    if default:
        lines += [
            "",
            "The `default` list as the asked load grows (asked GPUs unplaced):",
            "",
            "| asked | " + " | ".join(r["label"] for r in default) + " |",
            "| --- |" + " ---: |" * len(default),
        ]
        for k in range(len(default[0]["rows"])):
            cells = [r["rows"][k] if k < len(r["rows"]) else r["final"] for r in default]
            lines.append(
                f"| {default[0]['rows'][k]['load']:.0%} | " + " | ".join(pct(c["unplaced"]) for c in cells) + " |"
            )
    lines += ["", *fgd_reading(report), *fgd_notes(report)]
    lines += [
        "Reproduce (the box's load average at the start: "
        + ", ".join(f"{load:.1f}" for load in report["load_average"])
        + f"; report `docs/performance-trace-fgd.json`, {report['cpu_seconds'] / 60:.0f} min of CPU in all):",
        "",
        "```sh",
        *[f"nice -n 19 .venv/bin/{command}" for command in commands],
        "# then its --json and --plot as docs/performance-trace-fgd.json and docs/performance-trace-fgd.png",
        ".venv/bin/python bench/plot.py   # this subsection",
        "```",
        "",
    ]
    return lines


def fgd_reading(report: dict[str, Any]) -> list[str]:
    """FGD against HAMi's best policy alone, list by list, with its cost, from the report's numbers."""
    lines = ["How to read them:", ""]
    for name, results in report["inflation"].items():
        fgd = next((r for r in results if r["setup"]["policy"] == FGD), None)
        alone = hami_alone(results, True)
        if fgd is None or not alone:
            continue
        best = min(alone, key=lambda r: r["final"]["unplaced"])
        ours, theirs = fgd["final"]["unplaced"], best["final"]["unplaced"]
        change = _relative(ours, theirs)
        summary = fgd["fgd"]
        hami_seconds = ", ".join(f"{r['label']} {r['cpu_seconds']:.1f} s" for r in alone)
        lines.append(
            f"- `{name}`: FGD leaves {pct(ours)} of the asked GPUs unplaced, HAMi's best alone ({best['label']}) "
            f"{pct(theirs)}: {change}; the fragmented share {pct(fgd['final']['unplaced_fragmented'])} against "
            f"{pct(best['final']['unplaced_fragmented'])}. FGD's replay took {fgd['cpu_seconds']:.1f} s of CPU "
            f"({hami_seconds}); its workload: {summary['classes']} classes covering {pct(summary['covered'])} of the "
            f"list's {summary['gpu_tasks']:,} GPU tasks; HAMi's fit refused {summary['refused_by_hami']} of its "
            "card choices."
        )
    return [*lines, ""]


def _listed(names: list[str]) -> str:
    """`a`, `a and b`, `a, b and c`: names as a sentence lists them."""
    return " and ".join(filter(None, (", ".join(names[:-1]), *names[-1:])))


def _relative(ours: float, theirs: float) -> str:
    """`12.5% fewer` or `3.0% more` than `theirs`; `as many` when equal (none left by either included)."""
    if ours == theirs:
        return "as many"
    if not theirs:
        return "more (none left by HAMi)"
    return f"{1 - ours / theirs:.1%} fewer" if ours < theirs else f"{ours / theirs - 1:.1%} more"


def fgd_notes(report: dict[str, Any]) -> list[str]:
    """Which description of FGD the replay follows, and where it departs from the paper's own runs."""
    del report
    return [
        "Which description of FGD this follows (Weng et al., ATC '23, section 4, checked against the authors' "
        "simulator, github.com/hkust-adsl/kubernetes-scheduler-simulator, `pkg/utils/frag.go` and "
        "`pkg/simulator/plugin/fgd_score.go`; the code here is written anew on the replay's card model):",
        "",
        "- A card's free share is read as HAMi counts the card: its *free percent* is the largest share a new task "
        "could still take there (a free slot, that many cores, `devmem * percent // 100` MiB), so a card with its "
        "10 slots taken has nothing free; checked against `core.fit.fit` for every percentage in the unit tests.",
        "- The fragmentation of node n for task class m, F_n(m): every free percent on the node when m cannot run "
        "there (its model not accepted, its CPU or memory over the node's remainder, or fewer cards holding its "
        "per-card share than it asks, as the simulator's `CanNodeHostPodOnGpuMemory` tests; for a share this is the "
        "same sum as below, for k whole cards it counts the empty cards too when fewer than k are empty), else "
        "the free percent of the cards that cannot hold its share (a share of d: cards with less than d free; whole "
        "cards: the partly used ones).",
        "- The target workload M is the replayed list itself: its GPU tasks grouped into classes by per-card share "
        "(gpu_milli as HAMi's percent, or whole cards), card count, CPU, memory and accepted models, weighted by "
        "task count (p_m), keeping the most popular classes that cover 95% of the GPU tasks (`--fgd-coverage`). The "
        "simulator groups the same way without memory (its model counts none) and keeps 60% by default. Tasks "
        "without cards are left out of M: every free GPU is their fragment wherever they run, so they add the GPU "
        "a placement takes to every choice's rise alike (a card's last slot aside). They are placed by FGD's "
        "measure too (their CPU and memory can leave classes unable to run), as the simulator scores them.",
        "- FGD places a task on the node and cards that raise F_n(M) = sum_m p_m F_n(m) the least, among the nodes "
        "whose CPU and memory hold it and cards that hold it; ties by the replay's fixed node order (HAMi's ties "
        "use the same), then card order. The simulator turns the rise into a 0-100 node score through a sigmoid "
        "and lets kube-scheduler break ties at random; here the rise is compared exactly (integers). The chosen "
        "cards are checked by HAMi's own fit on exactly those cards (`Cluster.hami_fit_on`); on a refusal the "
        "next best is taken (counted in the bullets above).",
        "- Cost: a naive score walks nodes x cards x classes per task. A node's best cards per task shape are "
        "remembered until the node changes, so a placement re-scores only the nodes changed since a task of its "
        "shape was last placed; F_n(M) is remembered per card model by the node's sorted free percents and its "
        "CPU and memory left (nodes alike share it); a share is scored once per distinct (free percent, slots "
        "left) card, whole cards once per node; only the nodes that may fit (`may_fit_nodes`) are scored.",
        "- The paper samples tasks at random for inflation and runs its own cluster model (CPU and GPU only, the "
        "simulator's share of a card by gpu_milli); here the list is drawn in order, memory counts, and HAMi's "
        "slots, cores and memory per card decide what fits, so the figures are this model's, not the paper's.",
        "",
    ]


def failures(report: dict[str, Any]) -> list[str]:
    """Why rescues did not happen: the trigger not firing, and the planner's runs that found no plan."""
    lines = [
        "**Why rescues failed** (per replay with the controller: rescues not planned because the cards of the task's "
        "models have fewer GPUs free in all than it asks, or because no node of its models has its CPU and memory "
        "free (kube-scheduler refuses every node before HAMi's filter, so no HAMi fit reason, no trigger); planner "
        "runs that found no plan within the run's moves but would within the policy's bound on a plan "
        '(`maxMovesPerPlan`, as `decide_run` checks to say "over budget"), and that found none at all, for a task '
        "sharing one card and for a task of whole cards; runs the search bound (`Limits.max_steps`) stopped):",
        "",
        "| replay | setup | GPUs short in all | CPU/memory nowhere | over the run's budget | no plan, share | "
        "no plan, whole cards | search bound |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for kind in ("inflation", "timeline"):
        for name, results in report[kind].items():
            for r in results:
                c = r["controller"]
                if c and "no_plan_budget" in c:
                    lines.append(
                        f"| {kind} `{name}` | {r['label']} | {c['skipped_no_room']} | {c['skipped_cpu_memory']} | "
                        f"{c['no_plan_budget']} | {c['no_plan_share']} | {c['no_plan_multi']} | {c['search_stopped']} |"
                    )
    return [*lines, ""]


def causes(report: dict[str, Any]) -> list[str]:
    """Why the asked GPUs left unplaced at 100% asked load stayed so, as shares of the GPUs asked."""
    lines = [
        "**Why asked GPUs stayed unplaced at 100% asked load** (share of the GPUs asked, by the state of the cluster "
        "when the task was drawn: *GPUs short*: the cards of its models had fewer GPUs free in all than it asked, "
        "no placement whatever could place it; *CPU/memory*: the nodes whose CPU and memory held it had fewer GPUs "
        "free in all than it asked, the room was on nodes kube-scheduler refuses and moving GPU tasks' cards cannot "
        "give it; *fragmented*: enough GPUs free on such nodes in all, but split across cards and nodes):",
        "",
        "| list | setup | unplaced | GPUs short | CPU/memory | fragmented |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, results in report["inflation"].items():
        for r in results:
            final = r["final"]
            if "unplaced_capacity" in final:
                lines.append(
                    f"| `{name}` | {r['label']} | {pct(final['unplaced'])} | {pct(final['unplaced_capacity'])} | "
                    f"{pct(final['unplaced_cpu_memory'])} | {pct(final['unplaced_fragmented'])} |"
                )
    return [*lines, ""]


def before_after(report: dict[str, Any], before: dict[str, Any]) -> list[str]:
    """The figures of an earlier report (`before`) beside this one's, for each replay (HAMi alone too: the baseline
    the targets are a share of)."""
    lines = [
        "**Before and after** (before: the report this section showed until it was made again, by "
        + "; ".join(f"`{command}`" for command in before["commands"] if "--combine" not in command)
        + "; after: above, by the commands below):",
        "",
        "| replay | setup | before | after |",
        "| --- | --- | --- | --- |",
    ]
    for kind in ("inflation", "timeline"):
        for name, results in report[kind].items():
            earlier = {r["label"]: r for r in before.get(kind, {}).get(name, [])}
            for r in results:
                old = earlier.get(r["label"])
                if old is None:
                    continue
                lines.append(f"| {kind} `{name}` | {r['label']} | {_figures(kind, old)} | {_figures(kind, r)} |")
    old_plan, new_plan = before["planning_seconds"], report["planning_seconds"]
    lines += [
        f"| planning | all controller runs | {_planning(old_plan)} | {_planning(new_plan)} |",
        "",
    ]
    return lines


def more_runs(report: dict[str, Any]) -> list[str]:
    """The replays again with more planner runs allowed (per 1% of capacity asked, per controller tick): the
    inflation figures at 100% asked and the timeline's, each beside its target."""
    commands = "; ".join(f"`nice -n 10 .venv/bin/{c}`" for c in report["commands"] if "--combine" not in c)
    lines = [
        "**With more planner runs** (now that a run costs about a second at most on this loaded box, not 15 s; "
        f"{commands}{'; ' + report['note'] if report.get('note') else ''}). Inflation at 100% asked load (target: "
        "unplaced at most a quarter of HAMi's best policy alone, at most 0.05 evictions per placed task):",
        "",
        "| list | setup | unplaced | GPUs short / CPU-memory / fragmented | evictions per placed task | planner runs "
        "| rescued | over budget / no plan | plan median / p95 / max | target |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, results in report["inflation"].items():
        verdicts = {v["label"]: v for v in inflation_targets(results)}
        for r in results:
            final, c = r["final"], r["controller"]
            row = (
                f"| `{name}` | {r['label']} | {pct(final['unplaced'])} | {pct(final['unplaced_capacity'])} / "
                f"{pct(final['unplaced_cpu_memory'])} / {pct(final['unplaced_fragmented'])} | "
                f"{final['evictions_per_placed']:.3f} | "
            )
            lines.append(row + _controller_cells(c, verdicts.get(r["label"])))
    for name, results in report["timeline"].items():
        verdicts = {v["label"]: v for v in timeline_targets(results)}
        lines += [
            "",
            f"Timeline, `{name}` list, as above (target: GPU-hours Pending at most half of HAMi's best policy alone, "
            "at most 0.05 evictions per placed task):",
            "",
            "| setup | allocated | p50 / p95 pending | GPU-hours Pending | evictions per placed task | planner runs "
            "| rescued | over budget / no plan | plan median / p95 / max | target |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for r in results:
            c = r["controller"]
            row = (
                f"| {r['label']} | {pct(r['allocated_share'])} | {r['pending_p50_s']:.0f} / {r['pending_p95_s']:.0f} "
                f"s | {r['pending_gpu_hours']:,.1f} | {r['evictions_per_placed']:.4f} | "
            )
            if not c:
                lines.append(row + "- | - | - | - | - |")
                continue
            v = verdicts[r["label"]]
            lines.append(
                row
                + _runs(c)
                + f" | <= {v['best_alone_gpu_hours'] / 2:,.1f}: **{verdict(v['pending_ok'] and v['evictions_ok'])}** |"
            )
        for r in results:
            c = r["controller"]
            if c and "no_plan_budget" in c:
                lines += [
                    "",
                    f"Why {r['label']} still misses: of its {c['rescue_runs']} planner runs, "
                    f"{c['no_plan_multi']} found no plan for a task of whole cards, {c['no_plan_share']} for a share, "
                    f"{c['no_plan_budget']} only beyond the run's moves, {c['search_stopped']} stopped at the search "
                    "bound; "
                    f"{c['skipped_cpu_memory']} rescues were not planned since no node had the task's CPU and memory. "
                    "Three times the runs of the main table rescued few more tasks: the waiting tasks mostly ask whole "
                    "cards, which a run of at most 4 moves rarely frees on one node (not measured for the timeline "
                    "with more moves; in inflation 16 moves a run rescued no more than 4, see the budget table below).",
                ]
    return [*lines, ""]


def larger_budgets(reports: Sequence[dict[str, Any]]) -> list[str]:
    """Inflation at 100% asked again with the controller's move budgets raised (one report a budget): what an
    operator's budget buys in GPUs placed, evictions and planning time, each beside the target."""
    commands = "; ".join(f"`nice -n 10 .venv/bin/{c}`" for r in reports for c in r["commands"])
    loads = ", ".join(f"{load:.1f}" for r in reports for load in r["load_average"])
    sizes = sorted({(r["nodes"], r["gpus"]) for r in reports})
    where = ", ".join(f"{nodes:,} nodes and {gpus:,} cards" for nodes, gpus in sizes)
    notes = "; ".join(r["note"] for r in reports if r.get("note"))
    lines = [
        "**With larger move budgets** (the run's moves `movesPerRun`, moves off one node `movesPerNode` and the "
        f"policy's `maxMovesPerPlan` raised together, on {where}; {commands}; the box's load average at the start: "
        f"{loads}{'; ' + notes if notes else ''}). Inflation at 100% asked load:",
        "",
        "| nodes | list | setup | moves per run / node / plan | rescues per 1% | unplaced | evictions per placed task "
        "| planner runs | rescued | over budget / no plan | plan median / p95 / max | target |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    shown: set[tuple[int, str, str]] = set()
    for report in reports:
        policy = report["controller_policy"]
        budget = f"{policy['moves_per_run']} / {policy['moves_per_node']} / {policy['max_moves_per_plan']}"
        if policy.get("keep_whole_node"):
            budget += f", keep-room {policy['keep_whole_node']} whole cards on one node"
        steps = re.search(r"--rescues-per-step (\d+)", " ".join(report["commands"]))
        per_step = steps.group(1) if steps else "1"
        for name, results in report["inflation"].items():
            verdicts = {v["label"]: v for v in inflation_targets(results)}
            for r in results:
                final, c = r["final"], r["controller"]
                if not c and (report["nodes"], name, r["label"]) in shown:
                    continue
                shown.add((report["nodes"], name, r["label"]))
                row = (
                    f"| {report['nodes']:,} | `{name}` | {r['label']} | {budget if c else '-'} | "
                    f"{per_step if c else '-'} | "
                    f"{pct(final['unplaced'])} | {final['evictions_per_placed']:.3f} | "
                )
                lines.append(row + _controller_cells(c, verdicts.get(r["label"])))
    return [*lines, ""]


def _controller_cells(controller: dict[str, Any] | None, target: dict[str, Any] | None) -> str:
    """A replay's controller columns and its target's verdict, or dashes for HAMi alone."""
    if not controller or target is None:
        return "- | - | - | - | - |"
    met = verdict(target["unplaced_ok"] and target["evictions_ok"])
    return _runs(controller) + f" | <= {pct(target['best_alone_unplaced'] / 4)}: **{met}** |"


def _runs(c: dict[str, Any]) -> str:
    """A controller's runs, rescues, failures and planning time, as table cells."""
    plans = c["plan_seconds"]
    failed = c["no_plan_share"] + c["no_plan_multi"] + c["search_stopped"]
    return (
        f"{c['rescue_runs']} | {c['rescued']} | {c.get('no_plan_budget', 'not counted')} / {failed} | "
        f"{plans['median']:.2f} / "
        f"{plans['p95']:.2f} / {plans['max']:.2f} s"
    )


def _figures(kind: str, result: dict[str, Any]) -> str:
    """One replay's headline figures for the before-and-after table (and its controller's, when it has one)."""
    if kind == "inflation":
        final = result["final"]
        head = f"unplaced at 100% {pct(final['unplaced'])}, {final['evictions_per_placed']:.3f} evictions/task"
    else:
        head = f"{result['pending_gpu_hours']:,.0f} GPU-h Pending, {result['evictions_per_placed']:.4f} evictions/task"
    c = result["controller"]
    if not c:
        return head
    spread = f"plan median {c['plan_seconds']['median']:.2f} s, max {c['plan_seconds']['max']:.2f} s"
    return f"{head}, {c['rescue_runs']} runs, {c['rescued']} rescued, {spread}"


def _planning(planning: dict[str, Any]) -> str:
    """Median / p95 / max of the planner's CPU seconds."""
    return (
        f"{planning['runs']} runs: median {planning['median']:.2f} s, p95 {planning['p95']:.2f} s, "
        f"max {planning['max']:.2f} s"
    )


def eviction_cap(report: dict[str, Any]) -> str:
    """The sentence on the inflation replays' eviction cap (`--evictions-per-placed`), when their commands set one."""
    caps = sorted({float(c) for c in re.findall(r"--evictions-per-placed (\S+)", " ".join(report["commands"]))})
    if not caps:
        return ""
    cap = " and ".join(f"{c:g}" for c in caps)
    return (
        " Inflation has no clock for the policy's hourly budget, so there each rescue gets at most the moves that "
        f"keep the evictions within {cap} of the tasks placed so far (`--evictions-per-placed`, the issue's bound); "
        "a rescue that needs more finds no plan within them."
    )


def fourth_pair(report: dict[str, Any]) -> list[str]:
    """Where HAMi's fourth pair (node spread, GPU binpack) is HAMi's best alone, and so each target's base, and where
    another pair is, from the report's own replays alone (none when the pair was not replayed)."""
    best: list[str] = []
    beaten: list[str] = []

    def compare(where: str, alone: list[dict[str, Any]], figure: Callable[[dict[str, Any]], float], unit: str) -> None:
        """Sort one list's (or the timeline's) replays alone into `best` or `beaten`."""
        pair = next((r for r in alone if r["setup"]["policy"] == SPREAD_BINPACK), None)
        others = [r for r in alone if r is not pair]
        if pair is None or not others:
            return
        other = min(others, key=figure)
        ours, theirs = unit.format(figure(pair)), f"{other['setup']['policy']} {unit.format(figure(other))}"
        if figure(pair) <= figure(other):
            best.append(f"{where} {ours} ({theirs})")
        else:
            beaten.append(f"{where} ({theirs}, the pair {ours})")

    for name, results in report["inflation"].items():
        for resources in (True, False):
            where = f"`{name}`" + ("" if resources else " without CPU and memory")
            compare(where, hami_alone(results, resources), lambda r: 100 * r["final"]["unplaced"], "{:.1f}%")
    for name, results in report["timeline"].items():
        where = f"the `{name}` timeline"
        compare(where, hami_alone(results, True), lambda r: r["pending_gpu_hours"], "{:,.1f} GPU-hours Pending")
    if not best and not beaten:
        return []
    return [
        f"- HAMi's fourth pair, node spread with GPU binpack (`--policies {SPREAD_BINPACK}`), is HAMi's best alone "
        "(asked GPUs unplaced at 100% asked, GPU-hours Pending in a timeline) on "
        + (", ".join(best) or "no list")
        + ": there the targets are measured against it. Another pair is best alone on "
        + (", ".join(beaten) or "no list")
        + "."
    ]


def notes(report: dict[str, Any]) -> list[str]:
    """What the replay leaves out and how it is bounded, with the run's own counts."""
    stats = [
        r["controller"]
        for kind in ("inflation", "timeline")
        for results in report[kind].values()
        for r in results
        if r["controller"]
    ]
    refused = sum(s["refused_resources"] for s in stats)
    into_freed = sum(s.get("rescued_into_freed", 0) for s in stats)
    moves_into_freed = sum(s.get("moves_into_freed", 0) for s in stats)
    budget = sum(s["skipped_plan_budget"] for s in stats)
    rescued = sum(s["rescued"] for s in stats)
    runs = sum(s["rescue_runs"] for s in stats)
    lines = [*reading(report), "What the model leaves out, and how the runs are bounded:"]
    lines += [
        "",
        "- Card memory: V100M16, P100 and T4 16 GiB, V100M32 32 GiB, A10 24 GiB as sold; G1-G3 are undisclosed (16, "
        "32 and 48 GiB chosen). Every task asks a percentage, so no figure depends on these.",
        "- HAMi's node score ties (an empty cluster, equal nodes) break in a fixed random order; HAMi's own order is "
        "its goroutines'. A task without cards is placed by kube-scheduler's LeastAllocated alone (its other scores "
        "are left out); a GPU task goes where HAMi's filter says, as HAMi's extender returns one node.",
        "- HAMi's default pair (node binpack, GPU spread; `--policies default`), measured apart (`--skip-timeline "
        "--files default,gpushare40,multigpu20,gpuspec33 --no-resources-files '' --policies binpack,spread,default "
        "--alone`; the timeline as in the commands below with `--policies binpack,spread,default --alone`, then "
        "`--policies default`; without CPU and memory `--files default --no-resources-files default --policies "
        "default --alone`), leaves 15.0% / 15.9% / 15.1% / 18.0% of the asked GPUs unplaced at 100% asked alone "
        "(`default` / `gpushare40` / `multigpu20` / `gpuspec33`; 4.1% on `default` without CPU and memory): never "
        "fewer than the better of binpack/binpack and spread/spread (13.6% / 15.4% / 13.9% / 14.9%; 4.1%), so the "
        "inflation targets keep their base. In the timeline it is HAMi's best alone by 0.4% (9,014.7 GPU-hours "
        "Pending against binpack's 9,054.5), so that target's half would be 4,507 GPU-hours instead of 4,527, and "
        "default + controller reaches 8,100.2 (0.003 evictions per placed task): no verdict changes.",
        *fourth_pair(report),
        "- Every task may move (a ReplicaSet's pod, no PodDisruptionBudget, one priority): the trace does not say "
        "which tasks are Jobs or services. A move costs nothing but the eviction: no restart time, no lost work, "
        "the moved task keeps its departure time. In inflation the rescued task is placed on the plan's target at "
        "once (no clock: room lost is 0 by construction). In the timeline the scheduler retries it `--rescue-settle` "
        "seconds after the moves (arrivals and departures' retries go on meanwhile, then the freed nodes retry "
        "their Pending tasks oldest first), and the room is kept for it `--reserve-for` seconds as the server's "
        "`rescue.reserveFor` keeps it: tasks arriving meanwhile are kept off the kept cards, tasks Pending from "
        "before are not (the room lost column counts the rescues whose task did not get the room).",
        "- The planner counts node CPU and memory as kube-scheduler's NodeResourcesFit does: the controller hands it "
        "each node's remainder (`PlanNode.room`) and each task's ask (`PlanPod.needs`), and it keeps the remainders "
        "through its moves, so a move may take the CPU an earlier move freed and a rescue may land on a node whose "
        f"CPU its moves free ({into_freed} rescues did; {moves_into_freed} moves took room an earlier move freed). "
        "The replay still checks a plan's moves against the remainders before carrying it out, as a guard: a plan "
        f"that would overfill a node is refused before anything moves ({refused} refused in all runs; any is a "
        "planner bug).",
        f"- Rescue runs: {runs} planner runs rescued {rescued} tasks in all. The planner remembers, per state of its "
        "search and per pod shape, which cards a pod fits and which pods could step aside, so a search that fails "
        "on node after node no longer walks the 6,212 cards again for each (a failed search used to cost 8-15 s "
        "here), and it stops after `Limits.max_steps` (100,000 relocations tried and cards walked by default; "
        "counted, not timed) with the plan found so far. Runs are still bounded as a controller's pass bounds "
        "them: inflation at most `--rescues-per-step` planner runs per 1% of capacity asked, a task shape whose "
        "plan failed not planned again until a move changed the cluster; timeline at most `--rescues-per-tick` "
        "runs each `--tick` seconds (the commands below), a task re-planned 600 s after a failed plan; "
        f"`--plan-budget` (a planner CPU budget per replay, a bench bound) skipped {budget} rescues."
        + eviction_cap(report),
        "- Planning time is the CPU seconds (`time.process_time`) of one `plan` call: the snapshot's State is built "
        "in it, the controller's Kubernetes reads are not. `decide_run` plans a failed rescue once more within the "
        "policy's `maxMovesPerPlan` to say whether the budget blocked it (the replay does so too, untimed, for the "
        "over-budget column), so a failed controller run can cost up to twice the figure. The box had 2 cores "
        "and other work running (load average at the start of each command: "
        f"{', '.join(f'{load:.1f}' for load in report['load_average'])}); CPU time inflates under such load, so a "
        "quiet box would show less.",
        "- Keep-room (`FreeCardsGoal`) is wired (`--keep-free-cards`) but off in these runs. One "
        "`FreeCardsGoal(10)` on the default list at 90% asked load (binpack, 7,194 tasks placed, `max_moves` 8) took "
        "156 s of CPU for 3 moves and 2 freed cards before the planner remembered its walks; now 2.9 s for the same "
        "plan without a step bound, and 0.7 s for 1 move and 1 freed card when the default bound stops it. A goal "
        "that gathers whole free cards on one node (what the multi-card tasks below lack), `FreeCardsGoal(count, "
        "on_one_node=True)`, is wired as `--keep-whole-node` and off in these runs (measured on 300 nodes above).",
        "- Workload inflation draws the list in order and again from the top (the paper samples at random). The "
        "timeline compresses arrivals only (durations as traced): one pass of the list asks ~6,100 GPUs in all, "
        "and one pass compressed 300x, 1,000x or 3,000x kept 13%, 23% or 31% of the cluster allocated under "
        "binpack (the trace is a sample of a cluster that had room), so the list is played several times back to "
        "back (3,000x and 5 rounds: 82%; 5,000x and 5 rounds: 86%); the trace's first 1% of tasks, "
        "created over its first ~10 million seconds, arrive at the start of each round. A Pending task is retried "
        "whenever a node gains room (a departure or a move), oldest first. Tasks with no times (`multigpu20`) are "
        "replayed by inflation only; the timeline runs the `default` list only, to stay within the CPU budget.",
        "- The FGD paper's own policy (fragmentation gradient descent) is replayed beside HAMi's as a reference, "
        'not HAMi (`--policies binpack,spread,fgd`): the subsection "FGD beside HAMi\'s policies" below has its '
        "figures, its cost and which description of it the replay follows.",
        "",
    ]
    return lines


def reading(report: dict[str, Any]) -> list[str]:
    """How to read the figures, with the numbers taken from the report."""
    by_label = {r["label"]: r for r in report["inflation"].get("default", [])}
    lines = ["How to read them:", ""]
    wanted = {"binpack", "binpack + controller", "binpack (no CPU/mem)", "spread", "spread + controller"}
    if wanted <= by_label.keys():
        cpu, free = by_label["binpack"]["final"], by_label["binpack (no CPU/mem)"]["final"]
        packed = by_label["binpack + controller"]["controller"]
        alone = by_label["spread"]["rows"]
        helped = by_label["spread + controller"]["rows"]
        middle = range(4, min(8, len(alone), len(helped)))
        lines += [
            f"- With node CPU and memory modelled, HAMi binpack allocates {pct(1 - cpu['unallocated'])} of the GPU "
            f"capacity at 100% asked and no more (without them: {pct(1 - free['unallocated'])}): nodes run out of "
            "CPU or memory before their cards. The nodes whose CPU and memory still hold a waiting task mostly do "
            "have its GPUs free in all (the causes table counts it as fragmented), but as slivers of cards; making "
            "room means moving a task off such a card to another node with its CPU, its memory and a card free, "
            f"which a binpacked cluster rarely has: binpack + controller rescued {packed['rescued']} tasks in "
            f"{packed['rescue_runs']} runs ({packed['search_stopped']} stopped at the search bound, "
            f"{packed['no_plan_share'] + packed['no_plan_multi']} found no plan).",
            "- Spread puts each task on the emptiest node, so soon no node keeps 8 free cards: up to 80% asked, every "
            "task HAMi spread leaves unplaced asks 8 cards (38 of them on the default list). HAMi spread "
            f"alone leaves {pct(statistics.mean(alone[k]['unplaced'] for k in middle))} of the asked GPUs unplaced "
            "at 50-80% asked load, with the controller "
            f"{pct(statistics.mean(helped[k]['unplaced'] for k in middle))}; this is where moves pay off.",
            "- Without CPU and memory, binpack's leftovers at 100% asked are slivers beside large shares (a card "
            "holding an 81% share keeps 19% free); a whole-card task needs an empty card, and emptying one needs "
            "another card with as much free as the share it holds, which no card has by then: the planner finds "
            "no plan (such a failed search cost 3-15 s before the planner remembered its walks).",
        ]
    timeline = report["timeline"].get("default", [])
    pairs = [
        (r, next((a for a in timeline if a["label"] == r["label"].replace(" + controller", "")), None))
        for r in timeline
        if r["controller"]
    ]
    for helped_run, alone_run in pairs:
        if alone_run and alone_run["pending_gpu_hours"]:
            change = 1 - helped_run["pending_gpu_hours"] / alone_run["pending_gpu_hours"]
            stats = helped_run["controller"]
            lines.append(
                f"- Timeline, {helped_run['label']}: {change:.1%} fewer GPU-hours Pending than {alone_run['label']} "
                f"alone ({pct(alone_run['allocated_share'])} allocated on average). {stats['rescue_runs']} planner "
                f"runs rescued {stats['rescued']} tasks with {stats['moves']} moves, against "
                f"{alone_run['waited']:,} tasks that waited: the bounded runs reach few of the waiting tasks; why "
                "the runs failed is in the table of failed rescues above (most waiting tasks ask whole cards or wait "
                "for CPU and memory)."
            )
    for name, results in report["inflation"].items():
        for r in results:
            stats = r["controller"]
            if stats and stats["skipped_plan_budget"]:
                lines.append(
                    f"- Inflation `{name}`, {r['label']}: its planner runs, mostly searches that found no plan, cost "
                    f"{stats['plan_seconds']['median']:.1f} s each (median), so the replay's planner budget stopped "
                    f"it after {stats['rescue_runs']} runs ({stats['skipped_plan_budget']} rescues skipped); its "
                    "figures are close to HAMi alone's for that reason too."
                )
    lines.append("")
    return lines


if __name__ == "__main__":
    main()
