"""HamiPodPlacement: "the next pod matching podSelector goes to nodeName, on exactly these cards".

Spec and status as frozen dataclasses, parsed from and rendered to the CRD's camelCase dict form
(`chart/templates/crd/hamipodplacement.yaml`, status contract in `docs/architecture.md`). A missing status reads
as phase Pending: nothing has claimed the placement yet.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from kubectl_hami_place.core.errors import ModelError, PlacementError, SelectorError, clip
from kubectl_hami_place.core.fields import rfc3339
from kubectl_hami_place.core.k8s_names import is_object_name
from kubectl_hami_place.core.names import API_VERSION, CLAIMED_PHASES, KIND, EvictionResult, Phase
from kubectl_hami_place.core.refs import CardRef, parse_card_ref
from kubectl_hami_place.core.selectors import LabelSelector, selector_from_dict

MIN_REQ_ID = 5
# The CRD's maxLength of reqID and of each gpuDevices entry.
MAX_FIELD = 128


@dataclass(frozen=True)
class PlacementSpec:
    """What the placement asks: an id, which pod, which node, which cards, and optionally a pod to evict first."""

    req_id: str
    pod_selector: LabelSelector
    node_name: str
    gpu_devices: tuple[CardRef, ...]
    evict_pod: str | None = None
    selector_problem: str = field(default="", metadata={"stored": False})
    """Read, never written: why the stored podSelector cannot be read (1.24 stores what the CRD's CEL rules refuse
    from 1.25). The selector is then empty, so it matches no pod, and validate_spec fails the placement for this."""

    @property
    def percent(self) -> int | None:
        """The `/P` every entry carries (validate_spec makes them agree), None when the cards are whole."""
        return self.gpu_devices[0].percent if self.gpu_devices else None


@dataclass(frozen=True)
class EvictionStatus:
    """Progress of the eviction of `spec.evictPod`; `uid` is that pod's identity when the placement was claimed."""

    pod: str
    result: EvictionResult = EvictionResult.Pending
    message: str = ""
    time: datetime | None = None
    attempts: int = 0
    uid: str = ""


@dataclass(frozen=True)
class Condition:
    """A metav1.Condition (Claimed, Evicted)."""

    type: str
    status: str
    reason: str
    message: str
    last_transition_time: datetime
    observed_generation: int | None = None


@dataclass(frozen=True)
class DefragRefusal:
    """On a given-up move's placement: the cards HAMi refused its replacement on, until when plans leave them out, and
    the controller's seal over them (`core.defrag.seal`), believed only where the seal checks."""

    cards: tuple[str, ...]
    until: datetime
    seal: str


@dataclass(frozen=True)
class PlacementStatus:
    """The placement's status subresource, written by the webhook."""

    phase: Phase = Phase.Pending
    message: str = ""
    claim_token: str | None = None
    claimed_at: datetime | None = None
    consumed_by_name: str | None = None
    consumed_by_uid: str | None = None
    consumed_at: datetime | None = None
    eviction: EvictionStatus | None = None
    conditions: tuple[Condition, ...] = ()
    observed_generation: int | None = None
    """The placement generation the webhook has seen: the CLI evicts only once it caught up."""
    defrag_refused: DefragRefusal | None = None


@dataclass(frozen=True)
class Placement:
    """A stored HamiPodPlacement: identity, spec and status."""

    name: str
    namespace: str
    uid: str
    resource_version: str
    created: datetime | None
    spec: PlacementSpec
    status: PlacementStatus = field(default_factory=PlacementStatus)
    generation: int = 0
    deleting: bool = False

    @property
    def key(self) -> str:
        """`namespace/name`."""
        return f"{self.namespace}/{self.name}"

    @property
    def unclaimed(self) -> bool:
        """True while no pod has claimed the placement (phase Pending)."""
        return self.status.phase == Phase.Pending

    @property
    def open(self) -> bool:
        """Pending, no claim token, not being deleted: a pod may claim it."""
        return self.unclaimed and not self.status.claim_token and not self.deleting

    @property
    def why_closed(self) -> str:
        """Why no pod may claim it any more ("" while it is `open`): said beside the rule, so the two agree."""
        if self.deleting:
            return "it is being deleted"
        if self.status.claim_token:
            return "a pod claimed it"
        return "" if self.unclaimed else f"it is {self.status.phase.value}"

    @property
    def claimed(self) -> bool:
        """A pod has claimed it (whatever became of it since)."""
        return bool(self.status.claim_token) or self.status.phase in CLAIMED_PHASES

    @property
    def acknowledged(self) -> bool:
        """The webhook has seen this generation (status.observedGeneration caught up with metadata.generation)."""
        return (self.status.observed_generation or 0) >= self.generation


def validate_spec(spec: PlacementSpec) -> str | None:
    """The rule a spec breaks beyond the CRD schema, as one line, or None when it is valid."""
    if len(spec.req_id) < MIN_REQ_ID:
        return f"reqID {spec.req_id!r} is shorter than {MIN_REQ_ID} characters"
    if len(spec.req_id) > MAX_FIELD:
        return f"reqID is {len(spec.req_id)} characters; the CRD takes at most {MAX_FIELD}"
    if spec.selector_problem:
        return f"podSelector: {spec.selector_problem}"
    if spec.pod_selector.empty:
        return "podSelector is empty and would match every pod; give at least one label"
    if not spec.node_name:
        return "nodeName is empty"
    if not is_object_name(spec.node_name):
        return f"nodeName {clip(spec.node_name)!r} is not a valid node name"
    if not spec.gpu_devices:
        return "gpuDevices is empty; name at least one card"
    percents = {ref.percent for ref in spec.gpu_devices}
    if len(percents) > 1:
        shown = ", ".join(str(ref) for ref in spec.gpu_devices)
        return (
            f"gpuDevices {shown} mix memory percents; every entry must carry the same /P "
            "(HAMi gives every card of a container the same memory)"
        )
    seen: set[str] = set()
    for ref in spec.gpu_devices:
        if len(str(ref)) > MAX_FIELD:
            shown = str(ref)
            return f"gpuDevices entry {shown[:40]!r}... is {len(shown)} characters; the CRD takes at most {MAX_FIELD}"
        key = ref.uuid if ref.uuid is not None else f"gpu-{ref.index}"
        if key in seen:
            return f"gpuDevices names {key} twice; a card can be given once"
        seen.add(key)
    if spec.evict_pod is not None and not is_object_name(spec.evict_pod):
        return f"evictPod {clip(spec.evict_pod)!r} is not a valid pod name"
    return None


def placement_from_object(obj: object) -> Placement:
    """Parse a stored HamiPodPlacement (JSON dict form); PlacementError names what is wrong."""
    if not isinstance(obj, Mapping):
        raise PlacementError(f"a placement must be an object, got {type(obj).__name__}")
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping):
        raise PlacementError("placement has no metadata")
    name = _optional_str(metadata, "name", "metadata") or ""
    namespace = _optional_str(metadata, "namespace", "metadata") or ""
    where = f"placement {namespace}/{name}" if name else "placement"
    try:
        spec = spec_from_object(obj.get("spec"))
        status = status_from_object(obj.get("status"))
        created = _time(metadata.get("creationTimestamp"), "metadata.creationTimestamp")
        generation = metadata.get("generation", 0)
        if isinstance(generation, bool) or not isinstance(generation, int):
            raise PlacementError("metadata.generation must be an integer")
        return Placement(
            name=name,
            namespace=namespace,
            uid=_optional_str(metadata, "uid", "metadata") or "",
            resource_version=_optional_str(metadata, "resourceVersion", "metadata") or "",
            created=created,
            spec=spec,
            status=status,
            generation=generation,
            deleting=metadata.get("deletionTimestamp") is not None,
        )
    except ModelError as err:
        raise PlacementError(f"{where}: {err}") from None


def placements_from_objects(items: Iterable[object]) -> list[Placement]:
    """The stored placements that parse; one that does not (its spec or status broken by hand) takes no part."""
    parsed = []
    for item in items:
        try:
            parsed.append(placement_from_object(item))
        except PlacementError:
            continue
    return parsed


def spec_from_object(data: object) -> PlacementSpec:
    """Parse `spec` (camelCase) into a PlacementSpec; structure only, see validate_spec for the rules."""
    if not isinstance(data, Mapping):
        raise PlacementError("spec must be an object")
    req_id = _required_str(data, "reqID", "spec")
    node_name = _required_str(data, "nodeName", "spec")
    if "podSelector" not in data:
        raise PlacementError("spec.podSelector is required")
    try:
        selector, selector_problem = selector_from_dict(data.get("podSelector")), ""
    except SelectorError as error:
        selector, selector_problem = LabelSelector(), str(error)
    devices = data.get("gpuDevices")
    if not isinstance(devices, list):
        raise PlacementError("spec.gpuDevices must be a list of card references")
    refs = tuple(parse_card_ref(item) for item in devices)
    return PlacementSpec(
        req_id=req_id,
        pod_selector=selector,
        node_name=node_name,
        gpu_devices=refs,
        evict_pod=_optional_str(data, "evictPod", "spec") or None,
        selector_problem=selector_problem,
    )


def pin_differs(stored: object, wanted: Mapping[str, Any]) -> str:
    """Why the stored placement does not ask what `wanted` asks (the spec fields that differ), "" when it asks the
    same: a placement already holding a move's name is reused as an earlier attempt of that move only then."""
    try:
        have = spec_from_object(stored.get("spec") if isinstance(stored, Mapping) else None)
    except ModelError as error:
        return f"its spec does not parse ({error})"
    have_fields, want_fields = spec_to_object(have), spec_to_object(spec_from_object(wanted.get("spec")))
    differ = [name for name in {**want_fields, **have_fields} if have_fields.get(name) != want_fields.get(name)]
    return f"it asks another {', '.join(differ)}" if differ else ""


def status_from_object(data: object) -> PlacementStatus:
    """Parse `status` (camelCase); None or {} is a fresh Pending status."""
    if data is None:
        return PlacementStatus()
    if not isinstance(data, Mapping):
        raise PlacementError("status must be an object")
    phase_text = _optional_str(data, "phase", "status") or Phase.Pending.value
    if phase_text not in Phase.__members__:
        raise PlacementError(f"status.phase {phase_text!r} is not one of {', '.join(Phase)}")
    claim = _optional_map(data, "claim", "status")
    consumed_by = _optional_map(data, "consumedBy", "status")
    conditions = data.get("conditions") or []
    if not isinstance(conditions, list):
        raise PlacementError("status.conditions must be a list")
    observed = data.get("observedGeneration")
    if observed is not None and (isinstance(observed, bool) or not isinstance(observed, int)):
        raise PlacementError("status.observedGeneration must be an integer")
    return PlacementStatus(
        phase=Phase(phase_text),
        message=_optional_str(data, "message", "status") or "",
        claim_token=_optional_str(claim, "token", "status.claim"),
        claimed_at=_time(claim.get("claimedAt"), "status.claim.claimedAt"),
        consumed_by_name=_optional_str(consumed_by, "name", "status.consumedBy"),
        consumed_by_uid=_optional_str(consumed_by, "uid", "status.consumedBy"),
        consumed_at=_time(data.get("consumedAt"), "status.consumedAt"),
        eviction=_eviction(data.get("eviction")),
        conditions=tuple(_condition(item, position) for position, item in enumerate(conditions)),
        observed_generation=observed,
        defrag_refused=_defrag_refusal(data.get("defragRefused")),
    )


def spec_to_object(spec: PlacementSpec) -> dict[str, Any]:
    """The spec in the CRD's camelCase dict form."""
    result: dict[str, Any] = {
        "reqID": spec.req_id,
        "podSelector": spec.pod_selector.to_dict(),
        "nodeName": spec.node_name,
        "gpuDevices": [str(ref) for ref in spec.gpu_devices],
    }
    if spec.evict_pod:
        result["evictPod"] = spec.evict_pod
    return result


def status_to_object(status: PlacementStatus) -> dict[str, Any]:
    """The status in the CRD's camelCase dict form, unset parts omitted."""
    result: dict[str, Any] = {"phase": status.phase.value}
    if status.message:
        result["message"] = status.message
    if status.claim_token is not None or status.claimed_at is not None:
        claim: dict[str, Any] = {}
        if status.claim_token is not None:
            claim["token"] = status.claim_token
        if status.claimed_at is not None:
            claim["claimedAt"] = rfc3339(status.claimed_at)
        result["claim"] = claim
    if status.consumed_by_name is not None or status.consumed_by_uid is not None:
        consumed_by: dict[str, Any] = {}
        if status.consumed_by_name is not None:
            consumed_by["name"] = status.consumed_by_name
        if status.consumed_by_uid is not None:
            consumed_by["uid"] = status.consumed_by_uid
        result["consumedBy"] = consumed_by
    if status.consumed_at is not None:
        result["consumedAt"] = rfc3339(status.consumed_at)
    if status.eviction is not None:
        eviction: dict[str, Any] = {
            "pod": status.eviction.pod,
            "result": status.eviction.result.value,
            "attempts": status.eviction.attempts,
        }
        if status.eviction.uid:
            eviction["uid"] = status.eviction.uid
        if status.eviction.message:
            eviction["message"] = status.eviction.message
        if status.eviction.time is not None:
            eviction["time"] = rfc3339(status.eviction.time)
        result["eviction"] = eviction
    if status.conditions:
        result["conditions"] = [_condition_to_object(condition) for condition in status.conditions]
    if status.observed_generation is not None:
        result["observedGeneration"] = status.observed_generation
    if status.defrag_refused is not None:
        refused = status.defrag_refused
        result["defragRefused"] = {"cards": list(refused.cards), "until": rfc3339(refused.until), "seal": refused.seal}
    return result


def placement_object(
    name: str,
    namespace: str,
    spec: PlacementSpec,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A new HamiPodPlacement object to create (no status: the webhook owns it)."""
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        metadata["labels"] = dict(labels)
    if annotations:
        metadata["annotations"] = dict(annotations)
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": spec_to_object(spec)}


def condition(kind: str, true: bool, reason: str, message: str, now: datetime) -> Condition:
    """A Claimed or Evicted condition as of now."""
    return Condition(
        type=kind, status="True" if true else "False", reason=reason, message=message, last_transition_time=now
    )


def merge_condition(conditions: tuple[Condition, ...], new: Condition) -> tuple[Condition, ...]:
    """Replace the condition of the same type (keeping its transition time when its status did not change)."""
    result: list[Condition] = []
    replaced = False
    for old in conditions:
        if old.type != new.type:
            result.append(old)
            continue
        result.append(new if old.status != new.status else replace(new, last_transition_time=old.last_transition_time))
        replaced = True
    if not replaced:
        result.append(new)
    return tuple(result)


def parse_time(value: object, where: str = "time") -> datetime:
    """An RFC 3339 time (`2026-01-02T03:04:05Z`, fractions and offsets allowed) as an aware UTC datetime."""
    if not isinstance(value, str) or not value or len(value) > 64:
        raise PlacementError(f"{where} must be an RFC 3339 time such as 2026-01-02T03:04:05Z")
    try:
        moment = datetime.fromisoformat(value)
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return moment.astimezone(UTC)
    except (ValueError, OverflowError):
        raise PlacementError(f"{where} {value!r} is not an RFC 3339 time such as 2026-01-02T03:04:05Z") from None


def time_or_none(value: object) -> datetime | None:
    """A time read leniently, as Events and Leases carry one: None when absent or not an RFC 3339 time."""
    if isinstance(value, datetime):
        return value
    try:
        return parse_time(value)
    except PlacementError:
        return None


def _time(value: object, where: str) -> datetime | None:
    """An optional RFC 3339 time."""
    return None if value is None else parse_time(value, where)


def _defrag_refusal(data: object) -> DefragRefusal | None:
    """`status.defragRefused` as written, None when absent or not of its shape: only its seal makes it count."""
    if not isinstance(data, Mapping):
        return None
    cards, until, seal = data.get("cards"), data.get("until"), data.get("seal")
    if not isinstance(cards, list) or not all(isinstance(card, str) for card in cards) or not isinstance(seal, str):
        return None
    try:
        moment = parse_time(until, "status.defragRefused.until")
    except ModelError:
        return None
    return DefragRefusal(tuple(cards), moment, seal)


def _eviction(data: object) -> EvictionStatus | None:
    """Parse `status.eviction`."""
    if data is None:
        return None
    if not isinstance(data, Mapping):
        raise PlacementError("status.eviction must be an object")
    result = _optional_str(data, "result", "status.eviction") or EvictionResult.Pending.value
    if result not in EvictionResult.__members__:
        raise PlacementError(f"status.eviction.result {result!r} is not one of {', '.join(EvictionResult)}")
    attempts = data.get("attempts", 0)
    if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 0:
        raise PlacementError("status.eviction.attempts must be a non-negative integer")
    return EvictionStatus(
        pod=_optional_str(data, "pod", "status.eviction") or "",
        uid=_optional_str(data, "uid", "status.eviction") or "",
        result=EvictionResult(result),
        message=_optional_str(data, "message", "status.eviction") or "",
        time=_time(data.get("time"), "status.eviction.time"),
        attempts=attempts,
    )


def _condition(data: object, position: int) -> Condition:
    """Parse one `status.conditions` entry."""
    where = f"status.conditions[{position}]"
    if not isinstance(data, Mapping):
        raise PlacementError(f"{where} must be an object")
    generation = data.get("observedGeneration")
    if generation is not None and (isinstance(generation, bool) or not isinstance(generation, int)):
        raise PlacementError(f"{where}.observedGeneration must be an integer")
    return Condition(
        type=_required_str(data, "type", where),
        status=_required_str(data, "status", where),
        reason=_optional_str(data, "reason", where) or "",
        message=_optional_str(data, "message", where) or "",
        last_transition_time=parse_time(data.get("lastTransitionTime"), f"{where}.lastTransitionTime"),
        observed_generation=generation,
    )


def _condition_to_object(condition: Condition) -> dict[str, Any]:
    """One condition in metav1.Condition's dict form."""
    result: dict[str, Any] = {
        "type": condition.type,
        "status": condition.status,
        "reason": condition.reason,
        "message": condition.message,
        "lastTransitionTime": rfc3339(condition.last_transition_time),
    }
    if condition.observed_generation is not None:
        result["observedGeneration"] = condition.observed_generation
    return result


def _required_str(data: Mapping[str, Any], key: str, where: str) -> str:
    """A string field that must be present and non-empty."""
    value = data.get(key)
    if not isinstance(value, str) or not value:
        raise PlacementError(f"{where}.{key} is required and must be a non-empty string")
    return value


def _optional_str(data: Mapping[str, Any], key: str, where: str) -> str | None:
    """A string field that may be absent (None)."""
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise PlacementError(f"{where}.{key} must be a string")
    return value


def _optional_map(data: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    """An object field that may be absent ({})."""
    value = data.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise PlacementError(f"{where}.{key} must be an object")
    return value
