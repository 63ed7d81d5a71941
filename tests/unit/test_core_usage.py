"""Per-card usage counted as HAMi v2.10's scheduler counts it."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType
from typing import Any

import pytest
from core_strategies import json_values, outcome
from hypothesis import given

from kubectl_hami_place.core.allocations import ContainerDevice
from kubectl_hami_place.core.cards import Card
from kubectl_hami_place.core.errors import AllocationError
from kubectl_hami_place.core.usage import (
    CardShare,
    CardUsage,
    PodAllocation,
    PodOnCard,
    card_usage,
    pod_allocation,
    release,
)

CARDS = (
    Card("GPU-a", index=0, count=10, devmem=40960, devcore=100, type="NVIDIA-A100", health=True),
    Card("GPU-b", index=1, count=10, devmem=40960, devcore=100, type="NVIDIA-A100", health=True),
)


def pod(
    name: str,
    allocated: str,
    *,
    node: str = "gpu-a100-0",
    phase: str = "Running",
    init: int = 0,
    deleting: bool = False,
    init_status: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A pod object as HAMi's scheduler leaves it after Filter."""
    metadata: dict[str, Any] = {
        "namespace": "team",
        "name": name,
        "uid": f"uid-{name}",
        "annotations": {"hami.io/vgpu-node": node, "hami.io/vgpu-devices-allocated": allocated},
    }
    if deleting:
        metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    status: dict[str, Any] = {"phase": phase}
    if init_status is not None:
        status["initContainerStatuses"] = init_status
    spec = {"initContainers": [{"name": f"init{i}"} for i in range(init)], "containers": [{"name": "main"}]}
    return {"metadata": metadata, "spec": spec, "status": status}


def usage_of(*pods: dict[str, Any]) -> dict[str, Any]:
    """card_usage over the pods' allocations on gpu-a100-0."""
    allocations = [a for a in (pod_allocation(p) for p in pods) if a is not None]
    return card_usage(CARDS, allocations, node="gpu-a100-0")


def test_protocol_doc_allocation_counts_one_slot_and_its_memory() -> None:
    usage = usage_of(pod("p", ";GPU-a,NVIDIA,3000,0:;", init=0))
    assert (usage["GPU-a"].used_slots, usage["GPU-a"].used_mem, usage["GPU-a"].used_cores) == (1, 3000, 0)
    assert usage["GPU-b"].used_slots == 0
    assert [p.name for p in usage["GPU-a"].pods] == ["p"]


def test_every_app_container_on_a_card_takes_a_slot_and_memory_and_cores_add_up() -> None:
    usage = usage_of(pod("p", "GPU-a,NVIDIA,1000,10:;GPU-a,NVIDIA,2000,20:;"))
    assert (usage["GPU-a"].used_slots, usage["GPU-a"].used_mem, usage["GPU-a"].used_cores) == (2, 3000, 30)


def test_pods_add_up_on_a_card() -> None:
    usage = usage_of(pod("p", "GPU-a,NVIDIA,1000,10:;"), pod("q", "GPU-a,NVIDIA,5000,30:GPU-b,NVIDIA,5000,30:;"))
    assert (usage["GPU-a"].used_slots, usage["GPU-a"].used_mem, usage["GPU-a"].used_cores) == (2, 6000, 40)
    assert (usage["GPU-b"].used_slots, usage["GPU-b"].used_mem) == (1, 5000)


def test_init_containers_count_as_their_peak_against_the_app_sum() -> None:
    """CollapseInitContainerUsage: per card max(largest init container, sum of app containers), one init slot."""
    usage = usage_of(pod("p", "GPU-a,NVIDIA,8000,50:;GPU-a,NVIDIA,3000,60:;GPU-a,NVIDIA,2000,10:;", init=2))
    assert (usage["GPU-a"].used_slots, usage["GPU-a"].used_mem, usage["GPU-a"].used_cores) == (1, 8000, 60)


def test_an_init_container_alone_on_a_card_holds_it_until_init_succeeded() -> None:
    allocated = "GPU-b,NVIDIA,4000,0:;GPU-a,NVIDIA,2000,0:;"
    usage = usage_of(pod("p", allocated, init=1, phase="Pending"))
    assert (usage["GPU-b"].used_slots, usage["GPU-b"].used_mem) == (1, 4000)
    done = [{"name": "init0", "state": {"terminated": {"exitCode": 0}}}]
    usage = usage_of(pod("p", allocated, init=1, init_status=done))
    assert (usage["GPU-b"].used_slots, usage["GPU-b"].used_mem) == (0, 0)
    assert usage["GPU-a"].used_mem == 2000


def test_init_containers_done_stop_counting_whatever_the_phase_as_in_hami() -> None:
    allocated = "GPU-b,NVIDIA,4000,0:;GPU-a,NVIDIA,2000,0:;"
    done = [{"name": "init0", "state": {"terminated": {"exitCode": 0}}}]
    usage = usage_of(pod("p", allocated, init=1, phase="Pending", init_status=done))
    assert (usage["GPU-b"].used_slots, usage["GPU-a"].used_mem) == (0, 2000)
    running = [{"name": "init0", "state": {"running": {}}}]
    assert usage_of(pod("p", allocated, init=1, phase="Pending", init_status=running))["GPU-b"].used_mem == 4000


def test_a_pod_read_through_read_only_mappings_is_the_same_allocation() -> None:
    # Decoded objects are dicts and take the quick check; any other mapping must read the same.
    allocated = "GPU-b,NVIDIA,4000,0:;GPU-a,NVIDIA,2000,0:;"
    done = [{"name": "init0", "state": {"terminated": {"exitCode": 0}}}]
    plain = pod("p", allocated, init=1, deleting=True, init_status=done)
    frozen = MappingProxyType({key: MappingProxyType(value) for key, value in plain.items()})
    assert pod_allocation(frozen) == pod_allocation(plain)


def test_a_failed_init_container_keeps_the_peak() -> None:
    failed = [{"name": "init0", "state": {"terminated": {"exitCode": 1}}}]
    usage = usage_of(pod("p", "GPU-b,NVIDIA,4000,0:;GPU-a,NVIDIA,2000,0:;", init=1, init_status=failed))
    assert usage["GPU-b"].used_mem == 4000


@pytest.mark.parametrize(("phase", "counted"), [("Failed", False), ("Succeeded", False), ("Pending", True), ("", True)])
def test_only_failed_and_succeeded_pods_stop_counting(phase: str, counted: bool) -> None:
    usage = usage_of(pod("p", "GPU-a,NVIDIA,1000,0:;", phase=phase))
    assert (usage["GPU-a"].used_slots == 1) is counted


def test_terminating_pods_still_count() -> None:
    usage = usage_of(pod("p", "GPU-a,NVIDIA,1000,0:;", deleting=True))
    assert usage["GPU-a"].used_mem == 1000
    assert usage["GPU-a"].pods[0].deleting


def test_the_vgpu_node_annotation_not_spec_node_name_places_the_pod() -> None:
    usage = usage_of(pod("p", "GPU-a,NVIDIA,1000,0:;", node="other-node"))
    assert usage["GPU-a"].used_slots == 0


def test_a_legacy_mig_entry_counts_on_no_card() -> None:
    usage = usage_of(pod("p", "GPU-a[1-0],NVIDIA,5120,0:;"))
    assert usage["GPU-a"].used_mem == 0


def test_pods_without_hami_annotations_are_not_allocations() -> None:
    assert pod_allocation({"metadata": {"name": "x", "annotations": {"hami.io/vgpu-node": "n"}}}) is None
    assert pod_allocation({"metadata": {"name": "x"}}) is None
    assert pod_allocation({}) is None


def test_an_undecodable_allocation_names_the_pod() -> None:
    with pytest.raises(AllocationError, match="pod team/p: allocation container 0"):
        pod_allocation(pod("p", "GPU-a,NVIDIA:;"))


def test_release_gives_back_exactly_the_evicted_pods_share() -> None:
    victim = pod_allocation(pod("victim", "GPU-a,NVIDIA,30000,50:;"))
    other = pod_allocation(pod("other", "GPU-a,NVIDIA,5000,20:;"))
    assert victim is not None and other is not None
    usage = card_usage(CARDS, [victim, other])
    after = release(usage, victim)
    assert (after["GPU-a"].used_slots, after["GPU-a"].used_mem, after["GPU-a"].used_cores) == (1, 5000, 20)
    assert [p.name for p in after["GPU-a"].pods] == ["other"]
    assert usage["GPU-a"].used_mem == 35000, "release returns a new mapping"
    assert release(after, victim) == after, "releasing a pod that is not there changes nothing"


def test_shares_collapse_per_card() -> None:
    assert PodAllocation("ns", "p", "u", "n", "Running", ((),)).shares() == ()
    allocation = pod_allocation(pod("p", "GPU-a,NVIDIA,1,2:GPU-b,NVIDIA,3,4:;GPU-a,NVIDIA,5,6:;"))
    assert allocation is not None
    assert allocation.shares() == (CardShare("GPU-a", 2, 6, 8), CardShare("GPU-b", 1, 3, 4))


@pytest.mark.parametrize("init_done", [False, True])
@pytest.mark.parametrize(("mem", "cores"), [(3000, 30), (0, 0), (-5, -1)])
def test_one_container_on_one_card_is_tallied_as_the_general_count_does(init_done: bool, mem: int, cores: int) -> None:
    # takes() answers the common pod (one container, one card) without the general tally: the same pod with an
    # empty second container goes through the general tally and must take the same, init done or not.
    device = ContainerDevice("GPU-a", "NVIDIA", mem, cores)
    alone = PodAllocation("ns", "p", "u", "n", "Running", ((device,),), init_done=init_done)
    assert alone.takes() == replace(alone, containers=((device,), ())).takes()


@given(json_values)
def test_pod_garbage_raises_only_allocation_errors(data: object) -> None:
    result = outcome(lambda: pod_allocation(data), AllocationError)  # type: ignore[arg-type]
    assert result is None or isinstance(result, AllocationError | PodAllocation)


@given(json_values, json_values)
def test_annotation_garbage_raises_only_allocation_errors(node: object, allocated: object) -> None:
    obj = {"metadata": {"annotations": {"hami.io/vgpu-node": node, "hami.io/vgpu-devices-allocated": allocated}}}
    result = outcome(lambda: pod_allocation(obj), AllocationError)
    assert result is None or isinstance(result, AllocationError | PodAllocation)


def test_a_pod_that_is_not_an_object_is_refused_by_its_type() -> None:
    """A watch or file can hand over anything; the error must say what came instead of a pod."""
    with pytest.raises(AllocationError) as caught:
        pod_allocation(["not", "a", "pod"])  # type: ignore[arg-type]
    assert str(caught.value) == "a pod must be an object, got list"


@pytest.mark.parametrize("node", ["", 7])
def test_a_pod_whose_vgpu_node_is_empty_or_not_text_is_not_placed(node: object) -> None:
    """HAMi places a pod on the node its annotation names: no name, no node to count the cards on."""
    placed = pod("p", "GPU-a,NVIDIA,1000,0:;")
    placed["metadata"]["annotations"]["hami.io/vgpu-node"] = node
    assert pod_allocation(placed) is None


def test_a_pod_missing_its_names_and_phase_reads_them_as_empty() -> None:
    """An empty uid must stay empty: release matches pods by uid only when both sides have one."""
    bare = {"metadata": {"annotations": {"hami.io/vgpu-node": "n", "hami.io/vgpu-devices-allocated": "GPU-a,N,1,2:;"}}}
    assert pod_allocation(bare) == PodAllocation("", "", "", "n", "", ((ContainerDevice("GPU-a", "N", 1, 2),),))


def test_an_empty_list_of_init_statuses_is_not_init_succeeded() -> None:
    """HAMi's AllInitContainersSucceeded is false for no statuses: the init peak keeps counting."""
    usage = usage_of(pod("p", "GPU-b,NVIDIA,4000,0:;GPU-a,NVIDIA,2000,0:;", init=1, init_status=[]))
    assert usage["GPU-b"] == CardUsage("GPU-b", 1, 4000, 0, (PodOnCard("team", "p", "uid-p", "Running", 1, 4000, 0),))


def test_an_init_card_used_at_zero_counts_zero_and_one_slot() -> None:
    """CollapseInitContainerUsage starts at 0: an init-only card used at 0 holds one slot and nothing else."""
    allocation = pod_allocation(pod("p", "GPU-a,NVIDIA,0,0:;GPU-b,NVIDIA,2000,0:;", init=1))
    assert allocation is not None
    assert allocation.shares() == (CardShare("GPU-a", 1, 0, 0), CardShare("GPU-b", 1, 2000, 0))


def test_an_init_container_alone_in_the_allocation_leaves_once_init_succeeded() -> None:
    """AppContainersOnlyDeviceUsage drops init containers even when the annotation lists no app container."""
    device = ContainerDevice("GPU-a", "NVIDIA", 4000, 30)
    alone = PodAllocation("ns", "p", "u", "n", "Running", ((device,),), init_containers=1)
    assert alone.takes() == [("GPU-a", 1, 4000, 30)]
    assert replace(alone, init_done=True).takes() == []


def test_a_device_on_a_card_the_node_does_not_list_does_not_stop_the_count() -> None:
    """A legacy MIG entry or a card gone from the register counts nowhere, but the pod's other cards still count."""
    usage = usage_of(pod("p", "GPU-z,NVIDIA,1000,0:GPU-a,NVIDIA,2000,10:;"))
    assert usage["GPU-a"] == CardUsage("GPU-a", 1, 2000, 10, (PodOnCard("team", "p", "uid-p", "Running", 1, 2000, 10),))


def test_releasing_the_last_pod_on_a_card_leaves_it_empty() -> None:
    """A card freed of its only pod is wholly free, and a share on a card not in the usage is skipped, not a stop."""
    victim = pod_allocation(pod("victim", "GPU-z,NVIDIA,1,1:GPU-a,NVIDIA,30000,50:;"))
    assert victim is not None
    usage = card_usage(CARDS, [victim])
    assert release(usage, victim)["GPU-a"] == CardUsage("GPU-a", 0, 0, 0, ())


def test_release_matches_by_name_when_either_side_lacks_a_uid() -> None:
    """A pod known only by name (a planner's pod) releases the same pod counted with its uid, and only that pod."""
    counted = pod_allocation(pod("victim", "GPU-a,NVIDIA,30000,50:;"))
    other = pod_allocation(pod("other", "GPU-a,NVIDIA,5000,20:;"))
    assert counted is not None and other is not None
    usage = card_usage(CARDS, [counted, other])
    after = release(usage, replace(counted, uid=""))
    assert (after["GPU-a"].used_slots, after["GPU-a"].used_mem, after["GPU-a"].used_cores) == (1, 5000, 20)
    assert [p.name for p in after["GPU-a"].pods] == ["other"]
    nameless = card_usage(CARDS, [replace(counted, uid=""), replace(other, uid="")])
    assert [p.name for p in release(nameless, replace(counted, uid=""))["GPU-a"].pods] == ["other"]
