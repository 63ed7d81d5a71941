"""`pin`: create a HamiPodPlacement, but only after every check against the cluster passed."""

from __future__ import annotations

from typing import Annotated, Any

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
    complete_pods,
    emit,
    target,
    warn,
)
from kubectl_hami_place.cli._errors import Refused
from kubectl_hami_place.cli._placed import PlacementResult
from kubectl_hami_place.cli._placing import (
    build_spec,
    check_placement,
    hami_config,
    parse_gpus,
    parse_selector,
    placement_name,
    resolve_workload,
)
from kubectl_hami_place.kube import cluster, placements
from kubectl_hami_place.kube.errors import KubeNotFound

HELP = (
    "Pin the next pod matching -l to a node and exact cards. Checks the node, its cards, that the pod fits each card "
    "(now, or once --evict POD is gone) before creating anything."
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
    output: OutputOption = OutputFormat.table,
) -> None:
    """Create a HamiPodPlacement after checking it against the cluster."""
    pod_selector = parse_selector(selector)
    refs = parse_gpus(gpu)
    spec = build_spec(req_id, pod_selector, node, refs, evict)
    object_name = placement_name(name, spec)
    where = target(kubeconfig, context, namespace, as_user=as_user)
    ns = where.one_namespace
    evicted_pod: dict[str, Any] | None = None
    if evict:
        try:
            evicted_pod = cluster.get_pod(where.kube, ns, evict)
        except KubeNotFound as exc:
            raise Refused(
                [f"pod {evict} (--evict) not found in namespace {ns}; check the name (kubectl get pods -n {ns})"]
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
    created = checked.obj
    if dry_run is not DryRun.client:
        created = placements.create_placement(where.kube, ns, checked.obj, dry_run=dry_run is DryRun.server)
    emit(PlacementResult(checked, dry_run.value, created), output)
