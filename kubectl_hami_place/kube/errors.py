"""Typed errors of the Kubernetes adapters: callers catch one family and print one line, never a traceback.

An error carries the cause in words and, when the API server answered, its HTTP status and Status reason and the
action tried; what a person should do next is the caller's to say (the CLI's words are not the server's logs').
`str()` is the cause.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kubectl_hami_place.core.pin_check import PinVerdict


class KubeError(Exception):
    """Base of every error a Kubernetes adapter raises: the cause, the API server's status code and reason (0 and ""
    when it did not answer), and the action tried (`create hamipodplacements in namespace team-a`)."""

    def __init__(self, cause: str, *, status: int = 0, reason: str = "", action: str = "") -> None:
        super().__init__(cause)
        self.cause = cause
        self.status = status
        self.reason = reason
        self.action = action

    def __str__(self) -> str:
        return self.cause


class KubeConfigError(KubeError):
    """The kubeconfig is missing, unreadable, or names no such context."""


class KubeUnreachable(KubeError):
    """The API server did not answer: connection refused, TLS failure, timeout, unknown host."""


class KubeUnauthorized(KubeError):
    """The API server did not accept the credentials (401)."""


class KubeForbidden(KubeError):
    """RBAC denies the request (403)."""


class WebhookRefused(KubeForbidden):
    """The webhook itself refused the read (401/403 with its reason), not the API server."""


class KubeNotFound(KubeError):
    """The object, or the resource type itself (a CRD not installed), does not exist (404)."""


class KubeTypeMissing(KubeNotFound):
    """The API server does not serve the resource type at all (404 naming no object): a CRD not installed."""


class KubeConflict(KubeError):
    """The object already exists or changed under us (409)."""


class PlacementTaken(KubeConflict):
    """A placement already holds a move's name and is not an earlier attempt of that move: it is left as it is."""


class KubeInvalid(KubeError):
    """The API server refused the object: schema, CEL rule or admission webhook (400, 422, admission 403)."""


class PathError(KubeInvalid):
    """A value meant as one segment of an API path (a name, a namespace) would be several, or a step up."""


class KubeServerError(KubeError):
    """The API server or a component behind it failed (429 outside eviction, 5xx)."""


class BlockedByDisruptionBudget(KubeError):
    """An eviction was refused (429) because PodDisruptionBudget(s) allow no disruption of the pod right now."""

    def __init__(self, namespace: str, pod: str, budgets: tuple[str, ...], cause: str) -> None:
        super().__init__(cause, status=429, reason="TooManyRequests")
        self.namespace = namespace
        self.pod = pod
        self.budgets = budgets


class PodGone(KubeNotFound):
    """The pod to move no longer exists."""


class PodReplaced(KubeNotFound):
    """The pod of that name is not the one meant (its UID precondition failed): the pod meant is gone."""


class PodProtected(KubeError):
    """The pod to move was annotated do-not-move since the plan: it is not evicted."""


class NoReplacement(KubeError):
    """The pod has no controller and no labels: no selector can match the pod that would replace it."""


class NotAcknowledged(KubeError):
    """The webhook did not acknowledge a new placement in time, so the pod was not evicted."""


class PinRefused(KubeError):
    """The core's pin check found problems with a pin (raised only when it did): the verdict carries them, the
    caller words them."""

    def __init__(self, pin: PinVerdict, source: str, evicting: str | None) -> None:
        super().__init__("; ".join(dict.fromkeys(problem.message for problem in pin.problems)))
        self.verdict = pin
        self.source = source
        self.evicting = evicting
