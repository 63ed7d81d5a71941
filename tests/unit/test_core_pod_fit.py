"""HAMi's whole verdict for a pod on a node: every GPU container in turn, cards sorted by policy, HAMi's reason text."""

from __future__ import annotations

from kubectl_hami_place.core.cards import REGISTER_ANNOTATION, Card, encode_register
from kubectl_hami_place.core.fit import NODE_UNREGISTERED, FitReason, PodFit, fit, fit_pod, fit_pod_on_node
from kubectl_hami_place.core.hami_config import HamiConfig
from kubectl_hami_place.core.requests import card_request
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
