"""The one check of a pin on plain data: the placement, the whole pod, its share of a card, the fit now and later."""

from __future__ import annotations

import json
from typing import Any

from kubectl_hami_place.core.allocations import ContainerDevice
from kubectl_hami_place.core.cards import node_cards
from kubectl_hami_place.core.fit import FitReason
from kubectl_hami_place.core.hami_config import HAMI_DEFAULTS, HamiConfig
from kubectl_hami_place.core.node_resources import Resources
from kubectl_hami_place.core.pin_check import (
    ContainerPatch,
    GpuContainer,
    PinReason,
    PinVerdict,
    PinView,
    Problem,
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
from kubectl_hami_place.core.requests import CardRequest, card_request
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


BINPACK = HAMI_DEFAULTS.with_policy("binpack")
"""A cluster whose HAMi is not on the defaults: a verdict must carry it, not HAMI_DEFAULTS."""


def pod_on(config: HamiConfig, *containers: dict[str, Any], annotations: dict[str, str] | None = None) -> Workload:
    pod_object = {"metadata": {"annotations": annotations or {}}, "spec": {"containers": list(containers)}}
    return workload_from_pod(pod_object, "the pod", config=config)


def node_with(*cards: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """The node NODE with its own register (and e.g. a status)."""
    annotations = {"hami.io/node-nvidia-register": json.dumps(list(cards))}
    return {"metadata": {"name": NODE, "annotations": annotations}, **extra}


def test_each_refusal_is_the_whole_verdict_with_the_node_its_cards_and_the_clusters_config() -> None:
    """The CLI's report and the webhook's patch read the node, the cards and HAMi's resource names off the verdict
    whatever stopped it: a refusal must carry them, not a blank node or the default config."""
    a, b, _ = node_cards(node())
    privileged = pod_on(BINPACK, gpu("main"), {"name": "side", "securityContext": {"privileged": True}})
    assert pin_verdict(spec("gpu-0"), view(), privileged) == PinVerdict(
        NODE,
        problems=(
            Problem(
                PinReason.PrivilegedContainer,
                "container side is privileged: HAMi's webhook denies a pod asking for cards with a privileged "
                "container",
                Scope.Pod,
            ),
        ),
        config=BINPACK,
    )
    one = pod_on(BINPACK, gpu("main"))
    assert pin_verdict(spec(), view(), one) == PinVerdict(
        NODE,
        problems=(Problem(PinReason.InvalidSpec, "gpuDevices is empty; name at least one card", Scope.Placement),),
        config=BINPACK,
    )
    unserved = PinView({NODE: {**node(), "status": {"allocatable": {"nvidia.com/gpu": "0"}}}})
    assert pin_verdict(spec("gpu-0"), unserved, one) == PinVerdict(
        NODE,
        cards=(a,),
        problems=(
            Problem(
                PinReason.NoAllocatableGpu,
                f"node {NODE} has no allocatable nvidia.com/gpu (HAMi's device plugin is not serving it): HAMi drops "
                "and re-adds the node as its handshake expires and the kubelet refuses a pod asking cards there",
                Scope.Card,
            ),
        ),
        config=BINPACK,
    )
    assert pin_verdict(spec("gpu-0", "gpu-1"), view(), one) == PinVerdict(
        NODE,
        cards=(a, b),
        problems=(
            Problem(
                PinReason.CardCountMismatch,
                "container main asks 1 card(s) (nvidia.com/gpu) but the placement names 2",
                Scope.Pod,
            ),
        ),
        config=BINPACK,
    )
    assert pin_verdict(spec("gpu-0/1"), view([]), pod_on(BINPACK, gpu("a"), gpu("b"))) == PinVerdict(
        NODE,
        cards=(a,),
        problems=(
            Problem(
                PinReason.ShareTooSmall,
                "the pod's share is 1% of each card, 1% once the containers that ask their own memory are counted: "
                "too little to split among containers a, b (at least 1% each)",
                Scope.Pod,
            ),
        ),
        config=BINPACK,
    )


def test_numa_bind_refusals_are_whole_verdicts_naming_every_card_and_numa_node() -> None:
    """HAMi refuses these pods on every try: the message must name each card's NUMA node so the user can pick."""
    fourth = {**CARDS[0], "id": "GPU-d", "index": 3}
    numa = [{**card, "numa": position % 2, "health": True} for position, card in enumerate([*CARDS, fourth])]
    nodes = PinView({NODE: node_with(*numa)})
    a, b, _, d = node_cards(nodes.nodes[NODE])
    bind = {"nvidia.com/numa-bind": "true"}
    two = pod_on(BINPACK, gpu("main", **{"nvidia.com/gpu": 2}), annotations=bind)
    assert pin_verdict(spec("gpu-0", "gpu-1"), nodes, two) == PinVerdict(
        NODE,
        cards=(a, b),
        problems=(
            Problem(
                FitReason.NumaNotFit,
                "the pod asks nvidia.com/numa-bind: true but the placement names gpu-0 on NUMA node 0, gpu-1 on NUMA "
                "node 1; HAMi refuses it on every try (AllocatedCardsInsufficientRequest, NumaNotFit)",
                Scope.Pod,
            ),
        ),
        config=BINPACK,
    )
    topology = HAMI_DEFAULTS.with_policy("topology-aware")
    two_there = pod_on(topology, gpu("main", **{"nvidia.com/gpu": 2}), annotations=bind)
    assert pin_verdict(spec("gpu-1", "gpu-3"), nodes, two_there) == PinVerdict(
        NODE,
        cards=(b, d),
        problems=(
            Problem(
                FitReason.NumaNotFit,
                "the pod asks nvidia.com/numa-bind: true under the topology-aware policy, where HAMi only gives cards "
                "of NUMA node 0 (the lowest of the node's usable cards), but the placement names gpu-1 on NUMA node 1, "
                "gpu-3 on NUMA node 1; HAMi refuses it on every try",
                Scope.Pod,
            ),
        ),
        config=topology,
    )


def test_the_placements_own_problems_name_the_reference_and_the_card() -> None:
    """The reconciler fails a placement on these and its status names the entry and the card: none may be blank."""
    assert placement_problems(spec(), view()) == (
        Problem(PinReason.InvalidSpec, "gpuDevices is empty; name at least one card", Scope.Placement),
    )
    a = node_cards(node())[0]
    assert placement_problems(spec("gpu-0", "GPU-a"), view()) == (
        Problem(
            PinReason.CardNamedTwice,
            f"GPU-a names gpu-0 (GPU-a) on node {NODE}, which is already in the list",
            Scope.Placement,
            parse_card_ref("GPU-a"),
            a,
        ),
    )
    mig_node = node_with({**CARDS[0], "id": "GPU-m", "mode": "mig"})
    [mig] = node_cards(mig_node)
    assert placement_problems(spec("gpu-0"), PinView({NODE: mig_node})) == (
        Problem(
            FitReason.CardMigMode,
            "gpu-0 (GPU-m) is in MIG mode: HAMi fits it by its MIG profiles and free placements "
            "(CardMigTopologyInfeasible) and calls it unhealthy when a pod holds it without a MIG reservation, which "
            "hami-place does not model",
            Scope.Placement,
            parse_card_ref("gpu-0"),
            mig,
        ),
    )


def test_the_pods_own_problems_are_whole_and_about_the_pod() -> None:
    """A problem of the pod lets the webhook try the placement with the next pod: its scope must say Pod."""
    broken = pod({"name": "main", "resources": {"limits": {"nvidia.com/gpu": "lots"}}})
    assert pin_verdict(spec("gpu-0"), view(), broken).problems == (
        Problem(
            PinReason.InvalidGpuRequest,
            "container main: nvidia.com/gpu 'lots' is not a quantity such as 1, 3k or 1Gi",
            Scope.Pod,
        ),
    )
    direct = workload_from_pod({"spec": {"nodeName": "n", "containers": [gpu("main")]}}, "the pod")
    assert pin_verdict(spec("gpu-0"), view(), direct).problems == (
        Problem(PinReason.NodeNameSet, "the pod sets spec.nodeName n, which bypasses the scheduler", Scope.Pod),
    )
    assert pin_verdict(spec("gpu-0"), view(), pod({"name": "web"})).problems == (
        Problem(PinReason.NoGpuRequest, "no container asks for nvidia.com/gpu", Scope.Pod),
    )
    asks = workload_from_request(card_request(1, memreq=8192), "flags", own_memory=True)
    b = node_cards(node())[1]
    assert pin_verdict(spec("gpu-1/10"), view([]), asks).problems == (
        Problem(
            FitReason.RequestExceedsPercent,
            "gpu-1 (GPU-b): the pod asks 8192 MiB, more than 10% of the card (4096 MiB)",
            Scope.Pod,
            parse_card_ref("gpu-1/10"),
            b,
        ),
    )


def test_a_card_too_small_when_its_usage_is_unknown_is_a_problem_of_the_pod() -> None:
    """Without the allocations the card is taken as empty: a pod that does not fit even then will never fit it, and
    another pod may, so the placement waits for one instead of blaming the card."""
    huge = workload_from_request(card_request(1, memreq=50000, coresreq=10), "flags", own_memory=True)
    a = node_cards(node())[0]
    assert pin_verdict(spec("gpu-0"), view(), huge).problems == (
        Problem(
            FitReason.CardInsufficientMemory,
            "gpu-0 (GPU-a) has 40960 MiB free, the pod asks 50000 MiB",
            Scope.Pod,
            parse_card_ref("gpu-0"),
            a,
        ),
    )


def test_only_the_evicted_pods_share_on_this_node_is_counted_as_freed() -> None:
    """Evicting a pod frees its share and nothing more: another pod's share on the card still counts, a pod on
    another node frees nothing here, and one there naming this card's UUID takes nothing from it."""
    big = workload_from_request(card_request(1, memreq=30000, coresreq=10), "flags", own_memory=True)
    old = victim()
    tenant = PodAllocation("t", "t", "u", NODE, "Running", ((ContainerDevice("GPU-a", "NVIDIA", 20000, 10),),))
    [check] = pin_verdict(spec("gpu-0"), view([tenant, old]), big, evict=old).checks
    assert (check.fits_now, check.fits_after_eviction, check.reason, check.message) == (
        False,
        False,
        FitReason.CardInsufficientMemory,
        "gpu-0 (GPU-a) has 20960 MiB free, the pod asks 30000 MiB",
    )
    far = PodAllocation(
        "team", "old", "uid-old", "gpu-b", "Running", ((ContainerDevice("GPU-a", "NVIDIA", 38000, 50),),)
    )
    [check] = pin_verdict(spec("gpu-0"), view([old]), big, evict=far).checks
    assert (check.fits_now, check.fits_after_eviction, check.reason, check.message) == (
        False,
        None,
        FitReason.CardInsufficientMemory,
        "gpu-0 (GPU-a) has 2960 MiB free, the pod asks 30000 MiB",
    )
    assert pin_verdict(spec("gpu-0"), view([far]), big).ok


def mem(name: str, mib: int) -> dict[str, Any]:
    return gpu(name, **{"nvidia.com/gpumem": mib, "nvidia.com/gpucores": 10})


def test_the_memory_a_container_asks_itself_is_taken_from_the_share_rounded_up() -> None:
    """HAMi gives the others what is left of the pod's share: a container's own MiB count as whole percents of the
    card, rounded up, so the pod never holds more than its share (4096 MiB of 40960 is 10%, 4097 MiB is 11%)."""

    def patches(devices: str, *containers: dict[str, Any]) -> tuple[ContainerPatch, ...]:
        result = pin_verdict(spec(devices), view([]), pod(*containers))
        assert result.ok, result.summary()
        return result.patches

    assert patches("gpu-0/2", gpu("a"), gpu("b")) == (ContainerPatch(0, 1, True), ContainerPatch(1, 1, True))
    assert patches("gpu-0/2", mem("own", 1), gpu("b")) == (ContainerPatch(1, 1, True),)
    assert patches("gpu-0/20", mem("own", 4096), gpu("b")) == (ContainerPatch(1, 10, True),)
    assert patches("gpu-0/20", mem("own", 4097), gpu("b")) == (ContainerPatch(1, 9, True),)
    [short] = pin_verdict(spec("gpu-0/20"), view([]), pod(mem("own", 30000), gpu("b"), gpu("c"))).problems
    assert (short.reason, short.message) == (
        PinReason.ShareTooSmall,
        "the pod's share is 20% of each card, 0% once the containers that ask their own memory are counted: too "
        "little to split among containers b, c (at least 1% each)",
    )


def test_an_init_container_asking_its_own_memory_runs_alone_within_the_share() -> None:
    """Init containers run before the app containers: their memory is not added to the app containers' sum."""
    result = pin_verdict(spec("gpu-1/50"), view([]), pod(mem("a", 15000), init=(mem("i", 15000),)))
    assert (result.ok, result.patches, result.checks[0].memory_mib) == (True, (), 15000)


def test_a_share_that_does_not_fit_names_the_container_that_fails() -> None:
    """The user must know which container to shrink, whether its memory is the share's or its own."""
    tenant = PodAllocation("t", "t", "u", NODE, "Running", ((ContainerDevice("GPU-a", "NVIDIA", 30000, 10),),))
    [taker] = pin_verdict(spec("gpu-0/70"), view([tenant]), pod(gpu("a"), gpu("b"))).problems
    assert taker.message == "container a: gpu-0 (GPU-a) has 10960 MiB free, the pod asks 14336 MiB"
    [own] = pin_verdict(spec("gpu-0/70"), view([tenant]), pod(mem("own", 12000), gpu("b"))).problems
    assert own.message == "container own: gpu-0 (GPU-a) has 10960 MiB free, the pod asks 12000 MiB"


def test_the_request_a_share_gives_keeps_the_card_count() -> None:
    """The pinned request is what HAMi will read: the container's card count, no MiB, the share, no cores."""
    result = pin_verdict(spec("gpu-0/70"), view([]), pod(gpu("a"), init=(gpu("i"),)))
    assert [check.request for check in result.checks] == [CardRequest(1, 0, 70, 0)]


def test_a_card_registered_without_memory_is_checked_without_crashing() -> None:
    """A broken device plugin may register 0 MiB: a share of it is 0 MiB, which HAMi fits, and a container asking
    MiB of its own takes the whole card, leaving nothing to split."""
    empty = PinView({NODE: node_with({**CARDS[0], "devmem": 0})}, [])
    fits = pin_verdict(spec("gpu-0/50"), empty, pod(gpu("b")))
    assert (fits.ok, fits.checks[0].memory_mib) == (True, 0)
    [short] = pin_verdict(spec("gpu-0/50"), empty, pod(mem("own", 1), gpu("b"))).problems
    assert (short.reason, short.message) == (
        PinReason.ShareTooSmall,
        "the pod's share is 50% of each card, 0% once the containers that ask their own memory are counted: too "
        "little to split among containers b (at least 1% each)",
    )


def test_an_allocatable_count_of_one_card_is_served() -> None:
    """One card split once is allocatable 1: only 0 means the device plugin is gone."""
    served = PinView({NODE: {**node(), "status": {"allocatable": {"nvidia.com/gpu": "1"}}}})
    assert pin_verdict(spec("gpu-0"), served, pod(gpu("main"))).ok


def pending(
    name: str, labels: dict[str, str], *devices: str, node_name: str = NODE, phase: str = "Pending"
) -> Placement:
    return placement_from_object(
        {
            "metadata": {"name": name, "namespace": "team"},
            "spec": {
                "reqID": f"req-{name}",
                "podSelector": {"matchLabels": labels},
                "nodeName": node_name,
                "gpuDevices": list(devices),
            },
            "status": {"phase": phase},
        }
    )


def test_every_pending_placement_is_compared_and_only_on_the_same_node() -> None:
    """The placement itself and consumed ones are skipped, not the end of the list; gpu-0 on another node is
    another card."""
    others = [
        pending("me", {"app": "x"}, "gpu-0"),
        pending("done", {"app": "x"}, "gpu-0", phase="Consumed"),
        pending("far", {"app": "y"}, "gpu-0", node_name="gpu-b"),
        pending("twin", {"app": "x"}, "gpu-0", "gpu-1"),
    ]
    assert pending_warnings(spec("gpu-0", "gpu-1"), "team", "me", others, node_cards(node())) == [
        "placement twin (Pending, -l app=x) may match the same pods as -l app=x; the first matching pod claims only "
        "one of them",
        f"placement team/twin (Pending) also pins a pod to gpu-0, gpu-1 on {NODE}; that pod does not exist yet, so "
        "its share was not counted",
    ]


def test_a_summary_joins_every_problem_with_its_reason() -> None:
    """The summary is the one line the webhook logs and the CLI prints: each problem, in order, with its reason."""
    result = pin_verdict(spec("gpu-0", "gpu-1"), view(), pod(gpu("a"), gpu("b")))
    assert result.summary() == (
        "CardCountMismatch: container a asks 1 card(s) (nvidia.com/gpu) but the placement names 2; "
        "CardCountMismatch: container b asks 1 card(s) (nvidia.com/gpu) but the placement names 2"
    )


def test_workloads_are_read_whole_with_the_clusters_config() -> None:
    """The verdict reads its resource names and defaults from the workload: a workload must keep the config, the
    source the messages name, and the annotations, whether its pod was read, unreadable or given by flags; only a
    pod read says where it may go (`scheduling`, which `pin` warns by) and what it asks of its node (`needs`)."""
    annotations = {"metadata": {"annotations": {"team": "ml"}}}
    unreadable = workload_from_pod({**annotations, "spec": {"containers": {"name": "main"}}}, "the pod", config=BINPACK)
    assert unreadable == Workload(
        (), "the pod", {"team": "ml"}, invalid="pod spec containers must be a list", config=BINPACK
    )
    read = workload_from_pod({**annotations, "spec": {"containers": [gpu("main")]}}, "the pod", config=BINPACK)
    whole_card = CardRequest(1, 0, 100, 100, cores_by_webhook=True)
    assert read == Workload(
        (GpuContainer("main", 0, False, whole_card, False, True),),
        "the pod",
        {"team": "ml"},
        config=BINPACK,
        scheduling={},
        needs=Resources(pods=1),
    )
    flags = workload_from_request(card_request(1), "flags", own_memory=False, config=BINPACK)
    assert flags == Workload((GpuContainer("0", 0, False, whole_card, False, True),), "flags", config=BINPACK)


def test_each_app_container_takes_a_slot_of_the_card() -> None:
    """HAMi counts a slot per container: a pod with more containers than the card has slots left is refused."""
    two_slots = PinView({NODE: node_with({**CARDS[0], "count": 2})}, [])
    assert pin_verdict(spec("gpu-0"), two_slots, pod(mem("a", 1000), mem("b", 1000))).ok
    [problem] = pin_verdict(spec("gpu-0"), two_slots, pod(mem("a", 1000), mem("b", 1000), mem("c", 1000))).problems
    assert (problem.reason, problem.message) == (
        FitReason.CardTimeSlicingExhausted,
        "container c: gpu-0 (GPU-a) has all 2 slots in use",
    )


def test_each_app_container_takes_its_cores_counted_at_most_100() -> None:
    """HAMi adds each container's cores before fitting the next, a request above 100% counted as 100%."""

    def cores(name: str, percent: int) -> dict[str, Any]:
        return gpu(name, **{"nvidia.com/gpumem": 1000, "nvidia.com/gpucores": percent})

    [short] = pin_verdict(spec("gpu-1"), view([]), pod(cores("a", 60), cores("b", 60))).problems
    assert (short.reason, short.message) == (
        FitReason.CardInsufficientCore,
        "container b: gpu-1 (GPU-b) has 40% cores free, the pod asks 60%",
    )
    [taken] = pin_verdict(spec("gpu-1"), view([]), pod(cores("a", 150), cores("b", 0))).problems
    assert (taken.reason, taken.message) == (
        FitReason.CardComputeUnitsExhausted,
        "container b: gpu-1 (GPU-b) has all its cores taken and the pod asks 0% cores",
    )
