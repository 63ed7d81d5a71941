"""Carrying a plan out, decided on plain data: the plan file read back, and where each move stands in the cluster.

A move is carried out by a placement pinning the moved pod's replacement to the move's target cards, then an
eviction of the pod. Each move has a placement name derived from the move alone, so a re-run finds its own
placements and the replacement pods they pinned (the webhook writes the placement's name on the pod): a move whose
pod is gone and whose replacement holds the target cards is done. Before a move is made, the pod must still be the
one the plan saw (same UID, same cards) and the target cards must still take it under HAMi's fit rules. A move
given up while its replacement is still Pending on the target takes that replacement away (`stranded_replacement`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, TypeVar

from kubectl_hami_place.core.allocations import NODE_ANNOTATION
from kubectl_hami_place.core.errors import ModelError
from kubectl_hami_place.core.fields import as_mapping
from kubectl_hami_place.core.names import PLACEMENT_ANNOTATION
from kubectl_hami_place.core.node_resources import count_name
from kubectl_hami_place.core.planner.model import Limits, Move, PlanPod, Snapshot
from kubectl_hami_place.core.planner.state import State
from kubectl_hami_place.core.refs import place, where
from kubectl_hami_place.core.usage import pod_allocation

NAME_ROOM = 40
# A pod as read (a dict from the API, or the cache's projection): what `settling_pods` keeps, it gives back as is.
PodObject = TypeVar("PodObject", bound=Mapping[str, Any])
# Every move's placement name starts so (`placement_for`).
MOVE_PREFIX = "move-"


class PlanFileError(ModelError):
    """A plan file is not what `plan -o json|yaml` prints."""


@dataclass(frozen=True)
class PlanFile:
    """What apply needs of a printed plan: its moves in order, and for a `--for` plan the pod and its target."""

    goal: str
    moves: tuple[Move, ...]
    pod: str = ""
    target: tuple[str, tuple[str, ...]] | None = None


class Step(StrEnum):
    """Where a move stands: to make, made and settled, made and settling, or no longer what the plan saw."""

    ready = "ready"
    done = "done"
    waiting = "waiting"
    changed = "changed"


@dataclass(frozen=True)
class MoveCheck:
    """A move's step and, in words, why."""

    step: Step
    detail: str


def read_plan(data: object) -> PlanFile:
    """The plan file's moves (and `--for` pod); PlanFileError naming the first field that is wrong."""
    if not isinstance(data, Mapping):
        raise PlanFileError("the plan is not an object")
    moves = data.get("moves")
    if not isinstance(moves, list):
        raise PlanFileError("the plan has no moves list")
    read = tuple(_move(number, entry) for number, entry in enumerate(moves, start=1))
    if len({move.pod for move in read}) != len(read):
        raise PlanFileError("the plan moves one pod twice")
    pod = data.get("pod")
    key = ""
    if pod is not None:
        if not isinstance(pod, Mapping) or not pod.get("namespace") or not pod.get("name"):
            raise PlanFileError("pod: needs namespace and name")
        key = f"{pod['namespace']}/{pod['name']}"
    target = data.get("target")
    where = None
    if isinstance(target, Mapping):
        where = (_text(target, "node", "target"), _cards(target.get("cards"), "target"))
    return PlanFile(goal=str(data.get("goal") or ""), moves=read, pod=key, target=where)


def _move(number: int, entry: object) -> Move:
    """One move of the file."""
    where = f"move {number}"
    if not isinstance(entry, Mapping):
        raise PlanFileError(f"{where}: not an object")
    pod = _text(entry, "pod", where)
    if pod.count("/") != 1 or not all(pod.split("/")):
        raise PlanFileError(f"{where}: pod {pod!r} is not namespace/name")
    uid = _text(entry, "uid", where)
    source, destination = entry.get("from"), entry.get("to")
    if not isinstance(source, Mapping) or not isinstance(destination, Mapping):
        raise PlanFileError(f"{where}: needs from and to, each with node and cards")
    return Move(
        pod=pod,
        uid=uid,
        from_node=_text(source, "node", f"{where} from"),
        from_cards=_cards(source.get("cards"), f"{where} from"),
        to_node=_text(destination, "node", f"{where} to"),
        to_cards=_cards(destination.get("cards"), f"{where} to"),
        reason=str(entry.get("reason") or ""),
    )


def _text(entry: Mapping[str, Any], key: str, where: str) -> str:
    """A non-empty string field."""
    value = entry.get(key)
    if not isinstance(value, str) or not value:
        raise PlanFileError(f"{where}: {key} must be a non-empty string")
    if not value.isascii():
        raise PlanFileError(f"{where}: {key} {value[:80]!r} is not a Kubernetes name or UID (ASCII)")
    return value


def _cards(value: object, where: str) -> tuple[str, ...]:
    """A non-empty list of card UUIDs."""
    if not isinstance(value, list) or not value or not all(isinstance(uuid, str) and uuid for uuid in value):
        raise PlanFileError(f"{where}: cards must be a non-empty list of card UUIDs")
    if not all(uuid.isascii() for uuid in value):
        raise PlanFileError(f"{where}: cards must be card UUIDs (ASCII)")
    return tuple(value)


def placement_for(move: Move) -> str:
    """The placement name of a move: the pod's name and a digest of the pod's UID and the target cards."""
    digest = hashlib.sha256(f"{move.uid}|{move.to_node}|{','.join(move.to_cards)}".encode()).hexdigest()[:12]
    name = move.pod.split("/", 1)[1][:NAME_ROOM].rstrip("-.")
    return f"{MOVE_PREFIX}{name}-{digest}"


def req_id_for(move: Move) -> str:
    """The reqID of a move's placement: the same digest, so a re-run never pins twice."""
    return placement_for(move).rsplit("-", 1)[1]


def check_plan(plan: PlanFile, snapshot: Snapshot, placements: Collection[str]) -> tuple[tuple[Move, MoveCheck], ...]:
    """Each move's step in order; a ready move is then made on a copy of the cards, so the next is checked as it
    would find them. The walk stops after the first move that is waiting or changed.

    `placements` holds the `namespace/name` of the placements that exist.
    """
    state = State(snapshot, Limits())
    checks: list[tuple[Move, MoveCheck]] = []
    for move in plan.moves:
        check = check_move(move, state, placements)
        checks.append((move, check))
        if check.step is Step.ready:
            state.carry_out(move)
        elif check.step is not Step.done:
            break
    return tuple(checks)


def move_step(move: Move, snapshot: Snapshot, placements: Collection[str]) -> MoveCheck:
    """Where one move stands in the cluster as it is now."""
    return check_move(move, State(snapshot, Limits()), placements)


def settling_pods(move: Move, pods: Iterable[PodObject]) -> list[PodObject] | None:
    """Of `pods`, those a move's step reads once its pod was evicted: that pod (by UID) while it terminates, and the
    pods of its namespace its placement pinned; None while that pod runs, not terminating (its target's cards and room
    then decide, which only a snapshot of the whole cluster holds). A settling move is so polled on its own pods,
    where the whole cluster was read at every poll."""
    namespace, placement = move.pod.split("/", 1)[0], placement_for(move)
    found = []
    for pod in pods:
        metadata = as_mapping(pod.get("metadata"))
        if metadata.get("namespace") != namespace:
            continue
        if metadata.get("uid") == move.uid:
            if metadata.get("deletionTimestamp") is None:
                return None
            found.append(pod)
        elif as_mapping(metadata.get("annotations")).get(PLACEMENT_ANNOTATION) == placement:
            found.append(pod)
    return found


def settling_nodes(move: Move, pods: Iterable[Mapping[str, Any]]) -> set[str]:
    """The nodes a settling move's step names: its source and target, and where each of its pods runs or HAMi
    placed it (a replacement that landed elsewhere is then seen as such)."""
    names = {move.from_node, move.to_node}
    for pod in pods:
        placed = as_mapping(as_mapping(pod.get("metadata")).get("annotations")).get(NODE_ANNOTATION)
        for name in (as_mapping(pod.get("spec")).get("nodeName"), placed):
            if isinstance(name, str) and name:
                names.add(name)
    return names


def check_move(move: Move, state: State, placements: Collection[str]) -> MoveCheck:
    """Where one move stands on the cards of `state` (see the module docstring)."""
    namespace = move.pod.split("/", 1)[0]
    placement = placement_for(move)
    pinned = f"{namespace}/{placement}" in placements
    pods = [entry.pod for entry in state.pods.values()]
    original = next((pod for pod in pods if pod.uid == move.uid), None)
    replacement = next((pod for pod in pods if pod.annotations.get(PLACEMENT_ANNOTATION) == placement), None)
    if replacement is not None and replacement.namespace != namespace:
        replacement = None
    if original is None:
        if replacement is not None:
            return _landed(move, replacement, state)
        if pinned:
            return MoveCheck(Step.waiting, f"{move.pod} is gone; its replacement is not on the target cards yet")
        return MoveCheck(
            Step.changed,
            f"{move.pod} (uid {move.uid}) is gone and no pod pinned by this plan replaced it: "
            "it was deleted or moved meanwhile",
        )
    if original.key != move.pod:
        return MoveCheck(Step.changed, f"{move.pod} (uid {move.uid}): that UID is {original.key}'s")
    if original.allocation is not None and original.allocation.deleting:
        if pinned:
            return MoveCheck(Step.waiting, f"{move.pod} is terminating")
        return MoveCheck(Step.changed, f"{move.pod} is terminating, but not because of this plan")
    if replacement is not None:
        return MoveCheck(
            Step.changed,
            f"placement {placement} already pinned {replacement.key} while {move.pod} still runs",
        )
    if original.never_moves:
        # Protected since the plan (its do-not-move annotation): what the plan found movable is not evicted now.
        return MoveCheck(Step.changed, f"{move.pod} {original.never_moves}")
    entry = state.pods[original.key]
    if entry.node != move.from_node or set(entry.cards) != set(move.from_cards):
        return MoveCheck(
            Step.changed,
            f"{move.pod} holds {_at(state, entry.node, entry.cards)}; "
            f"the plan found it on {_at(state, move.from_node, move.from_cards)}",
        )
    if not original.runs_on(move.to_node):
        taint = original.untolerated.get(move.to_node)
        if taint:
            why = f"{move.pod} does not tolerate node {move.to_node}'s taint {taint}"
        elif move.to_node in original.kept_off:
            why = f"{move.pod} may not go to node {move.to_node} ({original.kept_off[move.to_node][1]})"
        else:
            why = f"{move.pod}'s node selection no longer allows node {move.to_node}"
        return MoveCheck(Step.changed, f"{why}: kube-scheduler would refuse its replacement there")
    for uuid in move.to_cards:
        slot = state.by_uuid.get(uuid)
        if slot is None or slot.node != move.to_node:
            return MoveCheck(Step.changed, f"card {uuid} is no longer on node {move.to_node}")
        name = place(slot.node, [slot.card.name])
        if not slot.open:
            return MoveCheck(
                Step.changed, f"{name} takes no new pods now (unhealthy, cordoned, or its node is unschedulable)"
            )
        verdict = state.verdict(original, slot)
        if not verdict.ok:
            return MoveCheck(
                Step.changed, f"{name} no longer has room for {move.pod}: {verdict.reason}: {verdict.message}"
            )
    if not state.holds(move.to_node, original, entry.node):
        short = " and ".join(map(count_name, state.room[move.to_node].short(original.needs)))
        return MoveCheck(
            Step.changed, f"node {move.to_node} no longer has the {short} {move.pod} asks (kube-scheduler's count)"
        )
    return MoveCheck(Step.ready, f"{move.pod} is on {_at(state, move.from_node, move.from_cards)}; the target has room")


def _landed(move: Move, replacement: PlanPod, state: State) -> MoveCheck:
    """Done when the replacement holds exactly the target cards, else the cluster went another way."""
    entry = state.pods[replacement.key]
    if entry.node == move.to_node and set(entry.cards) == set(move.to_cards):
        return MoveCheck(Step.done, f"{replacement.key} holds {_at(state, move.to_node, move.to_cards)}")
    return MoveCheck(
        Step.changed,
        f"{move.pod}'s replacement {replacement.key} holds {_at(state, entry.node, entry.cards)}, not "
        f"{_at(state, move.to_node, move.to_cards)}",
    )


def stranded_replacement(
    pods: Iterable[Mapping[str, Any]], namespace: str, placement: str, evicted_uid: str
) -> tuple[str, str] | None:
    """(name, UID) of the pod that placement `namespace/placement` pinned while no node holds it yet, once the pod it
    replaces (UID `evicted_uid`) is gone: a move given up would leave it Pending on the target's cards for good, since
    the placement that pinned it is consumed. While the evicted pod still terminates, its replacement waits for it,
    not for room: None then."""
    pods = list(pods)
    if any((pod.get("metadata") or {}).get("uid") == evicted_uid for pod in pods):
        return None
    for pod in pods:
        metadata = pod.get("metadata") or {}
        if metadata.get("namespace") != namespace or metadata.get("deletionTimestamp"):
            continue
        if (metadata.get("annotations") or {}).get(PLACEMENT_ANNOTATION) != placement:
            continue
        if (pod.get("spec") or {}).get("nodeName") or not metadata.get("name") or not metadata.get("uid"):
            return None
        return str(metadata["name"]), str(metadata["uid"])
    return None


def target_pod_state(plan: PlanFile, pod: Mapping[str, Any] | None, names: Mapping[str, str]) -> tuple[bool, str]:
    """For a `--for` plan: whether its pod (as stored) now holds cards, and where (card names from `names`, by
    UUID)."""
    if pod is None:
        return False, f"{plan.pod} no longer exists"
    try:
        allocation = pod_allocation(pod)
    except ModelError as err:
        return False, f"{plan.pod} is not scheduled yet ({err})"
    if allocation is None or not allocation.counted:
        return False, f"{plan.pod} is not scheduled yet"
    cards = tuple(dict.fromkeys(share.uuid for share in allocation.shares()))
    words = f"{plan.pod} holds {where(allocation.node, cards, names)}"
    if plan.target is not None and (allocation.node, set(cards)) != (plan.target[0], set(plan.target[1])):
        words += f" (the plan made room on {where(*plan.target, names)})"
    return True, words


def _at(state: State, node: str, uuids: Sequence[str]) -> str:
    """`node/gpu-N,gpu-M` for card UUIDs the state knows, a card it does not by its UUID."""
    return place(node, [state.by_uuid[uuid].card.name if uuid in state.by_uuid else uuid for uuid in uuids])
