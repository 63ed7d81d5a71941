"""What HAMi's scheduler gave a pod: the `hami.io/vgpu-devices-allocated` annotation.

One entry per container, init containers first, each entry ending with `;` (an entry is empty for a container
without GPUs). Inside an entry one device per card, each `UUID,VENDOR,<mem MiB>,<cores %>` and ending with `:`.
Example, two containers, only the second on a GPU: `;GPU-x,NVIDIA,3000,0:;`. Decoded as HAMi v2.10's
`DecodePodDevices`/`DecodeContainerDevices` do: fields past the fourth are ignored, memory and cores must be
non-negative 32-bit integers, UUID and vendor must be non-empty.
"""

from __future__ import annotations

from dataclasses import dataclass

from kubectl_hami_place.core.errors import AllocationError

ALLOCATED_ANNOTATION = "hami.io/vgpu-devices-allocated"
NODE_ANNOTATION = "hami.io/vgpu-node"

_INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class ContainerDevice:
    """One card given to one container: its UUID, vendor word, memory (MiB) and cores (percent)."""

    uuid: str
    vendor: str
    usedmem: int
    usedcores: int

    @property
    def card_uuid(self) -> str:
        """The physical card's UUID: HAMi's MIG entries append `[template-slot]`, which usage ignores."""
        return self.uuid.split("[", 1)[0]


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
    """One container's `UUID,VENDOR,mem,cores:` list."""
    devices = []
    for segment in entry.split(":"):
        if segment == "":
            continue
        fields = segment.split(",")
        if len(fields) >= 4 and fields[0] and fields[1] and _plain_int32(fields[2]) and _plain_int32(fields[3]):
            # As HAMi writes them (status reads 40,000 a run): the checks below would accept them unchanged.
            devices.append(ContainerDevice(fields[0], fields[1], int(fields[2]), int(fields[3])))
            continue
        where = f"allocation container {position} device {_shorten(segment)!r}"
        if len(fields) < 4:
            raise AllocationError(f"{where} has {len(fields)} fields, expected UUID,VENDOR,MEM,CORES")
        if fields[0] == "":
            raise AllocationError(f"{where} has no card UUID")
        if fields[1] == "":
            raise AllocationError(f"{where} has no vendor")
        devices.append(
            ContainerDevice(
                uuid=fields[0],
                vendor=fields[1],
                usedmem=_non_negative(fields[2], "memory", where),
                usedcores=_non_negative(fields[3], "cores", where),
            )
        )
    return tuple(devices)


def _plain_int32(text: str) -> bool:
    """ASCII digits alone, within int32: what `_non_negative` reads as the same number without a sign."""
    return text.isascii() and text.isdigit() and int(text) <= _INT32_MAX


def _non_negative(text: str, key: str, where: str) -> int:
    """A decimal as Go's strconv.ParseInt(s, 10, 32) reads it, then refused when negative (as HAMi does)."""
    body = text[1:] if text[:1] in ("+", "-") else text
    if not body or not body.isascii() or not body.isdigit():
        raise AllocationError(f"{where}: {key} {text!r} is not an integer")
    value = int(text)
    if value < 0:
        raise AllocationError(f"{where}: {key} {value} must not be negative")
    if value > _INT32_MAX:
        raise AllocationError(f"{where}: {key} {value} is out of range")
    return value


def _check_encodable(device: ContainerDevice, position: int) -> None:
    """Refuse a device whose text or numbers would not decode back to itself."""
    for key, value in (("uuid", device.uuid), ("vendor", device.vendor)):
        if value == "" or any(sep in value for sep in ",:;"):
            raise AllocationError(f"allocation container {position}: {key} {value!r} cannot be encoded")
    for key, number in (("memory", device.usedmem), ("cores", device.usedcores)):
        if not 0 <= number <= _INT32_MAX:
            raise AllocationError(f"allocation container {position}: {key} {number} is out of range")


def _shorten(text: str, limit: int = 60) -> str:
    """Clip quoted input in messages."""
    return text if len(text) <= limit else text[: limit - 3] + "..."
