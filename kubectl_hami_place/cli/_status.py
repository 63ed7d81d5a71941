"""`status`: every GPU node's cards as HAMi counts them, the pods on each card, the placements, and fragmentation.

Reads the webhook's `/api/v1/cluster-info` through the API server's service proxy when the webhook is
installed, else computes the same view from the API; the output says which. Above `SUMMARY_ABOVE` nodes (or with
`--summary`) it shows the fleet summary instead of one table per node; `--watch` reads and shows it again every
`--interval` seconds, in place on a terminal, until Ctrl-C.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer

from kubectl_hami_place.cli._common import (
    AllNamespacesOption,
    AsOption,
    ContextOption,
    KubeconfigOption,
    NamespaceOrAllOption,
    OutputFormat,
    OutputOption,
    collector_paused,
    color_enabled,
    complete_nodes,
    emit,
    error_line,
    label_query,
    not_gpu_nodes,
    target,
    warn,
    write_out,
)
from kubectl_hami_place.cli._errors import UsageProblem
from kubectl_hami_place.cli._present import PLACEMENT_WIDE, bar, clock, examples, placement_columns, placement_row
from kubectl_hami_place.cli.output import Block, Result, Table, Text, formatter_for
from kubectl_hami_place.cli.output.printable import printable
from kubectl_hami_place.kube.errors import KubeError

if TYPE_CHECKING:
    from kubectl_hami_place.core.cluster_info import CardInfo, ClusterInfo, NodeInfo
    from kubectl_hami_place.core.fleet import CardTypeRoom, FleetSummary
    from kubectl_hami_place.core.fragmentation import Fragmentation
    from kubectl_hami_place.kube.client import Kube

# Above this many GPU nodes `status` shows the fleet summary unless nodes are named or --no-summary is given.
SUMMARY_ABOVE = 20

HELP = (
    "Show every GPU node's cards: memory (with a bar), cores, slots, the pods on each card, the placements and "
    f"their phase, and how fragmented free memory is. Above {SUMMARY_ABOVE} nodes (or with --summary): one line "
    "per card type and the most fragmented nodes."
    + examples(
        "kubectl hami-place status",
        "kubectl hami-place status gpu-a100-0 -o wide",
        "kubectl hami-place status -l pool=a100",
        "kubectl hami-place status --summary --top 20",
        "kubectl hami-place status --watch --interval 5",
    )
)


NO_GPU_NODES = "No HAMi GPU nodes (no node has hami.io/node-nvidia-register or nvidia.com/gpu)."


@dataclass(frozen=True)
class Status:
    """The cluster-info view (possibly narrowed to some nodes), the placements on those nodes, and the source."""

    info: ClusterInfo
    fragmentation: Fragmentation
    placements: tuple[dict[str, Any], ...]
    source: str
    from_webhook: bool
    all_namespaces: bool
    empty: str = NO_GPU_NODES

    def to_data(self) -> Any:
        """The cluster-info document plus the placements and the source it came from."""
        data = self.info.to_dict(self.fragmentation)
        return {
            "source": self.source,
            "fromWebhook": self.from_webhook,
            **data,
            "placements": list(self.placements),
        }

    def to_blocks(self) -> list[Block]:
        """One table per node, the placements, the fragmentation summary, the source."""
        blocks: list[Block] = []
        for node in self.info.nodes:
            blocks.extend(_node_blocks(node))
        if not self.info.nodes:
            blocks.append(Text((self.empty,)))
        blocks.append(
            Table(
                title="Placements",
                columns=placement_columns(self.all_namespaces),
                rows=tuple(placement_row(item, self.all_namespaces) for item in self.placements),
                wide=PLACEMENT_WIDE,
                empty="none",
            )
        )
        if self.info.kept:
            blocks.append(_kept_block(self.info))
        blocks.append(_fragmentation_block(self.fragmentation))
        blocks.append(Text((f"Source: {self.source}",), style="dim"))
        return blocks


def _kept_block(info: ClusterInfo) -> Block:
    """The rooms kept for rescued Pending pods: their cards by node and index, and until when."""
    from kubectl_hami_place.core.refs import place

    names = {card.uuid: (node.name, card.name) for node in info.nodes for card in node.cards}
    rows = []
    for room in info.kept:
        by_node: dict[str, list[str]] = {}
        for uuid in room.cards:
            node, card = names.get(uuid, ("", uuid))
            by_node.setdefault(node, []).append(card)
        cards = "; ".join(place(node, named) if node else ",".join(named) for node, named in by_node.items())
        rows.append((room.pod, cards, clock(room.until)))
    return Table(
        title="Rooms kept for rescued pods (pods admitted meanwhile keep off these cards)",
        columns=("POD", "CARDS", "UNTIL"),
        rows=tuple(rows),
    )


def _node_blocks(node: NodeInfo) -> list[Block]:
    """The node's header line and its card table."""
    state = [
        "Ready" if node.ready else "NotReady",
        "schedulable" if node.schedulable else "cordoned",
        f"nvidia.com/gpu {node.gpu_allocatable}" + ("" if node.hami_usable else " (HAMi will not use it)"),
        f"{len(node.cards)} card" + ("" if len(node.cards) == 1 else "s"),
    ]
    blocks: list[Block] = []
    if node.register_error:
        blocks.append(Text((f"Node {node.name}: {', '.join(state)}", f"  register: {node.register_error}"), "bold"))
        return blocks
    rows = tuple(_card_row(card) for card in node.cards)
    blocks.append(
        Table(
            title=f"Node {node.name}: {', '.join(state)}",
            columns=("GPU", "Model", "UUID", "NUMA", "Health", "Memory", "Used", "Cores", "Slots", "Mode", "Pods"),
            rows=rows,
            wide=frozenset({"Mode"}),
            styles={"Used": "markup", "Health": "markup"},
            empty="  no cards registered",
        )
    )
    return blocks


def _card_row(card: CardInfo) -> tuple[str, ...]:
    """One card: identity, health, memory used/total with a bar, cores, slots, pods."""
    if not card.health:
        health = "[red]unhealthy[/]"
    elif card.cordoned:
        health = "[yellow]cordoned[/]"
    elif not card.nvidia:
        health = "[yellow]not NVIDIA[/]"
    else:
        health = "[green]healthy[/]"
    pods = ", ".join(
        f"{pod.namespace}/{pod.name} ({pod.mem} MiB, {pod.cores}%)" + (" terminating" if pod.deleting else "")
        for pod in card.pods
    )
    return (
        card.name,
        card.type,
        card.uuid,
        str(card.numa),
        health,
        f"{card.memory_used}/{card.memory_total} MiB",
        bar(card.memory_used, card.memory_total),
        f"{card.cores_used}/{card.cores_total}%",
        f"{card.slots_used}/{card.slots_total}",
        card.mode,
        pods or "-",
    )


def _fragmentation_block(summary: Fragmentation) -> Block:
    """Whole cards free, memory no single card can serve, the largest request that still fits."""
    where = max(summary.nodes, key=lambda n: n.largest_request_mib, default=None)
    on = f" (on {where.name})" if where is not None and summary.largest_request_mib > 0 else ""
    return Text(
        (
            "Fragmentation",
            f"  whole cards free:            {summary.whole_cards_free} of {summary.open_cards} open cards",
            f"  free memory:                 {summary.free_mib} MiB",
            f"  largest one-card request:    {summary.largest_request_mib} MiB{on}",
            f"  stranded free memory:        {summary.stranded_mib} MiB (free on cards a pod already uses: "
            "no whole-card request can have it)",
        )
    )


@dataclass(frozen=True)
class StatusSummary:
    """The fleet at a glance: per card type, the most fragmented nodes, placements by phase, the rooms kept for
    rescued pods (`kept`: the view of the nodes their cards are on), the source."""

    summary: FleetSummary
    phases: dict[str, int]
    generated_at: datetime
    source: str
    from_webhook: bool
    kept: ClusterInfo | None = None

    def to_data(self) -> Any:
        """The summary document (`-o json|yaml`)."""
        from kubectl_hami_place.core.cluster_info import kept_rooms_data

        return {
            "source": self.source,
            "fromWebhook": self.from_webhook,
            "generatedAt": self.generated_at.isoformat().replace("+00:00", "Z"),
            "summary": self.summary.to_dict(),
            "placements": self.phases,
            "keptRooms": kept_rooms_data(self.kept.kept if self.kept is not None else ()),
        }

    def to_blocks(self) -> list[Block]:
        """A headline, the card types, the most fragmented nodes, placements by phase, the source."""
        fleet = self.summary
        total = fleet.total
        headline = (
            f"{fleet.nodes} GPU nodes ({fleet.usable_nodes} usable), {total.cards} cards "
            f"({total.open_cards} open, {total.whole_cards_free} whole free)"
        )
        blocks: list[Block] = [
            Text((headline,), style="bold"),
            Table(
                title="Card types",
                columns=("Type", "Nodes", "Cards", "Open", "Whole free", "Free", "Stranded"),
                rows=tuple(_type_row(row) for row in (*fleet.types, total)),
                empty="  no cards registered",
            ),
            Table(
                title=f"Most fragmented nodes ({len(fleet.most_fragmented)} of {fleet.fragmented_nodes} with "
                "stranded memory)",
                columns=("Node", "Types", "Open", "Whole free", "Free", "Stranded", "Largest request"),
                rows=tuple(
                    (
                        node.name,
                        ",".join(node.card_types),
                        str(node.open_cards),
                        str(node.whole_cards_free),
                        _mib(node.free_mib),
                        _mib(node.stranded_mib),
                        _mib(node.largest_request_mib),
                    )
                    for node in fleet.most_fragmented
                ),
                empty="  none: every open card in use is full or every free card is whole",
            ),
            Text(
                (
                    "Placements: "
                    + (", ".join(f"{count} {phase}" for phase, count in self.phases.items()) or "none")
                    + " (kubectl hami-place list -A)",
                )
            ),
        ]
        if self.kept is not None and self.kept.kept:
            blocks.append(_kept_block(self.kept))
        blocks.append(Text((f"Source: {self.source}",), style="dim"))
        return blocks


def _type_row(row: CardTypeRoom) -> tuple[str, ...]:
    """One card type (or the total)."""
    return (
        row.card_type,
        str(row.nodes),
        str(row.cards),
        str(row.open_cards),
        str(row.whole_cards_free),
        _mib(row.free_mib),
        _mib(row.stranded_mib),
    )


def _mib(value: int) -> str:
    """MiB with thousands separators: fleet totals run to millions."""
    return f"{value:,} MiB"


SummaryOption = Annotated[
    bool | None,
    typer.Option(
        "--summary/--no-summary",
        help=f"One line per card type and the most fragmented nodes (default: above {SUMMARY_ABOVE} GPU nodes, "
        "when no node is named).",
        show_default=False,
    ),
]
TopOption = Annotated[
    int, typer.Option("--top", min=0, help="How many of the most fragmented nodes the summary lists.")
]
WatchOption = Annotated[
    bool, typer.Option("--watch", "-w", help="Read and show it again every --interval seconds until Ctrl-C.")
]
NodeLabelsOption = Annotated[
    str | None,
    typer.Option("--selector", "-l", help="Only the GPU nodes with these labels, kubectl syntax (e.g. -l pool=a100)."),
]
# At most a day: time.sleep refuses what overflows a time_t (inf, 1e10), which ended the watch as an unexpected error.
IntervalOption = Annotated[
    float, typer.Option("--interval", min=1.0, max=86400.0, help="Seconds between two reads with --watch.")
]


def status(
    *,
    nodes: Annotated[
        list[str] | None,
        typer.Argument(help="Only these nodes (default: all GPU nodes).", autocompletion=complete_nodes),
    ] = None,
    selector: NodeLabelsOption = None,
    summary: SummaryOption = None,
    top: TopOption = 10,
    watch: WatchOption = False,
    interval: IntervalOption = 2.0,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    as_user: AsOption = None,
    namespace: NamespaceOrAllOption = None,
    all_namespaces: AllNamespacesOption = False,
    output: OutputOption = OutputFormat.table,
) -> int:
    """Show the cards, pods, placements and fragmentation."""
    wanted = list(dict.fromkeys(nodes or []))
    if wanted and selector is not None:
        # As kubectl: `kubectl get nodes a -l x` is refused too.
        raise UsageProblem("name nodes or give -l, not both", "drop the node names or -l")
    labels = label_query(selector, "node") or None
    where = target(kubeconfig, context, namespace, all_namespaces=all_namespaces or not namespace, as_user=as_user)

    def read() -> Result:
        return _read(where.kube, where.namespace, wanted, summary=summary, top=top, labels=labels)

    if watch:
        return _watch(read, output, interval)
    with collector_paused():
        emit(read(), output)
    return 0


def shows_summary(summary: bool | None, nodes_named: bool, node_count: int) -> bool:
    """--summary/--no-summary when given; else the summary above `SUMMARY_ABOVE` nodes unless nodes are named."""
    if summary is not None:
        return summary
    return not nodes_named and node_count > SUMMARY_ABOVE


def _read(
    kube: Kube, namespace: str | None, wanted: list[str], *, summary: bool | None, top: int, labels: str | None
) -> Result:
    """One read of the cluster (the named nodes, or those with the labels), as the detailed view or the summary."""
    from kubectl_hami_place.core.fleet import placements_by_phase, summarize_fleet
    from kubectl_hami_place.core.fragmentation import summarize
    from kubectl_hami_place.kube import cluster_reads, placements

    read = cluster_reads.read_cluster_info(kube)
    info = read.info
    if wanted:
        known = {node.name for node in info.nodes}
        missing = [name for name in wanted if name not in known]
        if missing:
            raise not_gpu_nodes(kube, missing)
        info = info.only(wanted)
    if labels is not None:
        info = info.only({node["metadata"]["name"] for node in cluster_reads.list_nodes(kube, labels)})
    for message in info.warnings:
        warn(message)
    shown = {node.name for node in info.nodes}
    items = [
        item
        for item in placements.list_placements(kube, namespace)
        if not (wanted or labels) or (item.get("spec") or {}).get("nodeName") in shown
    ]
    if shows_summary(summary, bool(wanted), len(info.nodes)):
        return StatusSummary(
            summarize_fleet(info, top),
            placements_by_phase(items),
            info.generated_at,
            read.source,
            read.from_webhook,
            info.kept_view(),
        )
    empty = NO_GPU_NODES if labels is None else f"No HAMi GPU node has the labels {labels}."
    return Status(info, summarize(info), tuple(items), read.source, read.from_webhook, namespace is None, empty)


def _watch(read: Callable[[], Result], output: OutputFormat, interval: float) -> int:
    """Shows `read()` every `interval` seconds until Ctrl-C, which ends the watch (exit 0). On a terminal a table
    is redrawn in place (rich Live); otherwise, and for json/yaml, each read is printed after the last (yaml as
    `---` documents), as `kubectl get -w` streams. A failed read is shown in place of the view and retried."""
    from rich.console import Console
    from rich.live import Live
    from rich.text import Text as RichText

    color = color_enabled(sys.stdout)
    render = formatter_for(output.value, color=color).render
    in_place = output in (OutputFormat.table, OutputFormat.wide) and sys.stdout.isatty()
    try:
        if not in_place:
            first = True
            while True:
                try:
                    text = render(read())
                except KubeError as exc:
                    # stdout stays the frames alone (a JSON or YAML stream a program reads); the watch goes on.
                    error_line(str(exc))
                else:
                    separator = "" if first else ("---\n" if output is OutputFormat.yaml else "\n")
                    write_out(separator + text)
                    first = False
                time.sleep(interval)
        # A terminal whatever NO_COLOR says (it takes the colour away, not the redraw).
        console = Console(file=sys.stdout, force_terminal=True, no_color=not color, highlight=False)
        with Live(console=console, auto_refresh=False, vertical_overflow="visible") as live:
            while True:
                started = datetime.now(UTC).strftime("%H:%M:%S")
                body = _frame(read, render)
                head = f"Every {interval:g}s: kubectl hami-place status  {started} UTC  (Ctrl-C to stop)\n\n"
                live.update(RichText(head, style="dim" if color else "") + RichText.from_ansi(body), refresh=True)
                time.sleep(interval)
    except KeyboardInterrupt:
        return 0


def _frame(read: Callable[[], Result], render: Callable[[Result], str]) -> str:
    """One rendering in place; an API failure becomes its error line, so the watch goes on."""
    try:
        return render(read())
    except KubeError as exc:
        return f"error: {printable(str(exc))}\n"
