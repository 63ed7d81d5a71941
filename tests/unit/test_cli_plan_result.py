"""`plan` as -o json|yaml and the table print it, with and without --for, and with --apply's run after it."""

from __future__ import annotations

from test_cli_why import CLOSED, OPEN

from kubectl_hami_place.cli._moves_runner import ApplyReport, Outcome
from kubectl_hami_place.cli._plan import PlanApplied, PlanView
from kubectl_hami_place.cli._why import why_blocks
from kubectl_hami_place.cli.output import Table, Text
from kubectl_hami_place.core.cards import Card
from kubectl_hami_place.core.planner import Move, Plan, PlanNode, Snapshot, Summary

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
