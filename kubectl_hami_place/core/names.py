"""Every name hami-place shares with the API server, HAMi and its own parts, defined once.

The CRD's group, version, plural and kind; the annotations the webhook writes on a placed pod; the phases and
eviction results of a placement's status (the CLI's columns and the server's metrics labels take their values
from here).
"""

from __future__ import annotations

from enum import StrEnum

GROUP = "scheduling.hami.placement.com"
VERSION = "v1"
PLURAL = "hamipodplacements"
KIND = "HamiPodPlacement"
API_VERSION = f"{GROUP}/{VERSION}"

PLACEMENT_ANNOTATION = f"{GROUP}/placement"
REQ_ID_ANNOTATION = f"{GROUP}/req-id"
CLAIM_ANNOTATION = f"{GROUP}/claim"
OUR_ANNOTATIONS = (PLACEMENT_ANNOTATION, REQ_ID_ANNOTATION, CLAIM_ANNOTATION)
CLAIM_DIGEST_LABEL = f"{GROUP}/claim-digest"
"""On a pinned pod, a digest of its claim token: the pod carrying a token is found by a label selector."""
USE_GPUUUID_ANNOTATION = "nvidia.com/use-gpuuuid"
HOSTNAME_LABEL = "kubernetes.io/hostname"


class Phase(StrEnum):
    """Where a placement is in its life: Pending until claimed, then Evicting or Consumed; Failed or Expired."""

    Pending = "Pending"
    Evicting = "Evicting"
    Consumed = "Consumed"
    Failed = "Failed"
    Expired = "Expired"


class EvictionResult(StrEnum):
    """Outcome of evicting `spec.evictPod`; Blocked is a PodDisruptionBudget refusal."""

    Pending = "Pending"
    Evicted = "Evicted"
    NotFound = "NotFound"
    Blocked = "Blocked"
    Failed = "Failed"


PHASES = tuple(Phase)
CLAIMED_PHASES = frozenset({Phase.Evicting, Phase.Consumed})
DONE_EVICTIONS = frozenset({EvictionResult.Evicted, EvictionResult.NotFound})
ATTEMPT_RESULTS = (EvictionResult.Evicted, EvictionResult.NotFound, EvictionResult.Blocked, EvictionResult.Failed)
"""What one eviction attempt can end in (Pending is only the state before the first)."""
