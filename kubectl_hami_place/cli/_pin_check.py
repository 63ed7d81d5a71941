"""What `pin` and `evict --to-node` share: parse the flags, read a view of the cluster, call `core.pin_check`.

Nothing is written here: the verbs create the object only after `check_placement` returned without refusing;
`_pin_report` words the outcome. The checks and the pin-then-evict itself live in `kube.moves`; here they get the
CLI's words.
"""

from __future__ import annotations

import string
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any

import typer

from kubectl_hami_place.cli._errors import CliError, Refused, UsageProblem
from kubectl_hami_place.core.errors import CardRefError, ModelError, clip
from kubectl_hami_place.kube.errors import NoReplacement, PinRefused
from kubectl_hami_place.kube.move_values import Checked, Replacement

if TYPE_CHECKING:
    from kubectl_hami_place.core.hami_config import HamiConfig
    from kubectl_hami_place.core.pin_check import Workload
    from kubectl_hami_place.core.placement import PlacementSpec
    from kubectl_hami_place.core.refs import CardRef
    from kubectl_hami_place.core.selectors import LabelSelector
    from kubectl_hami_place.kube.client import Kube

MANAGED_BY = {"app.kubernetes.io/managed-by": "kubectl-hami-place"}
REQ_ID_ALPHABET = string.ascii_lowercase + string.digits
REQ_ID_LENGTH = 12

AckTimeoutOption = Annotated[
    float,
    typer.Option(
        "--ack-timeout",
        min=0.1,
        help="Seconds to wait for the hami-place webhook to acknowledge a new placement before evicting.",
    ),
]


def parse_gpus(values: Sequence[str]) -> tuple[CardRef, ...]:
    """`--gpu` values as card references, or a usage error naming the bad one."""
    from kubectl_hami_place.core.refs import parse_card_ref

    if not values:
        raise UsageProblem("no card given", "pass --gpu gpu-N (or gpu-N/P, or a card UUID) once per card")
    refs = []
    for value in values:
        try:
            refs.append(parse_card_ref(value))
        except CardRefError as exc:
            raise UsageProblem(
                f"bad --gpu {clip(value)!r}: {exc}", "see the node's cards with kubectl hami-place status"
            ) from exc
    return tuple(refs)


def new_req_id() -> str:
    """A random request id, unguessable enough that two pins never collide."""
    import secrets

    return "".join(secrets.choice(REQ_ID_ALPHABET) for _ in range(REQ_ID_LENGTH))


def build_spec(
    req_id: str | None,
    selector: LabelSelector,
    node: str,
    refs: tuple[CardRef, ...],
    evict: str | None,
    *,
    node_flag: str = "--node",
) -> PlacementSpec:
    """The spec with the schema's rules checked locally (usage error, naming the flag to fix: `node_flag` is how the
    verb takes the node), so the server only sees valid objects."""
    from kubectl_hami_place.core.placement import PlacementSpec, validate_spec

    spec = PlacementSpec(
        req_id=req_id if req_id is not None else new_req_id(),
        pod_selector=selector,
        node_name=node,
        gpu_devices=refs,
        evict_pod=evict,
    )
    problem = validate_spec(spec)
    if problem:
        flags = {"reqID": "--req-id", "evictPod": "--evict", "nodeName": node_flag}
        flag = next((flag for field, flag in flags.items() if problem.startswith(field)), "--gpu")
        raise UsageProblem(problem, f"fix {flag}")
    if not spec.req_id.isprintable():
        # The schema allows any string; one that prints control characters would fake output wherever it is shown.
        raise UsageProblem(f"--req-id {spec.req_id!r} holds control characters", "fix --req-id: printable text")
    return spec


def placement_name(given: str | None, spec: PlacementSpec) -> str:
    """The object name: given, else `pin-<reqID>` when the reqID makes a valid name, else `pin-<random>`."""
    from kubectl_hami_place.core.k8s_names import is_object_name

    if given:
        if not is_object_name(given):
            raise UsageProblem(
                f"--name {clip(given)!r} is not an object name", "fix --name: lowercase letters, digits, '-' and '.'"
            )
        return given
    named = f"pin-{spec.req_id.lower()}"
    return named if is_object_name(named) else f"pin-{new_req_id()}"


def flag_workload(nums: int, memory: int | None, cores: int | None, config: HamiConfig) -> Workload | None:
    """The pod given with --request-memory/--request-cores (read with the cluster's HAMi defaults), or None when
    neither flag was given."""
    from kubectl_hami_place.core.pin_check import workload_from_request
    from kubectl_hami_place.core.requests import card_request

    if memory is None and cores is None:
        return None
    try:
        request = card_request(nums, memreq=memory or 0, coresreq=cores, config=config)
    except ModelError as exc:
        raise UsageProblem(f"bad --request-memory/--request-cores: {exc}", "give whole MiB and 0..100") from exc
    return workload_from_request(request, "--request-memory/--request-cores", own_memory=bool(memory), config=config)


def hami_config(kube: Kube, where: str | None, gpu_policy: str | None) -> tuple[HamiConfig, str]:
    """The cluster's HAMi device config (--hami-config, else found) and default GPU policy (--gpu-scheduler-policy,
    else read), and a notice when HAMi's defaults stand in."""
    from kubectl_hami_place.kube.hami_config import read_hami_config

    found = read_hami_config(kube, where or "", gpu_policy or "")
    if found.unanswered is not None:
        # One line, as every verb gives, not a notice of defaults before it.
        raise found.unanswered
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
    from kubectl_hami_place.core.pin_check import workload_from_pod
    from kubectl_hami_place.core.selectors import matches
    from kubectl_hami_place.kube import cluster_reads

    given = flag_workload(nums, memory, cores, config)
    if given is not None:
        return given
    for controller in cluster_reads.list_controllers(kube, namespace):
        if controller.owner_kind in cluster_reads.CONTROLLER_KINDS:
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


def check_placement(
    kube: Kube,
    namespace: str,
    spec: PlacementSpec,
    *,
    name: str,
    workload: Workload,
    evicted_pod: dict[str, Any] | None,
    labels: Mapping[str, str] = MANAGED_BY,
) -> Checked:
    """Checks the pin against the cluster as it is now; raises Refused with one line per problem."""
    from kubectl_hami_place.core.pin_check import PinReason
    from kubectl_hami_place.kube import moves

    try:
        return moves.check_pin(
            kube, namespace, spec, name=name, workload=workload, evicted_pod=evicted_pod, labels=labels
        )
    except PinRefused as exc:
        lines = refusal_lines(exc)
        if any(problem.reason is PinReason.NodeNotFound for problem in exc.verdict.problems):
            # Not found is an error (exit 1), as for a pod or a namespace; the node's line is the only one then.
            raise CliError(lines[0]) from exc
        raise Refused(lines) from exc


def refusal_lines(refused: PinRefused) -> list[str]:
    """One line per problem of a refused pin, each with what to do."""
    from kubectl_hami_place.cli._pin_report import refusal_line

    pin = refused.verdict
    lines = [refusal_line(problem, pin, refused.source, refused.evicting) for problem in pin.problems]
    return list(dict.fromkeys(lines))


def replacement(kube: Kube, namespace: str, pod: dict[str, Any]) -> Replacement:
    """The pod's controller (selector and pod template), else the pod itself; Refused when neither matches."""
    from kubectl_hami_place.kube import moves

    try:
        return moves.replacement(kube, namespace, pod)
    except NoReplacement as exc:
        raise Refused([str(exc)]) from exc


def replacement_warning(successor: Replacement, pod: str) -> str:
    """The warning for a pod nothing recreates, or nothing."""
    if successor.controlled:
        return ""
    return (
        f"pod {pod} has no controller: nothing recreates it; the placement waits for the next "
        f"pod you create with its labels ({successor.selector})"
    )
