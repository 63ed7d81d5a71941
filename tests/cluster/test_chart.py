"""The Helm chart: lint, what it renders for default and non-default values, and a real install into the sandbox.

helm is built from its Go module (sandbox/binaries.py) and cached like the control plane. Rendering tests need no
cluster; the install, RBAC and certificate-hook tests run against the sandbox's real API server.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client.exceptions import ApiException

from kubectl_hami_place import __version__
from kubectl_hami_place.core.defrag.policy import POLICY_API_VERSION, DefragPolicy, Mode, PolicyError, parse_policy
from kubectl_hami_place.core.lifecycle import GUARD_LABEL, GUARD_LABEL_VALUE
from kubectl_hami_place.core.names import (
    PLACEMENT_ANNOTATION,
    PLACEMENT_NAMESPACE_ANNOTATION,
    RESCUED_BY_ANNOTATION,
    ROOM_ANNOTATION,
    ROOM_GATE,
    USE_GPUUUID_ANNOTATION,
)
from kubectl_hami_place.kube.client import connect
from kubectl_hami_place.kube.defrag import change_pod_annotations
from kubectl_hami_place.kube.evictions import release_from_wait
from sandbox import binaries
from sandbox.cluster import Sandbox, free_port, primary_address, wait_for
from tests.cluster.webhook_harness import sa_kubeconfig
from webhook.main import _parser as parser

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "chart"
CRD_FILE = CHART / "templates" / "crd" / "hamipodplacement.yaml"
CRD_NAME = "hamipodplacements.scheduling.hami.placement.com"
RELEASE = "gpu-descheduler"
KUBE_VERSION = "1.37.2"
NAME_LABEL = "gpu-descheduler-webhook"
# The console script the image's ENTRYPOINT runs, installed in the same environment as the tests.
WEBHOOK = Path(sys.executable).parent / "hami-place-webhook"


@pytest.fixture(scope="module")
def helm() -> Path:
    return binaries.resolve("helm")


def run_helm(
    helm: Path, *args: str, check: bool = True, env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(helm), *args],
        capture_output=True,
        text=True,
        check=check,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def render(
    helm: Path,
    *sets: str,
    kube_version: str = KUBE_VERSION,
    namespace: str = "kube-system",
    release: str = RELEASE,
    tests: bool = False,
) -> list[dict[str, Any]]:
    """helm template with --set flags; the rendered objects, hooks included (`helm test`'s only with `tests`)."""
    args = ["template", release, str(CHART), "-n", namespace, f"--kube-version={kube_version}"]
    args += [] if tests else ["--skip-tests"]
    for item in sets:
        args += ["--set-json" if item.startswith("json:") else "--set", item.removeprefix("json:")]
    out = run_helm(helm, *args).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def one(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in by_kind(objects, kind) if name is None or o["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def webhook_entry(objects: list[dict[str, Any]]) -> dict[str, Any]:
    webhooks = one(objects, "MutatingWebhookConfiguration")["webhooks"]
    assert len(webhooks) == 1
    return webhooks[0]


# --- lint and render -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sets",
    [
        [],
        ["replicaCount=1", "webhook.failurePolicy=Fail", "webhook.matchConditions.enabled=false"],
        ["certs.mode=certManager", 'json:certs.certManager.issuerRef={"kind":"ClusterIssuer","name":"ca"}'],
        ["certs.mode=secret", "certs.existingSecret=my-tls", "certs.caBundle=Zm9v"],
        [
            "networkPolicy.enabled=true",
            "networkPolicy.apiServerCIDRs={10.0.0.10/32}",
            "networkPolicy.apiNamespaces={monitoring}",
            "serviceMonitor.enabled=true",
            "server.clientCA.configMap=apiserver-client-ca",
            "server.clientCA.names={kube-apiserver-webhook-client}",
        ],
    ],
)
def test_helm_lint_is_clean(helm: Path, sets: list[str]) -> None:
    args = ["lint", str(CHART), "--strict", f"--kube-version={KUBE_VERSION}"]
    for item in sets:
        args += ["--set-json" if item.startswith("json:") else "--set", item.removeprefix("json:")]
    result = run_helm(helm, *args, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 chart(s) failed" in result.stdout


def test_default_render_is_the_documented_server(helm: Path) -> None:
    objects = render(helm)
    deployment = one(objects, "Deployment", "gpu-descheduler-webhook")
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    assert spec["selector"]["matchLabels"]["app.kubernetes.io/name"] == NAME_LABEL
    pod = spec["template"]["spec"]
    (spread,) = pod["topologySpreadConstraints"]
    assert (spread["topologyKey"], spread["whenUnsatisfiable"], spread["maxSkew"]) == (
        "kubernetes.io/hostname",
        "DoNotSchedule",
        1,
    ), "two replicas never share a node"
    assert spread["labelSelector"]["matchLabels"] == spec["selector"]["matchLabels"]
    assert spread["nodeTaintsPolicy"] == "Honor", "a cordoned node is no domain: draining one of two nodes goes on"
    assert spread["matchLabelKeys"] == ["pod-template-hash"]
    assert pod["priorityClassName"] == "system-cluster-critical"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    (container,) = pod["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert container["args"][0] == "serve"
    assert "--exclude-namespace=kube-system" in container["args"]
    assert "--admission-timeout=5" in container["args"], "the webhook's timeoutSeconds is the server's deadline"
    assert "--shutdown-grace=15" in container["args"]
    assert "--claim-grace=120" in container["args"]
    assert "--defrag-policy=kube-system/gpu-descheduler-defrag-policy" in container["args"]
    assert [(e["name"], e["valueFrom"]["fieldRef"]["fieldPath"]) for e in container["env"]] == [
        ("POD_NAME", "metadata.name"),
        ("POD_NAMESPACE", "metadata.namespace"),
    ], "the controller's identity in its leader Lease, and the Lease's namespace"
    assert not [a for a in container["args"] if a.startswith(("--client-ca-file", "--client-cert-name"))]
    assert not [a for a in container["args"] if a.startswith("--network-policy")]
    assert not by_kind(objects, "NetworkPolicy"), "off by default: one that misses the API server fails open"
    assert container["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "probe"}, "the HTTPS listener's"
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "probe"}
    assert pod["terminationGracePeriodSeconds"] == 25, "the kubelet waits longer than the server's own drain"
    assert "lifecycle" not in container, "no preStop hook: the server drains itself on SIGTERM"
    labels = spec["template"]["metadata"]["labels"]
    assert labels["app.kubernetes/name"] == labels["app.kubernetes.io/name"] == NAME_LABEL
    assert "--tls-secret=kube-system/gpu-descheduler-webhook-tls" in container["args"]
    assert "--webhook-configuration=gpu-descheduler-webhook" in container["args"]
    assert not [a for a in container["args"] if a.startswith("--tls-cert-file")], "not the files: the Secret itself"
    assert "--room-key-file=/etc/hami-place/room-key/room.key" in container["args"], (
        "one key seals every replica's rooms"
    )
    [key_volume] = [volume for volume in pod["volumes"] if volume["name"] == "room-key"]
    key = one(objects, "Secret", key_volume["secret"]["secretName"])
    assert len(base64.b64decode(key["data"]["room.key"])) >= 32
    assert key["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep", "moves sealed with it outlive a release"
    assert {"name": "room-key", "mountPath": "/etc/hami-place/room-key", "readOnly": True} in container["volumeMounts"]
    assert container["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "probe"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "probe"}
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"webhook": 8443, "api": 8083, "probe": 8084}
    secrets = [v["name"] for v in pod["volumes"] if "secret" in v]
    assert secrets == ["room-key"], "the server reads the TLS Secret from the API; the room key alone is mounted"

    service = one(objects, "Service")
    assert {(p["name"], p["port"], p["targetPort"]) for p in service["spec"]["ports"]} == {
        ("https", 443, "webhook"),
        ("api", 8083, "api"),
    }
    assert service["spec"]["selector"]["app.kubernetes.io/name"] == NAME_LABEL

    pdb = one(objects, "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    assert by_kind(objects, "NetworkPolicy") == [] and by_kind(objects, "ServiceMonitor") == []
    assert by_kind(objects, "PrometheusRule") == [] and not any(
        "grafana_dashboard" in (o["metadata"].get("labels") or {}) for o in by_kind(objects, "ConfigMap")
    ), "the dashboard and the alerts are off by default"

    for obj in objects:
        if obj["kind"] != "CustomResourceDefinition" and "certgen" not in obj["metadata"]["name"]:
            assert obj["metadata"]["labels"]["app.kubernetes.io/name"] == NAME_LABEL, obj["kind"]


def test_webhook_configuration_defaults(helm: Path) -> None:
    entry = webhook_entry(render(helm))
    assert entry["rules"] == [
        {
            "operations": ["CREATE"],
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "resources": ["pods"],
            "scope": "Namespaced",
        }
    ]
    assert entry["failurePolicy"] == "Ignore"
    assert entry["sideEffects"] == "NoneOnDryRun"
    assert entry["timeoutSeconds"] == 5
    assert entry["reinvocationPolicy"] == "IfNeeded"
    assert entry["admissionReviewVersions"] == ["v1"]
    assert entry["clientConfig"]["service"] == {
        "name": "gpu-descheduler-webhook",
        "namespace": "kube-system",
        "path": "/mutate",
        "port": 443,
    }
    assert "caBundle" not in entry["clientConfig"], "the server and the post hook own it: Helm never writes one"
    expressions = entry["namespaceSelector"]["matchExpressions"]
    assert {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["kube-system"]} in expressions
    assert {"key": "hami.io/webhook", "operator": "NotIn", "values": ["ignore"]} in expressions
    assert [c["name"] for c in entry["matchConditions"]] == ["not-bound", "asks-gpu"]


def test_single_replica_has_no_disruption_budget(helm: Path) -> None:
    objects = render(helm, "replicaCount=1")
    assert one(objects, "Deployment")["spec"]["replicas"] == 1
    assert by_kind(objects, "PodDisruptionBudget") == []


@pytest.mark.parametrize(
    ("sets", "kube_version", "present"),
    [
        ([], "1.28.0", True),
        ([], "1.27.9", False),
        (["webhook.matchConditions.enabled=false"], KUBE_VERSION, False),
    ],
)
def test_match_conditions_toggle(helm: Path, sets: list[str], kube_version: str, present: bool) -> None:
    entry = webhook_entry(render(helm, *sets, kube_version=kube_version))
    assert ("matchConditions" in entry) is present


@pytest.mark.parametrize(
    ("kube_version", "fields", "when"),
    [("1.25.9", set(), "ScheduleAnyway"), ("1.26.0", {"nodeTaintsPolicy"}, "DoNotSchedule")],
)
def test_the_spread_takes_only_the_fields_the_api_server_knows(
    helm: Path, kube_version: str, fields: set[str], when: str
) -> None:
    pod = one(render(helm, kube_version=kube_version), "Deployment")["spec"]["template"]["spec"]
    (spread,) = pod["topologySpreadConstraints"]
    assert set(spread) - {"maxSkew", "topologyKey", "whenUnsatisfiable", "labelSelector"} == fields
    # Before 1.26 a tainted node (a control plane's) is a domain with no replica: DoNotSchedule there would keep a
    # rolling update's extra replica Pending for good on a cluster with as many workers as replicas.
    assert spread["whenUnsatisfiable"] == when
    chosen = one(
        render(helm, "topologySpread.whenUnsatisfiable=DoNotSchedule", kube_version=kube_version), "Deployment"
    )
    assert chosen["spec"]["template"]["spec"]["topologySpreadConstraints"][0]["whenUnsatisfiable"] == "DoNotSchedule"


def test_chart_refuses_kubernetes_older_than_1_24(helm: Path) -> None:
    result = run_helm(helm, "template", RELEASE, str(CHART), "--kube-version=1.23.0", check=False)
    assert result.returncode != 0
    assert "kubeVersion" in result.stderr


def test_non_default_values(helm: Path) -> None:
    objects = render(
        helm,
        "webhook.failurePolicy=Fail",
        "webhook.timeoutSeconds=10",
        "server.excludeNamespaces={batch,infra}",
        "server.placementTTL=600",
        'json:webhook.namespaceSelectorExpressions=[{"key":"team","operator":"In","values":["ml"]}]',
        "fullnameOverride=hp",
        namespace="gpu-system",
    )
    entry = webhook_entry(objects)
    assert entry["failurePolicy"] == "Fail"
    assert entry["timeoutSeconds"] == 10
    expressions = entry["namespaceSelector"]["matchExpressions"]
    assert expressions[0]["values"] == ["gpu-system", "kube-system", "batch", "infra"], "kube-system always left out"
    assert {"key": "team", "operator": "In", "values": ["ml"]} in expressions
    args = one(objects, "Deployment", "hp")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert [a for a in args if a.startswith("--exclude-namespace")] == [
        "--exclude-namespace=gpu-system",
        "--exclude-namespace=kube-system",
        "--exclude-namespace=batch",
        "--exclude-namespace=infra",
    ]
    assert "--placement-ttl=600" in args
    assert "--admission-timeout=10" in args


@pytest.mark.parametrize("field", ["namespaceSelectorExpressions", "objectSelectorExpressions"])
def test_selector_expressions_take_values_as_the_api_server_does(helm: Path, field: str) -> None:
    # The API server refuses a MutatingWebhookConfiguration whose In/NotIn has no value, or whose Exists or
    # DoesNotExist has some: the schema took both, and the install failed half-applied.
    good = [{"key": "team", "operator": "In", "values": ["ml"]}, {"key": "gpu", "operator": "Exists"}]
    entry = webhook_entry(render(helm, f"json:webhook.{field}={json.dumps(good)}"))
    selector = "namespaceSelector" if field.startswith("namespace") else "objectSelector"
    assert all(expression in entry[selector]["matchExpressions"] for expression in good)
    for wrong in (
        {"key": "team", "operator": "In"},
        {"key": "team", "operator": "NotIn", "values": []},
        {"key": "gpu", "operator": "Exists", "values": ["yes"]},
    ):
        set_json = f"webhook.{field}={json.dumps([wrong])}"
        result = run_helm(helm, "template", RELEASE, str(CHART), "--set-json", set_json, check=False)
        assert result.returncode != 0 and f"/webhook/{field}/0" in result.stderr, (wrong, result.stderr)


def test_an_image_digest_pins_the_server_and_the_hook_to_it(helm: Path) -> None:
    digest = "sha256:" + "ab" * 32
    objects = render(helm, f"image.digest={digest}", "image.tag=9.9.9", tests=True)
    containers = [
        container
        for workload in by_kind(objects, "Deployment") + by_kind(objects, "Job")
        for container in workload["spec"]["template"]["spec"]["containers"]
    ]
    assert len(containers) >= 3, "the server, the certificate hook and helm test's check"
    assert {container["image"] for container in containers} == {f"ghcr.io/hami-place/hami-place-webhook@{digest}"}


def defrag_policy(objects: list[dict[str, Any]], name: str = "gpu-descheduler-defrag-policy") -> dict[str, Any]:
    """The rendered DefragPolicy ConfigMap."""
    config_map = one(objects, "ConfigMap", name)
    assert config_map["metadata"]["labels"]["app.kubernetes.io/component"] == "defrag-policy"
    return config_map


def test_a_room_key_secret_of_ones_own_is_mounted_and_none_is_made(helm: Path) -> None:
    """server.roomKey.existingSecret: for a chart a GitOps tool renders (no lookup there, so a made key would change
    on every render and replicas started apart would not honour each other's rooms)."""
    objects = render(helm, "server.roomKey.existingSecret=my-room-key")
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    [key_volume] = [volume for volume in pod["volumes"] if volume["name"] == "room-key"]
    assert key_volume["secret"]["secretName"] == "my-room-key"
    assert not [o for o in by_kind(objects, "Secret") if o["metadata"]["name"].endswith("-room-key")]


def test_default_defrag_policy_is_the_documented_dry_run(helm: Path) -> None:
    policy = parse_policy(defrag_policy(render(helm))["data"]["policy.yaml"], "kube-system")
    assert policy == parse_policy(
        "apiVersion: scheduling.hami.placement.com/v1alpha1\nkind: DefragPolicy", "kube-system"
    )
    assert policy.mode is Mode.dry_run and policy.budgets == DefragPolicy().budgets


@pytest.mark.parametrize(("mode", "expected"), [("on", Mode.on), ("json:false", Mode.off), ("json:true", Mode.on)])
def test_defrag_values_render_into_the_policy(helm: Path, mode: str, expected: Mode) -> None:
    """Every defrag value reaches the document; a bare YAML off/on (a boolean) still means the mode."""
    mode_set = f"json:defrag.mode={mode.removeprefix('json:')}" if mode.startswith("json:") else f"defrag.mode={mode}"
    objects = render(
        helm,
        mode_set,
        "defrag.namespaces.include={team-*,ml}",
        "defrag.namespaces.exclude={team-b}",
        "defrag.rescue.pendingFor=2m",
        "defrag.keepRoom.enabled=true",
        "defrag.keepRoom.interval=90",
        "defrag.keepRoom.wholeFreeCards.count=2",
        "defrag.keepRoom.wholeFreeCards.type=A100",
        "json:defrag.keepRoom.maxStrandedShare=null",
        "defrag.budgets.movesPerHour=3",
        "defrag.budgets.cooldown=1h30m",
        "defrag.maxMovesPerPlan=5",
        "defrag.moveJobPods=true",
        "defrag.priorityThreshold.value=100000",
        "defrag.minReplicas=2",
        "defrag.labelSelector.matchLabels.tier=batch",
        "defrag.minPodAge=10m",
        "defrag.ignorePodsWithoutPDB=true",
        "defrag.evictLocalStoragePods=false",
        "defrag.ignorePvcPods=true",
        "defrag.keepRoom.window=22:00-06:00",
        "defrag.keepRoom.timeZone=America/Argentina/Buenos_Aires",
        "defrag.nodeSelector=pool=inference\\,gpu in (a100\\,h100)",
        namespace="gpu-system",
        release="gd",
    )
    policy = parse_policy(defrag_policy(objects, "gd-defrag-policy")["data"]["policy.yaml"], "gpu-system")
    assert policy.mode is expected
    assert policy.namespaces.include == ("team-*", "ml") and policy.namespaces.exclude == ("team-b",)
    assert not policy.namespaces.allows("gpu-system"), "the release namespace is always out"
    assert policy.rescue.pending_for.total_seconds() == 120
    room = policy.keep_room
    assert room.enabled and room.interval.total_seconds() == 90 and room.max_stranded_share is None
    assert (room.whole_free_cards.count, room.whole_free_cards.type) == (2, "A100")
    assert policy.budgets.moves_per_hour == 3 and policy.budgets.cooldown.total_seconds() == 5400
    assert policy.max_moves_per_plan == 5 and policy.move_job_pods is True
    assert policy.priority_threshold == 100000 and policy.min_replicas == 2
    assert str(policy.label_selector) == "tier=batch" and policy.min_pod_age.total_seconds() == 600
    assert str(policy.node_selector) == "pool=inference,gpu in (a100,h100)"
    assert policy.ignore_pods_without_budget is True
    assert policy.evict_local_storage is False and policy.ignore_claim_pods is True
    assert policy.keep_room.window == (22 * 60, 6 * 60)
    assert policy.keep_room.time_zone == "America/Argentina/Buenos_Aires"
    args = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--defrag-policy=gpu-system/gd-defrag-policy" in args


def test_network_policy_admits_the_api_server_and_the_listed_namespaces(helm: Path) -> None:
    objects = render(
        helm,
        "networkPolicy.enabled=true",
        "networkPolicy.apiServerCIDRs={10.0.0.10/32,10.0.0.11/32,fd00::10/128}",
        "networkPolicy.apiNamespaces={monitoring,ops}",
    )
    policy = one(objects, "NetworkPolicy", "gpu-descheduler-webhook")["spec"]
    assert policy["podSelector"]["matchLabels"]["app.kubernetes.io/name"] == NAME_LABEL
    assert policy["policyTypes"] == ["Ingress"]
    from_api_server, from_helm_test, from_namespaces = policy["ingress"]
    # helm test's Job, from the release namespace only (a podSelector alone), reaches both ports.
    assert list(from_helm_test["from"][0]) == ["podSelector"]
    assert [peer["ipBlock"]["cidr"] for peer in from_api_server["from"]] == [
        "10.0.0.10/32",
        "10.0.0.11/32",
        "fd00::10/128",
    ]
    assert {port["port"] for port in from_api_server["ports"]} == {"webhook", "api"}
    (selector,) = from_namespaces["from"]
    assert selector["namespaceSelector"]["matchExpressions"] == [
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["monitoring", "ops"]}
    ]
    assert [port["port"] for port in from_namespaces["ports"]] == ["api"], "the webhook port: API server only"
    container = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert {p["name"] for p in container["ports"]} >= {"webhook", "api"}, "the policy names the container's ports"
    assert "--network-policy=gpu-descheduler-webhook" in container["args"], "cluster-info says the port is guarded"


def test_service_monitor_scrapes_metrics_on_the_api_port(helm: Path) -> None:
    objects = render(
        helm, "serviceMonitor.enabled=true", "serviceMonitor.interval=15s", "serviceMonitor.labels.release=prom"
    )
    monitor = one(objects, "ServiceMonitor", "gpu-descheduler-webhook")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["spec"]["selector"]["matchLabels"] == one(objects, "Service")["spec"]["selector"]
    (endpoint,) = monitor["spec"]["endpoints"]
    assert (endpoint["port"], endpoint["path"], endpoint["interval"]) == ("api", "/metrics", "15s")
    assert "api" in {p["name"] for p in one(objects, "Service")["spec"]["ports"]}


def test_the_dashboard_and_the_alerts_are_rendered_from_the_charts_files(helm: Path) -> None:
    objects = render(
        helm,
        "grafanaDashboard.enabled=true",
        "grafanaDashboard.namespace=monitoring",
        "grafanaDashboard.annotations.grafana_folder=GPU",
        "prometheusRule.enabled=true",
        "prometheusRule.labels.release=prom",
    )
    dashboard = one(objects, "ConfigMap", "gpu-descheduler-webhook-dashboard")
    assert dashboard["metadata"]["namespace"] == "monitoring"
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert dashboard["metadata"]["annotations"] == {"grafana_folder": "GPU"}
    assert json.loads(dashboard["data"]["hami-place.json"]) == json.loads(
        (CHART / "dashboards/hami-place.json").read_text()
    )
    rule = one(objects, "PrometheusRule", "gpu-descheduler-webhook")
    assert rule["metadata"]["labels"]["release"] == "prom"
    assert rule["spec"]["groups"] == yaml.safe_load((CHART / "alerts/hami-place.rules.yaml").read_text())["groups"]
    assert "{{ $value | humanize }}" in rule["spec"]["groups"][0]["rules"][0]["annotations"]["description"], (
        "the alerts' own templates reach Prometheus untouched by Helm"
    )


def test_client_ca_mounts_the_config_map_and_requires_client_certificates(helm: Path) -> None:
    objects = render(
        helm,
        "server.clientCA.configMap=apiserver-client-ca",
        "server.clientCA.names={kube-apiserver-webhook-client,apiserver.example}",
        "server.shutdownGrace=40",
    )
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert "--client-ca-file=/etc/hami-place/client-ca/ca.crt" in container["args"]
    names = [a for a in container["args"] if a.startswith("--client-cert-name=")]
    assert names == ["--client-cert-name=kube-apiserver-webhook-client", "--client-cert-name=apiserver.example"]
    assert "--shutdown-grace=40" in container["args"] and pod["terminationGracePeriodSeconds"] == 50
    mount = next(m for m in container["volumeMounts"] if m["name"] == "client-ca")
    assert mount["mountPath"] == "/etc/hami-place/client-ca"
    assert next(v for v in pod["volumes"] if v["name"] == "client-ca")["configMap"]["name"] == "apiserver-client-ca"


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (["certs.mode=vault"], "at '/certs/mode': value must be one of 'hook', 'certManager', 'secret'"),
        (["certs.mode=secret", "certs.existingSecret=x"], "certs.caBundle"),
        # cert-manager refuses these Certificates, and the install would wait on a Secret that never comes.
        (
            ["certs.mode=certManager", "certs.certManager.duration=720h"],
            "certs.certManager.renewBefore: 720h is not shorter than duration 720h",
        ),
        (
            ["certs.mode=certManager", "certs.certManager.duration=2h", "certs.certManager.renewBefore=1h59m60s"],
            "certs.certManager.renewBefore: 1h59m60s is not shorter than duration 2h",
        ),
        (
            ["certs.mode=certManager", "certs.certManager.duration=59m59s", "certs.certManager.renewBefore=10m"],
            "certs.certManager.duration: 59m59s is under 1h",
        ),
        (
            ["certs.mode=certManager", "certs.certManager.renewBefore=299s"],
            "certs.certManager.renewBefore: 299s is under 5m",
        ),
        (["certs.certManager.duration=1y"], "at '/certs/certManager/duration': '1y' does not match"),
        (["webhook.timeoutSeconds=31"], "at '/webhook/timeoutSeconds': maximum: got 31, want 30"),
        (["server.placementTTL=31536001"], "at '/server/placementTTL': maximum: got 3.1536001"),
        (["server.finishedTTL=31536001"], "at '/server/finishedTTL': maximum: got 3.1536001"),
        (["server.claimGrace=31536001"], "at '/server/claimGrace': maximum: got 3.1536001"),
        (["webhook.failurePolicy=Sometimes"], "at '/webhook/failurePolicy': value must be one of 'Ignore', 'Fail'"),
        (["replicaCount=0"], "at '/replicaCount': minimum: got 0, want 1"),
        (["webhok.failurePolicy=Fail"], "additional properties 'webhok' not allowed"),
        (["networkPolicy.enabled=true"], "networkPolicy.apiServerCIDRs (the API server's addresses"),
        (["networkPolicy.apiServerCIDRs={10.0.0.10}"], "at '/networkPolicy/apiServerCIDRs/0'"),
        (["server.clientCA.configMap=ca"], "server.clientCA.names (the names the API server's client certificate"),
        (["server.clientCA.configMap=ca", "server.clientCA.names={a b}"], "at '/server/clientCA/names/0'"),
        (["topologySpread.whenUnsatisfiable=Sometimes"], "at '/topologySpread/whenUnsatisfiable'"),
        (["defrag.mode=sometimes"], "at '/defrag/mode': value must be one of 'off', 'dry-run', 'on'"),
        (["defrag.budgets.movesPerRun=-1"], "at '/defrag/budgets/movesPerRun': minimum: got -1, want 0"),
        (["defrag.budgets.cooldown=1hour"], "at '/defrag/budgets/cooldown'"),
        # What the server's policy parser refuses: a room kept over 10m however written, an interval of 0s, a
        # duration over 720h (a number, one part alone, or parts adding up to more: the templates add them).
        (["defrag.rescue.reserveFor=11m"], "at '/defrag/rescue/reserveFor': '11m' does not match pattern"),
        (["defrag.rescue.reserveFor=9m61s"], "at '/defrag/rescue/reserveFor': '9m61s' does not match pattern"),
        (["defrag.rescue.reserveFor=0h601s"], "at '/defrag/rescue/reserveFor': '0h601s' does not match pattern"),
        (["defrag.rescue.reserveFor=1h"], "at '/defrag/rescue/reserveFor': '1h' does not match pattern"),
        (["defrag.rescue.reserveFor=601"], "at '/defrag/rescue/reserveFor': maximum: got 601, want 600"),
        (["defrag.keepRoom.window=24:00-06:00"], "at '/defrag/keepRoom/window': '24:00-06:00' does not match pattern"),
        (["defrag.keepRoom.window=10:00-10:00"], "defrag.keepRoom.window: 10:00-10:00 starts where it ends"),
        # As the server's policy parser reads a selector: In and NotIn need values, Exists and DoesNotExist take none.
        (
            ["defrag.labelSelector.matchExpressions[0].key=a", "defrag.labelSelector.matchExpressions[0].operator=In"],
            "at '/defrag/labelSelector/matchExpressions/0': missing property 'values'",
        ),
        (
            [
                "defrag.labelSelector.matchExpressions[0].key=a",
                "defrag.labelSelector.matchExpressions[0].operator=Exists",
                "defrag.labelSelector.matchExpressions[0].values[0]=x",
            ],
            "at '/defrag/labelSelector/matchExpressions/0/values': maxItems: got 1, want 0",
        ),
        (["defrag.keepRoom.timeZone=../etc/x"], "at '/defrag/keepRoom/timeZone': '../etc/x' does not match pattern"),
        # A card type the Events on the policy's ConfigMap would quote: printable, at most 128 characters.
        (["defrag.keepRoom.wholeFreeCards.type=A100\x1b[2J"], "at '/defrag/keepRoom/wholeFreeCards/type': 'A100"),
        (["defrag.keepRoom.wholeFreeCards.type=" + "A" * 129], "wholeFreeCards/type': maxLength: got 129, want 128"),
        (["defrag.keepRoom.interval=0s"], "at '/defrag/keepRoom/interval': '0s' does not match pattern '[1-9]'"),
        (["defrag.keepRoom.interval=0h00m0s"], "at '/defrag/keepRoom/interval': '0h00m0s' does not match pattern"),
        (["defrag.keepRoom.interval=0"], "at '/defrag/keepRoom/interval': minimum: got 0, want 1"),
        (["defrag.budgets.cooldown=721h"], "at '/defrag/budgets/cooldown': '721h' does not match pattern"),
        (["defrag.rescue.pendingFor=43201m"], "at '/defrag/rescue/pendingFor': '43201m' does not match pattern"),
        (["defrag.keepRoom.interval=1h2592001s"], "at '/defrag/keepRoom/interval': '1h2592001s' does not match"),
        (["defrag.budgets.cooldown=2592001"], "at '/defrag/budgets/cooldown': maximum: got 2.592001"),
        (["defrag.budgets.cooldown=719h61m"], "defrag.budgets.cooldown: 719h61m adds up to more than 720h"),
        (["defrag.keepRoom.interval=720h1s"], "defrag.keepRoom.interval: 720h1s adds up to more than 720h"),
        (["defrag.minPodAge=719h61m"], "defrag.minPodAge: 719h61m adds up to more than 720h"),
        (["defrag.minPodAge=ten"], "at '/defrag/minPodAge': 'ten' does not match"),
        (["defrag.priorityThreshold.name=High"], "at '/defrag/priorityThreshold/name': 'High' does not match"),
        (
            ["defrag.priorityThreshold.name=high", "defrag.priorityThreshold.value=5"],
            "defrag.priorityThreshold: both name and value set; set one of them",
        ),
        (["defrag.rescue.pendingFor=1h2591999s"], "defrag.rescue.pendingFor: 1h2591999s adds up to more than 720h"),
        (["defrag.namespaces.exclude={team_a}"], "at '/defrag/namespaces/exclude/0'"),
        (["defrag.budgets.movesPerHuor=3"], "additional properties 'movesPerHuor' not allowed"),
        (["image.digest=ab12"], "at '/image/digest'"),
        # A budget that keeps every replica up blocks every node drain (a percentage rounds up).
        (["podDisruptionBudget.minAvailable=2"], "podDisruptionBudget.minAvailable: 2 keeps all 2 replicas up"),
        (["podDisruptionBudget.minAvailable=60%"], "podDisruptionBudget.minAvailable: 60% keeps all 2 replicas up"),
        (
            ["replicaCount=3", "podDisruptionBudget.minAvailable=3"],
            "3 keeps all 3 replicas up, so no node drain could evict one; write at most 2",
        ),
        (["service.type=NodePort"], "service.type NodePort puts /mutate beyond the cluster"),
        (["podDisruptionBudget.minAvailable=half"], "at '/podDisruptionBudget/minAvailable': 'half' does not match"),
        (["leases.namespace=kube-system"], "leases.namespace: kube-system holds Leases of other components"),
        (["leases.namespace=kube-node-lease"], "leases.namespace: kube-node-lease holds Leases of other components"),
        (["leases.namespace=Leases"], "at '/leases/namespace': 'Leases' does not match"),
        # Each port is a listener of its own: two on one port, and every replica crash-looped (address in use).
        (["server.probePort=8083"], "server.webhookPort, server.apiPort and server.probePort (8443, 8083, 8083)"),
        (["server.apiPort=8443"], "server.webhookPort, server.apiPort and server.probePort (8443, 8443, 8084)"),
        # What the API server refused at install, after the rest of the release was made.
        (["service.webhookPort=8083"], "service.webhookPort and service.apiPort (8083) must differ"),
        (["server.excludeNamespaces={kube-*}"], "at '/server/excludeNamespaces/0': 'kube-*' does not match"),
        (["networkPolicy.apiNamespaces={Team}"], "at '/networkPolicy/apiNamespaces/0': 'Team' does not match"),
        (
            ["networkPolicy.apiServerCIDRs={10.0.0.1/40}"],
            "at '/networkPolicy/apiServerCIDRs/0': '10.0.0.1/40' does not",
        ),
        (
            ["networkPolicy.apiServerCIDRs={fd00::1/129}"],
            "at '/networkPolicy/apiServerCIDRs/0': 'fd00::1/129' does not",
        ),
        (["nameOverride=Foo_Bar"], "at '/nameOverride': 'Foo_Bar' does not match"),
        (["fullnameOverride=Gpu"], "at '/fullnameOverride': 'Gpu' does not match"),
    ],
)
def test_bad_values_fail_with_a_reason(helm: Path, sets: list[str], message: str) -> None:
    args = ["template", RELEASE, str(CHART)]
    for item in sets:
        args += ["--set", item]
    result = run_helm(helm, *args, check=False)
    assert result.returncode != 0
    assert message in result.stderr


@pytest.mark.parametrize(
    "sets",
    [
        ["defrag.rescue.reserveFor=10m", "defrag.keepRoom.interval=1s", "defrag.budgets.cooldown=720h"],
        ["defrag.rescue.reserveFor=9m60s", "defrag.keepRoom.interval=0h0m1s", "defrag.rescue.pendingFor=43200m"],
        ["defrag.rescue.reserveFor=600", "defrag.keepRoom.interval=2592000", "defrag.budgets.cooldown=2592000s"],
        ["defrag.rescue.reserveFor=0s", "defrag.rescue.pendingFor=0", "defrag.budgets.cooldown=0720h0m0s"],
        ["defrag.rescue.pendingFor=719h60m", "defrag.keepRoom.interval=1h2588400s", "defrag.budgets.cooldown=0h43200m"],
    ],
)
def test_durations_at_the_servers_bounds_render_into_a_policy_it_reads(helm: Path, sets: list[str]) -> None:
    parse_policy(defrag_policy(render(helm, *sets))["data"]["policy.yaml"], "kube-system")


def test_the_schemas_durations_refuse_what_the_policy_parser_refuses() -> None:
    """values.schema.json's duration patterns against parse_policy, on every way of writing durations near the bounds:
    reserveFor exactly; interval and the others refuse nothing the server reads and refuse one part over 720h."""
    definitions = json.loads((CHART / "values.schema.json").read_text())["definitions"]
    duration = re.compile(definitions["duration"]["anyOf"][1]["pattern"])
    reserve = re.compile(definitions["reserveDuration"]["anyOf"][1]["pattern"])
    positive = re.compile(definitions["positiveDuration"]["allOf"][1]["anyOf"][1]["pattern"])

    def server_reads(section: str, key: str, value: str) -> bool:
        try:
            parse_policy(f"apiVersion: {POLICY_API_VERSION}\nkind: DefragPolicy\n{section}: {{{key}: '{value}'}}")
        except PolicyError:
            return False
        return True

    def written(parts: tuple[str | None, ...]) -> str:
        return "".join(f"{part}{unit}" for part, unit in zip(parts, "hms", strict=True) if part is not None)

    # Seconds on each side of every bound 10m leaves after whole minutes (600 - 60 * minutes), and between.
    edges = {60 * minutes + step for minutes in range(11) for step in (-1, 0, 1)} | set(range(0, 700, 25))
    near_ten = [None, "0", "00", "1"], [None, *map(str, range(12)), "010", "00"], [None, "0600", *map(str, edges)]
    for text in filter(None, map(written, itertools.product(*near_ten))):
        assert bool(reserve.match(text)) == server_reads("rescue", "reserveFor", text), text
    hours = [None, "0", "1", "719", "720", "721", "0720", "1000"]
    minutes = [None, "0", "59", "61", "43199", "43200", "43201", "043200", "100000"]
    seconds = [None, "0", "1", "2591999", "2592000", "2592001", "02592000", "10000000"]
    for parts in itertools.product(hours, minutes, seconds):
        if not (text := written(parts)):
            continue
        one_part = sum(part is not None for part in parts) == 1
        chart, server = bool(duration.match(text)), server_reads("budgets", "cooldown", text)
        assert server <= chart, f"the chart refuses {text}, which the server reads"
        assert chart == server or not one_part, text
        chart, server = chart and bool(positive.search(text)), server_reads("keepRoom", "interval", text)
        assert server <= chart, f"the chart refuses the interval {text}, which the server reads"
        assert chart == server or not one_part, text
        assert not chart or text.strip("0hms"), f"the chart takes the zero interval {text}"


@pytest.mark.parametrize("share", [0, 0.2, 1, 0.000001, 0.0000001, 0.00000025, 5e-324])
def test_every_stranded_share_the_schema_takes_reaches_the_policy_as_a_number(helm: Path, share: float) -> None:
    # Helm writes a share under 1e-6 in exponent form, "1e-7": YAML 1.1 (the server's parser) reads a float only
    # with a dot, so the policy said maxStrandedShare '1e-7', which the server refused as no share.
    objects = render(helm, f"json:defrag.keepRoom.maxStrandedShare={json.dumps(share)}")
    policy = parse_policy(defrag_policy(objects)["data"]["policy.yaml"], "kube-system")
    assert policy.keep_room.max_stranded_share == share


def test_large_whole_numbers_from_a_values_file_render_as_whole_numbers(helm: Path) -> None:
    # Helm reads a values file's numbers (and --set-json's) as floats: printed raw, 2592000 became 2.592e+06, which
    # the server's flags and the policy parser refuse (a crash-looping server, a policy left unread).
    sets = [
        "json:server.finishedTTL=2592000",
        "json:server.placementTTL=1209600",
        "json:server.claimGrace=1000000",
        "json:replicaCount=1000000",
        "json:topologySpread.maxSkew=1000000",
        "json:certs.hook.activeDeadlineSeconds=1000000",
        "json:defrag.budgets.movesPerHour=1000000",
        "json:defrag.budgets.movesPerRun=1000000",
        "json:defrag.budgets.movesPerNode=1000000",
        "json:defrag.budgets.movesPerNamespace=1000000",
        "json:defrag.maxMovesPerPlan=1000000",
        "json:defrag.keepRoom.wholeFreeCards.count=1000000",
        "json:defrag.priorityThreshold.value=1000000000",
        "json:defrag.minReplicas=1000000",
        "json:defrag.minPodAge=1000000",
    ]
    objects = render(helm, *sets)
    assert "e+06" not in json.dumps(objects)
    deployment = one(objects, "Deployment", "gpu-descheduler-webhook")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    args = parser().parse_args(container["args"])
    assert (args.finished_ttl, args.placement_ttl, args.claim_grace) == (2592000, 1209600, 1000000)
    policy = parse_policy(defrag_policy(objects)["data"]["policy.yaml"], "kube-system")
    assert (policy.budgets.moves_per_hour, policy.max_moves_per_plan) == (1000000, 1000000)
    assert policy.priority_threshold == 1000000000 and policy.min_replicas == 1000000
    assert policy.min_pod_age.total_seconds() == 1000000


@pytest.mark.parametrize("sets", [["json:defrag.priorityThreshold=null"], ["json:defrag.priorityThreshold.value=null"]])
def test_a_priority_threshold_left_null_renders_no_threshold(helm: Path, sets: list[str]) -> None:
    policy = parse_policy(defrag_policy(render(helm, *sets))["data"]["policy.yaml"], "kube-system")
    assert policy.priority_threshold is None


def test_a_priority_threshold_by_name_renders_the_name_for_the_server_to_read(helm: Path) -> None:
    objects = render(helm, "defrag.priorityThreshold.name=system-cluster-critical")
    policy = parse_policy(defrag_policy(objects)["data"]["policy.yaml"], "kube-system")
    assert (policy.priority_class, policy.priority_threshold) == ("system-cluster-critical", None)


@pytest.mark.parametrize(
    ("sets", "kube_version", "policy"),
    [
        ([], KUBE_VERSION, "AlwaysAllow"),
        (["podDisruptionBudget.unhealthyPodEvictionPolicy=IfHealthyBudget"], KUBE_VERSION, "IfHealthyBudget"),
        (["podDisruptionBudget.unhealthyPodEvictionPolicy="], KUBE_VERSION, None),
        ([], "1.26.9", None),
    ],
)
def test_a_replica_that_is_not_ready_does_not_block_a_drain(
    helm: Path, sets: list[str], kube_version: str, policy: str | None
) -> None:
    # Before 1.27 the field is behind an alpha gate: left out there, as the API server would drop it.
    pdb = one(render(helm, *sets, kube_version=kube_version), "PodDisruptionBudget")
    assert pdb["spec"].get("unhealthyPodEvictionPolicy") == policy


@pytest.mark.parametrize(
    ("sets", "leases", "created"),
    [
        (["leases.namespace=hami-leases"], "hami-leases", True),
        (["leases.createNamespace=false"], "gpu-descheduler-webhook-leases", False),
        (["leases.namespace=team-ml"], "team-ml", False),
    ],
)
def test_the_leases_namespace_is_named_and_made_as_asked(
    helm: Path, sets: list[str], leases: str, created: bool
) -> None:
    objects = render(helm, *sets, namespace="team-ml", release=RELEASE)
    assert one(objects, "Role", "gpu-descheduler-webhook-leases")["metadata"]["namespace"] == leases
    assert one(objects, "RoleBinding", "gpu-descheduler-webhook-leases")["metadata"]["namespace"] == leases
    (container,) = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert f"--lease-namespace={leases}" in container["args"]
    annotations = one(objects, "ConfigMap", "gpu-descheduler-defrag-policy")["metadata"]["annotations"]
    assert annotations["scheduling.hami.placement.com/lease-namespace"] == leases, "where defrag status looks"
    namespaces = [o["metadata"]["name"] for o in by_kind(objects, "Namespace")]
    assert namespaces == ([leases] if created else []), "never the release namespace, nor one made apart"


@pytest.mark.parametrize(
    ("kube_version", "sets", "made"),
    [("1.29.9", [], False), ("1.30.0", [], True), ("1.30.0", ["rbac.podWritePolicy=false"], False)],
)
def test_the_pod_write_policy_is_made_where_the_api_server_serves_it_unless_turned_off(
    helm: Path, kube_version: str, sets: list[str], made: bool
) -> None:
    """admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy is served from 1.30: before, the release would fail."""
    objects = render(helm, *sets, kube_version=kube_version)
    kinds = [o["kind"] for o in objects if o["kind"].startswith("ValidatingAdmissionPolicy")]
    assert kinds == (["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"] if made else [])
    if made:
        account = "system:serviceaccount:kube-system:gpu-descheduler-webhook"
        condition = one(objects, "ValidatingAdmissionPolicy")["spec"]["matchConditions"][0]["expression"]
        assert condition == f'request.userInfo.username == "{account}"', "the server's account alone"


def _numbers_where_names_belong(value: Any, where: str = "") -> Iterator[str]:
    """The paths in a rendered object where a namespace, a name or a label holds a YAML number, not a string."""
    if isinstance(value, dict):
        for key, item in value.items():
            path = f"{where}.{key}"
            if key in ("namespace", "name", "app.kubernetes.io/instance", "lease-namespace") and isinstance(item, int):
                yield path
            yield from _numbers_where_names_belong(item, path)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _numbers_where_names_belong(item, f"{where}[{index}]")


@pytest.mark.parametrize(
    "sets",
    [
        ['json:leases.namespace="5678"'],
        [
            "networkPolicy.enabled=true",
            "networkPolicy.apiServerCIDRs={10.0.0.10/32}",
            "serviceMonitor.enabled=true",
            "prometheusRule.enabled=true",
            "grafanaDashboard.enabled=true",
            "certs.mode=certManager",
        ],
    ],
)
def test_a_release_or_namespace_named_in_digits_renders_them_as_strings(helm: Path, sets: list[str]) -> None:
    """`123` is a release name and `1234` a namespace both Helm and Kubernetes take; written bare they were YAML
    numbers, which the API server refused at install ("cannot unmarshal number into ... of type string")."""
    objects = render(helm, *sets, namespace="1234", release="123", tests=True)
    assert objects and [path for o in objects for path in _numbers_where_names_belong(o, o["kind"])] == []


@pytest.mark.parametrize("sets", [[], ["fullnameOverride=gpu.place"]])
def test_a_dotted_release_name_still_names_the_service_and_the_leases_namespace_as_labels(
    helm: Path, sets: list[str]
) -> None:
    # Helm takes "gpu.descheduler" as a release name; the API server refuses a Service or a Namespace named with dots.
    objects = render(helm, *sets, release="gpu.descheduler")
    label = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
    names = [o["metadata"]["name"] for o in objects if o["kind"] in ("Service", "Namespace")]
    assert len(names) == 2
    assert all(label.match(name) for name in names), names
    (container,) = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    leases = one(objects, "Namespace")["metadata"]["name"]
    assert f"--lease-namespace={leases}" in container["args"]


@pytest.mark.parametrize("name_override", ["hamiplace", "hamiplac", "hami-place-webhook-for-gpus"])
def test_a_long_release_name_gives_the_hooks_names_of_their_own(helm: Path, name_override: str) -> None:
    # A 53-character release (Helm's longest) and a nameOverride make a fullname of 62 or 63 characters: cut to 63
    # after "-certgen" or "-test" was added, the certificate hook's ServiceAccount, ClusterRole and
    # ClusterRoleBinding took the server's own names, and its before-hook-creation and hook-succeeded deleted them
    # (the post-install hook runs after the release's objects exist).
    release = "r" * 53
    objects = render(helm, f"nameOverride={name_override}", release=release, tests=True)
    names = [(o["kind"], o["metadata"]["name"]) for o in objects]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    fullname = one(objects, "Deployment")["metadata"]["name"]
    hooks = [o for o in objects if "helm.sh/hook" in (o["metadata"].get("annotations") or {})]
    assert len(hooks) == 7, "the certificate Job, its account and RBAC (5), and helm test's Job"
    assert all(o["metadata"]["name"] != fullname and len(o["metadata"]["name"]) <= 63 for o in hooks)


@pytest.mark.parametrize("name_override", ["", "hamiplace"])
def test_cert_managers_ca_certificate_has_a_common_name_it_takes(helm: Path, name_override: str) -> None:
    # cert-manager's webhook refuses a commonName over 64 bytes (X.509's ub-common-name): "<fullname>-ca" was 66
    # with a 63-character fullname (a 53-character release and a nameOverride), and no CA, so no certificate, came.
    objects = render(helm, "certs.mode=certManager", f"nameOverride={name_override}", release="r" * 53)
    certificates = by_kind(objects, "Certificate")
    assert len(certificates) == 2, "the self-signed CA and the serving certificate"
    for certificate in certificates:
        assert len(certificate["spec"].get("commonName", "")) <= 64, certificate["spec"]["commonName"]


def test_a_disruption_budget_that_leaves_a_replica_to_evict_renders_as_given(helm: Path) -> None:
    assert one(render(helm, "podDisruptionBudget.minAvailable=50%"), "PodDisruptionBudget")["spec"]["minAvailable"] == (
        "50%"
    )
    three = render(helm, "replicaCount=3", "podDisruptionBudget.minAvailable=2")
    assert one(three, "PodDisruptionBudget")["spec"]["minAvailable"] == 2


def test_crd_is_rendered_verbatim(helm: Path) -> None:
    # The file is plain YAML to kubectl (`kubectl apply -f` it alone): one CRD, its crds.install guard in comments.
    text = CRD_FILE.read_text()
    lines = text.splitlines()
    assert [lines[0], lines[-1]] == ["# {{- if .Values.crds.install }}", "# {{- end }}"]
    assert text.count("{{") == 2, "no template action but the guard"
    [crd] = list(yaml.safe_load_all(text))
    rendered = one(render(helm), "CustomResourceDefinition")
    assert rendered == crd
    assert rendered["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"


def test_crds_install_false_leaves_the_crd_out_and_nothing_else(helm: Path) -> None:
    # GitOps installs apply the CRD on their own; every other object is the same.
    kinds = [(o["kind"], o["metadata"]["name"]) for o in render(helm)]
    without = [(o["kind"], o["metadata"]["name"]) for o in render(helm, "crds.install=false")]
    assert [kind for kind in kinds if kind not in without] == [("CustomResourceDefinition", CRD_NAME)]
    assert len(without) == len(kinds) - 1
    # The guarded file then renders to a comment alone: a document with no object, which kubectl and Helm skip.
    only_crd = ["--set", "crds.install=false", "--show-only", "templates/crd/hamipodplacement.yaml"]
    shown = run_helm(helm, "template", RELEASE, str(CHART), *only_crd).stdout
    assert list(yaml.safe_load_all(shown)) == [None]


def test_server_rbac_is_exactly_what_the_server_uses(helm: Path) -> None:
    objects = render(helm)
    role = one(objects, "ClusterRole", "gpu-descheduler-webhook")
    granted = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    placements = "scheduling.hami.placement.com"
    expected = {("", "nodes", v) for v in ("get", "list", "watch")}
    expected |= {("", "pods", v) for v in ("get", "list", "watch", "patch")}
    expected |= {(placements, "hamipodplacements", v) for v in ("get", "list", "watch", "create", "delete")}
    expected |= {(placements, "hamipodplacements/status", "update")}
    expected |= {("", "pods/eviction", "create")} | {("", "events", v) for v in ("create", "patch", "list", "watch")}
    expected |= {("apps", r, "get") for r in ("deployments", "replicasets", "statefulsets")}
    expected |= {("batch", "jobs", "get")}
    expected |= {("policy", "poddisruptionbudgets", v) for v in ("list", "watch")}
    expected |= {("", r, v) for r in ("persistentvolumeclaims", "persistentvolumes") for v in ("list", "watch")}
    expected |= {
        ("storage.k8s.io", r, v)
        for r in ("storageclasses", "csidrivers", "csistoragecapacities", "csinodes", "volumeattachments")
        for v in ("list", "watch")
    }
    expected |= {("", "namespaces", v) for v in ("list", "watch")}
    expected |= {("authentication.k8s.io", "tokenreviews", "create")}
    expected |= {("authorization.k8s.io", "subjectaccessreviews", "create")}
    expected |= {("apiextensions.k8s.io", "customresourcedefinitions", "get")}
    expected |= {("scheduling.k8s.io", "priorityclasses", "get")}
    assert granted == expected
    named = [rule for rule in role["rules"] if rule.get("resourceNames")]
    assert named == [
        {
            "apiGroups": ["apiextensions.k8s.io"],
            "resources": ["customresourcedefinitions"],
            "resourceNames": [CRD_NAME],
            "verbs": ["get"],
        }
    ], "the placement CRD alone, by name"
    roles = {o["metadata"]["name"]: o for o in by_kind(objects, "Role") if "certgen" not in o["metadata"]["name"]}
    assert set(roles) == {
        "gpu-descheduler-webhook-hami-config",
        "gpu-descheduler-webhook-hami-scheduler",
        "gpu-descheduler-webhook-defrag",
        "gpu-descheduler-webhook-leases",
        "gpu-descheduler-webhook-certs",
    }
    leases = roles["gpu-descheduler-webhook-leases"]
    assert leases["metadata"]["namespace"] == "gpu-descheduler-webhook-leases"
    assert leases["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create", "get", "list", "delete"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": ["hami-place-defrag-leader"],
            "verbs": ["update"],
        },
    ], "the reqID guards and the leader Lease: Leases of their own namespace only, none in kube-system"
    bound = one(objects, "RoleBinding", "gpu-descheduler-webhook-leases")
    assert bound["metadata"]["namespace"] == "gpu-descheduler-webhook-leases"
    assert bound["subjects"] == [
        {"kind": "ServiceAccount", "name": "gpu-descheduler-webhook", "namespace": "kube-system"}
    ]
    assert (
        one(objects, "Namespace", "gpu-descheduler-webhook-leases")["metadata"]["labels"]["app.kubernetes.io/instance"]
        == RELEASE
    )
    (container,) = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert "--lease-namespace=gpu-descheduler-webhook-leases" in container["args"]
    assert roles["gpu-descheduler-webhook-certs"]["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": ["gpu-descheduler-webhook-tls"],
            "verbs": ["get", "update"],
        }
    ], "the TLS Secret the server serves and renews, that one Secret only"
    assert one(objects, "ClusterRole", "gpu-descheduler-webhook-certs")["rules"] == [
        {
            "apiGroups": ["admissionregistration.k8s.io"],
            "resources": ["mutatingwebhookconfigurations"],
            "resourceNames": ["gpu-descheduler-webhook"],
            "verbs": ["get", "patch"],
        }
    ], "the caBundle of its own configuration only"
    assert one(objects, "RoleBinding", "gpu-descheduler-webhook-certs")["roleRef"]["name"] == (
        "gpu-descheduler-webhook-certs"
    )
    assert one(objects, "ClusterRoleBinding", "gpu-descheduler-webhook-certs")["roleRef"]["name"] == (
        "gpu-descheduler-webhook-certs"
    )
    other = render(helm, "certs.mode=secret", "certs.existingSecret=corp-tls", "certs.caBundle=Q0E=")
    assert not [o for o in other if o["metadata"]["name"] == "gpu-descheduler-webhook-certs"], (
        "a server given its certificate as files reads no Secret"
    )
    defrag = roles["gpu-descheduler-webhook-defrag"]
    assert defrag["metadata"]["namespace"] == "kube-system"
    assert defrag["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": ["gpu-descheduler-defrag-policy"],
            "verbs": ["get", "list", "watch"],
        },
    ], "the policy ConfigMap read only, and the leader Lease, those two objects only"
    binding = one(objects, "RoleBinding", "gpu-descheduler-webhook-defrag")
    assert binding["roleRef"]["name"] == "gpu-descheduler-webhook-defrag"
    hami_config = roles["gpu-descheduler-webhook-hami-config"]
    assert hami_config["metadata"]["namespace"] == "kube-system"
    assert hami_config["rules"] == [
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["hami-scheduler-device"], "verbs": ["get"]}
    ], "HAMi's device config, that one ConfigMap only"
    hami_scheduler = roles["gpu-descheduler-webhook-hami-scheduler"]
    assert hami_scheduler["metadata"]["namespace"] == "kube-system"
    assert hami_scheduler["rules"] == [
        {"apiGroups": ["apps"], "resources": ["deployments"], "resourceNames": ["hami-scheduler"], "verbs": ["get"]}
    ], "HAMi's scheduler Deployment (its --gpu-scheduler-policy), that one Deployment only"
    binding = one(objects, "RoleBinding", "gpu-descheduler-webhook-hami-scheduler")
    assert binding["roleRef"]["name"] == "gpu-descheduler-webhook-hami-scheduler"


RBAC_KINDS = {"Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"}


def test_rbac_create_false_renders_none_of_the_servers_rbac(helm: Path) -> None:
    """An operator who binds the rules themselves gets no Role or binding of the server's, in any namespace."""
    made = [
        f"{o['kind']} {o['metadata']['name']}"
        for o in render(helm, "rbac.create=false", "certs.hook.serviceAccountName=corp-certs")
        if o["kind"] in RBAC_KINDS and "certgen" not in o["metadata"]["name"]
    ]
    assert made == []


def test_rbac_create_false_renders_none_of_the_certificate_hooks_rbac(helm: Path) -> None:
    """Nor of the certificate Job's: it runs as the account the operator names and bound (certs.hook), and the chart
    makes no account for it; without that name the chart refuses to render rather than run the Job with no rights."""
    objects = render(helm, "rbac.create=false", "certs.hook.serviceAccountName=corp-certs")
    assert [f"{o['kind']} {o['metadata']['name']}" for o in objects if o["kind"] in RBAC_KINDS] == []
    assert [o["metadata"]["name"] for o in by_kind(objects, "ServiceAccount")] == ["gpu-descheduler-webhook"]
    job = one(objects, "Job")
    assert job["spec"]["template"]["spec"]["serviceAccountName"] == "corp-certs"
    unnamed = run_helm(helm, "template", RELEASE, str(CHART), "--set", "rbac.create=false", check=False)
    assert unnamed.returncode != 0
    assert "certs.hook.serviceAccountName (an account of the release namespace" in unnamed.stderr
    # With rbac.create the chart binds the Job's rules to the named account, and still makes no account of its own.
    bound = render(helm, "certs.hook.serviceAccountName=corp-certs")
    hooks = [o for o in bound if "certgen" in o["metadata"]["name"]]
    assert {o["kind"] for o in hooks} == RBAC_KINDS | {"Job"}
    assert {s["name"] for o in hooks if o["kind"].endswith("Binding") for s in o["subjects"]} == {"corp-certs"}
    # The name is needed only where there is a Job to run.
    assert by_kind(render(helm, "rbac.create=false", "certs.mode=certManager"), "Job") == []


def helm_test_job(objects: list[dict[str, Any]]) -> dict[str, Any]:
    [job] = [o for o in by_kind(objects, "Job") if o["metadata"]["annotations"].get("helm.sh/hook") == "test"]
    return job


def test_helm_test_job_checks_the_service_with_the_release_ca_and_no_account(helm: Path) -> None:
    job = helm_test_job(render(helm, tests=True))
    assert job["metadata"]["name"] == "gpu-descheduler-webhook-test"
    pod = job["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False and pod["restartPolicy"] == "Never"
    assert pod["containers"][0]["args"] == [
        "check",
        "--api-url=http://gpu-descheduler-webhook.kube-system.svc:8083",
        "--webhook-url=https://gpu-descheduler-webhook.kube-system.svc:443/mutate",
        "--ca-file=/etc/hami-place/ca/ca.crt",
    ]
    # The check sees the CA of the serving Secret, never its key.
    assert pod["volumes"] == [
        {
            "name": "ca",
            "secret": {"secretName": "gpu-descheduler-webhook-tls", "items": [{"key": "ca.crt", "path": "ca.crt"}]},
        }
    ]
    brought = helm_test_job(
        render(helm, "certs.mode=secret", "certs.existingSecret=my-tls", "certs.caBundle=Zm9v", tests=True)
    )
    assert brought["spec"]["template"]["spec"]["containers"][0]["args"][-1] == "--ca-data=Zm9v"
    assert "volumes" not in brought["spec"]["template"]["spec"]
    mutual = helm_test_job(
        render(
            helm,
            "server.clientCA.configMap=apiserver-client-ca",
            "server.clientCA.names={kube-apiserver-webhook-client}",
            tests=True,
        )
    )
    assert mutual["spec"]["template"]["spec"]["containers"][0]["args"] == [
        "check",
        "--api-url=http://gpu-descheduler-webhook.kube-system.svc:8083",
    ], "a server that requires the API server's client certificate is checked on its API only"
    policy = one(
        render(helm, "networkPolicy.enabled=true", "networkPolicy.apiServerCIDRs={10.0.0.10/32}"), "NetworkPolicy"
    )
    assert {
        "from": [
            {
                "podSelector": {
                    "matchLabels": {
                        "app.kubernetes.io/instance": RELEASE,
                        "app.kubernetes.io/component": "helm-test",
                    }
                }
            }
        ],
        "ports": [{"port": "webhook", "protocol": "TCP"}, {"port": "api", "protocol": "TCP"}],
    } in policy["spec"]["ingress"]


def test_helm_test_job_runs_where_the_server_may_run(helm: Path) -> None:
    """A cluster whose untainted nodes are all GPU nodes (the server tolerates their taint) left the Job Pending."""
    job = helm_test_job(
        render(
            helm,
            "nodeSelector.pool=system",
            'json:tolerations=[{"key":"nvidia.com/gpu","operator":"Exists","effect":"NoSchedule"}]',
            tests=True,
        )
    )
    pod = job["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"pool": "system"}
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    plain = helm_test_job(render(helm, tests=True))["spec"]["template"]["spec"]
    assert "nodeSelector" not in plain and "tolerations" not in plain


def test_certificate_hook_job(helm: Path) -> None:
    objects = render(helm)
    job = one(objects, "Job")
    events = set(job["metadata"]["annotations"]["helm.sh/hook"].split(","))
    assert {"pre-install", "pre-upgrade", "post-install", "post-upgrade"} <= events
    hook_objects = [o for o in objects if "helm.sh/hook" in o["metadata"].get("annotations", {})]
    assert {o["kind"] for o in hook_objects} == {
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "ClusterRole",
        "ClusterRoleBinding",
        "Job",
    }
    for obj in hook_objects:
        assert obj["metadata"]["annotations"]["helm.sh/hook"] == job["metadata"]["annotations"]["helm.sh/hook"]
        weight = int(obj["metadata"]["annotations"]["helm.sh/hook-weight"])
        assert weight < 0 if obj["kind"] != "Job" else weight == 0, "RBAC must exist before the Job runs"
    pod = job["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "gpu-descheduler-webhook-certgen"
    args = pod["containers"][0]["args"]
    assert args[0] == "certs"
    assert "--secret=kube-system/gpu-descheduler-webhook-tls" in args
    assert "--patch-webhook=gpu-descheduler-webhook" in args
    assert "--dns=gpu-descheduler-webhook.kube-system.svc" in args
    assert (
        pod["containers"][0]["image"]
        == one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"]
    )
    assert pod["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True


def test_cert_manager_mode(helm: Path) -> None:
    objects = render(helm, "certs.mode=certManager")
    assert by_kind(objects, "Job") == []
    configuration = one(objects, "MutatingWebhookConfiguration")
    assert (
        configuration["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
        == "kube-system/gpu-descheduler-webhook"
    )
    serving = one(objects, "Certificate", "gpu-descheduler-webhook")
    assert (serving["spec"]["duration"], serving["spec"]["renewBefore"]) == ("8760h", "720h")
    shortest = render(
        helm, "certs.mode=certManager", "certs.certManager.duration=1h", "certs.certManager.renewBefore=5m"
    )
    spec = one(shortest, "Certificate", "gpu-descheduler-webhook")["spec"]
    assert (spec["duration"], spec["renewBefore"]) == ("1h", "5m"), "cert-manager's bounds themselves are taken"
    assert serving["spec"]["secretName"] == "gpu-descheduler-webhook-tls"
    assert "gpu-descheduler-webhook.kube-system.svc" in serving["spec"]["dnsNames"]
    assert serving["spec"]["issuerRef"] == {"kind": "Issuer", "name": "gpu-descheduler-webhook-ca"}
    assert len(by_kind(objects, "Issuer")) == 2

    given = render(
        helm, "certs.mode=certManager", 'json:certs.certManager.issuerRef={"kind":"ClusterIssuer","name":"corp-ca"}'
    )
    assert by_kind(given, "Issuer") == []
    assert one(given, "Certificate")["spec"]["issuerRef"] == {"kind": "ClusterIssuer", "name": "corp-ca"}


def test_cert_manager_mode_takes_an_external_issuer(helm: Path) -> None:
    # cert-manager checks issuerRef.kind only in its own group; an external issuer (AWS Private CA, Google CAS, step)
    # has a kind of its own in its group, which the schema refused although it offers issuerRef.group for them.
    external = {"group": "awspca.cert-manager.io", "kind": "AWSPCAClusterIssuer", "name": "pca"}
    objects = render(helm, "certs.mode=certManager", f"json:certs.certManager.issuerRef={json.dumps(external)}")
    assert one(objects, "Certificate")["spec"]["issuerRef"] == external
    for wrong in ({"kind": "ClusterIsuer", "name": "x"}, {"group": "cert-manager.io", "kind": "CA", "name": "x"}):
        set_json = f"certs.certManager.issuerRef={json.dumps(wrong)}"
        result = run_helm(helm, "template", RELEASE, str(CHART), "--set-json", set_json, check=False)
        assert result.returncode != 0 and "/certs/certManager/issuerRef/kind" in result.stderr, result.stderr


def test_existing_secret_mode(helm: Path) -> None:
    objects = render(helm, "certs.mode=secret", "certs.existingSecret=corp-tls", "certs.caBundle=Q0E=")
    assert by_kind(objects, "Job") == []
    assert webhook_entry(objects)["clientConfig"]["caBundle"] == "Q0E="
    volumes = one(objects, "Deployment")["spec"]["template"]["spec"]["volumes"]
    assert next(v for v in volumes if v["name"] == "tls")["secret"]["secretName"] == "corp-tls"


# --- against the sandbox -----------------------------------------------------------------------------------------


def can_i(cluster: Sandbox, namespace: str, account: str, *args: str) -> bool:
    result = cluster.kubectl("auth", "can-i", *args, f"--as=system:serviceaccount:{namespace}:{account}", check=False)
    assert result.stdout.strip() in ("yes", "no"), result.stdout + result.stderr
    return result.stdout.strip() == "yes"


def adopt_crd(cluster: Sandbox, release: str, namespace: str) -> None:
    """The sandbox applied the CRD with kubectl; Helm adopts an existing object that carries its ownership marks."""
    cluster.kubectl(
        "annotate",
        "crd",
        CRD_NAME,
        "--overwrite",
        f"meta.helm.sh/release-name={release}",
        f"meta.helm.sh/release-namespace={namespace}",
    )
    cluster.kubectl("label", "crd", CRD_NAME, "--overwrite", "app.kubernetes.io/managed-by=Helm")


# The Prometheus Operator's ServiceMonitor kind, reduced to what the API server needs to store one (its real CRD
# carries the full schema; the chart's object is checked against the operator's fields by the render test).
SERVICE_MONITOR_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "servicemonitors.monitoring.coreos.com"},
    "spec": {
        "group": "monitoring.coreos.com",
        "scope": "Namespaced",
        "names": {
            "kind": "ServiceMonitor",
            "listKind": "ServiceMonitorList",
            "plural": "servicemonitors",
            "singular": "servicemonitor",
            "shortNames": ["smon"],
        },
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                    }
                },
            }
        ],
    },
}


@pytest.fixture(scope="module")
def installed(cluster: Sandbox, helm: Path) -> Iterator[tuple[str, str]]:
    """The chart installed once for this module, for real as a user would (hooks included), then uninstalled.

    The webhook is narrowed to a label no namespace carries: the sandbox runs no server behind the Service, and a
    cluster-wide webhook would make every other test's GPU pod creation wait for its timeout.
    """
    namespace = f"chart-{uuid.uuid4().hex[:8]}"
    release = f"gd-{namespace}"
    cluster.kubectl("create", "namespace", namespace)
    adopt_crd(cluster, release, namespace)
    cluster.kubectl("apply", "-f", "-", input=json.dumps(SERVICE_MONITOR_CRD))
    cluster.kubectl("wait", "--for=condition=Established", f"crd/{SERVICE_MONITOR_CRD['metadata']['name']}")
    env = {"KUBECONFIG": str(cluster.kubeconfig)}
    narrow = '[{"key":"hami-place-test-chart","operator":"Exists"}]'
    args = ["install", release, str(CHART), "-n", namespace, "--wait", "--timeout=180s", "--set", "image.tag=test"]
    optional = [
        "--set",
        "networkPolicy.enabled=true",
        "--set",
        "networkPolicy.apiServerCIDRs={127.0.0.1/32}",
        "--set",
        f"networkPolicy.apiNamespaces={{{namespace}}}",
        "--set",
        "serviceMonitor.enabled=true",
    ]
    result = run_helm(
        helm, *args, *optional, "--set-json", f"webhook.namespaceSelectorExpressions={narrow}", check=False, env=env
    )
    try:
        assert result.returncode == 0, result.stdout + result.stderr
        yield release, namespace
    finally:
        run_helm(helm, "uninstall", release, "-n", namespace, "--wait", "--timeout=120s", check=False, env=env)
        for made in (namespace, f"{release}-webhook-leases"):  # the Leases' namespace is kept on uninstall
            cluster.kubectl("delete", "namespace", made, "--wait=false", check=False)


@pytest.mark.cluster
def test_install_objects_are_accepted_and_running(cluster: Sandbox, installed: tuple[str, str], helm: Path) -> None:
    release, namespace = installed
    fullname = f"{release}-webhook"
    status = run_helm(
        helm, "status", release, "-n", namespace, "-o", "json", env={"KUBECONFIG": str(cluster.kubeconfig)}
    )
    assert json.loads(status.stdout)["info"]["status"] == "deployed"
    ready = cluster.kubectl(
        "get", "deployment", fullname, "-n", namespace, "-o", "jsonpath={.status.readyReplicas}"
    ).stdout
    assert ready == "2"
    leases = json.loads(cluster.kubectl("get", "namespace", f"{fullname}-leases", "-o", "json").stdout)
    assert leases["metadata"]["labels"]["app.kubernetes.io/instance"] == release, "the Leases' namespace, made"
    pdb = json.loads(cluster.kubectl("get", "pdb", fullname, "-n", namespace, "-o", "json").stdout)
    assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow", "the API server kept the field"
    assert cluster.kubectl("get", "service", fullname, "-n", namespace).returncode == 0
    webhook = json.loads(cluster.kubectl("get", "mutatingwebhookconfiguration", fullname, "-o", "json").stdout)
    conditions = [c["name"] for c in webhook["webhooks"][0]["matchConditions"]]
    assert conditions == ["not-bound", "asks-gpu"], "the API server compiled and kept the CEL conditions"
    # The hook's ServiceAccount, RBAC and Job ran and were cleaned up after succeeding.
    leftovers = cluster.kubectl(
        "get",
        "serviceaccount,role,rolebinding,job",
        "-n",
        namespace,
        "-l",
        "app.kubernetes.io/component=certgen",
        "-o",
        "name",
    ).stdout
    assert leftovers.strip() == ""
    assert cluster.kubectl("get", "clusterrole", f"{fullname}-certgen", check=False).returncode != 0
    policy = json.loads(cluster.kubectl("get", "networkpolicy", fullname, "-n", namespace, "-o", "json").stdout)
    assert policy["spec"]["ingress"][0]["from"] == [{"ipBlock": {"cidr": "127.0.0.1/32"}}]
    monitor = json.loads(cluster.kubectl("get", "servicemonitor", fullname, "-n", namespace, "-o", "json").stdout)
    assert monitor["spec"]["endpoints"][0]["port"] == "api"
    # The original descheduler docs select the server's pods by app.kubernetes/name (sic).
    selected = cluster.kubectl(
        "get", "pods", "-n", namespace, "-l", f"app.kubernetes/name={NAME_LABEL}", "-o", "name"
    ).stdout.split()
    assert len(selected) == 2, selected
    notes = run_helm(helm, "get", "notes", release, "-n", namespace, env={"KUBECONFIG": str(cluster.kubeconfig)}).stdout
    assert f"kubectl -n {namespace} rollout status deployment/{fullname}" in notes
    assert f"/api/v1/namespaces/{namespace}/services/{fullname}:api/proxy/api/v1/cluster-info" in notes
    # Where the plugin really is (the release of this chart's appVersion), and no placeholder left to fill.
    release_url = f"https://github.com/hami-place/hami-place/releases/download/v{__version__}/krew-manifest.yaml"
    assert f"kubectl krew install --manifest-url={release_url}" in notes
    assert f"helm test {release} -n {namespace}" in notes
    assert "<" not in notes and "./chart" not in notes, notes


@pytest.mark.cluster
def test_the_server_account_changes_of_a_pod_only_what_the_server_writes(
    cluster: Sandbox, installed: tuple[str, str], tmp_path: Path
) -> None:
    """RBAC grants `patch` on pods whole; the chart's ValidatingAdmissionPolicy lets the server's account (its own
    token here) write what the server writes, through the server's own calls (the room kept for a rescued pod, the
    gate lifted), and nothing else: no image, label or foreign annotation, which admin may still change."""
    release, namespace = installed
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "guarded", "namespace": namespace, "annotations": {ROOM_ANNOTATION: "x"}},
        "spec": {
            "schedulingGates": [{"name": ROOM_GATE}],
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}],
        },
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(pod))
    uid = json.loads(cluster.kubectl("get", "pod", "guarded", "-n", namespace, "-o", "json").stdout)["metadata"]["uid"]
    server = connect(str(sa_kubeconfig(cluster, namespace, f"{release}-webhook", tmp_path / "server")))

    def write(patch: dict[str, Any]) -> None:
        server.core().patch_namespaced_pod("guarded", namespace, patch)

    attempts = itertools.count()

    def label_refused() -> ApiException | None:
        """A new label value each time: the API server reads the policy from a watch of its own."""
        try:
            write({"metadata": {"labels": {"app": f"stolen-{next(attempts)}"}}})
        except ApiException as error:
            return error
        return None

    refused_label = wait_for(label_refused, "the policy to take effect")
    assert (
        refused_label is not None
        and refused_label.status == 403
        and "changes no label, owner or finalizer of a pod" in str(refused_label.body)
    )
    for stolen, why in (
        ({"spec": {"containers": [{"name": "c", "image": "attacker.example/evil:1"}]}}, "nothing of a pod's spec"),
        ({"metadata": {"annotations": {"example.com/x": "y"}}}, "no annotation of a pod but its own"),
    ):
        with pytest.raises(ApiException) as refused:
            write(stolen)
        assert refused.value.status == 403 and why in str(refused.value.body), stolen
    kept = change_pod_annotations(
        server, namespace, "guarded", uid, lambda a: {**a, USE_GPUUUID_ANNOTATION: "GPU-1", RESCUED_BY_ANNOTATION: "r"}
    )
    assert kept is not None and kept["metadata"]["annotations"][USE_GPUUUID_ANNOTATION] == "GPU-1"
    assert release_from_wait(server, namespace, "guarded", uid, gate=ROOM_GATE, annotation=ROOM_ANNOTATION)
    cluster.kubectl("label", "pod", "guarded", "-n", namespace, "app=admin")


@pytest.mark.cluster
def test_server_account_has_exactly_the_access_it_needs(cluster: Sandbox, installed: tuple[str, str]) -> None:
    release, namespace = installed
    account = f"{release}-webhook"
    needed = [
        ("get", "nodes"),
        ("list", "nodes"),
        ("watch", "nodes"),
        ("get", "pods", "-A"),
        ("list", "pods", "-A"),
        ("watch", "pods", "-A"),
        *[
            (verb, "hamipodplacements.scheduling.hami.placement.com", "-A")
            for verb in ("get", "list", "watch", "delete")
        ],
        ("update", "hamipodplacements.scheduling.hami.placement.com", "--subresource=status", "-n", "default"),
        ("create", "pods", "--subresource=eviction", "-n", "default"),
        ("create", "events", "-n", "default"),
        ("patch", "events", "-n", "default"),
        ("list", "poddisruptionbudgets.policy", "-n", "default"),
        ("watch", "poddisruptionbudgets.policy", "-A"),
        ("get", "configmaps/hami-scheduler-device", "-n", "kube-system"),
        ("create", "hamipodplacements.scheduling.hami.placement.com", "-n", "default"),
        ("delete", "hamipodplacements.scheduling.hami.placement.com", "-n", "default"),
        *[(verb, f"configmaps/{release}-defrag-policy", "-n", namespace) for verb in ("get", "list", "watch")],
        ("update", "leases.coordination.k8s.io/hami-place-defrag-leader", "-n", f"{release}-webhook-leases"),
        *[
            (verb, "leases.coordination.k8s.io", "-n", f"{release}-webhook-leases")
            for verb in ("create", "get", "list", "delete")
        ],
        ("get", f"secrets/{release}-webhook-tls", "-n", namespace),
        ("update", f"secrets/{release}-webhook-tls", "-n", namespace),
        ("get", f"mutatingwebhookconfigurations/{release}-webhook"),
        ("patch", f"mutatingwebhookconfigurations/{release}-webhook"),
        ("list", "events", "-A"),
        ("watch", "events", "-A"),
        ("get", "replicasets.apps", "-n", "default"),
        ("get", "statefulsets.apps", "-n", "default"),
        ("get", "jobs.batch", "-n", "default"),
        ("patch", "pods", "-n", "default"),
        ("create", "tokenreviews.authentication.k8s.io"),
        ("create", "subjectaccessreviews.authorization.k8s.io"),
        ("get", f"customresourcedefinitions.apiextensions.k8s.io/{CRD_NAME}"),
    ]
    for args in needed:
        assert can_i(cluster, namespace, account, *args), f"the server cannot {' '.join(args)}"
    forbidden = [
        ("delete", "pods", "-n", "default"),
        ("create", "pods", "-n", "default"),
        ("update", "pods", "-n", "default"),
        ("patch", "nodes"),
        ("update", "hamipodplacements.scheduling.hami.placement.com", "-n", "default"),
        ("patch", "hamipodplacements.scheduling.hami.placement.com", "-n", "default"),
        ("patch", "hamipodplacements.scheduling.hami.placement.com", "--subresource=status", "-n", "default"),
        ("update", "events", "-n", "default"),
        ("get", "secrets", "-n", namespace),
        ("get", "secrets/other", "-n", namespace),
        ("list", "secrets", "-n", namespace),
        ("delete", f"secrets/{release}-webhook-tls", "-n", namespace),
        ("get", "secrets", "-n", "default"),
        ("create", "secrets", "-n", "default"),
        ("patch", "mutatingwebhookconfigurations/other"),
        ("get", "configmaps/other", "-n", "kube-system"),
        ("list", "configmaps", "-n", "kube-system"),
        ("update", "configmaps/hami-scheduler-device", "-n", "kube-system"),
        ("update", "mutatingwebhookconfigurations"),
        *[(verb, "leases.coordination.k8s.io", "-n", namespace) for verb in ("create", "get", "list", "delete")],
        ("update", "leases.coordination.k8s.io", "-n", namespace),
        ("get", "leases.coordination.k8s.io/hami-place-defrag-leader", "-n", namespace),
        ("update", "leases.coordination.k8s.io", "-n", f"{release}-webhook-leases"),
        ("update", "leases.coordination.k8s.io/kube-scheduler", "-n", f"{release}-webhook-leases"),
        ("create", "leases.coordination.k8s.io", "-n", "default"),
        ("delete", "leases.coordination.k8s.io", "-n", "kube-node-lease"),
        ("list", "leases.coordination.k8s.io", "-A"),
        ("update", "leases.coordination.k8s.io/other", "-n", namespace),
        ("update", f"configmaps/{release}-defrag-policy", "-n", namespace),
        ("patch", f"configmaps/{release}-defrag-policy", "-n", namespace),
        ("get", "configmaps/other", "-n", namespace),
        ("list", "configmaps", "-n", namespace),
        ("*", "*"),
        ("get", "customresourcedefinitions.apiextensions.k8s.io/other.example.com"),
        ("list", "customresourcedefinitions.apiextensions.k8s.io"),
        ("escalate", "clusterroles"),
        ("impersonate", "users"),
    ]
    for args in forbidden:
        assert not can_i(cluster, namespace, account, *args), f"the server may {' '.join(args)}"


@pytest.mark.cluster
def test_upgrade_keeps_the_ca_bundle_and_applies_new_values(
    cluster: Sandbox, installed: tuple[str, str], helm: Path
) -> None:
    """After the certificate hook filled caBundle, Helm's own apply of the configuration on upgrade keeps it.

    The sandbox's kwok completes the hook Job's pod without running it, so the hook's command is run here with the
    Job's args (as the admin: the hook's own account is tested on its own below).
    """
    release, namespace = installed
    fullname = f"{release}-webhook"
    env = {"KUBECONFIG": str(cluster.kubeconfig)}
    job = one(render(helm, namespace=namespace, release=release), "Job")
    hook = subprocess.run(
        [str(WEBHOOK), *job["spec"]["template"]["spec"]["containers"][0]["args"]],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **env},
        timeout=120,
    )
    assert hook.returncode == 0, hook.stdout + hook.stderr
    ca = json.loads(cluster.kubectl("get", "secret", f"{fullname}-tls", "-n", namespace, "-o", "json").stdout)["data"][
        "ca.crt"
    ]

    def room_key() -> str:
        stored = cluster.kubectl("get", "secret", f"{fullname}-room-key", "-n", namespace, "-o", "json").stdout
        return str(json.loads(stored)["data"]["room.key"])

    key = room_key()
    args = ["upgrade", release, str(CHART), "-n", namespace, "--reuse-values", "--wait", "--timeout=180s"]
    upgrade = run_helm(helm, *args, "--set", "replicaCount=1", check=False, env=env)
    assert upgrade.returncode == 0, upgrade.stdout + upgrade.stderr
    configuration = json.loads(cluster.kubectl("get", "mutatingwebhookconfiguration", fullname, "-o", "json").stdout)
    assert configuration["webhooks"][0]["clientConfig"]["caBundle"] == ca
    assert room_key() == key, "the room key is kept: rooms sealed before the upgrade still hold"
    assert cluster.kubectl("get", "pdb", fullname, "-n", namespace, check=False).returncode != 0
    history = json.loads(run_helm(helm, "history", release, "-n", namespace, "-o", "json", env=env).stdout)
    assert [h["status"] for h in history] == ["superseded", "deployed"]


@pytest.mark.cluster
def test_crd_survives_uninstall(cluster: Sandbox, namespace: str, helm: Path) -> None:
    release = f"gd-{namespace}"
    adopt_crd(cluster, release, namespace)
    env = {"KUBECONFIG": str(cluster.kubeconfig)}
    narrow = '[{"key":"hami-place-test-chart","operator":"Exists"}]'
    install = ("install", release, str(CHART), "-n", namespace, "--no-hooks")
    selector = ("--set-json", f"webhook.namespaceSelectorExpressions={narrow}")
    run_helm(helm, *install, *selector, env=env)
    run_helm(helm, "uninstall", release, "-n", namespace, env=env)
    leases = f"{release}-webhook-leases"
    kept = json.loads(cluster.kubectl("get", "namespace", leases, "-o", "json").stdout)
    assert kept["status"]["phase"] == "Active", "the Leases' namespace is kept, as the placements are"
    run_helm(helm, *install, *selector, env=env)  # at once: a namespace still terminating refused its Role
    run_helm(helm, "uninstall", release, "-n", namespace, "--wait", env=env)
    cluster.kubectl("delete", "namespace", leases, "--wait=false")
    assert cluster.kubectl("get", "crd", CRD_NAME).returncode == 0
    assert cluster.kubectl("get", "hamipodplacements", "-A").returncode == 0


# --- the certificate hook's command, run as the hook's own ServiceAccount ---------------------------------------


def hook_objects(helm: Path, release: str, namespace: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    objects = render(helm, namespace=namespace, release=release)
    rbac = [o for o in objects if "certgen" in o["metadata"]["name"] and o["kind"] != "Job"]
    return rbac, one(objects, "Job")


@pytest.mark.cluster
def test_certificate_hook_command_with_its_own_account(
    cluster: Sandbox, namespace: str, helm: Path, tmp_path: Path
) -> None:
    """What the hook Job runs, run here (no container runtime) with the Job's args and its ServiceAccount's token."""
    release = f"gd-{namespace}"
    fullname = f"{release}-webhook"
    rbac, job = hook_objects(helm, release, namespace)
    configuration = one(render(helm, namespace=namespace, release=release), "MutatingWebhookConfiguration")
    configuration["webhooks"][0]["namespaceSelector"]["matchExpressions"].append(
        {"key": "hami-place-test-chart", "operator": "Exists"}
    )
    manifest = "\n---\n".join(yaml.safe_dump(o) for o in [*rbac, configuration])
    cluster.kubectl("apply", "-f", "-", input=manifest)
    try:
        account = job["spec"]["template"]["spec"]["serviceAccountName"]
        assert can_i(cluster, namespace, account, "patch", f"mutatingwebhookconfigurations/{fullname}")
        assert not can_i(cluster, namespace, account, "patch", "mutatingwebhookconfigurations/other")
        assert not can_i(cluster, namespace, account, "get", "secrets/other", "-n", namespace)
        assert not can_i(cluster, namespace, account, "get", "secrets", "-n", "default")
        assert not can_i(cluster, namespace, account, "list", "secrets", "-n", namespace)

        kubeconfig = sa_kubeconfig(cluster, namespace, account, tmp_path / "certgen.kubeconfig")
        argv = [str(WEBHOOK), *job["spec"]["template"]["spec"]["containers"][0]["args"]]
        env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
        first = subprocess.run(argv, check=False, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
        assert first.returncode == 0, first.stdout + first.stderr

        secret = json.loads(cluster.kubectl("get", "secret", f"{fullname}-tls", "-n", namespace, "-o", "json").stdout)
        assert secret["type"] == "kubernetes.io/tls"
        assert set(secret["data"]) >= {"tls.crt", "tls.key", "ca.crt"}
        bundle = json.loads(cluster.kubectl("get", "mutatingwebhookconfiguration", fullname, "-o", "json").stdout)[
            "webhooks"
        ][0]["clientConfig"]["caBundle"]
        assert bundle == secret["data"]["ca.crt"]
        assert base64.b64decode(bundle).startswith(b"-----BEGIN CERTIFICATE-----")

        # The next helm upgrade runs it again: the still-valid certificate and CA are kept.
        again = subprocess.run(argv, check=False, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
        assert again.returncode == 0, again.stdout + again.stderr
        kept = json.loads(cluster.kubectl("get", "secret", f"{fullname}-tls", "-n", namespace, "-o", "json").stdout)
        assert kept["data"] == secret["data"]

        # A template rendered against this cluster carries no caBundle at all (no lookup of the Secret, which put
        # the CA of before the pre hook back), so Helm's own apply during an upgrade leaves the bundle as it is.
        looked_up = run_helm(
            helm,
            "template",
            release,
            str(CHART),
            "-n",
            namespace,
            "--dry-run=server",
            "--show-only",
            "templates/mutatingwebhook.yaml",
            env={"KUBECONFIG": str(cluster.kubeconfig)},
        )
        assert "caBundle" not in yaml.safe_load(looked_up.stdout)["webhooks"][0]["clientConfig"]
    finally:
        cluster.kubectl("delete", "-f", "-", "--ignore-not-found", input=manifest, check=False)


# --- the server itself, with the Deployment's args and its ServiceAccount --------------------------------------


@pytest.mark.cluster
def test_server_runs_with_the_chart_args_and_account(
    cluster: Sandbox, installed: tuple[str, str], helm: Path, tmp_path: Path
) -> None:
    """The Deployment's container args, run outside a container as the chart's ServiceAccount: it gets ready.

    Readiness needs the server's caches of nodes, pods and placements, so this fails when the chart's RBAC lacks a
    verb the server uses; and it serves the TLS Secret and puts its CAs into the configuration's caBundle, as that
    account. Ports and the room key's path (its Secret, written where the test can read it) are the only args
    changed (no pod network here).
    """
    release, namespace = installed
    objects = render(helm, namespace=namespace, release=release)
    container = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    # The hook Job's pod does not run under kwok: its command makes the Secret the server serves and renews. An
    # earlier test's Secret would be kept (a servable certificate is rotated to new names, not replaced): none here.
    cluster.kubectl("delete", "secret", f"{release}-webhook-tls", "-n", namespace, "--ignore-not-found")
    subprocess.run(
        [
            str(WEBHOOK),
            "certs",
            "--secret",
            f"{namespace}/{release}-webhook-tls",
            "--dns",
            "localhost",
            "--ip",
            "127.0.0.1",
        ],
        check=True,
        capture_output=True,
        timeout=60,
        env={**os.environ, "KUBECONFIG": str(cluster.kubeconfig)},
    )
    # The room key Secret the chart made, where the pod would have it mounted.
    room_key = json.loads(
        cluster.kubectl("get", "secret", f"{release}-webhook-room-key", "-n", namespace, "-o", "json").stdout
    )["data"]["room.key"]
    (tmp_path / "room.key").write_bytes(base64.b64decode(room_key))
    api_port, webhook_port = free_port(), free_port()
    replaced = {
        "--room-key-file": str(tmp_path / "room.key"),
        "--webhook-port": str(webhook_port),
        "--api-port": str(api_port),
        "--probe-port": str(free_port()),
        # Every address: a read from off the loopback must be reviewed with the chart's account.
        "--bind-address": "0.0.0.0",
    }
    args = [
        f"{a.split('=')[0]}={replaced[a.split('=')[0]]}" if a.split("=")[0] in replaced else a
        for a in container["args"]
    ]
    kubeconfig = sa_kubeconfig(cluster, namespace, f"{release}-webhook", tmp_path / "server.kubeconfig")
    # A reqID guard whose placement is gone, where the chart keeps the server's Leases: its first sweep releases it.
    leases = f"{release}-webhook-leases"
    orphan = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": "hami-place-reqid-orphan",
            "namespace": leases,
            "labels": {GUARD_LABEL: GUARD_LABEL_VALUE},
            "annotations": {PLACEMENT_ANNOTATION: "gone", PLACEMENT_NAMESPACE_ANNOTATION: namespace},
        },
        "spec": {"holderIdentity": "uid-of-a-placement-gone"},
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(orphan))
    log = (tmp_path / "server.log").open("w")
    server = subprocess.Popen(
        [str(WEBHOOK), *args],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "KUBECONFIG": str(kubeconfig), "POD_NAMESPACE": namespace},  # as the Deployment sets it
    )
    try:
        deadline = time.monotonic() + 60
        status = None
        while time.monotonic() < deadline and server.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{api_port}/readyz", timeout=2) as response:
                    status = response.status
                    break
            except OSError:
                time.sleep(0.5)
        assert status == 200, (tmp_path / "server.log").read_text()[-3000:]
        address = primary_address()
        if address is not None:
            # The server's own account may list pods: its token is reviewed (TokenReview, SubjectAccessReview) with
            # the chart's RBAC, which a missing grant turns into a 503.
            token = json.loads(kubeconfig.read_text())["users"][0]["user"]["token"]
            read = urllib.request.Request(
                f"http://{address}:{api_port}/api/v1/cluster-info", headers={"Authorization": f"Bearer {token}"}
            )
            with urllib.request.urlopen(read, timeout=10) as response:
                assert response.status == 200
        # The reconciler's first full pass sweeps the reqID guards where --lease-namespace says, as the chart's account.
        wait_for(
            lambda: cluster.kubectl("get", "lease", "hami-place-reqid-orphan", "-n", leases, check=False).returncode,
            "the first guard sweep to release the orphan guard",
        )
        forbidden = [line for line in (tmp_path / "server.log").read_text().splitlines() if "forbidden" in line]
        assert forbidden == [], forbidden
        fullname = f"{release}-webhook"
        secret = json.loads(cluster.kubectl("get", "secret", f"{fullname}-tls", "-n", namespace, "-o", "json").stdout)
        patched = cluster.kubectl("get", "mutatingwebhookconfiguration", fullname, "-o", "json").stdout
        assert json.loads(patched)["webhooks"][0]["clientConfig"]["caBundle"] == secret["data"]["ca.crt"]
        # What `helm test` runs, against this server: the Service's host and ports are the only args changed.
        ca_file = tmp_path / "ca.crt"
        ca_file.write_bytes(base64.b64decode(secret["data"]["ca.crt"]))
        check = [
            # The certificate names localhost, as the Service's name is in a cluster.
            *helm_test_args(helm, release, namespace, f"localhost:{api_port}", f"localhost:{webhook_port}"),
            f"--ca-file={ca_file}",
        ]
        checked = subprocess.run([str(WEBHOOK), *check], capture_output=True, text=True, timeout=60, check=False)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert checked.stdout.splitlines() == [
            f"webhook https://localhost:{webhook_port}/mutate: ok",
            f"api http://localhost:{api_port}: ok",
        ]
        # The CA as certs.caBundle gives it (base64, --ca-data), and an API URL under which the server serves nothing.
        elsewhere = f"http://localhost:{api_port}/elsewhere"
        inline = [
            *(arg for arg in check if not arg.startswith(("--api-url=", "--ca-file="))),
            f"--api-url={elsewhere}",
            f"--ca-data={secret['data']['ca.crt']}",
        ]
        lost = subprocess.run([str(WEBHOOK), *inline], capture_output=True, text=True, timeout=60, check=False)
        assert lost.returncode == 1, lost.stdout + lost.stderr
        [mutate, api] = lost.stdout.splitlines()
        assert mutate == f"webhook https://localhost:{webhook_port}/mutate: ok"
        assert api.startswith(f"api {elsewhere}: FAILED: answered HTTP 404: "), api
        # The kubelet sends SIGTERM and kills after terminationGracePeriodSeconds (30 by default).
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail("the server was still running 30s after SIGTERM: every rollout would wait for a SIGKILL")
        gone = subprocess.run([str(WEBHOOK), *check], capture_output=True, text=True, timeout=60, check=False)
        assert gone.returncode == 1, gone.stdout + gone.stderr
        assert all("FAILED: did not answer" in line for line in gone.stdout.splitlines()), gone.stdout
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        log.close()


def helm_test_args(helm: Path, release: str, namespace: str, api: str, webhook: str) -> list[str]:
    """helm test's check command with the Service's addresses replaced (no pod network here), without its CA."""
    job = helm_test_job(render(helm, namespace=namespace, release=release, tests=True))
    service = f"{release}-webhook.{namespace}.svc"
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[-1] == "--ca-file=/etc/hami-place/ca/ca.crt"
    return [arg.replace(f"{service}:8083", api).replace(f"{service}:443", webhook) for arg in args[:-1]]


@pytest.mark.cluster
def test_helm_test_runs_on_the_installed_release(cluster: Sandbox, installed: tuple[str, str], helm: Path) -> None:
    """`helm test` creates its Job and waits for it; kwok runs the sandbox's pods, so the check's command itself is
    run against a real server in test_server_runs_with_the_chart_args_and_account."""
    release, namespace = installed
    env = {"KUBECONFIG": str(cluster.kubeconfig)}
    result = run_helm(helm, "test", release, "-n", namespace, "--timeout=120s", check=False, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"TEST SUITE:     {release}-webhook-test" in result.stdout and "Phase:          Succeeded" in result.stdout


# --- the CRD, enforced by the API server itself ------------------------------------------------------------------


def placement(name: str, **spec: Any) -> dict[str, Any]:
    base = {
        "reqID": "req-12345",
        "podSelector": {"matchLabels": {"app": "train"}},
        "nodeName": "gpu-a100-0",
        "gpuDevices": ["gpu-0"],
    }
    return {
        "apiVersion": "scheduling.hami.placement.com/v1",
        "kind": "HamiPodPlacement",
        "metadata": {"name": name},
        "spec": {**base, **spec},
    }


def create(cluster: Sandbox, namespace: str, obj: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return cluster.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(obj), check=False)


@pytest.mark.cluster
@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"reqID": "abcd"}, "spec.reqID: Invalid value"),
        ({"gpuDevices": []}, "spec.gpuDevices: Invalid value"),
        ({"gpuDevices": ["gpu-0/0"]}, "spec.gpuDevices[0]"),
        ({"gpuDevices": ["gpu-0/101"]}, "spec.gpuDevices[0]"),
        ({"gpuDevices": ["card-0"]}, "spec.gpuDevices[0]"),
        ({"podSelector": {}}, "podSelector must not be empty"),
        ({"podSelector": {"matchLabels": {}}}, "podSelector must not be empty"),
        ({"podSelector": {"matchExpressions": [{"key": "app", "operator": "In"}]}}, "In and NotIn need at least one"),
        (
            {"podSelector": {"matchExpressions": [{"key": "app", "operator": "Near", "values": ["x"]}]}},
            "Unsupported value",
        ),
        ({"evictPod": "Not_A_Pod"}, "spec.evictPod"),
        ({"nodeName": None}, "spec.nodeName: Required value"),
    ],
)
def test_api_server_rejects_bad_placements(
    cluster: Sandbox, namespace: str, spec: dict[str, Any], message: str
) -> None:
    obj = placement("bad", **spec)
    obj["spec"] = {k: v for k, v in obj["spec"].items() if v is not None}
    result = create(cluster, namespace, obj)
    assert result.returncode != 0
    assert message in result.stderr, result.stderr


@pytest.mark.cluster
def test_api_server_accepts_good_placements_and_keeps_req_id(cluster: Sandbox, namespace: str) -> None:
    good = placement(
        "good",
        gpuDevices=["gpu-0/70", "gpu-1/70", "GPU-0fc3-9a1b"],
        evictPod="old-pod-7f9c",
        podSelector={"matchExpressions": [{"key": "app", "operator": "Exists"}]},
    )
    result = create(cluster, namespace, good)
    assert result.returncode == 0, result.stderr
    changed = cluster.kubectl(
        "patch", "hpp", "good", "-n", namespace, "--type=merge", "-p", '{"spec":{"reqID":"req-99999"}}', check=False
    )
    assert changed.returncode != 0
    assert "reqID is immutable" in changed.stderr
    bad_status = cluster.kubectl(
        "patch",
        "hpp",
        "good",
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        '{"status":{"phase":"Done"}}',
        check=False,
    )
    assert "Unsupported value" in bad_status.stderr
    status = {
        "status": {
            "phase": "Consumed",
            "message": "placed",
            "consumedBy": {"name": "p", "uid": "u"},
            "claim": {"token": "t0k3n", "claimedAt": "2026-01-01T00:00:00Z"},
            "eviction": {
                "pod": "old-pod-7f9c",
                "result": "Evicted",
                "attempts": 1,
                "time": "2026-01-01T00:00:01Z",
                "message": "evicted",
            },
            "conditions": [
                {
                    "type": "Claimed",
                    "status": "True",
                    "reason": "Claimed",
                    "message": "ok",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ],
        }
    }
    written = cluster.kubectl(
        "patch",
        "hpp",
        "good",
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps(status),
        check=False,
    )
    assert written.returncode == 0, written.stderr
    table = cluster.kubectl("get", "hpp", "good", "-n", namespace).stdout.splitlines()
    assert table[0].split() == ["NAME", "REQID", "NODE", "GPUS", "PHASE", "POD", "AGE"]
    assert table[1].split()[:6] == [
        "good",
        "req-12345",
        "gpu-a100-0",
        '["gpu-0/70","gpu-1/70","GPU-0fc3-9a1b"]',
        "Consumed",
        "p",
    ]
