"""Pod allocations (`hami.io/vgpu-devices-allocated`): one entry per container, init containers first."""

from __future__ import annotations

import pytest
from core_strategies import allocations, outcome
from hypothesis import given
from hypothesis import strategies as st

from kubectl_hami_place.core.allocations import ContainerDevice, encode_allocation, parse_allocation
from kubectl_hami_place.core.errors import AllocationError


def test_protocol_doc_example_two_containers_only_the_second_on_a_gpu() -> None:
    assert parse_allocation(";GPU-x,NVIDIA,3000,0:;") == ((), (ContainerDevice("GPU-x", "NVIDIA", 3000, 0),))


def test_one_container_on_two_cards() -> None:
    (devices,) = parse_allocation("GPU-a,NVIDIA,20480,50:GPU-b,NVIDIA,20480,50:;")
    assert [d.uuid for d in devices] == ["GPU-a", "GPU-b"]
    assert all(d.usedmem == 20480 and d.usedcores == 50 for d in devices)


def test_init_container_first_then_app_container() -> None:
    init, app = parse_allocation("GPU-a,NVIDIA,1000,0:;GPU-a,NVIDIA,4000,30:;")
    assert init[0].usedmem == 1000
    assert app[0].usedcores == 30


def test_empty_annotation_and_single_empty_container() -> None:
    assert parse_allocation("") == ()
    assert parse_allocation(";") == ((),)


def test_fields_after_the_fourth_are_ignored_as_hami_v2_10_does() -> None:
    assert parse_allocation("GPU-a,NVIDIA,1,2,3:;") == ((ContainerDevice("GPU-a", "NVIDIA", 1, 2),),)


def test_a_legacy_mig_entry_keeps_its_whole_uuid() -> None:
    ((device,),) = parse_allocation("GPU-a[1-0],NVIDIA,5120,0:;")
    assert device.uuid == "GPU-a[1-0]"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("GPU-a,NVIDIA:;", "has 2 fields"),
        ("GPU-a,NVIDIA,-2147483649,0:;", "memory -2147483649 is out of range"),
        ("GPU-a,NVIDIA,1,x:;", "cores 'x' is not an integer"),
        ("GPU-a,NVIDIA,2147483648,0:;", "out of range"),
        ("GPU-a,NVIDIA,1,٣:;", "cores '٣' is not an integer"),
        (";;GPU-a,NVIDIA,1.5,0:;", "allocation container 2"),
        ("GPU-a,NVIDIA," + "9" * 5000 + ",0:;", "memory 9999999999"),  # past int() of Python's 4,300 digits
        ("GPU-a,NVIDIA,1,-" + "9" * 5000 + ":;", "is out of range"),
    ],
)
def test_garbage_gives_an_allocation_error_naming_the_container(text: str, fragment: str) -> None:
    with pytest.raises(AllocationError) as caught:
        parse_allocation(text)
    assert fragment in str(caught.value)


def test_signs_and_leading_zeros_read_as_go_reads_them() -> None:
    assert parse_allocation("GPU-a,NVIDIA,+0010,-0:;") == ((ContainerDevice("GPU-a", "NVIDIA", 10, 0),),)


def test_empty_uuid_vendor_and_negative_numbers_decode_and_encode_back() -> None:
    containers = ((ContainerDevice("", "", -5, -1),),)
    assert parse_allocation(",,-5,-1:;") == containers
    assert encode_allocation(containers) == ",,-5,-1:;"


def test_a_device_without_a_comma_is_skipped_and_the_rest_counts() -> None:
    assert parse_allocation("junk:GPU-a,NVIDIA,1,2:;x;") == ((ContainerDevice("GPU-a", "NVIDIA", 1, 2),), ())


@given(allocations)
def test_encoding_round_trips(containers: tuple[tuple[ContainerDevice, ...], ...]) -> None:
    assert parse_allocation(encode_allocation(containers)) == containers


def test_encoding_matches_hamis_writer() -> None:
    containers = ((), (ContainerDevice("GPU-x", "NVIDIA", 3000, 0),))
    assert encode_allocation(containers) == ";GPU-x,NVIDIA,3000,0:;"


def test_encoding_refuses_what_would_not_decode_back() -> None:
    with pytest.raises(AllocationError):
        encode_allocation(((ContainerDevice("GPU,x", "NVIDIA", 1, 0),),))


@given(st.text() | st.lists(st.sampled_from(["GPU-a", "NVIDIA", "1", "-1", "", ":", ";", ",", "x"])).map("".join))
def test_garbage_raises_only_allocation_errors(text: str) -> None:
    result = outcome(lambda: parse_allocation(text), AllocationError)
    assert isinstance(result, AllocationError | tuple)


@given(st.none() | st.integers() | st.lists(st.text()))
def test_non_strings_are_refused(value: object) -> None:
    with pytest.raises(AllocationError):
        parse_allocation(value)


def test_a_non_string_allocation_is_refused_naming_its_type() -> None:
    """An annotation value a tool wrote as a number must say what it got, not crash or pass as an empty pod."""
    with pytest.raises(AllocationError) as caught:
        parse_allocation(5)
    assert str(caught.value) == "allocation must be a string, got int"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "GPU-a,NVIDIA,1,x:;",
            "allocation container 0 device 'GPU-a,NVIDIA,1,x': cores 'x' is not an integer",
        ),
        (
            "GPU-" + "a" * 45 + ",NVIDIA,1,x:;",
            "allocation container 0 device 'GPU-" + "a" * 45 + ",NVIDIA,1,x': cores 'x' is not an integer",
        ),
        (
            "GPU-" + "a" * 46 + ",NVIDIA,1,x:;",
            "allocation container 0 device 'GPU-" + "a" * 46 + ",NVIDIA...': cores 'x' is not an integer",
        ),
        (
            "GPU-a,NVIDIA," + "1" * 45 + "x,0:;",
            "allocation container 0 device 'GPU-a,NVIDIA," + "1" * 44 + "...': memory '" + "1" * 40 + "' is not an "
            "integer",
        ),
        (
            "GPU-a,NVIDIA,-" + "1" * 45 + ",0:;",
            "allocation container 0 device 'GPU-a,NVIDIA,-" + "1" * 43 + "...': memory -" + "1" * 39 + " is out of "
            "range",
        ),
    ],
)
def test_an_unreadable_device_is_named_whole_up_to_60_characters(text: str, message: str) -> None:
    """The error is the one line a user sees about a pod HAMi drops: it quotes the device, clipped so that a tenant's
    long annotation cannot flood the line, and the number as far as 40 characters."""
    with pytest.raises(AllocationError) as caught:
        parse_allocation(text)
    assert str(caught.value) == message


def test_the_int32_limits_themselves_are_read_with_a_sign() -> None:
    """Go's ParseInt(s, 10, 32) takes -2147483648 and +2147483647: a pod holding either still counts on its card."""
    assert parse_allocation("GPU-a,NVIDIA,-2147483648,+2147483647:;") == (
        (ContainerDevice("GPU-a", "NVIDIA", -(2**31), 2**31 - 1),),
    )


@pytest.mark.parametrize(
    ("device", "message"),
    [
        (ContainerDevice("GPU,x", "NVIDIA", 1, 0), "allocation container 1: uuid 'GPU,x' cannot be encoded"),
        (ContainerDevice("GPU-a", "NV;IDIA", 1, 0), "allocation container 1: vendor 'NV;IDIA' cannot be encoded"),
        (ContainerDevice("GPU-a", "NV:IDIA", 1, 0), "allocation container 1: vendor 'NV:IDIA' cannot be encoded"),
        (ContainerDevice("GPU-a", "NVIDIA", 2**31, 0), "allocation container 1: memory 2147483648 is out of range"),
        (
            ContainerDevice("GPU-a", "NVIDIA", 0, -(2**31) - 1),
            "allocation container 1: cores -2147483649 is out of range",
        ),
    ],
)
def test_encoding_refuses_a_device_naming_the_container_and_the_field(device: ContainerDevice, message: str) -> None:
    """Tests build HAMi's annotations with the encoder: one that would not decode back must say which field broke."""
    with pytest.raises(AllocationError) as caught:
        encode_allocation(((), (device,)))
    assert str(caught.value) == message


def test_encoding_takes_any_other_text_and_the_int32_limits() -> None:
    """Only the three separators are refused: other vendors' words (Metax-GPU, MLU) and the int32 limits encode."""
    containers = ((ContainerDevice("GPU-X", "Metax-GPU", -(2**31), 2**31 - 1),),)
    assert encode_allocation(containers) == "GPU-X,Metax-GPU,-2147483648,2147483647:;"
    assert parse_allocation(encode_allocation(containers)) == containers
