"""HAMi as a cluster configures it: renamed resources and a non-zero defaultMemory, where pin, our webhook and HAMi
still agree.

A second HAMi (scheduler `hami-custom`, its own webhook scoped to namespaces labelled `hami-custom=yes`, its own
kube-scheduler and `hami-custom-device` ConfigMap) runs beside the sandbox's own for this module.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from sandbox.cluster import Sandbox, wait_for
from sandbox.hami import NVIDIA_DEFAULTS, HamiSettings
from sandbox.webhook import Webhook, start
from tests.cluster.cli_harness import plugin
from tests.cluster.hami_harness import (
    GpuNode,
    allocation,
    card_entries,
    create,
    delete_nodes,
    deployment,
    fresh_node,
    pod,
    scale_up,
)
from tests.cluster.webhook_harness import register, sees_placement

pytestmark = pytest.mark.cluster
SCHEDULER = "hami-custom"
COUNT, MEM, CORES = "example.com/vgpu", "example.com/vgpu-mem", "example.com/vgpu-cores"
DEFAULT_MEMORY = 3000
HAMI_NAMESPACE = "hami-custom-system"
DEVICE_CONFIG = f"{HAMI_NAMESPACE}/{SCHEDULER}-device"


@pytest.fixture(scope="module")
def renamed(cluster: Sandbox) -> Iterator[str]:
    """The second HAMi's namespace (its ConfigMap lives there); started for the module, stopped after it."""
    if cluster.authority is None:
        pytest.skip("a second HAMi needs a sandbox this session started, not an attached one")
    namespace = HAMI_NAMESPACE
    cluster.kubectl("create", "namespace", namespace)
    nvidia = {
        **NVIDIA_DEFAULTS,
        "resourceCountName": COUNT,
        "resourceMemoryName": MEM,
        "resourceMemoryPercentageName": "example.com/vgpu-mem-percentage",
        "resourceCoreName": CORES,
        "resourcePriorityName": "example.com/vgpu-priority",
        "defaultMemory": DEFAULT_MEMORY,
    }
    settings = HamiSettings(
        scheduler_name=SCHEDULER,
        nvidia=nvidia,
        webhook_name="hami-custom-webhook",
        namespace=namespace,
        namespace_selector={"matchLabels": {"hami-custom": "yes"}},
    )
    before = list(cluster.processes)
    cluster.start_hami(settings)
    try:
        yield namespace
    finally:
        cluster.kubectl("delete", "mutatingwebhookconfiguration", settings.webhook_name, "--ignore-not-found")
        for process in [p for p in cluster.processes if p not in before]:
            process.stop()
            cluster.processes.remove(process)
        cluster.kubectl("delete", "namespace", namespace, "--wait=false")


@pytest.fixture
def node(cluster: Sandbox) -> Iterator[GpuNode]:
    made = fresh_node(cluster, card_entries(1))
    yield made
    delete_nodes(cluster, [made])


@pytest.fixture
def renamed_namespace(cluster: Sandbox, renamed: str, namespace: str) -> str:
    """The test's namespace, under the second HAMi's webhook."""
    cluster.kubectl("label", "namespace", namespace, "hami-custom=yes")
    return namespace


@pytest.fixture
def placing(
    cluster: Sandbox,
    renamed_namespace: str,
    tmp_path: Path,
    webhooks: list[Webhook],
    configurations: list[str],
) -> Webhook:
    """Our webhook configured for the second HAMi, registered for the test's namespace as the chart would."""
    namespace = renamed_namespace
    hook = start(cluster, tmp_path, "--scheduler-name", SCHEDULER, "--hami-config", DEVICE_CONFIG)
    webhooks.append(hook)
    register(cluster, configurations, namespace, [(hook, {})])
    return hook


def test_pin_the_webhook_and_hami_agree_on_renamed_resources_and_a_default_memory(
    cluster: Sandbox, renamed_namespace: str, node: GpuNode, placing: Webhook
) -> None:
    namespace = renamed_namespace
    create(cluster, namespace, pod("neighbour", {COUNT: "1", MEM: "36000"}, node=node.name))
    assert allocation(cluster, namespace, "neighbour").containers == (((node.uuid(0), 36000, 0),),)
    # One card and 20 % of its cores, and no memory: HAMi's defaultMemory applies.
    create(cluster, namespace, deployment("trainer", 0, {COUNT: "1", CORES: "20"}))

    pin = ["pin", "-n", namespace, "-l", "app=trainer", "--node", node.name, "--gpu", "gpu-0", "-o", "json"]
    by_default = plugin(cluster, *pin, "--dry-run=client")
    assert by_default.code == 3, "with HAMi's default names the template asks no card"
    assert by_default.error_lines == [
        "error: Deployment trainer: no container asks for nvidia.com/gpu; a placement pins GPU pods only; "
        "check -l, or give --hami-config if resources are renamed"
    ]

    run = plugin(cluster, *pin, "--hami-config", DEVICE_CONFIG)
    assert run.code == 0, run.err
    assert [c["memoryMiB"] for c in run.json()["cards"]] == [DEFAULT_MEMORY], "4960 MiB free holds the default 3000"
    name = run.json()["placement"]["metadata"]["name"]
    wait_for(lambda: sees_placement(placing, namespace, name), "the webhook to see the placement")

    placed = scale_up(cluster, namespace, "trainer")
    stored = client.CoreV1Api(cluster.api_client()).read_namespaced_pod(placed, namespace)
    assert stored.spec.scheduler_name == SCHEDULER
    assert stored.metadata.annotations["nvidia.com/use-gpuuuid"] == node.uuid(0)
    assert allocation(cluster, namespace, placed).containers == (((node.uuid(0), DEFAULT_MEMORY, 20),),)
