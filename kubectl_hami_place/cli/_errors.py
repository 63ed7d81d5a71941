"""The CLI's own errors and its exit codes: one place decides what number the shell sees."""

from __future__ import annotations

import re

from kubectl_hami_place.core.errors import clip
from kubectl_hami_place.core.names import WEBHOOK_SERVICE_LABEL
from kubectl_hami_place.kube.errors import (
    BlockedByDisruptionBudget,
    KubeConfigError,
    KubeConflict,
    KubeError,
    KubeForbidden,
    KubeInvalid,
    KubeNotFound,
    KubeServerError,
    KubeTypeMissing,
    KubeUnauthorized,
    KubeUnreachable,
    NoReplacement,
    NotAcknowledged,
    PathError,
    PlacementTaken,
    PodGone,
    PodReplaced,
    WebhookRefused,
)

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_REFUSED = 3
EXIT_BLOCKED = 4
EXIT_INTERRUPTED = 130

WORD_MAX = 256
"""The longest word an adapter's error keeps whole: its paths, URLs and names (at most 253 characters) fit."""

_WORD = re.compile(r"[^\s'\"]+")


class CliError(Exception):
    """A failure to report as `error: <cause>; <what to do>` lines with an exit code."""

    exit_code = EXIT_ERROR

    def __init__(self, cause: str, hint: str = "") -> None:
        super().__init__(cause)
        self.cause = cause
        self.hint = hint

    def lines(self) -> list[str]:
        """The lines to print after `error: `."""
        return [f"{self.cause}; {self.hint}" if self.hint else self.cause]


class UsageProblem(CliError):
    """The command line itself is wrong: a bad flag value, a malformed selector or card reference."""

    exit_code = EXIT_USAGE


class Refused(CliError):
    """The request is well-formed but the cluster's state says it cannot work; one line per reason."""

    exit_code = EXIT_REFUSED

    def __init__(self, reasons: list[str]) -> None:
        super().__init__(reasons[0] if reasons else "refused")
        self.reasons = reasons

    def lines(self) -> list[str]:
        """One line per failing check."""
        return list(self.reasons)


def kube_hint(error: KubeError) -> str:
    """What a person at the prompt should do about an adapter's error (the adapter says only what happened)."""
    if isinstance(error, BlockedByDisruptionBudget):
        where = f" (kubectl get pdb -n {error.namespace})" if error.budgets else ""
        return f"retry once more replicas are ready, or relax the budget{where}"
    if isinstance(error, NotAcknowledged):
        return f"check that it runs (kubectl get pods -A -l {WEBHOOK_SERVICE_LABEL}), then retry"
    if isinstance(error, NoReplacement):
        return "use kubectl hami-place pin -l for the pod you will create"
    if isinstance(error, PodReplaced):
        return "nothing to do: the pod meant is gone"
    if isinstance(error, PlacementTaken):
        return "read it (kubectl hami-place list); delete it if no one needs it (kubectl hami-place delete), re-run"
    if isinstance(error, WebhookRefused):
        return "check your rights with kubectl auth can-i list pods -A"
    if isinstance(error, KubeTypeMissing):
        if "hamipodplacement" in error.action:
            return (
                "install the HamiPodPlacement CRD: the server's chart, or kubectl apply -f the release's "
                "hamipodplacement-crd.yaml"
            )
        return "check that the API server serves this resource type"
    return _FAMILY_HINTS.get(type(error), "") or _server_hint(error)


def _server_hint(error: KubeError) -> str:
    """The words for a failure of the API server or the connection to it."""
    if isinstance(error, KubeForbidden):
        return f"ask your cluster admin for RBAC permission to {error.action}"
    if isinstance(error, KubeServerError) and error.status == 429:
        return "retry in a moment"
    if isinstance(error, KubeServerError) and error.status:
        return "retry, or check the server"
    if isinstance(error, KubeServerError | KubeUnreachable):
        return "check --kubeconfig/--context"
    return ""


_FAMILY_HINTS: dict[type[KubeError], str] = {
    KubeConfigError: "check --kubeconfig/--context or KUBECONFIG",
    KubeUnauthorized: "refresh the credentials of --context or pass another --kubeconfig",
    KubeNotFound: "check the name and the namespace (-n)",
    PodGone: "check the name and the namespace (-n)",
    KubeConflict: "pick another name or retry",
    KubeInvalid: "fix the request and retry",
    PathError: "give a Kubernetes name: lowercase letters, digits, '-' and '.'",
}


def kube_line(error: KubeError) -> str:
    """`<cause>; <what to do>`: an adapter's error as the CLI prints it."""
    hint = kube_hint(error)
    cause = clip_words(error.cause, WORD_MAX)
    return f"{cause}; {hint}" if hint else cause


def clip_words(text: str, limit: int = 80) -> str:
    """Each word (no spaces or quotes) cut at `limit`: click's and adapters' texts echo a user's value whole."""
    return _WORD.sub(lambda word: clip(word.group(), limit), text)
