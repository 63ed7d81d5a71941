"""Vectors read from HAMi v2.10's code, one citation (file and function) per case, kept apart from the generator.

The differential test (`tests/cluster/test_hami_differential.py`) asks the sandbox's HAMi about generated cases;
these cases hold the model to what the code says where the sandbox cannot judge (or as a second check where it can).
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from kubectl_hami_place.core.allocations import ContainerDevice, parse_allocation
from kubectl_hami_place.core.cards import PAIR_SCORE_ANNOTATION, REGISTER_ANNOTATION, Card, node_cards
from kubectl_hami_place.core.errors import AllocationError, RegisterError, RequestError
from kubectl_hami_place.core.fit import NUMA_BIND, SCORING_WEIGHTS, fit_pod, fit_pod_on_node, scoring_weights
from kubectl_hami_place.core.hami_config import HAMI_DEFAULTS
from kubectl_hami_place.core.pin_check import PinView, Scope, pin_verdict, workload_from_pod
from kubectl_hami_place.core.placement import PlacementSpec
from kubectl_hami_place.core.planner import FitGoal, PlanPod, why
from kubectl_hami_place.core.planner import plan as planner_plan
from kubectl_hami_place.core.planner.objects import snapshot_from_objects
from kubectl_hami_place.core.refs import parse_card_ref
from kubectl_hami_place.core.requests import card_request
from kubectl_hami_place.core.selectors import selector_from_dict
from kubectl_hami_place.core.usage import CardUsage, PodAllocation, card_usage, pod_allocation

CARD = {"id": "GPU-a", "index": 0, "count": 10, "devmem": 40960, "devcore": 100, "type": "NVIDIA-A100", "health": True}
CARDS = (
    Card("GPU-a", 0, 10, 40960, 100, "NVIDIA-A100", 0, True, "hami-core"),
    Card("GPU-b", 1, 10, 40960, 100, "NVIDIA-A100", 0, True, "hami-core"),
)


def node(register: object, **annotations: str) -> dict[str, Any]:
    """A node carrying this register (a list is written as JSON) and these annotations."""
    text = register if isinstance(register, str) else json.dumps(register)
    return {"metadata": {"name": "n", "annotations": {REGISTER_ANNOTATION: text, **annotations}}}


# Item 6, the register: HAMi's GetNodeDevices (pkg/device/nvidia/device.go) fails the node when json.Unmarshal of the
# register into []*DeviceInfo (pkg/device/devices.go, UnMarshalNodeDevices) fails, or when DecodePairScores fails on
# a present hami.io/node-nvidia-score; register() then skips the node and Filter calls it "node unregistered".
REGISTER_CASES = [
    ("devices.go DeviceInfo.MIGProfiles []MigProfile: a string", [{**CARD, "migProfiles": "x"}], False),
    ("devices.go MigProfile.MemoryMB int32: a float", [{**CARD, "migProfiles": [{"memoryMB": 1.5}]}], False),
    ("devices.go MigProfile.SliceCount uint32: negative", [{**CARD, "MIGPROFILES": [{"sliceCount": -1}]}], False),
    (
        "devices.go MigPlacement.Start uint32: a string",
        [{**CARD, "migProfiles": [{"placements": [{"start": "0"}]}]}],
        False,
    ),
    ("devices.go DeviceInfo.MIGTemplate []Geometry: a list of objects", [{**CARD, "migtemplate": [{"a": 1}]}], False),
    (
        "devices.go MigTemplate.Count int32 (no json tag: key Count)",
        [{**CARD, "migtemplate": [[{"count": "2"}]]}],
        False,
    ),
    ("devices.go DeviceInfo.DeviceVendor string: a number", [{**CARD, "devicevendor": 1}], False),
    ("devices.go DeviceInfo.CustomInfo map[string]any: a list", [{**CARD, "custominfo": [1]}], False),
    (
        "devices.go DeviceInfo: right types and nulls decode",
        [
            {
                **CARD,
                "migProfiles": None,
                "custominfo": {"a": [1]},
                "migtemplate": [[{"Name": "1g", "Core": 10, "Memory": 5, "Count": 1}], None],
                "devicevendor": "NVIDIA",
            }
        ],
        True,
    ),
    ('devices.go DeviceInfo.DevicePairScore has json:"-": never decoded', [{**CARD, "devicepairscore": 7}], True),
]


@pytest.mark.parametrize(("citation", "register", "registered"), REGISTER_CASES, ids=[c[0] for c in REGISTER_CASES])
def test_a_known_register_field_of_the_wrong_type_unregisters_the_node(
    citation: str, register: object, registered: bool
) -> None:
    if registered:
        assert node_cards(node(register))[0].uuid == "GPU-a"
    else:
        with pytest.raises(RegisterError):
            node_cards(node(register))


PAIR_SCORE_CASES = [
    ("device.go GetNodeDevices/DecodePairScores: not JSON", "{", False),
    ("device.go GetNodeDevices/DecodePairScores: empty text is not JSON", "", False),
    ("devices.go DevicePairScores is a list: an object", '{"uuid":"GPU-a"}', False),
    ("devices.go DevicePairScore.ID string: a number", '[{"uuid":1}]', False),
    ("devices.go DevicePairScore.Scores map[string]int: a float", '[{"uuid":"GPU-a","score":{"GPU-b":1.5}}]', False),
    ("devices.go DevicePairScore.Scores map[string]int: a list", '[{"uuid":"GPU-a","score":[1]}]', False),
    ("devices.go DevicePairScores: null, null entries and unknown keys decode", '[null,{"x":1,"uuid":null}]', True),
    ("devices.go DevicePairScores: as the device plugin writes it", '[{"uuid":"GPU-a","score":{"GPU-b":40}}]', True),
]


@pytest.mark.parametrize(("citation", "scores", "registered"), PAIR_SCORE_CASES, ids=[c[0] for c in PAIR_SCORE_CASES])
def test_a_malformed_pair_score_annotation_unregisters_the_node(citation: str, scores: str, registered: bool) -> None:
    annotated = node([CARD], **{PAIR_SCORE_ANNOTATION: scores})
    if registered:
        assert len(node_cards(annotated)) == 1
    else:
        with pytest.raises(RegisterError, match=PAIR_SCORE_ANNOTATION):
            node_cards(annotated)


# Item 6, the allocation: DecodeContainerDevices (pkg/device/devices.go) skips a device without a comma, fails the
# pod (onAddPod drops it) on a device with a comma and fewer than 4 fields or a number ParseInt(s, 10, 32) refuses,
# keeps empty UUIDs and vendors and negative numbers; getNodesUsage (pkg/scheduler/scheduler.go) matches
# d.Device.ID == udevice.UUID exactly.
ALLOCATION_CASES = [
    ("devices.go DecodeContainerDevices: no comma, skipped", "GPU-b:GPU-a,NVIDIA,1000,10:;", 1000, 10),
    ("devices.go DecodeContainerDevices: a container of no comma at all", "junk;GPU-a,NVIDIA,1000,10:;", 1000, 10),
    ("devices.go DecodeContainerDevices: empty vendor counts", "GPU-a,,1000,10:;", 1000, 10),
    (
        "devices.go DecodeContainerDevices: ParseInt reads a sign",
        "GPU-a,NVIDIA,5000,10:GPU-a,NVIDIA,-1000,+5:;",
        4000,
        15,
    ),
    ("scheduler.go getNodesUsage: a legacy MIG suffix matches no card", "GPU-a[0-1],NVIDIA,1000,10:;", 0, 0),
    ("initContainer.go CollapseInitContainerUsage: a negative sum counts as 0", "GPU-a,NVIDIA,-1000,-5:;", 0, 0),
]


@pytest.mark.parametrize(("citation", "text", "mem", "cores"), ALLOCATION_CASES, ids=[c[0] for c in ALLOCATION_CASES])
def test_allocations_count_as_hami_decodes_them(citation: str, text: str, mem: int, cores: int) -> None:
    pod = {
        "metadata": {
            "name": "p",
            "annotations": {"hami.io/vgpu-node": "n", "hami.io/vgpu-devices-allocated": text},
        },
        "status": {"phase": "Running"},
    }
    allocation = pod_allocation(pod)
    assert allocation is not None
    usage = card_usage(CARDS, [allocation], node="n")["GPU-a"]
    assert (usage.used_mem, usage.used_cores) == (mem, cores)


def test_an_empty_uuid_counts_on_a_card_registered_without_one() -> None:
    """scheduler.go getNodesUsage: d.Device.ID == udevice.UUID, both "" for a register entry without an id."""
    allocation = pod_allocation(
        {
            "metadata": {
                "name": "p",
                "annotations": {"hami.io/vgpu-node": "n", "hami.io/vgpu-devices-allocated": ",x,7,0:;"},
            }
        }
    )
    assert allocation is not None
    assert card_usage((Card(""),), [allocation], node="n")[""].used_mem == 7


def test_app_containers_only_keep_a_negative_sum_once_init_containers_succeeded() -> None:
    """initContainer.go AppContainersOnlyDeviceUsage sums the app containers with no floor at 0."""
    done = {"state": {"terminated": {"exitCode": 0}}}
    pod = {
        "metadata": {
            "name": "p",
            "annotations": {
                "hami.io/vgpu-node": "n",
                "hami.io/vgpu-devices-allocated": "GPU-a,NVIDIA,3000,0:;GPU-a,NVIDIA,-1000,0:;",
            },
        },
        "spec": {"initContainers": [{"name": "i"}], "containers": [{"name": "c"}]},
        "status": {"phase": "Running", "initContainerStatuses": [done]},
    }
    allocation = pod_allocation(pod)
    assert allocation is not None
    assert card_usage(CARDS, [allocation], node="n")["GPU-a"].used_mem == -1000


@pytest.mark.parametrize(
    ("citation", "text"),
    [
        ("devices.go DecodeContainerDevices: a comma and fewer than 4 fields", "GPU-a,NVIDIA,1:;"),
        ("devices.go DecodeContainerDevices: ParseInt(s, 10, 32) out of range", "GPU-a,NVIDIA,2147483648,0:;"),
        ("devices.go DecodeContainerDevices: ParseInt refuses a fraction", "GPU-a,NVIDIA,1.5,0:;"),
    ],
)
def test_what_hami_cannot_decode_drops_the_pod(citation: str, text: str) -> None:
    with pytest.raises(AllocationError):
        parse_allocation(text)


# Item 3: the pin drops the webhook's `gpucores: 100` from a container given a share below 100%; HAMi's scheduler then
# reads no gpucores and applies defaultCores (device.go GenerateResourceRequests: `corenum := dev.config.DefaultCores`),
# and Fit refuses a card with fewer cores free (device.go Fit: `dev.Totalcore-dev.Usedcores < k.Coresreq`).
DEFAULT_CORES_CASES = [
    ("device.go GenerateResourceRequests + Fit: defaultCores 20, 85 cores used", 20, 85, "CardInsufficientCore"),
    ("device.go GenerateResourceRequests + Fit: defaultCores 20, 80 cores used", 20, 80, None),
    ("device.go Fit: defaultCores 0 on a card whose cores are all used", 0, 100, "CardComputeUnitsExhausted"),
    ("device.go Fit: defaultCores 150 is cut to 100 (k.Coresreq > 100)", 150, 1, "CardInsufficientCore"),
]


@pytest.mark.parametrize(
    ("citation", "default_cores", "used_cores", "reason"), DEFAULT_CORES_CASES, ids=[c[0] for c in DEFAULT_CORES_CASES]
)
def test_a_share_pin_predicts_hamis_default_cores(
    citation: str, default_cores: int, used_cores: int, reason: str | None
) -> None:
    config = replace(HAMI_DEFAULTS, default_cores=default_cores)
    tenant = PodAllocation("t", "t", "u", "n", "Running", ((ContainerDevice("GPU-a", "NVIDIA", 1000, used_cores),),))
    pod = {"spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
    workload = workload_from_pod(pod, "the pod", config=config)
    pinned = pin_verdict(pin_spec("gpu-0/50"), PinView({"n": node([CARD])}, (tenant,)), workload)
    assert pinned.checks[0].request.coresreq == default_cores
    assert pinned.patches[0].drop_cores
    assert [p.reason for p in pinned.problems] == ([reason] if reason else [])


def pin_spec(*devices: str) -> PlacementSpec:
    """A placement on node n naming these cards."""
    return PlacementSpec(
        req_id="req-12345",
        pod_selector=selector_from_dict({"matchLabels": {"app": "x"}}),
        node_name="n",
        gpu_devices=tuple(parse_card_ref(d) for d in devices),
    )


# Item 1: nvidia.com/numa-bind. device.go assertNuma (strconv.ParseBool), gpu_policy.go DeviceUsageList.Less (NUMA
# groups kept together: spread lower NUMA first, binpack higher first, the score within a group), device.go Fit (a
# card of another NUMA node drops the cards picked so far, counted as NumaNotFit).
def numa_cards(*numas: int) -> tuple[Card, ...]:
    """Cards GPU-0.. on these NUMA nodes."""
    return tuple(
        Card(f"GPU-{i}", i, 10, 8192, 100, "NVIDIA-A100", numa, True, "hami-core") for i, numa in enumerate(numas)
    )


def slots_used(*counts: int) -> dict[str, CardUsage]:
    """Usage of GPU-0.. by slots alone (the score is the slots used)."""
    return {f"GPU-{i}": CardUsage(f"GPU-{i}", used_slots=n) for i, n in enumerate(counts)}


NUMA_CASES = [
    ("gpu_policy.go Less spread, no numa-bind: score first", "spread", "", (0, 0, 1), (5, 1, 3), ("GPU-1", "GPU-2")),
    (
        "gpu_policy.go Less spread + numa-bind; device.go Fit",
        "spread",
        "true",
        (0, 0, 1),
        (5, 1, 3),
        ("GPU-1", "GPU-0"),
    ),
    ("gpu_policy.go Less binpack, no numa-bind", "binpack", "", (0, 0, 1, 1), (5, 1, 3, 0), ("GPU-0", "GPU-2")),
    ("gpu_policy.go Less binpack + numa-bind", "binpack", "True", (0, 0, 1, 1), (5, 1, 3, 0), ("GPU-0", "GPU-1")),
    (
        "gpu_policy.go lessByChain: numa-bind puts numa first",
        "spread,binpack",
        "1",
        (1, 0, 1),
        (5, 1, 3),
        ("GPU-2", "GPU-0"),
    ),
    ("device.go assertNuma: ParseBool refuses 'yes'", "spread", "yes", (0, 0, 1), (5, 1, 3), ("GPU-1", "GPU-2")),
]


@pytest.mark.parametrize("case", NUMA_CASES, ids=[c[0] for c in NUMA_CASES])
def test_numa_bind_picks_the_cards_hami_picks(case: tuple[Any, ...]) -> None:
    _, policy, bind, numas, used, picked = case
    annotations = {"hami.io/gpu-scheduler-policy": policy, **({NUMA_BIND: bind} if bind else {})}
    verdict = fit_pod(
        numa_cards(*numas), slots_used(*used), (card_request(2, memreq=100, coresreq=10),), 0, annotations
    )
    assert verdict.ok and verdict.devices == (picked,)


def test_numa_bind_across_numa_nodes_gives_hamis_reason() -> None:
    """device.go Fit: one card picked on NUMA 1, dropped on reaching NUMA 0 (NumaNotFit), one picked there."""
    verdict = fit_pod(numa_cards(0, 1), {}, (card_request(2, memreq=100),), 0, {NUMA_BIND: "true"})
    assert not verdict.ok
    assert verdict.reason == "1/2 AllocatedCardsInsufficientRequest, 1/2 NumaNotFit"


@pytest.mark.parametrize(
    ("citation", "bind", "refs", "reason"),
    [
        ("device.go Fit: two NUMA nodes under numa-bind fail every try", "true", ("gpu-0", "gpu-1"), "NumaNotFit"),
        ("device.go Fit: one NUMA node under numa-bind fits", "true", ("gpu-0", "gpu-2"), None),
        ("device.go assertNuma: false binds nothing", "false", ("gpu-0", "gpu-1"), None),
    ],
)
def test_a_pin_across_numa_nodes_under_numa_bind_is_refused(
    citation: str, bind: str, refs: tuple[str, ...], reason: str | None
) -> None:
    cards = [{**CARD, "id": f"GPU-{i}", "index": i, "numa": numa} for i, numa in enumerate((0, 1, 0))]
    pod = {
        "metadata": {"annotations": {NUMA_BIND: bind}},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]},
    }
    pinned = pin_verdict(pin_spec(*refs), PinView({"n": node(cards)}, ()), workload_from_pod(pod, "the pod"))
    assert [(p.reason, p.scope) for p in pinned.problems] == ([(reason, Scope.Pod)] if reason else [])


TOPOLOGY_NUMA_CASES = [
    ("device.go Fit: topology-aware never stops, NUMA 0 (walked last) resets", "topology-aware", "", (), "gpu-3", 1),
    ("device.go Fit: the card on the NUMA node walked last is kept", "topology-aware", "", (), "gpu-1", 0),
    ("util.go GetGPUSchedulerPolicyByPod: the default applies", "", "topology-aware", (), "gpu-3", 1),
    ("device.go Fit: an unhealthy card is skipped before the NUMA reset", "topology-aware", "", (1, 2), "gpu-3", 0),
    ("device.go Fit: spread stops at the first fitting card", "spread", "topology-aware", (), "gpu-3", 0),
]


@pytest.mark.parametrize("case", TOPOLOGY_NUMA_CASES, ids=[c[0] for c in TOPOLOGY_NUMA_CASES])
def test_a_pin_under_topology_aware_and_numa_bind_names_the_numa_node_hami_keeps(case: tuple[Any, ...]) -> None:
    """Under topology-aware HAMi's Fit walks every card and each card of another NUMA node drops what it picked (a
    card the pod does not name too, since CheckUUID comes after the NUMA check): only the lowest NUMA node can give
    cards, as the sandbox's HAMi answered ("3/4 CardUuidMismatch") for a pod naming GPU-3 by UUID."""
    citation, policy, default, unhealthy, ref, refused = case
    cards = [
        {**CARD, "id": f"GPU-{i}", "index": i, "numa": numa, "health": i not in unhealthy}
        for i, numa in enumerate((1, 0, 0, 1))
    ]
    annotations = {NUMA_BIND: "true", **({"hami.io/gpu-scheduler-policy": policy} if policy else {})}
    pod = {
        "metadata": {"annotations": annotations},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    }
    config = HAMI_DEFAULTS.with_policy(default) if default else HAMI_DEFAULTS
    pinned = pin_verdict(pin_spec(ref), PinView({"n": node(cards)}, ()), workload_from_pod(pod, "p", config=config))
    assert [p.reason for p in pinned.problems] == ["NumaNotFit"] * refused, citation


@pytest.mark.parametrize(
    ("policy", "nums", "target"),
    [("topology-aware", 2, None), ("spread", 2, ("GPU-0", "GPU-2")), ("topology-aware", 1, ("GPU-1",))],
)
def test_the_planner_targets_the_numa_node_hamis_topology_aware_walk_keeps(
    policy: str, nums: int, target: tuple[str, ...] | None
) -> None:
    """device.go Fit under topology-aware and numa-bind keeps only the lowest NUMA node's cards (the sandbox's HAMi
    refused a 2-card pod on NUMA nodes 0, 1, 1 with "1/3 AllocatedCardsInsufficientRequest"): the planner targets
    no other, where spread takes the two cards of NUMA node 1; a 1-card pod gets NUMA node 0's card, not the first."""
    ready = {"conditions": [{"type": "Ready", "status": "True"}], "allocatable": {"nvidia.com/gpu": "30"}}
    numas_memories = ((1, 8192), (0, 40960), (1, 8192))
    cards = [{**CARD, "id": f"GPU-{i}", "index": i, "numa": n, "devmem": m} for i, (n, m) in enumerate(numas_memories)]
    snapshot, _ = snapshot_from_objects([{**node(cards), "status": ready}], [], [], datetime(2026, 1, 1, tzinfo=UTC))
    pod = PlanPod("ns", "p", (card_request(nums, memreq=1000),), annotations={NUMA_BIND: "true"}, default_policy=policy)
    result = planner_plan(snapshot, FitGoal(pod))
    assert (result.target[1] if result.target else None) == target
    [verdict] = why(snapshot, pod, HAMI_DEFAULTS.with_policy(policy))
    assert verdict.fits == (target is not None)


# Item 9: allocatable card count 0 on a registered node. device.go NvidiaGPUDevices.CheckHealth: `current == 0` and
# a count reported before -> unhealthy, register() drops the node's cards; with none reported before, the handshake
# decides (devices.go CheckHealth: healthy while "Requesting_" is under 60 s old, then unhealthy): the node cycles.
# The kubelet refuses a pod asking an extended resource the node has 0 of, so a pin there never runs.
ALLOCATABLE_CASES = [
    ("device.go CheckHealth: current 0", {"nvidia.com/gpu": "0"}, "NoAllocatableGpu"),
    ("device.go CheckHealth: current 0 from a quantity", {"nvidia.com/gpu": "0k"}, "NoAllocatableGpu"),
    ("device.go CheckHealth: current > 0 keeps the node", {"nvidia.com/gpu": "10"}, None),
    ("not listed: nothing to judge (the webhook's cache keeps only nvidia.com/gpu)", {"cpu": "4"}, None),
]


@pytest.mark.parametrize(
    ("citation", "allocatable", "reason"), ALLOCATABLE_CASES, ids=[c[0] for c in ALLOCATABLE_CASES]
)
def test_a_pin_to_a_node_without_allocatable_cards_is_refused_until_it_has_them(
    citation: str, allocatable: dict[str, str], reason: str | None
) -> None:
    listed = {**node([CARD]), "status": {"allocatable": allocatable}}
    pod = {"spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
    pinned = pin_verdict(pin_spec("gpu-0"), PinView({"n": listed}, ()), workload_from_pod(pod, "the pod"))
    assert [(p.reason, p.scope) for p in pinned.problems] == ([(reason, Scope.Card)] if reason else [])


def test_why_and_the_planner_close_a_node_without_allocatable_cards() -> None:
    """device.go CheckHealth with allocatable 0: `why` says the node takes no GPU pods, and what HAMi does there."""
    ready = {"conditions": [{"type": "Ready", "status": "True"}]}
    nodes = [
        {**node([CARD]), "status": {**ready, "allocatable": {"nvidia.com/gpu": "0"}}},
        {
            "metadata": {"name": "m", "annotations": node([CARD])["metadata"]["annotations"]},
            "status": {**ready, "allocatable": {"nvidia.com/gpu": "10"}},
        },
    ]
    snapshot, _ = snapshot_from_objects(nodes, [], [], datetime(2026, 1, 1, tzinfo=UTC))
    pod = PlanPod("ns", "p", (card_request(1, memreq=100),))
    verdicts = {v.node: v for v in why(snapshot, pod)}
    assert (verdicts["n"].fits, verdicts["n"].reason) == (False, "NodeUnschedulable")
    assert "allocatable nvidia.com/gpu" in verdicts["n"].message and "kubelet refuses" in verdicts["n"].message
    assert verdicts["m"].fits
    assert planner_plan(snapshot, FitGoal(pod)).target == ("m", ("GPU-a",))


# Item 5: hami.io/device-scoring-weights. pkg/util/device_scoring_weights.go ParseDeviceScoringWeights (the cases of
# its TestParseDeviceScoringWeights); score.go calcScoreWithOptions returns its error, so Filter fails on every node;
# gpu_policy.go ComputeScore weighs slots, cores and memory.
WEIGHT_CASES = [
    ("device_scoring_weights.go: all three", "slot=1,core=2,memory=3", (1, 2, 3)),
    ("device_scoring_weights.go: spaces and any order", " memory = 3, slot = 1, core = 0 ", (1, 0, 3)),
    ("device_scoring_weights.go: empty", "", "expected slot, core, and memory weights"),
    ("device_scoring_weights.go: missing dimension", "slot=1,memory=3", "expected slot, core, and memory weights"),
    ("device_scoring_weights.go: malformed entry", "slot=1,core,memory=3", "expected key=value entries"),
    ("device_scoring_weights.go: non-integer", "slot=1,core=high,memory=3", '"core" weight must be an integer'),
    ("device_scoring_weights.go: negative", "slot=1,core=-1,memory=3", '"core" weight must not be negative'),
    ("device_scoring_weights.go: unknown key", "slot=1,bandwidth=2,memory=3", 'unknown weight "bandwidth"'),
    ("device_scoring_weights.go: duplicate key", "slot=1,slot=2,memory=3", 'duplicate "slot" weight'),
    ("device_scoring_weights.go: all zero", "slot=0,core=0,memory=0", "at least one weight must be positive"),
]


@pytest.mark.parametrize(("citation", "value", "expected"), WEIGHT_CASES, ids=[c[0] for c in WEIGHT_CASES])
def test_scoring_weights_parse_as_hami_parses_them(citation: str, value: str, expected: object) -> None:
    if isinstance(expected, tuple):
        assert scoring_weights({SCORING_WEIGHTS: value}) == expected
    else:
        with pytest.raises(RequestError, match=re.escape(str(expected))):
            scoring_weights({SCORING_WEIGHTS: value})


def test_scoring_weights_change_the_card_hami_picks() -> None:
    """gpu_policy.go ComputeScore: GPU-0 has half its slots used, GPU-1 most of its memory; spread takes the lower
    score, GPU-0 by default (5 < 7.3), GPU-1 once slots weigh 3 (15 > 7.3)."""
    cards = numa_cards(0, 0)
    usage = {"GPU-0": CardUsage("GPU-0", used_slots=5), "GPU-1": CardUsage("GPU-1", used_mem=6000)}
    request = (card_request(1, memreq=100, coresreq=10),)
    assert fit_pod(cards, usage, request, 0, {}).devices == (("GPU-0",),)
    weighted = {SCORING_WEIGHTS: "slot=3,core=1,memory=1"}
    assert fit_pod(cards, usage, request, 0, weighted).devices == (("GPU-1",),)


def test_invalid_scoring_weights_fail_hamis_filter_and_the_pin() -> None:
    """score.go calcScore fails before any node is scored (Filter: "calcScore failed <err> for pod <name>")."""
    pod = {
        "metadata": {"annotations": {SCORING_WEIGHTS: "slot=1"}},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    }
    verdict = fit_pod_on_node({"metadata": {"name": "unregistered"}}, pod, [])
    assert verdict.reason.startswith("calcScore failed invalid hami.io/device-scoring-weights annotation")
    pinned = pin_verdict(pin_spec("gpu-0"), PinView({"n": node([CARD])}, ()), workload_from_pod(pod, "the pod"))
    assert [(p.reason, p.scope) for p in pinned.problems] == [("InvalidScoringWeights", Scope.Pod)]
    unregistered = PinView({"n": {"metadata": {"name": "n"}}}, ())
    on_unregistered = pin_verdict(pin_spec("gpu-0"), unregistered, workload_from_pod(pod, "the pod"))
    assert [p.reason for p in on_unregistered.problems] == ["InvalidScoringWeights"], "HAMi's filter fails first"
    no_cards = {**pod, "spec": {"containers": [{"name": "c"}]}}
    assert fit_pod_on_node({"metadata": {"name": "unregistered"}}, no_cards, []).ok


# Item 4: MIG. device.go CustomFilterRule/selectMigCandidate (a MIG card takes a pod only where a MIG profile and a
# free placement fit: CardMigTopologyInfeasible), scheduler.go getNodesUsage (a MIG card held without a
# hami.io/vgpu-mig-allocations reservation, or a hami-core card holding one, becomes unhealthy). Not modelled: pin
# refuses MIG cards, the planner never targets them.
def test_a_pin_naming_a_mig_card_is_refused() -> None:
    """device.go Fit/CustomFilterRule: HAMi's verdict on a MIG card rests on its MIG profiles, not modelled."""
    cards = [
        {**CARD, "mode": "mig", "migProfiles": [{"name": "1g.10gb", "memoryMB": 9856}]},
        {**CARD, "id": "GPU-b", "index": 1},
    ]
    pod = {"spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
    view = PinView({"n": node(cards)}, ())
    [problem] = pin_verdict(pin_spec("gpu-0"), view, workload_from_pod(pod, "the pod")).problems
    assert (problem.reason, problem.scope) == ("CardMigMode", Scope.Placement)
    assert "MIG mode" in problem.message and "does not model" in problem.message
    assert pin_verdict(pin_spec("gpu-1"), view, workload_from_pod(pod, "the pod")).ok


def test_the_planner_never_targets_a_mig_card_and_why_says_so() -> None:
    """scheduler.go getNodesUsage: a MIG card used without a reservation turns unhealthy; the planner keeps off."""
    ready = {"conditions": [{"type": "Ready", "status": "True"}], "allocatable": {"nvidia.com/gpu": "20"}}
    mig = {**CARD, "id": "GPU-m", "mode": "mig"}
    nodes = [{**node([mig, {**CARD, "id": "GPU-b", "index": 1, "devmem": 1000}]), "status": ready}]
    snapshot, _ = snapshot_from_objects(nodes, [], [], datetime(2026, 1, 1, tzinfo=UTC))
    pod = PlanPod("ns", "p", (card_request(1, memreq=4096),))
    result = planner_plan(snapshot, FitGoal(pod))
    assert result.target is None
    [verdict] = why(snapshot, pod)
    assert {card.uuid: card.reason for card in verdict.cards}["GPU-m"] == "CardMigMode"
    assert "MIG mode" in verdict.message


# Item 8: topology-aware with hami.io/node-nvidia-score. device.go Fit walks every card under topology-aware, then
# computeWorstSingleCard / computeBestCombination; the cases of device_test.go TestFit_Topology*.
PAIRS = {
    "GPU-0": {"GPU-1": 100, "GPU-2": 200},
    "GPU-1": {"GPU-0": 100, "GPU-2": 150},
    "GPU-2": {"GPU-0": 200, "GPU-1": 150},
}
NEGATIVE = {
    "GPU-0": {"GPU-1": -5, "GPU-2": -3},
    "GPU-1": {"GPU-0": -5, "GPU-2": -1},
    "GPU-2": {"GPU-0": -3, "GPU-1": -1},
}
TOPOLOGY_CASES = [
    ("device_test.go TestFit_TopologyWorstSingleCard", PAIRS, 1, {"GPU-1"}),
    ("device_test.go TestFit_TopologyBestCombination", PAIRS, 2, {"GPU-0", "GPU-2"}),
    ("device_test.go TestFit_TopologyNegativeScores/SingleGPU", NEGATIVE, 1, {"GPU-0"}),
    ("device_test.go TestFit_TopologyNegativeScores/MultiGPU", NEGATIVE, 2, {"GPU-1", "GPU-2"}),
    ("device_test.go TestFit_TopologyBestCombinationZeroScores: the first combination", {}, 2, {"GPU-2", "GPU-1"}),
    ("device_test.go TestFit_TopologyExactMatch: as many cards as asked", PAIRS, 3, {"GPU-0", "GPU-1", "GPU-2"}),
]


@pytest.mark.parametrize(("citation", "scores", "nums", "picked"), TOPOLOGY_CASES, ids=[c[0] for c in TOPOLOGY_CASES])
def test_topology_aware_picks_by_the_nodes_pair_scores(
    citation: str, scores: dict[str, dict[str, int]], nums: int, picked: set[str]
) -> None:
    annotations = {"hami.io/gpu-scheduler-policy": "topology-aware"}
    request = (card_request(nums, memreq=100, coresreq=10),)
    verdict = fit_pod(numa_cards(0, 0, 0), {}, request, 0, annotations, pair_scores=scores)
    assert verdict.ok and set(verdict.devices[0]) == picked


def test_topology_aware_reads_the_pair_scores_from_the_node() -> None:
    """device.go GetNodeDevices: the first hami.io/node-nvidia-score entry of a card's UUID is its pair scores."""
    cards = [{**CARD, "id": f"GPU-{i}", "index": i} for i in range(3)]
    entries = [{"uuid": uuid, "score": score} for uuid, score in PAIRS.items()] + [{"uuid": "GPU-1", "score": {}}]
    annotated = node(cards, **{PAIR_SCORE_ANNOTATION: json.dumps(entries)})
    pod = {
        "metadata": {"annotations": {"hami.io/gpu-scheduler-policy": "spread,topology-aware"}},
        "spec": {
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "100"}}}]
        },
    }
    assert fit_pod_on_node(annotated, pod, []).devices == (("GPU-1",),)


def test_why_names_the_card_topology_aware_picks_by_the_nodes_pair_scores() -> None:
    """device.go Fit under topology-aware: `why` reads the node's pair scores as HAMi does, so its verdict names the
    combination whose pair scores sum highest (GPU-0 and GPU-2 here), not the first cards of the plain policy."""
    ready = {"conditions": [{"type": "Ready", "status": "True"}], "allocatable": {"nvidia.com/gpu": "30"}}
    cards = [{**CARD, "id": f"GPU-{i}", "index": i} for i in range(3)]
    entries = [{"uuid": uuid, "score": score} for uuid, score in PAIRS.items()]
    nodes = [{**node(cards, **{PAIR_SCORE_ANNOTATION: json.dumps(entries)}), "status": ready}]
    snapshot, _ = snapshot_from_objects(nodes, [], [], datetime(2026, 1, 1, tzinfo=UTC))
    annotations = {"hami.io/gpu-scheduler-policy": "topology-aware"}
    pod = PlanPod("ns", "p", (card_request(2, memreq=100, coresreq=10),), annotations=annotations)
    [verdict] = why(snapshot, pod)
    assert verdict.fits and verdict.message == "HAMi places it on gpu-2, gpu-0", verdict.message


def test_the_pin_applies_hamis_default_gpu_policy_to_a_pod_naming_none() -> None:
    """device.go Fit: GetGPUSchedulerPolicyByPod(device.GPUSchedulerPolicy, pod) — the --gpu-scheduler-policy default
    applies when the pod names no hami.io/gpu-scheduler-policy; mutex refuses a card in use."""
    tenant = PodAllocation("t", "t", "u", "n", "Running", ((ContainerDevice("GPU-a", "NVIDIA", 1000, 0),),))
    pod = {
        "spec": {
            "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"}}}]
        }
    }
    view = PinView({"n": node([CARD])}, (tenant,))
    mutex = HAMI_DEFAULTS.with_policy("mutex")
    [problem] = pin_verdict(pin_spec("gpu-0"), view, workload_from_pod(pod, "the pod", config=mutex)).problems
    assert problem.reason == "ExclusiveDeviceAllocateConflict"
    assert pin_verdict(pin_spec("gpu-0"), view, workload_from_pod(pod, "the pod")).ok
    named = {**pod, "metadata": {"annotations": {"hami.io/gpu-scheduler-policy": "binpack"}}}
    assert pin_verdict(pin_spec("gpu-0"), view, workload_from_pod(named, "the pod", config=mutex)).ok
