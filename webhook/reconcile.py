"""The background loop: tie claims to stored pods, release claims no pod carried, evict, retry, lift the scheduling
gate of a pod once the pod evicted for it is gone, expire, fail, and release the reqID guards of placements that no
longer need them.

Every replica runs it. Each step is a status write guarded by the resourceVersion it was decided on, so when two
replicas decide the same step only one write lands; an eviction is attempted only by the replica whose lease
(the attempt counter, written first) landed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from kubectl_hami_place.core.errors import PlacementError
from kubectl_hami_place.core.k8s_names import is_namespaced_name, is_object_name
from kubectl_hami_place.core.lifecycle import (
    FOREVER,
    ROOM_SETTLE_SECONDS,
    FollowUp,
    PodEvent,
    consumed_req_ids,
    eviction_outcome,
    finished_at,
    follow_up,
    gated,
    gating_placement,
    guard_obsolete,
    quiet_until,
    room_made,
)
from kubectl_hami_place.core.names import ROOM_ANNOTATION, ROOM_GATE, EvictionResult
from kubectl_hami_place.core.pin_check import Problem, problems_on
from kubectl_hami_place.core.placement import Placement, PlacementSpec, placement_from_object
from kubectl_hami_place.kube.claims import StaleWrite
from kubectl_hami_place.kube.client import Kube
from kubectl_hami_place.kube.errors import BlockedByDisruptionBudget, KubeError, KubeNotFound, PodReplaced
from kubectl_hami_place.kube.watch import WATCH_TIMEOUT_SECONDS, object_key
from webhook.cache import ClusterCache, same_node
from webhook.metrics import Metrics
from webhook.settings import DEFAULTS
from webhook.workqueue import WorkQueue
from webhook.writes import KubeWrites, Writes

log = logging.getLogger(__name__)

PERIOD_SECONDS = 2.0
# How often a pass asks every placement, not only those the queue hands out (an event, a deadline, a claim in
# flight): what no event told (none is known) is then at most this late, as an informer's resync bounds it.
FULL_PASS_SECONDS = 300.0
# After each pass the loop rests this many times the pass's own CPU time, so passes take at most a fifth of a core.
REST_PER_PASS = 4
# How often the guards of reqIDs are checked for placements that no longer need them; also how soon a finished
# placement whose deletion failed is asked again.
GUARD_SWEEP_SECONDS = 30.0
# The cache is stale when no list, event or bookmark arrived for longer than a watch lasts: no releases then.
CACHE_STALE_SECONDS = WATCH_TIMEOUT_SECONDS + 60


class KnownProblems:
    """What each open placement's spec finds wrong on its node, worked out again only when the spec (a new
    version) or what its node says (not its heartbeats) changed: a full pass asks it of every open placement, 65%
    of a 150 ms pass at 10,000 of them, while nodes change a few a second."""

    def __init__(self) -> None:
        self._known: dict[int, tuple[PlacementSpec, Mapping[str, Any] | None, tuple[Problem, ...]]] = {}

    def pass_over(
        self, nodes: Mapping[str, Mapping[str, Any]], *, complete: bool
    ) -> Callable[[PlacementSpec], tuple[Problem, ...]]:
        """The problems of each spec this pass asks of (keyed by the spec itself, its node compared by
        `same_node`: the cache replaces a changed node, never edits it); a complete pass forgets what it does not
        ask of."""
        known = self._known
        if complete:
            self._known = {}
        work_out = problems_on(nodes)
        alike: dict[tuple[int, int], bool] = {}

        def same(seen: Mapping[str, Any] | None, node: Mapping[str, Any] | None) -> bool:
            """`same_node`, asked once a pass per pair of node objects for the hundreds of placements on a node."""
            if seen is node:
                return True
            pair = (id(seen), id(node))
            if pair not in alike:
                alike[pair] = same_node(seen, node)
            return alike[pair]

        def problems(spec: PlacementSpec) -> tuple[Problem, ...]:
            node = nodes.get(spec.node_name)
            entry = known.get(id(spec))
            found = entry[2] if entry is not None and entry[0] is spec and same(entry[1], node) else work_out(spec)
            self._known[id(spec)] = (spec, node, found)
            return found

        return problems


Key = tuple[str, str]


class Reconciler:
    """Runs `follow_up` over the placements its work queue hands out whenever a placement or pod changes, and at
    least every 2 seconds; over all of them every FULL_PASS_SECONDS.

    The queue holds the keys of the placements that may have a step: those with an event of their own, on a node
    that changed in what they read, or sharing a reqID with a placement that changed (which one consumed it); those
    whose deadline came (the TTL, `quiet_until`, a finished placement's finished_ttl); and, every pass, those in
    motion (claims not yet tied to a pod, evictions) or just given a step. Over 10,000 open placements, asking all
    took 33-60 ms every 2 s, in the tail of the admissions beside it.
    """

    def __init__(
        self,
        kube: Kube | None,
        cache: ClusterCache,
        metrics: Metrics,
        ttl_seconds: int,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        *,
        writes: Writes | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        cpu_time: Callable[[], float] = time.thread_time,
        claim_grace: int = DEFAULTS.claim_grace,
        finished_ttl: int = 0,
    ) -> None:
        if writes is None and kube is None:
            raise ValueError("a Reconciler needs a Kube or its Writes")
        self.writes: Writes = writes if writes is not None else KubeWrites(kube)  # type: ignore[arg-type]
        self.cache = cache
        self.metrics = metrics
        self.ttl_seconds = ttl_seconds
        self.clock = clock
        self.monotonic = monotonic
        self.cpu_time = cpu_time
        self.claim_grace = claim_grace
        self.finished_ttl = finished_ttl
        self._last_sweep: float | None = None
        # Placement key -> (its claim token, when this replica first saw that claim untied to a stored pod).
        self._claims_seen: dict[Key, tuple[str, float]] = {}
        self._problems = KnownProblems()
        # Waiting pod key -> when this replica first found its room made (`room_made`), on its monotonic clock.
        self._room_since: dict[Key, float] = {}
        # Deadlines are quiet_until's, so on the clock follow_up reads; a failed pass backs its keys off from 5 ms.
        self.queue: WorkQueue[Key] = WorkQueue(lambda: self.clock().timestamp())
        self._last_full: float | None = None
        # Placement and pod events wake a pass at once; node events do not: on a cluster of thousands of nodes they
        # come several a second (heartbeats, HAMi's handshakes), so every pass would follow the last (at 10,000
        # placements a fifth of a core), while what they change (whether an open placement can still be honoured)
        # waits for the next periodic pass.
        self.wake = threading.Event()
        for reflector in (cache.pods, cache.placements):
            reflector.add_listener(lambda _kind, _obj: self.wake.set())
        cache.add_index_listener(self._placement_replaced)
        self._nodes_seen: dict[str, dict[str, Any]] = {}
        cache.nodes.add_listener(self._node_event)

    def _placement_replaced(self, old: Placement | None, new: Placement | None) -> None:
        """Queue a placement that changed (a new version, gone, broken) and those sharing the reqID of either version:
        which one consumed it may have changed."""
        for namespace, name, req_id in {(p.namespace, p.name, p.spec.req_id) for p in (old, new) if p is not None}:
            self.queue.add((namespace, name))
            for key in self.cache.placement_keys_sharing(namespace, req_id):
                self.queue.add(key)

    def _node_event(self, kind: str, node: dict[str, Any]) -> None:
        """Queue the placements on a node that changed in what a placement reads (not on a heartbeat)."""
        name = object_key(node)[1]
        seen = self._nodes_seen.pop(name, None) if kind == "DELETED" else self._nodes_seen.get(name)
        if kind != "DELETED":
            self._nodes_seen[name] = node
        if kind == "DELETED" or not same_node(seen, node):
            for key in self.cache.placement_keys_on(name):
                self.queue.add(key)

    def run(self, stop: threading.Event) -> None:
        """Loop until stop is set."""
        while not stop.is_set():
            self.wake.wait(PERIOD_SECONDS)
            self.wake.clear()
            if stop.is_set() or not self.cache.ready():
                continue
            started = self.cpu_time()
            self.pass_once()
            # A pass holds the GIL; on a busy cluster the cache changes all the time, so back-to-back passes would
            # starve /mutate (py-spy at 10,000 placements: 99% of the process in the reconciler). Rest a multiple
            # of the pass's CPU time: a 1 ms pass costs 4 ms, a 200 ms pass leaves /mutate 800 ms. Not of its wall
            # time: waiting on the API server holds no GIL, and a call held up for seconds by an API server restart
            # silenced the loop for four times as long (25 s measured: no claim tied, no eviction meanwhile).
            stop.wait((self.cpu_time() - started) * REST_PER_PASS)

    def pass_once(self) -> None:
        """One pass that never raises: a failure is logged (the keys it did not finish are queued again, backed
        off)."""
        try:
            self.reconcile_once()
        except Exception:
            log.exception("reconcile pass failed")

    def reconcile_once(self) -> None:
        """One pass: every placement queued at first and every FULL_PASS_SECONDS (a resync), then every key the
        queue has ready asked in one batch; the keys of a pass that fails are queued again, backed off."""
        started = time.perf_counter()
        now = self.monotonic()
        full = self._last_full is None or now - self._last_full >= FULL_PASS_SECONDS
        try:
            self._reconcile(now, full)
        finally:
            self.metrics.reconcile_passes.labels("full" if full else "queued").observe(time.perf_counter() - started)

    def _reconcile(self, now: float, full: bool) -> None:
        """`reconcile_once` at `now`, a full pass (every placement asked) or not."""
        everything = None
        if full:
            self._last_full = now
            everything = self.cache.parsed_placements()
            for placement in everything:
                self.queue.add((placement.namespace, placement.name))
        keys = self.queue.drain()
        unfinished = set(keys)
        try:
            self._ask(keys, everything, unfinished)
        except Exception:
            for key in unfinished:
                self.queue.done(key)
                self.queue.add_rate_limited(key)
            raise
        self._let_waiting_pods_go()
        if self._last_sweep is None or now - self._last_sweep >= GUARD_SWEEP_SECONDS:
            self._last_sweep = now
            every = everything if everything is not None else self.cache.parsed_placements()
            self._sweep_guards(every)

    def _ask(self, keys: list[Key], everything: list[Placement] | None, unfinished: set[Key]) -> None:
        """Ask follow_up of the placements of a batch (those gone are dropped), working out once what they share;
        `everything` is the resync's list of every placement. Each key finished leaves `unfinished`."""
        if everything is not None:
            cached = {(p.namespace, p.name): p for p in everything}
            found = {key: cached.get(key) or self.cache.parsed_placement(*key) for key in keys}
        else:
            found = {key: self.cache.parsed_placement(*key) for key in keys}
        placements = [placement for placement in found.values() if placement is not None]
        if everything is not None:
            consumed = consumed_req_ids(everything)
        else:
            sharing = {(p.namespace, p.spec.req_id) for p in placements if p.open}
            consumed = consumed_req_ids([c for key in sharing for c in self.cache.closed_sharing(*key)])
        nodes = self.cache.nodes_by_name()
        pods = self.cache.pods_by_claim(
            {(p.namespace, p.status.claim_token) for p in placements if p.status.claim_token}
        )
        claim_ages = self._claim_ages(found, complete=everything is not None)
        problems = self._problems.pass_over(nodes, complete=everything is not None)
        for key, placement in found.items():
            if placement is None:
                self._settle(key, FOREVER)
                unfinished.discard(key)
                continue
            step = follow_up(
                placement,
                pods,
                self.clock(),
                self.ttl_seconds,
                self.claim_grace,
                consumed=consumed,
                problems=problems,
                claim_ages=claim_ages,
            )
            if step is not None:
                self._apply(step)
                self._settle(key, None)
            else:
                self._settle(key, self._quiet_or_delete(placement))
            unfinished.discard(key)

    def _quiet_or_delete(self, placement: Placement) -> datetime | None:
        """`quiet_until`, or sooner the end of a finished placement's finished_ttl (0 keeps it), when it is deleted,
        as the TTL-after-finished controller queues a Job for its deadline: FOREVER once deleted (its deletion is
        an event), asked again GUARD_SWEEP_SECONDS later when the call failed."""
        until = quiet_until(placement, self.ttl_seconds)
        done = finished_at(placement)
        if self.finished_ttl <= 0 or done is None:
            return until
        ttl = timedelta(seconds=self.finished_ttl)
        # Whoever may write the status can make its latest time 9999-12-31: then the placement is kept, rather than
        # the sum overflowing and failing every pass.
        due = done + ttl if done <= FOREVER - ttl else FOREVER
        now = self.clock()
        if now <= due:
            return due if until is None else min(until, due)
        return FOREVER if self._delete(placement, done) else now + timedelta(seconds=GUARD_SWEEP_SECONDS)

    def _let_waiting_pods_go(self) -> None:
        """Let every pod that waits for its room go once its placement made the room (`room_made`), with an Event on
        the pod saying why, once the room has been made for ROOM_SETTLE_SECONDS: ROOM_GATE lifted, or where the API
        server dropped the gate (before 1.27), ROOM_ANNOTATION taken off, the update that has kube-scheduler try the
        pod again; a pod that could not be let go is looked at again next pass."""
        now = self.monotonic()
        waiting = self._room_since
        self._room_since = {}
        for pod in self.cache.waiting_pods():
            namespace, name = object_key(pod)
            placement_name, token = gating_placement(pod)
            named = is_object_name(placement_name)
            placement = self.cache.parsed_placement(namespace, placement_name) if named else None
            eviction = placement.status.eviction if placement is not None else None
            evicted = self.cache.pods.get(namespace, eviction.pod) if eviction is not None and eviction.pod else None
            why = room_made(placement, token, evicted)
            if why is None:
                continue
            since = self._room_since[(namespace, name)] = waiting.get((namespace, name), now)
            if now - since < ROOM_SETTLE_SECONDS:
                continue
            uid = str((pod.get("metadata") or {}).get("uid") or "")
            try:
                released = self.writes.release_room_wait(namespace, name, uid)
            except KubeError as error:
                log.warning("pod %s/%s not let go to the scheduler: %s", namespace, name, error)
                continue
            if released:
                said = f"scheduling gate {ROOM_GATE} lifted" if gated(pod) else f"{ROOM_ANNOTATION} taken off"
                log.info("pod %s/%s: %s: %s", namespace, name, said, why)
                event = PodEvent(namespace, name, uid, "RoomMade", f"{said}: {why}")
                self.writes.record_event(event.involved, event.reason, event.message, warning=False)

    def _settle(self, key: Key, until: datetime | None) -> None:
        """Done with the key: asked again next pass when in motion (None), at its deadline, or on an event only
        (FOREVER)."""
        self.queue.forget(key)
        self.queue.done(key)
        if until is None:
            self.queue.add(key)
        elif until != FOREVER:
            self.queue.add_after(key, (until - self.clock()).total_seconds())

    def _claim_ages(self, found: Mapping[Key, Placement | None], *, complete: bool) -> dict[tuple[str, str], float]:
        """(namespace, token) -> seconds since this replica first saw each claim not yet tied to a stored pod, kept
        for the placements a batch does not hold; a complete batch forgets those of placements gone."""
        now = self.monotonic()
        if complete:
            self._claims_seen = {key: seen for key, seen in self._claims_seen.items() if key in found}
        for key, placement in found.items():
            token = placement.status.claim_token if placement is not None else None
            if placement is None or not token or placement.status.consumed_by_uid:
                self._claims_seen.pop(key, None)
            elif self._claims_seen.get(key, ("", 0.0))[0] != token:
                self._claims_seen[key] = (token, now)
        return {(key[0], token): now - seen for key, (token, seen) in self._claims_seen.items()}

    def _may_release(self, namespace: str, token: str) -> bool:
        """Only with a fresh cache, and only when the API server knows no pod carrying the claim (any scheduler)."""
        synced = self.cache.last_sync_time()
        if synced is None or time.time() - synced > CACHE_STALE_SECONDS:
            log.warning("claim in %s not released: the cache is stale", namespace)
            return False
        try:
            return not self.writes.claim_carried(namespace, token, unlabelled=True)
        except KubeError as error:
            log.warning("claim in %s not released: looking up pods carrying it failed: %s", namespace, error)
            return False

    def _sweep_guards(self, placements: list[Placement]) -> None:
        """Release the reqID guards of placements gone, replaced, or ended without a claim (confirmed by a read)."""
        try:
            guards = self.writes.list_guards()
        except KubeError as error:
            log.warning("listing reqID guards failed: %s", error)
            return
        cached = {(p.namespace, p.name): p for p in placements}
        for guard in guards:
            if not guard_obsolete(cached.get((guard.holder_namespace, guard.holder_name)), guard.holder_uid):
                continue
            try:
                # The cache may not have seen a placement created a moment ago: the API server decides.
                # A holder that is no placement name holds nothing, and never reaches an API path.
                named = is_namespaced_name(guard.holder_namespace, guard.holder_name)
                stored = self.writes.read_placement(guard.holder_namespace, guard.holder_name) if named else None
                holder = placement_from_object(stored) if stored is not None else None
                if guard_obsolete(holder, guard.holder_uid):
                    self.writes.release_guard(guard)
            except (KubeError, PlacementError) as error:
                log.warning("reqID guard %s/%s not released: %s", guard.namespace, guard.name, error)

    def _delete(self, placement: Placement, done: datetime) -> bool:
        """Delete a placement that finished at `done` (that very version); False, logged, when the call failed."""
        try:
            self.writes.delete_placement(placement)
        except KubeError as error:
            log.warning("finished placement %s/%s not deleted: %s", placement.namespace, placement.name, error)
            return False
        log.info("placement %s/%s deleted: finished at %s", placement.namespace, placement.name, done.isoformat())
        return True

    def _apply(self, step: FollowUp) -> None:
        write = step.write
        if step.release and not self._may_release(write.namespace, write.placement.status.claim_token or ""):
            return
        try:
            stored = self.writes.write_status(write.placement, write.status)
        except StaleWrite:
            return
        except KubeError as error:
            log.warning("status of %s/%s not written: %s", write.namespace, write.name, error)
            return
        self.cache.placements.upsert(stored)
        if write.reason == "Expired":
            self.metrics.expirations.inc()
        if step.pod_event is not None:
            event = step.pod_event
            self.writes.record_event(event.involved, event.reason, event.message, warning=False)
        if not step.evict:
            if write.event:
                self.writes.record_event(stored, write.reason, write.message, warning=write.warning)
            return
        result, message = self._evict(write.namespace, step.evict, step.evict_uid)
        log.info("placement %s/%s: eviction %s: %s", write.namespace, write.name, result.value, message)
        self.metrics.evictions.labels(result.value).inc()
        try:
            outcome = eviction_outcome(placement_from_object(stored), result, message, self.clock())
            final = self.writes.write_status(outcome.placement, outcome.status)
        except (PlacementError, StaleWrite, KubeError) as error:
            log.warning("eviction result of %s/%s not recorded: %s", write.namespace, write.name, error)
            return
        self.cache.placements.upsert(final)
        self.writes.record_event(final, outcome.reason, outcome.message, warning=outcome.warning)

    def _evict(self, namespace: str, pod: str, uid: str) -> tuple[EvictionResult, str]:
        """(result, message) of one eviction through the Eviction API, of that pod only."""
        try:
            self.writes.evict(namespace, pod, uid)
        except PodReplaced:
            return EvictionResult.NotFound, f"pod {pod} ({uid}) was already gone; a newer pod of that name is kept"
        except KubeNotFound:
            return EvictionResult.NotFound, f"pod {pod} was already gone"
        except BlockedByDisruptionBudget as error:
            return EvictionResult.Blocked, error.cause
        except KubeError as error:
            return EvictionResult.Failed, error.cause
        return EvictionResult.Evicted, f"evicted pod {pod}"
