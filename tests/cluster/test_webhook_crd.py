"""The server reads the installed HamiPodPlacement CRD from the sandbox's API server and says when it is older than
the server: the chart's CRD keeps everything, one applied without `status.defragRefused` is named."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from sandbox.cluster import Sandbox, wait_for
from sandbox.prepare import CRD, CRD_NAME
from sandbox.webhook import Webhook, start

pytestmark = pytest.mark.cluster
PRUNED = "hami_place_crd_fields_pruned"


def apply_crd(cluster: Sandbox, path: Path) -> None:
    """Apply a CRD file and wait until the API server has it established."""
    cluster.kubectl("apply", "-f", str(path))
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=30s", f"crd/{CRD_NAME}")


def counted(webhook: Webhook) -> float:
    """The server's count of pruned fields, once it has read the CRD."""
    wait_for(lambda: not math.isnan(webhook.metric(PRUNED)), "the server to read the CRD", timeout=30)
    return webhook.metric(PRUNED)


def test_a_crd_older_than_the_server_is_counted_and_named_in_its_log(
    cluster: Sandbox, tmp_path: Path, webhooks: list[Webhook]
) -> None:
    current = start(cluster, tmp_path)
    webhooks.append(current)
    assert counted(current) == 0, "the chart's CRD keeps every field"
    older = yaml.safe_load(CRD.read_text())
    del older["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["defragRefused"]
    older_file = tmp_path / "older-crd.yaml"
    older_file.write_text(yaml.safe_dump(older))
    try:
        apply_crd(cluster, older_file)
        stale = start(cluster, tmp_path)
        webhooks.append(stale)
        assert counted(stale) == 1
        assert f"the installed CRD {CRD_NAME} drops status.defragRefused, which this server writes" in (
            stale.log.read_text()
        )
    finally:
        apply_crd(cluster, CRD)
