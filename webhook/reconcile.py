"""The background loop: tie claims to stored pods, release claims no pod carried, evict, retry, expire, fail, and
release the reqID guards of placements that no longer need them.

Every replica runs it. Each step is a status write guarded by the resourceVersion it was decided on, so when two
replicas decide the same step only one write lands; an eviction is attempted only by the replica whose lease
(the attempt counter, written first) landed.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, TypeVar

from kubectl_hami_place.core.errors import PlacementError
from kubectl_hami_place.core.k8s_names import is_object_name
from kubectl_hami_place.core.lifecycle import (
    FOREVER,
    FollowUp,
    consumed_req_ids,
    eviction_outcome,
    finished_at,
    follow_up,
    guard_obsolete,
    quiet_until,
)
from kubectl_hami_place.core.names import EvictionResult
from kubectl_hami_place.core.placement import Placement, PlacementSpec, placement_from_object
from kubectl_hami_place.core.plan import Problem, problems_on
from kubectl_hami_place.kube.claims import StaleWrite
from kubectl_hami_place.kube.client import Kube
from kubectl_hami_place.kube.errors import BlockedByDisruptionBudget, KubeError, KubeNotFound
from kubectl_hami_place.kube.evictions import PodReplaced
from kubectl_hami_place.kube.watch import WATCH_TIMEOUT_SECONDS, object_key
from webhook.cache import ClusterCache, same_node
from webhook.metrics import Metrics
from webhook.writes import KubeWrites, Writes

log = logging.getLogger(__name__)

PERIOD_SECONDS = 2.0
# How often a pass asks every placement, not only those an event, a deadline or a claim in flight points at: what
# no event told (none is known) is then at most this late, as an informer's resync bounds it.
FULL_PASS_SECONDS = 300.0
# After each pass the loop rests this many times the pass's own duration, so passes take at most a fifth of the time.
REST_PER_PASS = 4
# How often the guards of reqIDs are checked for placements that no longer need them.
GUARD_SWEEP_SECONDS = 30.0
# How long a claim may wait for its pod to be stored, on this replica's monotonic clock from when it first saw the
# claim: twice the API server's longest admission (30 s) plus its request timeout for the pod's create (the default
# --request-timeout is 60 s), so no pod still on its way to storage can find its claim released.
CLAIM_GRACE_SECONDS = 120
# Finished placements are deleted this long after they finished (--finished-ttl), as a Job a day after by default.
FINISHED_TTL_SECONDS = 86400
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
T = TypeVar("T")


class QuietPlacements:
    """The placements a pass found no step for, and what would give them one: an event of their own, an event of
    their node, a change to the placements sharing their reqID (which one consumed it), or their deadline (the
    TTL). A pass asks those and the placements in motion (claims not yet tied to a pod, evictions), not every
    placement: over 10,000 open placements asking all took 33-60 ms every 2 s, in the tail of the admissions beside
    it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._changed: set[Key] = set()
        self._changed_nodes: set[str] = set()
        self._quiet: dict[Key, tuple[Placement, datetime]] = {}
        self._moving: dict[Key, Placement] = {}
        self._on_node: dict[str, set[Key]] = {}
        self._sharing: dict[Key, set[Key]] = {}
        self._deadlines: list[tuple[datetime, Key]] = []

    def placement_changed(self, key: Key) -> None:
        """A placement event (any thread)."""
        with self._lock:
            self._changed.add(key)

    def node_changed(self, name: str) -> None:
        """A node event (any thread)."""
        with self._lock:
            self._changed_nodes.add(name)

    def forget_all(self) -> None:
        """Start over: a full pass is about to record every placement."""
        with self._lock:
            self._changed, self._changed_nodes = set(), set()
        self._quiet, self._moving, self._on_node, self._sharing, self._deadlines = {}, {}, {}, {}, []

    def to_ask(self, now: datetime, lookup: Callable[[str, str], Placement | None]) -> list[Placement]:
        """The placements this pass must ask (`lookup` reads one from the cache); those gone are forgotten."""
        with self._lock:
            changed, self._changed = self._changed, set()
            nodes, self._changed_nodes = self._changed_nodes, set()
        keys = set(self._moving) | changed
        for name in nodes:
            keys |= self._on_node.get(name, set())
        while self._deadlines and self._deadlines[0][0] < now:
            until, key = heapq.heappop(self._deadlines)
            entry = self._quiet.get(key)
            if entry is not None and entry[1] == until:
                keys.add(key)
        req_ids = {_req_id_key(old) for key in changed if (old := self._known(key)) is not None}
        found = {key: lookup(*key) for key in keys}
        req_ids |= {_req_id_key(placement) for key in changed if (placement := found[key]) is not None}
        for req_id in req_ids:
            for key in self._sharing.get(req_id, set()) - keys:
                found[key] = lookup(*key)
        for key, placement in found.items():
            if placement is None:
                self._drop(key)
        return [placement for placement in found.values() if placement is not None]

    def record(self, placement: Placement, until: datetime | None) -> None:
        """What a pass found: quiet until `until`, or in motion (None: ask it every pass). A deadline already
        waiting in the heap is not pushed again: a placement asked between full passes (its node changed, a
        placement sharing its reqID did) mostly keeps its TTL, and each ask would add an entry until the next
        full pass empties the heap."""
        key = (placement.namespace, placement.name)
        waiting = self._quiet.get(key, (None, None))[1]
        self._drop(key)
        self._sharing.setdefault(_req_id_key(placement), set()).add(key)
        if until is None:
            self._moving[key] = placement
            return
        self._quiet[key] = (placement, until)
        self._on_node.setdefault(placement.spec.node_name, set()).add(key)
        if until not in (FOREVER, waiting):
            heapq.heappush(self._deadlines, (until, key))

    def _known(self, key: Key) -> Placement | None:
        entry = self._quiet.get(key)
        return entry[0] if entry is not None else self._moving.get(key)

    def _drop(self, key: Key) -> None:
        old = self._known(key)
        if old is None:
            return
        self._quiet.pop(key, None)
        self._moving.pop(key, None)
        _unindex(self._on_node, old.spec.node_name, key)
        _unindex(self._sharing, _req_id_key(old), key)


def _req_id_key(placement: Placement) -> Key:
    return (placement.namespace, placement.spec.req_id)


def _unindex(index: dict[T, set[Key]], at: T, key: Key) -> None:
    """Take the key out of index[at], and index[at] out of the index once empty."""
    keys = index.get(at)
    if keys is not None:
        keys.discard(key)
        if not keys:
            del index[at]


class Reconciler:
    """Runs `follow_up` over the cached placements that may have a step whenever a placement or pod changes, and at
    least every 2 seconds; over all of them every FULL_PASS_SECONDS."""

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
        claim_grace: int = CLAIM_GRACE_SECONDS,
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
        self.claim_grace = claim_grace
        self.finished_ttl = finished_ttl
        self._last_sweep: float | None = None
        self._claims_seen: dict[tuple[str, str], float] = {}
        self._problems = KnownProblems()
        self._quiet = QuietPlacements()
        self._last_full: float | None = None
        # Placement and pod events wake a pass at once; node events do not: on a cluster of thousands of nodes they
        # come several a second (heartbeats, HAMi's handshakes), so every pass would follow the last (at 10,000
        # placements a fifth of a core), while what they change (whether an open placement can still be honoured)
        # waits for the next periodic pass.
        self.wake = threading.Event()
        for reflector in (cache.pods, cache.placements):
            reflector.add_listener(lambda _kind, _obj: self.wake.set())
        cache.placements.add_listener(lambda _kind, obj: self._quiet.placement_changed(object_key(obj)))
        self._nodes_seen: dict[str, dict[str, Any]] = {}
        cache.nodes.add_listener(self._node_event)

    def _node_event(self, kind: str, node: dict[str, Any]) -> None:
        """Tell QuietPlacements of a node that changed in what a placement reads (not of a heartbeat)."""
        name = object_key(node)[1]
        seen = self._nodes_seen.pop(name, None) if kind == "DELETED" else self._nodes_seen.get(name)
        if kind != "DELETED":
            self._nodes_seen[name] = node
        if kind == "DELETED" or not same_node(seen, node):
            self._quiet.node_changed(name)

    def run(self, stop: threading.Event) -> None:
        """Loop until stop is set."""
        while not stop.is_set():
            self.wake.wait(PERIOD_SECONDS)
            self.wake.clear()
            if stop.is_set() or not self.cache.ready():
                continue
            started = time.monotonic()
            self.pass_once()
            # A pass holds the GIL; on a busy cluster the cache changes all the time, so back-to-back passes would
            # starve /mutate (py-spy at 10,000 placements: 99% of the process in the reconciler). Rest a multiple
            # of the pass: a 1 ms pass costs 4 ms, a 200 ms pass leaves /mutate 800 ms.
            stop.wait((time.monotonic() - started) * REST_PER_PASS)

    def pass_once(self) -> None:
        """One pass that never raises: a failure is logged, and as what the failed pass took from QuietPlacements
        was not all asked, the next pass asks every placement."""
        try:
            self.reconcile_once()
        except Exception:
            log.exception("reconcile pass failed")
            self._last_full = None

    def reconcile_once(self) -> None:
        """One pass: over every placement at first and every FULL_PASS_SECONDS, else over those QuietPlacements
        says may have a step."""
        now = self.monotonic()
        full = self._last_full is None or now - self._last_full >= FULL_PASS_SECONDS
        if full:
            self._last_full = now
            self._quiet.forget_all()
            placements = self.cache.parsed_placements()
            consumed = consumed_req_ids(placements)
        else:
            placements = self._quiet.to_ask(self.clock(), self.cache.parsed_placement)
            sharing = {(p.namespace, p.spec.req_id) for p in placements if p.open}
            consumed = consumed_req_ids([c for key in sharing for c in self.cache.closed_sharing(*key)])
        nodes = self.cache.nodes_by_name()
        pods = self.cache.pods_by_claim(
            {(p.namespace, p.status.claim_token) for p in placements if p.status.claim_token}
        )
        claim_ages = self._claim_ages(placements)
        problems = self._problems.pass_over(nodes, complete=full)
        for placement in placements:
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
            self._quiet.record(placement, quiet_until(placement, self.ttl_seconds) if step is None else None)
            if step is not None:
                self._apply(step)
        if self._last_sweep is None or now - self._last_sweep >= GUARD_SWEEP_SECONDS:
            self._last_sweep = now
            every = placements if full else self.cache.parsed_placements()
            self._sweep_guards(every)
            self._delete_finished(every)

    def _claim_ages(self, placements: list[Placement]) -> dict[tuple[str, str], float]:
        """(namespace, token) -> seconds since this replica first saw each claim not yet tied to a stored pod."""
        now = self.monotonic()
        current = {
            (p.namespace, p.status.claim_token)
            for p in placements
            if p.status.claim_token and not p.status.consumed_by_uid
        }
        self._claims_seen = {key: self._claims_seen.get(key, now) for key in current}
        return {key: now - seen for key, seen in self._claims_seen.items()}

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
            if not guard_obsolete(cached.get((guard.namespace, guard.holder_name)), guard.holder_uid):
                continue
            try:
                # The cache may not have seen a placement created a moment ago: the API server decides.
                # A holder that is no placement name holds nothing, and never reaches an API path.
                named = is_object_name(guard.holder_name)
                stored = self.writes.read_placement(guard.namespace, guard.holder_name) if named else None
                holder = placement_from_object(stored) if stored is not None else None
                if guard_obsolete(holder, guard.holder_uid):
                    self.writes.release_guard(guard)
            except (KubeError, PlacementError) as error:
                log.warning("reqID guard %s/%s not released: %s", guard.namespace, guard.name, error)

    def _delete_finished(self, placements: list[Placement]) -> None:
        """Delete the placements finished over finished_ttl ago (0 keeps them), as Jobs' ttlSecondsAfterFinished."""
        if self.finished_ttl <= 0:
            return
        now = self.clock()
        for placement in placements:
            done = finished_at(placement)
            if done is None or (now - done).total_seconds() <= self.finished_ttl:
                continue
            try:
                self.writes.delete_placement(placement)
            except KubeError as error:
                log.warning("finished placement %s/%s not deleted: %s", placement.namespace, placement.name, error)
                continue
            log.info("placement %s/%s deleted: finished at %s", placement.namespace, placement.name, done.isoformat())

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
