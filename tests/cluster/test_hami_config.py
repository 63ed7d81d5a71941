"""Reading HAMi's device config from the cluster: found, given, missing, garbage, forbidden."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest

from kubectl_hami_place.core.hami_config import HAMI_DEFAULTS
from kubectl_hami_place.kube.client import connect
from kubectl_hami_place.kube.hami_config import read_hami_config
from sandbox.cluster import Sandbox
from sandbox.hami import HamiSettings, scheduler_deployment
from tests.cluster.cli_harness import allocated_pod, apply, custom_node, plugin
from tests.cluster.hami_harness import card_entries, create, pod

pytestmark = pytest.mark.cluster


@pytest.fixture
def configmap(cluster: Sandbox, namespace: str) -> Iterator[str]:
    """A ConfigMap in the test's namespace the test fills; `namespace/name`."""
    name = f"hami-{uuid.uuid4().hex[:6]}-device"
    yield f"{namespace}/{name}"
    cluster.kubectl("delete", "configmap", name, "-n", namespace, "--ignore-not-found")


def put(cluster: Sandbox, where: str, text: str) -> None:
    namespace, name = where.split("/")
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": {"device-config.yaml": text},
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(body))


def test_the_sandboxs_hami_configmap_is_found_without_being_named(cluster: Sandbox) -> None:
    settings = read_hami_config(connect(str(cluster.kubeconfig)))
    assert (settings.source, settings.notice) == ("kube-system/hami-scheduler-device", "")
    assert settings.config == HAMI_DEFAULTS


def test_a_tenants_configmap_and_scheduler_under_hamis_names_are_taken_for_none(
    cluster: Sandbox, namespace: str
) -> None:
    """Anyone who may create a ConfigMap and a Deployment in a namespace of theirs may give them HAMi's name and label:
    found beside HAMi's own in kube-system, neither is taken (the first by namespace name was: a tenant's namespace
    named `a` was read as HAMi's device config), HAMi's defaults stand in and the notice says why."""
    put(cluster, f"{namespace}/hami-scheduler-device", "nvidia:\n  resourceCountName: tenant.example/gpu\n")
    apply(cluster, scheduler_deployment(HamiSettings(gpu_policy="binpack", namespace=namespace)))
    learned = read_hami_config(connect(str(cluster.kubeconfig)))
    assert (learned.source, learned.config) == ("", HAMI_DEFAULTS)
    found = f"found in 2 namespaces (kube-system, {namespace}), any of them may be a tenant's; none is taken"
    assert learned.notice == (
        f"ConfigMaps hami-scheduler-device {found} (give HAMi's with --hami-config NS/NAME); using HAMi's defaults; "
        f"HAMi scheduler Deployments labelled app.kubernetes.io/component=hami-scheduler {found} (give HAMi's with "
        "--hami-scheduler NS/NAME); assuming HAMi's default GPU policy 'spread' (give --gpu-scheduler-policy)"
    )


def mutex_hami(cluster: Sandbox, configmap: str) -> None:
    """A HAMi installation beside the sandbox's, as its chart renders it: `<scheduler>-device` and the scheduler
    Deployment `<scheduler>` running with `--gpu-scheduler-policy=mutex`."""
    namespace, name = configmap.split("/")
    put(cluster, configmap, "nvidia:\n  resourceCountName: nvidia.com/gpu\n  resourceMemoryName: nvidia.com/gpumem\n")
    settings = HamiSettings(scheduler_name=name.removesuffix("-device"), gpu_policy="mutex", namespace=namespace)
    apply(cluster, scheduler_deployment(settings))


def test_the_default_gpu_policy_is_read_from_hamis_scheduler_deployment(cluster: Sandbox, configmap: str) -> None:
    mutex_hami(cluster, configmap)
    kube = connect(str(cluster.kubeconfig))
    learned = read_hami_config(kube, configmap)
    assert (learned.config.gpu_scheduler_policy, learned.notice) == ("mutex", ""), "the config's own scheduler's"
    named = read_hami_config(kube, scheduler=configmap.removesuffix("-device"))
    assert named.config.gpu_scheduler_policy == "mutex"
    given = read_hami_config(kube, configmap, gpu_scheduler_policy="binpack")
    assert given.config.gpu_scheduler_policy == "binpack", "the flag wins"
    missing = read_hami_config(kube, scheduler=f"{configmap.split('/', maxsplit=1)[0]}/no-such-scheduler")
    assert missing.config.gpu_scheduler_policy == "spread"
    assert "no HAMi scheduler Deployment" in missing.notice and "--gpu-scheduler-policy" in missing.notice


def test_pin_refuses_a_used_card_under_a_mutex_default_and_the_flag_overrides_it(
    cluster: Sandbox, namespace: str, configmap: str
) -> None:
    mutex_hami(cluster, configmap)
    [card] = card_entries(1)
    node, uuid = f"{namespace}-mutex", card["id"]
    register = json.dumps([card])
    apply(cluster, custom_node(node, register))
    try:
        apply(cluster, allocated_pod("neighbour", namespace, node, f"{uuid},NVIDIA,1000,0:;"))
        pin = ["pin", "-n", namespace, "-l", "app=x", "--node", node, "--gpu", "gpu-0", "--request-memory", "1000"]
        learned = plugin(cluster, *pin, "--hami-config", configmap, "--dry-run=client")
        assert learned.code == 3, learned.err
        assert "ExclusiveDeviceAllocateConflict" in learned.error_lines[0], learned.err
        given = plugin(
            cluster, *pin, "--hami-config", configmap, "--gpu-scheduler-policy", "spread", "--dry-run=client"
        )
        assert given.code == 0, given.err
    finally:
        cluster.kubectl("delete", "node", node, "--wait=false", check=False)


def test_a_named_configmap_with_renamed_resources_and_a_default_memory(cluster: Sandbox, configmap: str) -> None:
    put(
        cluster,
        configmap,
        "nvidia:\n  resourceCountName: example.com/vgpu\n  resourceMemoryName: example.com/vgpu-mem\n"
        "  defaultMemory: 2048\n  defaultGPUNum: 1\n",
    )
    settings = read_hami_config(connect(str(cluster.kubeconfig)), configmap, gpu_scheduler_policy="binpack")
    assert settings.source == configmap and not settings.notice
    assert settings.config.resource_count_name == "example.com/vgpu"
    assert settings.config.resource_memory_name == "example.com/vgpu-mem"
    assert settings.config.default_memory == 2048
    assert settings.config.gpu_scheduler_policy == "binpack"


@pytest.mark.parametrize(
    ("text", "said"),
    [(None, "not found"), ("nvidia: [unclosed", "not valid YAML"), ("cambricon: {}\n", "no nvidia: section")],
)
def test_a_missing_or_unusable_configmap_falls_back_to_hamis_defaults_with_a_notice(
    cluster: Sandbox, configmap: str, text: str | None, said: str
) -> None:
    if text is not None:
        put(cluster, configmap, text)
    settings = read_hami_config(connect(str(cluster.kubeconfig)), configmap)
    assert settings.config == HAMI_DEFAULTS
    assert said in settings.notice and settings.notice.endswith("using HAMi's defaults"), settings.notice


def test_a_reader_without_rights_gets_the_defaults_and_is_told_why(cluster: Sandbox, namespace: str) -> None:
    kube = connect(str(cluster.kubeconfig))
    kube.api.default_headers["Impersonate-User"] = f"someone-{namespace}"
    settings = read_hami_config(kube)
    assert settings.config == HAMI_DEFAULTS
    assert settings.notice.startswith("cannot read HAMi's device config (forbidden: "), settings.notice
    assert "cannot read HAMi's scheduler Deployment (forbidden: " in settings.notice, settings.notice


def test_why_and_plan_read_a_pod_with_the_hami_config_given_as_pin_does(
    cluster: Sandbox, namespace: str, configmap: str
) -> None:
    """A pod asking renamed resources is no GPU pod under HAMi's default names; `--hami-config` (which why and plan
    refused before, though their warning named it) makes it one."""
    renamed = "nvidia:\n  resourceCountName: example.com/vgpu\n  resourceMemoryName: example.com/vgpu-mem\n"
    put(cluster, configmap, renamed)
    create(cluster, namespace, pod("renamed", {"example.com/vgpu": "1", "example.com/vgpu-mem": "1000"}))
    by_default = plugin(cluster, "why", "-n", namespace, "renamed")
    assert by_default.code == 1 and "asks for no NVIDIA card" in by_default.error_lines[-1], by_default.err
    given = plugin(cluster, "why", "-n", namespace, "renamed", "--hami-config", configmap, "-o", "json")
    assert given.code == 0, given.err
    assert given.json()["pod"] == f"{namespace}/renamed"
    planned = plugin(cluster, "plan", "-n", namespace, "--for", "renamed", "--hami-config", configmap, "-o", "json")
    assert "asks for no NVIDIA card" not in planned.err and planned.code in (0, 1), planned.err
    assert planned.json()["pod"] == {"namespace": namespace, "name": "renamed"}
