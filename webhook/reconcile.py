"""The background loop: tie claims to stored pods, release claims no pod carried, evict, retry, expire, fail.

Every replica runs it. Each step is a status write guarded by the resourceVersion it was decided on, so when two
replicas decide the same step only one write lands; an eviction is attempted only by the replica whose lease
(the attempt counter, written first) landed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime

from kubectl_hami_place.core.errors import PlacementError
from kubectl_hami_place.core.lifecycle import FollowUp, consumed_req_ids, eviction_outcome, follow_up
from kubectl_hami_place.core.names import EvictionResult
from kubectl_hami_place.core.placement import placement_from_object
from kubectl_hami_place.kube.claims import StaleWrite
from kubectl_hami_place.kube.client import Kube
from kubectl_hami_place.kube.errors import BlockedByDisruptionBudget, KubeError, KubeNotFound
from kubectl_hami_place.kube.evictions import PodReplaced
from webhook.cache import ClusterCache
from webhook.metrics import Metrics
from webhook.writes import KubeWrites, Writes

log = logging.getLogger(__name__)

PERIOD_SECONDS = 2.0
# How long a claim may wait for its pod to be stored: longer than the API server's longest admission (30 s).
CLAIM_GRACE_SECONDS = 60


class Reconciler:
    """Runs `follow_up` over every cached placement whenever the cache changes, and at least every 2 seconds."""

    def __init__(
        self,
        kube: Kube | None,
        cache: ClusterCache,
        metrics: Metrics,
        ttl_seconds: int,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        *,
        writes: Writes | None = None,
    ) -> None:
        if writes is None and kube is None:
            raise ValueError("a Reconciler needs a Kube or its Writes")
        self.writes: Writes = writes if writes is not None else KubeWrites(kube)  # type: ignore[arg-type]
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
        nodes = self.cache.nodes_by_name()
        placements = self.cache.parsed_placements()
        consumed = consumed_req_ids(placements)
        for placement in placements:
            step = follow_up(
                placement,
                pods,
                self.clock(),
                self.ttl_seconds,
                CLAIM_GRACE_SECONDS,
                consumed=consumed,
                nodes=nodes,
            )
            if step is not None:
                self._apply(step)

    def _apply(self, step: FollowUp) -> None:
        write = step.write
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
            self.writes.record_event(stored, write.reason, write.message, warning=write.warning)
            return
        result, message = self._evict(write.namespace, step.evict, step.evict_uid)
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
