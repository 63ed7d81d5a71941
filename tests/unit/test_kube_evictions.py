"""How a refused eviction (429) names the PodDisruptionBudget that blocked it, on the API server's Status as it sends
it and budgets as listed (plain data, no server: which budget a real server names is tested in
tests/cluster/test_cli_evict.py), and which 409 reads as the pod re-created under its name."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from kubectl_hami_place.kube.client import Kube, api_error_causes
from kubectl_hami_place.kube.errors import KubeError, PodReplaced
from kubectl_hami_place.kube.evictions import blocked_by, evict_pod

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


def refusing_kube(message: str) -> Kube:
    """A client whose Eviction API answers 409 with this Status message."""

    class Core:
        def create_namespaced_pod_eviction(self, name: str, namespace: str, body: object, **kwargs: Any) -> None:
            refused = ApiException(status=409, reason="Conflict")
            refused.body = json.dumps({"kind": "Status", "code": 409, "reason": "Conflict", "message": message})
            raise refused

    kube = Kube(ApiClient(), "default", "", None)
    object.__setattr__(kube, "core", Core)
    return kube


@pytest.mark.parametrize(
    ("message", "replaced"),
    [
        (
            'Operation cannot be fulfilled on Pod "web": the UID in the precondition (u-1) does not match the UID in '
            "record (u-2). The object might have been deleted and then recreated",
            True,
        ),
        (
            'Operation cannot be fulfilled on pods "web": Precondition failed: UID in precondition: u-1, UID in object '
            "meta: u-2",
            True,
        ),
        (
            'Operation cannot be fulfilled on poddisruptionbudgets.policy "web": the object has been modified; please '
            "apply your changes to the latest version and try again",
            False,
        ),
    ],
)
def test_only_a_failed_uid_precondition_reads_as_the_pod_re_created(message: str, replaced: bool) -> None:
    """The Eviction API answers 409 when its PodDisruptionBudget's update still conflicts after its retries, too;
    that was said to be a pod re-created under its name. A stand-in client answers here: the API server's own
    conflict of concurrent evictions cannot be had on demand (the UID precondition's is, in
    tests/cluster/test_cli_evict.py)."""
    with pytest.raises(KubeError) as raised:
        evict_pod(refusing_kube(message), "team-a", "web", uid="u-1")
    assert isinstance(raised.value, PodReplaced) is replaced
    assert raised.value.status == 409
