"""`why POD`: why a pod does not fit today, node by node and card by card, in HAMi's reason names.

The card table is also what `plan --for` prints first, so `_plan` builds on this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer

from kubectl_hami_place.cli._common import (
    AsOption,
    ContextOption,
    GpuPolicyOption,
    HamiConfigOption,
    KubeconfigOption,
    NamespaceOption,
    OutputFormat,
    OutputOption,
    collector_paused,
    complete_pods,
    emit,
    not_found,
    pod_name,
    target,
    warn,
)
from kubectl_hami_place.cli._errors import CliError
from kubectl_hami_place.cli._present import examples
from kubectl_hami_place.cli.output import Block, Table, Text
from kubectl_hami_place.kube.errors import KubeNotFound

if TYPE_CHECKING:
    from kubectl_hami_place.core.planner import NodeWhy, PlanPod

HELP = "Say why a pod does not fit today: every node, every card, with HAMi's reason for each." + examples(
    "kubectl hami-place why -n team-a big-train",
    "kubectl hami-place why -n team-a big-train -o json",
)


@dataclass(frozen=True)
class Why:
    """A pod's verdict on every node."""

    pod: str
    verdicts: tuple[NodeWhy, ...]

    def to_data(self) -> Any:
        """The verdicts as JSON."""
        return {
            "pod": self.pod,
            "fits": any(v.fits for v in self.verdicts),
            "nodes": [v.to_dict() for v in self.verdicts],
        }

    def to_blocks(self) -> list[Block]:
        """A one-line answer, then the card table."""
        return why_blocks(self.pod, self.verdicts)


def why_blocks(pod: str, verdicts: tuple[NodeWhy, ...]) -> list[Block]:
    """The answer line and one row per card: node, card, verdict, HAMi's reason and the numbers; a node kept out
    before HAMi's fit (closed, not selected, a taint, kube-scheduler's count) first gets a row saying why."""
    from kubectl_hami_place.core.planner.why import NO_FIT

    fitting = [v.node for v in verdicts if v.fits]
    answer = (
        f"{pod} fits today on {', '.join(fitting)}"
        if fitting
        else f"{pod} fits no node today ({len(verdicts)} GPU node(s) checked)"
    )
    rows = []
    for verdict in verdicts:
        node = f"{verdict.node} ({verdict.reason})" if verdict.reason else verdict.node
        if verdict.reason not in (None, NO_FIT) and verdict.message:
            rows.append((node, "-", "no", "-", verdict.message))
            node = ""
        for card in verdict.cards:
            rows.append((node, f"gpu-{card.index}", "yes" if card.ok else "no", str(card.reason or "-"), card.message))
            node = ""
    return [
        Text((answer,), style="bold"),
        Table(columns=("Node", "GPU", "Fits", "Reason", "Detail"), rows=tuple(rows), empty="  no GPU nodes"),
    ]


def require_gpu(pod: PlanPod) -> None:
    """Refuse a pod that asks for no NVIDIA card: nothing to explain or make room for."""
    if not pod.gpu_requests:
        raise CliError(f"pod {pod.key} asks for no NVIDIA card (nvidia.com/gpu)", "name a pod that asks for GPUs")


def why(
    *,
    pod: Annotated[
        str, typer.Argument(help="The pod, usually Pending.", autocompletion=complete_pods, callback=pod_name)
    ],
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    as_user: AsOption = None,
    namespace: NamespaceOption = None,
    output: OutputOption = OutputFormat.table,
    hami_config_ref: HamiConfigOption = None,
    gpu_policy: GpuPolicyOption = None,
) -> None:
    """Explain, card by card, why the pod does not fit."""
    from kubectl_hami_place.core.planner import why as explain
    from kubectl_hami_place.kube.snapshot import read_pending, read_snapshot

    where = target(kubeconfig, context, namespace, as_user=as_user)
    with collector_paused():
        read = read_snapshot(where.kube, hami_config_ref or "", gpu_policy or "")
        try:
            found = read_pending(where.kube, where.one_namespace, pod, read)
        except KubeNotFound as exc:
            ns = where.one_namespace
            raise not_found(where.kube, ns, f"pod {pod}", f"check the name (kubectl get pods -n {ns})") from exc
        for message in read.warnings:
            warn(message)
        plan_pod = found.pod
        if found.unread:
            warn(
                f"kube-scheduler also keeps {plan_pod.key} off nodes for reasons hami-place does not read: "
                + "; ".join(found.unread)
            )
        require_gpu(plan_pod)
        emit(Why(plan_pod.key, explain(read.snapshot, plan_pod, read.config)), output)
