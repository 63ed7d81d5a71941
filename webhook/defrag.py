"""The defragmentation controller: moves pods on its own, within the operator's DefragPolicy, from the leader only.

Its own threads beside admission (which runs on every replica whatever the controller does): one stands for the
`hami-place-defrag-leader` Lease (`kube/leader.py`), one runs a pass every `interval` seconds. A pass re-reads the
policy's ConfigMap (a new resourceVersion is parsed again; a bad policy turns the controller off until fixed), and on
the leader only:

- follows the rescues whose moves are done: the pod scheduled (rescued, timed from Pending), or refused again after
  the moves (room lost: another pod took the freed card before the scheduler retried this one);
- rescue: GPU pods of HAMi's scheduler Pending for `rescue.pendingFor` whose last FailedScheduling carries HAMi fit
  reasons are planned for (`core.defrag.runs.decide_run`); mode `dry-run` says on the pod what it would move, mode
  `on` carries the moves out one after another through `kube.moves.make_move` (pin the replacement, acknowledgement,
  eviction by UID) and waits for each to settle. One run acts per pass; the next pass sees what it left;
- keep room: every `keepRoom.interval`, when `room_goal` says the goal is unmet, the same toward the goal.

The room a rescue frees is not reserved for the rescued pod: it is retried by the scheduler as soon as the evicted
pods are gone, and whatever takes the room first wins. A rescue that loses it is counted
(`hami_place_defrag_room_lost_total`), says so on the pod, and is planned again once the pod qualifies again.

A new leader first looks at the open placements of earlier runs: one whose pod was never evicted is deleted (the
move is undone), one whose pod is gone is left for its replacement to claim.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from kubectl_hami_place.core.defrag.budget import MoveRecord, allowance, history_from_placements
from kubectl_hami_place.core.defrag.policy import DefragPolicy, Mode, PolicyError, parse_policy
from kubectl_hami_place.core.defrag.runs import RescueTrigger, RoomTrigger, RunDecision, decide_run
from kubectl_hami_place.core.defrag.triggers import may_rescue, rescue_candidates, room_goal, room_of
from kubectl_hami_place.core.errors import ModelError
from kubectl_hami_place.core.hami_config import HamiConfig
from kubectl_hami_place.core.names import (
    DEFRAG_LEASE,
    DEFRAG_POD_ANNOTATION,
    DEFRAG_POD_UID_ANNOTATION,
    DEFRAG_POLICY_KEY,
    Phase,
)
from kubectl_hami_place.core.planner import Move
from kubectl_hami_place.core.planner.apply import Step
from kubectl_hami_place.core.planner.objects import pod_for_plan
from kubectl_hami_place.kube import cluster, moves, placements
from kubectl_hami_place.kube.client import Kube
from kubectl_hami_place.kube.defrag import (
    PolicySource,
    failed_scheduling_events,
    move_annotations,
    move_labels,
    read_policy,
    run_placements,
)
from kubectl_hami_place.kube.errors import BlockedByDisruptionBudget, KubeError, KubeNotFound
from kubectl_hami_place.kube.events import record_event
from kubectl_hami_place.kube.leader import Elector, LeaseTimes
from kubectl_hami_place.kube.snapshot import SnapshotRead, read_snapshot
from webhook.metrics import DefragMetrics

log = logging.getLogger(__name__)

COMPONENT = "hami-place-defrag"
INTERVAL_SECONDS = 10.0
MOVE_TIMEOUT_SECONDS = 180.0
SETTLE_POLL_SECONDS = 1.0
# A rescue whose pod neither ran nor was refused again within this long is no longer followed.
FOLLOW_SECONDS = 900.0
# A refusal this soon after a rescue's moves settled does not mean its room was taken: the scheduler may retry the pod
# once more on a view that still holds the evicted pod (seen on a loaded sandbox) before it places it.
ROOM_SETTLE_SECONDS = 30.0
# After a run failed, its pod (or keep-room) is not planned for again for this long: a move that cannot be made
# (no acknowledgement, a refusal) is not retried every pass.
RETRY_SECONDS = 60.0


class NotLeading(KubeError):
    """This replica lost the defragmentation lease: it stops acting at once."""


@dataclass(frozen=True)
class DefragOptions:
    """Where the policy is, where the Lease is and who stands for it, and how often a pass runs."""

    policy_namespace: str
    policy_name: str
    lease_namespace: str
    identity: str
    scheduler_name: str = "hami-scheduler"
    hami_config: str = ""
    interval: float = INTERVAL_SECONDS
    ack_timeout: float = moves.ACK_TIMEOUT_SECONDS
    move_timeout: float = MOVE_TIMEOUT_SECONDS
    lease: LeaseTimes = field(default_factory=LeaseTimes)


@dataclass
class Rescue:
    """A rescue whose moves are done, followed until its pod is scheduled or refused again."""

    pod: dict[str, Any]
    moves: int
    pending_since: datetime
    done_at: datetime


class DefragController:
    """The controller's state between passes: the policy read, what it said on which object, rescues followed."""

    def __init__(self, kube: Kube, options: DefragOptions, metrics: DefragMetrics) -> None:
        self.kube = kube
        self.options = options
        self.metrics = metrics
        self.elector = Elector(
            kube, options.lease_namespace, DEFRAG_LEASE, options.identity, times=options.lease, on_change=self._leading
        )
        self.policy: DefragPolicy | None = None
        self._policy_version: str | None = None
        self._said: dict[str, str] = {}
        self._rescues: dict[str, Rescue] = {}
        self._retry_at: dict[str, float] = {}
        self._resume = True
        self._next_room = 0.0
        self._stop = threading.Event()
        metrics.policy_valid.set(0)
        metrics.leader.set(0)

    def threads(self, stop: threading.Event) -> list[threading.Thread]:
        """The Lease's thread and the passes' thread, not started."""
        self._stop = stop
        return [
            threading.Thread(target=self.elector.run, args=(stop,), name="defrag-lease", daemon=True),
            threading.Thread(target=self.run, args=(stop,), name="defrag", daemon=True),
        ]

    def run(self, stop: threading.Event) -> None:
        """A pass every `interval` until `stop`; a failed pass is logged and the next one tries again."""
        self._stop = stop
        while not stop.is_set():
            try:
                self.step()
            except (KubeError, ModelError) as error:
                log.warning("defrag pass: %s", error)
            stop.wait(self.options.interval)

    def step(self) -> None:
        """One pass (see the module docstring)."""
        self._read_policy()
        policy = self.policy
        if policy is None:
            return
        if not self.elector.leading():
            self._resume = True
            return
        if self._resume:
            self._resume_runs()
            self._resume = False
        if policy.mode is Mode.off:
            return
        now = datetime.now(UTC)
        events = failed_scheduling_events(self.kube)
        room_due = policy.keep_room.enabled and time.monotonic() >= self._next_room
        if not (self._rescues or room_due or may_rescue(events, policy)):
            return
        read = read_snapshot(self.kube, self.options.hami_config)
        self._follow(read, events, now)
        history = history_from_placements(run_placements(self.kube))
        left = allowance(policy.budgets, history, now, "")
        self.metrics.budget_left.labels("hour").set(left.hour_left)
        self.metrics.budget_left.labels("run").set(policy.budgets.moves_per_run)
        ours = [pod for pod in read.pods if (pod.get("spec") or {}).get("schedulerName") == self.options.scheduler_name]
        for candidate in rescue_candidates(ours, events, now, policy, read.config):
            if candidate.uid in self._rescues or time.monotonic() < self._retry_at.get(candidate.uid, 0.0):
                continue
            trigger = RescueTrigger(pod_for_plan(candidate.pod, read.node_labels, read.config), candidate.reason)
            decision = decide_run(policy, read.snapshot, trigger, history, now, _run_id(now))
            pod = {"apiVersion": "v1", "kind": "Pod", **candidate.pod}
            if self._decided(decision, pod, "rescue", candidate.uid, candidate.pending_since, read.config):
                return
        self._keep_room(policy, read, history, now)

    def _decided(  # noqa: PLR0917 - one decision, what it is about, and how to follow it up
        self,
        decision: RunDecision,
        about: dict[str, Any],
        trigger: str,
        key: str,
        pending_since: datetime | None,
        config: HamiConfig,
    ) -> bool:
        """Says the decision on `about` and, when it acts, carries it out; True when it moved (the pass ends)."""
        if not decision.moves:
            result = next((r for r in ("budget", "blocked") if decision.reason.startswith(r)), "no_plan")
            reason = "DefragBlocked" if result == "blocked" else "DefragNoPlan"
            if self._say(about, key, reason, decision.message or decision.reason):
                self.metrics.runs.labels(trigger, result).inc()
            return False
        if decision.dry_run:
            if self._say(about, key, "DefragDryRun", decision.message):
                self.metrics.runs.labels(trigger, "dry_run").inc()
                self.metrics.moves.labels("dry_run").inc(len(decision.moves))
            return False
        self._event(about, "DefragRun", f"run {decision.run_id}: {decision.message}")
        done, failure = self._carry_out(decision, config)
        if failure:
            self.metrics.runs.labels(trigger, "failed").inc()
            self._retry_at[key] = time.monotonic() + RETRY_SECONDS
            self._event(
                about,
                "DefragStopped",
                f"run {decision.run_id} stopped after {done} of {len(decision.moves)} move(s): {failure}",
                warning=True,
            )
            self._said.pop(key, None)
            return True
        self.metrics.runs.labels(trigger, "moved").inc()
        self._said.pop(key, None)
        if pending_since is not None:
            self._rescues[key] = Rescue(about, done, pending_since, datetime.now(UTC))
        else:
            self._event(about, "DefragRoomMade", f"run {decision.run_id} made {done} move(s) toward {decision.trigger}")
        return True

    def _carry_out(self, decision: RunDecision, config: HamiConfig) -> tuple[int, str]:
        """The decision's moves one after another, each waited for until it settled; (moves made, why it stopped)."""
        done = 0
        for move in decision.moves:
            try:
                self._guard()
                moves.make_move(
                    self.kube,
                    move,
                    config=config,
                    labels=move_labels(decision.run_id),
                    annotations=move_annotations(move),
                    ack_timeout=self.options.ack_timeout,
                    guard=self._guard,
                )
            except BlockedByDisruptionBudget as error:
                self.metrics.moves.labels("blocked").inc()
                return done, error.cause
            except (KubeError, ModelError) as error:
                self.metrics.moves.labels("failed").inc()
                return done, f"{move.pod}: {error}"
            self._event(
                _pod_ref(move),
                "DefragMoved",
                f"evicted by run {decision.run_id} ({decision.trigger}); its replacement is pinned to "
                f"{move.to_node} by placement {moves.placement_for(move)}",
            )
            failure = self._settle(move)
            if failure:
                self.metrics.moves.labels("failed").inc()
                return done, failure
            self.metrics.moves.labels("done").inc()
            done += 1
        return done, ""

    def _settle(self, move: Move) -> str:
        """Waits until the move's replacement holds its target cards; why not, or nothing."""
        deadline = time.monotonic() + self.options.move_timeout
        while True:
            check = moves.move_state(self.kube, move, self.options.hami_config)
            if check.step is Step.done:
                return ""
            if check.step is Step.changed:
                return f"{move.pod}: {check.detail}"
            if time.monotonic() > deadline:
                return f"{move.pod}: not settled within {self.options.move_timeout:g} s: {check.detail}"
            if not self.elector.leading() or self._stop.wait(SETTLE_POLL_SECONDS):
                return "this replica stopped leading; the next leader resumes the run"

    def _guard(self) -> None:
        """Raises `NotLeading` once this replica may no longer act."""
        if not self.elector.leading() or self._stop.is_set():
            raise NotLeading("this replica no longer holds the defragmentation lease", "the new leader resumes the run")

    def _follow(self, read: SnapshotRead, events: list[dict[str, Any]], now: datetime) -> None:
        """Each rescue followed: scheduled (rescued), refused again after its moves (room lost), or given up."""
        pods = {str((pod.get("metadata") or {}).get("uid", "")): pod for pod in read.pods}
        for uid, rescue in list(self._rescues.items()):
            pod = pods.get(uid)
            if pod is None:
                del self._rescues[uid]
                continue
            node = (pod.get("spec") or {}).get("nodeName")
            if node:
                waited = (now - rescue.pending_since).total_seconds()
                self.metrics.rescued.inc()
                self.metrics.rescue_seconds.observe(max(waited, 0.0))
                self._event(rescue.pod, "DefragRescued", f"rescued by {rescue.moves} move(s): scheduled on {node}")
                del self._rescues[uid]
            elif _refused_since(events, uid, rescue.done_at + timedelta(seconds=ROOM_SETTLE_SECONDS)):
                self.metrics.room_lost.inc()
                self._event(
                    rescue.pod,
                    "DefragRoomLost",
                    f"the room {rescue.moves} move(s) made was taken before the scheduler retried the pod; "
                    "it is planned for again once it qualifies",
                    warning=True,
                )
                del self._rescues[uid]
            elif (now - rescue.done_at).total_seconds() > FOLLOW_SECONDS:
                del self._rescues[uid]

    def _keep_room(
        self, policy: DefragPolicy, read: SnapshotRead, history: tuple[MoveRecord, ...], now: datetime
    ) -> None:
        """Every `keepRoom.interval`: plan toward the room goal when it is unmet; Events go on the policy."""
        if not policy.keep_room.enabled or time.monotonic() < self._next_room:
            return
        self._next_room = time.monotonic() + policy.keep_room.interval.total_seconds()
        goal = room_goal(room_of(read.snapshot), policy)
        if goal is None:
            return
        decision = decide_run(policy, read.snapshot, RoomTrigger(goal), history, now, _run_id(now))
        source = self._policy_object()
        if source is not None:
            self._decided(decision, source, "keep_room", "keep-room", None, read.config)

    def _policy_object(self) -> dict[str, Any] | None:
        """The policy's ConfigMap, for an Event on it."""
        try:
            return read_policy(self.kube, self.options.policy_namespace, self.options.policy_name).obj
        except KubeError:
            return None

    def _read_policy(self) -> None:
        """Reads the policy when its ConfigMap changed; a bad or missing one turns the controller off until fixed."""
        where = f"{self.options.policy_namespace}/{self.options.policy_name}"
        try:
            source: PolicySource | None = read_policy(
                self.kube, self.options.policy_namespace, self.options.policy_name
            )
        except KubeNotFound:
            source = None
        except KubeError as error:
            log.warning("defrag policy %s not read, the last one read stands: %s", where, error)
            return
        version = source.version if source is not None else ""
        if version == self._policy_version:
            return
        self._policy_version = version
        if source is None:
            self._invalid(
                None, f"ConfigMap {where} not found; create it with the DefragPolicy under {DEFRAG_POLICY_KEY}"
            )
            return
        if source.text is None:
            self._invalid(
                source.obj, f"{DEFRAG_POLICY_KEY}: missing from ConfigMap {where}; put the DefragPolicy there"
            )
            return
        try:
            policy = parse_policy(source.text, self.options.lease_namespace)
        except PolicyError as error:
            self._invalid(source.obj, str(error))
            return
        self.policy = policy
        self.metrics.policy_valid.set(1)
        log.info("defrag policy %s read: mode %s", where, policy.mode.value)
        self._event(source.obj, "DefragPolicyRead", f"policy read: mode {policy.mode.value}")

    def _invalid(self, obj: dict[str, Any] | None, problem: str) -> None:
        """The controller off until the policy is fixed: one log line, the metric, a Warning Event on the ConfigMap."""
        self.policy = None
        self.metrics.policy_valid.set(0)
        where = f"{self.options.policy_namespace}/{self.options.policy_name}"
        log.error("defrag policy %s is invalid, nothing is moved until it is fixed: %s", where, problem)
        if obj is not None:
            self._event(obj, "DefragPolicyInvalid", f"nothing is moved until this is fixed: {problem}", warning=True)

    def _resume_runs(self) -> None:
        """As the new leader: undo the open moves of earlier runs whose pod was never evicted; leave the others."""
        for obj in run_placements(self.kube):
            metadata = obj.get("metadata") or {}
            status = obj.get("status") or {}
            if status.get("phase", Phase.Pending) != Phase.Pending or status.get("claim"):
                continue
            annotations = metadata.get("annotations") or {}
            key, uid = annotations.get(DEFRAG_POD_ANNOTATION, ""), annotations.get(DEFRAG_POD_UID_ANNOTATION, "")
            if not key or "/" not in key:
                continue
            namespace, name = key.split("/", 1)
            try:
                pod = cluster.get_pod(self.kube, namespace, name)
            except KubeNotFound:
                pod = {}
            meta = pod.get("metadata") or {}
            if meta.get("uid") == uid and not meta.get("deletionTimestamp"):
                try:
                    placements.delete_placement(self.kube, str(metadata.get("namespace")), str(metadata.get("name")))
                except KubeNotFound:
                    continue
                log.info("defrag: placement %s/%s undone, %s was never evicted", namespace, metadata.get("name"), key)
            else:
                log.info("defrag: placement %s/%s left for %s's replacement", namespace, metadata.get("name"), key)

    def _leading(self, leading: bool) -> None:
        """The leader metric; a replica that starts leading resumes the runs it finds first."""
        self.metrics.leader.set(1 if leading else 0)
        if leading:
            self._resume = True

    def _say(self, about: Mapping[str, Any], key: str, reason: str, message: str) -> bool:
        """An Event unless the same was said last time on this object; True when it was new."""
        if self._said.get(key) == message:
            return False
        self._said[key] = message
        self._event(about, reason, message)
        return True

    def _event(self, about: Mapping[str, Any], reason: str, message: str, *, warning: bool = False) -> None:
        """An Event on a pod or on the policy's ConfigMap, from this controller."""
        record_event(
            self.kube, about, reason, message, warning=warning, api_version="v1", kind="Pod", component=COMPONENT
        )


def _pod_ref(move: Move) -> dict[str, Any]:
    """The moved pod as an Event's object (by UID)."""
    namespace, name = move.pod.split("/", 1)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"namespace": namespace, "name": name, "uid": move.uid}}


def _run_id(now: datetime) -> str:
    """A run's id (a label value): when it started, and a random suffix."""
    return f"{now:%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"


def _refused_since(events: list[dict[str, Any]], uid: str, since: datetime) -> bool:
    """Whether the scheduler refused the pod (by UID) again after `since`."""
    for event in events:
        involved = event.get("involvedObject") or {}
        if involved.get("uid") != uid:
            continue
        for value in (
            event.get("lastTimestamp"),
            (event.get("series") or {}).get("lastObservedTime"),
            event.get("eventTime"),
        ):
            if isinstance(value, str) and value:
                try:
                    if datetime.fromisoformat(value) > since:
                        return True
                except ValueError:
                    continue
    return False
