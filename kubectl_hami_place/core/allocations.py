"""What HAMi's scheduler gave a pod: the `hami.io/vgpu-devices-allocated` annotation.

One entry per container, init containers first, each entry ending with `;` (an entry is empty for a container
without GPUs). Inside an entry one device per card, each `UUID,VENDOR,<mem MiB>,<cores %>` and ending with `:`.
Example, two containers, only the second on a GPU: `;GPU-x,NVIDIA,3000,0:;`. Decoded as HAMi v2.10's
`DecodePodDevices`/`DecodeContainerDevices` (`pkg/device/devices.go`) do: a device without a comma is skipped (the
rest of the pod still counts), fields past the fourth are ignored, memory and cores are 32-bit integers with an
optional sign (negative ones included), UUID and vendor may be empty. A device with a comma but fewer than four
fields, or a number Go cannot read, makes HAMi drop the whole pod (`AllocationError`). A UUID is matched to a card
exactly: a legacy MIG suffix (`GPU-a[0-1]`) names no card.
"""

from __future__ import annotations

from dataclasses import dataclass

from kubectl_hami_place.core.errors import AllocationError, clip
from kubectl_hami_place.core.fields import go_decimal

ALLOCATED_ANNOTATION = "hami.io/vgpu-devices-allocated"
NODE_ANNOTATION = "hami.io/vgpu-node"

_INT32_MIN = -(2**31)
_INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class ContainerDevice:
    """One card given to one container: its UUID, vendor word, memory (MiB) and cores (percent)."""

    uuid: str
    vendor: str
    usedmem: int
    usedcores: int


ContainerDevices = tuple[ContainerDevice, ...]


def parse_allocation(text: object) -> tuple[ContainerDevices, ...]:
    """Decode the annotation into one device tuple per container, init containers first."""
    if not isinstance(text, str):
        raise AllocationError(f"allocation must be a string, got {type(text).__name__}")
    if text == "":
        return ()
    entries = text.split(";")
    if text.endswith(";"):
        entries.pop()
    return tuple(_parse_container(entry, position) for position, entry in enumerate(entries))


def encode_allocation(containers: tuple[ContainerDevices, ...] | list[ContainerDevices]) -> str:
    """Encode per-container devices exactly as HAMi's EncodePodSingleDevice writes them."""
    parts = []
    for position, devices in enumerate(containers):
        for device in devices:
            _check_encodable(device, position)
        parts.append("".join(f"{d.uuid},{d.vendor},{d.usedmem},{d.usedcores}:" for d in devices) + ";")
    return "".join(parts)


def _parse_container(entry: str, position: int) -> ContainerDevices:
    """One container's `UUID,VENDOR,mem,cores:` list, as HAMi's DecodeContainerDevices reads it."""
    devices = []
    for segment in entry.split(":"):
        if "," not in segment:
            continue
        fields = segment.split(",")
        if len(fields) >= 4 and _plain_int32(fields[2]) and _plain_int32(fields[3]):
            # As HAMi writes them (status reads 40,000 a run): the checks below would accept them unchanged.
            devices.append(ContainerDevice(fields[0], fields[1], int(fields[2]), int(fields[3])))
            continue
        where = f"allocation container {position} device {clip(segment, 60)!r}"
        if len(fields) < 4:
            raise AllocationError(f"{where} has {len(fields)} fields, expected UUID,VENDOR,MEM,CORES")
        devices.append(
            ContainerDevice(
                uuid=fields[0],
                vendor=fields[1],
                usedmem=_go_int32(fields[2], "memory", where),
                usedcores=_go_int32(fields[3], "cores", where),
            )
        )
    return tuple(devices)


def _plain_int32(text: str) -> bool:
    """ASCII digits alone, within int32: what `_go_int32` reads as the same number without a sign."""
    value = go_decimal(text) if text.isascii() and text.isdigit() else None
    return value is not None and value <= _INT32_MAX


def _go_int32(text: str, key: str, where: str) -> int:
    """A decimal as Go's strconv.ParseInt(s, 10, 32) reads it: optional sign, ASCII digits, within int32."""
    value = go_decimal(text)
    if value is None:
        raise AllocationError(f"{where}: {key} {text[:40]!r} is not an integer")
    if not _INT32_MIN <= value <= _INT32_MAX:
        raise AllocationError(f"{where}: {key} {text[:40]} is out of range")
    return value


def _check_encodable(device: ContainerDevice, position: int) -> None:
    """Refuse a device whose text or numbers would not decode back to itself."""
    for key, value in (("uuid", device.uuid), ("vendor", device.vendor)):
        if any(sep in value for sep in ",:;"):
            raise AllocationError(f"allocation container {position}: {key} {value!r} cannot be encoded")
    for key, number in (("memory", device.usedmem), ("cores", device.usedcores)):
        if not _INT32_MIN <= number <= _INT32_MAX:
            raise AllocationError(f"allocation container {position}: {key} {number} is out of range")
