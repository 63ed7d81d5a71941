"""The parts of nodes and pods the cluster view counts, decoded without the rest of each object.

A pod of a list is ~2.8 KB of JSON of which the view reads a few hundred bytes (annotations, phase, init
containers); msgspec skips the other fields without building them (managedFields, volumes, containers, conditions).
At 40,000 pods that took the decode from 1.2 to 0.2 s of CPU. Each shape names what `core.usage.pod_allocation`
and `core.cluster_info.ClusterCount` read of an object; the leaves are `Any`, so that a value of another type reaches
the core as it would whole, and an object whose structure differs is decoded whole (`decode_items`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypedDict

import msgspec

from kubectl_hami_place.kube.list_body import whole_items


class _Metadata(TypedDict, total=False):
    name: Any
    namespace: Any
    uid: Any
    annotations: Any
    deletionTimestamp: Any


class _Container(TypedDict, total=False):
    """Only counted: an init container's share depends on how many there are."""


class _Terminated(TypedDict, total=False):
    exitCode: Any


class _ContainerState(TypedDict, total=False):
    terminated: _Terminated


class _ContainerStatus(TypedDict, total=False):
    state: _ContainerState


class _PodSpec(TypedDict, total=False):
    initContainers: list[_Container]


class _PodStatus(TypedDict, total=False):
    phase: Any
    initContainerStatuses: list[_ContainerStatus]


class CountedPod(TypedDict, total=False):
    """What `pod_allocation` reads of a pod."""

    metadata: _Metadata
    spec: _PodSpec
    status: _PodStatus


class _NodeSpec(TypedDict, total=False):
    unschedulable: Any


class _Condition(TypedDict, total=False):
    type: Any
    status: Any


class _NodeStatus(TypedDict, total=False):
    conditions: list[_Condition]
    allocatable: Any


class _NodeMetadata(TypedDict, total=False):
    name: Any
    annotations: Any


class CountedNode(TypedDict, total=False):
    """What `ClusterCount` reads of a node: its name, card register and cordons, cordon, readiness, allocatable."""

    metadata: _NodeMetadata
    spec: _NodeSpec
    status: _NodeStatus


def decode_items(shape: type[Any]) -> Callable[[bytes], list[dict[str, Any]]]:
    """A decoder of a JSON array of objects into dicts of `shape`'s fields only (ValueError when the bytes are not
    one whole array); an array whose objects are shaped otherwise is decoded whole, its non-objects left out."""
    decoder = msgspec.json.Decoder(list[shape])  # type: ignore[valid-type]

    def decode(data: bytes) -> list[dict[str, Any]]:
        try:
            items: list[dict[str, Any]] = decoder.decode(data)
        except msgspec.ValidationError:
            return whole_items(data)
        return items

    return decode


COUNTED_PODS = decode_items(CountedPod)
COUNTED_NODES = decode_items(CountedNode)
