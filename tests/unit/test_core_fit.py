"""The fit check in HAMi v2.10's order with its reason names (the whole pod's verdict: test_core_pin_check.py)."""

from __future__ import annotations

import pytest

from kubectl_hami_place.core.cards import Card
from kubectl_hami_place.core.fit import FitReason, cordoned_cards, fit
from kubectl_hami_place.core.requests import CardRequest, card_request
from kubectl_hami_place.core.usage import CardUsage

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
