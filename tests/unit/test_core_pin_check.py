"""The one check of a pin on plain data: the placement, the whole pod, its share of a card, the fit now and later."""

from __future__ import annotations

import json
from typing import Any

from kubectl_hami_place.core.allocations import ContainerDevice
from kubectl_hami_place.core.cards import node_cards
from kubectl_hami_place.core.fit import FitReason
from kubectl_hami_place.core.pin_check import (
    PinReason,
    PinView,
    Scope,
    Workload,
    eviction_warnings,
    pending_warnings,
    pin_verdict,
    placement_problems,
    workload_from_pod,
    workload_from_request,
)
from kubectl_hami_place.core.placement import Placement, PlacementSpec, placement_from_object
from kubectl_hami_place.core.refs import parse_card_ref
from kubectl_hami_place.core.requests import card_request
from kubectl_hami_place.core.selectors import selector_from_dict
from kubectl_hami_place.core.usage import PodAllocation

NODE = "gpu-a100-0"
CARDS = [
    {"id": "GPU-a", "index": 0, "count": 10, "devmem": 40960, "devcore": 100, "type": "NVIDIA-A100", "health": True},
    {"id": "GPU-b", "index": 1, "count": 10, "devmem": 40960, "devcore": 100, "type": "NVIDIA-A100", "health": True},
    {"id": "GPU-c", "index": 2, "count": 10, "devmem": 40960, "devcore": 100, "type": "NVIDIA-A100", "health": False},
]
SMALL = workload_from_request(card_request(1, memreq=4096, coresreq=30), "flags", own_memory=True)


def node(annotations: dict[str, str] | None = None) -> dict[str, Any]:
    register = {"hami.io/node-nvidia-register": json.dumps(CARDS)}
    return {"metadata": {"name": NODE, "annotations": {**register, **(annotations or {})}}}


def spec(*devices: str, node_name: str = NODE) -> PlacementSpec:
    return PlacementSpec(
        req_id="req-12345",
        pod_selector=selector_from_dict({"matchLabels": {"app": "x"}}),
        node_name=node_name,
        gpu_devices=tuple(parse_card_ref(d) for d in devices),
    )


def view(allocations: list[PodAllocation] | None = None, **annotations: str) -> PinView:
    return PinView({NODE: node(annotations)}, allocations)


def victim() -> PodAllocation:
    """A pod holding 38000 MiB and 50% of gpu-0 (2960 MiB left)."""
    return PodAllocation("team", "old", "uid-old", NODE, "Running", ((ContainerDevice("GPU-a", "NVIDIA", 38000, 50),),))


def pod(*containers: dict[str, Any], init: tuple[dict[str, Any], ...] = ()) -> Workload:
    return workload_from_pod({"spec": {"containers": list(containers), "initContainers": list(init)}}, "the pod")


def gpu(name: str, **limits: Any) -> dict[str, Any]:
    return {"name": name, "resources": {"limits": {"nvidia.com/gpu": 1, **limits}}}


def test_fits_now_and_after_eviction() -> None:
    old = victim()
    result = pin_verdict(spec("gpu-0", "gpu-1"), view([old]), pod_of(2), evict=old)
    first, second = result.checks
    assert result.ok
    assert (first.fits_now, first.fits_after_eviction) == (False, True)
    assert first.message == "gpu-0 (GPU-a) has 2960 MiB free, the pod asks 4096 MiB; fits once team/old is evicted"
    assert (second.fits_now, second.fits_after_eviction) == (True, True)


def pod_of(cards: int) -> Workload:
    return workload_from_request(card_request(cards, memreq=4096, coresreq=30), "flags", own_memory=True)


def test_without_eviction_the_reason_now_is_a_problem_of_the_card() -> None:
    big = workload_from_request(card_request(1, memreq=8192, coresreq=10), "flags", own_memory=True)
    result = pin_verdict(spec("gpu-0"), view([victim()]), big)
    [problem] = result.problems
    assert (problem.reason, problem.scope, str(problem.ref)) == ("CardInsufficientMemory", Scope.Card, "gpu-0")
    assert problem.message == "gpu-0 (GPU-a) has 2960 MiB free, the pod asks 8192 MiB"


def test_the_placement_itself_node_cards_and_their_scopes() -> None:
    [gone] = pin_verdict(spec("gpu-0", node_name="nope"), view(), SMALL).problems
    assert (gone.reason, gone.scope, gone.message) == (PinReason.NodeNotFound, Scope.Placement, "node nope not found")
    [unknown] = pin_verdict(spec("gpu-7"), view(), SMALL).problems
    assert (unknown.reason, unknown.scope) == (FitReason.UnknownCard, Scope.Placement)
    assert unknown.message == "node gpu-a100-0 has no card with index 7; it has gpu-0, gpu-1, gpu-2"
    [twice] = pin_verdict(spec("gpu-0", "GPU-a"), view(), pod_of(2)).problems
    assert (twice.reason, twice.scope) == (PinReason.CardNamedTwice, Scope.Placement)
    bare = PinView({NODE: {"metadata": {"name": NODE}}})
    [no_register] = pin_verdict(spec("gpu-0"), bare, SMALL).problems
    assert (no_register.reason, no_register.scope) == (PinReason.NoRegister, Scope.Card)
    [sick] = pin_verdict(spec("gpu-2"), view(), SMALL).problems
    assert (sick.reason, sick.scope) == (FitReason.CardUnhealthy, Scope.Card)
    assert placement_problems(spec("gpu-2"), view()) == ()
    [cordoned] = pin_verdict(spec("gpu-1"), view(**{"hami.io/device-cordon": "GPU-b"}), SMALL).problems
    assert cordoned.reason == FitReason.CardCordoned


def test_the_pod_card_count_gpus_and_node_name() -> None:
    [count] = pin_verdict(spec("gpu-0", "gpu-1"), view(), pod(gpu("main"))).problems
    assert (count.reason, count.scope) == (PinReason.CardCountMismatch, Scope.Pod)
    assert count.message == "container main asks 1 card(s) (nvidia.com/gpu) but the placement names 2"
    [none] = pin_verdict(spec("gpu-0"), view(), pod({"name": "web"})).problems
    assert none.reason == PinReason.NoGpuRequest
    direct = workload_from_pod({"spec": {"nodeName": "n", "containers": [gpu("main")]}}, "the pod")
    assert pin_verdict(spec("gpu-0"), view(), direct).problems[0].reason == PinReason.NodeNameSet
    running = {"spec": {"nodeName": "n", "containers": [gpu("main")]}}
    assert pin_verdict(spec("gpu-0"), view(), workload_from_pod(running, "pod old", template=True)).ok
    broken = pod({"name": "main", "resources": {"limits": {"nvidia.com/gpu": "lots"}}})
    assert pin_verdict(spec("gpu-0"), view(), broken).problems[0].reason == PinReason.InvalidGpuRequest


def test_a_pod_asking_cards_with_a_privileged_container_is_refused_as_hami_denies_it() -> None:
    side = {"name": "side", "securityContext": {"privileged": True}}
    [refused] = pin_verdict(spec("gpu-0"), view(), pod(gpu("main"), side)).problems
    assert (refused.reason, refused.scope) == (PinReason.PrivilegedContainer, Scope.Pod)
    assert refused.message.startswith("container side is privileged")
    init = {"spec": {"initContainers": [{"name": "setup", "securityContext": {"privileged": True}}]}}
    init["spec"]["containers"] = [gpu("main")]
    assert (
        pin_verdict(spec("gpu-0"), view(), workload_from_pod(init, "the pod"))
        .problems[0]
        .message.startswith("container setup is privileged")
    )
    unprivileged = {"name": "side", "securityContext": {"privileged": False}}
    assert pin_verdict(spec("gpu-0"), view(), pod(gpu("main"), unprivileged)).ok


def test_the_whole_pod_is_fitted_counting_earlier_containers() -> None:
    """Two whole-card containers each fit an empty card alone, but not together: HAMi counts the first."""
    result = pin_verdict(spec("gpu-1"), view([]), pod(gpu("a"), {"name": "side"}, gpu("b")))
    [problem] = result.problems
    assert problem.reason == FitReason.CardInsufficientMemory
    assert problem.message == "container b: gpu-1 (GPU-b) has 0 MiB free, the pod asks 40960 MiB"


def test_init_containers_are_fitted_alone_and_app_containers_summed() -> None:
    def mem(name: str, mib: int) -> dict[str, Any]:
        return gpu(name, **{"nvidia.com/gpumem": mib, "nvidia.com/gpucores": 10})

    fits = pin_verdict(spec("gpu-1"), view([]), pod(mem("a", 15000), mem("b", 15000), init=(mem("i", 30000),)))
    assert fits.ok and fits.checks[0].memory_mib == 30000
    three = pod(mem("a", 15000), mem("b", 15000), mem("c", 15000), init=(mem("i", 30000),))
    result = pin_verdict(spec("gpu-1"), view([]), three)
    assert result.checks[0].memory_mib == 45000
    assert result.problems[0].message.startswith("container c: ")


def test_a_share_is_split_between_the_app_containers_and_given_whole_to_init_containers() -> None:
    result = pin_verdict(spec("gpu-0/70"), view([]), pod(gpu("a"), gpu("b"), gpu("c"), init=(gpu("i"),)))
    assert result.ok
    assert [(p.position, p.percent, p.drop_cores) for p in result.patches] == [
        (0, 70, True),
        (1, 24, True),
        (2, 23, True),
        (3, 23, True),
    ]
    assert result.checks[0].memory_mib == 40960 * 70 // 100
    assert result.checks[0].request.coresreq == 0


def test_a_share_too_small_to_split_or_smaller_than_the_ask() -> None:
    [small] = pin_verdict(spec("gpu-0/1"), view([]), pod(gpu("a"), gpu("b"))).problems
    assert (small.reason, small.scope) == (PinReason.ShareTooSmall, Scope.Pod)
    asks = workload_from_request(card_request(1, memreq=8192), "flags", own_memory=True)
    [over] = pin_verdict(spec("gpu-1/10"), view([]), asks).problems
    assert over.reason == FitReason.RequestExceedsPercent
    assert over.message == "gpu-1 (GPU-b): the pod asks 8192 MiB, more than 10% of the card (4096 MiB)"


def test_a_pod_asking_only_cards_gets_no_cores_from_a_share_as_hami_will_count_it() -> None:
    """HAMi's webhook adds 100 cores only to an exclusive container; a part of a card is not exclusive."""
    only_cards = pod(gpu("main"))
    shared = pin_verdict(spec("gpu-0/50"), view([]), only_cards)
    assert shared.checks[0].request.coresreq == 0
    assert shared.patches[0].drop_cores
    whole = pin_verdict(spec("gpu-0"), view([]), only_cards)
    assert whole.checks[0].request.coresreq == 100 and whole.patches == ()
    all_of_it = pin_verdict(spec("gpu-0/100"), view([]), only_cards)
    assert all_of_it.checks[0].request.coresreq == 100 and not all_of_it.patches[0].drop_cores


def test_a_shared_card_in_use_takes_a_pod_asking_only_cards_with_a_share() -> None:
    """The card already holds a pod: the whole card cannot be had, a 50% share with no cores fits."""
    tenant = PodAllocation("t", "t", "u", NODE, "Running", ((ContainerDevice("GPU-a", "NVIDIA", 10000, 20),),))
    assert pin_verdict(spec("gpu-0/50"), view([tenant]), pod(gpu("main"))).ok
    [conflict] = pin_verdict(spec("gpu-0"), view([tenant]), pod(gpu("main"))).problems
    assert conflict.reason == FitReason.CardInsufficientMemory


def test_pending_placements_that_may_take_the_same_pod_or_card_are_warned_about() -> None:
    cards = tuple(node_cards(node()))
    mine = spec("gpu-0")

    def other(name: str, selector: dict[str, str], device: str, phase: str = "Pending") -> Placement:
        return placement_from_object(
            {
                "metadata": {"name": name, "namespace": "team"},
                "spec": {
                    "reqID": f"req-{name}",
                    "podSelector": {"matchLabels": selector},
                    "nodeName": NODE,
                    "gpuDevices": [device],
                },
                "status": {"phase": phase},
            }
        )

    assert pending_warnings(mine, "team", "me", [other("me", {"app": "x"}, "gpu-0")], cards) == []
    assert pending_warnings(mine, "team", "me", [other("done", {"app": "x"}, "gpu-0", "Consumed")], cards) == []
    [overlap, shared] = pending_warnings(mine, "team", "me", [other("twin", {"app": "x"}, "gpu-0")], cards)
    assert overlap.startswith("placement twin (Pending, -l app=x) may match the same pods as -l app=x")
    assert shared.startswith(f"placement team/twin (Pending) also pins a pod to gpu-0 on {NODE}")
    assert pending_warnings(mine, "team", "me", [other("apart", {"app": "y"}, "gpu-1")], cards) == []


def test_evicting_a_pod_that_frees_nothing_on_the_node_is_warned_about() -> None:
    assert eviction_warnings({"metadata": {"name": "idle"}}, None, NODE) == [
        "pod idle holds no HAMi card (no hami.io/vgpu-devices-allocated); evicting it frees no card"
    ]
    elsewhere = PodAllocation("team", "far", "u", "gpu-b", "Running", ())
    assert eviction_warnings({"metadata": {"name": "far"}}, elsewhere, NODE) == [
        f"pod far runs on gpu-b, not on {NODE}; evicting it frees nothing there"
    ]
    assert eviction_warnings({"metadata": {"name": "old"}}, victim(), NODE) == []


def test_a_pods_own_card_annotations_and_ours_do_not_steer_its_verdict() -> None:
    annotations = {"nvidia.com/use-gpuuuid": "GPU-z", "scheduling.hami.placement.com/claim": "t", "team": "ml"}
    workload = workload_from_pod({"metadata": {"annotations": annotations}, "spec": {"containers": [gpu("m")]}}, "p")
    assert dict(workload.annotations) == {"team": "ml"}
    assert pin_verdict(spec("gpu-0"), view([]), workload).ok
