"""A container's per-card GPU request, read from its resources the way HAMi v2.10 reads it.

HAMi (`GenerateResourceRequests`, `pkg/device/nvidia/device.go`) looks at limits first, then requests, for
`nvidia.com/gpu` (cards), `nvidia.com/gpumem` (MiB per card), `nvidia.com/gpumem-percentage` (percent of each
card's memory, used only when gpumem is 0) and `nvidia.com/gpucores` (percent of each card's compute). Each is read
with Kubernetes' `Quantity.AsInt64()`: `3000`, `3k` and `1Gi` are plain counts (3000, 3000 and 1073741824 MiB). A
card count or percentage that is not a whole number is ignored as if absent; a gpumem that is not a whole number
makes HAMi drop the container's GPU request altogether. A percentage above 100 counts as 100 and one of 0 as
absent. Neither memory key gives `defaultMemory` MiB, or the card's whole memory when that is 0; no gpucores gives
`defaultCores`. HAMi's admission webhook first gives a container that names gpumem, a percentage or gpucores in its
limits but no card count `defaultGPUNum` cards, then adds `gpucores: 100` when the card count is set, gpucores is
not, and the memory is exclusive (percentage 100, or neither gpumem nor percentage): such a container takes whole
cards exclusively. Resource names and defaults come from a `HamiConfig` (HAMi's chart defaults unless given).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from kubectl_hami_place.core.cards import Card
from kubectl_hami_place.core.errors import RequestError
from kubectl_hami_place.core.hami_config import HAMI_DEFAULTS, HamiConfig

GPU = "nvidia.com/gpu"
GPUMEM = "nvidia.com/gpumem"
GPUMEM_PERCENTAGE = "nvidia.com/gpumem-percentage"
GPUCORES = "nvidia.com/gpucores"

_INT32_MAX = 2**31 - 1
_INT64_MAX = 2**63 - 1
_QUANTITY = re.compile(
    r"(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?"
)
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


@dataclass(frozen=True)
class CardRequest:
    """What one container asks of each of its `nums` cards: memory in MiB or percent of the card, and cores %.

    `cores_by_webhook` records that the 100 cores come from HAMi's webhook rule, not from the pod's own gpucores;
    `memory_by_default` that memreq is HAMi's `defaultMemory`, which a percentage replaces.
    """

    nums: int
    memreq: int = 0
    mem_percentage: int | None = 100
    coresreq: int = 0
    cores_by_webhook: bool = False
    memory_by_default: bool = False

    @property
    def exclusive(self) -> bool:
        """True when the container wants whole cards to itself (100 cores: HAMi refuses a card already in use)."""
        return self.coresreq >= 100

    def describe(self) -> str:
        """`1 card x 4096 MiB, 30% cores`: the request in one phrase for messages."""
        cards = f"{self.nums} card" + ("" if self.nums == 1 else "s")
        if self.memreq > 0:
            memory = f"{self.memreq} MiB"
        elif self.mem_percentage is not None:
            memory = f"{self.mem_percentage}% memory"
        else:
            memory = "all memory"
        return f"{cards} x {memory}, {self.coresreq}% cores"


def card_request(
    nums: int,
    memreq: int = 0,
    mem_percentage: int | None = None,
    coresreq: int | None = None,
    *,
    config: HamiConfig = HAMI_DEFAULTS,
) -> CardRequest:
    """A request with HAMi's defaults applied (no memory = defaultMemory or 100%; exclusive and no cores = 100)."""
    for key, value in (("cards", nums), ("memory", memreq), ("cores", coresreq), ("memory percent", mem_percentage)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise RequestError(f"{key} must be a non-negative integer, got {value!r}")
    if nums < 1:
        raise RequestError("a GPU request needs at least 1 card")
    if memreq > _INT32_MAX:
        raise RequestError(f"memory {memreq} MiB is more than HAMi can count")
    if mem_percentage is not None and not 1 <= mem_percentage <= 100:
        raise RequestError(f"memory percent {mem_percentage} is outside 1..100")
    by_webhook = coresreq is None and (mem_percentage == 100 or (memreq == 0 and mem_percentage is None))
    percentage = mem_percentage if memreq == 0 else None
    by_default = memreq == 0 and percentage is None and config.default_memory > 0
    if by_default:
        memreq = config.default_memory
    elif memreq == 0 and percentage is None:
        percentage = 100
    if coresreq is None:
        coresreq = 100 if by_webhook else config.default_cores
    return CardRequest(
        nums=nums,
        memreq=memreq,
        mem_percentage=percentage,
        coresreq=coresreq,
        cores_by_webhook=by_webhook,
        memory_by_default=by_default,
    )


def container_request(
    container: Mapping[str, Any], hami_webhook: bool = True, *, config: HamiConfig = HAMI_DEFAULTS
) -> CardRequest | None:
    """The container's per-card request, or None when it asks for no NVIDIA card; `hami_webhook` adds its rules."""
    name = container.get("name") if isinstance(container, Mapping) else None
    where = f"container {name}" if isinstance(name, str) and name else "container"
    if not isinstance(container, Mapping):
        raise RequestError(f"{where} must be an object, got {type(container).__name__}")
    resources = container.get("resources") or {}
    if not isinstance(resources, Mapping):
        raise RequestError(f"{where}: resources must be an object")
    limits = _resource_map(resources, "limits", where)
    requests = _resource_map(resources, "requests", where)

    def lookup(key: str) -> tuple[bool, int | None]:
        """(present, whole value or None) of a resource, limits first then requests."""
        source = limits if key in limits else requests if key in requests else None
        if source is None:
            return False, None
        return True, _quantity_int(source[key], key, where)

    count_name, mem_name = config.resource_count_name, config.resource_memory_name
    percentage_name, cores_name = config.resource_memory_percentage_name, config.resource_core_name
    has_gpu, nums = lookup(count_name)
    has_mem, mem = lookup(mem_name)
    has_percentage, percentage = lookup(percentage_name)
    has_cores, cores = lookup(cores_name)
    named = any(key in limits for key in (cores_name, mem_name, percentage_name))
    if hami_webhook and not has_gpu and config.default_gpu_num > 0 and named:
        has_gpu, nums = True, config.default_gpu_num
    if not has_gpu or nums is None or nums <= 0:
        return None
    if has_mem and mem is None:
        return None
    if hami_webhook and percentage is not None and percentage > 100:
        raise RequestError(f"{where}: {percentage_name} {percentage} is above 100, which HAMi's webhook denies")
    memreq = _int32(mem or 0, mem_name, where) * max(config.memory_factor, 1)
    if memreq > _INT32_MAX:
        raise RequestError(f"{where}: {mem_name} {mem} is more than HAMi can count once multiplied by memoryFactor")
    mem_percentage = min(percentage, 100) if percentage is not None and percentage > 0 else None
    by_default = mem_percentage is None and memreq == 0 and config.default_memory > 0
    if by_default:
        memreq = config.default_memory
    elif mem_percentage is None and memreq == 0:
        mem_percentage = 100
    coresreq = _int32(cores, cores_name, where) if cores is not None else config.default_cores
    by_webhook = hami_webhook and not has_cores
    exclusive_memory = percentage == 100 if has_percentage else not mem_name or not has_mem
    by_webhook = by_webhook and exclusive_memory
    if by_webhook:
        coresreq = 100
    if mem_percentage is not None and memreq > 0:
        mem_percentage = None
    return CardRequest(
        nums=_int32(nums, count_name, where),
        memreq=memreq,
        mem_percentage=mem_percentage,
        coresreq=coresreq,
        cores_by_webhook=by_webhook,
        memory_by_default=by_default,
    )


def pod_requests(
    pod_spec: Mapping[str, Any], hami_webhook: bool = True, *, config: HamiConfig = HAMI_DEFAULTS
) -> tuple[CardRequest | None, ...]:
    """One entry per container, init containers first (HAMi's order), None for a container without GPUs."""
    if not isinstance(pod_spec, Mapping):
        raise RequestError(f"pod spec must be an object, got {type(pod_spec).__name__}")
    result: list[CardRequest | None] = []
    for key in ("initContainers", "containers"):
        containers = pod_spec.get(key) or []
        if not isinstance(containers, list):
            raise RequestError(f"pod spec {key} must be a list")
        result.extend(container_request(container, hami_webhook, config=config) for container in containers)
    return tuple(result)


def gpu_requests(
    pod_spec: Mapping[str, Any], hami_webhook: bool = True, *, config: HamiConfig = HAMI_DEFAULTS
) -> tuple[CardRequest, ...]:
    """Only the requests of the containers that ask for cards, init containers first."""
    return tuple(request for request in pod_requests(pod_spec, hami_webhook, config=config) if request is not None)


def cores_for(request: CardRequest) -> int:
    """Cores % this request takes of each card: HAMi caps an ask above 100 at 100 when it fits the card (Fit, in
    `pkg/device/nvidia/device.go`), and records and counts the capped value."""
    return min(request.coresreq, 100)


def memory_for(request: CardRequest, card: Card) -> int:
    """MiB this request takes on that card: memreq, else its percentage of the card's memory, else the whole card."""
    if request.memreq > 0:
        return request.memreq
    if request.mem_percentage is not None:
        return card.devmem * request.mem_percentage // 100
    return card.devmem


def parse_quantity(value: object, key: str = "quantity") -> Decimal:
    """A Kubernetes quantity (`3`, `3k`, `1Gi`, `500m`, `1e3`) as an exact decimal; RequestError when malformed."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise RequestError(f"{key} must be a quantity such as 1, 3k or 1Gi, got {value!r}")
    if isinstance(value, int):
        return Decimal(value)
    match = _QUANTITY.fullmatch(value.strip()) if len(value) <= 64 else None
    if match is None:
        raise RequestError(f"{key} {value[:64]!r} is not a quantity such as 1, 3k or 1Gi")
    suffix = match.group("suffix") or ""
    # The pattern admits only plain decimals of at most 64 characters: Decimal reads each one.
    number = Decimal(match.group("number"))
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    exponent = _DECIMAL[suffix] if suffix in _DECIMAL else int(suffix[1:]) if suffix else 0
    if abs(exponent) > 64:
        raise RequestError(f"{key} {value!r} is out of range")
    return number.scaleb(exponent)


def _quantity_int(value: object, key: str, where: str) -> int | None:
    """The quantity as HAMi's AsInt64 reads it: a whole number within int64, else None (HAMi ignores it)."""
    if type(value) is str and len(value) <= 64 and value.isascii() and value.isdigit():
        # Most are plain whole numbers, read without the pattern and Decimal (a snapshot reads 70,000 of them).
        whole = int(value)
        return whole if whole <= _INT64_MAX else None
    try:
        number = parse_quantity(value, key)
    except RequestError as err:
        raise RequestError(f"{where}: {err}") from None
    if number < 0:
        raise RequestError(f"{where}: {key} {value!r} must not be negative")
    if number != number.to_integral_value() or number > _INT64_MAX:
        return None
    return int(number)


def _int32(value: int, key: str, where: str) -> int:
    """Refuse what HAMi would silently wrap around when it converts to int32."""
    if value > _INT32_MAX:
        raise RequestError(f"{where}: {key} {value} is more than HAMi can count (it reads {key} as a plain number)")
    return value


def _resource_map(resources: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    """resources.limits or resources.requests, {} when absent."""
    value = resources.get(key) or {}
    if not isinstance(value, Mapping):
        raise RequestError(f"{where}: resources.{key} must be an object")
    return value
