"""POST /mutate: parse the review once, decide from the cache, write the claim before the answer is sent.

Before a claim is written, the placement takes its reqID's guard at the API server (a create that succeeds once);
a placement whose reqID another placement holds is skipped for this pod, and nothing of its claim is written.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from kubectl_hami_place.core.admission import (
    AdmissionView,
    Decision,
    Settings,
    claimed_by_annotations,
    considered,
    decide,
)
from kubectl_hami_place.core.errors import clip
from kubectl_hami_place.core.fields import as_mapping
from kubectl_hami_place.core.k8s_names import is_object_name
from kubectl_hami_place.core.lifecycle import StatusWrite
from kubectl_hami_place.core.names import OUR_ANNOTATIONS
from kubectl_hami_place.core.node_resources import CountedPod
from kubectl_hami_place.core.placement import Placement
from kubectl_hami_place.core.reviews import Review, parse_review
from kubectl_hami_place.kube.claims import StaleWrite
from kubectl_hami_place.kube.client import Kube
from kubectl_hami_place.kube.errors import KubeError
from kubectl_hami_place.kube.watch import Reflector
from webhook.cache import COUNTED, ClusterCache
from webhook.metrics import DRY_RUN, ERROR, Metrics
from webhook.writes import KubeWrites, Writes

log = logging.getLogger(__name__)

# A claim that keeps losing races (several replicas, several placements) gives up and admits the pod unchanged.
MAX_CLAIM_ATTEMPTS = 8


class Admitter:
    """Answers AdmissionReviews from the shared cache; writes claims guarded by resourceVersion."""

    def __init__(
        self,
        kube: Kube | None,
        cache: ClusterCache,
        settings: Settings,
        metrics: Metrics,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        new_token: Callable[[], str] = lambda: secrets.token_hex(16),
        writes: Writes | None = None,
    ) -> None:
        if writes is None and kube is None:
            raise ValueError("an Admitter needs a Kube or its Writes")
        self.writes: Writes = writes if writes is not None else KubeWrites(kube)  # type: ignore[arg-type]
        self.cache = cache
        self.settings = settings
        self.metrics = metrics
        self.clock = clock
        self.new_token = new_token
        # The controller's watch of the other schedulers' bound pods (None while it does not run): what they ask of
        # a node counts in its room, which an admission checks before it pins a pod whose placement evicts one.
        self.other_pods: Reflector | None = None

    def admit(self, body: object) -> dict[str, Any]:
        """The AdmissionReview answer; ReviewError (a 400) propagates for a malformed body, nothing else does."""
        answer = self.admit_review(parse_review(body), time.perf_counter())
        assert answer is not None  # only a cache_only admission leaves it to a thread
        return answer

    def admit_review(self, review: Review, started: float, *, cache_only: bool = False) -> dict[str, Any] | None:
        """The answer to a parsed review; with `cache_only`, None when answering needs the API server (a claim, or
        a pod carrying our annotations): the event loop answers the rest itself and hands those to a thread."""
        try:
            decision = self._decide(review, cache_only=cache_only)
            if decision is None:
                return None
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

    def _decide(self, review: Review, *, cache_only: bool = False) -> Decision | None:
        if not self.cache.ready():
            warning = "hami-place: the webhook's cache is not synced yet; the pod is admitted unchanged"
            return Decision(uid=review.uid, result=ERROR, warnings=(warning,))
        carried: frozenset[str] = frozenset()
        holder, claimed_token = claimed_by_annotations(review) if considered(review, self.settings) else ("", "")
        if holder and cache_only:
            return None
        if holder:
            # Our annotations count only for the stored claim (the cache may lag) and only while no stored pod
            # carries it (a reinvocation comes before the pod is stored; a copy of a pinned pod comes after).
            self._refresh(review.namespace, holder)
            if self._carried(review.namespace, claimed_token):
                carried = frozenset({claimed_token})
        token = self.new_token()
        held: dict[str, str] = {}
        decision = decide(review, self._view(review, review.namespace, token, carried, held))
        if cache_only and decision.claim is not None:
            return None
        for _ in range(MAX_CLAIM_ATTEMPTS):
            claim = decision.claim
            if claim is None:
                return decision
            try:
                holder = self._req_id_holder(claim.placement)
                if holder:
                    self.metrics.conflicts.inc()
                    held[claim.placement.spec.req_id] = holder
                    decision = decide(review, self._view(review, review.namespace, token, carried, held))
                    continue
                self._write(claim)
            except StaleWrite:
                self.metrics.conflicts.inc()
                self._refresh(claim.namespace, claim.name)
                decision = decide(review, self._view(review, review.namespace, token, carried, held))
                continue
            except KubeError as error:
                log.warning("claim of %s/%s not written: %s", claim.namespace, claim.name, error)
                return decision.unchanged(
                    f"hami-place: could not record the claim of placement {claim.name} "
                    f"({error.cause}); the pod is admitted unchanged"
                )
            self.metrics.claims.inc()
            log_claim(review, claim)
            return decision
        return decision.unchanged("hami-place: too many concurrent claims; the pod is admitted unchanged")

    def _req_id_holder(self, placement: Placement) -> str:
        """'' when the placement holds its reqID's guard (created now, or earlier by it); else who holds it."""
        guard = self.writes.hold_req_id(placement)
        if guard.holder_uid == placement.uid:
            return ""
        # The Lease's annotation and holder go into the pod creator's warning: shown only as names and UIDs go.
        name = guard.holder_name if is_object_name(guard.holder_name) else "?"
        uid = guard.holder_uid if is_object_name(guard.holder_uid) else "?"
        return f"placement {name} ({uid})"

    def _view(
        self, review: Review, namespace: str, token: str, carried: frozenset[str], held: dict[str, str]
    ) -> AdmissionView:
        if any(key in review.annotations for key in OUR_ANNOTATIONS):
            placements = self.cache.parsed_placements(namespace)
        else:
            # Without our annotations the decision reads only the placements that may select the pod and the
            # claimed ones sharing their reqIDs: looked up by label, not scanned.
            labels = as_mapping(review.pod.get("metadata")).get("labels")
            placements = self.cache.placements_for(
                namespace, {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}
            )
        evicted = self._evicted(namespace, placements)
        return AdmissionView(
            placements=placements,
            nodes=self.cache.nodes_by_name(),
            settings=self.settings,
            token=token,
            now=self.clock(),
            carried=carried,
            pod_uids={name: str(pod["metadata"]["uid"]) for name, pod in evicted.items()},
            evicted_pods=evicted,
            node_pods=self._node_pods(placements, evicted),
            held_req_ids=held,
            reservations=self.cache.reservations(),
        )

    def _evicted(self, namespace: str, placements: list[Placement]) -> dict[str, dict[str, Any]]:
        """The cached pods (with a UID) the open placements name in evictPod: the pod a claim will evict, by
        identity, and what it gives back of its node's room."""
        evicted = {}
        for placement in placements:
            name = placement.spec.evict_pod
            if name and placement.open:
                pod = self.cache.pods.get(namespace, name)
                if pod is not None and as_mapping(pod.get("metadata")).get("uid"):
                    evicted[name] = pod
        return evicted

    def _node_pods(
        self, placements: list[Placement], evicted: dict[str, dict[str, Any]]
    ) -> dict[str, tuple[list[dict[str, Any]], list[CountedPod]]]:
        """The pods counted in the rooms of the nodes of the placements that evict a pod, when the server keeps what
        they ask: HAMi's pods (the cache keeps their requests while the controller plans) and the other schedulers'
        (the controller's watch, once it has listed). Read only for such a placement, which is rare."""
        nodes = {p.spec.node_name for p in placements if p.open and p.spec.evict_pod in evicted}
        others = self.other_pods
        if not nodes or others is None or not others.synced.is_set():
            return {}
        hami = [pod for pod in self.cache.pods.items() if as_mapping(pod.get("spec")).get("nodeName") in nodes]
        counted = [pod[COUNTED] for pod in others.items() if pod[COUNTED].node in nodes]
        return {node: (hami, counted) for node in nodes}

    def _carried(self, namespace: str, token: str) -> bool:
        """Whether a stored pod carries the token: the cache knows HAMi's pods, the API server every pod."""
        if (namespace, token) in self.cache.pods_by_claim():
            return True
        try:
            return self.writes.claim_carried(namespace, token)
        except KubeError as error:
            log.warning("looking up pods carrying a claim in %s failed: %s", namespace, error)
            return False

    def _refresh(self, namespace: str, name: str) -> None:
        """Replace the cache's copy of a placement with the API server's current one."""
        try:
            fresh = self.writes.read_placement(namespace, name)
        except KubeError as error:
            log.warning("re-reading placement %s/%s failed: %s", namespace, name, error)
            return
        if fresh is None:
            self.cache.placements.remove(namespace, name)
        else:
            self.cache.placements.upsert(fresh)

    def _write(self, write: StatusWrite) -> None:
        """Write the claim (guarded by its resourceVersion), update the cache, record the Event."""
        stored = self.writes.write_status(write.placement, write.status)
        self.cache.placements.upsert(stored)
        self.writes.record_event(stored, write.reason, write.message, warning=write.warning)


def log_claim(review: Review, claim: StatusWrite) -> None:
    """One log line per claim written: which placement, for which pod, asked by whom (the review's userInfo)."""
    metadata = review.pod.get("metadata")
    generate_name = metadata.get("generateName") if isinstance(metadata, dict) else None
    fields = {
        "event": "claim",
        "placement": f"{claim.namespace}/{claim.name}",
        "node": claim.placement.spec.node_name,
        "namespace": review.namespace,
        "pod": review.name,
        # The API server ignores it beside a name, unchecked: a forged one of megabytes made a line of megabytes.
        "generateName": clip(generate_name, 253) if isinstance(generate_name, str) else "",
        "user": review.user,
        "review": review.uid,
        "dryRun": review.dry_run,
    }
    log.info("placement claimed", extra={"fields": fields})
