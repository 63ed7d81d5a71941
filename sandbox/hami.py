"""HAMi in the sandbox, configured as HAMi's chart (v2.10) configures it by default.

HAMi's scheduler extender and admission webhook (one process, built from HAMi's source), a second kube-scheduler
with the `hami-scheduler` profile that calls it, HAMi's MutatingWebhookConfiguration, and a stand-in for HAMi's
device plugin (`sandbox.device_plugin`) that completes each bind as the real plugin's Allocate does.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HAMI_SCHEDULER = "hami-scheduler"

# The chart's default `nvidia:` section of device-config.yaml (charts/hami/templates/scheduler/device-configmap.yaml
# rendered with charts/hami/values.yaml); the MIG allow-list is left out: the sandbox has no MIG cards.
NVIDIA_DEFAULTS: dict[str, Any] = {
    "resourceCountName": "nvidia.com/gpu",
    "resourceMemoryName": "nvidia.com/gpumem",
    "resourceMemoryPercentageName": "nvidia.com/gpumem-percentage",
    "resourceCoreName": "nvidia.com/gpucores",
    "resourcePriorityName": "nvidia.com/priority",
    "overwriteEnv": False,
    "defaultMemory": 0,
    "defaultCores": 0,
    "defaultGPUNum": 1,
    "preConfiguredDeviceMemory": 0,
    "memoryFactor": 1,
    "deviceSplitCount": 10,
    "deviceMemoryScaling": 1,
    "deviceCoreScaling": 1,
    "enableNumaTopology": False,
    "gpuCorePolicy": "default",
    "libCudaLogLevel": 1,
    "runtimeClassName": "",
}


@dataclass(frozen=True)
class HamiSettings:
    """One HAMi installation: its scheduler name, its device config's nvidia section and its default policies."""

    scheduler_name: str = HAMI_SCHEDULER
    nvidia: dict[str, Any] = field(default_factory=lambda: dict(NVIDIA_DEFAULTS))
    node_policy: str = "binpack"
    gpu_policy: str = "spread"
    webhook_name: str = "hami-webhook"
    namespace: str = "kube-system"
    namespace_selector: dict[str, Any] = field(
        default_factory=lambda: {
            "matchExpressions": [{"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]}]
        }
    )

    def device_config(self) -> str:
        """device-config.yaml as the chart's ConfigMap holds it (JSON is YAML)."""
        return json.dumps({"nvidia": self.nvidia}, indent=2)

    def managed_resources(self) -> list[dict[str, Any]]:
        """The chart's extender managedResources for NVIDIA: every HAMi resource, ignored by kube-scheduler."""
        keys = (
            "resourceCountName",
            "resourceMemoryName",
            "resourceCoreName",
            "resourceMemoryPercentageName",
            "resourcePriorityName",
        )
        return [{"name": self.nvidia[k], "ignoredByScheduler": True} for k in keys]


def device_configmap(settings: HamiSettings) -> dict[str, Any]:
    """The ConfigMap the chart makes of device-config.yaml (`<scheduler>-device`), where pin and the webhook read it."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{settings.scheduler_name}-device", "namespace": settings.namespace},
        "data": {"device-config.yaml": settings.device_config()},
    }


def scheduler_deployment(settings: HamiSettings) -> dict[str, Any]:
    """HAMi's scheduler Deployment as its chart renders it (name, label, the extender's command), at 0 replicas: the
    sandbox runs the extender as a process, and this object is where pin and the webhook read its GPU policy."""
    labels = {"app.kubernetes.io/component": "hami-scheduler", "app.kubernetes.io/name": "hami"}
    command = [
        "scheduler",
        f"--scheduler-name={settings.scheduler_name}",
        f"--node-scheduler-policy={settings.node_policy}",
        f"--gpu-scheduler-policy={settings.gpu_policy}",
        "--device-config-file=/device-config.yaml",
    ]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": settings.scheduler_name, "namespace": settings.namespace, "labels": labels},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [{"name": "vgpu-scheduler-extender", "image": "hami:v2.10.0", "command": command}]
                },
            },
        },
    }


def scheduler_args(
    settings: HamiSettings, bind: str, metrics: str, *, cert: Path, key: Path, config: Path
) -> list[str]:
    """The extender's flags as the chart's Deployment passes them, on loopback and without leader election."""
    return [
        f"--http_bind={bind}",
        f"--cert_file={cert}",
        f"--key_file={key}",
        f"--scheduler-name={settings.scheduler_name}",
        f"--metrics-bind-address={metrics}",
        f"--node-scheduler-policy={settings.node_policy}",
        f"--gpu-scheduler-policy={settings.gpu_policy}",
        "--force-overwrite-default-scheduler=true",
        f"--device-config-file={config}",
        "--leader-elect=false",
        "--node-lock-timeout=5m",
        # client-go's default 5 QPS makes HAMi register ~2 nodes a second, holding the lock every /filter waits on.
        "--kube-qps=200",
        "--kube-burst=400",
    ]


def kube_scheduler_configuration(
    settings: HamiSettings, kubeconfig: Path, extender: str, api_version: str
) -> dict[str, Any]:
    """The chart's KubeSchedulerConfiguration (v1 from Kubernetes 1.26, v1beta2 before): one profile, HAMi as its
    extender."""
    return {
        "apiVersion": api_version,
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "leaderElection": {"leaderElect": False},
        "profiles": [{"schedulerName": settings.scheduler_name}],
        "extenders": [
            {
                "urlPrefix": extender,
                "enableHTTPS": True,
                "tlsConfig": {"insecure": True},
                "filterVerb": "filter",
                "bindVerb": "bind",
                "nodeCacheCapable": True,
                "weight": 1,
                "httpTimeout": "30s",
                "managedResources": settings.managed_resources(),
            }
        ],
    }


def webhook_configuration(settings: HamiSettings, url: str, ca_pem: bytes) -> dict[str, Any]:
    """HAMi's MutatingWebhookConfiguration as its chart renders it by default (customURL in place of its Service)."""
    ignore = {"matchExpressions": [{"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]}]}
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": settings.webhook_name},
        "webhooks": [
            {
                "admissionReviewVersions": ["v1beta1"],
                "clientConfig": {"url": url, "caBundle": base64.b64encode(ca_pem).decode()},
                "failurePolicy": "Ignore",
                "matchPolicy": "Equivalent",
                "name": "vgpu.hami.io",
                "namespaceSelector": settings.namespace_selector,
                "objectSelector": ignore,
                "reinvocationPolicy": "Never",
                "rules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods"],
                        "scope": "*",
                    }
                ],
                "sideEffects": "None",
                "timeoutSeconds": 10,
            }
        ],
    }
