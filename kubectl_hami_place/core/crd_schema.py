"""Which fields this version writes on a HamiPodPlacement that the installed CRD's schema would prune.

The API server drops fields a structural schema does not name, silently: a CRD applied by hand (the chart's
`crds.install=false`) and not upgraded with the server loses what newer servers write (a given-up move's
`status.defragRefused`, which a new leader reads back), with no error anywhere. The server reads its CRD and says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from kubectl_hami_place.core.names import GROUP, PLURAL, VERSION, EvictionResult, Phase
from kubectl_hami_place.core.placement import (
    Condition,
    DefragRefusal,
    EvictionStatus,
    PlacementSpec,
    PlacementStatus,
    spec_to_object,
    status_to_object,
)
from kubectl_hami_place.core.refs import CardRef
from kubectl_hami_place.core.selectors import LabelSelector, Requirement

CRD_NAME = f"{PLURAL}.{GROUP}"
_AT = datetime(2026, 1, 1, tzinfo=UTC)

EVERY_SPEC = PlacementSpec(
    req_id="req-1",
    pod_selector=LabelSelector((("app", "a"),), (Requirement("tier", "In", ("x",)),)),
    node_name="node-a",
    gpu_devices=(CardRef(index=0, percent=50),),
    evict_pod="victim",
)
"""A spec with every field the server may write (the controller creates its moves' placements) set."""

EVERY_STATUS = PlacementStatus(
    phase=Phase.Consumed,
    message="m",
    claim_token="t",
    claimed_at=_AT,
    consumed_by_name="pod",
    consumed_by_uid="uid",
    consumed_at=_AT,
    eviction=EvictionStatus("victim", EvictionResult.Evicted, "m", _AT, 1, "uid"),
    conditions=(Condition("Claimed", "True", "Claimed", "m", _AT, 1),),
    observed_generation=1,
    defrag_refused=DefragRefusal(("GPU-a",), _AT, "0" * 64),
)
"""A status with every field set: a field added to PlacementStatus and left at its default here fails a unit test."""


def written() -> dict[str, Any]:
    """Everything this version writes on a placement's spec and status, in the CRD's form."""
    return {"spec": spec_to_object(EVERY_SPEC), "status": status_to_object(EVERY_STATUS)}


def served_schema(crd: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The openAPIV3Schema of the version this server reads and writes, None when the CRD does not serve it."""
    for version in (crd.get("spec") or {}).get("versions") or ():
        if isinstance(version, Mapping) and version.get("name") == VERSION and version.get("served"):
            schema = (version.get("schema") or {}).get("openAPIV3Schema")
            return schema if isinstance(schema, Mapping) else None
    return None


def pruned(schema: Mapping[str, Any], value: object, path: str = "") -> list[str]:
    """The dotted paths in `value` the schema does not name, as the API server's pruning would drop them."""
    if schema.get("x-kubernetes-preserve-unknown-fields") is True:
        return []
    if isinstance(value, Mapping):
        properties = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        gaps: list[str] = []
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            sub = properties.get(key)
            if sub is None and isinstance(extra, Mapping):
                sub = extra
            if sub is None:
                if extra is not True:
                    gaps.append(where)
                continue
            gaps += pruned(sub, item, where)
        return gaps
    items = schema.get("items")
    if isinstance(value, list) and isinstance(items, Mapping):
        return sorted({gap for item in value for gap in pruned(items, item, f"{path}[]")})
    return []


def missing_fields(crd: Mapping[str, Any]) -> list[str]:
    """What this version writes that the CRD would drop; the whole `v1` when the CRD does not serve it."""
    schema = served_schema(crd)
    if schema is None:
        return [f"{VERSION} (not served)"]
    return pruned(schema, written())
