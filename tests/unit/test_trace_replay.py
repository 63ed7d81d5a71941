"""The trace replay's pure pieces: reading the trace, a task as HAMi's request, workload-inflation bookkeeping, and
HAMi's choices and the controller's moves on a tiny cluster."""

from __future__ import annotations

import json
import math
import pickle
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from bench.trace_replay import (
    DEFAULT,
    FGD,
    MIB,
    NODE_PODS,
    SPREAD_BINPACK,
    Cluster,
    Controller,
    ControllerPolicy,
    InflationLedger,
    Setup,
    Task,
    TraceNode,
    arrivals,
    before_after,
    combine,
    controlled_runs,
    corpus_bytes,
    eviction_cap,
    fourth_pair,
    inflate,
    inflation_targets,
    main,
    parse_task,
    plot_path,
    read_nodes,
    read_tasks,
    replay_inflation,
    replay_timeline,
    task_annotations,
    task_request,
    unplaced_by_models,
)
from kubectl_hami_place.core.fit import USE_TYPE
from kubectl_hami_place.core.node_resources import Resources
from kubectl_hami_place.core.planner import FitGoal, Limits, Snapshot, plan

ROW = {
    "name": "openb-pod-0001",
    "cpu_milli": "6000",
    "memory_mib": "12288",
    "num_gpu": "1",
    "gpu_milli": "460",
    "gpu_spec": "V100M16|V100M32",
    "qos": "LS",
    "pod_phase": "Running",
    "creation_time": "427061",
    "deletion_time": "12902960",
    "scheduled_time": "427100",
}


def task(name: str, num_gpu: int = 1, gpu_milli: int = 1000, **kwargs: object) -> Task:
    """A task with small CPU and memory asks unless given."""
    values: dict[str, object] = {"cpu_milli": 1000, "memory_mib": 1024, **kwargs}
    return Task(name=name, num_gpu=num_gpu, gpu_milli=gpu_milli, **values)  # type: ignore[arg-type]


def nodes(*gpus: int, cpu: int = 64000, memory: int = 262144, model: str = "V100M16") -> list[TraceNode]:
    """Nodes with these card counts."""
    return [TraceNode(f"node-{i}", cpu, memory, count, model) for i, count in enumerate(gpus)]


def test_parse_task_reads_every_field() -> None:
    parsed = parse_task(ROW)
    assert parsed == Task(
        name="openb-pod-0001",
        cpu_milli=6000,
        memory_mib=12288,
        num_gpu=1,
        gpu_milli=460,
        gpu_spec=("V100M16", "V100M32"),
        creation=427061,
        deletion=12902960,
        scheduled=427100,
    )
    assert parsed.gpus == pytest.approx(0.46)
    assert parsed.duration == 12902960 - 427100


def test_parse_task_without_times_or_spec() -> None:
    """The multigpu20 list has no gpu_spec and no time columns; a pending task has no scheduled time."""
    short = {key: ROW[key] for key in ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")}
    parsed = parse_task(short)
    assert (parsed.gpu_spec, parsed.creation, parsed.deletion, parsed.scheduled) == ((), 0, 0, None)
    pending = parse_task({**ROW, "scheduled_time": ""})
    assert pending.scheduled is None
    assert pending.duration == 12902960 - 427061


def test_read_files(tmp_path: Path) -> None:
    (tmp_path / "nodes.csv").write_text("sn,cpu_milli,memory_mib,gpu,model\nn-0,64000,262144,2,P100\n")
    (tmp_path / "tasks.csv").write_text(",".join(ROW) + "\n" + ",".join(ROW.values()) + "\n")
    assert read_nodes(tmp_path / "nodes.csv") == [TraceNode("n-0", 64000, 262144, 2, "P100")]
    assert [t.name for t in read_tasks(tmp_path / "tasks.csv")] == ["openb-pod-0001"]


def test_shared_task_asks_a_percentage_of_memory_and_cores() -> None:
    request = task_request(task("t", 1, 460))
    assert request is not None
    assert (request.nums, request.mem_percentage, request.coresreq, request.memreq) == (1, 46, 46, 0)
    odd = task_request(task("t", 1, 455))
    assert odd is not None and odd.mem_percentage == 46 and odd.coresreq == 46


def test_whole_and_multi_card_tasks_are_exclusive() -> None:
    whole, multi = task_request(task("t", 1, 1000)), task_request(task("t", 8, 1000))
    assert whole is not None and multi is not None
    assert (whole.nums, whole.mem_percentage, whole.coresreq, whole.exclusive) == (1, 100, 100, True)
    assert (multi.nums, multi.exclusive) == (8, True)
    assert task_request(task("t", 0, 0)) is None


def test_gpu_spec_becomes_use_gputype() -> None:
    assert task_annotations(task("t", gpu_spec=("V100M16", "V100M32"))) == {USE_TYPE: "V100M16,V100M32"}
    assert task_annotations(task("t")) == {}


def test_inflate_draws_in_order_and_wraps_until_capacity() -> None:
    tasks = [task("a", 1, 500), task("b", 0, 0), task("c", 1, 1000)]
    drawn = [t.name for t in inflate(tasks, capacity=3.0)]
    assert drawn == ["a", "b", "c", "a#1", "b#1", "c#1"]
    assert list(inflate([task("cpu", 0, 0)], capacity=4.0)) == []


def test_arrivals_compress_from_the_dense_part_and_repeat_in_rounds() -> None:
    """The first 1% of creations (the trace's sparse head) arrive at time 0; later rounds follow back to back."""
    tasks = [task(f"t{i}", creation=1000 + 10 * i) for i in range(100)]
    tasks[0] = task("head", creation=0)
    timed = arrivals(tasks, compress=10.0, rounds=2)
    assert len(timed) == 200
    by_name = {t.name: at for at, t in timed}
    assert by_name["head"] == 0.0
    assert by_name["t1"] == pytest.approx(0.0)
    assert by_name["t2"] == pytest.approx(1.0)
    span = (1000 + 10 * 99 - 1010) / 10.0
    assert by_name["t2@1"] == pytest.approx(span + 1.0)


def test_ledger_rows_at_each_step_of_asked_load() -> None:
    ledger = InflationLedger(capacity=10.0, step=0.25)
    ledger.record(task("a", 2, 1000), placed=True)
    ledger.record(task("b", 1, 500), placed=False)
    ledger.record(task("c", 1, 1000), placed=True, evictions=1)
    assert [row["load"] for row in ledger.rows] == [0.25]
    ledger.record(task("d", 3, 1000), placed=True)
    assert [row["load"] for row in ledger.rows] == [0.25, 0.5]
    last = ledger.rows[-1]
    assert last["unallocated"] == pytest.approx(1 - 6 / 10)
    assert last["unplaced"] == pytest.approx(0.5 / 6.5)
    assert last["evictions_per_placed"] == pytest.approx(1 / 3)


def test_ledger_splits_the_unplaced_gpus_by_what_the_task_asked() -> None:
    ledger = InflationLedger(capacity=100.0)
    ledger.record(task("share", 1, 300), placed=False)
    ledger.record(task("another-share", 1, 200), placed=False)
    ledger.record(task("whole", 1, 1000), placed=False)
    ledger.record(task("eight", 8, 1000), placed=False)
    ledger.record(task("another-eight", 8, 1000), placed=True)
    ledger.record(task("placed-share", 1, 500), placed=True)
    row = ledger.row(0.1)
    asked = 0.3 + 0.2 + 1 + 8 + 8 + 0.5
    assert row["unplaced_asking_share"] == pytest.approx(0.5 / asked)
    assert row["unplaced_asking_1"] == pytest.approx(1 / asked)
    assert row["unplaced_asking_8"] == pytest.approx(8 / asked)
    assert "unplaced_asking_2" not in row


def test_what_is_left_is_told_by_the_models_its_tasks_accept_largest_first() -> None:
    """Where the unplaced GPUs are bound says whether a scarce model or the whole cluster holds them back."""
    left = [
        task("either", 1, 500, gpu_spec=("T4", "V100M16")),
        task("anywhere", 1, 1000),
        task("t4-a", 1, 800, gpu_spec=("T4",)),
        task("t4-b", 1, 400, gpu_spec=("T4",)),
    ]
    shares = unplaced_by_models(left, 10.0)
    assert list(shares) == ["T4", "any", "T4,V100M16"]
    assert list(shares.values()) == pytest.approx([0.12, 0.1, 0.05])


def test_inflation_tells_what_is_unplaced_by_model_and_what_tasks_that_could_go_elsewhere_hold() -> None:
    """A task bound to T4 is left out while tasks that accept any card hold both T4 cards: the report says so, the
    GPUs a defragmenter could give the bound task by moving the others off (V100's card holds a task bound to it,
    the task without cards holds none)."""
    cluster_nodes = [TraceNode("t4", 64000, 262144, 2, "T4"), TraceNode("v100", 128000, 524288, 1, "V100M16")]
    tasks = [
        task("v100-only", gpu_spec=("V100M16",)),
        task("anywhere"),
        task("cpu-only", 0, 0),
        task("anywhere-share", 1, 500),
        task("t4-only", gpu_spec=("T4",)),
    ]
    result = replay_inflation(cluster_nodes, tasks, Setup("test", "spread", controller=False), ControllerPolicy())
    assert result["final"]["tasks_unplaced"] == 1
    assert result["unplaced_by_models"] == {"T4": pytest.approx(1 / 3.5)}
    assert result["held_by_flexible"] == {"T4": pytest.approx(1.5)}


def test_binpack_fills_the_fullest_node_and_spread_the_emptiest() -> None:
    for policy, expected in (("binpack", {0}), ("spread", {0, 1})):
        cluster = Cluster(nodes(2, 2), policy, seed=3)
        for name in ("a", "b"):
            choice = cluster.choose(task(name, 1, 300))
            assert choice is not None
            cluster.put(task(name, 1, 300), *choice)
        used = {entry.node for entry in cluster.running.values()}
        assert len(used) == len(expected), policy


def test_the_node_score_is_hamis_slots_cores_and_memory_in_use_each_over_the_nodes_own_total() -> None:
    """HAMi's ComputeDefaultScore weighs a node's cores and its memory in use each over its own total. Read swapped,
    memory in MiB over cores in percent swamps the score: spread then picks the node of small cards, fuller by
    HAMi's count, and binpack the other."""
    small, large = TraceNode("small", 64000, 262144, 2, "V100M16"), TraceNode("large", 64000, 262144, 2, "G3")
    for policy, picked in (("spread", "large"), ("binpack", "small")):
        cluster = Cluster([small, large], policy)
        cluster.put(task("a", 1, 300), 0, (0,))
        cluster.put(task("b", 1, 200), 1, (0,))
        assert [cluster.node_score(0), cluster.node_score(1)] == pytest.approx([3.5, 2.5], rel=1e-3)
        choice = cluster.choose(task("c", 1, 100))
        assert choice is not None and cluster.trace_nodes[choice[0]].name == picked, policy


def test_each_pair_packs_or_spreads_nodes_and_cards_by_its_own_two_policies() -> None:
    """Three shares on two nodes of two cards: binpack puts them on one card of one node, spread on three cards of
    two nodes, HAMi's default pair on two cards of one node (node binpack, GPU spread), the fourth pair on one card of
    each node (node spread, GPU binpack)."""
    expected = {"binpack": (1, 1), "spread": (2, 3), DEFAULT: (1, 2), SPREAD_BINPACK: (2, 2)}
    for policy, (node_count, card_count) in expected.items():
        cluster = Cluster(nodes(2, 2), policy, seed=1)
        for name in ("a", "b", "c"):
            choice = cluster.choose(task(name, 1, 300))
            assert choice is not None
            cluster.put(task(name, 1, 300), *choice)
        placed = {(entry.node, entry.cards) for entry in cluster.running.values()}
        assert (len({node for node, _ in placed}), len(placed)) == (node_count, card_count), policy


def test_default_pair_is_labelled_and_runs_with_the_controller() -> None:
    """The default pair's rows say which pair it is, and its controller rescues as under the other pairs: GPU spread
    leaves a share on each card of the one node, a move frees a card for the whole-card task."""
    tasks = [task("a", 1, 300), task("b", 1, 300), task("whole")]
    result = replay_inflation(nodes(2), tasks, Setup("t", DEFAULT, controller=True), ControllerPolicy())
    assert result["label"] == "default (node binpack, GPU spread) + controller"
    assert result["controller"]["rescued"] >= 1 and result["controller"]["moves"] >= 1
    assert (
        Setup("t", DEFAULT, controller=False, resources=False).label
        == "default (node binpack, GPU spread) (no CPU/mem)"
    )
    assert Setup("t", SPREAD_BINPACK, controller=True).label == "node spread, GPU binpack + controller"


def test_controller_replays_are_skipped_alone_and_for_fgd() -> None:
    assert controlled_runs(DEFAULT, alone=False) == (False, True)
    assert controlled_runs("binpack", alone=True) == (False,)
    assert controlled_runs(FGD, alone=False) == (False,)


def test_an_unknown_policy_is_refused_before_any_replay(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        main(
            [
                "--policies",
                "binpack,spred",
                "--files",
                "",
                "--timeline-files",
                "",
                "--json",
                str(tmp_path / "r.json"),
                "--plot",
                str(tmp_path / "r.png"),
            ]
        )
    assert "unknown policies spred" in capsys.readouterr().err
    assert not (tmp_path / "r.json").exists()


def test_the_plot_goes_beside_the_report_unless_asked_elsewhere(tmp_path: Path) -> None:
    """A replay written to /tmp must not overwrite the plot the docs show."""
    assert plot_path(tmp_path / "r.json", None) == tmp_path / "r.png"
    assert plot_path(tmp_path / "r.json", tmp_path / "p.png") == tmp_path / "p.png"


def test_the_default_pair_counts_as_hami_s_best_alone() -> None:
    """A controller's target is a quarter of HAMi's best policy alone, the default pair among them (FGD is not)."""

    def result(policy: str, controller: bool, unplaced: float) -> dict[str, Any]:
        setup = Setup("l", policy, controller)
        return {
            "setup": setup.__dict__,
            "label": setup.label,
            "final": {"unplaced": unplaced, "evictions_per_placed": 0},
        }

    results = [
        result("binpack", False, 0.2),
        result("spread", False, 0.3),
        result(DEFAULT, False, 0.1),
        result(FGD, False, 0.01),
        result("binpack", True, 0.04),
    ]
    (verdict,) = inflation_targets(results)
    assert verdict["best_alone"] == "default (node binpack, GPU spread)" and verdict["best_alone_unplaced"] == 0.1
    assert not verdict["unplaced_ok"]


def test_the_fourth_pair_s_note_says_where_it_is_the_base_from_the_report_itself() -> None:
    """Where node spread with GPU binpack is HAMi's best alone the note says so against the runner-up, elsewhere the
    best pair against it; nothing when the pair was not replayed."""

    def alone(policy: str, unplaced: float, resources: bool = True) -> dict[str, Any]:
        setup = Setup("l", policy, False, resources)
        return {"setup": setup.__dict__, "label": setup.label, "final": {"unplaced": unplaced}}

    report = {
        "inflation": {
            "a": [alone("spread", 0.113), alone(SPREAD_BINPACK, 0.095), alone(FGD, 0.01)],
            "b": [alone("binpack", 0.154), alone(SPREAD_BINPACK, 0.171)],
            "c": [alone("binpack", 0.041, False), alone(SPREAD_BINPACK, 0.073, False)],
        },
        "timeline": {"a": [{**alone("binpack", 0), "pending_gpu_hours": 9411.0}]},
    }
    (line,) = fourth_pair(report)
    assert (
        "best alone (asked GPUs unplaced at 100% asked, GPU-hours Pending in a timeline) on `a` 9.5% (spread 11.3%):"
        in line
    )
    assert "Another pair is best alone on `b` (binpack 15.4%, the pair 17.1%), `c` without CPU and memory" in line
    assert "timeline" not in line.split("Another pair")[1], "a timeline without the pair is left out"
    assert fourth_pair({"inflation": {"b": [alone("binpack", 0.154)]}, "timeline": {}}) == []


def test_the_before_and_after_table_has_hamis_alone_rows_too_with_no_controller_figures() -> None:
    """A change to HAMi's model moves the baseline the targets are a share of: its rows go beside the controller's."""
    stats = {"rescue_runs": 7, "rescued": 3, "plan_seconds": {"median": 0.1, "max": 0.2}}

    def result(controller: bool, unplaced: float) -> dict[str, Any]:
        setup = Setup("l", "spread", controller)
        final = {"unplaced": unplaced, "evictions_per_placed": 0.01 if controller else 0.0}
        return {"label": setup.label, "final": final, "controller": stats if controller else None}

    planning = {"runs": 7, "median": 0.1, "p95": 0.2, "max": 0.2}
    before = {
        "commands": ["replay --old", "replay --combine x"],
        "inflation": {"l": [result(False, 0.12), result(True, 0.07)]},
        "planning_seconds": planning,
    }
    after = {
        "inflation": {"l": [result(False, 0.11), result(True, 0.06)]},
        "timeline": {},
        "planning_seconds": planning,
    }
    assert before_after(after, before)[4:6] == [
        "| inflation `l` | spread | unplaced at 100% 12.0%, 0.000 evictions/task | unplaced at 100% 11.0%, 0.000 "
        "evictions/task |",
        "| inflation `l` | spread + controller | unplaced at 100% 7.0%, 0.010 evictions/task, 7 runs, 3 rescued, plan "
        "median 0.10 s, max 0.20 s | unplaced at 100% 6.0%, 0.010 evictions/task, 7 runs, 3 rescued, plan median "
        "0.10 s, max 0.20 s |",
    ]


def test_cpu_and_memory_keep_a_task_off_a_node_with_free_cards() -> None:
    cluster = Cluster(nodes(1, cpu=2000), "binpack")
    assert cluster.choose(task("big", cpu_milli=3000)) is None
    unlimited = Cluster(nodes(1, cpu=2000), "binpack", resources=False)
    unlimited.put(task("first", 1, 300, cpu_milli=3000), 0, (0,))
    assert unlimited.choose(task("second", 1, 300, cpu_milli=3000)) is not None


def test_gpu_spec_keeps_a_task_off_other_models() -> None:
    cluster = Cluster([*nodes(1, model="T4"), TraceNode("v", 64000, 262144, 1, "V100M32")], "binpack")
    assert cluster.typed(("V100M32",)) == [1]
    choice = cluster.choose(task("t", gpu_spec=("V100M32",)))
    assert choice is not None and choice[0] == 1
    assert cluster.choose(task("t", gpu_spec=("P100",))) is None


def shares_spread_over_two_cards() -> Cluster:
    """Two one-card nodes under spread, a share of 300 placed by HAMi on each card."""
    cluster = Cluster(nodes(2), "spread")
    for name in ("a", "b"):
        choice = cluster.choose(task(name, 1, 300))
        assert choice is not None
        cluster.put(task(name, 1, 300), *choice)
    return cluster


def test_rescue_moves_a_share_so_a_whole_card_task_fits() -> None:
    """Spread leaves a share on each card; the controller moves one so a whole-card task gets a card."""
    cluster = shares_spread_over_two_cards()
    assert {entry.cards for entry in cluster.running.values()} == {(0,), (1,)}
    whole = task("whole")
    assert cluster.choose(whole) is None
    controller = Controller(cluster, ControllerPolicy())
    assert controller.rescue(whole, None) == 1
    assert "whole" in cluster.running
    assert controller.stats.moves == 1 and controller.stats.rescued == 1


def test_the_policy_s_search_bound_reaches_the_planner() -> None:
    """The same rescue with a search bound of one step stops at it instead of moving the share."""
    controller = Controller(shares_spread_over_two_cards(), ControllerPolicy(search_steps=1))
    assert controller.rescue(task("whole"), None) is None
    assert controller.stats.search_stopped == 1 and controller.stats.moves == 0


def test_snapshot_hands_the_planner_each_node_s_cpu_and_memory_left() -> None:
    """Each node's room is the replay's remainder (memory MiB as bytes, pods never binding), each pod's needs its
    task's ask; with node resources left out nothing is counted."""
    cluster = Cluster(nodes(1, 1, cpu=8000, memory=4096), "spread")
    cluster.put(task("a", 1, 300, cpu_milli=1500, memory_mib=1024), 1, (0,))
    snapshot = cluster.snapshot()
    assert [node.room for node in snapshot.nodes] == [
        Resources(8000, 4096 * MIB, NODE_PODS),
        Resources(6500, 3072 * MIB, NODE_PODS),
    ]
    assert [pod.needs for pod in snapshot.pods] == [Resources(1500, 1024 * MIB, 1)]
    assert [pod.nodes for pod in snapshot.pods] == [None]
    pending = cluster.pending_pod(task("b", cpu_milli=7000, memory_mib=2048))
    assert (pending.needs, pending.nodes) == (Resources(7000, 2048 * MIB, 1), None)
    uncounted = Cluster(nodes(1), "spread", resources=False)
    uncounted.put(task("a", 1, 300), 0, (0,))
    assert [node.room for node in uncounted.snapshot().nodes] == [None]
    assert uncounted.snapshot().pods[0].needs == Resources()


def test_planner_keeps_moves_off_nodes_without_cpu() -> None:
    """The planner counts each node's CPU left, so no plan moves a task onto the node whose CPU is taken."""
    cluster = Cluster([*nodes(1, cpu=64000), TraceNode("full", 1500, 262144, 1, "V100M16")], "binpack")
    cluster.put(task("a", 1, 300, cpu_milli=1000), 0, (0,))
    cluster.put(task("cpu-hog", 0, 0, cpu_milli=1000), 1, ())
    controller = Controller(cluster, ControllerPolicy())
    assert controller.rescue(task("whole"), None) is None
    assert controller.stats.refused_resources == 0
    assert controller.stats.moves == 0 and "whole" not in cluster.running


def test_rescue_lands_on_a_node_whose_cpu_a_move_frees() -> None:
    """No card is free: `roomy`'s 60% share cannot move to `tight`, whose CPU is taken, and `tight` lacks the task's
    CPU until its 1.5-core share leaves. The planner moves that share to `roomy`'s card and the task lands on `tight`
    (excluded as a target while the replay handed the planner the nodes whose CPU held the task before the plan)."""
    cluster = Cluster(
        [TraceNode("tight", 2000, 262144, 1, "V100M16"), TraceNode("roomy", 64000, 262144, 1, "V100M16")], "spread"
    )
    cluster.put(task("a", 1, 300, cpu_milli=1500), 0, (0,))
    cluster.put(task("b", 1, 600, cpu_milli=1000), 1, (0,))
    whole = task("whole", cpu_milli=1000)
    assert cluster.choose(whole) is None and not cluster.resources_fit(whole, 0)
    controller = Controller(cluster, ControllerPolicy())
    assert controller.rescue(whole, None) == 1
    assert (cluster.running["whole"].node, cluster.running["a"].node, cluster.running["b"].node) == (0, 1, 1)
    assert controller.stats.rescued_into_freed == 1 and controller.stats.refused_resources == 0
    assert controller.stats.moves_into_freed == 0  # `roomy` held the moved share's CPU before the plan


def test_a_move_takes_the_cpu_an_earlier_move_of_the_plan_frees() -> None:
    """The whole-card task fits only node-0's CPU, where share a (200 GiB of memory) sits. a fits no card but
    node-1's, whose share b takes all node-1's CPU: the plan moves b to node-2's free card, then a into the CPU b
    left (counted as a move into freed room), and no move overfills a node."""
    cluster = Cluster(
        [
            TraceNode("node-0", 2100, 307200, 1, "V100M16"),
            TraceNode("node-1", 1500, 307200, 1, "V100M16"),
            TraceNode("node-2", 1600, 16384, 2, "V100M16"),
        ],
        "spread",
    )
    cluster.put(task("a", 1, 600, cpu_milli=100, memory_mib=204800), 0, (0,))
    cluster.put(task("b", 1, 500, cpu_milli=1500), 1, (0,))
    cluster.put(task("d", 1, 600, cpu_milli=0), 2, (0,))
    whole = task("whole", cpu_milli=2000)
    assert cluster.choose(whole) is None
    controller = Controller(cluster, ControllerPolicy())
    assert controller.rescue(whole, None) == 2
    assert [cluster.running[name].node for name in ("whole", "a", "b")] == [0, 1, 2]
    assert controller.stats.moves_into_freed == 1 and controller.stats.refused_resources == 0
    assert min(cluster.free_cpu) >= 0 and min(cluster.free_mem) >= 0


def test_carry_out_refuses_a_move_that_breaks_cpu() -> None:
    """The guard behind the planner: a plan whose move would overfill a node's CPU (here one planned without the
    nodes' CPU, as a planner bug would) is refused before anything moves."""
    cluster = Cluster([*nodes(1, cpu=2000), TraceNode("other", 2500, 262144, 1, "V100M16")], "binpack")
    cluster.put(task("a", 1, 300, cpu_milli=1200), 0, (0,))
    cluster.put(task("b", 1, 300, cpu_milli=1500), 1, (0,))
    pods = (cluster.running["a"].pod, cluster.running["b"].pod)
    unaware = Snapshot(nodes=cluster.plan_nodes, pods=tuple(pod for pod in pods if pod is not None))
    result = plan(unaware, FitGoal(cluster.pending_pod(task("whole"))), Limits())
    assert len(result.moves) == 1
    moves, why = cluster.carry_out(result, None)
    assert moves == 0 and why.endswith("exceeds its CPU or memory")
    assert (cluster.running["a"].node, cluster.running["b"].node) == (0, 1)


def test_unplaced_causes_tell_short_gpus_from_cpu_and_from_fragments() -> None:
    """Two nodes of one card, each holding a 60% share; node-1 has no CPU left for a 1-core task."""
    cluster = Cluster([*nodes(1), TraceNode("tight", 1000, 262144, 1, "V100M16")], "spread")
    cluster.put(task("a", 1, 600, cpu_milli=500), 0, (0,))
    cluster.put(task("b", 1, 600, cpu_milli=1000), 1, (0,))
    assert cluster.unplaced_cause(task("two", 2, 1000)) == "capacity"  # 0.8 GPUs free in all
    assert cluster.unplaced_cause(task("share", 1, 700)) == "cpu_memory"  # node-0 has 0.4 free, node-1 no CPU
    assert cluster.unplaced_cause(task("small", 1, 300)) == "fragmented"
    roomy = Cluster(nodes(1, 1), "spread")
    roomy.put(task("a", 1, 600), 0, (0,))
    roomy.put(task("b", 1, 600), 1, (0,))
    assert roomy.unplaced_cause(task("whole", 1, 800)) == "fragmented"  # 0.8 free in all, 0.4 per card


def test_no_rescue_for_a_task_no_node_has_cpu_for() -> None:
    """kube-scheduler refuses every node for CPU, so HAMi gives no fit reason and the trigger does not fire."""
    cluster = Cluster(nodes(1, cpu=2000), "spread")
    cluster.put(task("a", 1, 600), 0, (0,))
    controller = Controller(cluster, ControllerPolicy())
    assert controller.rescue(task("hungry", 1, 300, cpu_milli=4000), None) is None
    assert controller.stats.skipped_cpu_memory == 1 and controller.stats.rescue_runs == 0


def test_a_rescue_over_the_run_s_budget_is_told_from_no_plan() -> None:
    """Three shares on three cards of one node; a task of 3 whole cards needs 3 moves, the run allows 2."""
    cluster = Cluster([*nodes(3), TraceNode("spare", 64000, 262144, 3, "V100M16")], "spread")
    for card, name in enumerate("abc"):
        cluster.put(task(name, 1, 300), 0, (card,))
    cluster.put(task("d", 1, 600), 1, (0,))
    cluster.put(task("e", 1, 600), 1, (1,))
    cluster.put(task("f", 1, 600), 1, (2,))
    wide = task("wide", 3, 1000)
    assert cluster.choose(wide) is None
    tight = Controller(cluster, ControllerPolicy(moves_per_run=2, moves_per_node=2, max_moves_per_plan=8))
    assert tight.rescue(wide, None) is None
    assert (tight.stats.no_plan_budget, tight.stats.no_plan_multi) == (1, 0)
    small = Controller(cluster, ControllerPolicy(moves_per_run=2, moves_per_node=2, max_moves_per_plan=2))
    assert small.rescue(wide, None) is None
    assert (small.stats.no_plan_budget, small.stats.no_plan_multi) == (0, 1)


def test_keep_room_gathers_whole_free_cards_on_one_node() -> None:
    """Two nodes of two cards: a 50% share on node-0, 20% and 60% shares on node-1's cards. Freeing the easiest card
    anywhere would move the 20% share and leave each node one free card; keep-room moves the 50% share instead, so
    node-0 has two. With two free on a node already it plans nothing."""
    cluster = Cluster(nodes(2, 2), "spread")
    cluster.put(task("a", 1, 500), 0, (0,))
    cluster.put(task("b", 1, 200), 1, (0,))
    cluster.put(task("e", 1, 600), 1, (1,))
    assert max(cluster.empty) == 1
    controller = Controller(cluster, ControllerPolicy(keep_whole_node=2))
    assert controller.keep_room(None) == 1
    assert cluster.empty == [2, 0] and controller.stats.keep_moves == 1
    assert (cluster.running["a"].node, cluster.running["a"].cards) == (1, (0,))
    assert controller.keep_room(None) == 0 and controller.stats.keep_runs == 1


def test_inflation_evicts_no_more_than_the_policy_s_share_of_the_tasks_placed() -> None:
    """Two shares spread over two cards, then a whole-card task: its rescue takes one move, which a budget of 0.1
    evictions per placed task (0.3 after three placed) does not allow and one of 0.5 (1.5) does."""
    tasks = [task("a", 1, 300), task("b", 1, 300), task("whole")]
    setup = Setup("test", "spread", controller=True)
    moves = {}
    for share in (math.inf, 0.5, 0.1):
        result = replay_inflation(nodes(2), tasks, setup, ControllerPolicy(evictions_per_placed=share), limit=0.8)
        moves[share] = result["controller"]["moves"]
        assert result["final"]["evictions"] <= share * result["final"]["tasks_placed"]
    assert moves == {math.inf: 1, 0.5: 1, 0.1: 0}


def test_replays_end_with_consistent_counts() -> None:
    trace_nodes = nodes(2, 2)
    tasks = [
        task(f"t{i}", 1, milli, creation=10 * i, deletion=10 * i + 100)
        for i, milli in enumerate((300, 300, 300, 1000, 1000, 1000))
    ]
    setup = Setup("test", "spread", controller=True)
    inflation = replay_inflation(trace_nodes, tasks, setup, ControllerPolicy())
    assert inflation["final"]["tasks_placed"] + inflation["final"]["tasks_unplaced"] >= len(tasks)
    timeline = replay_timeline(trace_nodes, tasks, setup, ControllerPolicy(), compress=1.0)
    assert timeline["gpu_tasks"] == len(tasks) and timeline["never_placed"] == 0
    alone = replay_timeline(
        trace_nodes, tasks, Setup("test", "spread", controller=False), ControllerPolicy(), compress=1.0
    )
    assert alone["waited"] > 0 and alone["never_placed"] == 0 and alone["evictions"] == 0


def test_combine_concatenates_runs_of_one_list(tmp_path: Path) -> None:
    """Runs made side by side (one policy each) merge into one report, their results of one list concatenated."""
    base = {"commands": ["a"], "load_average": [1.0], "tasks": {"default": 3}, "inflation": {}}
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    first.write_text(json.dumps({**base, "timeline": {"default": [{"label": "binpack"}]}}))
    second.write_text(
        json.dumps({**base, "commands": ["b"], "timeline": {"default": [{"label": "spread"}]}, "inflation": {"x": []}})
    )
    merged = combine([first, second])
    assert [r["label"] for r in merged["timeline"]["default"]] == ["binpack", "spread"]
    assert merged["commands"] == ["a", "b"] and set(merged["inflation"]) == {"x"}


def rescue_stats(cards: int, tasks: list[Task], **options: Any) -> dict[str, Any]:
    """The controller's figures of a spread timeline on one node of `cards` cards at 1x: a tick every 60 s, a rescued
    task retried 10 s after its moves."""
    result = replay_timeline(
        nodes(cards),
        tasks,
        Setup("test", "spread", controller=True),
        ControllerPolicy(),
        compress=1.0,
        tick=60.0,
        settle=10.0,
        **options,
    )
    return dict(result["controller"])


@pytest.mark.parametrize(
    ("reserve_for", "thief_at", "rescued", "lost"),
    [
        (0.0, 125, 0, 1),  # the room is not kept: the arrival takes it before the rescued task's retry
        (60.0, 125, 1, 0),  # kept: the arrival is kept off the card, the rescued task gets it at its retry
        (3.0, 125, 0, 1),  # kept for 3 s only: an arrival after the deadline takes it
    ],
)
def test_a_kept_room_keeps_arrivals_off_the_rescued_task_s_cards(
    reserve_for: float, thief_at: int, rescued: int, lost: int
) -> None:
    """Two shares spread over a node's two cards, a whole-card task Pending from t=2: the tick at t=120 moves a share
    so that a card is free, the task is retried 10 s later; a whole-card task arrives at t=125."""
    far = 100_000
    tasks = [
        task("a", 1, 300, creation=0, deletion=far),
        task("b", 1, 300, creation=1, deletion=far),
        task("waiting", creation=2, deletion=far),
        task("thief", creation=thief_at, deletion=far),
    ]
    stats = rescue_stats(2, tasks, reserve_for=reserve_for)
    assert stats["rescue_runs"] >= 1 and stats["moves"] == 1
    assert (stats["rescued"], stats["room_lost"], stats["room_lost_meanwhile"]) == (rescued, lost, lost)


@pytest.mark.parametrize(
    ("keep_off_older", "rescued", "lost"),
    [
        (False, 0, 1),  # the older task is not kept off: it takes the freed card at the rescued task's retry
        (True, 1, 0),  # kept off too: the rescued task gets the card
    ],
)
def test_a_kept_room_keeps_older_pending_tasks_off_only_when_asked(
    keep_off_older: bool, rescued: int, lost: int
) -> None:
    """Shares of 65%, 65% and 40% + 25% on a node's three cards, whole-card tasks `older` and `waiting` Pending from
    t=4 and t=5: at t=60 no plan frees a card for `older` (planned again only 600 s later), the 40% share leaves at
    t=100, and the tick at t=120 moves the 25% share for `waiting`, whose retry comes 10 s later, after `older`'s."""
    far = 100_000
    tasks = [
        task("b", 1, 650, creation=0, deletion=far),
        task("c", 1, 650, creation=1, deletion=far),
        task("a", 1, 400, creation=2, deletion=100),
        task("a2", 1, 250, creation=3, deletion=far),
        task("older", creation=4, deletion=far),
        task("waiting", creation=5, deletion=far),
    ]
    stats = rescue_stats(3, tasks, pending_for=30.0, reserve_for=60.0, keep_off_older=keep_off_older)
    assert stats["no_plan_share"] >= 1 and stats["moves"] == 1
    assert (stats["rescued"], stats["room_lost"], stats["room_lost_meanwhile"]) == (rescued, lost, 0)
    # The retry at t=130 comes before the tick at t=180: ticks up to the departures at t=100,000 ran first once,
    # planning for `older` 166 times more while the room was still kept.
    assert stats["rescue_runs"] == 2, stats


def test_the_notes_say_the_inflation_replays_eviction_cap_only_when_their_commands_set_one() -> None:
    capped = {"commands": ["python bench/trace_replay.py --skip-timeline --evictions-per-placed 0.05", "python x"]}
    assert "within 0.05 of the tasks placed so far" in eviction_cap(capped)
    assert eviction_cap({"commands": ["python bench/trace_replay.py --skip-timeline"]}) == ""


def test_a_corpus_record_keeps_its_read_only_mappings_as_dicts() -> None:
    """The planner's inputs hold MappingProxyType values (a node's labels by default), which pickle refuses; the
    corpus keeps them as dicts, which the planner reads alike."""
    snapshot = {"labels": MappingProxyType({"zone": "a"}), "nested": [MappingProxyType({})]}
    assert pickle.loads(corpus_bytes({"snapshot": snapshot, "seconds": 0.5})) == {
        "snapshot": {"labels": {"zone": "a"}, "nested": [{}]},
        "seconds": 0.5,
    }
