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
ROOM_ANNOTATION = f"{GROUP}/room"
"""On a pod pinned by a placement that evicts, beside ROOM_GATE, until the evicted pod is gone. API servers before
1.27 drop the gate; taking this annotation off then is the pod update that makes kube-scheduler try the pod again at
once (before kubernetes#122019's fix, the evicted pod's deletion does not)."""
OUR_ANNOTATIONS = (PLACEMENT_ANNOTATION, REQ_ID_ANNOTATION, CLAIM_ANNOTATION, ROOM_ANNOTATION)
CLAIM_DIGEST_LABEL = f"{GROUP}/claim-digest"
"""On a pinned pod, a digest of its claim token: the pod carrying a token is found by a label selector."""
ROOM_GATE = f"{GROUP}/room"
"""The scheduling gate on a pod pinned by a placement that evicts, until the evicted pod is gone: HAMi counts that
pod's cards until then, so every earlier attempt fails (and, before kubernetes#122019's fix, waits minutes)."""
FORWARDED_TOKEN_HEADER = "X-Hami-Place-Authorization"
"""The plugin's bearer token, forwarded through the API server's service proxy (which strips `Authorization`)."""
USE_GPUUUID_ANNOTATION = "nvidia.com/use-gpuuuid"
NOUSE_GPUUUID_ANNOTATION = "nvidia.com/nouse-gpuuuid"
HOSTNAME_LABEL = "kubernetes.io/hostname"
ENDED_PHASES = frozenset({"Failed", "Succeeded"})
"""A pod's phases once its containers are done: kube-scheduler, HAMi and the kubelet count such a pod nowhere."""
NAME_LABEL = "app.kubernetes.io/name"
WEBHOOK_APP = "gpu-descheduler-webhook"
"""The chart's `app.kubernetes.io/name` of the server's pods, Service and Secret."""
WEBHOOK_SERVICE_LABEL = f"{NAME_LABEL}={WEBHOOK_APP}"
WEBHOOK_API_PORT = 8083
"""The server's HTTP API port, in its pod and on the chart's Service (the plugin's fallback when no port is named)."""
SCHEDULER_NAME = "hami-scheduler"
"""The schedulerName of the pods hami-place pins by default: HAMi's scheduler profile, as HAMi's chart names it."""

DEFRAG_RUN_LABEL = f"{GROUP}/defrag-run"
"""On a placement the defragmentation controller made: the id of the run that made it."""
DEFRAG_FROM_NODE_ANNOTATION = f"{GROUP}/defrag-from-node"
"""On a placement the controller made: the node the evicted pod ran on (the per-node budget counts moves off it)."""
DEFRAG_FROM_CARDS_ANNOTATION = f"{GROUP}/defrag-from-cards"
"""On a move's placement: the cards the evicted pod held, by register index (`gpu-1,gpu-2`), as the run planned."""
DEFRAG_TO_CARDS_ANNOTATION = f"{GROUP}/defrag-to-cards"
"""On a move's placement: its `spec.gpuDevices` cards by register index (`gpu-0`), as `defrag history` shows them."""
DEFRAG_LEASE = "hami-place-defrag-leader"
"""The coordination.k8s.io Lease, in the server's Lease namespace, whose holder is the acting controller."""
COMPONENT_LABEL = "app.kubernetes.io/component"
DEFRAG_POLICY_COMPONENT = "defrag-policy"
"""The component label value of the chart's DefragPolicy ConfigMap (the CLI finds it by this label)."""
DEFRAG_POLICY_KEY = "policy.yaml"
"""The ConfigMap data key holding the DefragPolicy document."""
DEFRAG_RESUME_ANNOTATION = f"{GROUP}/resume-mode"
"""On the policy ConfigMap while paused: the mode `defrag resume` restores."""
DEFRAG_LEASE_NAMESPACE_ANNOTATION = f"{GROUP}/lease-namespace"
"""On the chart's policy ConfigMap: where the leader Lease lives (`defrag status` reads it there; else the policy's)."""
DEFRAG_FORBIDDEN_WATCHES_ANNOTATION = f"{GROUP}/forbidden-watches"
"""On the leader Lease, written by its holder: the watches the API server forbids it (`defrag status` shows them)."""
DEFRAG_DECISIONS_ANNOTATION = f"{GROUP}/last-decisions"
"""On the leader Lease, written by its holder: its last decisions, newest first (`defrag status` shows them)."""
DEFRAG_POD_ANNOTATION = f"{GROUP}/defrag-pod"
"""On a move's placement: `namespace/name` of the pod the move evicts."""
DEFRAG_POD_UID_ANNOTATION = f"{GROUP}/defrag-pod-uid"
"""On a move's placement: the UID of the pod the move evicts (a run resumed by another leader checks it)."""
PLACEMENT_NAMESPACE_ANNOTATION = f"{GROUP}/placement-namespace"
"""On a reqID guard (a Lease in the server's Lease namespace): the namespace of the placement that holds it."""
DEFRAG_SEAL_ANNOTATION = f"{GROUP}/defrag-seal"
"""On a move's placement: when the controller made it and its seal over the move (`core.defrag.seal`)."""
ROOM_RESERVED_ANNOTATION = f"{GROUP}/room-reserved"
"""On a rescued Pending pod: the cards its rescue freed, kept for it until a deadline (`core.reservation`)."""
RESCUED_BY_ANNOTATION = f"{GROUP}/rescued-by"
"""On a rescued pod: the run whose moves made its room, written once the moved pods are gone. The update sends the
pod back to kube-scheduler; before kubernetes#122019's fix, a pod another plugin refused too (NodeAffinity, a taint)
was otherwise retried only at kube-scheduler's 5-minute sweep."""


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
