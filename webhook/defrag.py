"""The defragmentation controller: moves pods on its own, within the operator's DefragPolicy, from the leader only.

Its own threads beside admission (which runs on every replica whatever the controller does): one stands for the
`hami-place-defrag-leader` Lease (`kube/leader.py`), four watch the policy's ConfigMap, the scheduler's
FailedScheduling Events, the PodDisruptionBudgets and the other schedulers' bound pods (what they ask of their nodes,
which the planner's node rooms count), and one worker takes keys from a work queue
(`webhook/workqueue.py`, keys in `core/defrag/keys.py`), one key at a time:

- the policy, when its ConfigMap changes: parsed again (a bad one turns the controller off until fixed); a new
  policy adds every key again;
- a Pending pod of HAMi's scheduler, when its FailedScheduling Event arrives or it changes while unscheduled: a
  rescue followed is looked at (the pod scheduled: rescued; refused again after the moves: room lost); a pod whose
  last refusal carries HAMi fit reasons is, once Pending for `rescue.pendingFor`, planned for
  (`core.defrag.runs.decide_run`); mode `dry-run` says on the pod what it would move, mode `on` carries the moves out
  one after another through `kube.moves.make_move` (pin the replacement, acknowledgement, eviction by UID) and waits
  for each to settle;
- keep-room, every `keepRoom.interval`: when `room_goal` says the goal is unmet, the same toward the goal;
- resume, when the replica starts leading: the open placements of earlier runs are looked at first.

Only the leader looks at pods and keep-room; a follower drops them, and a replica that starts leading adds every key
again. Plans read the server's watch caches (`webhook/cache.py`, with the planner's fields kept, and the other
schedulers' pods watched here), never a list of the cluster's pods or nodes, and not while the caches are stale.
Each look ends in done or in when to look again (`core.defrag.keys.look_again`); a look that fails is retried backed
off per key. A pod whose look found no plan, a plan over budget, or only named moves (dry-run), is not planned for
again before that time, however often it or its Events change meanwhile, and (but for a budget that time eases)
waits twice as long after each such look (to 300 s): a backlog of Pending pods costs plans at that pace, not one per
pod at every change and interval. A pod that leaves its node (deleted or ended), or a node that comes,
brings one such pod's next look forward to one interval after its last (the highest priority, then the longest
since its last look; at most one an interval, and such looks at most a tenth of a core), as kube-scheduler retries
the pods it could not place on such a change.

The room a rescue frees is kept for the rescued pod for `rescue.reserveFor` (`core.reservation`): once the moves
are done and the pod is still unscheduled, its `nvidia.com/use-gpuuuid` is narrowed to the plan's target cards and
our `room-reserved` annotation names them and the deadline (a patch that also makes the scheduler retry it at once);
admission on every replica keeps pods admitted meanwhile off those cards (`nouse-gpuuuid`), and plans treat them as
cordoned. Scheduled: our annotation goes. Refused again after the moves settled, or the deadline passed: the pod's
own card choice is given back, the room counted lost (`hami_place_defrag_room_lost_total`), said on the pod, and the
pod planned for again once it qualifies. Pods admitted before the reservation may still take the room.

A new leader first looks at the open placements of earlier runs: one whose pod was never evicted is deleted (the
move is undone), one whose pod is gone is left for its replacement to claim. A room an earlier leader kept is left
until its deadline, and its pod sent back to the scheduler once it fits the room as the cards are.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

from kubectl_hami_place.core.attach_limits import parsed_attach_limits
from kubectl_hami_place.core.defrag.audience import failure_for_tenant, for_tenant, node_keys
from kubectl_hami_place.core.defrag.budget import (
    MoveRecord,
    allowance,
    history_shortfall,
    names_own_pod,
)
from kubectl_hami_place.core.defrag.decisions import (
    Decision,
    decided,
    decisions_value,
    rescue_ended,
    with_decision,
)
from kubectl_hami_place.core.defrag.keys import (
    FOLLOW,
    KEEP_ROOM,
    POLICY,
    RESUME,
    RETRY,
    SEND_BACK_AGAIN_SECONDS,
    BackedOff,
    Followed,
    Key,
    Look,
    OpenMove,
    PodKey,
    SettleClock,
    batch_order,
    budget_eases,
    event_key,
    follow,
    frees_room,
    look_again,
    look_sooner,
    open_move,
    pending_wait,
    pod_key,
    rescue_unneeded,
    room_settled,
    send_back_again_after,
    sooner_gap,
    termination_left,
)
from kubectl_hami_place.core.defrag.policy import (
    CLASS_INSTEAD,
    DefragPolicy,
    Mode,
    PolicyError,
    class_not_found,
    parse_policy,
    with_threshold,
)
from kubectl_hami_place.core.defrag.runs import (
    RescueTrigger,
    RoomTrigger,
    RunDecision,
    decide_run,
    fits_as_is,
    held_now,
    in_scope,
    keep_off,
    refuse,
    scheduled_where,
    still_allowed,
)
from kubectl_hami_place.core.defrag.seal import move_sealed, refusal, refused_by
from kubectl_hami_place.core.defrag.triggers import pending_pod, pod_priority, rescue_candidates, room_goal, room_of
from kubectl_hami_place.core.defrag.watches import forbidden_watch_words, forbidden_watches_value, goes_without
from kubectl_hami_place.core.errors import ModelError
from kubectl_hami_place.core.hami_config import HamiConfig
from kubectl_hami_place.core.k8s_names import is_namespaced_name
from kubectl_hami_place.core.lifecycle import ROOM_SETTLE_SECONDS
from kubectl_hami_place.core.names import (
    DEFRAG_DECISIONS_ANNOTATION,
    DEFRAG_FORBIDDEN_WATCHES_ANNOTATION,
    DEFRAG_LEASE,
    DEFRAG_POD_ANNOTATION,
    DEFRAG_POD_UID_ANNOTATION,
    DEFRAG_POLICY_KEY,
    NOUSE_GPUUUID_ANNOTATION,
    PLACEMENT_ANNOTATION,
    ROOM_RESERVED_ANNOTATION,
    USE_GPUUUID_ANNOTATION,
    Phase,
)
from kubectl_hami_place.core.placement import placement_from_object
from kubectl_hami_place.core.planner import Move, Snapshot
from kubectl_hami_place.core.planner.apply import (
    MOVE_PREFIX,
    MoveCheck,
    Step,
    move_step,
    settling_nodes,
    settling_pods,
    stranded_replacement,
)
from kubectl_hami_place.core.planner.objects import pod_for_plan
from kubectl_hami_place.core.pod_affinity import namespace_labels_of
from kubectl_hami_place.core.refs import where
from kubectl_hami_place.core.reservation import LeftRoom, left_room, release, reserve, settled
from kubectl_hami_place.core.volumes import Volumes, parsed_volumes
from kubectl_hami_place.kube import cluster_reads, evictions, moves, placements
from kubectl_hami_place.kube.claims import StaleWrite, write_status
from kubectl_hami_place.kube.client import Kube
from kubectl_hami_place.kube.defrag import (
    PolicySource,
    change_pod_annotations,
    move_annotations,
    move_labels,
    policy_source,
    project_failed_scheduling,
    read_priority_value,
    run_history,
    run_placements,
    send_back,
)
from kubectl_hami_place.kube.errors import BlockedByDisruptionBudget, KubeError, KubeForbidden, KubeNotFound
from kubectl_hami_place.kube.events import EventRecorder
from kubectl_hami_place.kube.leader import Elector, LeaseTimes
from kubectl_hami_place.kube.move_values import ACK_TIMEOUT_SECONDS
from kubectl_hami_place.kube.snapshot import SnapshotRead, selected_pods, snapshot_of
from kubectl_hami_place.kube.watch import (
    WATCH_TIMEOUT_SECONDS,
    Reflector,
    config_map_reflector,
    csi_driver_reflector,
    csi_node_reflector,
    disruption_budget_reflector,
    failed_scheduling_reflector,
    namespace_reflector,
    object_key,
    other_pods_reflector,
    storage_capacity_reflector,
    storage_class_reflector,
    volume_attachment_reflector,
    volume_claim_reflector,
    volume_reflector,
)
from webhook.cache import (
    ATTACH_LIMITS,
    ATTACHMENT,
    CAPACITY_DRIVER,
    CLAIM,
    COUNTED,
    STORAGE_CAPACITY,
    STORAGE_CLASS,
    VOLUME,
    ClusterCache,
    project_counted_pod,
    project_csi_driver,
    project_csi_node,
    project_namespace,
    project_storage_capacity,
    project_storage_class,
    project_volume,
    project_volume_attachment,
    project_volume_claim,
)
from webhook.collector import collector_paused
from webhook.metrics import DefragMetrics
from webhook.settings import DEFAULTS
from webhook.workqueue import WorkQueue

log = logging.getLogger(__name__)

COMPONENT = "hami-place-defrag"
SETTLE_POLL_SECONDS = 1.0
# The caches are stale when a watch brought no list, event or bookmark for longer than a watch lasts: no plan then.
STALE_SECONDS = WATCH_TIMEOUT_SECONDS + 60
# A key whose look failed (an API call refused, a snapshot unreadable) is looked at again after this, doubled at
# each failure up to the cap.
BACKOFF_FIRST_SECONDS = 1.0
BACKOFF_MAX_SECONDS = 300.0
# How long the worker waits for a key before it checks whether the server stops.
WAKE_SECONDS = 1.0
# How soon a policy whose PriorityClass (priorityThreshold.name) could not be read is read again: a class created
# after the policy is found then.
PRIORITY_CLASS_RETRY_SECONDS = 10.0
# How often the value of a PriorityClass the policy names is read again once read: a class's value cannot change in
# place, but it may be deleted, or deleted and created again with another.
PRIORITY_CLASS_REFRESH_SECONDS = 60.0


class NotLeading(KubeError):
    """This replica lost the defragmentation lease: it stops acting at once."""


class NotOn(KubeError):
    """The policy changed to a mode other than `on` (a `defrag pause`), or to namespaces or budgets that no longer
    allow the rest of the run, while a run made its moves: it stops before its next placement or eviction."""


@dataclass(frozen=True)
class DefragOptions:
    """Where the policy is, the server's own namespace (its pods never move), where the leader Lease is and who
    stands for it, and how soon a pod without a plan is looked at again."""

    policy_namespace: str
    policy_name: str
    server_namespace: str
    identity: str
    scheduler_name: str = DEFAULTS.scheduler_name
    interval: float = DEFAULTS.defrag_interval
    ack_timeout: float = ACK_TIMEOUT_SECONDS
    move_timeout: float = DEFAULTS.defrag_move_timeout
    finished_ttl: int = DEFAULTS.finished_ttl
    excluded_namespaces: tuple[str, ...] = ()
    """The server's --exclude-namespace: the webhook never sees their pods, so a move there could not be pinned."""
    lease: LeaseTimes = field(default_factory=lambda: LeaseTimes.lasting(DEFAULTS.defrag_lease_duration))
    lease_namespace: str = ""
    """Where the leader Lease lives ("": the server's namespace); the chart gives the Leases a namespace of theirs."""

    @property
    def policy_ref(self) -> str:
        """The policy's ConfigMap as `namespace/name`, as the log and its Events name it."""
        return f"{self.policy_namespace}/{self.policy_name}"

    @property
    def leader_lease_namespace(self) -> str:
        """The namespace of the leader Lease."""
        return self.lease_namespace or self.server_namespace

    @property
    def move_limit(self) -> timedelta:
        """How long after its placement's creation a move is given up: its acknowledgement's time, then its own."""
        return timedelta(seconds=self.ack_timeout + self.move_timeout)


@dataclass
class Rescue:
    """A rescue whose moves are done, followed until its pod is scheduled or refused again."""

    pod: dict[str, Any]
    uid: str
    moved: tuple[Move, ...]
    pending_since: datetime
    done_at: datetime
    kept_until: datetime | None = None
    """Until when the freed cards are kept for the pod (None: not kept)."""
    run_id: str = ""
    room_made_at: float | None = None
    """When this replica first found every moved pod gone, on its monotonic clock."""
    sent_back: bool = False
    """Whether the pod was annotated with the run (RESCUED_BY_ANNOTATION), which sends it back to the scheduler."""


class DefragController:
    """The controller's state between looks: the policy read, what it said on which object, rescues followed."""

    def __init__(
        self,
        kube: Kube,
        options: DefragOptions,
        metrics: DefragMetrics,
        cache: ClusterCache,
        hami_config: Callable[[], HamiConfig],
    ) -> None:
        self.kube = kube
        self.options = options
        self.metrics = metrics
        self.events = EventRecorder(kube, COMPONENT)
        self.cache = cache
        self.hami_config = hami_config
        self.elector = Elector(
            kube,
            options.leader_lease_namespace,
            DEFRAG_LEASE,
            options.identity,
            times=options.lease,
            on_change=self._leading,
            annotations=self._lease_annotations,
        )
        self.policy_map = config_map_reflector(kube.api, options.policy_namespace, options.policy_name)
        self.failures = failed_scheduling_reflector(kube.api, project=project_failed_scheduling)
        self.disruption_budgets = disruption_budget_reflector(kube.api)
        # Every other scheduler's bound pod, as what it asks of its node: the cache holds HAMi's pods only, and a
        # plan that did not count these would move pods onto nodes kube-scheduler refuses for CPU or memory.
        self.other_pods = other_pods_reflector(kube.api, options.scheduler_name, project=project_counted_pod)
        # Claims and their volumes: where a pod that claims one may go, its own replacement too (a plan without them
        # keeps such a pod on its node).
        self.volume_claims = volume_claim_reflector(kube.api, project=project_volume_claim)
        self.volumes = volume_reflector(kube.api, project=project_volume)
        # StorageClasses, CSIDrivers and CSIStorageCapacities: where a claim not bound yet may bind or be provisioned
        # (a plan without them leaves a Pending pod's room unread while its claim waits for it).
        self.storage_classes = storage_class_reflector(kube.api, project=project_storage_class)
        self.csi_drivers = csi_driver_reflector(kube.api, project=project_csi_driver)
        self.storage_capacities = storage_capacity_reflector(kube.api, project=project_storage_capacity)
        # CSINodes and VolumeAttachments: how many more volumes of each CSI driver a node may attach (a plan without
        # them keeps a pod that claims a volume on its node).
        self.csi_nodes = csi_node_reflector(kube.api, project=project_csi_node)
        self.volume_attachments = volume_attachment_reflector(kube.api, project=project_volume_attachment)
        # Namespaces' labels: the namespaces a pod affinity term's namespaceSelector picks (a plan without them keeps
        # a pod whose term has one that names labels on its node, and a Pending pod's room unread).
        self.namespaces = namespace_reflector(kube.api, project=project_namespace)
        self._forbidden: set[str] = set()
        self._forbidden_evented: set[str] = set()
        self.queue: WorkQueue[Key] = WorkQueue(base_delay=BACKOFF_FIRST_SECONDS, max_delay=BACKOFF_MAX_SECONDS)
        self.policy: DefragPolicy | None = None
        self._policy_version: str | None = None
        self._class_problem = ""
        self._class_retry_at = 0.0
        self._class_refresh_at = 0.0
        self.priority_value: Callable[[str], object] = lambda name: read_priority_value(kube, name)
        self._said: dict[str, str] = {}
        # Newest first; replaced whole, never changed in place: the elector's thread reads it at each renewal.
        self._decisions: tuple[Decision, ...] = ()
        self._rescues: dict[PodKey, Rescue] = {}
        self._retry_at: dict[str, float] = {}
        # By UID: the pods whose looks in a row ended without a plan, over budget, or in a dry run (`look_again`
        # doubles the wait while no time eases the budget; `_room_freed` brings it forward).
        self._backed_off: dict[str, BackedOff] = {}
        # Before this (monotonic) no room freed brings another look forward; the CPU seconds of the last plan (with
        # the snapshot it read), which set how long that is.
        self._sooner_after = 0.0
        self._plan_cost = 0.0
        self._sent_back: dict[str, tuple[int, float]] = {}
        """Pending pods sent back for room found as the cards are, by UID: how often, and when next."""
        self._gone_seen: dict[str, float] = {}
        """An earlier leader's unscheduled replacements, by UID: when (monotonic) this one first saw the pod their
        move evicted gone."""
        # Each pod's FailedScheduling Events by the Event's key, kept from the Events' watch.
        self._events: dict[PodKey, dict[tuple[str, str], dict[str, Any]]] = {}
        self._events_lock = threading.Lock()
        self._resume = True
        self._next_room = 0.0
        # The cards HAMi refused a given-up move's replacement on (UUID: until), left out of this leader's plans.
        self._refused: dict[str, datetime] = {}
        # What the looks of one batch share, read once: the snapshot and the runs' history (None: not read yet).
        self._read: SnapshotRead | None = None
        self._history: tuple[MoveRecord, ...] | None = None
        self._stop = threading.Event()
        self.policy_map.add_listener(lambda _kind, _obj: self.queue.add(POLICY))
        self.failures.add_listener(self._event_changed)
        cache.pods.add_listener(self._pod_changed)
        cache.nodes.add_listener(lambda kind, _node: self._room_freed() if kind == "ADDED" else None)
        # Another scheduler's pod that leaves (deleted, or ended: out of the watch's selector) frees CPU and memory.
        self.other_pods.add_listener(lambda kind, _pod: self._room_freed() if kind == "DELETED" else None)
        metrics.policy_valid.set(0)
        metrics.leader.set(0)
        metrics.refused_cards.set_function(self._refused_now)
        for reflector in (*cache.reflectors(), *self.reflectors()):
            metrics.watch_forbidden.labels(reflector.kind).set_function(partial(_forbidden, reflector))

    def reflectors(self) -> tuple[Reflector, ...]:
        """The watches the controller keeps besides the server's cache (no plan before each has listed; admission
        waits on none of them)."""
        return (
            self.policy_map,
            self.failures,
            self.disruption_budgets,
            self.other_pods,
            self.volume_claims,
            self.volumes,
            self.storage_classes,
            self.csi_drivers,
            self.storage_capacities,
            self.csi_nodes,
            self.volume_attachments,
            self.namespaces,
        )

    def threads(self, stop: threading.Event) -> list[threading.Thread]:
        """The Lease's thread, the watches' threads and the worker's thread, not started."""
        self._stop = stop
        watches = [
            threading.Thread(target=reflector.run, args=(stop,), name=f"defrag-watch-{reflector.kind}", daemon=True)
            for reflector in self.reflectors()
        ]
        return [
            threading.Thread(target=self.elector.run, args=(stop,), name="defrag-lease", daemon=True),
            *watches,
            threading.Thread(target=self.run, args=(stop,), name="defrag", daemon=True),
        ]

    def stop(self) -> None:
        """Break the open watches, so that their threads notice the stop at once."""
        for reflector in self.reflectors():
            reflector.stop()

    def run(self, stop: threading.Event) -> None:
        """Take the ready keys in batches until `stop`; a failed look is logged and its key backed off."""
        self._stop = stop
        self.queue.add(POLICY)
        while not stop.is_set():
            first = self.queue.get(timeout=WAKE_SECONDS)
            if first is not None:
                self.work([first, *self.queue.drain()])
        self.queue.shut_down()

    def work(self, keys: Iterable[Key]) -> None:
        """Look at each key of a batch, in `batch_order`, each released after its look (and added again when it
        says when to look again); the snapshot and history are read once for the batch."""
        self._read, self._history = None, None
        for key in sorted(keys, key=lambda k: batch_order(k, self._pod(k))):
            try:
                after = self.look(key)
            except Exception as error:
                # An API call or an object that failed is one line; anything else (a bug) is logged whole, and
                # neither ends the worker nor leaves the key held.
                if isinstance(error, (KubeError, ModelError)):
                    log.warning("defrag %s: %s", key, error)
                else:
                    log.exception("defrag %s: the look failed", key)
                self.queue.done(key)
                self.queue.add_rate_limited(key)
                continue
            self.queue.forget(key)
            self.queue.done(key)
            if after is not None:
                self.queue.add_after(key, max(after.total_seconds(), 0.0))

    def look(self, key: Key) -> timedelta | None:
        """One key's look (see the module docstring): when to look at it again, or None (only a change adds it)."""
        self.metrics.looks.labels(_kind(key)).inc()
        if key == POLICY:
            return self._read_policy()
        self._read_policy()  # a policy changed while the batch went on (a pause) holds for its next key
        policy = self.policy
        if not self.elector.leading():
            self._resume = True
            return None
        if self._resume:
            # A new term: the rescues an earlier term followed are their pods' room annotations now.
            self._rescues.clear()
        if policy is None or policy.mode is Mode.off:
            # Off (paused, or no policy read): nothing planned, moved or resumed, but a room kept is still given
            # back at its deadline, which undoes the controller's own write.
            if not isinstance(key, PodKey):
                return None
            if not self._fresh():
                return timedelta(seconds=self.options.interval)  # its room's deadline is looked at again
            return self._look_at_pod(key, None)
        if self._resume:
            self._resume_runs()
            self._resume = False
        if key == RESUME:
            return None
        if not self._fresh():
            return timedelta(seconds=self.options.interval)
        if key == KEEP_ROOM:
            return self._keep_room(policy)
        if isinstance(key, PodKey):
            return self._look_at_pod(key, policy)
        return None

    def _look_at_pod(self, key: PodKey, policy: DefragPolicy | None) -> timedelta | None:
        """A Pending pod: its rescue followed, else planned for once it is a candidate; `policy` None (the controller
        off): its rescue followed and its room given back, nothing planned or moved."""
        now = datetime.now(UTC)
        pod = self.cache.pods.get(key.namespace, key.name)
        events = self._events_of(key)
        rescue = self._rescues.get(key)
        if rescue is not None:
            state = follow(pod, rescue.uid, events, rescue.done_at, now)
            kept = rescue.kept_until
            if state is Followed.waiting and kept is not None and now >= kept:
                state = Followed.room_lost
            if state is Followed.waiting:
                wait = FOLLOW - (now - rescue.done_at)
                wait = min(wait, kept - now) if kept is not None else wait
                again = self._send_back(rescue)
                return min(wait, again) if again is not None else wait
            self._followed(key, rescue, state, pod, now)
            if rescue.kept_until is not None and pod is not None:
                # The cache may still hold the pod's narrowed card choice: planned for once it was given back.
                return timedelta(seconds=self.options.interval)
        if pod is None:
            return None
        if policy is not None:
            opened = open_move(pod, self._pinned_by(pod), now, self.options.move_limit, self.cache.room_key)
            if opened is not None:
                return self._open_move(opened, pod, policy)
        if rescue is None and ROOM_RESERVED_ANNOTATION in _annotations(pod):
            # Kept by an earlier leader's rescue (or followed no more): left until its deadline, then given back (as
            # a malformed one is), the pod sent back once it fits; once the pod is scheduled only the annotation goes.
            in_policy = policy is not None and policy.namespaces.allows(key.namespace)
            step, until = left_room(pod, self.cache.room_key, now, in_policy=in_policy)
            if step is LeftRoom.keep and until is not None:
                if policy is None or policy.mode is not Mode.on or not in_policy:
                    return until - now
                return min(until - now, self._room_kept(key, pod, now))
            if step is LeftRoom.leave:
                return None
            self._release(pod, scheduled=step is LeftRoom.settle)
            return None if step is LeftRoom.settle else timedelta(seconds=self.options.interval)
        if policy is None:
            return None
        config = self.hami_config()
        candidates = rescue_candidates([pod], events, now, policy, config)
        if not candidates:
            return pending_wait(pod, events, now, policy, config)
        [candidate] = candidates
        retry = self._retry_at.get(candidate.uid, 0.0) - time.monotonic()
        if retry > 0:
            return timedelta(seconds=retry)
        started = time.thread_time()
        read, history = self._snapshot(), self._runs()
        left = allowance(policy.budgets, history, now, "")
        self.metrics.budget_left.labels("hour").set(left.hour_left)
        self.metrics.budget_left.labels("run").set(policy.budgets.moves_per_run)
        selected = selected_pods(self.kube, candidate.pod, read.namespace_labels)
        pending = pending_pod(
            candidate.pod,
            read.node_marks,
            read.config,
            selected,
            read.snapshot,
            volumes=read.volumes,
            namespace_labels=read.namespace_labels,
        )
        trigger = RescueTrigger(pending.pod, candidate.reason, pending.unread)
        snapshot = self._kept_off(read, now, candidate.key)
        with collector_paused():
            decision = decide_run(policy, snapshot, trigger, history, now, _run_id(now))
        self._plan_cost = time.thread_time() - started
        about = {"apiVersion": "v1", "kind": "Pod", **candidate.pod}
        look = self._decided(decision, about, "rescue", candidate.uid, read.config)
        eases = budget_eases(policy.budgets, history, now) if look is Look.budget else None
        backed_off = self._backed_off.pop(candidate.uid, None)
        repeats = backed_off.repeats if backed_off is not None else 0
        again = look_again(look, now, timedelta(seconds=self.options.interval), eases, repeats)
        if decision.fits_now and policy.mode is Mode.on:
            due = self._send_back_fitting(candidate.pod, decision.run_id)
            return due if again is None else min(again, due)
        if look in (Look.budget, Look.no_plan, Look.dry_run) and again is not None:
            # Not planned for again sooner, however often the pod or its Events change meanwhile.
            looked = time.monotonic()
            self._backed_off[candidate.uid] = BackedOff(key, pod_priority(candidate.pod), repeats + 1, looked)
            self._retry_at[candidate.uid] = looked + again.total_seconds()
        if look is Look.moved:
            done_at = datetime.now(UTC)
            kept = self._reserve(about, decision, policy, done_at)
            rescue = Rescue(
                about, candidate.uid, decision.moves, candidate.pending_since, done_at, kept, decision.run_id
            )
            self._rescues[key] = rescue
            sooner = self._send_back(rescue)
            if sooner is not None and again is not None:
                return min(again, sooner)
        return again

    def _room_kept(self, key: PodKey, pod: dict[str, Any], now: datetime) -> timedelta:
        """A room an earlier leader's rescue kept, which this leader never followed: once the pod fits it as the cards
        are (the pods on it gone), the pod is sent back (`_send_back_fitting`), since before 1.29 kube-scheduler may
        not try it until the room's deadline gives the pod its own choice back. When to look again."""
        read = self._snapshot()
        snapshot = self._kept_off(read, now, f"{key.namespace}/{key.name}")
        with collector_paused():
            fits = fits_as_is(snapshot, pod_for_plan(pod, read.node_marks, read.config, scalars=snapshot.scalars))
        if not fits:
            return timedelta(seconds=SEND_BACK_AGAIN_SECONDS)
        return self._send_back_fitting(pod, _run_id(now))

    def _send_back(self, rescue: Rescue) -> timedelta | None:
        """Annotates the rescued pod with its run once every moved pod has been gone for ROOM_SETTLE_SECONDS (HAMi's
        own watch): the update sends the pod back to kube-scheduler at once (RESCUED_BY_ANNOTATION says why the
        deletions may not). When to look again while that waits; None once it is done, or cannot be."""
        named = _named(rescue.pod)
        if rescue.sent_back or named is None:
            return None
        stored = {}
        for move in rescue.moved:
            found = self._stored(move.pod)
            stored[move.pod] = str(((found or {}).get("metadata") or {}).get("uid") or "")
        rescue.room_made_at, made = room_settled(rescue.moved, stored, rescue.room_made_at, time.monotonic())
        if not made:
            return timedelta(seconds=ROOM_SETTLE_SECONDS)
        namespace, name, uid = named
        try:
            send_back(self.kube, namespace, name, uid, rescue.run_id)
        except KubeError as error:
            log.warning("defrag: %s/%s not sent back to the scheduler: %s", namespace, name, error)
            return timedelta(seconds=self.options.interval)
        rescue.sent_back = True
        return None

    def _send_back_fitting(self, pod: Mapping[str, Any], run_id: str) -> timedelta:
        """A Pending pod the plan found room for as the cards are is annotated with the run (`send_back`), again while
        it stays Pending (`send_back_again_after`): the room was made by a pod that went, or by an earlier leader's
        rescue, and kube-scheduler before 1.29 may not try the pod for 5 minutes after. When to look again."""
        named = _named(pod)
        if named is None:
            return timedelta(seconds=self.options.interval)
        namespace, name, uid = named
        now = time.monotonic()
        sends, due = self._sent_back.get(uid, (0, 0.0))
        if now < due:
            return timedelta(seconds=due - now)
        try:
            sent = send_back(self.kube, namespace, name, uid, run_id)
        except KubeError as error:
            log.warning("defrag: %s/%s not sent back to the scheduler: %s", namespace, name, error)
            sent = None
        if sent is not None:
            log.info(
                "defrag: %s/%s fits as the cards are; sent back to the scheduler (run %s)", namespace, name, run_id
            )
        sends += 1
        self._sent_back[uid] = (sends, now + send_back_again_after(sends))
        return timedelta(seconds=send_back_again_after(sends))

    def _followed(
        self, key: PodKey, rescue: Rescue, state: Followed, pod: Mapping[str, Any] | None, now: datetime
    ) -> None:
        """A followed rescue that ended: rescued (timed from Pending), room lost, or given up; the room kept for it
        is given back (a scheduled pod only loses our annotation)."""
        del self._rescues[key]
        if state is Followed.rescued and pod is not None:
            waited = (now - rescue.pending_since).total_seconds()
            self.metrics.rescued.inc()
            self.metrics.rescue_seconds.observe(max(waited, 0.0))
            node = self.cache.nodes.get("", str((pod.get("spec") or {}).get("nodeName") or "")) or {}
            rescued = f"rescued by {len(rescue.moved)} move(s): scheduled on {scheduled_where(pod, node)}"
            self._event(rescue.pod, "DefragRescued", rescued)
            self._remember_end(rescue, rescued, now)
        elif state is Followed.room_lost:
            self.metrics.room_lost.inc()
            kept = rescue.kept_until
            taken = "was taken before the scheduler retried the pod"
            if kept is not None and now >= kept:
                taken = f"was kept for the pod until {kept:%H:%M:%S}Z and the pod was not scheduled meanwhile"
            lost = f"the room {len(rescue.moved)} move(s) made {taken}; it is planned for again once it qualifies"
            self._event(rescue.pod, "DefragRoomLost", lost, warning=True)
            self._remember_end(rescue, lost, now)
        if rescue.kept_until is None:
            return
        if state is not Followed.rescued:
            self._release(rescue.pod)
            return
        try:
            self._release(rescue.pod, scheduled=True)
        except KubeError as error:
            # Left on a bound pod, the annotation keeps nothing: admission reads only Pending pods' reservations.
            log.warning("defrag: the room-kept annotation stays on %s: %s", key, error)

    def _reserve(
        self, about: dict[str, Any], decision: RunDecision, policy: DefragPolicy, done_at: datetime
    ) -> datetime | None:
        """Keeps the cards the rescue freed for its pod until `rescue.reserveFor` from now (`core.reservation`);
        the deadline, or None when the policy keeps no room, the pod was scheduled meanwhile (the scheduler retries
        it once the evicted pods are gone) or its own card choice refuses it."""
        target = decision.plan.target if decision.plan is not None else None
        if policy.rescue.reserve_for <= timedelta(0) or target is None:
            return None
        node, cards = target
        until = (done_at + policy.rescue.reserve_for).replace(microsecond=0)
        named = _named(about)
        if named is None:
            return None
        namespace, name, uid = named
        refused = ""

        def keep(annotations: dict[str, str]) -> dict[str, str]:
            """The pod's annotations keeping the room, or as they are when it refuses."""
            nonlocal refused
            wanted, refused = reserve(
                annotations, f"{namespace}/{name}", cards, until, uid=uid, key=self.cache.room_key
            )
            return annotations if refused else wanted

        try:
            stored = change_pod_annotations(self.kube, namespace, name, uid, keep, unscheduled=True)
        except KubeError as error:
            log.warning("defrag: the room freed for %s/%s is not kept: %s", namespace, name, error)
            return None
        if stored is None:
            return None
        if refused:
            self._event(about, "DefragRoomNotKept", f"the room freed on {node} is not kept: {refused}")
            return None
        self._event(
            about,
            "DefragRoomKept",
            f"cards {where(node, cards, decision.card_names)} are kept for the pod until {until:%H:%M:%S}Z "
            f"({USE_GPUUUID_ANNOTATION} names them; pods admitted meanwhile get them in {NOUSE_GPUUUID_ANNOTATION})",
        )
        return until

    def _release(self, pod: Mapping[str, Any], *, scheduled: bool = False) -> None:
        """Gives a reserved pod its own card choice back and takes our annotation off (a scheduled pod keeps its
        `use-gpuuuid`, which names the cards it holds); a pod gone or replaced is left alone."""
        named = _named(pod)
        if named is None:
            return
        namespace, name, uid = named
        key = f"{namespace}/{name}"
        change_pod_annotations(
            self.kube,
            namespace,
            name,
            uid,
            settled if scheduled else (lambda annotations: release(annotations, key, uid)),
        )

    def _decided(
        self, decision: RunDecision, about: dict[str, Any], trigger: str, key: str, config: HamiConfig
    ) -> Look:
        """Says the decision on `about` and, when it acts, carries it out."""
        if not decision.moves:
            result = next((r for r in ("budget", "blocked") if decision.reason.startswith(r)), "no_plan")
            reason = "DefragBlocked" if result == "blocked" else "DefragNoPlan"
            why = decision.message or decision.reason
            if self._say(about, key, reason, why):
                self.metrics.runs.labels(trigger, result).inc()
                self._remember(decision, 0, why)
            return Look.budget if result == "budget" else Look.no_plan
        if decision.dry_run:
            if self._say(about, key, "DefragDryRun", decision.message):
                self.metrics.runs.labels(trigger, "dry_run").inc()
                self.metrics.moves.labels("dry_run").inc(len(decision.moves))
                self._remember(decision, len(decision.moves), decision.moves_words)
            return Look.dry_run
        self._event(about, "DefragRun", f"run {decision.run_id}: {decision.message}")
        done, failure, stopped, failed = self._carry_out(decision, config, about if trigger == "rescue" else None)
        # What the batch read no longer holds: the next look reads the caches and the history again.
        self._read, self._history = None, None
        self._said.pop(key, None)
        if failure:
            self.metrics.runs.labels(trigger, stopped).inc()
            self._retry_at[key] = time.monotonic() + RETRY.total_seconds()
            head = f"run {decision.run_id} stopped after {done} of {len(decision.moves)} move(s): "
            self._remember(decision, done, head + failure)
            if stopped == "unneeded":
                self._event(about, "DefragNotNeeded", head + failure)
                return Look.failed
            self._event(
                about,
                "DefragBlocked" if stopped == "blocked" else "DefragStopped",
                head + failure,
                warning=True,
                said=head + failure_for_tenant(failure, failed, _namespace_of(about), blocked=stopped == "blocked"),
            )
            return Look.failed
        self.metrics.runs.labels(trigger, "moved").inc()
        self._remember(decision, done, f"{decision.moves_words}; {done} of {len(decision.moves)} move(s) made")
        if trigger == "keep_room":
            self._event(about, "DefragRoomMade", f"run {decision.run_id} made {done} move(s) toward {decision.trigger}")
        return Look.moved

    def _carry_out(
        self, decision: RunDecision, config: HamiConfig, rescued: Mapping[str, Any] | None = None
    ) -> tuple[int, str, str, str]:
        """The decision's moves one after another, each waited for until it settled; (moves made, why it stopped, the
        run's result when it stopped: `blocked` when a PodDisruptionBudget refused an eviction the plan counted on,
        `unneeded` when the `rescued` pod no longer waits, else `failed`; the pod of the move that failed, "" when
        none did)."""
        done = 0
        for move in decision.moves:
            try:
                policy = self._guard()
                self._still_allowed(policy, decision, done)
                unneeded = self._unneeded(rescued)
                if unneeded:
                    return done, unneeded, "unneeded", ""
                stale = self._stale(move)
                if stale:
                    self.metrics.moves.labels("failed").inc()
                    return done, stale, "failed", move.pod
                self._still_held(policy, decision, move)
                moves.make_move(
                    self.kube,
                    move,
                    config=config,
                    labels=move_labels(decision.run_id),
                    annotations=move_annotations(move, decision.card_names),
                    key=self.cache.room_key,
                    ack_timeout=self.options.ack_timeout,
                    guard=self._guard,
                )
            except BlockedByDisruptionBudget as error:
                self.metrics.moves.labels("blocked").inc()
                return done, error.cause, "blocked", move.pod
            except NotOn as error:
                return done, str(error), "failed", ""  # no move failed: the operator stopped the run
            except (KubeError, ModelError) as error:
                self.metrics.moves.labels("failed").inc()
                return done, f"{move.pod}: {error}", "failed", move.pod
            self._event(
                _pod_ref(move),
                "DefragMoved",
                f"evicted by run {decision.run_id} to {decision.trigger}; its replacement is pinned to "
                f"{where(move.to_node, move.to_cards, decision.card_names)} by placement {moves.placement_for(move)}",
            )
            failure = self._settle(move)
            if failure:
                self.metrics.moves.labels("failed").inc()
                return done, failure, "failed", move.pod
            self.metrics.moves.labels("done").inc()
            done += 1
        return done, "", "", ""

    def _stored(self, pod: str) -> dict[str, Any] | None:
        """The pod `ns/name` as the cache holds it now."""
        namespace, _, name = pod.partition("/")
        return self.cache.pods.get(namespace, name)

    def _unneeded(self, rescued: Mapping[str, Any] | None) -> str:
        """Why the pod a rescue run is for no longer needs its next move, as the cache holds it now ("" when it
        still does, or for a run of no pod)."""
        named = _named(rescued) if rescued is not None else None
        if named is None:
            return ""
        namespace, name, uid = named
        why = rescue_unneeded(self.cache.pods.get(namespace, name), uid)
        return f"{why}; no more moves are made for it" if why else ""

    def _step(self, move: Move) -> MoveCheck:
        """Where the move stands on the caches as they are now: once its pod was evicted, on its own pods and the
        nodes they name (`settling_pods`: a settling move is polled every second, and the whole snapshot costs
        seconds at a thousand nodes), else on the whole snapshot read anew."""
        namespace = move.pod.split("/", 1)[0]
        named = {f"{ns}/{name}" for ns, name in map(object_key, self.cache.placements.items()) if ns == namespace}
        own = settling_pods(move, self.cache.pods.items())
        if own is None:
            return move_step(move, self._snapshot(again=True).snapshot, named)
        nodes = self.cache.nodes_by_name()
        named_nodes = [nodes[name] for name in sorted(settling_nodes(move, own)) if name in nodes]
        return move_step(move, snapshot_of(named_nodes, own, [], self.hami_config()).snapshot, named)

    def _stale(self, move: Move) -> str:
        """Why the move no longer holds on the caches as they are now, "" when it is ready: a pod that landed on its
        target node since the plan (CPU, memory or cards) stops the run before its pod is evicted, not after."""
        check = self._step(move)
        return "" if check.step is Step.ready else f"{move.pod}: {check.detail}"

    def _settle(self, move: Move) -> str:
        """Waits until the move's replacement holds its target cards, as the caches show it; why not, or nothing."""
        clock = SettleClock(time.monotonic(), self.options.move_timeout)
        while True:
            check = self._step(move)
            if check.step is Step.done:
                return ""
            # The timeout counts from the end of the evicted pod's grace period (a StatefulSet makes its replacement
            # only once the pod is gone, and HAMi counts the pod's cards until then), within a bound.
            clock.saw(time.monotonic(), termination_left(self._stored(move.pod), move.uid, datetime.now(UTC)))
            if check.step is Step.changed:
                return f"{move.pod}: {check.detail}"
            # Checked before the deadline's eviction: a replica that lost the lease evicts nothing more.
            if not self.elector.leading():
                return "this replica stopped leading; the next leader resumes the run"
            if time.monotonic() > clock.deadline:
                given_up = f"{move.pod}: not settled within {self.options.move_timeout:g} s: {check.detail}"
                self._read_policy()
                if self.policy is None or self.policy.mode is not Mode.on:
                    return given_up + "; its replacement is given up by a look once the policy's mode is on again"
                return given_up + self._unpin(move)
            if self._stop.wait(SETTLE_POLL_SECONDS):
                return "this replica stopped leading; the next leader resumes the run"

    def _unpin(self, move: Move) -> str:
        """Evicts the replacement a given-up move left Pending on its target, so that its controller makes one that
        HAMi places on its own, and leaves the target out of plans (`_refuse`); what was done, in words to follow the
        failure ("" when there is no such pod)."""
        namespace = move.pod.split("/", 1)[0]
        stranded = stranded_replacement(self.cache.pods.items(), namespace, moves.placement_for(move), move.uid)
        if stranded is None:
            return ""
        name, uid = stranded
        try:
            evictions.evict_pod(self.kube, namespace, name, uid=uid)
        except KubeNotFound:
            return ""
        except KubeError as error:
            log.warning("defrag: replacement %s/%s of a given-up move stays Pending: %s", namespace, name, error)
            return f"; its replacement {namespace}/{name} stays Pending on the target: {error}"
        log.info("defrag: replacement %s/%s of a given-up move, Pending on the target, evicted", namespace, name)
        return f"; its replacement {namespace}/{name}, Pending on the target, was evicted for an unpinned one" + (
            self._refuse(move.to_cards, namespace, moves.placement_for(move))
        )

    @property
    def _cooldown(self) -> timedelta:
        """The policy's cooldown, or the default's while no policy is read (refused cards are kept out meanwhile)."""
        return (self.policy or DefragPolicy()).budgets.cooldown

    def _refused_now(self) -> int:
        """How many cards the plans leave out now (the metric, read when Prometheus scrapes)."""
        now = datetime.now(UTC)
        return sum(1 for until in list(self._refused.values()) if until > now)

    def _refuse(self, cards: Iterable[str], namespace: str, placement: str) -> str:
        """Leaves the cards a given-up move's replacement was refused on (those a node registers) out of plans for
        the policy's cooldown, and says so, sealed, on the move's placement, where a new leader reads it; what was
        done, in words to follow the give-up's."""
        cooldown = self._cooldown
        now = datetime.now(UTC)
        known = {card.uuid for node in self._snapshot().snapshot.nodes for card in node.cards}
        refused = [card for card in cards if card in known]
        if not refused:
            return ""
        self._refused = refuse(self._refused, refused, now, cooldown)
        try:
            obj = placements.get_placement(self.kube, namespace, placement)
            stored = placement_from_object(obj)
            found = refusal(obj, refused, now + cooldown, self.cache.room_key)
            write_status(self.kube, stored, replace(stored.status, defrag_refused=found))
        except (KubeError, StaleWrite, ModelError) as error:
            log.warning("defrag: the refused cards are not written on placement %s/%s: %s", namespace, placement, error)
        until = (now + cooldown).strftime("%H:%M:%S")
        return f"; its target cards are left out of plans until {until} UTC (budgets.cooldown)"

    def _pinned_by(self, pod: dict[str, Any]) -> dict[str, Any] | None:
        """The move's placement whose name the unscheduled pod carries, read whole (the cache keeps no labels), when
        the cache holds one of that name; None for every other pod."""
        metadata = pod.get("metadata") or {}
        name = _annotations(pod).get(PLACEMENT_ANNOTATION)
        namespace = metadata.get("namespace")
        if pod_key(pod) is None or not is_namespaced_name(namespace, name) or not str(name).startswith(MOVE_PREFIX):
            return None
        if self.cache.placements.get(str(namespace), str(name)) is None:
            return None
        try:
            return placements.get_placement(self.kube, str(namespace), str(name))
        except KubeNotFound:
            return None

    def _open_move(self, opened: OpenMove, pod: dict[str, Any], policy: DefragPolicy) -> timedelta | None:
        """A replacement an earlier leader's move pinned and left unscheduled: looked at again when the move is due
        to be given up, then (mode on, the evicted pod gone) evicted as `_unpin` evicts its own move's."""
        if opened.wait > timedelta(0):
            return opened.wait
        if policy.mode is not Mode.on:
            return None
        metadata = pod.get("metadata") or {}
        namespace, name, uid = opened.namespace, str(metadata.get("name")), str(metadata.get("uid"))
        stranded = stranded_replacement(self.cache.pods.items(), namespace, opened.placement, opened.evicted_uid)
        if stranded != (name, uid):
            return timedelta(seconds=self.options.interval)  # the evicted pod still goes, or this one has a node now
        # The leader that made the move gives the replacement move_timeout once the evicted pod is gone (its grace
        # period can outlast the move's due time): so does this one, from when it first saw the pod gone.
        seen = time.monotonic()
        left = self._gone_seen.setdefault(uid, seen) + self.options.move_timeout - seen
        if left > 0:
            return timedelta(seconds=left)
        try:
            evictions.evict_pod(self.kube, namespace, name, uid=uid)
        except KubeNotFound:
            return None
        self.metrics.moves.labels("failed").inc()
        refused = self._refuse(opened.target(self._snapshot().snapshot.nodes), namespace, opened.placement)
        given_up = self.options.move_limit.total_seconds()
        log.info(
            "defrag: replacement %s/%s of placement %s/%s, unscheduled %g s after its pin, evicted",
            namespace,
            name,
            namespace,
            opened.placement,
            given_up,
        )
        self._event(
            {"apiVersion": "v1", "kind": "Pod", **pod},
            "DefragStopped",
            f"the move of placement {namespace}/{opened.placement} is given up: this replacement was not on its "
            f"target cards {given_up:g} s after the pin; evicted for an unpinned one{refused}",
            warning=True,
        )
        return None

    def _guard(self) -> DefragPolicy:
        """The policy, read again, while it lets this replica move pods; `NotLeading` once this replica may no longer
        act, `NotOn` once the policy no longer lets it."""
        if not self.elector.leading() or self._stop.is_set():
            raise NotLeading("this replica no longer holds the defragmentation lease; the new leader resumes the run")
        self._read_policy()
        if self.policy is None or self.policy.mode is not Mode.on:
            mode = "invalid" if self.policy is None else f"mode {self.policy.mode.value}"
            raise NotOn(f"the policy is now {mode}; the run stops before its next move")
        return self.policy

    def _still_allowed(self, policy: DefragPolicy, decision: RunDecision, done: int) -> None:
        """Raises `NotOn` when `policy`, as `_guard` just read it, no longer allows the run's moves left (its
        namespaces or its budgets changed)."""
        rest, made = decision.moves[done:], decision.moves[:done]
        over = still_allowed(policy, self._runs(), made, rest, datetime.now(UTC), decision.run_id)
        if over:
            raise NotOn(f"the policy changed and no longer allows the rest of the run ({over}); it stops")

    def _still_held(self, policy: DefragPolicy, decision: RunDecision, move: Move) -> None:
        """Raises `NotOn` when `policy`, as `_guard` just read it, now keeps the move's pod in place or its target out
        of reach, on the snapshot `_stale` just read anew: what the operator's policy leaves out is not evicted."""
        snapshot = self._snapshot().snapshot
        why = held_now(policy, snapshot, self._runs(), datetime.now(UTC), decision.run_id, move)
        if why:
            raise NotOn(f"the policy changed and now keeps the run's next move from being made ({why}); it stops")

    def _keep_room(self, policy: DefragPolicy) -> timedelta | None:
        """Every `keepRoom.interval`, within its window: plan toward the room goal when it is unmet; Events go on the
        policy. Outside the window, looked at again when it opens."""
        if not policy.keep_room.enabled:
            return None
        closed = policy.keep_room.closed_for(datetime.now(UTC))
        if closed:
            return closed
        wait = self._next_room - time.monotonic()
        if wait > 0:
            return timedelta(seconds=wait)
        self._next_room = time.monotonic() + policy.keep_room.interval.total_seconds()
        read = self._snapshot()
        goal = room_goal(room_of(in_scope(read.snapshot, policy)), policy)
        source = self._policy_source()
        if goal is not None and source is not None:
            now, history = datetime.now(UTC), self._runs()
            snapshot = self._kept_off(read, now)
            with collector_paused():
                decision = decide_run(policy, snapshot, RoomTrigger(goal), history, now, _run_id(now))
            self._decided(decision, source.obj, "keep_room", KEEP_ROOM, read.config)
        return policy.keep_room.interval

    def _snapshot(self, *, again: bool = False) -> SnapshotRead:
        """The planner's snapshot from the watch caches, read once a batch (`again`: read anew)."""
        if self._read is None or again:
            budgets = self.disruption_budgets.items()
            others = [pod[COUNTED] for pod in self.other_pods.items()]
            volumes = self._volumes()
            namespace_labels = None if self.namespaces.forbidden else namespace_labels_of(self.namespaces.items())
            config = self.hami_config()  # may read the API: outside the pause
            with collector_paused():
                allocations = self.cache.decoded_allocations()
                self._read = snapshot_of(
                    self.cache.nodes.items(),
                    self.cache.pods.items(),
                    budgets,
                    config,
                    others=others,
                    volumes=volumes,
                    namespace_labels=namespace_labels,
                    allocations=allocations,
                )
        return self._read

    def _volumes(self) -> Volumes | None:
        """The claims and volumes as watched, with the CSI attach limits, the StorageClasses, CSIDrivers and
        CSIStorageCapacities; None, or without the later ones, when the API server forbids their watches (as the CLI
        reads them when it may not list them)."""
        needed = (self.volume_claims, self.volumes, self.csi_nodes, self.volume_attachments)
        if any(watch.forbidden for watch in needed):
            return None
        claims = [claim[CLAIM] for claim in self.volume_claims.items()]
        volumes = [volume[VOLUME] for volume in self.volumes.items()]
        attach = parsed_attach_limits(
            (csi_node[ATTACH_LIMITS] for csi_node in self.csi_nodes.items()),
            (attachment[ATTACHMENT] for attachment in self.volume_attachments.items()),
        )
        if self.storage_classes.forbidden or self.csi_drivers.forbidden:
            return parsed_volumes(claims, volumes, attach=attach)
        classes = [storage_class[STORAGE_CLASS] for storage_class in self.storage_classes.items()]
        drivers = [driver[CAPACITY_DRIVER] for driver in self.csi_drivers.items()]
        if self.storage_capacities.forbidden:
            return parsed_volumes(claims, volumes, classes, drivers, attach=attach)
        capacities = [capacity[STORAGE_CAPACITY] for capacity in self.storage_capacities.items()]
        return parsed_volumes(claims, volumes, classes, drivers, capacities, attach=attach)

    def _kept_off(self, read: SnapshotRead, now: datetime, pod: str = "") -> Snapshot:
        """The read's snapshot with the rooms kept for pods other than `pod` and the cards HAMi refused (`keep_off`),
        so that no plan moves a pod onto them."""
        return keep_off(read.snapshot, self.cache.reservations(), now, pod, self._refused)

    def _runs(self) -> tuple[MoveRecord, ...]:
        """The history of the runs (their placements, read from the API server: the budgets count every move a
        leader made), once a batch."""
        if self._history is None:
            self._history = run_history(self.kube, self.cache.room_key)
        return self._history

    def _watches(self) -> tuple[Reflector, ...]:
        """Every watch a plan reads: the server's cache's and the controller's own."""
        return (*self.cache.reflectors(), *self.reflectors())

    def _fresh(self) -> bool:
        """Whether every watch a plan reads has listed, and heard from the API server within STALE_SECONDS (a
        stale one is logged; one that has not listed yet, while the server starts, is not); one the API server
        forbids is said (`_tell_forbidden`) and, when a plan can go without it, not waited for."""
        watches = self._watches()
        self._tell_forbidden(watches)
        # A plan goes on without some watches the API server forbids (`goes_without`), as the CLI goes on when it
        # may not list them; without any other watch nothing is planned.
        stamps = {r.kind: r.last_sync for r in watches if not (r.forbidden and goes_without(r.kind))}
        if any(stamp is None for stamp in stamps.values()):
            return False
        stale = sorted(
            kind for kind, stamp in stamps.items() if stamp is not None and time.time() - stamp > STALE_SECONDS
        )
        if stale:
            log.warning(
                "defrag: no plan while the watches of %s are stale (nothing heard for %d s)",
                ", ".join(stale),
                STALE_SECONDS,
            )
        return not stale

    def _tell_forbidden(self, watches: Iterable[Reflector]) -> None:
        """Says once, in the log and a Warning Event on the policy's ConfigMap, each watch the API server starts to
        forbid and what plans do without it; and in the log each it allows again (the metric reads the watches). A
        watch forbidden before the ConfigMap is listed is told on it once it is."""
        forbidden = {r.kind: r for r in watches if r.forbidden}
        for kind in sorted(self._forbidden - forbidden.keys()):
            log.info("defrag: the watch of %s is allowed again", kind)
        for kind in sorted(forbidden.keys() - self._forbidden):
            log.warning("defrag: %s", self._forbidden_words(forbidden[kind]))
        self._forbidden = set(forbidden)
        source = self._policy_source()
        if source is None:
            self._forbidden_evented &= forbidden.keys()
            return
        for kind in sorted(forbidden.keys() - self._forbidden_evented):
            self._event(source.obj, "DefragWatchForbidden", self._forbidden_words(forbidden[kind]), warning=True)
        self._forbidden_evented = set(forbidden)

    def _forbidden_words(self, reflector: Reflector) -> str:
        """What a forbidden watch leaves unread and how to grant it, as the log and the Event say it."""
        return f"cannot watch {reflector.kind} ({reflector.forbidden}): {forbidden_watch_words(reflector.kind)}"

    def _lease_annotations(self) -> dict[str, str]:
        """What the leader says on its Lease at each renewal: the watches the API server forbids it now, and its last
        decisions."""
        said = {}
        forbidden = [r.kind for r in self._watches() if r.forbidden]
        if forbidden:
            said[DEFRAG_FORBIDDEN_WATCHES_ANNOTATION] = forbidden_watches_value(forbidden)
        if self._decisions:
            said[DEFRAG_DECISIONS_ANNOTATION] = decisions_value(self._decisions)
        return said

    def _remember(self, decision: RunDecision, moves: int, outcome: str) -> None:
        """Keeps a decision for the Lease, where `defrag status` reads what the controller did or would do."""
        self._decisions = with_decision(self._decisions, decided(datetime.now(UTC), decision, moves, outcome))

    def _remember_end(self, rescue: Rescue, outcome: str, now: datetime) -> None:
        """Keeps how a rescue's pod fared for the Lease, beside its run's decision."""
        pod = "/".join(object_key(rescue.pod))
        self._decisions = with_decision(
            self._decisions, rescue_ended(now, rescue.run_id, pod, len(rescue.moved), outcome)
        )

    def _policy_source(self) -> PolicySource | None:
        """The policy's ConfigMap as watched, None when there is none."""
        found = self.policy_map.items()
        return policy_source(found[0]) if found else None

    def _read_policy(self) -> timedelta | None:
        """Reads the policy when its ConfigMap changed; a bad or missing one turns the controller off until fixed.
        Until the ConfigMap's watch has listed, looked at again shortly; one whose PriorityClass could not be read,
        again every PRIORITY_CLASS_RETRY_SECONDS (not at every pod's look, each of which reads the policy first), and
        that class's value, once read, again every PRIORITY_CLASS_REFRESH_SECONDS (`_class_refreshed`)."""
        if not self.policy_map.synced.is_set():
            return timedelta(seconds=WAKE_SECONDS)
        policy_ref = self.options.policy_ref
        source = self._policy_source()
        version = source.version if source is not None else ""
        if version == self._policy_version:
            if not self._class_problem:
                return self._class_refreshed(source)
            wait = self._class_retry_at - time.monotonic()
            if wait > 0:
                return timedelta(seconds=wait)
        else:
            self._class_problem = ""
        self._policy_version = version
        self.policy = None  # until this version is read: nothing moves on a policy that could not be
        if source is None:
            self._invalid(
                None, f"ConfigMap {policy_ref} not found; create it with the DefragPolicy under {DEFRAG_POLICY_KEY}"
            )
            return None
        if source.text is None:
            self._invalid(
                source.obj, f"{DEFRAG_POLICY_KEY}: missing from ConfigMap {policy_ref}; put the DefragPolicy there"
            )
            return None
        try:
            policy = parse_policy(source.text, self.options.server_namespace, self.options.excluded_namespaces)
        except PolicyError as error:
            self._invalid(source.obj, str(error))
            return None
        if policy.priority_class:
            try:
                policy = self._threshold_read(policy)
            except PolicyError as error:
                return self._class_unread(source.obj, error)
        self._class_problem = ""
        self._class_refresh_at = time.monotonic() + PRIORITY_CLASS_REFRESH_SECONDS
        self.policy = policy
        self.metrics.policy_valid.set(1)
        # A shorter keepRoom.interval holds from now, not once the interval read before has passed.
        self._next_room = min(self._next_room, time.monotonic() + policy.keep_room.interval.total_seconds())
        log.info("defrag policy %s read: mode %s", policy_ref, policy.mode.value)
        kept = timedelta(seconds=self.options.finished_ttl) if self.options.finished_ttl > 0 else None
        shortfall = history_shortfall(policy.budgets, kept)
        if shortfall:
            log.warning("defrag policy %s: %s", policy_ref, shortfall)
        self._event(
            source.obj,
            "DefragPolicyRead",
            f"policy read: mode {policy.mode.value}" + (f"; but {shortfall}" if shortfall else ""),
            warning=bool(shortfall),
        )
        self._plan_all_again()
        return timedelta(seconds=PRIORITY_CLASS_REFRESH_SECONDS) if policy.priority_class else None

    def _plan_all_again(self) -> None:
        """A new policy (another mode, more budget, another priority threshold) plans for every pod again now,
        whatever it waited for."""
        self._retry_at.clear()
        self._backed_off.clear()
        self._add_all()

    def _class_unread(self, obj: dict[str, Any], error: PolicyError) -> timedelta:
        """The controller off while the policy's PriorityClass cannot be read: said once while the problem stays the
        same, read again after PRIORITY_CLASS_RETRY_SECONDS."""
        self._class_retry_at = time.monotonic() + PRIORITY_CLASS_RETRY_SECONDS
        if str(error) != self._class_problem:
            self._invalid(obj, str(error))
        self._class_problem = str(error)
        return timedelta(seconds=PRIORITY_CLASS_RETRY_SECONDS)

    def _class_refreshed(self, source: PolicySource | None) -> timedelta | None:
        """Reads the value of the PriorityClass the policy names again once PRIORITY_CLASS_REFRESH_SECONDS passed:
        a class deleted turns the controller off as at the first read, and one created again with another value holds
        pods by that value from then on (and every pod is looked at again, as for a new policy). When to look again,
        None when the policy names no class."""
        policy = self.policy
        if policy is None or source is None or not policy.priority_class:
            return None
        wait = self._class_refresh_at - time.monotonic()
        if wait > 0:
            return timedelta(seconds=wait)
        self._class_refresh_at = time.monotonic() + PRIORITY_CLASS_REFRESH_SECONDS
        try:
            read = self._threshold_read(policy)
        except PolicyError as error:
            return self._class_unread(source.obj, error)
        if read.priority_threshold != policy.priority_threshold:
            self.policy = read
            said = f"PriorityClass {policy.priority_class}'s value is now {read.priority_threshold}"
            log.info("defrag policy %s: %s (was %s)", self.options.policy_ref, said, policy.priority_threshold)
            self._event(source.obj, "DefragPolicyRead", f"policy read: {said}, was {policy.priority_threshold}")
            self._plan_all_again()
        return timedelta(seconds=PRIORITY_CLASS_REFRESH_SECONDS)

    def _threshold_read(self, policy: DefragPolicy) -> DefragPolicy:
        """The policy with the value of the PriorityClass its priorityThreshold names, or PolicyError saying why it
        could not be read."""
        name = policy.priority_class
        again = f"read again every {PRIORITY_CLASS_RETRY_SECONDS:g}s"
        try:
            return with_threshold(policy, self.priority_value(name))
        except KubeNotFound:
            problem = class_not_found(name, again)
        except KubeForbidden:
            problem = (
                f"priorityThreshold.name: the server may not read PriorityClass {name} ({again}); grant get on "
                f"priorityclasses.scheduling.k8s.io (the chart's ClusterRole does), {CLASS_INSTEAD}"
            )
        except KubeError as error:
            problem = f"priorityThreshold.name: PriorityClass {name} could not be read ({again}): {error}"
        raise PolicyError(problem)

    def _invalid(self, obj: dict[str, Any] | None, problem: str) -> None:
        """The controller off until the policy is fixed: one log line, the metric, a Warning Event on the ConfigMap."""
        self.policy = None
        self.metrics.policy_valid.set(0)
        log.error(
            "defrag policy %s is invalid, nothing is moved until it is fixed: %s", self.options.policy_ref, problem
        )
        if obj is not None:
            self._event(obj, "DefragPolicyInvalid", f"nothing is moved until this is fixed: {problem}", warning=True)

    def _add_all(self) -> None:
        """Every key there is: a new policy or a new leader looks at everything again."""
        self.queue.add(RESUME)
        self.queue.add(KEEP_ROOM)
        for pod in self.cache.pods.items():
            key = pod_key(pod)
            if key is not None:
                self.queue.add(key)
        for key in self._rescues.copy():
            self.queue.add(key)

    def _pod_changed(self, kind: str, pod: dict[str, Any]) -> None:
        """A pod event of the cache's watch: a pod waiting unscheduled, one whose rescue is followed, or one still
        carrying a room kept for it, is added; one that leaves its node frees room (`_room_freed`); what was said and
        when to retry go with a deleted pod."""
        if frees_room(kind, pod):
            self._room_freed()
        if kind == "DELETED":
            uid = str((pod.get("metadata") or {}).get("uid") or "")
            self._said.pop(uid, None)
            self._retry_at.pop(uid, None)
            self._backed_off.pop(uid, None)
            self._sent_back.pop(uid, None)
            self._gone_seen.pop(uid, None)
        key = pod_key(pod) if kind != "DELETED" else None
        if key is None:
            followed = PodKey(*object_key(pod))
            if followed in self._rescues or (kind != "DELETED" and ROOM_RESERVED_ANNOTATION in _annotations(pod)):
                self.queue.add(followed)
            return
        self.queue.add(key)

    def _room_freed(self) -> None:
        """A pod left a node, or a node came: one pod backed off (`look_sooner`) is looked at again within an interval
        of its last look, as kube-scheduler retries the pods it could not place on such a change, not up to
        LOOK_AGAIN_MAX later; at most one an interval (`sooner_gap`: less often when plans are dear), however many pods
        leave."""
        now = time.monotonic()
        if now < self._sooner_after:
            return
        interval = timedelta(seconds=self.options.interval)
        picked = look_sooner(dict(self._backed_off), dict(self._retry_at), now, interval)
        if picked is None:
            return
        key, uid, at = picked
        self._retry_at[uid] = at
        self._sooner_after = now + sooner_gap(interval, self._plan_cost)
        self.queue.add_after(key, at - now)

    def _event_changed(self, kind: str, event: dict[str, Any]) -> None:
        """A FailedScheduling Event arrived, changed or went: indexed by its pod, which is added."""
        key = event_key(event)
        if key is None:
            return
        with self._events_lock:
            known = self._events.setdefault(key, {})
            if kind == "DELETED":
                known.pop(object_key(event), None)
                if not known:
                    del self._events[key]
                return
            known[object_key(event)] = event
        self.queue.add(key)

    def _events_of(self, key: PodKey) -> list[dict[str, Any]]:
        """The pod's FailedScheduling Events as watched."""
        with self._events_lock:
            return list(self._events.get(key, {}).values())

    def _pod(self, key: Key) -> dict[str, Any] | None:
        """The pod of a pod key, as the cache holds it."""
        return self.cache.pods.get(key.namespace, key.name) if isinstance(key, PodKey) else None

    def _resume_runs(self) -> None:
        """As the new leader: undo the open moves of earlier runs whose pod was never evicted; leave the others; leave
        out of plans the cards that earlier leaders' given-up moves say HAMi refused."""
        now, cooldown = datetime.now(UTC), self._cooldown
        for obj in run_placements(self.kube):
            for card, until in refused_by(obj, self.cache.room_key, now, cooldown).items():
                self._refused[card] = max(until, self._refused.get(card, until))
            metadata = obj.get("metadata") or {}
            status = obj.get("status") or {}
            if status.get("phase", Phase.Pending) != Phase.Pending or status.get("claim"):
                continue
            if not move_sealed(obj, self.cache.room_key):
                log.warning(
                    "defrag: placement %s/%s is labelled with a run but no run sealed it; left alone",
                    metadata.get("namespace"),
                    metadata.get("name"),
                )
                continue
            annotations = metadata.get("annotations") or {}
            key, uid = annotations.get(DEFRAG_POD_ANNOTATION, ""), annotations.get(DEFRAG_POD_UID_ANNOTATION, "")
            if not names_own_pod(str(key), metadata.get("namespace")):
                continue
            namespace, name = str(key).split("/", 1)
            try:
                pod = cluster_reads.get_pod(self.kube, namespace, name)
            except KubeNotFound:
                pod = {}
            meta = pod.get("metadata") or {}
            if not self.elector.leading():
                # The reads above can outlast the lease: a replica that lost it undoes nothing more.
                log.info("defrag: stopped leading while resuming the runs; the next leader resumes them")
                return
            if meta.get("uid") == uid and not meta.get("deletionTimestamp"):
                try:
                    placements.delete_placement(self.kube, str(metadata.get("namespace")), str(metadata.get("name")))
                except KubeNotFound:
                    continue
                log.info("defrag: placement %s/%s undone, %s was never evicted", namespace, metadata.get("name"), key)
            else:
                log.info("defrag: placement %s/%s left for %s's replacement", namespace, metadata.get("name"), key)

    def _leading(self, leading: bool) -> None:
        """The leader metric; a replica that starts leading resumes the runs it finds first, then looks at
        everything."""
        self.metrics.leader.set(1 if leading else 0)
        if leading:
            self._resume = True
            self._add_all()

    def _say(self, about: Mapping[str, Any], key: str, reason: str, message: str) -> bool:
        """An Event unless the same was said last time on this object; True when it was new."""
        if self._said.get(key) == message:
            return False
        self._said[key] = message
        self._event(about, reason, message)
        return True

    def _event(
        self, about: Mapping[str, Any], reason: str, message: str, *, warning: bool = False, said: str = ""
    ) -> None:
        """An Event on a pod or on the policy's ConfigMap, from this controller. On a pod it says `said` (else the
        message) as the pod's namespace may read it (`for_tenant`), and the whole message goes to the log, where the
        operator reads every pod's story (a dry-run's moves among them) in one place."""
        if about.get("kind", "Pod") == "Pod":
            namespace, name = _namespace_of(about), (about.get("metadata") or {}).get("name")
            log.info("defrag: %s on pod %s/%s: %s", reason, namespace, name, message)
            nodes = self.cache.nodes_by_name()
            message = for_tenant(said or message, namespace, nodes, node_keys(nodes.values()))
        self.events.record(about, reason, message, warning=warning, api_version="v1", kind="Pod")


def _forbidden(reflector: Reflector) -> float:
    """1 while the API server forbids the watch (its metric), else 0."""
    return float(bool(reflector.forbidden))


def _named(pod: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """A pod's namespace, name and UID, None unless the first two are valid names (they go into an API path)."""
    metadata = pod.get("metadata") or {}
    namespace, name = metadata.get("namespace"), metadata.get("name")
    if not is_namespaced_name(namespace, name):
        return None
    return str(namespace), str(name), str(metadata.get("uid") or "")


def _namespace_of(obj: Mapping[str, Any]) -> str:
    """An object's namespace ("" when it has none)."""
    return str((obj.get("metadata") or {}).get("namespace") or "")


def _annotations(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    """A pod's annotations (an empty mapping when it has none)."""
    found = (pod.get("metadata") or {}).get("annotations")
    return found if isinstance(found, Mapping) else {}


def _kind(key: Key) -> str:
    """A key's kind, as the looks metric labels it."""
    return "pod" if isinstance(key, PodKey) else key.replace("-", "_")


def _pod_ref(move: Move) -> dict[str, Any]:
    """The moved pod as an Event's object (by UID)."""
    namespace, name = move.pod.split("/", 1)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"namespace": namespace, "name": name, "uid": move.uid}}


def _run_id(now: datetime) -> str:
    """A run's id (a label value): when it started, and a random suffix."""
    return f"{now:%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"
