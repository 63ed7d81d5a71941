"""`plan` as -o json|yaml and the table print it, with and without --for, and with --apply's run after it."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from test_cli_why import CLOSED, OPEN

from kubectl_hami_place.cli import _plan
from kubectl_hami_place.cli._moves_runner import ApplyReport, Outcome
from kubectl_hami_place.cli._plan import PlanApplied, PlanView
from kubectl_hami_place.cli._why import why_blocks
from kubectl_hami_place.cli.app import run
from kubectl_hami_place.cli.output import Table, Text
from kubectl_hami_place.core.cards import Card
from kubectl_hami_place.core.hami_config import HAMI_DEFAULTS
from kubectl_hami_place.core.node_selection import node_marks
from kubectl_hami_place.core.planner import Move, Plan, PlanNode, Snapshot, Summary
from kubectl_hami_place.kube import snapshot as snapshot_reads
from kubectl_hami_place.kube.snapshot import SnapshotRead
from tests.unit.test_core_planner import GIB, gpu_node, placed

NAMES = {"GPU-a0": "gpu-0", "GPU-a1": "gpu-1", "GPU-b0": "gpu-0"}
MOVE = Move("ns/small", "u1", "a", ("GPU-a0",), "b", ("GPU-b0",), "frees a/gpu-0")
# A card the snapshot does not know (gone since the plan was read) is shown by its UUID, on the node the plan names.
GONE = Move("ns/other", "u2", "a", ("GPU-a1",), "c", ("GPU-c9",), "packs c")
BEFORE = Summary(open_cards=3, whole_cards_free=1, free_mib=50000, largest_free_mib=40000)
AFTER = Summary(open_cards=3, whole_cards_free=2, free_mib=50000, largest_free_mib=80000)
FIT = Plan("fit ns/big", (MOVE,), True, (), BEFORE, AFTER, (), target=("a", ("GPU-a0", "GPU-a1")))
FREE = Plan(
    "free 2 whole card(s)", (MOVE, GONE), False, ("no pod of b fits elsewhere", "budget spent"), BEFORE, AFTER, ()
)
FRAGMENTATION = Text(
    (
        "Fragmentation",
        "  whole cards free:        1 -> 2",
        "  free memory:             50000 -> 50000 MiB",
        "  largest free on a card:  40000 -> 80000 MiB",
    )
)


def test_a_for_plan_says_why_first_then_where_the_pod_fits_after_the_moves() -> None:
    """`plan --for` answers the operator's question first (why not now) and then names the cards the pod gets."""
    view = PlanView(FIT, NAMES, (CLOSED, OPEN), "ns/big")
    assert view.to_blocks() == [
        *why_blocks("ns/big", (CLOSED, OPEN)),
        Text(("plan: fit ns/big: ns/big fits a/gpu-0,gpu-1 after 1 move(s)",), style="bold"),
        Table(
            columns=("#", "Pod", "From", "To", "Reason"),
            rows=(("1", "ns/small", "a/gpu-0", "b/gpu-0", "frees a/gpu-0"),),
            empty="  no moves",
        ),
        FRAGMENTATION,
    ]


def test_a_plan_short_of_its_goal_says_so_and_why_not_further() -> None:
    """An incomplete plan exits 1; its table must not read as a plan that reaches the goal."""
    view = PlanView(FREE, NAMES, None, "")
    assert view.to_blocks() == [
        Text((f"plan (goal not reached): free 2 whole card(s): {FREE.gain}",), style="bold"),
        Table(
            columns=("#", "Pod", "From", "To", "Reason"),
            rows=(
                ("1", "ns/small", "a/gpu-0", "b/gpu-0", "frees a/gpu-0"),
                ("2", "ns/other", "a/gpu-1", "c/GPU-c9", "packs c"),
            ),
            empty="  no moves",
        ),
        FRAGMENTATION,
        Text(("Why not further:", "  no pod of b fits elsewhere", "  budget spent"), style="yellow"),
    ]


def test_the_json_of_a_for_plan_names_its_pod_which_apply_reads_back() -> None:
    """`apply -f` reads the pod (namespace and name apart) from this document; other goals have no pod."""
    assert PlanView(FIT, NAMES, (CLOSED,), "ns/big").to_data() == {
        **FIT.to_dict(),
        "pod": {"namespace": "ns", "name": "big"},
        "why": [CLOSED.to_dict()],
    }
    assert PlanView(FREE, NAMES, None, "").to_data() == FREE.to_dict()


def test_plan_apply_prints_the_plan_then_the_run_as_one_document() -> None:
    """-o json with --apply is one document a program reads, not two."""
    view = PlanView(FIT, NAMES, None, "")
    report = ApplyReport("fit ns/big", "none", (Outcome(1, MOVE, "done", "ok"),), NAMES)
    applied = PlanApplied(view, report)
    assert applied.to_data() == {"plan": view.to_data(), "apply": report.to_data()}
    assert applied.to_blocks() == [*view.to_blocks(), *report.to_blocks()]


def test_cards_are_named_by_index() -> None:
    """The tables name cards as an operator does (`node/gpu-N`, the node from the move), not by UUID."""
    node = PlanNode("a", (Card("GPU-a0", 0), Card("GPU-a1", 1)))
    assert Snapshot((node, PlanNode("b", (Card("GPU-b0", 0),))), ()).card_names() == NAMES


def test_a_plan_short_of_its_goal_says_why_on_stderr_and_leaves_stdout_the_plan(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`plan -o json > plan.json` exiting 1 said nothing where the script still looks; a reached goal says nothing."""
    two_pods = Snapshot(
        nodes=(gpu_node("a"),),
        pods=(placed("p1", "a", ["GPU-a-0"], 10 * GIB), placed("p2", "a", ["GPU-a-1"], 10 * GIB)),
    )
    read = SnapshotRead(two_pods, HAMI_DEFAULTS, (), node_marks([]))
    monkeypatch.setattr(_plan, "target", lambda *args, **kwargs: SimpleNamespace(kube=None))
    monkeypatch.setattr(snapshot_reads, "read_snapshot", lambda *args: read)
    assert run(["plan", "--free-cards", "2", "-o", "json"]) == 1
    short = capsys.readouterr()
    assert json.loads(short.out)["complete"] is False
    assert short.err == (
        "error: goal not reached: freed 1 of 2 card(s); the others cannot be emptied: a/gpu-1: ns/p1 fits no other "
        "card in use; see the nearest plan printed on stdout\n"
    )
    assert run(["plan", "--free-cards", "1", "-o", "json"]) == 0
    reached = capsys.readouterr()
    assert (json.loads(reached.out)["complete"], reached.err) == (True, "")
