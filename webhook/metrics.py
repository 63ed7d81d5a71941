"""Prometheus metrics of the webhook, on their own registry; every label takes a small fixed set of values."""

from __future__ import annotations

import gc
import platform
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from typing import Any

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from kubectl_hami_place import __version__
from kubectl_hami_place.core.admission import RESULTS
from kubectl_hami_place.core.allocations import ALLOCATED_ANNOTATION, NODE_ANNOTATION, parse_allocation
from kubectl_hami_place.core.errors import AllocationError
from kubectl_hami_place.core.names import ATTEMPT_RESULTS, CLAIM_ANNOTATION, ENDED_PHASES, PLACEMENT_ANNOTATION, Phase
from kubectl_hami_place.core.placement import Placement
from kubectl_hami_place.kube.watch import Reflector
from webhook.cache import ClusterCache
from webhook.tls import ReloadingCertificate

CACHE_KINDS = ("nodes", "pods", "placements")
# Admission results beyond the decision's own: a body we refused, an internal error answered with "allowed".
INVALID = "invalid"
# Pauses worth telling apart: a young collection takes microseconds, a full one over a large heap tens of ms.
PAUSE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
ERROR = "error"
DRY_RUN = "dry_run"
# The serving certificate's notAfter (Unix seconds): the PrometheusRule's expiry alert reads it.
CERT_EXPIRY_METRIC = "hami_place_serving_certificate_not_after_timestamp_seconds"
# Why the HTTPS listener closed a connection unasked.
REFUSED_NAME = "client-certificate-name"
REFUSED_CAP = "over-cap"
REFUSED_HEADER = "header-too-large"
REFUSED_BODIES = "bodies-over-budget"
REFUSALS = (REFUSED_NAME, REFUSED_CAP, REFUSED_HEADER, REFUSED_BODIES)


class Metrics:
    """The counters, gauges and histogram the server updates; one instance per server."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        # The standard process_* (RSS, CPU, open fds), python_info and python_gc_* series, as the default registry has.
        for standard in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
            self.registry.register(standard)
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
        self.reconcile_passes = Histogram(
            "hami_place_reconcile_pass_seconds",
            "How long each reconcile pass held its thread: a full one asks every placement every 300 s (a resync), "
            "a queued one only the keys the work queue had ready.",
            ["kind"],
            buckets=PAUSE_BUCKETS,
            registry=self.registry,
        )
        self.loop_lag = Histogram(
            "hami_place_event_loop_lag_seconds",
            "How late the /mutate event loop ran a timer: time every admission on it waited for the process.",
            buckets=PAUSE_BUCKETS,
            registry=self.registry,
        )

        self.build = Info("hami_place_build", "The server's version and Python's (value 1).", registry=self.registry)
        self.build.info({"version": __version__, "python_version": platform.python_version()})

        self.certificate_not_after = Gauge(
            CERT_EXPIRY_METRIC,
            "When the certificate /mutate serves to new connections expires (Unix time).",
            registry=self.registry,
        )
        self.certificate_left = Gauge(
            "hami_place_serving_certificate_expiry_seconds",
            "Seconds until the certificate /mutate serves to new connections expires (negative once it has).",
            registry=self.registry,
        )

        self.connections = Gauge(
            "hami_place_webhook_connections",
            "Connections the HTTPS /mutate listener holds (TLS handshake done), at most --max-connections.",
            registry=self.registry,
        )
        self.connections_closed = Counter(
            "hami_place_webhook_connections_refused",
            "Connections the HTTPS listener closed unasked, by reason: client-certificate-name (signed by the client "
            "CA but not named as --client-cert-name), over-cap (the oldest connection that had carried no review, "
            "to make room at --max-connections), header-too-large, bodies-over-budget.",
            ["reason"],
            registry=self.registry,
        )
        for reason in REFUSALS:
            self.connections_closed.labels(reason)

        self.crd_fields_pruned = Gauge(
            "hami_place_crd_fields_pruned",
            "Fields this server writes on placements that the installed HamiPodPlacement CRD's schema drops (the CRD "
            "is older than the server); NaN while the CRD cannot be read.",
            registry=self.registry,
        )

        self.defrag = DefragMetrics(self.registry)

    def watch_cache(self, cache: ClusterCache) -> None:
        """Report what the cache takes in and holds: each kind's sync age and events, the placements by phase and
        the cards of the pinned pods (the pods carrying a claim)."""
        for reflector in cache.reflectors():
            self.watch_sync_age(reflector)
            self.count_events(reflector)
        self.watch_placements(cache.parsed_placements, lambda: cache.pods_by_claim().values())

    def watch_placements(
        self, placements: Callable[[], Iterable[Placement]], pinned_pods: Callable[[], Iterable[Mapping[str, Any]]]
    ) -> None:
        """Report the placements by phase and the cards of pinned pods, read at scrape time."""
        self.registry.register(CacheCollector(placements, pinned_pods))

    def watch_certificate(self, certificate: ReloadingCertificate) -> None:
        """Report the served certificate's expiry at scrape time (after the reload a rotation may be waiting for)."""
        self.certificate_left.set_function(certificate.seconds_left)
        self.certificate_not_after.set_function(certificate.expires_at)

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
# The kinds of keys in the controller's work queue.
DEFRAG_KEY_KINDS = ("pod", "keep_room", "policy", "resume")
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
        self.looks = Counter(
            "hami_place_defrag_looks",
            "Keys of the controller's work queue looked at, by kind (a Pending pod, keep-room, the policy, a new "
            "leader's resume); a look at a pod or keep-room reads the watch caches, not the API server.",
            ["key"],
            registry=registry,
        )
        for kind in DEFRAG_KEY_KINDS:
            self.looks.labels(kind)
        self.budget_left = Gauge(
            "hami_place_defrag_budget_left_moves",
            "Moves the budgets still allow now, by window (run: budgets.movesPerRun, hour: budgets.movesPerHour).",
            ["window"],
            registry=registry,
        )
        self.refused_cards = Gauge(
            "hami_place_defrag_refused_cards",
            "Cards this leader's plans leave out until the cooldown ends: HAMi did not give them a given-up move's "
            "pinned replacement.",
            registry=registry,
        )
        self.watch_forbidden = Gauge(
            "hami_place_defrag_watch_forbidden",
            "1 while the API server forbids the controller's watch of this kind of object (RBAC): plans go on "
            "without claims, volumes, storage classes, CSI drivers and capacities, or namespaces (what needs them "
            "stays unread), and wait for any other.",
            ["kind"],
            registry=registry,
        )


class CacheCollector(Collector):
    """What the cache holds, counted when Prometheus scrapes: a gauge of placements by phase is the cache's count,
    never a sum of transitions that a restart or a missed event would skew."""

    def __init__(
        self, placements: Callable[[], Iterable[Placement]], pinned_pods: Callable[[], Iterable[Mapping[str, Any]]]
    ) -> None:
        self.placements = placements
        self.pinned_pods = pinned_pods

    def collect(self) -> Iterator[Metric]:
        """`hami_place_placements{phase}` and `hami_place_pinned_card_info{...,node,device_uuid}`."""
        by_phase = GaugeMetricFamily("hami_place_placements", "Placements in the cache, by phase.", labels=["phase"])
        for phase, count in phase_counts(self.placements()).items():
            by_phase.add_metric([phase], count)
        yield by_phase
        cards = GaugeMetricFamily(
            "hami_place_pinned_card_info",
            "1 for each card HAMi allocated to a running pinned pod; node and device_uuid as HAMi's hami_gpu_* name "
            "them, so the two join.",
            labels=PINNED_CARD_LABELS,
        )
        held = {(p.namespace, p.name, p.status.claim_token) for p in self.placements() if p.status.claim_token}
        for labels in pinned_cards(self.pinned_pods(), held):
            cards.add_metric(list(labels), 1)
        yield cards


PINNED_CARD_LABELS = ["placement_namespace", "placement", "node", "device_uuid"]
MAX_CARDS_A_POD = 64
"""The most cards one pinned pod's series name (HAMi gives a container at most a node's cards)."""


def phase_counts(placements: Iterable[Placement]) -> dict[str, int]:
    """How many placements are in each phase, every phase named (0 included)."""
    counts = dict.fromkeys((phase.value for phase in Phase), 0)
    for placement in placements:
        counts[placement.status.phase.value] += 1
    return counts


def pinned_cards(
    pods: Iterable[Mapping[str, Any]], held: Collection[tuple[str, str, str]]
) -> list[tuple[str, str, str, str]]:
    """(namespace, placement, node, card UUID) of each card HAMi allocated to a pinned pod that has not ended, by
    its annotations, at most MAX_CARDS_A_POD of them; a pod HAMi has not placed yet, whose allocation it could not
    read, or whose claim no stored placement holds (`held`: namespace, name, claim token), holds none: the series
    are the server's pins, not what a pod's editor writes."""
    found: list[tuple[str, str, str, str]] = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        ended = (pod.get("status") or {}).get("phase") in ENDED_PHASES or meta.get("deletionTimestamp")
        node = annotations.get(NODE_ANNOTATION) or (pod.get("spec") or {}).get("nodeName")
        claim = (meta.get("namespace"), annotations.get(PLACEMENT_ANNOTATION), annotations.get(CLAIM_ANNOTATION))
        if ended or not node or claim not in held:
            continue
        try:
            containers = parse_allocation(annotations.get(ALLOCATED_ANNOTATION))
        except AllocationError:
            continue
        uuids = list(dict.fromkeys(device.uuid for devices in containers for device in devices if device.uuid))
        placement = str(annotations[PLACEMENT_ANNOTATION])
        found.extend((str(meta.get("namespace") or ""), placement, str(node), uuid) for uuid in uuids[:MAX_CARDS_A_POD])
    return found
