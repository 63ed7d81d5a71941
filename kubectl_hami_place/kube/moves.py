"""Pin-then-evict, the one way a pod is moved: `evict --to-node`, `apply` and the defragmentation controller share it.

A move pins the pod's replacement (its controller's selector) to the target cards with a placement checked by the
core's `pin_verdict`, asks the API server whether the eviction would pass (PodDisruptionBudgets), creates the placement,
waits until the webhook acknowledges it (`status.observedGeneration`), and only then evicts the pod by its UID.
When the acknowledgement or the eviction fails, the placement just created is deleted again, so no half-done pin
stays behind. Failures are the typed errors of `kube.errors`; callers word them.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubectl_hami_place.core.attach_limits import NO_REFS
from kubectl_hami_place.core.defrag.keys import termination_left
from kubectl_hami_place.core.defrag.seal import move_sealed, seal_move
from kubectl_hami_place.core.errors import ModelError, PlacementError
from kubectl_hami_place.core.fields import as_mapping
from kubectl_hami_place.core.hami_config import HamiConfig
from kubectl_hami_place.core.k8s_names import is_object_name
from kubectl_hami_place.core.pin_check import (
    UNCHECKED_LIMITS,
    PinView,
    Workload,
    eviction_warnings,
    move_kept_off,
    node_room,
    node_warnings,
    pending_warnings,
    pin_verdict,
    room_short,
    room_warning,
    with_volumes,
    workload_from_pod,
)
from kubectl_hami_place.core.placement import (
    Placement,
    PlacementSpec,
    pin_differs,
    placement_from_object,
    placement_object,
    placements_from_objects,
    validate_spec,
)
from kubectl_hami_place.core.planner import DO_NOT_MOVE, Move
from kubectl_hami_place.core.planner.apply import (
    MoveCheck,
    move_step,
    placement_for,
    req_id_for,
    settling_nodes,
    settling_pods,
)
from kubectl_hami_place.core.planner.model import asks_not_to_move
from kubectl_hami_place.core.refs import parse_card_ref
from kubectl_hami_place.core.reservation import RoomKey
from kubectl_hami_place.core.selectors import selector_from_dict
from kubectl_hami_place.core.usage import PodAllocation, pod_allocation
from kubectl_hami_place.core.volumes import Volumes
from kubectl_hami_place.kube import cluster_reads, evictions, placements
from kubectl_hami_place.kube.client import Kube
from kubectl_hami_place.kube.errors import (
    KubeConflict,
    KubeError,
    KubeForbidden,
    KubeNotFound,
    NoReplacement,
    NotAcknowledged,
    PinRefused,
    PlacementTaken,
    PodGone,
    PodProtected,
    PodReplaced,
)
from kubectl_hami_place.kube.hami_config import read_hami_config
from kubectl_hami_place.kube.move_values import Checked, Replacement, RolledBack, Stage
from kubectl_hami_place.kube.snapshot import Unread, read_volumes, snapshot_of
from kubectl_hami_place.kube.snapshot import read_snapshot as read_plan_snapshot

STATEFULSET_POD_NAME = "statefulset.kubernetes.io/pod-name"
ACK_POLL_SECONDS = 0.2


@dataclass(frozen=True)
class Pinned:
    """What pin-then-evict left: the placement (as stored, or as it would be under dry-run), and whether this call
    created it (False when it already existed from an earlier, interrupted attempt)."""

    obj: dict[str, Any]
    created: bool


def replacement(kube: Kube, namespace: str, pod: Mapping[str, Any]) -> Replacement:
    """The pod's controller (selector and pod template), else the pod itself with its labels as the selector, marked
    uncontrolled when it has no controller or one that is gone; `NoReplacement` when it has neither labels nor a
    controller whose template we read."""
    metadata = pod.get("metadata") or {}
    name = metadata.get("name", "")
    owner = _controller_reference(pod)
    labels = dict(metadata.get("labels") or {})
    controlled = owner is not None
    if owner is not None:
        controller, controlled = _controller_of(kube, namespace, owner)
        if controller is not None and controller.selector:
            try:
                selector = selector_from_dict(controller.selector, require_nonempty=True)
            except ModelError:
                selector = None
            if selector is not None:
                if controller.kind == "StatefulSet" and STATEFULSET_POD_NAME in labels:
                    extra = {STATEFULSET_POD_NAME: labels[STATEFULSET_POD_NAME]}
                    selector = selector_from_dict({**selector.to_dict(), "matchLabels": {**selector.labels, **extra}})
                return Replacement(selector, f"{controller.kind} {controller.name}", controller.template)
    if not labels:
        raise NoReplacement(f"pod {name} has no controller and no labels, so no replacement pod can be matched")
    return Replacement(selector_from_dict({"matchLabels": labels}), f"pod {name}", dict(pod), controlled)


def _controller_reference(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The pod's owner reference marked as its controller, None when it has none."""
    owners = as_mapping(pod.get("metadata")).get("ownerReferences") or []
    return next((ref for ref in map(as_mapping, owners) if ref.get("controller")), None)


def _controller_of(
    kube: Kube, namespace: str, owner: Mapping[str, Any]
) -> tuple[cluster_reads.Controller | None, bool]:
    """The controller a pod's owner reference names (None for a kind whose template we do not read), and whether one
    re-creates the pod: not when the name is none an object has (the API server checks only that it is not empty,
    so the pod's writer made it up) nor when it is gone."""
    name = owner.get("name")
    if not is_object_name(name):
        return None, False
    try:
        return cluster_reads.get_controller(kube, namespace, str(owner.get("kind") or ""), name), True
    except KubeNotFound:
        return None, False


PIN_UNREAD = Unread(
    claims=UNCHECKED_LIMITS,
    limits=UNCHECKED_LIMITS,
    classes="a claim of the pod not bound yet is not counted toward the node's CSI attach limits",
    capacities="the pin's check reads none",
)
"""What a pin's check leaves unread without each storage list."""


@dataclass(frozen=True)
class PinRead:
    """What a pin is checked against, and the workload as it asks of its node: with what its CSI volumes ask of the
    node's attach limits when it claims one (read then, with the claims and volumes, and the warning when they may not
    be)."""

    view: PinView
    workload: Workload
    volumes: Volumes | None
    warnings: tuple[str, ...]


def pin_view(kube: Kube, node: str, workload: Workload, namespace: str) -> PinRead:
    """The node (when it exists), every pod HAMi placed, cluster-wide (usage is counted whatever the namespace), and
    the node's room as kube-scheduler counts it for the workload's pods."""
    try:
        nodes = {node: cluster_reads.get_node(kube, node)}
    except KubeNotFound:
        nodes = {}
    found: list[PodAllocation] = []
    pods = cluster_reads.list_pods(kube, None)
    for pod in pods:
        try:
            allocation = pod_allocation(pod)
        except ModelError:
            continue
        if allocation is not None:
            found.append(allocation)
    volumes, warnings = read_volumes(kube, pods, PIN_UNREAD) if workload.attaches is not NO_REFS else (None, ())
    workload = with_volumes(workload, volumes, namespace)
    view = PinView(nodes, tuple(found), node_room(nodes.get(node), pods, workload, volumes=volumes))
    return PinRead(view, workload, volumes, warnings)


def check_pin(
    kube: Kube,
    namespace: str,
    spec: PlacementSpec,
    *,
    name: str,
    workload: Workload,
    evicted_pod: Mapping[str, Any] | None,
    labels: Mapping[str, str],
    annotations: Mapping[str, str] | None = None,
    planned: bool = False,
) -> Checked:
    """Checks the pin against the cluster as it is now; `PinRefused` carrying the verdict when it has problems.

    A node without the CPU or memory the pod asks refuses a pin that evicts a pod (the eviction would free nothing
    it could use) and warns otherwise (room may come). `planned`: a planned move's room is its plan's to check
    (`planner.apply.move_step` counts it with the plan's other moves, where a pod an earlier move evicted may still
    be terminating), not checked again here."""
    node = spec.node_name
    evict_allocation = None
    warnings: list[str] = []
    if evicted_pod is not None:
        try:
            evict_allocation = pod_allocation(evicted_pod)
        except ModelError:
            evict_allocation = None
        if spec.evict_pod:
            # pin --evict: the eviction is to make room on the node. A move evicts the pod being moved, which
            # frees its cards wherever it runs: nothing to warn about.
            warnings.extend(eviction_warnings(evicted_pod, evict_allocation, node))
    read = pin_view(kube, node, workload, namespace)
    view, workload = read.view, read.workload
    warnings.extend(read.warnings)
    pin = pin_verdict(spec, view, workload, evict=evict_allocation)
    evicting = spec.evict_pod or (_name(evicted_pod) if evicted_pod is not None else None)
    if not pin.ok:
        raise PinRefused(pin, workload.source, evicting)
    if evicted_pod is not None and not spec.evict_pod:
        placed_on = str(as_mapping(evicted_pod.get("spec")).get("nodeName") or "")
        kept_off = move_kept_off(workload, view.nodes.get(node), placed_on)
        if kept_off is not None:
            raise PinRefused(dataclasses.replace(pin, problems=(kept_off,)), workload.source, evicting)
    else:
        warnings.extend(node_warnings(workload, view.nodes.get(node)))
    short = None if planned else room_short(workload, node, view.room, evicted_pod, read.volumes)
    if short is not None and evicted_pod is not None:
        raise PinRefused(dataclasses.replace(pin, problems=(short,)), workload.source, evicting)
    if short is not None:
        warnings.append(room_warning(workload, short))
    warnings.extend(pending_warnings(spec, namespace, name, _placements(kube, namespace), pin.cards))
    obj = placement_object(name, namespace, spec, labels=labels, annotations=annotations)
    return Checked(namespace, obj, node, pin.checks, workload, spec.evict_pod, tuple(warnings))


def await_acknowledgement(kube: Kube, namespace: str, name: str, timeout: float) -> Placement:
    """The placement once the webhook acknowledged it (status.observedGeneration); `NotAcknowledged` after
    `timeout`.

    Evicting before the webhook has the placement in its cache would let the replacement pod through unpinned.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            placement = placement_from_object(placements.get_placement(kube, namespace, name))
            if placement.acknowledged:
                return placement
        except (KubeNotFound, PlacementError):
            pass
        if time.monotonic() >= deadline:
            raise NotAcknowledged(
                f"the hami-place webhook did not acknowledge placement {namespace}/{name} within {timeout:g}s, "
                "so the pod was not evicted"
            )
        time.sleep(ACK_POLL_SECONDS)


def pin_then_evict(
    kube: Kube,
    checked: Checked,
    pod: Mapping[str, Any],
    *,
    ack_timeout: float,
    reuse: Callable[[Mapping[str, Any]], str] | None = None,
    dry_run: bool = False,
    rolled_back: Callable[[RolledBack], None] | None = None,
    guard: Callable[[], object] | None = None,
) -> Pinned:
    """Creates the checked placement, waits for its acknowledgement and evicts `pod` by its UID.

    The eviction is first tried as a dry run, so a PodDisruptionBudget that blocks it (`BlockedByDisruptionBudget`)
    stops the move before anything is created. With `reuse`, a placement of that name already there is waited for
    as an earlier attempt of the same move when `reuse` finds nothing wrong with it, else `PlacementTaken` says what
    `reuse` found. With `dry_run`, the API server checks the eviction and the creation without persisting either.
    A placement this call created is deleted again when the acknowledgement or the eviction fails (an eviction whose
    answer was lost counts as made when the pod is gone or going), or the caller is interrupted; `rolled_back` hears
    of it. `guard` is called before the creation and again before the eviction: a `KubeError` it raises (the
    controller lost its lease) stops the move there, as any failure of that step would.
    """
    metadata = pod.get("metadata") or {}
    namespace, name, uid = str(metadata.get("namespace") or checked.namespace), metadata["name"], metadata["uid"]
    evictions.evict_pod(kube, namespace, name, dry_run=True, uid=uid)
    placement_name = checked.obj["metadata"]["name"]
    if guard is not None:
        guard()
    try:
        stored = placements.create_placement(kube, checked.namespace, checked.obj, dry_run=dry_run)
    except KubeConflict:
        if reuse is None:
            raise
        stored, created = placements.get_placement(kube, checked.namespace, placement_name), False
        why = reuse(stored)
        if why:
            raise PlacementTaken(
                f"placement {checked.namespace}/{placement_name} already exists and is not this move's: {why}",
                status=409,
                reason="AlreadyExists",
            ) from None
    else:
        created = True
    if dry_run:
        return Pinned(stored, created)
    stage = Stage.acknowledgement
    try:
        acknowledged = await_acknowledgement(kube, checked.namespace, placement_name, ack_timeout)
        if not acknowledged.open:
            # Admission pins only with an open placement: an earlier attempt's, Expired, Failed or claimed, would let
            # the replacement through unpinned.
            raise PlacementTaken(
                f"placement {checked.namespace}/{placement_name} can no longer pin a pod ({acknowledged.why_closed}), "
                "so the pod was not evicted",
                status=409,
                reason="Conflict",
            )
        stage = Stage.eviction
        if guard is not None:
            guard()
        try:
            evictions.evict_pod(kube, namespace, name, uid=uid)
        except KubeError as error:
            if not _answer_lost(error) or not _evicted(kube, namespace, name, uid):
                raise
    except (KubeError, KeyboardInterrupt):
        if created:
            _roll_back(kube, checked.namespace, placement_name, stage, rolled_back)
        raise
    return Pinned(stored, created)


def _answer_lost(error: KubeError) -> bool:
    """Whether an eviction's failure leaves its outcome unknown: no answer (a timeout, a cut connection) or a server
    error, after which the API server may have carried it out."""
    return error.status == 0 or error.status >= 500


def _evicted(kube: Kube, namespace: str, name: str, uid: str) -> bool:
    """Whether the pod of `uid` is gone or going, read anew: an eviction whose answer was lost was carried out, and
    its placement must stay, or the pod's replacement lands unpinned; unknown (the read fails too) is False."""
    try:
        pod = cluster_reads.get_pod(kube, namespace, name)
    except KubeNotFound:
        return True
    except KubeError:
        return False
    metadata = pod.get("metadata") or {}
    return metadata.get("uid") != uid or bool(metadata.get("deletionTimestamp"))


def _roll_back(
    kube: Kube, namespace: str, name: str, stage: Stage, rolled_back: Callable[[RolledBack], None] | None
) -> None:
    """The pod was not evicted after the placement was created: delete it, so no half-done pin stays behind."""
    error: KubeError | None = None
    try:
        placements.delete_placement(kube, namespace, name)
    except KubeError as exc:
        error = exc
    if rolled_back is not None:
        rolled_back(RolledBack(namespace, name, stage, error))


def move_spec(successor: Replacement, move: Move) -> PlacementSpec:
    """The placement spec pinning the pod's replacement (its controller's selector) to the move's cards."""
    spec = PlacementSpec(
        req_id=req_id_for(move),
        pod_selector=successor.selector,
        node_name=move.to_node,
        gpu_devices=tuple(parse_card_ref(uuid) for uuid in move.to_cards),
    )
    problem = validate_spec(spec)
    if problem:
        raise PlacementError(f"move of {move.pod}: {problem}")
    return spec


def check_move(
    kube: Kube,
    move: Move,
    pod: Mapping[str, Any],
    *,
    config: HamiConfig,
    labels: Mapping[str, str],
    annotations: Mapping[str, str] | None = None,
) -> Checked:
    """The placement of a planned move, checked against the cluster as it is now (`PinRefused`, `NoReplacement`)."""
    namespace = move.pod.split("/", 1)[0]
    successor = replacement(kube, namespace, pod)
    if not successor.controlled and _controller_reference(pod) is not None:
        raise NoReplacement(
            f"pod {move.pod}: its controller is gone or names no object, so nothing re-creates it; it is not moved"
        )
    return check_pin(
        kube,
        namespace,
        move_spec(successor, move),
        name=placement_for(move),
        workload=workload_from_pod(successor.template, successor.source, template=True, config=config),
        evicted_pod=pod,
        labels=labels,
        annotations=annotations,
        planned=True,
    )


def make_move(
    kube: Kube,
    move: Move,
    *,
    config: HamiConfig,
    labels: Mapping[str, str],
    annotations: Mapping[str, str] | None = None,
    ack_timeout: float,
    rolled_back: Callable[[RolledBack], None] | None = None,
    guard: Callable[[], object] | None = None,
    key: RoomKey | None = None,
) -> Checked:
    """Pins the moved pod's replacement to the move's cards and evicts the pod (the one of the move's UID).

    `PodGone` when the pod is gone, `PodReplaced` when its name now holds another pod (as read, and by the
    eviction's UID precondition), `PodProtected` when it was annotated do-not-move since the plan, and every error of
    `check_move` and `pin_then_evict`. With `key` (the controller's), the placement
    is sealed with it. A placement of the move's name is reused as an earlier attempt when it asks the same pin and,
    with `key`, its seal checks; else `PlacementTaken`, so no one steers a move by writing its placement first.
    """
    pod = get_moved_pod(kube, move)
    metadata = as_mapping(pod.get("metadata"))
    if metadata.get("uid") != move.uid:
        # The eviction below takes its UID precondition from this read: the move's own pod is the only one evicted.
        raise PodReplaced(
            f"pod {move.pod} is no longer the pod {move.uid} the move meant (re-created under the same name)",
            status=409,
        )
    if asks_not_to_move(as_mapping(metadata.get("annotations"))):
        raise PodProtected(f"pod {move.pod} was annotated {DO_NOT_MOVE} since the plan; it is not moved", status=409)
    checked = check_move(kube, move, pod, config=config, labels=labels, annotations=annotations)
    if key is not None:
        checked = dataclasses.replace(checked, obj=seal_move(checked.obj, key, datetime.now(UTC)))

    def reuse(stored: Mapping[str, Any]) -> str:
        """Why the stored placement is not an earlier attempt of this move, "" when it is."""
        why = pin_differs(stored, checked.obj)
        if not why and key is not None and not move_sealed(stored, key):
            why = "no run of the controller sealed it"
        return why

    pin_then_evict(kube, checked, pod, ack_timeout=ack_timeout, reuse=reuse, rolled_back=rolled_back, guard=guard)
    return checked


def get_moved_pod(kube: Kube, move: Move) -> dict[str, Any]:
    """The pod a move evicts, as stored now; `PodGone` when there is none of its name."""
    namespace, name = move.pod.split("/", 1)
    try:
        return cluster_reads.get_pod(kube, namespace, name)
    except KubeNotFound as exc:
        raise PodGone(f"{move.pod} vanished just before its eviction", status=404) from exc


def dry_run_move(kube: Kube, move: Move, labels: Mapping[str, str]) -> None:
    """The API server checks the move's eviction and placement without persisting either."""
    namespace, name = move.pod.split("/", 1)
    pod = cluster_reads.get_pod(kube, namespace, name)
    spec = move_spec(replacement(kube, namespace, pod), move)
    obj = placement_object(placement_for(move), namespace, spec, labels=labels)
    evictions.evict_pod(kube, namespace, name, dry_run=True, uid=move.uid)
    try:
        placements.create_placement(kube, namespace, obj, dry_run=True)
    except KubeConflict:
        return


def move_state(kube: Kube, move: Move, hami_config: str = "") -> MoveCheck:
    """The move's step in the cluster as it is now (to make, made and settled, settling, no longer the plan's): once
    its pod was evicted, read from its own pods and the nodes they name (`settling_pods`; apply polls a settling move
    every second, where it listed every node and pod of the cluster), else from the whole cluster."""
    namespace = move.pod.split("/", 1)[0]
    listed = placements.list_placements(kube, namespace)
    named = _placement_keys(namespace, listed)
    own = settling_pods(move, move_pods(functools.partial(pod_or_none, kube), move, listed))
    if own is None:
        return move_step(move, read_plan_snapshot(kube, hami_config).snapshot, named)
    nodes = []
    for name in sorted(settling_nodes(move, own)):
        try:
            nodes.append(cluster_reads.get_node(kube, name))
        except KubeNotFound:
            continue
    config = read_hami_config(kube, hami_config).config
    return move_step(move, snapshot_of(nodes, own, [], config).snapshot, named)


def move_pods(
    read: Callable[[str, str], dict[str, Any] | None], move: Move, listed: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The pods a move's step may read alone, each `read` by name: the pod under the moved pod's name (it, or a
    StatefulSet's replacement), and the pod its placement's status names as its consumer (a name that is no object
    name is not read: it would be a path of the API, not a pod)."""
    namespace, name = move.pod.split("/", 1)
    placement = next((item for item in listed if item["metadata"]["name"] == placement_for(move)), {})
    consumer = as_mapping(as_mapping(placement.get("status")).get("consumedBy")).get("name")
    names = (name, *((consumer,) if is_object_name(consumer) else ()))
    return [pod for pod in map(functools.partial(read, namespace), dict.fromkeys(names)) if pod is not None]


def pod_or_none(kube: Kube, namespace: str, name: str) -> dict[str, Any] | None:
    """The pod as stored now; None when there is none."""
    try:
        return cluster_reads.get_pod(kube, namespace, name)
    except KubeNotFound:
        return None


def termination_wait(kube: Kube, move: Move) -> float:
    """Seconds until the pod the move evicted is due to be gone (`keys.termination_left`): 0 once it is gone, when it
    is not terminating, or when it cannot be read."""
    namespace, name = move.pod.split("/", 1)
    try:
        pod = cluster_reads.get_pod(kube, namespace, name)
    except KubeError:
        return 0.0
    return termination_left(pod, move.uid, datetime.now(UTC))


def placement_names(kube: Kube, namespace: str) -> set[str]:
    """`namespace/name` of the namespace's placements."""
    return _placement_keys(namespace, placements.list_placements(kube, namespace))


def _placement_keys(namespace: str, listed: list[dict[str, Any]]) -> set[str]:
    """`namespace/name` of these placements of the namespace."""
    return {f"{namespace}/{item['metadata']['name']}" for item in listed}


def _placements(kube: Kube, namespace: str) -> list[Placement]:
    """Every placement the caller may read: cluster-wide, else the namespace's."""
    try:
        items = placements.list_placements(kube, None)
    except KubeForbidden:
        items = placements.list_placements(kube, namespace)
    return placements_from_objects(items)


def _name(obj: Mapping[str, Any]) -> str:
    """metadata.name."""
    return str((obj.get("metadata") or {}).get("name", ""))
