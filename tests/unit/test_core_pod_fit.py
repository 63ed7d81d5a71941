"""HAMi's whole verdict for a pod on a node: every GPU container in turn, cards sorted by policy, HAMi's reason text."""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping

import pytest

from kubectl_hami_place.core import fit as fit_module
from kubectl_hami_place.core.cards import REGISTER_ANNOTATION, Card, encode_register
from kubectl_hami_place.core.fit import (
    FIT_ANNOTATIONS,
    NODE_UNREGISTERED,
    FitReason,
    PodFit,
    fit,
    fit_pod,
    fit_pod_on_node,
    topology_numa,
)
from kubectl_hami_place.core.hami_config import HamiConfig
from kubectl_hami_place.core.requests import CardRequest, card_request
from kubectl_hami_place.core.usage import CardUsage, PodAllocation, parse_allocation


def card(index: int, devmem: int = 40960, type: str = "NVIDIA-A100", health: bool = True) -> Card:
    """An A100 with 10 slots and 100 cores, `GPU-<index>`."""
    return Card(f"GPU-{index}", index=index, count=10, devmem=devmem, devcore=100, type=type, health=health)


TWO = (card(0), card(1))
SMALL = card_request(1, memreq=4096, coresreq=10)


def test_an_empty_node_takes_a_pod_on_the_last_card_tried() -> None:
    assert fit_pod(TWO, {}, [SMALL]) == PodFit(ok=True, devices=(("GPU-1",),))


def test_the_reason_counts_every_card_of_the_failing_container_in_hamis_words_and_order() -> None:
    cards = (card(0, devmem=1000), card(1), card(2, health=False), card(3, type="Ascend910"))
    verdict = fit_pod(cards, {}, [SMALL], annotations={"nvidia.com/nouse-gpuuuid": "GPU-1"})
    assert verdict == PodFit(
        ok=False,
        reason="1/3 CardInsufficientMemory, 1/3 CardNotHealth, 1/3 CardUuidMismatch",
        counts={"CardInsufficientMemory": 1, "CardNotHealth": 1, "CardUuidMismatch": 1},
    )


def test_more_cards_than_the_node_has_nvidia_cards_is_node_insufficient_device() -> None:
    verdict = fit_pod((card(0), card(1, type="Ascend910")), {}, [card_request(2)])
    assert (verdict.ok, verdict.reason) == (False, "NodeInsufficientDevice")


def test_cards_found_but_too_few_are_counted_too() -> None:
    verdict = fit_pod((card(0), card(1, devmem=1000)), {}, [card_request(2, memreq=4096)])
    assert verdict.reason == "1/2 AllocatedCardsInsufficientRequest, 1/2 CardInsufficientMemory"


def test_spread_takes_the_emptiest_card_and_binpack_the_fullest() -> None:
    usage = {"GPU-1": CardUsage("GPU-1", 1, 4096, 10)}
    assert fit_pod(TWO, usage, [SMALL]).devices == (("GPU-0",),)
    binpack = {"hami.io/gpu-scheduler-policy": "binpack"}
    assert fit_pod(TWO, usage, [SMALL], annotations=binpack).devices == (("GPU-1",),)
    assert fit_pod(TWO, usage, [SMALL], config=HamiConfig(gpu_scheduler_policy="binpack")).devices == (("GPU-1",),)


def test_app_containers_take_their_cards_one_after_another_and_init_containers_none() -> None:
    shared, whole = card_request(1, memreq=1000, coresreq=0), card_request(1, memreq=1000, coresreq=100)
    one = (card(0),)
    assert fit_pod(one, {}, [shared, whole], init_containers=1).ok
    verdict = fit_pod(one, {}, [shared, whole])
    assert verdict.reason == "1/1 ExclusiveDeviceAllocateConflict"


def test_the_mutex_policy_of_the_config_wants_an_unused_card() -> None:
    usage = {"GPU-0": CardUsage("GPU-0", 1, 1000, 0)}
    verdict = fit_pod((card(0),), usage, [SMALL], config=HamiConfig(gpu_scheduler_policy="mutex"))
    assert verdict.reason == "1/1 ExclusiveDeviceAllocateConflict"


def test_a_pod_and_node_objects_with_residents_and_a_legacy_register() -> None:
    node = {"metadata": {"name": "n", "annotations": {REGISTER_ANNOTATION: encode_register([card(0, devmem=8192)])}}}
    pod = {"spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpumem": "4096"}}}]}}
    resident = PodAllocation("ns", "r", "", "n", "Pending", parse_allocation("GPU-0,NVIDIA,6000,0:;"))
    assert fit_pod_on_node(node, pod, []).ok
    assert fit_pod_on_node(node, pod, [resident]).reason == "1/1 CardInsufficientMemory"
    assert fit_pod_on_node(node, {"spec": {"containers": [{"name": "cpu"}]}}, [resident]).ok
    legacy = {"metadata": {"name": "n", "annotations": {REGISTER_ANNOTATION: encode_register([card(0)], legacy=True)}}}
    assert fit_pod_on_node(legacy, pod, []) == PodFit(ok=False, reason=NODE_UNREGISTERED)
    assert fit_pod_on_node(legacy, {"spec": {"containers": [{"name": "cpu"}]}}, []).ok


def test_a_policy_chain_sorts_by_its_keys_in_order_then_by_index() -> None:
    cards = (
        Card("GPU-0", 0, 10, 40960, 100, "NVIDIA-A100", 1, True),
        Card("GPU-1", 1, 10, 40960, 100, "NVIDIA-A100", 0, True),
    )
    numa = {"hami.io/gpu-scheduler-policy": "numa"}
    assert fit_pod(cards, {}, [SMALL], annotations=numa).devices == (("GPU-0",),)
    used = {"GPU-0": CardUsage("GPU-0", 1, 1000, 0)}
    spread_first = {"hami.io/gpu-scheduler-policy": "spread,numa"}
    assert fit_pod(cards, used, [SMALL], annotations=spread_first).devices == (("GPU-1",),)
    binpack_first = {"hami.io/gpu-scheduler-policy": "binpack,numa"}
    assert fit_pod(cards, used, [SMALL], annotations=binpack_first).devices == (("GPU-0",),)
    same_numa = (card(0), card(1))
    assert fit_pod(same_numa, {}, [SMALL], annotations={"hami.io/gpu-scheduler-policy": "mutex,numa"}).devices == (
        ("GPU-1",),
    )


def test_the_cluster_default_policy_applies_to_a_single_card_check_when_the_pod_names_none() -> None:
    used = CardUsage("GPU-0", 1, 1000, 0)
    assert fit(card(0), used, SMALL).ok
    assert fit(card(0), used, SMALL, default_policy="mutex").reason == FitReason.ExclusiveDeviceAllocateConflict
    spread = {"hami.io/gpu-scheduler-policy": "spread"}
    assert fit(card(0), used, SMALL, spread, default_policy="mutex").ok


def sized(
    index: int, *, count: int = 10, devmem: int = 40960, devcore: int = 100, type: str = "NVIDIA-A100", numa: int = 0
) -> Card:
    """A healthy card `GPU-<index>` of this size, type and NUMA node."""
    return Card(f"GPU-{index}", index, count, devmem, devcore, type, numa, True)


def placed(*uuids: str) -> PodFit:
    """HAMi's verdict for a one-container pod given these cards."""
    return PodFit(ok=True, devices=(uuids,))


POLICY = "hami.io/gpu-scheduler-policy"
BIND = {"nvidia.com/numa-bind": "true"}
TINY = card_request(1, memreq=100, coresreq=0)


def test_a_pod_asking_no_card_fits_whatever_the_cards() -> None:
    """HAMi's Filter passes a pod without device requests before it looks at any card."""
    assert fit_pod((card(0, health=False),), {}, [None, None]) == PodFit(ok=True)


def test_scoring_weights_hami_cannot_read_fail_the_pod_with_hamis_line() -> None:
    """calcScore fails for the pod on every node, registered or not, with ParseDeviceScoringWeights' error."""
    failed = PodFit(
        ok=False,
        reason='calcScore failed invalid hami.io/device-scoring-weights annotation "slot=1": expected slot, core, and '
        "memory weights",
    )
    weights = {"hami.io/device-scoring-weights": "slot=1"}
    assert fit_pod(TWO, {}, [SMALL], annotations=weights) == failed
    pod = {"metadata": {"annotations": weights}, "spec": {"containers": [gpu_container("main")]}}
    assert fit_pod_on_node({"metadata": {"name": "unregistered"}}, pod, []) == failed


def test_init_containers_are_placed_with_the_pods_annotations_and_weights() -> None:
    """HAMi fits an init container as an app container: the pod's UUID annotations and score weights steer it."""
    cards = (sized(0, devmem=8192), sized(1, devmem=8192), sized(2, devmem=8192))
    usage = {"GPU-0": CardUsage("GPU-0", used_slots=5), "GPU-1": CardUsage("GPU-1", used_mem=6000)}
    annotations = {"nvidia.com/nouse-gpuuuid": "GPU-2", "hami.io/device-scoring-weights": "slot=3,core=1,memory=1"}
    request = card_request(1, memreq=100, coresreq=10)
    # GPU-2 (empty) is excluded; slots weigh 3, so GPU-0 (half its slots used) scores above GPU-1 and spread takes GPU-1
    verdict = fit_pod(cards, usage, [request, request], 1, annotations)
    assert verdict == PodFit(ok=True, devices=(("GPU-1",), ("GPU-1",)))


def test_a_topology_aware_init_container_is_placed_by_the_nodes_pair_scores() -> None:
    """computeWorstSingleCard applies to init containers too: GPU-0 has the lowest pair scores."""
    scores = {"GPU-1": {"GPU-2": 5}, "GPU-2": {"GPU-1": 5}}
    cards = (card(0), card(1), card(2))
    verdict = fit_pod(cards, {}, [SMALL, SMALL], 1, {POLICY: "topology-aware"}, pair_scores=scores)
    assert verdict == PodFit(ok=True, devices=(("GPU-0",), ("GPU-0",)))


def test_too_few_nvidia_cards_is_one_node_insufficient_device() -> None:
    """HAMi stops before Fit with NodeInsufficientDevice, counted once for the node."""
    verdict = fit_pod((card(0), card(1, type="Ascend910")), {}, [card_request(2)])
    assert verdict == PodFit(ok=False, reason="NodeInsufficientDevice", counts={"NodeInsufficientDevice": 1})


def test_every_card_failing_for_the_same_reason_is_counted() -> None:
    """HAMi's reason text counts the cards per reason, before and after its NUMA check alike."""
    cards = (card(0, devmem=1000), card(1, devmem=1000), card(2, health=False), card(3, health=False))
    assert fit_pod(cards, {}, [SMALL]) == PodFit(
        ok=False,
        reason="2/4 CardInsufficientMemory, 2/4 CardNotHealth",
        counts={"CardInsufficientMemory": 2, "CardNotHealth": 2},
    )


def test_numa_bind_counts_every_card_given_up_and_nothing_when_none_was_picked() -> None:
    """Fit adds the cards dropped at each NUMA change to NumaNotFit, and nothing when it had picked none."""
    spread_numa = (sized(0, numa=0), sized(1, numa=1), sized(2, numa=2))
    assert fit_pod(spread_numa, {}, [card_request(2, memreq=4096, coresreq=10)], annotations=BIND) == PodFit(
        ok=False,
        reason="1/3 AllocatedCardsInsufficientRequest, 2/3 NumaNotFit",
        counts={"NumaNotFit": 2, "AllocatedCardsInsufficientRequest": 1},
    )
    small = (sized(0, devmem=1000, numa=0), sized(1, devmem=1000, numa=1))
    assert fit_pod(small, {}, [SMALL], annotations=BIND) == PodFit(
        ok=False, reason="2/2 CardInsufficientMemory", counts={"CardInsufficientMemory": 2}
    )


def test_topology_aware_with_too_few_fitting_cards_says_how_many_it_found() -> None:
    """Under topology-aware HAMi walks every card; finding fewer than asked still reports the ones it found."""
    verdict = fit_pod(
        (card(0), card(1, devmem=1000)), {}, [card_request(2, memreq=4096)], annotations={POLICY: "topology-aware"}
    )
    assert verdict == PodFit(
        ok=False,
        reason="1/2 AllocatedCardsInsufficientRequest, 1/2 CardInsufficientMemory",
        counts={"AllocatedCardsInsufficientRequest": 1, "CardInsufficientMemory": 1},
    )


@pytest.mark.parametrize(
    ("one", "first", "second", "verdict"),
    [
        (
            sized(0, count=2),
            card_request(1, memreq=1000, coresreq=10),
            card_request(1, memreq=1000, coresreq=10),
            PodFit(ok=True, devices=(("GPU-0",), ("GPU-0",))),
        ),
        (
            card(0, devmem=8192),
            card_request(1, memreq=5000, coresreq=0),
            card_request(1, memreq=5000, coresreq=0),
            PodFit(ok=False, reason="1/1 CardInsufficientMemory", counts={"CardInsufficientMemory": 1}),
        ),
        (
            card(0),
            card_request(1, memreq=1000, coresreq=60),
            card_request(1, memreq=1000, coresreq=60),
            PodFit(ok=False, reason="1/1 CardInsufficientCore", counts={"CardInsufficientCore": 1}),
        ),
        (
            card(0),
            CardRequest(1, 1000, None, 150),
            card_request(1, memreq=1000, coresreq=0),
            PodFit(ok=False, reason="1/1 CardComputeUnitsExhausted", counts={"CardComputeUnitsExhausted": 1}),
        ),
    ],
)
def test_each_app_container_takes_its_slot_memory_and_cores_before_the_next(
    one: Card, first: CardRequest, second: CardRequest, verdict: PodFit
) -> None:
    """AddResourceUsage adds each container's slot, memory and cores (cut to 100) before the next is fitted."""
    assert fit_pod((one,), {}, [first, second]) == verdict


@pytest.mark.parametrize(
    ("cards", "usage", "request_", "annotations", "uuid"),
    [
        # unused cards score 0 whatever their size: HAMi adds the request only to a card typed exactly "NVIDIA"
        ((sized(0), sized(1, count=2)), {}, TINY, {}, "GPU-1"),
        ((sized(0), sized(1, devcore=50)), {}, TINY, {}, "GPU-1"),
        ((sized(0), sized(1, devmem=1000)), {}, TINY, {}, "GPU-1"),
        # a card counting no cores scores 0, below a card with one slot of 100 in use
        ((sized(0, devcore=0), sized(1, count=100)), {"GPU-1": CardUsage("GPU-1", 1)}, TINY, {}, "GPU-0"),
        # tiny cards are scored like any other
        ((sized(0, devcore=1), sized(1, devcore=1)), {"GPU-1": CardUsage("GPU-1", 1, 1000)}, TINY, {}, "GPU-0"),
        (
            (sized(0, devmem=1), sized(1, devmem=1)),
            {"GPU-1": CardUsage("GPU-1", 1, 0, 10)},
            card_request(1, memreq=1, coresreq=0),
            {},
            "GPU-0",
        ),
        # cores in use weigh against the card's own cores: 50 of 100 is fuller than 50 of 200
        (
            (sized(0), sized(1, devcore=200)),
            {"GPU-0": CardUsage("GPU-0", 1, 0, 50), "GPU-1": CardUsage("GPU-1", 1, 0, 50)},
            card_request(1, memreq=100, coresreq=10),
            {},
            "GPU-1",
        ),
        # a card typed exactly "NVIDIA" is scored with one slot, the cores and the memory of the request added
        (
            (sized(0, type="NVIDIA"), sized(1, count=2, type="NVIDIA")),
            {"GPU-0": CardUsage("GPU-0", 2)},
            card_request(1, mem_percentage=50, coresreq=0),
            {},
            "GPU-0",
        ),
        (
            (sized(0, count=4, type="NVIDIA"), sized(1, type="NVIDIA")),
            {"GPU-1": CardUsage("GPU-1", 3)},
            TINY,
            {},
            "GPU-0",
        ),
        ((sized(0, count=1, type="NVIDIA"), sized(1, count=1, devmem=20480, type="NVIDIA")), {}, TINY, {}, "GPU-0"),
        # mutex orders by slots in use alone, whatever the score
        ((sized(0, type="NVIDIA"), sized(1, count=2, type="NVIDIA")), {}, TINY, {POLICY: "mutex"}, "GPU-1"),
    ],
)
def test_the_card_hami_takes_follows_its_score(
    cards: tuple[Card, ...], usage: dict[str, CardUsage], request_: CardRequest, annotations: dict[str, str], uuid: str
) -> None:
    """ComputeScore (float32, weights 1) and the policy's Less order the cards; Fit tries them from the last."""
    assert fit_pod(cards, usage, [request_], annotations=annotations) == placed(uuid)


def test_mutex_keeps_unused_cards_in_numa_then_register_order() -> None:
    """Among unused cards mutex breaks ties by NUMA node, and Go's insertion sort keeps equal cards in place."""
    cards = (sized(0, numa=1), sized(1, numa=0), sized(2, numa=0))
    assert fit_pod(cards, {}, [card_request(2, memreq=1000, coresreq=10)], annotations={POLICY: "mutex"}) == placed(
        "GPU-0", "GPU-2"
    )


@pytest.mark.parametrize("name", ["binpack", "spread"])
def test_numa_bind_keeps_equal_cards_in_register_order(name: str) -> None:
    """Under numa-bind equal scores on one NUMA node are no reason to swap: Fit takes the last card."""
    assert fit_pod(TWO, {}, [SMALL], annotations={POLICY: name, **BIND}) == placed("GPU-1")


@pytest.mark.parametrize(
    ("cards", "used", "annotations", "uuid"),
    [
        # no word of the list is a sort key: spread
        (TWO, "GPU-1", {POLICY: "spreed,binpak"}, "GPU-0"),
        # equal scores: the chain's keys all tie, the register index decides (not the NUMA node)
        ((sized(0, numa=1), sized(1, numa=0)), None, {POLICY: "binpack,spread"}, "GPU-1"),
        # bare numa is a chain: the NUMA node decides, not the score
        ((sized(0, numa=0), sized(1, numa=1)), "GPU-1", {POLICY: "numa"}, "GPU-1"),
        # numa-bind puts numa first in the chain, the chain's own keys ordering each NUMA node's cards
        ((sized(0, numa=0), sized(1, numa=1), sized(2, numa=1)), "GPU-0", {POLICY: "binpack,numa", **BIND}, "GPU-2"),
        ((sized(0, numa=0), sized(1, numa=1), sized(2, numa=1)), "GPU-1", {POLICY: "binpack,numa", **BIND}, "GPU-1"),
        ((sized(0, numa=0), sized(1, numa=1), sized(2, numa=1)), "GPU-1", {POLICY: "numa", **BIND}, "GPU-2"),
    ],
)
def test_a_policy_chain_sorts_as_hamis_less_by_chain(
    cards: tuple[Card, ...], used: str | None, annotations: dict[str, str], uuid: str
) -> None:
    """lessByChain: the sort keys in the order written (spread when none), numa first under numa-bind, then index."""
    usage = {used: CardUsage(used, 1, 4096, 10)} if used else {}
    assert fit_pod(cards, usage, [SMALL], annotations=annotations) == placed(uuid)


THREE = (card(0), card(1), card(2))


@pytest.mark.parametrize(
    ("request_", "scores", "uuids"),
    [
        # no pair scores: every card scores 0, the first card of the walk (the last in the sort) is kept
        (SMALL, None, ("GPU-2",)),
        # a pair missing from the scores counts 0: GPU-1 has none and is the worst connected
        (SMALL, {"GPU-2": {"GPU-0": 1, "GPU-1": 1}, "GPU-0": {"GPU-1": 5}}, ("GPU-1",)),
        # the best combination sums each card's score of the cards after it in the walk, missing pairs 0
        (card_request(2, memreq=4096, coresreq=10), {"GPU-1": {"GPU-0": 1}}, ("GPU-1", "GPU-0")),
        (card_request(2, memreq=4096, coresreq=10), {"GPU-0": {"GPU-1": 5}}, ("GPU-2", "GPU-1")),
    ],
)
def test_topology_aware_keeps_the_cards_hamis_pair_scores_pick(
    request_: CardRequest, scores: dict[str, dict[str, int]] | None, uuids: tuple[str, ...]
) -> None:
    """computeWorstSingleCard/computeBestCombination over the walk (GPU-2, GPU-1, GPU-0), first found on ties."""
    verdict = fit_pod(THREE, {}, [request_], annotations={POLICY: "topology-aware"}, pair_scores=scores)
    assert verdict == placed(*uuids)


def gpu_container(name: str, **limits: str) -> dict[str, object]:
    """A container with these resource limits (one nvidia.com/gpu when none are given)."""
    return {"name": name, "resources": {"limits": limits or {"nvidia.com/gpu": "1"}}}


def gpu_node(*cards: Card, **annotations: str) -> dict[str, object]:
    """Node `n` registering these cards, with these annotations."""
    return {"metadata": {"name": "n", "annotations": {REGISTER_ANNOTATION: encode_register(cards), **annotations}}}


def gpu_pod(*containers: dict[str, object], init: tuple[dict[str, object], ...] = ()) -> dict[str, object]:
    """A pod with these containers (and init containers, when given)."""
    spec: dict[str, object] = {"containers": list(containers)}
    if init:
        spec["initContainers"] = list(init)
    return {"spec": spec}


def resident(node: str) -> PodAllocation:
    """A running pod HAMi placed on GPU-0 of `node` (6000 MiB, 10% cores)."""
    return PodAllocation("ns", "r", "", node, "Running", parse_allocation("GPU-0,NVIDIA,6000,10:;"))


def test_a_pod_object_on_a_node_object_as_hamis_filter_sees_them() -> None:
    """The objects carry what HAMi's Filter reads: the node's pods, cordon, init containers, webhook and config."""
    node = gpu_node(card(0, devmem=8192))
    asks_memory = gpu_pod(gpu_container("main", **{"nvidia.com/gpumem": "4096"}))
    assert fit_pod_on_node(node, asks_memory, [resident("elsewhere")]) == placed("GPU-0")
    assert fit_pod_on_node(node, asks_memory, [], hami_webhook=False) == PodFit(ok=True)
    mutex = HamiConfig(gpu_scheduler_policy="mutex")
    assert fit_pod_on_node(node, asks_memory, [resident("n")], config=mutex) == PodFit(
        ok=False, reason="1/1 ExclusiveDeviceAllocateConflict", counts={"ExclusiveDeviceAllocateConflict": 1}
    )
    whole = gpu_container("main")
    assert fit_pod_on_node(node, gpu_pod(whole, init=(gpu_container("init"),)), []) == PodFit(
        ok=True, devices=(("GPU-0",), ("GPU-0",))
    )
    assert fit_pod_on_node(node, gpu_pod(whole, whole), []) == PodFit(
        ok=False, reason="1/1 CardInsufficientMemory", counts={"CardInsufficientMemory": 1}
    )
    cordoned = gpu_node(card(0, devmem=8192), **{"hami.io/device-cordon": "GPU-0"})
    assert fit_pod_on_node(cordoned, asks_memory, []) == PodFit(
        ok=False, reason="1/1 CardCordoned", counts={"CardCordoned": 1}
    )
    renamed = HamiConfig(resource_count_name="example.com/vgpu")
    assert fit_pod_on_node(node, gpu_pod(gpu_container("main", **{"example.com/vgpu": "1"})), [], config=renamed) == (
        placed("GPU-0")
    )


class _Reads(MutableMapping[str, str]):
    """A pod's annotations that note every key HAMi's fit looks up."""

    def __init__(self, items: dict[str, str]) -> None:
        """The annotations, nothing read yet."""
        self.items_ = dict(items)
        self.read: set[str] = set()

    def __getitem__(self, key: str) -> str:
        self.read.add(key)
        return self.items_[key]

    def __contains__(self, key: object) -> bool:
        self.read.add(str(key))
        return key in self.items_

    def __setitem__(self, key: str, value: str) -> None:
        self.items_[key] = value

    def __delitem__(self, key: str) -> None:
        del self.items_[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.items_)

    def __len__(self) -> int:
        return len(self.items_)


@pytest.mark.parametrize(
    "annotations",
    [
        {"team": "x"},
        {"nvidia.com/numa-bind": "true", "hami.io/gpu-scheduler-policy": "topology-aware"},
        {"nvidia.com/use-gputype": "A100", "nvidia.com/nouse-gpuuuid": "GPU-1", "nvidia.com/vgpu-mode": "hami-core"},
        {"hami.io/gpu-scheduler-policy": "binpack,numa", "hami.io/device-scoring-weights": "mem=2"},
    ],
)
def test_hami_s_fit_reads_no_pod_annotation_but_those_fit_annotations_names(
    annotations: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The planner keys its verdicts by `FIT_ANNOTATIONS` alone (`PlanPod.fit_annotations`): an annotation fit read
    beyond them would make two pods the planner counts alike differ in HAMi's verdict. fit_pod's copy of the
    annotations is the mapping itself here (its module's `dict` replaced), so its reads are seen too."""
    monkeypatch.setattr(fit_module, "dict", lambda mapping=None: mapping, raising=False)
    cards = (sized(0, numa=0), sized(1, numa=1), sized(2, numa=1))
    for request in (SMALL, card_request(2, memreq=4096), card_request(1, memreq=50000)):
        reads = _Reads(annotations)
        fit_pod(cards, {"GPU-1": CardUsage("GPU-1", 1, 4096, 10)}, [request, request], 1, reads)
        fit(cards[0], CardUsage("GPU-0"), request, reads, False)
        topology_numa(cards, reads, ())
        assert reads.read <= set(FIT_ANNOTATIONS), reads.read - set(FIT_ANNOTATIONS)
        assert reads.read, "the recorder saw fit's reads"
