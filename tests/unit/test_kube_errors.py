"""The adapters' typed errors: what each carries is what the CLI and the webhook print and decide on."""

from __future__ import annotations

from kubectl_hami_place.core.fit import FitReason
from kubectl_hami_place.core.pin_check import PinReason, PinVerdict, Problem, Scope
from kubectl_hami_place.kube.errors import BlockedByDisruptionBudget, KubeUnreachable, PinRefused


def test_an_error_the_api_server_did_not_answer_carries_no_status_reason_or_action() -> None:
    """Status 0 is how the CLI tells an unanswered request from a server failure (it words them differently), and no
    reason or action may be made up for a request the server never saw."""
    cause = "cannot reach the API server at https://10.0.0.1:6443: connection refused"
    error = KubeUnreachable(cause)
    assert (str(error), error.status, error.reason, error.action) == (cause, 0, "", "")


def test_a_blocked_eviction_carries_the_servers_answer_and_the_budgets_that_blocked_it() -> None:
    """The CLI names the budgets and the namespace to look in (`kubectl get pdb -n`), and a 429 must read as the
    API server's TooManyRequests, like any other error of the family, not as an answer-less failure."""
    cause = (
        "eviction of pod team-a/web-0 blocked by PodDisruptionBudget web "
        "(2 healthy, 2 required, 0 disruption(s) allowed)"
    )
    error = BlockedByDisruptionBudget("team-a", "web-0", ("web",), cause)
    assert (str(error), error.status, error.reason, error.action, error.namespace, error.pod, error.budgets) == (
        cause,
        429,
        "TooManyRequests",
        "",
        "team-a",
        "web-0",
        ("web",),
    )


def test_a_refused_pin_says_each_problem_once_and_keeps_the_verdict() -> None:
    """Two containers refused for the same reason must not repeat it on the one line printed; the CLI words each
    problem from the verdict, the workload and the pod evicted, so they travel with the error."""
    full = Problem(FitReason.CardInsufficientMemory, "GPU-0 has 0 MiB free, the pod asks 8192", Scope.Card)
    gone = Problem(PinReason.NodeNotFound, "node n-9 does not exist", Scope.Placement)
    verdict = PinVerdict("n-9", problems=(full, gone, full))
    error = PinRefused(verdict, "Deployment team-a/web", "web-0")
    assert (str(error), error.verdict, error.source, error.evicting) == (
        "GPU-0 has 0 MiB free, the pod asks 8192; node n-9 does not exist",
        verdict,
        "Deployment team-a/web",
        "web-0",
    )
