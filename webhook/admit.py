"""POST /mutate: the decision from the core, and the status writes it needs, done before the answer is sent."""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, cast

from kubectl_hami_place.core.admission import Decision, Settings, Snapshot, StatusWrite, decide, parse_review
from kubectl_hami_place.kube.claims import StaleWrite, read_placement, write_status
from kubectl_hami_place.kube.client import Kube
from kubectl_hami_place.kube.errors import KubeError
from kubectl_hami_place.kube.events import record_event
from webhook.cache import ClusterCache
from webhook.metrics import DRY_RUN, ERROR, Metrics

log = logging.getLogger(__name__)

# A claim that keeps losing races (several replicas, several placements) gives up and admits the pod unchanged.
MAX_CLAIM_ATTEMPTS = 8


class Admitter:
    """Answers AdmissionReviews from the shared cache; writes claims and failures guarded by resourceVersion."""

    def __init__(
        self,
        kube: Kube,
        cache: ClusterCache,
        settings: Settings,
        metrics: Metrics,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        new_token: Callable[[], str] = lambda: secrets.token_hex(16),
    ) -> None:
        self.kube = kube
        self.cache = cache
        self.settings = settings
        self.metrics = metrics
        self.clock = clock
        self.new_token = new_token

    def admit(self, body: object) -> dict[str, Any]:
        """The AdmissionReview answer; ReviewError (a 400) propagates for a malformed body, nothing else does."""
        started = time.perf_counter()
        review = parse_review(body)
        try:
            decision = self._decide(cast(dict[str, Any], body), review.namespace)
            result = DRY_RUN if review.dry_run and decision.placement else decision.result
        except Exception:
            # A fault of ours never blocks a pod: admit it unchanged, and say so.
            log.exception("admission %s failed; admitting the pod unchanged", review.uid)
            decision = Decision(
                uid=review.uid, result=ERROR, warnings=("hami-place: internal error, the pod is admitted unchanged",)
            )
            result = ERROR
        self.metrics.admissions.labels(result).inc()
        self.metrics.latency.observe(time.perf_counter() - started)
        return decision.response()

    def _decide(self, body: dict[str, Any], namespace: str) -> Decision:
        if not self.cache.ready():
            return Decision(
                uid=str(body["request"]["uid"]),
                result=ERROR,
                warnings=("hami-place: the webhook's cache is not synced yet; the pod is admitted unchanged",),
            )
        token = self.new_token()
        decision = decide(body, self._snapshot(namespace, token))
        for _ in range(MAX_CLAIM_ATTEMPTS):
            for failure in decision.failures:
                self._write(failure)
            claim = decision.claim
            if claim is None:
                return decision
            try:
                self._write(claim, raise_stale=True)
            except StaleWrite:
                self.metrics.conflicts.inc()
                self._refresh(claim.namespace, claim.name)
                decision = decide(body, self._snapshot(namespace, token))
                continue
            except KubeError as error:
                log.warning("claim of %s/%s not written: %s", claim.namespace, claim.name, error)
                return decision.unchanged(
                    f"hami-place: could not record the claim of placement {claim.name} "
                    f"({error.cause}); the pod is admitted unchanged"
                )
            self.metrics.claims.inc()
            return decision
        return decision.unchanged("hami-place: too many concurrent claims; the pod is admitted unchanged")

    def _snapshot(self, namespace: str, token: str) -> Snapshot:
        return Snapshot(
            placements=self.cache.placements_in(namespace),
            nodes=self.cache.nodes_by_name(),
            settings=self.settings,
            token=token,
            now=self.clock(),
        )

    def _refresh(self, namespace: str, name: str) -> None:
        """After a conflict, replace the cache's stale copy with the API server's current one."""
        try:
            fresh = read_placement(self.kube, namespace, name)
        except KubeError as error:
            log.warning("re-reading placement %s/%s failed: %s", namespace, name, error)
            return
        if fresh is None:
            self.cache.placements.remove(namespace, name)
        else:
            self.cache.placements.upsert(fresh)

    def _write(self, write: StatusWrite, *, raise_stale: bool = False) -> dict[str, Any] | None:
        """Write one status (guarded by its resourceVersion), update the cache, record the Event."""
        current = self.cache.placements.get(write.namespace, write.name) or {
            "metadata": {"namespace": write.namespace, "name": write.name}
        }
        try:
            stored = write_status(self.kube, current, write.status, write.resource_version)
        except StaleWrite:
            if raise_stale:
                raise
            log.info("status of %s/%s changed meanwhile; %s not recorded", write.namespace, write.name, write.reason)
            self._refresh(write.namespace, write.name)
            return None
        except KubeError as error:
            if raise_stale:
                raise
            log.warning("status of %s/%s not written: %s", write.namespace, write.name, error)
            return None
        self.cache.placements.upsert(stored)
        record_event(self.kube, stored, write.reason, write.message, warning=write.warning)
        return stored
