"""The planner's snapshot of objects already read, with what it was read from and what to tell the user."""

from __future__ import annotations

from datetime import UTC, datetime

from kubectl_hami_place.core.hami_config import HAMI_DEFAULTS
from kubectl_hami_place.core.node_selection import NodeMarks
from kubectl_hami_place.core.planner.objects import snapshot_from_objects
from kubectl_hami_place.kube.snapshot import SnapshotRead, snapshot_of
from tests.unit.test_core_planner import node_object, pod_object


def test_a_snapshot_read_keeps_its_config_its_objects_and_the_notices_before_the_warnings() -> None:
    """The plan, its CLI output and the webhook's defrag all read the same SnapshotRead: the pods placed under the
    config given (not HAMi's defaults), the objects the snapshot came from, each node's labels and taints for the pods
    to be placed, and the config's notice ahead of the warnings about objects left out."""
    config = HAMI_DEFAULTS.with_policy("binpack")
    nodes = [node_object("a"), node_object("b", ready=False)]
    pods = [pod_object("web", "a"), pod_object("db", "b")]
    budgets = [
        {"metadata": {"name": "web", "namespace": "ns"}, "spec": {"selector": {"matchLabels": {"app": "web"}}}},
        {"metadata": {"name": "bad", "namespace": "ns"}, "spec": {"selector": {"matchLabels": "app"}}},
    ]
    snapshot, warnings = snapshot_from_objects(nodes, pods, budgets, datetime.now(UTC), config)
    assert warnings == (
        "PodDisruptionBudget ns/bad: matchLabels must be an object of label: value; it protects no pod in this plan",
    )
    assert snapshot_of(nodes, pods, budgets, config, ("HAMi's config read from kube-system/hami",)) == SnapshotRead(
        snapshot=snapshot,
        config=config,
        warnings=("HAMi's config read from kube-system/hami", *warnings),
        node_marks=NodeMarks({"a": {"kubernetes.io/hostname": "a"}, "b": {"kubernetes.io/hostname": "b"}}),
        pods=tuple(pods),
        nodes=tuple(nodes),
    )
    assert snapshot != snapshot_from_objects(nodes, pods, budgets, datetime.now(UTC))[0], "the config steers the pods"
