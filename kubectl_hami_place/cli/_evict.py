"""`evict`: evict a pod through the Eviction API; with --to-node, first pin its replacement to a node and cards.

Eviction honours PodDisruptionBudgets (exit 4 when one blocks it); the pod is never deleted directly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import typer
from typer._click.core import ParameterSource

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
    OutputFormat,
    OutputOption,
    ReqIdOption,
    YesOption,
    complete_nodes,
    complete_pods,
    confirm,
    emit,
    not_found,
    note,
    pod_name,
    target,
    warn,
)
from kubectl_hami_place.cli._errors import CliError, UsageProblem
from kubectl_hami_place.cli._pin_check import (
    AckTimeoutOption,
    build_spec,
    check_placement,
    flag_workload,
    hami_config,
    parse_gpus,
    placement_name,
    replacement,
    replacement_warning,
)
from kubectl_hami_place.cli._present import examples
from kubectl_hami_place.cli.output import Block, Text
from kubectl_hami_place.kube.errors import KubeNotFound
from kubectl_hami_place.kube.move_values import ACK_TIMEOUT_SECONDS, RolledBack, Stage

HELP = (
    "Evict a pod through the Eviction API (PodDisruptionBudgets apply; exit 4 when one blocks). With --to-node and "
    "--gpu, first pin the pod's replacement to that node and those cards."
    + examples(
        "kubectl hami-place evict -n team-a old-job-7f9c --yes",
        "kubectl hami-place evict -n team-a train-7d9f-x2k4 --to-node gpu-h100-0 --gpu gpu-3 --yes",
    )
)


@dataclass(frozen=True)
class Evicted:
    """A plain eviction: which pod, and whether it was a dry run."""

    namespace: str
    pod: str
    dry_run: str

    def to_data(self) -> Any:
        """The pod and the outcome."""
        return {"namespace": self.namespace, "pod": self.pod, "evicted": True, "dryRun": self.dry_run}

    def to_blocks(self) -> list[Block]:
        """kubectl's `pod/x evicted` line."""
        suffix = "" if self.dry_run == "none" else f" ({self.dry_run} dry run)"
        return [Text((f"pod {self.namespace}/{self.pod} evicted{suffix}",))]


def evict(
    ctx: typer.Context,
    *,
    pod: Annotated[str, typer.Argument(help="The pod to evict.", autocompletion=complete_pods, callback=pod_name)],
    to_node: Annotated[
        str | None,
        typer.Option("--to-node", help="Pin the replacement pod to this node first.", autocompletion=complete_nodes),
    ] = None,
    gpu: GpuOption = [],  # noqa: B006 - typer needs a literal default for a repeatable option
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
    ack_timeout: AckTimeoutOption = ACK_TIMEOUT_SECONDS,
    dry_run: DryRunOption = DryRun.none,
    yes: YesOption = False,
    output: OutputOption = OutputFormat.table,
) -> None:
    """Evict a pod, optionally pinning its replacement first."""
    from kubectl_hami_place.cli._pin_report import PlacementResult
    from kubectl_hami_place.core.pin_check import with_node_needs, workload_from_pod
    from kubectl_hami_place.kube import cluster_reads, evictions, moves

    typed_ack = ctx.get_parameter_source("ack_timeout") is ParameterSource.COMMANDLINE
    pin_flags = {
        "--gpu": gpu or None,
        "--req-id": req_id,
        "--name": name,
        "--request-memory": request_memory,
        "--request-cores": request_cores,
        "--hami-config": hami_config_ref,
        "--gpu-scheduler-policy": gpu_policy,
        "--ack-timeout": ack_timeout if typed_ack else None,
    }
    stray = next((flag for flag, value in pin_flags.items() if value is not None), None)
    if stray and not to_node:
        # They shape the replacement's placement: a plain eviction would drop them without a word.
        raise UsageProblem(f"{stray} needs --to-node", f"add --to-node NODE, or drop {stray}")
    if to_node and not gpu:
        raise UsageProblem("--to-node needs the cards", "add --gpu gpu-N once per card")
    refs = parse_gpus(gpu) if to_node else ()
    where = target(kubeconfig, context, namespace, as_user=as_user)
    ns = where.one_namespace
    kube = where.kube
    try:
        pod_obj = cluster_reads.get_pod(kube, ns, pod)
    except KubeNotFound as exc:
        raise not_found(kube, ns, f"pod {pod}", f"check the name (kubectl get pods -n {ns})") from exc
    if not to_node:
        if dry_run is DryRun.none and not confirm(f"evict pod {ns}/{pod}", yes):
            raise CliError("not confirmed", "the pod was not evicted")
        if dry_run is not DryRun.client:
            evictions.evict_pod(kube, ns, pod, dry_run=dry_run is DryRun.server)
        emit(Evicted(ns, pod, dry_run.value), output)
        return
    successor = replacement(kube, ns, pod_obj)
    warning = replacement_warning(successor, pod)
    if warning:
        warn(warning)
    spec = build_spec(req_id, successor.selector, to_node, refs, None, node_flag="--to-node")
    object_name = placement_name(name, spec)
    config, notice = hami_config(kube, hami_config_ref, gpu_policy)
    if notice:
        warn(notice)
    from_pod = workload_from_pod(successor.template, successor.source, template=True, config=config)
    flagged = flag_workload(len(refs), request_memory, request_cores, config)
    workload = from_pod if flagged is None else with_node_needs(flagged, from_pod)
    checked = check_placement(kube, ns, spec, name=object_name, workload=workload, evicted_pod=pod_obj)
    for message in checked.warnings:
        warn(message)
    if dry_run is DryRun.none and not confirm(f"pin the replacement to {to_node} and evict pod {ns}/{pod}", yes):
        raise CliError("not confirmed", "nothing was created and the pod was not evicted")
    if dry_run is DryRun.client:
        emit(PlacementResult(checked, dry_run.value, checked.obj, evicted=pod), output)
        return
    pinned = moves.pin_then_evict(
        kube, checked, pod_obj, ack_timeout=ack_timeout, dry_run=dry_run is DryRun.server, rolled_back=_rolled_back
    )
    emit(PlacementResult(checked, dry_run.value, pinned.obj, evicted=pod), output)


_BECAUSE = {
    Stage.acknowledgement: "the webhook did not acknowledge it",
    Stage.eviction: "the eviction failed",
}


def _rolled_back(done: RolledBack) -> None:
    """Says that the placement was deleted again (or could not be) after the pod was not evicted."""
    because = _BECAUSE[done.stage]
    if done.error is not None:
        warn(f"could not delete placement {done.name} after {because}: {done.error}")
        return
    note(f"placement {done.namespace}/{done.name} deleted again because {because}")
