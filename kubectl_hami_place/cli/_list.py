"""`list`: the HamiPodPlacements of a namespace (or all), with their phase and who consumed them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kubectl_hami_place.cli._common import (
    AllNamespacesOption,
    AsOption,
    ContextOption,
    KubeconfigOption,
    NamespaceOption,
    OutputFormat,
    OutputOption,
    PlacementLabelsOption,
    emit,
    label_query,
    target,
)
from kubectl_hami_place.cli._present import PLACEMENT_WIDE, examples, placement_columns, placement_row
from kubectl_hami_place.cli.output import Block, Table

HELP = "List HamiPodPlacements: node, cards, phase, the pod that consumed each, the pod to evict." + examples(
    "kubectl hami-place list -n team-a",
    "kubectl hami-place list -A -o wide",
    "kubectl hami-place list -A -l scheduling.hami.placement.com/defrag-run    # the controller's moves",
)


@dataclass(frozen=True)
class PlacementList:
    """Placements as stored; `all_namespaces` adds the namespace column."""

    items: tuple[dict[str, Any], ...]
    all_namespaces: bool
    namespace: str
    labels: str = ""

    def to_data(self) -> Any:
        """A kubectl-style List, so `-o yaml` output can be fed back to kubectl."""
        return {"apiVersion": "v1", "kind": "List", "items": list(self.items)}

    def to_blocks(self) -> list[Block]:
        """One row per placement."""
        where = "any namespace" if self.all_namespaces else f"namespace {self.namespace}"
        where += f" with labels {self.labels}" if self.labels else ""
        return [
            Table(
                columns=placement_columns(self.all_namespaces),
                rows=tuple(placement_row(item, self.all_namespaces) for item in self.items),
                wide=PLACEMENT_WIDE,
                empty=f"No placements in {where}.",
            )
        ]


def list_placements(
    *,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    as_user: AsOption = None,
    namespace: NamespaceOption = None,
    all_namespaces: AllNamespacesOption = False,
    selector: PlacementLabelsOption = None,
    output: OutputOption = OutputFormat.table,
) -> None:
    """List HamiPodPlacements."""
    from kubectl_hami_place.kube import placements

    labels = label_query(selector, "placement")
    where = target(kubeconfig, context, namespace, all_namespaces, as_user)
    items = placements.list_placements(where.kube, where.namespace, labels)
    emit(PlacementList(tuple(items), where.namespace is None, where.namespace or "", labels), output)
