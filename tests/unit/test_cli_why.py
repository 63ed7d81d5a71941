"""`why POD` as -o json|yaml and the table print it, and the pods it refuses before explaining anything."""

from __future__ import annotations

import pytest

from kubectl_hami_place.cli._errors import CliError
from kubectl_hami_place.cli._why import Why, require_gpu, why_blocks
from kubectl_hami_place.cli.output import Table, Text
from kubectl_hami_place.core.fit import FitReason
from kubectl_hami_place.core.planner import PlanPod
from kubectl_hami_place.core.planner.why import CardWhy, NodeWhy
from kubectl_hami_place.core.requests import CardRequest

FULL = CardWhy("GPU-a0", 0, False, FitReason.CardInsufficientMemory, "needs 40000 MiB, 8000 free")
ROOM = CardWhy("GPU-a1", 1, True, None, "")
CLOSED = NodeWhy("a", False, "NodeUnschedulable", "cordoned", (FULL, ROOM))
OPEN = NodeWhy("b", True, None, "", (CardWhy("GPU-b0", 0, True, None, ""),))
ALSO_OPEN = NodeWhy("c", True, None, "", ())
UNFIT = NodeWhy("d", False, "NodeFitFailed", "HAMi: 1/1 CardInsufficientMemory", (FULL,))


def test_the_answer_names_every_node_the_pod_fits_on_and_the_table_every_card() -> None:
    """The first line is what an operator reads: where the pod fits now, or that no node of how many checked does;
    the rows name the node once, with its reason, above its cards; a node kept out before HAMi's fit first says why
    in a row of its own (HAMi's own verdict is its cards')."""
    rows = (
        ("a (NodeUnschedulable)", "-", "no", "-", "cordoned"),
        ("", "gpu-0", "no", "CardInsufficientMemory", "needs 40000 MiB, 8000 free"),
        ("", "gpu-1", "yes", "-", ""),
        ("b", "gpu-0", "yes", "-", ""),
        ("d (NodeFitFailed)", "gpu-0", "no", "CardInsufficientMemory", "needs 40000 MiB, 8000 free"),
    )
    table = Table(columns=("Node", "GPU", "Fits", "Reason", "Detail"), rows=rows, empty="  no GPU nodes")
    assert why_blocks("ns/big", (CLOSED, OPEN, ALSO_OPEN, UNFIT)) == [
        Text(("ns/big fits today on b, c",), style="bold"),
        table,
    ]
    assert why_blocks("ns/big", (CLOSED,))[0] == Text(("ns/big fits no node today (1 GPU node(s) checked)",), "bold")
    assert Why("ns/big", (CLOSED, OPEN, ALSO_OPEN)).to_blocks() == why_blocks("ns/big", (CLOSED, OPEN, ALSO_OPEN))


def test_the_json_says_whether_any_node_takes_the_pod() -> None:
    """A script reads `fits` alone: true as soon as one node takes the pod, false only when none does."""
    assert Why("ns/big", (CLOSED, OPEN)).to_data() == {
        "pod": "ns/big",
        "fits": True,
        "nodes": [CLOSED.to_dict(), OPEN.to_dict()],
    }
    assert Why("ns/big", (CLOSED,)).to_data()["fits"] is False


def test_a_pod_that_asks_for_no_card_is_refused_with_what_to_name_instead() -> None:
    """Nothing explains why a CPU pod does not fit on GPU cards: the error says so rather than an empty table."""
    require_gpu(PlanPod("ns", "train", (None, CardRequest(1))))
    with pytest.raises(CliError) as caught:
        require_gpu(PlanPod("ns", "web", (None,)))
    assert caught.value.lines() == [
        "pod ns/web asks for no NVIDIA card (nvidia.com/gpu); name a pod that asks for GPUs"
    ]
