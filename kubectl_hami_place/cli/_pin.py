"""`pin`: create a HamiPodPlacement, but only after every check against the cluster passed."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from kubectl_hami_place.cli._common import (
    AsOption,
    ContextOption,
    CoresOption,
    DryRun,
    DryRunOption,
    GpuOption,
    GpuPolicyOption,
    HamiConfigOption,
    KubeconfigOption,
    MemoryOption,
    NameOption,
    NamespaceOption,
    NodeOption,
    OutputFormat,
    OutputOption,
    ReqIdOption,
    YesOption,
    complete_pods,
    confirm,
    emit,
    not_found,
    parse_selector,
    target,
    warn,
)
from kubectl_hami_place.cli._errors import CliError
from kubectl_hami_place.cli._pin_check import (
    build_spec,
    check_placement,
    hami_config,
    parse_gpus,
    placement_name,
    resolve_workload,
)
from kubectl_hami_place.cli._present import examples
from kubectl_hami_place.kube.errors import KubeForbidden, KubeNotFound, NotAcknowledged

if TYPE_CHECKING:
    from kubectl_hami_place.kube.client import Kube

HELP = (
    "Pin the next pod matching -l to a node and exact cards. Checks the node, its cards, that the pod fits each card "
    "(now, or once --evict POD is gone) before creating anything."
    + examples(
        "kubectl hami-place pin -n team-a -l app=train --node gpu-a100-0 --gpu gpu-1",
        "kubectl hami-place pin -n team-a -l app=train --node gpu-a100-0 --gpu gpu-1/50    # half the card's memory",
        "kubectl hami-place pin -n team-a -l app=train --node gpu-h100-0 --gpu gpu-0 --gpu gpu-1 --evict old-job-7f9c",
        "kubectl hami-place pin -n team-a -l app=train --node gpu-a100-0 --gpu gpu-0 --dry-run=client -o yaml",
    )
)


def pin(
    *,
    selector: Annotated[str, typer.Option("--selector", "-l", help="Labels of the pod to place, kubectl syntax.")],
    node: NodeOption,
    gpu: GpuOption,
    evict: Annotated[
        str | None,
        typer.Option(
            "--evict",
            help="A pod of the namespace to evict once the placement is claimed.",
            autocompletion=complete_pods,
        ),
    ] = None,
    req_id: ReqIdOption = None,
    name: NameOption = None,
    request_memory: MemoryOption = None,
    request_cores: CoresOption = None,
    hami_config_ref: HamiConfigOption = None,
    gpu_policy: GpuPolicyOption = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    as_user: AsOption = None,
    namespace: NamespaceOption = None,
    dry_run: DryRunOption = DryRun.none,
    yes: YesOption = False,
    ack_timeout: Annotated[
        float,
        typer.Option(
            "--ack-timeout",
            min=0,
            help="Seconds to wait for the hami-place webhook to acknowledge the placement; a warning when it does "
            "not (0: do not wait).",
        ),
    ] = 5.0,
    output: OutputOption = OutputFormat.table,
) -> None:
    """Create a HamiPodPlacement after checking it against the cluster."""
    from kubectl_hami_place.cli._pin_report import PlacementResult
    from kubectl_hami_place.kube import cluster_reads, placements

    pod_selector = parse_selector(selector)
    refs = parse_gpus(gpu)
    spec = build_spec(req_id, pod_selector, node, refs, evict)
    object_name = placement_name(name, spec)
    where = target(kubeconfig, context, namespace, as_user=as_user)
    ns = where.one_namespace
    evicted_pod: dict[str, Any] | None = None
    if evict:
        try:
            evicted_pod = cluster_reads.get_pod(where.kube, ns, evict)
        except KubeNotFound as exc:
            raise not_found(
                where.kube, ns, f"pod {evict} (--evict)", f"check the name (kubectl get pods -n {ns})"
            ) from exc
    config, notice = hami_config(where.kube, hami_config_ref, gpu_policy)
    if notice:
        warn(notice)
    workload = resolve_workload(
        where.kube, ns, pod_selector, nums=len(refs), memory=request_memory, cores=request_cores, config=config
    )
    checked = check_placement(where.kube, ns, spec, name=object_name, workload=workload, evicted_pod=evicted_pod)
    for message in checked.warnings:
        warn(message)
    if evict and dry_run is DryRun.none and not confirm(f"pin, then evict pod {evict} in namespace {ns}", yes):
        raise CliError("not confirmed", "nothing was created")
    created = checked.obj
    if dry_run is not DryRun.client:
        created = placements.create_placement(where.kube, ns, checked.obj, dry_run=dry_run is DryRun.server)
    emit(PlacementResult(checked, dry_run.value, created), output)
    if dry_run is DryRun.none and ack_timeout > 0:
        _await_webhook(where.kube, ns, object_name, ack_timeout)


def _await_webhook(kube: Kube, namespace: str, name: str, timeout: float) -> None:
    """Warn when no hami-place webhook acknowledged the placement in time: without one no pod is ever pinned, and
    the placement would stay Pending with no word (the pin itself stands)."""
    from kubectl_hami_place.kube import moves

    try:
        moves.await_acknowledgement(kube, namespace, name, timeout)
    except KubeForbidden:
        return  # may create placements but not read them back: nothing to tell either way
    except NotAcknowledged:
        warn(
            f"no hami-place webhook acknowledged placement {namespace}/{name} within {timeout:g}s: it is stored, but "
            "no pod is pinned until the webhook runs (install its chart; kubectl hami-place version shows it)"
        )
