"""The fit check in HAMi v2.10's order with its reason names, and pin's per-card verdict."""

from __future__ import annotations

import pytest

from kubectl_hami_place.core.allocations import ContainerDevice
from kubectl_hami_place.core.cards import Card
from kubectl_hami_place.core.check import card_count_mismatch, check_pin, check_pin_pod
from kubectl_hami_place.core.fit import FitReason, cordoned_cards, fit
from kubectl_hami_place.core.refs import parse_card_ref
from kubectl_hami_place.core.requests import CardRequest, card_request
from kubectl_hami_place.core.usage import CardUsage, PodAllocation, card_usage

A100 = Card("GPU-a", 0, 10, 40960, 100, "NVIDIA-A100-SXM4-40GB", 0, True, "hami-core")
SECOND = Card("GPU-b", index=1, count=10, devmem=40960, devcore=100, type="NVIDIA-A100-SXM4-40GB", health=True)
SMALL = card_request(1, memreq=4096, coresreq=30)


def used(slots: int = 0, mem: int = 0, cores: int = 0) -> CardUsage:
    """A card's usage."""
    return CardUsage("GPU-a", slots, mem, cores)


@pytest.mark.parametrize(
    ("card", "usage", "request_", "annotations", "cordoned", "reason"),
    [
        (Card("GPU-a", type="Ascend910", health=True, count=1), None, SMALL, {}, False, FitReason.CardNotNvidia),
        (Card("GPU-a", type="NVIDIA-T4", count=1, devmem=9999), None, SMALL, {}, False, FitReason.CardUnhealthy),
        (A100, None, SMALL, {}, True, FitReason.CardCordoned),
        (A100, None, SMALL, {"nvidia.com/use-gputype": "H100"}, False, FitReason.CardTypeMismatch),
        (A100, None, SMALL, {"nvidia.com/nouse-gputype": "a100"}, False, FitReason.CardTypeMismatch),
        (A100, None, SMALL, {"nvidia.com/vgpu-mode": "mig"}, False, FitReason.CardTypeMismatch),
        (A100, None, SMALL, {"nvidia.com/use-gpuuuid": "GPU-b,GPU-c"}, False, FitReason.CardUuidMismatch),
        (A100, None, SMALL, {"nvidia.com/nouse-gpuuuid": "GPU-a"}, False, FitReason.CardUuidMismatch),
        (A100, used(slots=10), SMALL, {}, False, FitReason.CardTimeSlicingExhausted),
        (
            A100,
            used(slots=1),
            SMALL,
            {"hami.io/gpu-scheduler-policy": "mutex"},
            False,
            FitReason.ExclusiveDeviceAllocateConflict,
        ),
        (A100, used(slots=2, mem=38912), SMALL, {}, False, FitReason.CardInsufficientMemory),
        (A100, used(slots=2, mem=1000, cores=80), SMALL, {}, False, FitReason.CardInsufficientCore),
        (
            A100,
            used(1, 1000),
            card_request(1, 1000, coresreq=100),
            {},
            False,
            FitReason.ExclusiveDeviceAllocateConflict,
        ),
        (
            A100,
            used(slots=1, mem=1000, cores=100),
            card_request(1, memreq=10),
            {},
            False,
            FitReason.CardComputeUnitsExhausted,
        ),
    ],
)
def test_every_reason(  # noqa: PLR0917
    card: Card,
    usage: CardUsage | None,
    request_: CardRequest,
    annotations: dict[str, str],
    cordoned: bool,
    reason: FitReason,
) -> None:
    result = fit(card, usage, request_, annotations, cordoned)
    assert not result.ok
    assert result.reason is reason
    assert str(result.reason) == reason.value
    assert "\n" not in result.message


def test_hamis_order_slots_before_memory_before_cores() -> None:
    assert fit(A100, used(slots=10, mem=40960, cores=100), SMALL).reason is FitReason.CardTimeSlicingExhausted
    assert fit(A100, used(slots=1, mem=40960, cores=100), SMALL).reason is FitReason.CardInsufficientMemory
    assert fit(A100, used(slots=1, mem=0, cores=100), SMALL).reason is FitReason.CardInsufficientCore


def test_memory_message_names_the_numbers() -> None:
    result = fit(A100, used(slots=1, mem=38912), card_request(1, memreq=4096))
    assert result.message == "gpu-0 (GPU-a) has 2048 MiB free, the pod asks 4096 MiB"


def test_a_fitting_request_says_what_is_left() -> None:
    result = fit(A100, used(slots=1, mem=8192, cores=20), SMALL)
    assert result.ok and result.reason is None
    assert "32768 MiB, 80% cores and 9 of 10 slots free" in result.message


def test_percentage_requests_take_their_share_of_this_card() -> None:
    half = card_request(1, mem_percentage=50)
    assert fit(A100, used(slots=1, mem=20480), half).ok
    assert fit(A100, used(slots=1, mem=20481), half).reason is FitReason.CardInsufficientMemory


def test_cores_above_100_are_cut_to_100_as_hami_does() -> None:
    assert fit(A100, None, CardRequest(1, 10, None, 150)).ok


def test_exclusive_conflict_needs_a_100_core_card() -> None:
    """HAMi only sees a conflict when the card's devcore is exactly 100."""
    scaled = Card("GPU-a", count=10, devmem=40960, devcore=200, type="NVIDIA-A100", health=True)
    assert fit(scaled, CardUsage("GPU-a", 1, 0, 0), card_request(1)).ok


def test_empty_use_annotations_mean_no_constraint() -> None:
    assert fit(A100, None, SMALL, {"nvidia.com/use-gpuuuid": " ", "nvidia.com/use-gputype": ""}).ok
    assert fit(A100, None, SMALL, {"nvidia.com/use-gpuuuid": "GPU-x, GPU-a"}).ok


def test_cordoned_cards_reads_the_node_annotation() -> None:
    assert cordoned_cards({"hami.io/device-cordon": "GPU-a, GPU-b,"}) == {"GPU-a", "GPU-b"}
    assert cordoned_cards({}) == frozenset()
    assert cordoned_cards(None) == frozenset()


def victim_and_usage() -> tuple[PodAllocation, dict[str, CardUsage]]:
    """gpu-0 mostly taken (2960 MiB free) by a pod to evict, gpu-1 empty."""
    devices = ((ContainerDevice("GPU-a", "NVIDIA", 38000, 50),),)
    victim = PodAllocation("team", "old", "uid-old", "gpu-a100-0", "Running", devices)
    return victim, card_usage((A100, SECOND), [victim])


def test_check_pin_now_and_after_eviction() -> None:
    victim, usage = victim_and_usage()
    refs = [parse_card_ref("gpu-0"), parse_card_ref("gpu-1")]
    first, second = check_pin((A100, SECOND), usage, refs, SMALL, victim, node="gpu-a100-0")
    assert (first.fits_now, first.fits_after_eviction, first.ok) == (False, True, True)
    assert first.message == "gpu-0 (GPU-a) has 2960 MiB free, the pod asks 4096 MiB; fits once team/old is evicted"
    assert (second.fits_now, second.fits_after_eviction, second.ok) == (True, True, True)


def test_check_pin_without_eviction_reports_the_reason_now() -> None:
    _, usage = victim_and_usage()
    big = card_request(1, memreq=8192, coresreq=10)
    (check,) = check_pin((A100, SECOND), usage, [parse_card_ref("gpu-0")], big)
    assert (check.ok, check.fits_after_eviction, check.reason) == (False, None, FitReason.CardInsufficientMemory)
    assert check.message == "gpu-0 (GPU-a) has 2960 MiB free, the pod asks 8192 MiB"


def test_check_pin_unknown_card() -> None:
    (check,) = check_pin((A100, SECOND), {}, [parse_card_ref("gpu-7")], SMALL, node="gpu-a100-0")
    assert (check.ok, check.card, check.reason) == (False, None, FitReason.UnknownCard)
    assert check.message == "node gpu-a100-0 has no card with index 7; it has gpu-0, gpu-1"


def test_check_pin_with_a_percent_gives_the_pod_that_share() -> None:
    (check,) = check_pin((A100, SECOND), {}, [parse_card_ref("gpu-1/25")], card_request(1))
    assert check.ok
    assert (check.request.mem_percentage, check.request.coresreq, check.memory_mib) == (25, 0, 10240)


def test_check_pin_refuses_a_pod_asking_more_than_the_percent() -> None:
    (check,) = check_pin((A100, SECOND), {}, [parse_card_ref("gpu-1/10")], card_request(1, memreq=8192))
    assert (check.ok, check.reason) == (False, FitReason.RequestExceedsPercent)
    assert check.message == "gpu-1 (GPU-b): the pod asks 8192 MiB, more than 10% of the card (4096 MiB)"


def test_check_pin_cordoned_card() -> None:
    (check,) = check_pin((A100, SECOND), {}, [parse_card_ref("GPU-b")], SMALL, cordoned={"GPU-b"})
    assert check.reason is FitReason.CardCordoned


def test_card_count_mismatch() -> None:
    refs = [parse_card_ref("gpu-0"), parse_card_ref("gpu-1")]
    assert card_count_mismatch([None, card_request(2)], refs) is None
    assert card_count_mismatch([card_request(1)], refs) == (
        "container 0 asks 1 card(s) (nvidia.com/gpu) but the placement names 2; give one --gpu per card"
    )


def test_check_pin_pod_counts_earlier_containers_on_the_card() -> None:
    """Two whole-card containers each fit an empty card alone, but not together: HAMi counts the first."""
    whole = card_request(1)
    (check,) = check_pin_pod((A100, SECOND), {}, [parse_card_ref("gpu-1")], [whole, None, whole])
    assert (check.ok, check.reason) == (False, FitReason.CardInsufficientMemory)
    assert check.message == "container 2: gpu-1 (GPU-b) has 0 MiB free, the pod asks 40960 MiB"


def test_check_pin_pod_fits_init_containers_alone_and_sums_app_containers() -> None:
    init = card_request(1, memreq=30000, coresreq=10)
    app = card_request(1, memreq=15000, coresreq=10)
    refs = [parse_card_ref("gpu-1")]
    (check,) = check_pin_pod((A100, SECOND), {}, refs, [init, app, app], init_containers=1)
    assert check.ok
    assert check.memory_mib == 30000
    (check,) = check_pin_pod((A100, SECOND), {}, refs, [init, app, app, app], init_containers=1)
    assert (check.ok, check.memory_mib) == (False, 45000)
    assert check.message.startswith("container 3: ")


def test_check_pin_pod_without_gpu_containers_checks_nothing() -> None:
    assert check_pin_pod((A100,), {}, [parse_card_ref("gpu-0")], [None]) == []
