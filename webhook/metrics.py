"""Prometheus metrics of the webhook, on their own registry; every label takes a small fixed set of values."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from kubectl_hami_place.core.admission import RESULTS
from kubectl_hami_place.core.names import ATTEMPT_RESULTS
from kubectl_hami_place.kube.watch import Reflector

CACHE_KINDS = ("nodes", "pods", "placements")
# Admission results beyond the decision's own: a body we refused, an internal error answered with "allowed".
INVALID = "invalid"
# Pauses worth telling apart: a young collection takes microseconds, a full one over a large heap tens of ms.
PAUSE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
ERROR = "error"
DRY_RUN = "dry_run"


class Metrics:
    """The counters, gauges and histogram the server updates; one instance per server."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.admissions = Counter(
            "hami_place_admissions", "Admission requests answered, by result.", ["result"], registry=self.registry
        )
        for result in (*RESULTS, INVALID, ERROR, DRY_RUN):
            self.admissions.labels(result)
        self.claims = Counter("hami_place_claims", "Placements claimed by a pod.", registry=self.registry)
        self.conflicts = Counter(
            "hami_place_claim_conflicts",
            "Claims that lost a race (409: another replica or writer changed the placement first).",
            registry=self.registry,
        )
        self.evictions = Counter(
            "hami_place_evictions", "Eviction attempts, by result.", ["result"], registry=self.registry
        )
        for attempt in ATTEMPT_RESULTS:
            self.evictions.labels(attempt.value)
        self.expirations = Counter(
            "hami_place_expirations", "Placements expired unclaimed after the TTL.", registry=self.registry
        )
        self.sync_age = Gauge(
            "hami_place_cache_sync_age_seconds",
            "Seconds since the cache last heard from the API server, by kind of object (+Inf before the first sync).",
            ["kind"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "hami_place_admission_duration_seconds",
            "Time to answer an admission request, claim write included.",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
            registry=self.registry,
        )

        self.watch_events = Counter(
            "hami_place_watch_events",
            "Objects the cache took from its watches and relists (each decoded and indexed), by kind.",
            ["kind"],
            registry=self.registry,
        )
        self.collector_pauses = Histogram(
            "hami_place_collector_pause_seconds",
            "Time the process stood still in Python's cyclic garbage collector, by generation collected.",
            ["generation"],
            buckets=PAUSE_BUCKETS,
            registry=self.registry,
        )
        self.loop_lag = Histogram(
            "hami_place_event_loop_lag_seconds",
            "How late the /mutate event loop ran a timer: time every admission on it waited for the process.",
            buckets=PAUSE_BUCKETS,
            registry=self.registry,
        )

        self.defrag = DefragMetrics(self.registry)

    def watch_collector(self) -> Callable[[], None]:
        """Time every cyclic collection (in whichever thread runs it): a full one stops every admission. Returns
        what stops the timing."""
        started: list[float] = []
        # Made now: the callback must not take the metric's lock, which a collection may interrupt the holder of.
        by_generation = [self.collector_pauses.labels(str(generation)) for generation in range(3)]

        def timed(phase: str, info: dict[str, Any]) -> None:
            if phase == "start":
                started.append(time.perf_counter())
            elif started:
                by_generation[info["generation"]].observe(time.perf_counter() - started.pop())

        gc.callbacks.append(timed)
        return lambda: gc.callbacks.remove(timed)

    def count_events(self, reflector: Reflector) -> None:
        """Count the objects a reflector takes in: the cache's steady background work."""
        counter = self.watch_events.labels(reflector.kind)
        reflector.add_listener(lambda _event, _obj: counter.inc())

    def watch_sync_age(self, reflector: Reflector) -> None:
        """Report the age of a reflector's last sync at scrape time."""

        def age() -> float:
            stamp = reflector.last_sync
            return float("inf") if stamp is None else max(0.0, time.time() - stamp)

        self.sync_age.labels(reflector.kind).set_function(age)


DEFRAG_TRIGGERS = ("rescue", "keep_room")
# What a run ended in: moves made, moves only named (dry-run), nothing to do or no plan, refused by the budgets,
# refused by PodDisruptionBudgets (the plan they would allow), stopped by a failed move.
DEFRAG_RUN_RESULTS = ("moved", "dry_run", "no_plan", "budget", "blocked", "failed")
# What a move ended in: made and settled, only named, or failed (refused, blocked, not acknowledged, not settled).
DEFRAG_MOVE_RESULTS = ("done", "dry_run", "blocked", "failed")
# From Pending to Running of a rescued pod: the scheduler's backoff plus the moves' own round trips.
RESCUE_BUCKETS = (10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)


class DefragMetrics:
    """The defragmentation controller's metrics, on the server's registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.policy_valid = Gauge(
            "hami_place_defrag_policy_valid",
            "1 when the DefragPolicy was read and parsed; 0 when missing or invalid (the controller moves nothing).",
            registry=registry,
        )
        self.leader = Gauge(
            "hami_place_defrag_leader", "1 while this replica holds the defragmentation lease.", registry=registry
        )
        self.runs = Counter(
            "hami_place_defrag_runs",
            "Defragmentation runs, by trigger and result.",
            ["trigger", "result"],
            registry=registry,
        )
        for trigger in DEFRAG_TRIGGERS:
            for result in DEFRAG_RUN_RESULTS:
                self.runs.labels(trigger, result)
        self.moves = Counter("hami_place_defrag_moves", "Moves, by result.", ["result"], registry=registry)
        for result in DEFRAG_MOVE_RESULTS:
            self.moves.labels(result)
        self.rescued = Counter(
            "hami_place_defrag_rescued_pods", "Pending pods that ran after a rescue's moves.", registry=registry
        )
        self.room_lost = Counter(
            "hami_place_defrag_room_lost",
            "Rescues whose pod the scheduler refused again after the moves (another pod took the room).",
            registry=registry,
        )
        self.rescue_seconds = Histogram(
            "hami_place_defrag_rescue_seconds",
            "Seconds from Pending to scheduled for each rescued pod.",
            buckets=RESCUE_BUCKETS,
            registry=registry,
        )
        self.budget_left = Gauge(
            "hami_place_defrag_budget_left_moves",
            "Moves the budgets still allow now, by window (run: budgets.movesPerRun, hour: budgets.movesPerHour).",
            ["window"],
            registry=registry,
        )
