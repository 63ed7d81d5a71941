"""How `pin` and `evict --to-node` word a pin's verdict: a refusal line per problem, what the placement gives."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kubectl_hami_place.cli._present import selector_text
from kubectl_hami_place.cli.output import Block, Table, Text
from kubectl_hami_place.core.cards import Card
from kubectl_hami_place.core.fit import FitReason
from kubectl_hami_place.core.pin_check import PinReason, PinVerdict, Problem
from kubectl_hami_place.kube.move_values import Checked

_HINTS = {
    PinReason.NodeNotFound: "check the name (kubectl get nodes)",
    PinReason.NoRegister: "pin to a node where HAMi's device plugin runs",
    PinReason.CardNamedTwice: "give each card once",
    PinReason.InvalidSpec: "fix the placement",
    PinReason.InvalidGpuRequest: "fix its GPU resources",
    PinReason.NoGpuRequest: "a placement pins GPU pods only; check -l, or give --hami-config if resources are renamed",
    PinReason.NodeNameSet: "drop spec.nodeName so that the scheduler places the pod",
    PinReason.PrivilegedContainer: "drop securityContext.privileged from the pod's containers",
    PinReason.CardCountMismatch: "give one --gpu per card",
    PinReason.ShareTooSmall: "raise the percent in --gpu",
    FitReason.RequestExceedsPercent: "raise the percent in --gpu or lower the pod's nvidia.com/gpumem",
    FitReason.NumaNotFit: "name cards of one NUMA node (kubectl hami-place status shows each card's)",
    FitReason.CardMigMode: "name a card in hami-core or mps mode",
    PinReason.InvalidScoringWeights: "fix or remove the pod's hami.io/device-scoring-weights",
    PinReason.NoAllocatableGpu: "wait until HAMi's device plugin serves the node again, or pin to another node",
    PinReason.KeptOffNode: "move it to a node its tolerations and node selection allow, or change them",
    PinReason.NodeResourcesShort: "pick a node with room (kubectl describe node), or lower the pod's requests",
}


def refusal_line(problem: Problem, pin: PinVerdict, source: str, evict: str | None) -> str:
    """`gpu-1 on gpu-a100-0: CardInsufficientMemory: <numbers>; <what to do>`, or `<source>: <why>; <what to do>`."""
    node = pin.node
    status_hint = f"kubectl hami-place status {node}"
    check = next((c for c in pin.checks if c.ref == problem.ref), None)
    card = problem.card
    if problem.reason in _HINTS:
        hint = _HINTS[problem.reason]  # type: ignore[index]
    elif problem.reason == FitReason.UnknownCard:
        hint = f"list the node's cards ({status_hint})"
    elif problem.reason in (FitReason.CardUnhealthy, FitReason.CardCordoned, FitReason.CardNotNvidia):
        hint = f"pick another card ({status_hint})"
    elif check is not None and card is not None and check.memory_mib > card.devmem:
        hint = f"the card has {card.devmem} MiB in all; pick a bigger card or ask for less memory"
    elif evict:
        hint = f"it does not fit even once {evict} is evicted; pick another card ({status_hint}) or evict another pod"
    else:
        hint = f"pick another card ({status_hint}) or add --evict POD"
    if problem.ref is None:
        about = f"{source}: " if problem.reason in _POD_REASONS else ""
        return f"{about}{problem.message}; {hint}"
    return f"{problem.ref} on {node}: {problem.reason}: {_message(problem.message, card)}; {hint}"


_POD_REASONS = frozenset(
    {
        PinReason.InvalidGpuRequest,
        PinReason.NoGpuRequest,
        PinReason.NodeNameSet,
        PinReason.PrivilegedContainer,
        PinReason.CardCountMismatch,
        PinReason.ShareTooSmall,
        PinReason.InvalidScoringWeights,
        FitReason.NumaNotFit,
        PinReason.KeptOffNode,
        PinReason.NodeResourcesShort,
    }
)


def _message(message: str, card: Card | None) -> str:
    """The core's message without the card label the line already names: `2048 MiB free, the pod asks 4096 MiB`."""
    if card is None or not message.startswith(card.label()):
        return message
    rest = message[len(card.label()) :].strip().lstrip(":").strip()
    return rest[len("has ") :] if rest.startswith("has ") else rest if rest.startswith("the ") else f"the card {rest}"


@dataclass(frozen=True)
class PlacementResult:
    """What was created (or would be, under dry-run) and what the placed pod will get on each card."""

    checked: Checked
    dry_run: str
    obj: dict[str, Any]
    evicted: str | None = None

    def cards(self) -> list[dict[str, Any]]:
        """Per card: reference, UUID, model, memory and cores the pod gets, verdict now and after eviction."""
        rows = []
        for check in self.checked.checks:
            card: Card | None = check.card
            rows.append(
                {
                    "ref": str(check.ref),
                    "uuid": card.uuid if card else "",
                    "index": card.index if card else None,
                    "model": card.type if card else "",
                    "memoryMiB": check.memory_mib,
                    "cores": check.request.coresreq,
                    "fitsNow": check.fits_now,
                    "fitsAfterEviction": check.fits_after_eviction,
                }
            )
        return rows

    def to_data(self) -> Any:
        """The placement object plus the per-card outcome and warnings."""
        return {
            "placement": self.obj,
            "dryRun": self.dry_run,
            "request": self.checked.workload.source,
            "cards": self.cards(),
            "evicted": self.evicted,
            "warnings": list(self.checked.warnings),
        }

    def to_blocks(self) -> list[Block]:
        """A created line, what the pod gets on each card, what happens next."""
        metadata = self.obj.get("metadata") or {}
        spec = self.obj.get("spec") or {}
        suffix = "" if self.dry_run == "none" else f" ({self.dry_run} dry run)"
        header = [
            f"hamipodplacement {metadata.get('namespace')}/{metadata.get('name')} created{suffix} "
            f"(reqID {spec.get('reqID')})",
            f"The next pod matching -l {selector_text(spec.get('podSelector'))} in namespace "
            f"{metadata.get('namespace')} goes to node {self.checked.node} "
            f"(its request from {self.checked.workload.source}):",
        ]
        rows = []
        for card in self.cards():
            if card["fitsAfterEviction"] is None or card["fitsNow"]:
                verdict = "fits now"
            else:
                verdict = "fits once the evicted pod is gone"
            rows.append(
                (card["ref"], card["uuid"], card["model"], f"{card['memoryMiB']} MiB", f"{card['cores']}%", verdict)
            )
        blocks: list[Block] = [
            Text(tuple(header)),
            Table(columns=("Card", "UUID", "Model", "Memory", "Cores", "Verdict"), rows=tuple(rows)),
        ]
        if self.checked.evict and not self.evicted:
            blocks.append(Text((f"Pod {self.checked.evict} will be evicted once a pod claims the placement.",)))
        if self.evicted:
            blocks.append(Text((f"pod {self.checked.namespace}/{self.evicted} evicted{suffix}",)))
        return blocks
