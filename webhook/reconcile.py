"""The background loop: tie claims to stored pods, release claims no pod carried, evict, retry, expire.

Every replica runs it. Each step is a status write guarded by the resourceVersion it was decided on, so when two
replicas decide the same step only one write lands; an eviction is attempted only by the replica whose lease
(the attempt counter, written first) landed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kubectl_hami_place.core.admission import FollowUp, consumed_req_ids, eviction_outcome, follow_up
from kubectl_hami_place.kube.claims import StaleWrite, write_status
from kubectl_hami_place.kube.client import Kube
from kubectl_hami_place.kube.errors import BlockedByDisruptionBudget, KubeError, KubeNotFound
from kubectl_hami_place.kube.events import record_event
from kubectl_hami_place.kube.evictions import evict_pod
from webhook.cache import ClusterCache
from webhook.metrics import Metrics

log = logging.getLogger(__name__)

PERIOD_SECONDS = 2.0
# How long a claim may wait for its pod to be stored: longer than the API server's longest admission (30 s).
CLAIM_GRACE_SECONDS = 60


class Reconciler:
    """Runs `follow_up` over every cached placement whenever the cache changes, and at least every 2 seconds."""

    def __init__(
        self,
        kube: Kube,
        cache: ClusterCache,
        metrics: Metrics,
        ttl_seconds: int,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.kube = kube
        self.cache = cache
        self.metrics = metrics
        self.ttl_seconds = ttl_seconds
        self.clock = clock

    def run(self, stop: threading.Event) -> None:
        """Loop until stop is set."""
        while not stop.is_set():
            self.cache.changed.wait(PERIOD_SECONDS)
            self.cache.changed.clear()
            if stop.is_set() or not self.cache.ready():
                continue
            try:
                self.reconcile_once()
            except Exception:
                log.exception("reconcile pass failed")

    def reconcile_once(self) -> None:
        """One pass over every placement."""
        pods = self.cache.pods_by_claim()
        placements = self.cache.placements.items()
        consumed = consumed_req_ids(placements)
        for placement in placements:
            step = follow_up(placement, pods, self.clock(), self.ttl_seconds, CLAIM_GRACE_SECONDS, consumed=consumed)
            if step is not None:
                self._apply(placement, step)

    def _apply(self, placement: dict[str, Any], step: FollowUp) -> None:
        write = step.write
        try:
            stored = write_status(self.kube, placement, write.status, write.resource_version)
        except StaleWrite:
            return
        except KubeError as error:
            log.warning("status of %s/%s not written: %s", write.namespace, write.name, error)
            return
        self.cache.placements.upsert(stored)
        if write.reason == "Expired":
            self.metrics.expirations.inc()
        if not step.evict:
            record_event(self.kube, stored, write.reason, write.message, warning=write.warning)
            return
        result, message = self._evict(write.namespace, step.evict)
        self.metrics.evictions.labels(result).inc()
        outcome = eviction_outcome(stored, result, message, self.clock())
        try:
            final = write_status(self.kube, stored, outcome.status, outcome.resource_version)
        except (StaleWrite, KubeError) as error:
            log.warning("eviction result of %s/%s not recorded: %s", write.namespace, write.name, error)
            return
        self.cache.placements.upsert(final)
        record_event(self.kube, final, outcome.reason, outcome.message, warning=outcome.warning)

    def _evict(self, namespace: str, pod: str) -> tuple[str, str]:
        """(result, message) of one eviction through the Eviction API."""
        try:
            evict_pod(self.kube, namespace, pod)
        except KubeNotFound:
            return "NotFound", f"pod {pod} was already gone"
        except BlockedByDisruptionBudget as error:
            return "Blocked", error.cause
        except KubeError as error:
            return "Failed", error.cause
        return "Evicted", f"evicted pod {pod}"
