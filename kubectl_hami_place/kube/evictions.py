"""Evictions through the Eviction API (`policy/v1`), which honours PodDisruptionBudgets; pods are never deleted.

A 429 means a budget allows no disruption right now. Its message does not name the budget; the Status's causes do
("The disruption budget web needs 2 healthy pods and has 2 currently"), and the budgets are read for their counts.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kubectl_hami_place.core.errors import SelectorError
from kubectl_hami_place.core.selectors import budget_selector, matches
from kubectl_hami_place.kube.client import (
    DEFAULT_TIMEOUT,
    Kube,
    api_error_causes,
    api_error_message,
    translate_api_error,
    translate_connection_error,
)
from kubectl_hami_place.kube.cluster_reads import get_pod, list_disruption_budgets
from kubectl_hami_place.kube.errors import BlockedByDisruptionBudget, KubeError, KubeNotFound, PodReplaced
from kubectl_hami_place.kube.pods import change_pod

# How the Eviction API names a budget in a 429's causes (kubernetes pkg/registry/core/pod/storage/eviction.go; v1.24
# writes "needs N healthy pods", later releases such as v1.37 also "does not allow evicting pods currently ...").
_BUDGET_IN_CAUSE = re.compile(r"^The disruption budget (\S+) (?:needs|does not allow)")


# How the API server words a failed UID precondition on an eviction (eviction.go: "the UID in the precondition (X)
# does not match the UID in record (Y)"; the pod's deletion: "Precondition failed: UID in precondition: X, ..."); its
# other 409s, a PodDisruptionBudget's update conflicting still after its retries, say nothing of the pod's identity.
_UID_PRECONDITION = re.compile(r"UID in (?:the )?precondition")


def evict_pod(kube: Kube, namespace: str, name: str, dry_run: bool = False, uid: str = "") -> None:
    """Asks the API server to evict the pod; `BlockedByDisruptionBudget` on 429, `KubeNotFound` when it is gone.

    With `uid`, only the pod of that identity is evicted (a precondition checked by the API server): a pod
    re-created under the same name answers 409, raised as `PodReplaced`.
    """
    options = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid)) if uid else None
    body = client.V1Eviction(
        api_version="policy/v1",
        kind="Eviction",
        metadata=client.V1ObjectMeta(name=name, namespace=namespace),
        delete_options=options,
    )
    kwargs: dict[str, Any] = {"_request_timeout": DEFAULT_TIMEOUT, "_preload_content": False}
    if dry_run:
        kwargs["dry_run"] = "All"
    try:
        kube.core().create_namespaced_pod_eviction(name, namespace, body, **kwargs)
    except ApiException as exc:
        if exc.status == 429:
            raise _blocked(kube, namespace, name, exc) from exc
        if exc.status == 409 and uid and _UID_PRECONDITION.search(api_error_message(exc)):
            raise PodReplaced(
                f"pod {namespace}/{name} is no longer the pod {uid} meant (re-created under the same name)", status=409
            ) from exc
        if exc.status == 404:
            raise KubeNotFound(f"pod {name} not found in namespace {namespace}", status=404) from exc
        raise translate_api_error(exc, kube, f"create pods/eviction in namespace {namespace}") from exc
    except urllib3.exceptions.HTTPError as exc:
        raise translate_connection_error(exc, kube) from exc


def release_from_wait(kube: Kube, namespace: str, name: str, uid: str, *, gate: str, annotation: str) -> bool:
    """Removes `gate` from the pod's scheduling gates and `annotation` from its annotations by a JSON patch made by
    diff, guarded by the pod's UID and its gates as read (a pod replaced since, or whose gates changed, is left alone;
    the next pass reads it again): False when the pod is gone, another pod, or carries neither."""

    def released(pod: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]] | None:
        gates = (pod.get("spec") or {}).get("schedulingGates") or []
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        before: dict[str, Any] = {}
        after: dict[str, Any] = {}
        tests = []
        if {"name": gate} in gates:
            before["spec"] = {"schedulingGates": gates}
            after["spec"] = {"schedulingGates": [entry for entry in gates if entry != {"name": gate}]}
            tests.append({"op": "test", "path": "/spec/schedulingGates", "value": gates})
        if annotation in annotations:
            before["metadata"] = {"annotations": {annotation: annotations[annotation]}}
            after["metadata"] = {"annotations": {}}
        return (before, after, tests) if before else None

    return change_pod(kube, namespace, name, uid, released) is not None


def budgets_for_pod(kube: Kube, pod: dict[str, Any]) -> list[dict[str, Any]]:
    """The PodDisruptionBudgets of the pod's namespace whose selector matches the pod's labels (`budget_selector`)."""
    metadata = pod.get("metadata") or {}
    labels = metadata.get("labels") or {}
    found = []
    for budget in list_disruption_budgets(kube, metadata.get("namespace", "")):
        try:
            selector = budget_selector(budget)
        except SelectorError:
            continue
        if selector is not None and matches(selector, labels):
            found.append(budget)
    return found


def _blocked(kube: Kube, namespace: str, name: str, exc: ApiException) -> BlockedByDisruptionBudget:
    """The refusal, naming the budget(s) that block the eviction, with their counts when they can be read."""
    try:
        budgets = budgets_for_pod(kube, get_pod(kube, namespace, name))
    except KubeError:
        budgets = []
    return blocked_by(namespace, name, api_error_message(exc), api_error_causes(exc), budgets)


def blocked_by(
    namespace: str, name: str, message: str, causes: Sequence[str], budgets: Sequence[dict[str, Any]]
) -> BlockedByDisruptionBudget:
    """The refusal of a 429: the budgets the server's `causes` name (it names the one that blocked, whatever its
    version reads a selector as), else the `budgets` matching the pod; each with its counts when one is named."""
    names = [found for cause in causes for found in _BUDGET_IN_CAUSE.findall(cause)]
    if names:
        budgets = [budget for budget in budgets if budget["metadata"]["name"] in names]
    else:
        names = [budget["metadata"]["name"] for budget in budgets]
    if not names:
        return BlockedByDisruptionBudget(
            namespace, name, (), f"eviction of pod {namespace}/{name} blocked by a PodDisruptionBudget: {message}"
        )
    details = [
        f"{status.get('currentHealthy', '?')} healthy, {status.get('desiredHealthy', '?')} required, "
        f"{status.get('disruptionsAllowed', 0)} disruption(s) allowed"
        for status in (budget.get("status") or {} for budget in budgets)
    ]
    label = "PodDisruptionBudget" if len(names) == 1 else "PodDisruptionBudgets"
    why = f" ({details[0]})" if len(names) == 1 and len(details) == 1 else ""
    return BlockedByDisruptionBudget(
        namespace, name, tuple(names), f"eviction of pod {namespace}/{name} blocked by {label} {', '.join(names)}{why}"
    )
