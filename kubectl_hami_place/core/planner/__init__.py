"""The defragmentation planner: from a cluster snapshot and a goal to ordered, feasible, bounded pod moves."""

from kubectl_hami_place.core.planner.goals import plan
from kubectl_hami_place.core.planner.model import (
    DO_NOT_MOVE,
    SEARCH_STEPS,
    CardState,
    CompactGoal,
    FitGoal,
    FreeCardsGoal,
    Goal,
    Limits,
    Move,
    Plan,
    PlanNode,
    PlanPod,
    Snapshot,
    Summary,
)
from kubectl_hami_place.core.planner.why import CardWhy, NodeWhy, why

__all__ = [
    "DO_NOT_MOVE",
    "SEARCH_STEPS",
    "CardState",
    "CardWhy",
    "CompactGoal",
    "FitGoal",
    "FreeCardsGoal",
    "Goal",
    "Limits",
    "Move",
    "NodeWhy",
    "Plan",
    "PlanNode",
    "PlanPod",
    "Snapshot",
    "Summary",
    "plan",
    "why",
]
