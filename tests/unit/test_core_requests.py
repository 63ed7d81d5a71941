"""A container's per-card request from its resources, with HAMi v2.10's defaults and its webhook's cores rule."""

from __future__ import annotations

from decimal import Decimal

import pytest
from core_strategies import json_values, outcome
from hypothesis import example, given
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
from kubectl_hami_place.core.requests import _quantity_int as quantity_int

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


@given(st.text(alphabet="0123456789\u0661 .", max_size=70))
@example("9" * 64)
@example("9" * 65)
@example("\u0661")
@example(str(2**63 - 1))
@example(str(2**63))
@example("007")
@example("")
def test_a_whole_number_reads_as_the_quantity_pattern_reads_it(text: str) -> None:
    """Plain digits take a shorter road than the pattern: the same number, the same refusal, the same None past
    int64 (HAMi's AsInt64)."""
    try:
        number = parse_quantity(text, "nvidia.com/gpumem")
    except RequestError:
        expected: object = "refused"
    else:
        whole = number == number.to_integral_value() and 0 <= number <= 2**63 - 1
        expected = int(number) if whole else "refused" if number < 0 else None
    try:
        read: object = quantity_int(text, "nvidia.com/gpumem", "container main")
    except RequestError:
        read = "refused"
    assert read == expected


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


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"nums": -1}, "cards must be a non-negative integer, got -1"),
        ({"nums": 1, "memreq": True}, "memory must be a non-negative integer, got True"),
        ({"nums": 1, "coresreq": "30"}, "cores must be a non-negative integer, got '30'"),
        ({"nums": 1, "mem_percentage": -5}, "memory percent must be a non-negative integer, got -5"),
        ({"nums": 0}, "a GPU request needs at least 1 card"),
        ({"nums": 1, "memreq": 2**31}, "memory 2147483648 MiB is more than HAMi can count"),
    ],
)
def test_card_request_refuses_with_the_argument_named(arguments: dict[str, object], message: str) -> None:
    """A request typed on the command line is refused with a line saying which argument is wrong."""
    with pytest.raises(RequestError) as caught:
        card_request(**arguments)  # type: ignore[arg-type]
    assert str(caught.value) == message


def test_card_request_at_hamis_limits() -> None:
    """A request typed on the command line is read with HAMi's defaults right up to their edges."""
    assert card_request(1, memreq=2**31 - 1, coresreq=0) == CardRequest(1, 2**31 - 1, None, 0)
    assert card_request(1, memreq=2048, mem_percentage=50, coresreq=0) == CardRequest(1, 2048, None, 0)
    assert card_request(1, mem_percentage=100) == CardRequest(1, 0, 100, 100, cores_by_webhook=True)
    tiny = HamiConfig(default_memory=1)
    assert card_request(1, coresreq=0, config=tiny) == CardRequest(1, 1, None, 0, memory_by_default=True)


@pytest.mark.parametrize(
    ("container", "message"),
    [
        (["not", "a", "container"], "container must be an object, got list"),
        ({"resources": "lots"}, "container: resources must be an object"),
        ({"name": "", "resources": "lots"}, "container: resources must be an object"),
        ({"name": "main", "resources": {"limits": "x"}}, "container main: resources.limits must be an object"),
        ({"name": "main", "resources": {"requests": "x"}}, "container main: resources.requests must be an object"),
    ],
)
def test_a_malformed_container_is_refused_naming_it(container: object, message: str) -> None:
    """The error names the container when it has a name, and says what is wrong with it."""
    with pytest.raises(RequestError) as caught:
        container_request(container)  # type: ignore[arg-type]
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ({"nvidia.com/gpu": "lots"}, "container main: nvidia.com/gpu 'lots' is not a quantity such as 1, 3k or 1Gi"),
        (
            {"nvidia.com/gpu": "3000000000"},
            "container main: nvidia.com/gpu 3000000000 is more than HAMi can count (it reads nvidia.com/gpu as a plain "
            "number)",
        ),
        (
            {"nvidia.com/gpu": "9223372036854775807"},
            "container main: nvidia.com/gpu 9223372036854775807 is more than HAMi can count (it reads nvidia.com/gpu "
            "as a plain number)",
        ),
        (
            {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4Gi"},
            "container main: nvidia.com/gpumem 4294967296 is more than HAMi can count (it reads nvidia.com/gpumem as "
            "a plain number)",
        ),
        (
            {"nvidia.com/gpu": "1", "nvidia.com/gpucores": "3000000000"},
            "container main: nvidia.com/gpucores 3000000000 is more than HAMi can count (it reads nvidia.com/gpucores "
            "as a plain number)",
        ),
        (
            {"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "101"},
            "container main: nvidia.com/gpumem-percentage 101 is above 100, which HAMi's webhook denies",
        ),
    ],
)
def test_a_resource_hami_cannot_read_is_refused_with_the_whole_reason(limits: dict[str, object], message: str) -> None:
    """The user reads this line to fix the pod: it names the container, the resource and the value."""
    with pytest.raises(RequestError) as caught:
        container_request(ctr(limits))
    assert str(caught.value) == message


def test_memory_factor_overflow_is_refused_naming_the_factor() -> None:
    """HAMi refuses gpumem that overflows int32 once multiplied by memoryFactor; the line says the factor did it."""
    with pytest.raises(RequestError) as caught:
        container_request(
            ctr({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000000000"}), config=HamiConfig(memory_factor=4)
        )
    assert str(caught.value) == (
        "container main: nvidia.com/gpumem 1000000000 is more than HAMi can count once multiplied by memoryFactor"
    )


def test_container_values_at_hamis_limits_are_taken() -> None:
    """Values at the edge of what HAMi reads are still read as HAMi reads them, not refused or dropped."""
    most = container_request(ctr({"nvidia.com/gpu": "2147483647", "nvidia.com/gpumem": "2147483647"}))
    assert most == CardRequest(2147483647, 2147483647, None, 0)
    one_percent = container_request(ctr({"nvidia.com/gpu": "1", "nvidia.com/gpumem-percentage": "1"}))
    assert one_percent == CardRequest(1, 0, 1, 0)
    both = container_request(
        ctr({"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1", "nvidia.com/gpumem-percentage": "50"})
    )
    assert both == CardRequest(1, 1, None, 0)
    assert memory_for(both, CARD) == 1
    defaulted = container_request(
        ctr({"nvidia.com/gpu": "1", "nvidia.com/gpucores": "0"}), config=HamiConfig(default_memory=1)
    )
    assert defaulted == CardRequest(1, 1, None, 0, memory_by_default=True)


def test_pod_requests_apply_the_webhook_and_config_they_are_given() -> None:
    """Without HAMi's webhook a bare card count asks no cores; renamed resources are read from the config."""
    spec = {"containers": [ctr({"nvidia.com/gpu": "1"})]}
    assert pod_requests(spec) == (CardRequest(1, 0, 100, 100, cores_by_webhook=True),)
    assert pod_requests(spec, hami_webhook=False) == (CardRequest(1, 0, 100, 0),)
    assert gpu_requests(spec) == (CardRequest(1, 0, 100, 100, cores_by_webhook=True),)
    assert gpu_requests(spec, hami_webhook=False) == (CardRequest(1, 0, 100, 0),)
    renamed = HamiConfig(resource_count_name="example.com/vgpu")
    assert gpu_requests({"containers": [ctr({"example.com/vgpu": "2"})]}, config=renamed) == (
        CardRequest(2, 0, 100, 100, cores_by_webhook=True),
    )


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (["not", "a", "spec"], "pod spec must be an object, got list"),
        ({"containers": "main"}, "pod spec containers must be a list"),
        ({"initContainers": {"name": "init"}}, "pod spec initContainers must be a list"),
    ],
)
def test_a_malformed_pod_spec_is_refused_saying_what_is_wrong(spec: object, message: str) -> None:
    """A hand-written pod file gets a line naming the broken field."""
    with pytest.raises(RequestError) as caught:
        pod_requests(spec)  # type: ignore[arg-type]
    assert str(caught.value) == message


def test_a_quantity_is_read_up_to_64_characters_and_exponent_64() -> None:
    """Longer text or larger exponents are refused before Decimal does unbounded work on a tenant's string."""
    longest = "0" * 63 + "1"
    assert parse_quantity(longest) == 1
    assert parse_quantity("1e64") == Decimal(10) ** 64
    refusals = {
        "0" * 64 + "1": f"quantity {('0' * 64)!r} is not a quantity such as 1, 3k or 1Gi",
        "1e65": "quantity '1e65' is out of range",
        "lots": "quantity 'lots' is not a quantity such as 1, 3k or 1Gi",
    }
    for text, message in refusals.items():
        with pytest.raises(RequestError) as caught:
            parse_quantity(text)
        assert str(caught.value) == message


@pytest.mark.parametrize(
    ("request_", "text"),
    [
        (CardRequest(1, 4096, None, 30), "1 card x 4096 MiB, 30% cores"),
        (CardRequest(1, 1, None, 0), "1 card x 1 MiB, 0% cores"),
        (CardRequest(2, 0, 25, 0), "2 cards x 25% memory, 0% cores"),
        (CardRequest(3, 0, None, 100), "3 cards x all memory, 100% cores"),
    ],
)
def test_describe_says_the_request_in_one_phrase(request_: CardRequest, text: str) -> None:
    """Messages quote the request this way; a percentage or the whole card reads as such, not as 0 MiB."""
    assert request_.describe() == text
