"""The default of every `hami-place-webhook serve` flag, each written once with the reason for its value.

The flags (webhook/main.py) take their defaults and help text from here, `ServeOptions` its field defaults, and the
listener, the reconciler and the defragmentation controller theirs; the chart's values.yaml documents the same numbers
(tests/unit/test_webhook_settings.py holds them equal). Names the core shares come from core/names.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from kubectl_hami_place.core.names import SCHEDULER_NAME, WEBHOOK_API_PORT
from kubectl_hami_place.kube.leader import LEASE_DURATION_SECONDS


@dataclass(frozen=True)
class ServeDefaults:
    """What `serve` does when a flag is not given."""

    webhook_port: int = 8443
    """HTTPS port of /mutate: unprivileged, so the non-root container binds it; the chart's Service maps 443 to it."""
    api_port: int = WEBHOOK_API_PORT
    """HTTP port of the API, metrics and probes: the one the plugin looks for on the chart's Service."""
    probe_port: int = 8084
    """HTTP port of the kubelet's probes alone, beside the API's, so the API's clients cannot crowd the probes out."""
    bind_address: str = "0.0.0.0"
    """Every IPv4 address: the pod's IP is not known before it starts."""
    max_connections: int = 1024
    """HTTPS connections held at once, a bound on the fds a flood of clients can take: at the cap a new connection
    closes the oldest that carried no review yet (slow and idle clients go first; the API server's keep-alive
    connections, which carry reviews, stay); when every one has carried a review, the new one is closed."""
    admission_timeout: float = 10.0
    """Seconds each admission works within: Kubernetes' default timeoutSeconds for an admission webhook."""
    idle_timeout: float = 120
    """Seconds an HTTPS connection may send nothing: above the API server's 90 s, so the client closes first."""
    shutdown_grace: float = 15.0
    """Seconds after SIGTERM: a third for the Service's endpoints to move, the rest for admissions in flight."""
    hami_config_reread: float = 30.0
    """Seconds between reads of HAMi's device-config ConfigMap (one GET each): a change reaches admissions this late."""
    scheduler_name: str = SCHEDULER_NAME
    """The schedulerName of the pods pinned: HAMi's scheduler profile, as HAMi's chart names it."""
    placement_ttl: int = 3600
    """Seconds an unclaimed placement lives, and a blocked eviction keeps trying: an hour for the pod to come."""
    finished_ttl: int = 86400
    """Seconds a finished placement is kept before deletion: a day to read it, as a Job's ttlSecondsAfterFinished."""
    claim_grace: int = 120
    """Seconds a claim waits for its pod to be stored: twice the API server's longest admission (30 s) plus its
    default --request-timeout (60 s), so no pod still on its way to storage finds its claim released."""
    defrag_interval: float = 10.0
    """Seconds before the controller looks again at a Pending pod with no plan: short beside a Pending pod's wait."""
    defrag_move_timeout: float = 180.0
    """Seconds a move's replacement has to land on the target's cards before the run gives the move up and takes a
    replacement still Pending there away: three minutes cover the evicted pod's default grace, the new pod and HAMi's
    retries."""
    defrag_lease_duration: int = LEASE_DURATION_SECONDS
    """Seconds the controller's leader Lease holds unrenewed, as kube-scheduler's --leader-elect-lease-duration: a
    leader that died unannounced is replaced this late, and a shorter lease renews more often (every 2/15 of it)."""


DEFAULTS = ServeDefaults()
