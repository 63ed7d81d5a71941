"""How pin words a refusal and presents a created placement, from the core's verdicts on plain data."""

from __future__ import annotations

from kubectl_hami_place.cli._placing import Checked, PlacementResult, RequestSource, refusal_line
from kubectl_hami_place.cli.output import formatter_for
from kubectl_hami_place.core.cards import Card
from kubectl_hami_place.core.check import check_pin
from kubectl_hami_place.core.refs import parse_card_ref
from kubectl_hami_place.core.requests import card_request
from kubectl_hami_place.core.usage import CardUsage

CARDS = (
    Card(uuid="GPU-a", index=0, count=10, devmem=40960, devcore=100, type="NVIDIA-A100", health=True),
    Card(uuid="GPU-b", index=1, count=10, devmem=40960, devcore=100, type="NVIDIA-A100", health=True),
    Card(uuid="GPU-c", index=2, count=10, devmem=40960, devcore=100, type="NVIDIA-A100", health=False),
)
USAGE = {"GPU-b": CardUsage(uuid="GPU-b", used_slots=1, used_mem=38912, used_cores=20)}


def checks(*refs: str, memory: int = 4096) -> list:
    return check_pin(
        CARDS, USAGE, [parse_card_ref(r) for r in refs], card_request(len(refs), memory, None, 10), node="gpu-a100-0"
    )


def test_memory_refusal_names_card_node_reason_numbers_and_what_to_do() -> None:
    [check] = checks("gpu-1")
    assert refusal_line(check, "gpu-a100-0", None) == (
        "gpu-1 on gpu-a100-0: CardInsufficientMemory: 2048 MiB free, the pod asks 4096 MiB; "
        "pick another card (kubectl hami-place status gpu-a100-0) or add --evict POD"
    )
    assert refusal_line(check, "gpu-a100-0", "old").endswith(
        "it does not fit even once old is evicted; pick another card (kubectl hami-place status gpu-a100-0) "
        "or evict another pod"
    )


def test_unknown_and_unhealthy_cards() -> None:
    [unknown] = checks("gpu-9")
    assert refusal_line(unknown, "n", None) == (
        "gpu-9 on n: UnknownCard: node gpu-a100-0 has no card with index 9; it has gpu-0, gpu-1, gpu-2; "
        "list the node's cards (kubectl hami-place status n)"
    )
    [sick] = checks("gpu-2")
    assert refusal_line(sick, "n", None) == (
        "gpu-2 on n: CardUnhealthy: the card is unhealthy in the node's register; "
        "pick another card (kubectl hami-place status n)"
    )


def test_percent_smaller_than_the_request() -> None:
    [check] = check_pin(CARDS, {}, [parse_card_ref("gpu-0/5")], card_request(1, 4096, None, 0), node="n")
    assert refusal_line(check, "n", None).startswith("gpu-0/5 on n: RequestExceedsPercent: ")
    assert refusal_line(check, "n", None).endswith("; raise the percent in --gpu or lower the pod's nvidia.com/gpumem")


def test_created_placement_shows_what_the_pod_gets() -> None:
    obj = {
        "apiVersion": "scheduling.hami.placement.com/v1",
        "kind": "HamiPodPlacement",
        "metadata": {"name": "pin-abc", "namespace": "team-a"},
        "spec": {
            "reqID": "abcdefgh",
            "podSelector": {"matchLabels": {"app": "x"}},
            "nodeName": "gpu-a100-0",
            "gpuDevices": ["gpu-0/50"],
        },
    }
    checked = Checked(
        namespace="team-a",
        obj=obj,
        node="gpu-a100-0",
        checks=tuple(check_pin(CARDS, {}, [parse_card_ref("gpu-0/50")], card_request(1, 0, None, 10), node="n")),
        request=RequestSource((card_request(1, 0, None, 10),), "--request-memory/--request-cores"),
        evict=None,
        warnings=(),
    )
    text = formatter_for("table", color=False).render(PlacementResult(checked, "none", obj))
    lines = text.splitlines()
    assert lines[0] == "hamipodplacement team-a/pin-abc created (reqID abcdefgh)"
    assert lines[1].startswith("The next pod matching -l app=x in namespace team-a goes to node gpu-a100-0")
    [row] = [line for line in lines if line.startswith("gpu-0/50")]
    assert row.split() == ["gpu-0/50", "GPU-a", "NVIDIA-A100", "20480", "MiB", "10%", "fits", "now"]
    data = PlacementResult(checked, "client", obj).to_data()
    assert data["dryRun"] == "client" and data["placement"] == obj
    assert data["cards"][0]["memoryMiB"] == 20480


def test_request_bigger_than_the_card_says_so() -> None:
    [check] = checks("gpu-0", memory=50000)
    assert refusal_line(check, "n", None) == (
        "gpu-0 on n: CardInsufficientMemory: 40960 MiB free, the pod asks 50000 MiB; "
        "the card has 40960 MiB in all; pick a bigger card or ask for less memory"
    )
