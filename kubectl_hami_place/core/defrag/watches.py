"""The watches the controller's plans go on without when the API server forbids them (RBAC), and what each then leaves
unread: the controller says it in its log, on its policy's ConfigMap and on its leader Lease, and `defrag status`
reads it back from the Lease, where the operator looks."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType

from kubectl_hami_place.core.attach_limits import UNREAD_LIMITS
from kubectl_hami_place.core.k8s_names import is_dns_label
from kubectl_hami_place.core.pod_affinity import UNREAD_NAMESPACES
from kubectl_hami_place.core.volumes import UNREAD_CAPACITIES, UNREAD_CLAIMS, UNREAD_CLASSES

UNREAD_WITHOUT_WATCH: Mapping[str, str] = MappingProxyType(
    {
        "persistentvolumeclaims": UNREAD_CLAIMS,
        "persistentvolumes": UNREAD_CLAIMS,
        "storageclasses": UNREAD_CLASSES,
        "csidrivers": UNREAD_CLASSES,
        "csistoragecapacities": UNREAD_CAPACITIES,
        "csinodes": UNREAD_LIMITS,
        "volumeattachments": UNREAD_LIMITS,
        "namespaces": UNREAD_NAMESPACES,
    }
)
"""The watches a plan goes on without, by the kind the controller watches, and what it then leaves unread."""
NOTHING_PLANNED = "nothing is planned until it is allowed"
RESOURCE_OF_WATCH: Mapping[str, str] = MappingProxyType({"other-pods": "pods", "configmap": "configmaps"})
"""The resource to grant for the watches whose kind is not the resource's own name."""
MAX_FORBIDDEN_READ = 32
"""The most forbidden watches read from a Lease: the controller keeps 15, so a longer list is not its own."""


def goes_without(kind: str) -> bool:
    """Whether a plan can go on while this watch is forbidden (else nothing is planned until it is allowed)."""
    return kind in UNREAD_WITHOUT_WATCH


def forbidden_watch_words(kind: str) -> str:
    """What a forbidden watch leaves unread and how to grant it, as the log, the Event and `defrag status` say it."""
    without = UNREAD_WITHOUT_WATCH.get(kind, NOTHING_PLANNED)
    return f"{without}; grant list and watch on {RESOURCE_OF_WATCH.get(kind, kind)} (the chart's ClusterRole does)"


def forbidden_watches_value(kinds: Iterable[str]) -> str:
    """The Lease annotation's value: the forbidden watches' kinds, sorted, comma-separated."""
    return ",".join(sorted(set(kinds)))


def forbidden_watches_of(value: object) -> tuple[str, ...]:
    """The kinds a Lease annotation names, each checked as a DNS label (a Lease is anyone's to write: nothing else
    reaches a terminal), at most MAX_FORBIDDEN_READ."""
    if not isinstance(value, str):
        return ()
    kinds = {kind.strip() for kind in value.split(",")}
    return tuple(sorted(kind for kind in kinds if is_dns_label(kind)))[:MAX_FORBIDDEN_READ]
