"""The controller's last decisions, which its leader says on its Lease in every mode (a dry-run's moves, no plan, a
run carried out or stopped, how a rescued pod fared), so that `defrag status` shows what it did or would do: a dry-run
leaves no placement to list, and a pod's Events go with the pod."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from kubectl_hami_place.core.fields import rfc3339
from kubectl_hami_place.core.k8s_names import is_dns_label
from kubectl_hami_place.core.placement import time_or_none

if TYPE_CHECKING:
    from kubectl_hami_place.core.defrag.runs import RunDecision

DECISIONS_KEPT = 5
"""The decisions a leader says, newest first: the last few, small beside a Lease's 256 KiB of annotations."""
MAX_WORDS = 1024
"""The longest trigger or outcome said (as an Event's note, at most 1 KiB); a longer one is cut with an ellipsis."""
MAX_MOVES = 10_000
"""The most moves a decision read may count: far beyond any run's budget, so a larger count is not the leader's."""


@dataclass(frozen=True)
class Decision:
    """One run's decision: when, its run, what triggered it, its moves (planned, or made once carried out), whether
    only as a dry-run, and the outcome in words (its Event's; a run carried out adds how many moves were made)."""

    time: datetime
    run_id: str
    trigger: str
    moves: int
    dry_run: bool
    outcome: str

    def to_data(self) -> dict[str, Any]:
        """The decision as JSON, as the Lease carries it and `defrag status -o json` prints it."""
        return {
            "time": rfc3339(self.time),
            "run": self.run_id,
            "trigger": self.trigger,
            "moves": self.moves,
            "dryRun": self.dry_run,
            "outcome": self.outcome,
        }


def decided(time: datetime, run: RunDecision, moves: int, outcome: str) -> Decision:
    """The decision a run came to, as the leader says it: `moves` planned (made, once carried out), the outcome as
    its Event said it; the trigger and the outcome cut at MAX_WORDS characters, a cut one ending in an ellipsis."""
    return Decision(time, run.run_id, _cut(run.trigger), moves, run.dry_run, _cut(outcome))


def rescue_ended(time: datetime, run_id: str, pod: str, moves: int, outcome: str) -> Decision:
    """How a rescue run's pod fared once its moves were made (scheduled, or the room lost), as its Event said it; the
    outcome cut at MAX_WORDS characters (the trigger, naming a pod, is always shorter)."""
    return Decision(time, run_id, f"rescue {pod}", moves, False, _cut(outcome))


def _cut(words: str) -> str:
    """`words` at most MAX_WORDS characters."""
    return words if len(words) <= MAX_WORDS else words[: MAX_WORDS - 1] + "…"


def with_decision(decisions: Sequence[Decision], decision: Decision) -> tuple[Decision, ...]:
    """The decisions with `decision` first, at most DECISIONS_KEPT (the oldest go)."""
    return (decision, *decisions)[:DECISIONS_KEPT]


def decisions_value(decisions: Sequence[Decision]) -> str:
    """The Lease annotation's value: the decisions as a compact JSON list, newest first."""
    return json.dumps([decision.to_data() for decision in decisions], separators=(",", ":"))


def decisions_of(value: object) -> tuple[Decision, ...]:
    """The decisions a Lease annotation says, at most DECISIONS_KEPT; an entry not as the leader writes it is passed
    over (a Lease is anyone's to write: a run that is not a DNS label, a count out of range or words too long stay
    out)."""
    if not isinstance(value, str):
        return ()
    try:
        entries = json.loads(value)
    except (ValueError, RecursionError):
        return ()
    if not isinstance(entries, list):
        return ()
    read = (_decision(entry) for entry in entries[:DECISIONS_KEPT])
    return tuple(decision for decision in read if decision is not None)


def _decision(entry: object) -> Decision | None:
    """One entry read, None unless every field is as the leader writes it."""
    if not isinstance(entry, dict):
        return None
    time = time_or_none(entry.get("time"))
    run_id, trigger, outcome = entry.get("run"), entry.get("trigger"), entry.get("outcome")
    moves, dry_run = entry.get("moves"), entry.get("dryRun")
    if time is None or not is_dns_label(run_id) or not isinstance(dry_run, bool):
        return None
    if not isinstance(moves, int) or isinstance(moves, bool) or not 0 <= moves <= MAX_MOVES:
        return None
    if not (isinstance(trigger, str) and isinstance(outcome, str) and _said(trigger) and _said(outcome)):
        return None
    return Decision(time, run_id, trigger, moves, dry_run, outcome)


def _said(words: str) -> bool:
    """Whether words are as the leader says them: some, at most MAX_WORDS."""
    return 0 < len(words) <= MAX_WORDS
