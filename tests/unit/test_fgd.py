"""The FGD paper's policy as the trace replay's reference: its fragmentation measure on plain data, a card's free
percent against HAMi's own fit, and FGD's choice against a brute-force walk of every node and card set."""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence

import pytest

from bench.fgd import Measure, TaskClass, free_percent, popular_classes
from bench.trace_replay import (
    FGD,
    FGD_LABEL,
    Cluster,
    ControllerPolicy,
    Setup,
    Task,
    TraceNode,
    accepts,
    fgd_ask,
    fgd_section,
    inflation_targets,
    replay_inflation,
    replay_timeline,
    task_request,
)
from kubectl_hami_place.core.cards import Card
from kubectl_hami_place.core.fit import fit
from kubectl_hami_place.core.requests import card_request
from kubectl_hami_place.core.usage import CardUsage


def class_fragmentation(free: Sequence[int], runs_here: bool, task: TaskClass) -> int:
    """F_n(m) for one class as the paper defines it, the reference `Measure`'s grouped sum is checked against, in
    percent of a card: every free percent if the class cannot run on the node (`runs_here` False: model or CPU/memory
    refused, or too few cards hold its share), else those of the cards too small for it."""
    holding = sum(1 for f in free if f >= task.percent)
    if not runs_here or holding < task.cards:
        return sum(free)
    return sum(f for f in free if f < task.percent)


def task(name: str, num_gpu: int = 1, gpu_milli: int = 1000, **kwargs: object) -> Task:
    """A task with small CPU and memory asks unless given."""
    values: dict[str, object] = {"cpu_milli": 1000, "memory_mib": 1024, **kwargs}
    return Task(name=name, num_gpu=num_gpu, gpu_milli=gpu_milli, **values)  # type: ignore[arg-type]


def share(percent: int, weight: int = 1, cpu: int = 0, memory: int = 0, spec: tuple[str, ...] = ()) -> TaskClass:
    """A class asking a share of one card."""
    return TaskClass(percent, 1, cpu, memory, spec, weight)


def whole(cards: int, weight: int = 1, cpu: int = 0, memory: int = 0, spec: tuple[str, ...] = ()) -> TaskClass:
    """A class asking whole cards."""
    return TaskClass(100, cards, cpu, memory, spec, weight)


def test_a_class_that_runs_counts_the_cards_too_small_for_it() -> None:
    """Free percents 100, 60, 30, 0: a 50% share leaves the 30% card a fragment; a whole card both partly used ones."""
    free = (100, 60, 30, 0)
    assert class_fragmentation(free, True, share(50)) == 30
    assert class_fragmentation(free, True, share(30)) == 0
    assert class_fragmentation(free, True, whole(1)) == 90


def test_a_class_that_cannot_run_counts_every_free_percent() -> None:
    """Two whole cards on a node with one empty card, a class the node refuses (model, CPU or memory), a share no
    card holds (the same sum as its too-small cards): every free percent."""
    free = (100, 60, 30, 0)
    assert class_fragmentation(free, True, whole(2)) == 190
    assert class_fragmentation(free, False, share(50)) == 190
    assert class_fragmentation(free[1:], True, share(70)) == 90


def test_the_measure_weights_each_class_by_its_popularity() -> None:
    """F_n(M) = sum of weight x F_n(m): a class of another model and one over the node's CPU count every free
    percent; the others their too-small cards."""
    classes = (
        share(50, weight=3),
        whole(1, weight=2),
        share(20, weight=4, spec=("A10",)),
        share(10, weight=5, cpu=8000),
    )
    measure = Measure(classes, lambda spec: not spec or "T4" in spec)
    free = (100, 60, 30, 0)
    assert measure(free, 4000, 1024) == 3 * 30 + 2 * 90 + 4 * 190 + 5 * 190
    assert measure(free, 8000, 1024) == 3 * 30 + 2 * 90 + 4 * 190 + 5 * 0
    assert measure(list(reversed(free)), 8000, 1024) == measure(free, 8000, 1024)
    assert measure((0, 0), 8000, 1024) == 0


def test_popular_classes_keep_the_most_popular_covering_the_share() -> None:
    asks = [(50, 1, 0, 0, ())] * 6 + [(100, 1, 0, 0, ())] * 3 + [(20, 1, 0, 0, ("T4",))]
    kept = popular_classes(asks, coverage=0.85)
    assert [(c.percent, c.weight) for c in kept] == [(50, 6), (100, 3)]
    assert len(popular_classes(asks, coverage=1.0)) == 3
    assert [c.weight for c in popular_classes(asks, coverage=0.5)] == [6]
    assert [c.weight for c in popular_classes(asks, coverage=0.6)] == [6]
    assert [c.weight for c in popular_classes(asks, coverage=0.9)] == [6, 3]


@pytest.mark.parametrize(
    ("slots", "mem", "cores"),
    [(0, 0, 0), (1, 5000, 30), (3, 16383, 99), (2, 9830, 60), (10, 1000, 20), (9, 14745, 90), (4, 8191, 40)],
)
def test_a_card_s_free_percent_is_the_largest_share_hami_fits_on_it(slots: int, mem: int, cores: int) -> None:
    """Against HAMi's own card fit (`core.fit.fit`) for every percentage request from 1 to 100."""
    card = Card(uuid="GPU-0", index=0, count=10, devmem=16384, devcore=100, type="NVIDIA-T4", health=True)
    usage = CardUsage("GPU-0", slots, mem, cores)
    fits = [
        p
        for p in range(1, 101)
        if fit(card, usage, card_request(1, mem_percentage=p, coresreq=p) if p < 100 else card_request(1)).ok
    ]
    assert free_percent(10 - slots, 100 - cores, 16384 - mem, 16384) == (max(fits) if fits else 0)


def brute_force(cluster: Cluster, probe: Task) -> tuple[int, int, int, tuple[int, ...]] | None:
    """The least rise of F_n(M) over every node whose CPU and memory hold the task and every card set HAMi fits,
    each placed for real and measured class by class: (rise, node rank, node, cards)."""
    fgd = cluster.fgd
    assert fgd is not None

    def measured(node: int) -> int:
        free = fgd.cards(node)[0]
        kind = cluster.cards[node][0].type
        cpu, memory = cluster.free_cpu[node], cluster.free_mem[node]
        return sum(
            c.weight
            * class_fragmentation(free, accepts(c.spec, kind) and c.cpu_milli <= cpu and c.memory_mib <= memory, c)
            for c in fgd.classes
        )

    best = None
    request = task_request(probe)
    for node, cards in enumerate(cluster.cards):
        if not cluster.resources_fit(probe, node):
            continue
        sets = [()] if request is None else itertools.combinations(range(len(cards)), request.nums)
        for chosen in sets:
            if chosen and cluster.hami_fit_on(probe, node, chosen) is None:
                continue
            before = measured(node)
            cluster.put(probe, node, chosen)
            after = measured(node)
            cluster.take(probe.name)
            key = (after - before, cluster.rank[node], node, chosen)
            best = key if best is None or key < best else best
    return best


def test_fgd_places_each_task_where_a_brute_force_walk_finds_the_least_rise() -> None:
    """Forty tasks of mixed shapes, models and CPU asks on six nodes: each choice is the brute-force minimum (ties by
    the node order, then the first cards), and HAMi's fit refused none of FGD's cards."""
    rng = random.Random(7)
    trace_nodes = [
        TraceNode(f"n{i}", cpu, 262144, gpus, model)
        for i, (cpu, gpus, model) in enumerate(
            [
                (16000, 2, "T4"),
                (32000, 4, "V100M32"),
                (16000, 2, "T4"),
                (64000, 4, "V100M32"),
                (8000, 1, "T4"),
                (32000, 4, "T4"),
            ]
        )
    ]
    shapes = [(1, 250), (1, 500), (1, 700), (1, 1000), (2, 1000), (0, 0), (1, 300)]
    workload = [
        task(f"w{i}", *shapes[i % len(shapes)], cpu_milli=rng.choice((1000, 4000, 12000)), gpu_spec=spec)
        for i, spec in enumerate([(), (), ("T4",), (), ("V100M32",), (), ()] * 3)
    ]
    cluster = Cluster(trace_nodes, FGD, workload=workload, coverage=1.0)
    assert cluster.fgd is not None and cluster.fgd.classes
    placed = 0
    for i in range(40):
        probe = rng.choice(workload)
        probe = Task(f"p{i}", probe.cpu_milli, probe.memory_mib, probe.num_gpu, probe.gpu_milli, probe.gpu_spec)
        expected = brute_force(cluster, probe)
        choice = cluster.choose(probe)
        if expected is None:
            assert choice is None
            continue
        assert choice == (expected[2], expected[3]), (i, probe)
        cluster.put(probe, *choice)
        placed += 1
    assert placed >= 20
    assert cluster.fgd.summary()["refused_by_hami"] == 0


def test_fgd_puts_a_share_beside_a_share_and_keeps_empty_cards_whole() -> None:
    """A workload of whole cards and 50% shares: a 50% share goes onto the card half used, not onto an empty card
    (which a whole-card task would then miss); a third, with no half-used card left, goes onto an empty card of
    either node, whose first card in card order."""
    trace_nodes = [TraceNode("a", 64000, 262144, 2, "T4"), TraceNode("b", 64000, 262144, 2, "T4")]
    workload = [task("w", 1, 1000), task("s", 1, 500)]
    cluster = Cluster(trace_nodes, FGD, workload=workload)
    cluster.put(task("first", 1, 500), 1, (1,))
    assert cluster.choose(task("second", 1, 500)) == (1, (1,))
    cluster.put(task("second", 1, 500), 1, (1,))
    assert cluster.choose(task("third", 1, 500)) in {(0, (0,)), (1, (0,))}


def test_a_share_that_takes_a_card_s_last_slot_leaves_it_nothing_free() -> None:
    """Nine 5% shares on a card (55% free, one slot left): a tenth there leaves it 0 free, not 50, so F_n(M) falls by
    the whole 55 (no whole-card task misses a partly used card any more)."""
    cluster = Cluster([TraceNode("a", 64000, 262144, 2, "T4")], FGD, workload=[task("w", 1, 1000), task("s", 1, 500)])
    fgd = cluster.fgd
    assert fgd is not None
    for i in range(9):
        cluster.put(task(f"small{i}", 1, 50), 0, (0,))
    assert fgd.cards(0) == ((55, 100), (1, 10))
    assert fgd.on_node(task("tenth", 1, 50), 0) == (-55, (0,))
    cluster.put(task("tenth", 1, 50), 0, (0,))
    assert fgd.cards(0) == ((0, 100), (0, 10))


def test_a_node_s_scores_are_dropped_when_it_changes() -> None:
    """A score remembered for a shape is forgotten once the node's cards or CPU change (and only that node's)."""
    trace_nodes = [TraceNode("a", 64000, 262144, 2, "T4"), TraceNode("b", 64000, 262144, 2, "T4")]
    cluster = Cluster(trace_nodes, FGD, workload=[task("w", 1, 1000), task("s", 1, 500)])
    fgd = cluster.fgd
    assert fgd is not None
    probe = task("probe", 1, 500)
    assert fgd.on_node(probe, 0) is not None and fgd.on_node(probe, 1) is not None
    cluster.put(task("cpu", 0, 0, cpu_milli=64000), 0, ())
    assert probe.shape not in fgd.best[0] and probe.shape in fgd.best[1]
    assert fgd.on_node(probe, 0) is not None


def test_fgd_with_the_controller_is_refused_with_a_reason() -> None:
    with pytest.raises(ValueError, match="reference placement policy"):
        replay_inflation(
            [TraceNode("a", 64000, 262144, 2, "T4")], [task("t")], Setup("x", FGD, True), ControllerPolicy()
        )


def test_fgd_replays_beside_hami_but_the_targets_compare_with_hami_alone() -> None:
    """FGD replays in inflation and the timeline, labelled a reference; a controller's target is a quarter of HAMi's
    best policy alone even when FGD left fewer GPUs unplaced."""
    trace_nodes = [TraceNode(f"n{i}", 64000, 262144, 2, "T4") for i in range(3)]
    tasks = [
        task(f"t{i}", 1, milli, creation=10 * i, deletion=10 * i + 100)
        for i, milli in enumerate((300, 600, 300, 1000, 600, 1000, 700))
    ]
    results = [
        replay_inflation(trace_nodes, tasks, Setup("l", p, c), ControllerPolicy())
        for p, c in (("binpack", False), ("spread", False), ("spread", True), (FGD, False))
    ]
    fgd = results[-1]
    assert fgd["label"] == FGD_LABEL and fgd["fgd"]["refused_by_hami"] == 0
    assert fgd["final"]["tasks_placed"] > 0
    fgd["final"]["unplaced"] = 0.0
    (target,) = inflation_targets(results)
    assert target["best_alone"] in {"binpack", "spread"}
    assert target["best_alone_unplaced"] == min(r["final"]["unplaced"] for r in results[:2])
    timeline = replay_timeline(trace_nodes, tasks, Setup("l", FGD, False), ControllerPolicy(), compress=1.0)
    assert timeline["never_placed"] == 0 and timeline["fgd"]["refused_by_hami"] == 0


def test_fgd_reads_a_task_as_its_share_of_each_card() -> None:
    assert fgd_ask(task("s", 1, 455, cpu_milli=2000, memory_mib=512)) == (46, 1, 2000, 512)
    assert fgd_ask(task("w", 4, 1000)) == (100, 4, 1000, 1024)
    assert fgd_ask(task("c", 0, 0)) == (0, 0, 1000, 1024)


def test_the_docs_subsection_shows_fgd_as_a_reference_beside_hami_s_best() -> None:
    """The FGD subsection's rows name FGD a reference, and its reading compares FGD with HAMi's best policy alone
    even when FGD left fewer GPUs unplaced (made 0 here)."""
    trace_nodes = [TraceNode(f"n{i}", 64000, 262144, 2, "T4") for i in range(3)]
    tasks = [task(f"t{i}", 1, milli) for i, milli in enumerate((300, 600, 300, 1000, 600, 1000, 700))]
    results = [
        replay_inflation(trace_nodes, tasks, Setup("default", policy, False), ControllerPolicy())
        for policy in ("binpack", "spread", FGD)
    ]
    results[-1]["final"]["unplaced"] = 0.0
    report = {
        "nodes": 3,
        "gpus": 6,
        "commands": ["python bench/trace_replay.py --policies binpack,spread,fgd"],
        "load_average": [1.0],
        "cpu_seconds": 1.0,
        "inflation": {"default": results},
    }
    lines = fgd_section(report)
    assert lines[0] == "### FGD beside HAMi's policies"
    assert "beside HAMi's binpack and spread as a reference (`--policies binpack,spread,fgd`)" in lines[4]
    assert any(line.startswith(f"| `default` | {FGD_LABEL} | ") for line in lines)
    (reading,) = [line for line in lines if line.startswith("- `default`: FGD leaves 0.0%")]
    best = min(results[:2], key=lambda r: r["final"]["unplaced"])
    assert f"HAMi's best alone ({best['label']})" in reading
    assert "nice -n 19 .venv/bin/python bench/trace_replay.py --policies binpack,spread,fgd" in lines


def test_a_waiting_task_takes_fgd_s_cards_when_a_node_gains_room() -> None:
    """Timeline: two whole-card tasks fill a two-card node, a third waits and runs on the departure's retry."""
    tasks = [
        task("a", creation=0, deletion=100),
        task("b", creation=1, deletion=1000),
        task("c", 1, 500, creation=2, deletion=1000),
    ]
    result = replay_timeline(
        [TraceNode("n", 64000, 262144, 2, "T4")], tasks, Setup("l", FGD, False), ControllerPolicy(), compress=1.0
    )
    assert (result["waited"], result["never_placed"]) == (1, 0)
    assert result["pending_p95_s"] == pytest.approx(98.0)
