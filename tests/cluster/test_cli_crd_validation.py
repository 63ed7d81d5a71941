"""The API server itself rejects bad placements, whatever client sends them (the CRD's schema and CEL rules)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sandbox.cluster import Sandbox

pytestmark = pytest.mark.cluster


def placement(namespace: str, **spec: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "reqID": "req-12345",
        "podSelector": {"matchLabels": {"app": "x"}},
        "nodeName": "gpu-h100-0",
        "gpuDevices": ["gpu-0"],
    }
    base.update(spec)
    return {
        "apiVersion": "scheduling.hami.placement.com/v1",
        "kind": "HamiPodPlacement",
        "metadata": {"name": "p", "namespace": namespace},
        "spec": base,
    }


def create(cluster: Sandbox, obj: dict[str, Any], verb: str = "create") -> tuple[int, str]:
    proc = cluster.kubectl(verb, "-f", "-", input=json.dumps(obj), check=False)
    return proc.returncode, proc.stderr


def test_four_character_req_id_is_rejected(cluster: Sandbox, namespace: str) -> None:
    code, err = create(cluster, placement(namespace, reqID="abcd"))
    assert code != 0
    assert "spec.reqID" in err and "at least 5" in err


def test_empty_gpu_devices_are_rejected(cluster: Sandbox, namespace: str) -> None:
    code, err = create(cluster, placement(namespace, gpuDevices=[]))
    assert code != 0
    assert "spec.gpuDevices" in err and "at least 1" in err


def test_bad_card_reference_and_empty_selector_are_rejected(cluster: Sandbox, namespace: str) -> None:
    code, err = create(cluster, placement(namespace, gpuDevices=["gpu-0/0"]))
    assert code != 0 and "spec.gpuDevices[0]" in err
    code, err = create(cluster, placement(namespace, podSelector={}))
    assert code != 0 and "podSelector must not be empty" in err


def test_changing_req_id_is_rejected(cluster: Sandbox, namespace: str) -> None:
    assert create(cluster, placement(namespace))[0] == 0
    code, err = create(cluster, placement(namespace, reqID="req-67890"), verb="apply")
    assert code != 0
    assert "reqID is immutable" in err
    stored = json.loads(cluster.kubectl("get", "hamipodplacement", "p", "-n", namespace, "-o", "json").stdout)
    assert stored["spec"]["reqID"] == "req-12345"


def test_a_node_name_that_is_no_node_name_is_rejected(cluster: Sandbox, namespace: str) -> None:
    # It would otherwise reach the placement's status message and Events as the tenant wrote it.
    code, err = create(cluster, placement(namespace, nodeName="gpu-a\nWarning  Evicted"))
    assert code != 0 and "spec.nodeName" in err and "should match" in err
