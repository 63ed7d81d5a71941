"""Prometheus metrics of the webhook, on their own registry; every label takes a small fixed set of values."""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from kubectl_hami_place.core.admission import RESULTS
from kubectl_hami_place.core.names import ATTEMPT_RESULTS
from kubectl_hami_place.kube.watch import Reflector

CACHE_KINDS = ("nodes", "pods", "placements")
# Admission results beyond the decision's own: a body we refused, an internal error answered with "allowed".
INVALID = "invalid"
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

    def watch_sync_age(self, reflector: Reflector) -> None:
        """Report the age of a reflector's last sync at scrape time."""

        def age() -> float:
            stamp = reflector.last_sync
            return float("inf") if stamp is None else max(0.0, time.time() - stamp)

        self.sync_age.labels(reflector.kind).set_function(age)
