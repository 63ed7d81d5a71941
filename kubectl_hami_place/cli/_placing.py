"""What `pin` and `evict --to-node` share: parse the flags, read a snapshot of the cluster, call `core.plan`.

Nothing is written here: the verbs create the object only after `check_placement` returned without refusing;
`_placed` words the outcome. `await_acknowledgement` is what `evict --to-node` and `apply` wait for between
creating the placement and evicting the pod.
"""

from __future__ import annotations

import secrets
import string
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any

import typer

from kubectl_hami_place.cli._errors import CliError, Refused, UsageProblem
from kubectl_hami_place.cli._placed import Checked, refusal_line
from kubectl_hami_place.core.errors import CardRefError, ModelError, PlacementError, SelectorError
from kubectl_hami_place.core.hami_config import HamiConfig
from kubectl_hami_place.core.placement import (
    PlacementSpec,
    placement_from_object,
    placement_object,
    placements_from_objects,
    validate_spec,
)
from kubectl_hami_place.core.plan import (
    ClusterSnapshot,
    Workload,
    eviction_warnings,
    pending_warnings,
    plan,
    workload_from_pod,
    workload_from_request,
)
from kubectl_hami_place.core.refs import CardRef, parse_card_ref
from kubectl_hami_place.core.requests import card_request
from kubectl_hami_place.core.selectors import LabelSelector, matches, parse_selector_string, selector_from_dict
from kubectl_hami_place.core.usage import PodAllocation, pod_allocation
from kubectl_hami_place.kube import cluster, placements
from kubectl_hami_place.kube.client import Kube
from kubectl_hami_place.kube.errors import KubeForbidden, KubeNotFound
from kubectl_hami_place.kube.hami_config import read_hami_config

STATEFULSET_POD_NAME = "statefulset.kubernetes.io/pod-name"
MANAGED_BY = {"app.kubernetes.io/managed-by": "kubectl-hami-place"}
REQ_ID_ALPHABET = string.ascii_lowercase + string.digits
REQ_ID_LENGTH = 12
ACK_TIMEOUT_SECONDS = 10.0
ACK_POLL_SECONDS = 0.2

AckTimeoutOption = Annotated[
    float,
    typer.Option(
        "--ack-timeout",
        min=0.1,
        help="Seconds to wait for the hami-place webhook to acknowledge a new placement before evicting.",
    ),
]


def parse_selector(text: str) -> LabelSelector:
    """`-l` as a non-empty selector, or a usage error."""
    try:
        return parse_selector_string(text, require_nonempty=True)
    except SelectorError as exc:
        raise UsageProblem(
            f"bad selector -l {text!r}: {exc}", "use kubectl's syntax, e.g. -l app=train,tier=gpu"
        ) from exc


def parse_gpus(values: Sequence[str]) -> tuple[CardRef, ...]:
    """`--gpu` values as card references, or a usage error naming the bad one."""
    if not values:
        raise UsageProblem("no card given", "pass --gpu gpu-N (or gpu-N/P, or a card UUID) once per card")
    refs = []
    for value in values:
        try:
            refs.append(parse_card_ref(value))
        except CardRefError as exc:
            raise UsageProblem(
                f"bad --gpu {value!r}: {exc}", "see the node's cards with kubectl hami-place status"
            ) from exc
    return tuple(refs)


def new_req_id() -> str:
    """A random request id, unguessable enough that two pins never collide."""
    return "".join(secrets.choice(REQ_ID_ALPHABET) for _ in range(REQ_ID_LENGTH))


def build_spec(
    req_id: str | None, selector: LabelSelector, node: str, refs: tuple[CardRef, ...], evict: str | None
) -> PlacementSpec:
    """The spec with the schema's rules checked locally (usage error), so the server only sees valid objects."""
    spec = PlacementSpec(
        req_id=req_id if req_id is not None else new_req_id(),
        pod_selector=selector,
        node_name=node,
        gpu_devices=refs,
        evict_pod=evict,
    )
    problem = validate_spec(spec)
    if problem:
        flag = "--req-id" if "reqID" in problem else "--evict" if "evictPod" in problem else "--gpu"
        raise UsageProblem(problem, f"fix {flag}")
    return spec


def placement_name(given: str | None, spec: PlacementSpec) -> str:
    """The object name: given, else `pin-<reqID>` when the reqID makes a valid name, else `pin-<random>`."""
    if given:
        return given
    token = spec.req_id.lower()
    if not all(c in REQ_ID_ALPHABET or c == "-" for c in token) or len(token) > 200 or token.endswith("-"):
        token = new_req_id()
    return f"pin-{token}"


def flag_workload(nums: int, memory: int | None, cores: int | None, config: HamiConfig) -> Workload | None:
    """The pod given with --request-memory/--request-cores (read with the cluster's HAMi defaults), or None when
    neither flag was given."""
    if memory is None and cores is None:
        return None
    try:
        request = card_request(nums, memreq=memory or 0, coresreq=cores, config=config)
    except ModelError as exc:
        raise UsageProblem(f"bad --request-memory/--request-cores: {exc}", "give whole MiB and 0..100") from exc
    return workload_from_request(request, "--request-memory/--request-cores", own_memory=bool(memory), config=config)


def hami_config(kube: Kube, where: str | None) -> tuple[HamiConfig, str]:
    """The cluster's HAMi device config (--hami-config, else found), and a notice when HAMi's defaults stand in."""
    found = read_hami_config(kube, where or "")
    return found.config, found.notice


def resolve_workload(
    kube: Kube,
    namespace: str,
    selector: LabelSelector,
    *,
    nums: int,
    memory: int | None,
    cores: int | None,
    config: HamiConfig,
) -> Workload:
    """The pod to place: from --request-* flags, else the pod template of a matching controller."""
    given = flag_workload(nums, memory, cores, config)
    if given is not None:
        return given
    for controller in cluster.list_controllers(kube, namespace):
        if controller.owner_kind in cluster.CONTROLLER_KINDS:
            continue
        labels = (controller.template.get("metadata") or {}).get("labels") or {}
        if matches(selector, labels):
            source = f"{controller.kind} {controller.name}"
            return workload_from_pod(controller.template, source, template=True, config=config)
    raise UsageProblem(
        f"no Deployment, ReplicaSet, StatefulSet or Job in namespace {namespace} has pods matching -l {selector}, "
        "so the pod's GPU request is unknown",
        "pass --request-memory MiB and --request-cores PCT",
    )


def read_snapshot(kube: Kube, node: str) -> ClusterSnapshot:
    """The node (when it exists) and every pod HAMi placed, cluster-wide: usage is counted whatever the namespace."""
    try:
        nodes = {node: cluster.get_node(kube, node)}
    except KubeNotFound:
        nodes = {}
    found: list[PodAllocation] = []
    for pod in cluster.list_pods(kube, None):
        try:
            allocation = pod_allocation(pod)
        except ModelError:
            continue
        if allocation is not None:
            found.append(allocation)
    return ClusterSnapshot(nodes, tuple(found))


def check_placement(
    kube: Kube,
    namespace: str,
    spec: PlacementSpec,
    *,
    name: str,
    workload: Workload,
    evicted_pod: dict[str, Any] | None,
) -> Checked:
    """Plans the pin against the cluster as it is now; raises Refused with one line per problem."""
    node = spec.node_name
    evict_allocation = None
    warnings: list[str] = []
    if evicted_pod is not None:
        try:
            evict_allocation = pod_allocation(evicted_pod)
        except ModelError:
            evict_allocation = None
        warnings.extend(eviction_warnings(evicted_pod, evict_allocation, node))
    pin = plan(spec, read_snapshot(kube, node), workload, evict=evict_allocation)
    evicting = spec.evict_pod or (_name(evicted_pod) if evicted_pod is not None else None)
    if not pin.ok:
        lines = [refusal_line(problem, pin, workload.source, evicting) for problem in pin.problems]
        raise Refused(list(dict.fromkeys(lines)))
    warnings.extend(pending_warnings(spec, namespace, name, _placements(kube, namespace), pin.cards))
    obj = placement_object(name, namespace, spec, labels=MANAGED_BY)
    return Checked(namespace, obj, node, pin.checks, workload, spec.evict_pod, tuple(warnings))


def _placements(kube: Kube, namespace: str) -> list[Any]:
    """Every placement the user may read: cluster-wide, else the namespace's."""
    try:
        items = placements.list_placements(kube, None)
    except KubeForbidden:
        items = placements.list_placements(kube, namespace)
    return placements_from_objects(items)


def _name(obj: dict[str, Any]) -> str:
    """metadata.name."""
    return str((obj.get("metadata") or {}).get("name", ""))


@dataclass(frozen=True)
class Replacement:
    """Who recreates the evicted pod: the selector its replacement matches, the template it is made from."""

    selector: LabelSelector
    source: str
    template: dict[str, Any]
    warning: str = ""


def replacement(kube: Kube, namespace: str, pod: dict[str, Any]) -> Replacement:
    """The pod's controller (selector and pod template), else the pod itself with its labels as the selector."""
    metadata = pod.get("metadata") or {}
    name = metadata.get("name", "")
    owner = next((ref for ref in metadata.get("ownerReferences") or [] if ref.get("controller")), None)
    labels = dict(metadata.get("labels") or {})
    if owner is not None:
        controller = cluster.get_controller(kube, namespace, owner.get("kind", ""), owner.get("name", ""))
        if controller is not None and controller.selector:
            try:
                selector = selector_from_dict(controller.selector, require_nonempty=True)
            except ModelError:
                selector = None
            if selector is not None:
                if controller.kind == "StatefulSet" and STATEFULSET_POD_NAME in labels:
                    extra = {STATEFULSET_POD_NAME: labels[STATEFULSET_POD_NAME]}
                    selector = selector_from_dict({**selector.to_dict(), "matchLabels": {**selector.labels, **extra}})
                return Replacement(selector, f"{controller.kind} {controller.name}", controller.template)
    if not labels:
        raise Refused(
            [
                f"pod {name} has no controller and no labels, so no replacement pod can be matched; "
                "use kubectl hami-place pin -l for the pod you will create"
            ]
        )
    selector = selector_from_dict({"matchLabels": labels})
    warning = ""
    if owner is None:
        warning = (
            f"pod {name} has no controller: nothing recreates it; the placement waits for the next "
            f"pod you create with its labels ({selector})"
        )
    return Replacement(selector, f"pod {name}", pod, warning)


def await_acknowledgement(kube: Kube, namespace: str, name: str, timeout: float) -> None:
    """Returns once the webhook acknowledged the placement (status.observedGeneration); CliError after `timeout`.

    Evicting before the webhook has the placement in its cache would let the replacement pod through unpinned.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            if placement_from_object(placements.get_placement(kube, namespace, name)).acknowledged:
                return
        except (KubeNotFound, PlacementError):
            pass
        if time.monotonic() >= deadline:
            raise CliError(
                f"the hami-place webhook did not acknowledge placement {namespace}/{name} within {timeout:g}s, "
                "so the pod was not evicted",
                f"check that it runs (kubectl get pods -A -l {cluster.WEBHOOK_SERVICE_LABEL}), then retry",
            )
        time.sleep(ACK_POLL_SECONDS)
