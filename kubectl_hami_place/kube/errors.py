"""Typed errors of the Kubernetes adapters: callers catch one family and print one line, never a traceback.

Each error carries the cause and what to do about it separately, so a caller can reword either; `str()` joins them
as `<cause>; <what to do>`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kubectl_hami_place.core.plan import Plan


class KubeError(Exception):
    """Base of every error a Kubernetes adapter raises: the cause, and a hint on what to do."""

    def __init__(self, cause: str, hint: str = "") -> None:
        super().__init__(cause)
        self.cause = cause
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.cause}; {self.hint}" if self.hint else self.cause


class KubeConfigError(KubeError):
    """The kubeconfig is missing, unreadable, or names no such context."""


class KubeUnreachable(KubeError):
    """The API server did not answer: connection refused, TLS failure, timeout, unknown host."""


class KubeUnauthorized(KubeError):
    """The API server did not accept the credentials (401)."""


class KubeForbidden(KubeError):
    """RBAC denies the request (403)."""


class KubeNotFound(KubeError):
    """The object, or the resource type itself (a CRD not installed), does not exist (404)."""


class KubeConflict(KubeError):
    """The object already exists or changed under us (409)."""


class KubeInvalid(KubeError):
    """The API server refused the object: schema, CEL rule or admission webhook (400, 422, admission 403)."""


class KubeServerError(KubeError):
    """The API server or a component behind it failed (429 outside eviction, 5xx)."""


class BlockedByDisruptionBudget(KubeError):
    """An eviction was refused (429) because PodDisruptionBudget(s) allow no disruption of the pod right now."""

    def __init__(self, pod: str, budgets: tuple[str, ...], cause: str, hint: str) -> None:
        super().__init__(cause, hint)
        self.pod = pod
        self.budgets = budgets


class PodGone(KubeNotFound):
    """The pod to move no longer exists."""


class NoReplacement(KubeError):
    """The pod has no controller and no labels: no selector can match the pod that would replace it."""


class NotAcknowledged(KubeError):
    """The webhook did not acknowledge a new placement in time, so the pod was not evicted."""


class PinRefused(KubeError):
    """The core's plan found problems with a pin: the plan carries them, the caller words them."""

    def __init__(self, pin: Plan, source: str, evicting: str | None) -> None:
        super().__init__("; ".join(dict.fromkeys(problem.message for problem in pin.problems)) or "refused")
        self.plan = pin
        self.source = source
        self.evicting = evicting
