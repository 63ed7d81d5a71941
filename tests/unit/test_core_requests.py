"""A container's per-card request from its resources, with HAMi v2.10's defaults and its webhook's cores rule."""

from __future__ import annotations

from decimal import Decimal

import pytest
from core_strategies import json_values, outcome
from hypothesis import given
from hypothesis import strategies as st

from kubectl_hami_place.core.cards import Card
from kubectl_hami_place.core.errors import RequestError
from kubectl_hami_place.core.hami_config import HamiConfig
from kubectl_hami_place.core.requests import (
    CardRequest,
    card_request,
    container_request,
    gpu_requests,
    memory_for,
    parse_quantity,
    pod_requests,
)

CARD = Card("GPU-a", count=10, devmem=40960, devcore=100, type="NVIDIA-A100", health=True)


def ctr(limits: dict[str, object] | None = None, requests: dict[str, object] | None = None) -> dict[str, object]:
    """A container dict with the given resources."""
    resources: dict[str, object] = {}
    if limits is not None:
        resources["limits"] = limits
    if requests is not None:
        resources["requests"] = requests
    return {"name": "main", "resources": resources}


def test_only_gpu_takes_the_whole_card_exclusively() -> None:
    request = container_request(ctr({"nvidia.com/gpu": "1"}))
    assert request == CardRequest(nums=1, memreq=0, mem_percentage=100, coresreq=100, cores_by_webhook=True)
    assert request.exclusive
    assert memory_for(request, CARD) == 40960


def test_without_hamis_webhook_only_gpu_asks_no_cores() -> None:
    request = container_request(ctr({"nvidia.com/gpu": "1"}), hami_webhook=False)
    assert request is not None and request.coresreq == 0


def test_gpumem_is_a_mib_count_and_cores_default_to_zero() -> None:
    request = container_request(ctr({"nvidia.com/gpu": "2", "nvidia.com/gpumem": "3000"}))
    assert request == CardRequest(nums=2, memreq=3000, mem_percentage=None, coresreq=0)
    assert memory_for(request, CARD) == 3000


@pytest.mark.parametrize(("quantity", "mib"), [("3k", 3000), ("1Gi", 1073741824 // 1), (4096, 4096), ("1e3", 1000)])
def test_gpumem_quantities_are_read_with_asint64(quantity: object, mib: int) -> None:
    request = container_request(ctr({"nvidia.com/gpu": 1, "nvidia.com/gpumem": quantity}))
    assert request is not None and request.memreq == mib


def test_percentage_takes_that_share_of_each_card() -> None:
    request = container_request(ctr({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "25"}))
    assert request is not None
    assert (request.mem_percentage, request.coresreq) == (25, 0)
    assert memory_for(request, CARD) == 10240


def test_percentage_100_without_cores_is_exclusive() -> None:
    request = container_request(ctr({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "100"}))
    assert request is not None and request.coresreq == 100


def test_explicit_cores_are_never_overridden() -> None:
    request = container_request(ctr({"nvidia.com/gpu": "1", "nvidia.com/gpucores": "30"}))
    assert request is not None and (request.coresreq, request.cores_by_webhook) == (30, False)


def test_gpumem_wins_over_percentage() -> None:
    request = container_request(
        ctr({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "2048", "nvidia.com/gpumem-percentage": "50"})
    )
    assert request is not None and memory_for(request, CARD) == 2048


def test_limits_first_then_requests() -> None:
    request = container_request(
        ctr({"nvidia.com/gpu": "1"}, {"nvidia.com/gpu": "3", "nvidia.com/gpumem": "1000", "nvidia.com/gpucores": "20"})
    )
    assert request == CardRequest(nums=1, memreq=1000, mem_percentage=None, coresreq=20)


def test_fractional_values_are_read_as_hami_does() -> None:
    assert container_request(ctr({"nvidia.com/gpu": "500m"})) is None
    request = container_request(ctr({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "1.5"}))
    assert request is not None and (request.memreq, request.mem_percentage) == (0, 100)
    # HAMi drops the whole GPU request of a container whose gpumem is not a whole number
    assert container_request(ctr({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1.5"})) is None


def test_no_gpu_means_no_request() -> None:
    assert container_request({"name": "side"}) is None
    assert container_request(ctr({"cpu": "1", "nvidia.com/gpumem": "1000"}), hami_webhook=False) is None
    assert container_request(ctr({"nvidia.com/gpu": "0"})) is None


def test_hamis_webhook_gives_default_gpu_num_to_a_container_naming_only_memory_or_cores() -> None:
    assert container_request(ctr({"nvidia.com/gpumem": "1000"})) == CardRequest(1, 1000, None, 0)
    by_percent = container_request(ctr({"nvidia.com/gpumem-percentage": "100"}))
    assert by_percent == CardRequest(1, 0, 100, 100, cores_by_webhook=True)
    assert container_request(ctr({"nvidia.com/gpucores": "30"})) == CardRequest(1, 0, 100, 30)
    # only limits count for HAMi's webhook, and defaultGPUNum 0 turns the rule off
    assert container_request(ctr(requests={"nvidia.com/gpumem": "1000"})) is None
    config = HamiConfig(default_gpu_num=0)
    assert container_request(ctr({"nvidia.com/gpumem": "1000"}), config=config) is None
    assert container_request(ctr({"nvidia.com/gpumem": "1000"}), config=HamiConfig(default_gpu_num=2)) == (
        CardRequest(2, 1000, None, 0)
    )


def test_percentage_zero_is_ignored_and_above_100_is_cut_to_100() -> None:
    zero = container_request(ctr({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "0"}))
    assert zero == CardRequest(1, 0, 100, 0)
    assert memory_for(zero, CARD) == 40960
    over = container_request(ctr({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "150"}), hami_webhook=False)
    assert over is not None and memory_for(over, CARD) == 40960
    with pytest.raises(RequestError, match="HAMi's webhook denies"):
        container_request(ctr({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "150"}))


def test_renamed_resources_and_defaults_from_the_config() -> None:
    config = HamiConfig(
        resource_count_name="example.com/vgpu",
        resource_memory_name="example.com/vmem",
        resource_memory_percentage_name="example.com/vmem-pct",
        resource_core_name="example.com/vcores",
        default_memory=2048,
        default_cores=10,
    )
    assert container_request(ctr({"nvidia.com/gpu": "1"}), config=config) is None
    defaulted = container_request(ctr({"example.com/vgpu": "1", "example.com/vcores": "20"}), config=config)
    assert defaulted == CardRequest(1, 2048, None, 20, memory_by_default=True)
    assert memory_for(defaulted, CARD) == 2048
    by_percent = container_request(ctr({"example.com/vgpu": "1", "example.com/vmem-pct": "50"}), config=config)
    assert by_percent == CardRequest(1, 0, 50, 10)
    whole = container_request(ctr({"example.com/vgpu": "2"}), config=config)
    assert whole == CardRequest(2, 2048, None, 100, cores_by_webhook=True, memory_by_default=True)
    assert container_request(ctr({"example.com/vgpu": "1"}), hami_webhook=False, config=config) == CardRequest(
        1, 2048, None, 10, memory_by_default=True
    )
    factor = HamiConfig(memory_factor=4)
    assert container_request(ctr({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}), config=factor) == (
        CardRequest(1, 4000, None, 0)
    )


def test_hamis_default_memory_is_marked_as_a_default() -> None:
    defaulted = card_request(1, coresreq=0, config=HamiConfig(default_memory=2048))
    assert defaulted == CardRequest(1, 2048, None, 0, memory_by_default=True)


@pytest.mark.parametrize(
    ("limits", "fragment"),
    [
        ({"nvidia.com/gpu": "lots"}, "'lots' is not a quantity"),
        ({"nvidia.com/gpu": "-1"}, "must not be negative"),
        ({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4Gi"}, "more than HAMi can count"),
        ({"nvidia.com/gpu": True}, "must be a quantity"),
    ],
)
def test_garbage_quantities_give_a_request_error_naming_the_container(limits: dict[str, object], fragment: str) -> None:
    with pytest.raises(RequestError) as caught:
        container_request(ctr(limits))
    assert fragment in str(caught.value)
    assert str(caught.value).startswith("container main")


def test_pod_requests_lists_init_containers_first() -> None:
    spec = {
        "initContainers": [ctr({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"})],
        "containers": [{"name": "side"}, ctr({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "2000"})],
    }
    requests = pod_requests(spec)
    assert [r.memreq if r else None for r in requests] == [1000, None, 2000]
    assert [r.memreq for r in gpu_requests(spec)] == [1000, 2000]


def test_card_request_applies_hamis_defaults() -> None:
    assert card_request(1) == CardRequest(1, 0, 100, 100, cores_by_webhook=True)
    assert card_request(1, memreq=4096) == CardRequest(1, 4096, None, 0)
    assert card_request(2, mem_percentage=50, coresreq=10) == CardRequest(2, 0, 50, 10)
    with pytest.raises(RequestError, match="at least 1 card"):
        card_request(0)
    with pytest.raises(RequestError, match=r"outside 1\.\.100"):
        card_request(1, mem_percentage=101)


@pytest.mark.parametrize(
    ("text", "value"),
    [("1", 1), ("1k", 1000), ("1Ki", 1024), ("1.5", Decimal("1.5")), ("500m", Decimal("0.5")), ("2e3", 2000)],
)
def test_parse_quantity(text: str, value: Decimal) -> None:
    assert parse_quantity(text) == value


@given(st.text(max_size=30))
def test_quantity_garbage_raises_only_request_errors(text: str) -> None:
    result = outcome(lambda: parse_quantity(text), RequestError)
    assert isinstance(result, RequestError | Decimal)


@given(st.dictionaries(st.sampled_from(["limits", "requests", "claims"]), json_values, max_size=3))
def test_resource_garbage_raises_only_request_errors(resources: dict[str, object]) -> None:
    result = outcome(lambda: container_request({"name": "x", "resources": resources}), RequestError)
    assert result is None or isinstance(result, RequestError | CardRequest)


@given(
    st.dictionaries(
        st.sampled_from(["nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpumem-percentage", "nvidia.com/gpucores"]),
        st.integers(min_value=0, max_value=2**40) | st.text(max_size=8),
    )
)
def test_resource_values_raise_only_request_errors(limits: dict[str, object]) -> None:
    result = outcome(lambda: container_request(ctr(limits)), RequestError)
    if isinstance(result, CardRequest):
        assert result.nums >= 1


@given(json_values)
def test_pod_spec_garbage_raises_only_request_errors(spec: object) -> None:
    result = outcome(lambda: pod_requests(spec), RequestError)  # type: ignore[arg-type]
    assert isinstance(result, RequestError | tuple)
