"""The cluster-info view straight from node and pod objects: the oracle the cache's, the snapshot's and `status`'s
views are compared against (the product counts each pod once, with the allocations it keeps)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from kubectl_hami_place.core.cluster_info import ClusterInfo, cluster_info, counted_allocation
from kubectl_hami_place.core.usage import PodAllocation


def build_cluster_info(
    nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]], now: datetime
) -> ClusterInfo:
    """The cluster-info view from node and pod objects (JSON dict form) as listed at `now`."""
    counted: list[PodAllocation | str] = []
    for pod in pods:
        allocation = counted_allocation(pod)
        if allocation is not None:
            counted.append(allocation)
    return cluster_info(nodes, counted, now)
