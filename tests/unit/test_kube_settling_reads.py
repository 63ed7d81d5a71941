"""What `apply` reads of a settling move, by name: the pods, never a path of the API from a status."""

from __future__ import annotations

from kubectl_hami_place.core.planner import Move
from kubectl_hami_place.core.planner.apply import placement_for
from kubectl_hami_place.kube.moves import move_pods


def test_a_settling_move_reads_the_pod_of_its_name_and_its_placements_consumer_by_name_alone() -> None:
    """`apply` reads a settling move's pods by name: the pod under the moved pod's name and the consumer its
    placement's status names; a consumer name that is no object name is never read (it would be an API path)."""
    move = Move("ns/x", "uid-x", "a", ("GPU-a",), "b", ("GPU-b",), "room for ns/big")
    stored = {("ns", "x"): {"metadata": {"name": "x"}}, ("ns", "x-2"): {"metadata": {"name": "x-2"}}}
    reads: list[tuple[str, str]] = []

    def read(namespace: str, name: str) -> dict | None:
        reads.append((namespace, name))
        return stored.get((namespace, name))

    def placement(consumer: str) -> list[dict]:
        listed = [{"metadata": {"name": "other"}, "status": {"consumedBy": {"name": "y"}}}]
        return [*listed, {"metadata": {"name": placement_for(move)}, "status": {"consumedBy": {"name": consumer}}}]

    assert move_pods(read, move, placement("x-2")) == [stored[("ns", "x")], stored[("ns", "x-2")]]
    assert reads == [("ns", "x"), ("ns", "x-2")]
    reads.clear()
    assert move_pods(read, move, placement("../../../api/v1/secrets")) == [stored[("ns", "x")]]
    assert move_pods(read, move, placement("x")) == [stored[("ns", "x")]], "a StatefulSet's pod, read once"
    assert move_pods(read, move, []) == [stored[("ns", "x")]]
    assert reads == [("ns", "x")] * 3
