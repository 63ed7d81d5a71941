"""The fit check in HAMi v2.10's order with its reason names (the whole pod's verdict: test_core_pin_check.py)."""

from __future__ import annotations

import pytest

from kubectl_hami_place.core.cards import Card
from kubectl_hami_place.core.errors import RequestError
from kubectl_hami_place.core.fit import (
    FitReason,
    FitResult,
    PodFit,
    cordoned_cards,
    fit,
    fit_pod,
    gpu_policies,
    scoring_weights,
    topology_numa,
    uuid_lists,
)
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


@pytest.mark.parametrize(
    ("card", "annotations", "result"),
    [
        (
            Card("GPU-a", type="Ascend910", health=True, count=1),
            {},
            FitResult(
                False, FitReason.CardNotNvidia, "gpu-0 (GPU-a) is a Ascend910 card, not an NVIDIA card HAMi schedules"
            ),
        ),
        (
            Card("GPU-a", health=True, count=1),
            {},
            FitResult(
                False, FitReason.CardNotNvidia, "gpu-0 (GPU-a) is a untyped card, not an NVIDIA card HAMi schedules"
            ),
        ),
        (
            A100,
            {"nvidia.com/use-gputype": "H100"},
            FitResult(
                False,
                FitReason.CardTypeMismatch,
                "gpu-0 (GPU-a) is a NVIDIA-A100-SXM4-40GB (hami-core), which the pod's type annotations exclude",
            ),
        ),
        (
            SECOND,
            {"nvidia.com/use-gputype": "H100"},
            FitResult(
                False,
                FitReason.CardTypeMismatch,
                "gpu-1 (GPU-b) is a NVIDIA-A100-SXM4-40GB (no mode), which the pod's type annotations exclude",
            ),
        ),
    ],
)
def test_a_card_hami_skips_says_what_it_is(card: Card, annotations: dict[str, str], result: FitResult) -> None:
    """The user sees this line: it names the card's type and mode, which is what the pod's annotations missed."""
    assert fit(card, None, SMALL, annotations) == result


def test_a_card_without_usage_is_wholly_free() -> None:
    """No usage recorded is an unused card: all its memory, cores and slots are free, none of its cores taken."""
    whole = card_request(1, memreq=40960, coresreq=100)
    assert fit(A100, None, whole) == FitResult(
        True,
        None,
        "gpu-0 (GPU-a) fits: the pod asks 40960 MiB and 100% cores; 40960 MiB, 100% cores and 10 of 10 slots free",
    )
    no_cores = card_request(1, memreq=10, coresreq=0)
    one_core = Card("GPU-a", count=10, devmem=40960, devcore=1, type="NVIDIA-A100", health=True)
    assert fit(one_core, None, no_cores).ok


def test_a_card_counting_no_cores_takes_a_request_for_no_cores() -> None:
    """HAMi's CardComputeUnitsExhausted applies only to a card with cores to exhaust (devcore not 0)."""
    coreless = Card("GPU-a", count=10, devmem=40960, devcore=0, type="NVIDIA-A100", health=True)
    assert fit(coreless, CardUsage("GPU-a", 1, 1000, 0), card_request(1, memreq=10, coresreq=0)).ok


def test_policies_and_uuid_lists_of_a_pod_naming_none_are_empty() -> None:
    """No annotation and no cluster default means no policy and no UUID constraint; the pod's own list wins."""
    assert gpu_policies({}) == []
    assert gpu_policies(None, "binpack") == ["binpack"]
    assert gpu_policies({"hami.io/gpu-scheduler-policy": " spread , topology-aware,"}, "binpack") == [
        "spread",
        "topology-aware",
    ]
    assert uuid_lists({}) == (frozenset(), frozenset())


SCORING = "hami.io/device-scoring-weights"
POLICY = "hami.io/gpu-scheduler-policy"


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("", "expected slot, core, and memory weights"),
        ("slot=1,core,memory=3", "expected key=value entries"),
        ("slot=0,core=0,memory=0", "at least one weight must be positive"),
        ("slot=1=2,core=1,memory=1", '"slot" weight must be an integer'),
        ("slot=-9223372036854775808,core=1,memory=1", '"slot" weight must not be negative'),
        ("slot=-9223372036854775809,core=1,memory=1", '"slot" weight must be an integer'),
        ("slot=9223372036854775808,core=1,memory=1", '"slot" weight must be an integer'),
        ("slot=1,core=1,mémoire=1", 'unknown weight "mémoire"'),
    ],
)
def test_scoring_weights_are_refused_with_hamis_whole_error(value: str, why: str) -> None:
    """HAMi's Filter fails with ParseDeviceScoringWeights' line (%q, ParseInt's int64 range, SplitN at the first =)."""
    with pytest.raises(RequestError) as caught:
        scoring_weights({SCORING: value})
    assert str(caught.value) == f'invalid hami.io/device-scoring-weights annotation "{value}": {why}'


def test_the_largest_int64_weight_is_a_weight() -> None:
    """strconv.ParseInt takes 9223372036854775807: HAMi scores with it."""
    assert scoring_weights({SCORING: "slot=9223372036854775807,core=0,memory=0"}) == (2**63 - 1, 0, 0)


TOPOLOGY_BIND = {"hami.io/gpu-scheduler-policy": "topology-aware", "nvidia.com/numa-bind": "true"}


def test_topology_numa_reads_only_cards_the_pod_can_use() -> None:
    """HAMi's walk keeps the lowest NUMA node of the cards it does not skip; with none left there is none."""
    t4 = Card("GPU-a", 0, 10, 16384, 100, "NVIDIA-T4", 0, True)
    a100 = Card("GPU-b", 1, 10, 40960, 100, "NVIDIA-A100", 1, True)
    assert topology_numa([t4, a100], {**TOPOLOGY_BIND, "nvidia.com/use-gputype": "A100"}, ()) == 1
    assert topology_numa([t4, a100], TOPOLOGY_BIND, ()) == 0
    assert topology_numa([t4, a100], TOPOLOGY_BIND, ("GPU-a", "GPU-b")) is None


@pytest.mark.parametrize("policy", ["numa", "binpack,spread"])
def test_cards_sharing_an_index_keep_the_registers_order_when_all_else_ties(policy: str) -> None:
    """A register whose cards omit `index` (Go's omitempty drops a 0) gives every card index 0. HAMi's lessByChain
    breaks the last tie by index with a strict `<`, so its insertion sort keeps such cards in register order and the
    walk from the last card takes the last one listed."""
    first = Card("GPU-a", 0, 10, 40960, 100, "NVIDIA-A100", 0, True)
    second = Card("GPU-b", 0, 10, 40960, 100, "NVIDIA-A100", 0, True)
    verdict = fit_pod([first, second], {}, [card_request(1, memreq=1000)], annotations={POLICY: policy})
    assert verdict == PodFit(ok=True, devices=(("GPU-b",),))
