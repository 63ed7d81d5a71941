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
