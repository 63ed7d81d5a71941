"""How pin words the pin verdict's problems and presents a created placement, on plain data."""

from __future__ import annotations

import json
from dataclasses import replace

from kubectl_hami_place.cli._pin_check import refusal_lines
from kubectl_hami_place.cli._pin_report import Checked, PlacementResult, refusal_line
from kubectl_hami_place.cli.output import Table, Text, formatter_for
from kubectl_hami_place.core.allocations import ContainerDevice
from kubectl_hami_place.core.pin_check import PinVerdict, PinView, pin_verdict, workload_from_pod, workload_from_request
from kubectl_hami_place.core.placement import PlacementSpec
from kubectl_hami_place.core.refs import parse_card_ref
from kubectl_hami_place.core.requests import card_request
from kubectl_hami_place.core.selectors import selector_from_dict
from kubectl_hami_place.core.usage import PodAllocation
from kubectl_hami_place.kube.errors import PinRefused

NODE = "gpu-a100-0"
REGISTER = [
    {"id": f"GPU-{c}", "index": i, "count": 10, "devmem": 40960, "devcore": 100, "type": "NVIDIA-A100", "health": i < 2}
    for i, c in enumerate("abc")
]
TENANT = PodAllocation("t", "t", "u", NODE, "Running", ((ContainerDevice("GPU-b", "NVIDIA", 38912, 20),),))
VIEW = PinView(
    {NODE: {"metadata": {"name": NODE, "annotations": {"hami.io/node-nvidia-register": json.dumps(REGISTER)}}}},
    (TENANT,),
)


def verdict(*refs: str, memory: int = 4096, cores: int = 10) -> PinVerdict:
    spec = PlacementSpec(
        req_id="req-12345",
        pod_selector=selector_from_dict({"matchLabels": {"app": "x"}}),
        node_name=NODE,
        gpu_devices=tuple(parse_card_ref(r) for r in refs),
    )
    request = card_request(len(refs), memory, None, cores)
    return pin_verdict(spec, VIEW, workload_from_request(request, "flags", own_memory=memory > 0))


def line(pin: PinVerdict, evict: str | None = None, source: str = "flags") -> str:
    [problem] = pin.problems
    return refusal_line(problem, pin, source, evict)


def test_memory_refusal_names_card_node_reason_numbers_and_what_to_do() -> None:
    pin = verdict("gpu-1")
    assert line(pin) == (
        "gpu-1 on gpu-a100-0: CardInsufficientMemory: 2048 MiB free, the pod asks 4096 MiB; "
        "pick another card (kubectl hami-place status gpu-a100-0) or add --evict POD"
    )
    assert line(pin, "old").endswith(
        "it does not fit even once old is evicted; pick another card (kubectl hami-place status gpu-a100-0) "
        "or evict another pod"
    )


def test_unknown_and_unhealthy_cards() -> None:
    assert line(verdict("gpu-9")) == (
        "gpu-9 on gpu-a100-0: UnknownCard: node gpu-a100-0 has no card with index 9; it has gpu-0, gpu-1, gpu-2; "
        "list the node's cards (kubectl hami-place status gpu-a100-0)"
    )
    assert line(verdict("gpu-2")) == (
        "gpu-2 on gpu-a100-0: CardUnhealthy: the card is unhealthy in the node's register; "
        "pick another card (kubectl hami-place status gpu-a100-0)"
    )


def test_percent_smaller_than_the_request() -> None:
    text = line(verdict("gpu-0/5"))
    assert text.startswith("gpu-0/5 on gpu-a100-0: RequestExceedsPercent: the pod asks 4096 MiB, more than 5%")
    assert text.endswith("; raise the percent in --gpu or lower the pod's nvidia.com/gpumem")


def two_cards_on_one() -> PinVerdict:
    """A Deployment's pod asking two cards pinned to one: a problem of the pod, not of the card."""
    spec = PlacementSpec(
        req_id="req-12345",
        pod_selector=selector_from_dict({"matchLabels": {"app": "x"}}),
        node_name=NODE,
        gpu_devices=(parse_card_ref("gpu-0"),),
    )
    template = {"spec": {"containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": 2}}}]}}
    return pin_verdict(spec, VIEW, workload_from_pod(template, "Deployment trainer"))


def test_a_pod_problem_names_where_the_request_came_from() -> None:
    pin = two_cards_on_one()
    assert line(pin, source="Deployment trainer") == (
        "Deployment trainer: container main asks 2 card(s) (nvidia.com/gpu) but the placement names 1; "
        "give one --gpu per card"
    )


def test_a_template_with_a_privileged_container_is_refused_with_what_to_change() -> None:
    spec = PlacementSpec(
        req_id="req-12345",
        pod_selector=selector_from_dict({"matchLabels": {"app": "x"}}),
        node_name=NODE,
        gpu_devices=(parse_card_ref("gpu-0"),),
    )
    main = {"name": "main", "resources": {"limits": {"nvidia.com/gpu": 1}}, "securityContext": {"privileged": True}}
    pin = pin_verdict(
        spec, VIEW, workload_from_pod({"spec": {"containers": [main]}}, "Deployment trainer", template=True)
    )
    assert line(pin, source="Deployment trainer") == (
        "Deployment trainer: container main is privileged: HAMi's webhook denies a pod asking for cards with a "
        "privileged container; drop securityContext.privileged from the pod's containers"
    )


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
    pin = verdict("gpu-0/50", memory=0)
    checked = Checked(
        namespace="team-a",
        obj=obj,
        node="gpu-a100-0",
        checks=pin.checks,
        workload=workload_from_request(
            card_request(1, 0, None, 10), "--request-memory/--request-cores", own_memory=False
        ),
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
    assert line(verdict("gpu-0", memory=50000)) == (
        "gpu-0 on gpu-a100-0: CardInsufficientMemory: 40960 MiB free, the pod asks 50000 MiB; "
        "the card has 40960 MiB in all; pick a bigger card or ask for less memory"
    )


def test_the_refusals_of_round_three_say_what_to_do() -> None:
    """numa-bind across NUMA nodes, unreadable score weights, a MIG card, no allocatable cards (issue 24)."""
    cards = [
        {**REGISTER[0], "numa": 0},
        {**REGISTER[1], "id": "GPU-m", "numa": 1, "mode": "mig"},
        {**REGISTER[0], "id": "GPU-n", "index": 2, "numa": 1},
    ]
    node = {"metadata": {"name": NODE, "annotations": {"hami.io/node-nvidia-register": json.dumps(cards)}}}
    view = PinView({NODE: node}, ())

    def refused(refs: tuple[str, ...], annotations: dict[str, str], status: dict | None = None) -> str:
        spec = PlacementSpec(
            req_id="req-12345",
            pod_selector=selector_from_dict({"matchLabels": {"app": "x"}}),
            node_name=NODE,
            gpu_devices=tuple(parse_card_ref(r) for r in refs),
        )
        limits = {"nvidia.com/gpu": str(len(refs))}
        pod = {
            "metadata": {"annotations": annotations},
            "spec": {"containers": [{"name": "c", "resources": {"limits": limits}}]},
        }
        nodes = PinView({NODE: {**node, "status": status}}, ()) if status else view
        return line(pin_verdict(spec, nodes, workload_from_pod(pod, "Deployment web")), source="Deployment web")

    numa = refused(("gpu-0", "gpu-2"), {"nvidia.com/numa-bind": "true"})
    assert numa.startswith("Deployment web: the pod asks nvidia.com/numa-bind: true but the placement names gpu-0 on")
    assert numa.endswith(
        "(AllocatedCardsInsufficientRequest, NumaNotFit); "
        "name cards of one NUMA node (kubectl hami-place status shows each card's)"
    )
    weights = refused(("gpu-0",), {"hami.io/device-scoring-weights": "slot=1"})
    assert weights.startswith('Deployment web: invalid hami.io/device-scoring-weights annotation "slot=1"')
    assert weights.endswith("; fix or remove the pod's hami.io/device-scoring-weights")
    mig = refused(("gpu-1",), {})
    assert mig.startswith("gpu-1 on gpu-a100-0: CardMigMode: ") and mig.endswith(
        "; name a card in hami-core or mps mode"
    )
    empty = refused(("gpu-0",), {}, {"allocatable": {"nvidia.com/gpu": "0"}})
    assert empty.startswith("node gpu-a100-0 has no allocatable nvidia.com/gpu")
    assert empty.endswith("; wait until HAMi's device plugin serves the node again, or pin to another node")


def test_a_request_exactly_the_cards_size_that_does_not_fit_asks_for_an_eviction_not_a_bigger_card() -> None:
    """A pod asking a whole 40 GiB card fits it once the card's tenant is gone: only a request above the card's size
    needs a bigger card."""
    assert line(verdict("gpu-1", memory=40960)) == (
        "gpu-1 on gpu-a100-0: CardInsufficientMemory: 2048 MiB free, the pod asks 40960 MiB; "
        "pick another card (kubectl hami-place status gpu-a100-0) or add --evict POD"
    )


def test_a_pin_with_an_eviction_reports_each_card_and_the_pod_to_evict() -> None:
    """The user decides from this report whether to go on: which card fits only after the eviction, which pod is
    evicted (now, or once a pod claims the placement), and every field scripts read from -o json."""
    spec = PlacementSpec(
        req_id="req-12345",
        pod_selector=selector_from_dict({"matchLabels": {"app": "x"}}),
        node_name=NODE,
        gpu_devices=(parse_card_ref("gpu-0"), parse_card_ref("gpu-1")),
    )
    workload = workload_from_request(card_request(2, 4096, None, 10), "Deployment trainer", own_memory=True)
    pin = pin_verdict(spec, VIEW, workload, evict=TENANT)
    obj = {
        "metadata": {"name": "pin-abc", "namespace": "team-a"},
        "spec": {"reqID": "req-12345", "podSelector": {"matchLabels": {"app": "x"}}, "evictPod": "t"},
    }
    checked = Checked("team-a", obj, NODE, pin.checks, workload, evict="t", warnings=("w1",))
    card_rows = [
        {
            "ref": "gpu-0",
            "uuid": "GPU-a",
            "index": 0,
            "model": "NVIDIA-A100",
            "memoryMiB": 4096,
            "cores": 10,
            "fitsNow": True,
            "fitsAfterEviction": True,
        },
        {
            "ref": "gpu-1",
            "uuid": "GPU-b",
            "index": 1,
            "model": "NVIDIA-A100",
            "memoryMiB": 4096,
            "cores": 10,
            "fitsNow": False,
            "fitsAfterEviction": True,
        },
    ]
    assert PlacementResult(checked, "server", obj, "t").to_data() == {
        "placement": obj,
        "dryRun": "server",
        "request": "Deployment trainer",
        "cards": card_rows,
        "evicted": "t",
        "warnings": ["w1"],
    }
    header = (
        "The next pod matching -l app=x in namespace team-a goes to node gpu-a100-0 "
        "(its request from Deployment trainer):"
    )
    table = Table(
        columns=("Card", "UUID", "Model", "Memory", "Cores", "Verdict"),
        rows=(
            ("gpu-0", "GPU-a", "NVIDIA-A100", "4096 MiB", "10%", "fits now"),
            ("gpu-1", "GPU-b", "NVIDIA-A100", "4096 MiB", "10%", "fits once the evicted pod is gone"),
        ),
    )
    assert PlacementResult(checked, "none", obj).to_blocks() == [
        Text(("hamipodplacement team-a/pin-abc created (reqID req-12345)", header)),
        table,
        Text(("Pod t will be evicted once a pod claims the placement.",)),
    ]
    assert PlacementResult(checked, "server", obj, "t").to_blocks() == [
        Text(("hamipodplacement team-a/pin-abc created (server dry run) (reqID req-12345)", header)),
        table,
        Text(("pod team-a/t evicted (server dry run)",)),
    ]
    assert PlacementResult(replace(checked, evict=None), "none", obj).to_blocks()[2:] == []


def test_a_refused_pin_says_each_problem_once() -> None:
    """Each refused card gets its own line, in the order the cards were named; the same line twice (one problem found
    twice) is said once; the pod being evicted and the source of a pod problem are named."""
    pin = verdict("gpu-2", "gpu-1", memory=30000)
    assert refusal_lines(PinRefused(pin, "flags", None)) == [
        "gpu-2 on gpu-a100-0: CardUnhealthy: the card is unhealthy in the node's register; "
        "pick another card (kubectl hami-place status gpu-a100-0)",
        "gpu-1 on gpu-a100-0: CardInsufficientMemory: 2048 MiB free, the pod asks 30000 MiB; "
        "pick another card (kubectl hami-place status gpu-a100-0) or add --evict POD",
    ]
    twice = replace(pin, problems=(pin.problems[1], pin.problems[1]))
    assert refusal_lines(PinRefused(twice, "Deployment web", "t")) == [
        "gpu-1 on gpu-a100-0: CardInsufficientMemory: 2048 MiB free, the pod asks 30000 MiB; "
        "it does not fit even once t is evicted; pick another card (kubectl hami-place status gpu-a100-0) "
        "or evict another pod",
    ]
    pod_problem = two_cards_on_one()
    assert refusal_lines(PinRefused(pod_problem, "Deployment trainer", None)) == [
        "Deployment trainer: container main asks 2 card(s) (nvidia.com/gpu) but the placement names 1; "
        "give one --gpu per card"
    ]
