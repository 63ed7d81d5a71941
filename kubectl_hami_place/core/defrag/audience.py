"""What a tenant reads of the controller: its Events on a pod land in the pod's namespace, where that namespace's
`view` role reads them, so they name no pod, PodDisruptionBudget, placement or namespace of another namespace; the
server's log keeps the whole text for the operator."""

from __future__ import annotations

import re
from collections.abc import Container, Iterable, Mapping
from typing import Any

OTHER_NAMESPACE = "another namespace"

_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
# "namespace X", or `ns/name` and the kind a message writes before it; a namespace is a DNS label, so `nvidia.com/gpu`
# is none. One pass, so that no replacement is read again.
_NAMED = re.compile(
    rf"(?<!another )\bnamespace (?P<alone>{_LABEL})(?![\w/-]|\.\w)"
    rf"|(?:\b(?P<kind>PodDisruptionBudget|placement|pod) )?(?<![\w.:/-])(?P<namespace>{_LABEL})/(?P<name>[\w.-]*\w)"
)

# A card's name after its node: `gpu-N`, or a UUID with capitals (HAMi's `GPU-...`), which no pod's name has.
_CARD = re.compile(r"gpu-[0-9]+|.*[A-Z].*")


def node_keys(nodes: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    """The nodes' label and taint keys that read as `ns/name` (a prefix with no dot): a taint `dedicated/gpu` named
    in a tenant's Event is the node's, not a pod of another namespace."""
    keys: set[str] = set()
    for node in nodes:
        labels = (node.get("metadata") or {}).get("labels") or {}
        taints = (node.get("spec") or {}).get("taints") or []
        keys.update(key for key in labels if isinstance(key, str))
        keys.update(t["key"] for t in taints if isinstance(t, Mapping) and isinstance(t.get("key"), str))
    return frozenset(key for key in keys if "/" in key and "." not in key.partition("/")[0])


def for_tenant(message: str, namespace: str, nodes: Container[str], keys: Container[str] = frozenset()) -> str:
    """The message as an Event on an object of `namespace` says it: each `ns/name` of another namespace becomes "a
    pod (or PodDisruptionBudget, placement) of another namespace", each "namespace X" "another namespace"; a card's
    `node/gpu-N` (or `node/<UUID>`) stays, for a node in `nodes`, and so does a node's label or taint key in `keys`
    (`node_keys`) that no kind names."""

    def seen(match: re.Match[str]) -> str:
        """One name, kept when it is the reader's own namespace's or a node's card."""
        if match["alone"] is not None:
            return match[0] if match["alone"] == namespace else OTHER_NAMESPACE
        if match["namespace"] == namespace or (match["namespace"] in nodes and _CARD.fullmatch(match["name"])):
            return match[0]
        if match["namespace"].isdigit() and match["name"].isdigit():
            return match[0]  # a count, as HAMi's fit writes "2/4 CardInsufficientMemory"
        if match["kind"] is None and f"{match['namespace']}/{match['name']}" in keys:
            return match[0]
        return f"a {match['kind'] or 'pod'} of {OTHER_NAMESPACE}"

    return _NAMED.sub(seen, message)


def failure_for_tenant(failure: str, failed: str, namespace: str, *, blocked: bool) -> str:
    """Why a run stopped, as the Event on a rescued pod of `namespace` says it: when the move of `failed` (`ns/name`,
    "" for no move) of another namespace failed, in words that name nothing of it, since the API's errors name its
    objects bare (a PodDisruptionBudget, a placement)."""
    if not failed or failed.split("/", 1)[0] == namespace:
        return failure
    if blocked:
        return f"a PodDisruptionBudget of {OTHER_NAMESPACE} refused the eviction of a pod of {OTHER_NAMESPACE}"
    return f"the move of a pod of {OTHER_NAMESPACE} failed"
