"""The history of moves read back from the placements the controller makes (budgets and cooldowns count it): the
labels and annotations kube/defrag.py writes are the ones core/defrag/budget.py reads."""

from __future__ import annotations

from datetime import UTC, datetime

from kubectl_hami_place.core.defrag.budget import history_from_placements
from kubectl_hami_place.core.names import (
    DEFRAG_FROM_CARDS_ANNOTATION,
    DEFRAG_FROM_NODE_ANNOTATION,
    DEFRAG_POD_ANNOTATION,
    DEFRAG_POD_UID_ANNOTATION,
    DEFRAG_RUN_LABEL,
    DEFRAG_TO_CARDS_ANNOTATION,
)
from kubectl_hami_place.core.planner import Move
from kubectl_hami_place.kube.defrag import move_annotations, move_labels

MOVE = Move(
    pod="team-a/x-1",
    uid="u-1",
    from_node="gpu-a",
    from_cards=("GPU-1",),
    to_node="gpu-b",
    to_cards=("GPU-2",),
    reason="",
)
NAMES = {"GPU-1": "gpu-3", "GPU-2": "gpu-0"}


def placement(phase: str | None, consumed: str = "", created: str = "2026-12-01T10:00:00Z") -> dict[str, object]:
    status: dict[str, object] = {"phase": phase} if phase else {}
    if consumed:
        status["consumedBy"] = {"name": consumed, "uid": "u-2"}
    return {
        "metadata": {
            "name": "move-x-1-abc",
            "namespace": "team-a",
            "creationTimestamp": created,
            "labels": move_labels("run-1"),
            "annotations": move_annotations(MOVE, NAMES),
        },
        "spec": {
            "reqID": "move-x-1-abc",
            "podSelector": {"matchLabels": {"app": "x"}},
            "nodeName": "gpu-b",
            "gpuDevices": ["GPU-2"],
        },
        "status": status,
    }


def test_a_consumed_move_counts_as_evicted_with_its_replacement() -> None:
    [record] = history_from_placements([placement("Consumed", consumed="x-2")])
    assert record.run_id == "run-1"
    assert (record.pod, record.namespace, record.from_node, record.to_node) == (
        "team-a/x-1",
        "team-a",
        "gpu-a",
        "gpu-b",
    )
    assert (record.from_cards, record.to_cards) == (("gpu-3",), ("gpu-0",))
    assert (record.source, record.target) == ("gpu-a/gpu-3", "gpu-b/gpu-0")
    assert record.time == datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
    assert record.result == "Evicted"
    assert record.replacement == "team-a/x-2"
    assert record.spent


def test_open_and_ended_moves_and_foreign_placements() -> None:
    expired, pending = history_from_placements(
        [placement(None, created="2026-12-01T10:00:00Z"), placement("Expired", created="2026-12-01T11:00:00Z")]
    )
    assert pending.result == "Pending" and pending.replacement == ""
    assert expired.result == "Failed"
    foreign = placement("Consumed")
    del foreign["metadata"]["annotations"][DEFRAG_POD_ANNOTATION]  # type: ignore[index]
    assert history_from_placements([foreign]) == ()


def test_the_labels_and_annotations_name_the_run_the_pod_and_the_node_left() -> None:
    assert move_labels("run-1")[DEFRAG_RUN_LABEL] == "run-1"
    assert move_annotations(MOVE, NAMES) == {
        DEFRAG_POD_ANNOTATION: "team-a/x-1",
        DEFRAG_POD_UID_ANNOTATION: "u-1",
        DEFRAG_FROM_NODE_ANNOTATION: "gpu-a",
        DEFRAG_FROM_CARDS_ANNOTATION: "gpu-3",
        DEFRAG_TO_CARDS_ANNOTATION: "gpu-0",
    }


def test_a_side_whose_cards_are_not_all_named_is_left_out_and_reads_as_its_node() -> None:
    wide = Move("team-a/x-1", "u-1", "gpu-a", ("GPU-1", "GPU-4"), "gpu-b", ("GPU-2", "GPU-5"), "")
    names = {"GPU-1": "gpu-3", "GPU-2": "gpu-0", "GPU-5": "gpu-1"}
    annotations = move_annotations(wide, names)
    assert annotations == {
        DEFRAG_POD_ANNOTATION: "team-a/x-1",
        DEFRAG_POD_UID_ANNOTATION: "u-1",
        DEFRAG_FROM_NODE_ANNOTATION: "gpu-a",
        DEFRAG_TO_CARDS_ANNOTATION: "gpu-0,gpu-1",
    }, "GPU-4 has no name, so the cards it left are not written"
    stored = placement("Consumed", consumed="x-2")
    stored["metadata"]["annotations"] = annotations  # type: ignore[index]
    [record] = history_from_placements([stored])
    assert (record.source, record.target) == ("gpu-a", "gpu-b/gpu-0,gpu-1")


def test_a_move_placed_before_its_cards_were_written_reads_as_its_nodes() -> None:
    older = placement("Consumed", consumed="x-2")
    del older["metadata"]["annotations"][DEFRAG_FROM_CARDS_ANNOTATION]  # type: ignore[index]
    del older["metadata"]["annotations"][DEFRAG_TO_CARDS_ANNOTATION]  # type: ignore[index]
    [record] = history_from_placements([older])
    assert (record.from_cards, record.to_cards, record.source, record.target) == ((), (), "gpu-a", "gpu-b")
