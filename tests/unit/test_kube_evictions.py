"""How a refused eviction (429) names the PodDisruptionBudget that blocked it, on the API server's Status as it sends
it and budgets as listed (plain data, no server: which budget a real server names is tested in
tests/cluster/test_cli_evict.py)."""

from __future__ import annotations

import json
from typing import Any

from kubernetes.client.exceptions import ApiException

from kubectl_hami_place.kube.client import api_error_causes
from kubectl_hami_place.kube.evictions import blocked_by

MESSAGE = "Cannot evict pod as it would violate the pod's disruption budget."


def budget(name: str, healthy: int) -> dict[str, Any]:
    """A budget as listed, with the disruption controller's counts."""
    status = {"currentHealthy": healthy, "desiredHealthy": 1, "disruptionsAllowed": healthy - 1}
    return {"metadata": {"name": name}, "status": status}


def test_the_budget_the_server_names_is_the_one_said_with_its_counts() -> None:
    """Two budgets match the pod and only one blocks: the server's cause names it, and it alone is said (a `{}`
    budget matches every pod on a current server, but not on one before Kubernetes 1.29)."""
    causes = ["The disruption budget keep-one needs 1 healthy pods and has 1 currently"]
    refused = blocked_by("team-a", "web-0", MESSAGE, causes, [budget("keep-all", 3), budget("keep-one", 1)])
    assert (refused.budgets, str(refused)) == (
        ("keep-one",),
        "eviction of pod team-a/web-0 blocked by PodDisruptionBudget keep-one "
        "(1 healthy, 1 required, 0 disruption(s) allowed)",
    )


def test_a_budget_a_later_server_says_does_not_allow_evicting_is_named_too() -> None:
    """Later releases (v1.37 here) name a budget whose sync failed by "does not allow evicting pods currently"."""
    causes = ["The disruption budget keep-one does not allow evicting pods currently because it failed sync: boom"]
    refused = blocked_by("team-a", "web-0", MESSAGE, causes, [])
    assert (refused.budgets, str(refused)) == (
        ("keep-one",),
        "eviction of pod team-a/web-0 blocked by PodDisruptionBudget keep-one",
    )


def test_without_causes_the_budgets_matching_the_pod_are_named_and_without_either_the_message_is_said() -> None:
    """A proxy may drop the Status details: the budgets read for the pod are named then; with neither, the
    refusal says the server's message rather than a name it does not know."""
    both = blocked_by("team-a", "web-0", MESSAGE, [], [budget("keep-all", 1), budget("keep-one", 1)])
    assert (both.budgets, str(both)) == (
        ("keep-all", "keep-one"),
        "eviction of pod team-a/web-0 blocked by PodDisruptionBudgets keep-all, keep-one",
    )
    unnamed = blocked_by("team-a", "web-0", MESSAGE, ["something else"], [])
    assert (unnamed.budgets, str(unnamed)) == (
        (),
        f"eviction of pod team-a/web-0 blocked by a PodDisruptionBudget: {MESSAGE}",
    )


def test_the_causes_are_read_from_the_status_body_the_api_server_sends() -> None:
    """The 429's body as kube-apiserver writes it: the causes' messages, in order; none from a body without them."""
    status = {
        "kind": "Status",
        "status": "Failure",
        "message": MESSAGE,
        "reason": "TooManyRequests",
        "details": {
            "causes": [
                {
                    "reason": "DisruptionBudget",
                    "message": "The disruption budget a needs 1 healthy pods and has 1 currently",
                },
                {"reason": "Other"},
            ]
        },
        "code": 429,
    }
    refused = ApiException(status=429, reason="Too Many Requests")
    refused.body = json.dumps(status).encode()
    assert api_error_causes(refused) == ["The disruption budget a needs 1 healthy pods and has 1 currently"]
    refused.body = json.dumps({"kind": "Status", "message": MESSAGE}).encode()
    assert api_error_causes(refused) == []
