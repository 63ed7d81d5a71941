"""Attacks on the server by someone who may only create pods in one namespace (issue 23), on the sandbox.

The webhook runs as a user of its own whose every API call the sandbox's API server writes to its audit log, so
"no call outside the placement's own path" is read from the API server's record, not from the webhook's word.
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import subprocess
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kubectl_hami_place.core.defrag.seal import seal_move
from kubectl_hami_place.core.lifecycle import GUARD_LABEL, GUARD_LABEL_VALUE, req_id_guard_name
from kubectl_hami_place.core.names import DEFRAG_FROM_NODE_ANNOTATION, DEFRAG_POD_ANNOTATION, DEFRAG_RUN_LABEL
from sandbox.cluster import AUDITED_USER, Sandbox, primary_address, wait_for
from sandbox.webhook import Webhook, room_key, start
from tests.cluster.cli_harness import PLUGIN, apply, route_webhook_service
from tests.cluster.webhook_harness import (
    GROUP,
    PLURAL,
    VERSION,
    create_placement,
    gpu_pod,
    register,
    sees_placement,
    status_of,
)

pytestmark = pytest.mark.cluster
PLACEMENT = "scheduling.hami.placement.com/placement"
CLAIM = "scheduling.hami.placement.com/claim"
DIGEST = "scheduling.hami.placement.com/claim-digest"
TRAVERSAL = "../../../../../../api/v1/pods"
FORGED_PODS = 40


def audited_webhook(cluster: Sandbox, tmp_path: Path, webhooks: list[Webhook]) -> Webhook:
    """A webhook acting as the audited user (with the admin's rights: what it may read is not what stops it)."""
    if cluster.authority is None:
        pytest.skip("needs a sandbox this test session started: an attached one has no audit log")
    webhook = start(cluster, tmp_path, kubeconfig=cluster.identity_kubeconfig(AUDITED_USER))
    webhooks.append(webhook)
    return webhook


def webhook_calls(cluster: Sandbox, since: int) -> list[dict[str, Any]]:
    """The audited user's API calls recorded after the first `since` events."""
    return [e for e in cluster.audit_events()[since:] if (e.get("user") or {}).get("username") == AUDITED_USER]


def pod_read(event: dict[str, Any]) -> bool:
    """A GET, LIST or WATCH of pods (not of a subresource such as an eviction)."""
    ref = event.get("objectRef") or {}
    return ref.get("resource") == "pods" and not ref.get("subresource") and event["verb"] in ("get", "list", "watch")


def forged(index: int) -> dict[str, Any]:
    """A pod claiming a 'placement' that is a path, with a token no placement holds."""
    pod = gpu_pod(f"forged-{index}-", {"app": "forged"})
    pod["metadata"]["annotations"] = {PLACEMENT: TRAVERSAL, CLAIM: uuid.uuid4().hex}
    return pod


def test_a_placement_annotation_that_is_a_path_reaches_no_api_path_and_the_placement_still_pins(
    cluster: Sandbox, namespace: str, tmp_path: Path, webhooks: list[Webhook], configurations: list[str]
) -> None:
    webhook = audited_webhook(cluster, tmp_path, webhooks)
    register(cluster, configurations, namespace, [(webhook, {})])
    create_placement(cluster, namespace, "real", {"app": "real"}, ["gpu-0"], node="gpu-a100-0")
    wait_for(lambda: sees_placement(webhook, namespace, "real"), "the webhook to see the placement")
    assert webhook_calls(cluster, 0), "the audit log records the webhook's calls"
    core = client.CoreV1Api(cluster.api_client())
    since = len(cluster.audit_events())

    with ThreadPoolExecutor(FORGED_PODS) as pool:
        admitted = list(
            pool.map(lambda i: core.create_namespaced_pod(namespace, forged(i), dry_run="All"), range(FORGED_PODS))
        )
    for pod in admitted:
        annotations = pod.metadata.annotations or {}
        assert PLACEMENT not in annotations and CLAIM not in annotations, "the forged annotations are removed"
    pinned = core.create_namespaced_pod(namespace, gpu_pod("real-", {"app": "real"}))
    assert (pinned.metadata.annotations or {}).get(PLACEMENT) == "real", "the real placement pins the next pod"

    calls = webhook_calls(cluster, since)
    # The real pod's reinvocation looks up its own claim, by its digest.
    own = (pinned.metadata.labels or {})[DIGEST]
    stray = [
        f"{e['verb']} {e['requestURI']}"
        for e in calls
        if ".." in e["requestURI"]
        # The pod cache's own list and watch select HAMi's pods by scheduler; any other pod read is the attack's.
        or (pod_read(e) and "fieldSelector" not in e["requestURI"] and own not in e["requestURI"])
        # Another test's placement still in the cluster may be acknowledged by this webhook's reconciler meanwhile;
        # what the forged claims could reach is a placement of this namespace other than the real one.
        or (
            (e.get("objectRef") or {}).get("resource") == "hamipodplacements"
            and (e.get("objectRef") or {}).get("namespace", namespace) == namespace
            and (e.get("objectRef") or {}).get("name", "") not in ("", "real")
        )
    ]
    assert stray == [], f"API calls outside the placement's own path: {stray[:5]}"
    assert any((e.get("objectRef") or {}).get("name") == "real" and e["verb"] == "update" for e in calls), (
        "the claim of the real placement is on record: the audit log was read over the right span"
    )


def test_forged_claims_of_a_real_placement_look_up_pods_by_label_not_by_listing_the_namespace(
    cluster: Sandbox, namespace: str, tmp_path: Path, webhooks: list[Webhook], configurations: list[str]
) -> None:
    webhook = audited_webhook(cluster, tmp_path, webhooks)
    register(cluster, configurations, namespace, [(webhook, {})])
    create_placement(cluster, namespace, "real", {"app": "real"}, ["gpu-0"], node="gpu-a100-0")
    wait_for(lambda: sees_placement(webhook, namespace, "real"), "the webhook to see the placement")
    core = client.CoreV1Api(cluster.api_client())
    since = len(cluster.audit_events())

    def copy(index: int) -> Any:
        pod = gpu_pod(f"copy-{index}-", {"app": "forged"})
        pod["metadata"]["annotations"] = {PLACEMENT: "real", CLAIM: uuid.uuid4().hex}
        return core.create_namespaced_pod(namespace, pod, dry_run="All")

    with ThreadPoolExecutor(FORGED_PODS) as pool:
        list(pool.map(copy, range(FORGED_PODS)))
    pod_reads = [
        e["requestURI"] for e in webhook_calls(cluster, since) if pod_read(e) and "fieldSelector" not in e["requestURI"]
    ]
    assert pod_reads, "each forged claim is looked up"
    unselected = [uri for uri in pod_reads if "claim-digest" not in uri]
    assert unselected == [], f"pods listed without the claim-digest selector: {unselected[:3]}"


def placement_ready(
    cluster: Sandbox, namespace: str, tmp_path: Path, webhooks: list[Webhook], configurations: list[str], *extra: str
) -> tuple[Webhook, dict[str, Any]]:
    """A registered webhook and one placement it sees, on gpu-a100-0's first card, selecting app=target."""
    webhook = start(cluster, tmp_path, *extra)
    webhooks.append(webhook)
    register(cluster, configurations, namespace, [(webhook, {})])
    created = create_placement(cluster, namespace, "target", {"app": "target"}, ["gpu-0"], node="gpu-a100-0")
    wait_for(lambda: sees_placement(webhook, namespace, "target"), "the webhook to see the placement")
    return webhook, created


def test_a_lease_with_the_guards_name_but_not_its_label_blocks_nothing(
    cluster: Sandbox, namespace: str, tmp_path: Path, webhooks: list[Webhook], configurations: list[str]
) -> None:
    _webhook, created = placement_ready(cluster, namespace, tmp_path, webhooks, configurations)
    name = req_id_guard_name(namespace, created["spec"]["reqID"])
    leases = client.CoordinationV1Api(cluster.api_client())
    # The guards live in the server's namespace ("default" for a server not told one), where only those who may
    # create Leases there could squat: an operator's mistake, not a tenant's.
    squatter = {"metadata": {"name": name, "namespace": "default"}, "spec": {"holderIdentity": "someone-else"}}
    leases.create_namespaced_lease("default", squatter)

    pod = client.CoreV1Api(cluster.api_client()).create_namespaced_pod(namespace, gpu_pod("t-", {"app": "target"}))
    assert (pod.metadata.annotations or {}).get(PLACEMENT) == "target", "the squatting Lease held nothing"
    guard = leases.read_namespaced_lease(name, "default")
    assert guard.metadata.labels == {GUARD_LABEL: GUARD_LABEL_VALUE}
    assert guard.spec.holder_identity == created["metadata"]["uid"]


def test_a_pod_with_a_privileged_container_claims_no_placement(
    cluster: Sandbox, namespace: str, tmp_path: Path, webhooks: list[Webhook], configurations: list[str]
) -> None:
    placement_ready(cluster, namespace, tmp_path, webhooks, configurations)
    core = client.CoreV1Api(cluster.api_client())
    privileged = gpu_pod("priv-", {"app": "target"})
    privileged["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    with pytest.raises(ApiException) as denied:
        core.create_namespaced_pod(namespace, privileged)
    assert "is privileged" in str(denied.value.body), "HAMi's webhook denies it"
    assert "claim" not in status_of(cluster, namespace, "target"), "ours claimed nothing for it"
    pod = core.create_namespaced_pod(namespace, gpu_pod("t-", {"app": "target"}))
    assert (pod.metadata.annotations or {}).get(PLACEMENT) == "target", "the placement is still open"


def test_finished_placements_are_deleted_after_the_ttl_and_no_other(
    cluster: Sandbox, namespace: str, tmp_path: Path, webhooks: list[Webhook], configurations: list[str]
) -> None:
    # That it was consumed is read from its Event, which outlives it: a poll of its status may come after the TTL on a
    # loaded box (3 s were missed so in a CI run).
    placement_ready(cluster, namespace, tmp_path, webhooks, configurations, "--finished-ttl", "3")
    create_placement(cluster, namespace, "open", {"app": "nobody"}, ["gpu-1"], node="gpu-a100-0")
    core = client.CoreV1Api(cluster.api_client())
    pod = core.create_namespaced_pod(namespace, gpu_pod("t-", {"app": "target"}))
    custom = client.CustomObjectsApi(cluster.api_client())

    def gone() -> bool:
        try:
            custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "target")
        except ApiException as error:
            return error.status == 404
        return False

    # The reconciler queues a finished placement for the end of its TTL.
    wait_for(gone, "the consumed placement to be deleted", timeout=60)

    def consumed() -> list[str]:
        events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=target").items
        return [event.message for event in events if event.reason == "Consumed"]

    said = wait_for(consumed, "the placement's Consumed Event")
    assert said == [f"pod {pod.metadata.name} ({pod.metadata.uid}) is stored carrying the claim"]
    assert status_of(cluster, namespace, "open").get("phase", "Pending") == "Pending", "an open one is kept"


def put_device_config(cluster: Sandbox, namespace: str, count_name: str) -> None:
    """HAMi's device config in a ConfigMap of the test's namespace, counting cards by `count_name`."""
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "hami-device", "namespace": namespace},
        "data": {"device-config.yaml": f"nvidia:\n  resourceCountName: {count_name}\n"},
    }
    cluster.kubectl("apply", "-f", "-", input=json.dumps(body))


def test_a_change_of_hamis_device_config_reaches_admissions_without_a_restart(
    cluster: Sandbox, namespace: str, tmp_path: Path, webhooks: list[Webhook], configurations: list[str]
) -> None:
    put_device_config(cluster, namespace, "nvidia.com/gpu")
    flags = ("--hami-config", f"{namespace}/hami-device", "--hami-config-reread", "2")
    placement_ready(cluster, namespace, tmp_path, webhooks, configurations, *flags)
    put_device_config(cluster, namespace, "example.com/vgpu")
    core = client.CoreV1Api(cluster.api_client())
    renamed = gpu_pod("renamed-", {"app": "target"})
    renamed["spec"]["containers"][0]["resources"] = {"limits": {"example.com/vgpu": "1"}}

    def pinned() -> bool:
        pod = core.create_namespaced_pod(namespace, renamed, dry_run="All")
        return (pod.metadata.annotations or {}).get(PLACEMENT) == "target"

    # The server reads the ConfigMap again every 2 s (--hami-config-reread).
    wait_for(pinned, "a pod asking example.com/vgpu to be pinned", timeout=20, interval=1)


def test_110_slow_header_connections_to_the_api_port_do_not_make_the_pod_unready(
    cluster: Sandbox, tmp_path: Path, webhooks: list[Webhook]
) -> None:
    webhook = start(cluster, tmp_path)
    webhooks.append(webhook)
    with ExitStack() as stack:
        for _ in range(110):
            sock = stack.enter_context(socket.create_connection(("127.0.0.1", webhook.api_port), timeout=10))
            sock.sendall(b"GET /api/v1/cluster-info HTTP/1.1\r\nHost: x\r\n")  # the header never ends
        with urllib.request.urlopen(f"http://127.0.0.1:{webhook.probe_port}/readyz", timeout=5) as reply:
            assert reply.status == 200, "the probes' port is the kubelet's alone"


# --- Item 3: the API port serves its documents only to a reader allowed to read what they name ---

READ_DOCUMENTS = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
    {"apiGroups": [GROUP], "resources": [PLURAL], "verbs": ["list"]},
]
# What `status` itself asks of the API server on the way to the webhook: find its Service, go through the proxy.
REACH_THE_WEBHOOK = [
    {"apiGroups": [""], "resources": ["services"], "verbs": ["list"]},
    {"apiGroups": [""], "resources": ["services/proxy"], "verbs": ["get"]},
]


@pytest.fixture
def cluster_roles(cluster: Sandbox) -> Iterator[list[str]]:
    """Names of the ClusterRoles and ClusterRoleBindings (one name each) a test makes; deleted afterwards."""
    names: list[str] = []
    yield names
    for name in names:
        cluster.kubectl("delete", "clusterrolebinding,clusterrole", name, "--ignore-not-found", check=False)


def account_token(
    cluster: Sandbox, namespace: str, name: str, rules: list[dict[str, Any]], cluster_roles: list[str]
) -> str:
    """A ServiceAccount granted `rules` cluster-wide (none when empty), and a token for it from the TokenRequest API."""
    apply(cluster, {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": namespace}})
    if rules:
        role = f"{namespace}-{name}"
        cluster_roles.append(role)
        apply(
            cluster,
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": role},
                "rules": rules,
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": role},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
            },
        )
        # RBAC reaches the authorizer through its own watch; a denial read before it would be kept 30 s.
        first = rules[0]
        resource = ".".join(filter(None, [first["resources"][0], first["apiGroups"][0]]))
        wait_allowed(cluster, namespace, name, first["verbs"][0], resource, "-A")
    return cluster.kubectl("create", "token", name, "-n", namespace, "--duration=10m").stdout.strip()


def wait_allowed(cluster: Sandbox, namespace: str, account: str, *can_i: str) -> None:
    """Until the API server's authorizer lets the ServiceAccount do what `kubectl auth can-i` is asked."""
    user = f"--as=system:serviceaccount:{namespace}:{account}"
    wait_for(
        lambda: cluster.kubectl("auth", "can-i", *can_i, user, check=False).stdout.strip() == "yes",
        f"{account} to be allowed to {' '.join(can_i)}",
    )


def read_api(address: str, port: int, path: str, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    """GET a document of the API port at `address`: (status, decoded JSON body)."""
    reply = urllib.request.Request(f"http://{address}:{port}{path}", headers=headers or {})
    try:
        with urllib.request.urlopen(reply, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


def exposed_webhook(cluster: Sandbox, tmp_path: Path, webhooks: list[Webhook]) -> tuple[Webhook, str]:
    """The audited webhook listening on every address, and this machine's non-loopback address to reach it from
    outside the loopback (as another pod would)."""
    address = primary_address()
    if address is None:
        pytest.skip("no non-loopback IPv4 address: every caller would be on the loopback")
    if cluster.authority is None:
        pytest.skip("needs a sandbox this test session started: an attached one has no audit log")
    webhook = start(
        cluster, tmp_path, "--bind-address", "0.0.0.0", kubeconfig=cluster.identity_kubeconfig(AUDITED_USER)
    )
    webhooks.append(webhook)
    return webhook, address


def reviews(cluster: Sandbox, since: int, resource: str) -> int:
    """How many reviews of the kind (tokenreviews, subjectaccessreviews) the webhook asked after `since` events."""
    return sum(1 for e in webhook_calls(cluster, since) if (e.get("objectRef") or {}).get("resource") == resource)


def test_the_api_port_answers_401_without_an_identity_403_without_the_right_and_200_with_it(
    cluster: Sandbox, namespace: str, tmp_path: Path, webhooks: list[Webhook], cluster_roles: list[str]
) -> None:
    webhook, address = exposed_webhook(cluster, tmp_path, webhooks)
    nobody = account_token(cluster, namespace, "nobody", [], cluster_roles)
    reader = account_token(cluster, namespace, "reader", READ_DOCUMENTS, cluster_roles)
    apply(
        cluster,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "placements", "namespace": namespace},
            "rules": [{"apiGroups": [GROUP], "resources": [PLURAL], "verbs": ["list"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "placements", "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "placements"},
            "subjects": [{"kind": "ServiceAccount", "name": "nobody", "namespace": namespace}],
        },
    )
    wait_allowed(cluster, namespace, "nobody", "list", f"{PLURAL}.{GROUP}", "-n", namespace)
    port = webhook.api_port
    info, placements = "/api/v1/cluster-info", "/api/v1/placements"

    def bearer(token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}

    # The seed's `curl -s http://localhost:8083/api/v1/cluster-info` from inside the container: no token needed.
    status, body = read_api("127.0.0.1", port, info)
    assert status == 200 and "nodes" in body
    for path in (info, placements):
        status, body = read_api(address, port, path)
        assert status == 401, (path, body)
        assert body["error"].startswith("no bearer token"), body
        status, body = read_api(address, port, path, bearer("not-a-token"))
        assert (status, body["error"]) == (401, "the API server does not authenticate this bearer token"), body
    nobody_user = f"system:serviceaccount:{namespace}:nobody"
    status, body = read_api(address, port, info, bearer(nobody))
    assert status == 403, body
    assert body["error"] == f"user {nobody_user!r} may not list pods -A"
    status, body = read_api(address, port, placements, bearer(nobody))
    assert status == 403, body
    # A right in one namespace reads that namespace's placements, and nothing wider.
    status, body = read_api(address, port, f"{placements}?namespace={namespace}", bearer(nobody))
    assert status == 200 and body["placements"] == [], body

    since = len(cluster.audit_events())
    for _ in range(3):
        status, body = read_api(address, port, info, bearer(reader))
        assert status == 200 and "nodes" in body, body
        status, body = read_api(address, port, placements, {"X-Hami-Place-Authorization": f"Bearer {reader}"})
        assert status == 200 and "placements" in body, body
    assert reviews(cluster, since, "tokenreviews") == 1, "the reader's identity is asked once, then kept"
    assert reviews(cluster, since, "subjectaccessreviews") == 2, "each right is asked once, then kept"
    log = webhook.log.read_text(errors="replace")
    assert nobody_user in log, "a refusal is logged with the user"
    assert reader not in log and nobody not in log, "no token is ever logged"


def test_status_reads_the_webhook_for_a_user_with_the_rights_and_computes_the_view_for_a_client_certificate(
    cluster: Sandbox, namespace: str, tmp_path: Path, webhooks: list[Webhook], cluster_roles: list[str]
) -> None:
    webhook, address = exposed_webhook(cluster, tmp_path, webhooks)
    route_webhook_service(cluster, namespace, address, webhook.api_port)
    # No right to list nodes: the view can only have come from the webhook.
    reader = account_token(cluster, namespace, "reader", READ_DOCUMENTS + REACH_THE_WEBHOOK, cluster_roles)
    source = f"webhook {namespace}/hami-place:8083 (/api/v1/cluster-info)"

    run = status_json(token_kubeconfig(cluster, tmp_path, reader))
    assert run["fromWebhook"] is True, run["source"]
    assert run["source"] == source
    assert {node["name"] for node in run["nodes"]} >= {"gpu-a100-0", "gpu-h100-0"}

    # The admin's kubeconfig holds a client certificate: no token reaches the webhook, so status computes the view.
    admin = status_json(cluster.kubeconfig)
    assert admin["fromWebhook"] is False
    assert f"webhook {namespace}/hami-place:8083 refused the read: no bearer token" in admin["source"]
    assert "(your credentials have no bearer token to forward)" in admin["source"]
    assert [node["name"] for node in admin["nodes"]] == [node["name"] for node in run["nodes"]]


def run_placement(namespace: str, name: str, run: str, pod: str) -> dict[str, Any]:
    """A placement labelled with a run, moving `pod` off gpu-a100-0, as the controller writes one (unsealed)."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "HamiPodPlacement",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {DEFRAG_RUN_LABEL: run},
            "annotations": {DEFRAG_POD_ANNOTATION: f"{namespace}/{pod}", DEFRAG_FROM_NODE_ANNOTATION: "gpu-a100-0"},
        },
        "spec": {
            "reqID": f"{name}-req",
            "podSelector": {"matchLabels": {"app": pod}},
            "nodeName": "gpu-a100-1",
            "gpuDevices": ["gpu-0"],
        },
    }


def defrag_history(kubeconfig: Path, run: str) -> subprocess.CompletedProcess[str]:
    """`kubectl hami-place defrag history --run RUN -o json` with that kubeconfig."""
    return subprocess.run(
        [str(PLUGIN), "defrag", "history", "--run", run, "-o", "json", "--kubeconfig", str(kubeconfig)],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
        check=False,
    )


def test_defrag_history_through_the_server_lists_only_the_moves_it_sealed(
    cluster: Sandbox, namespace: str, tmp_path: Path, webhooks: list[Webhook], cluster_roles: list[str]
) -> None:
    """The server holds the key the moves' seals check with, the plugin does not: through the server, a placement
    labelled with the run by hand is no move; read from the API server alone, it is listed, and a warning says so."""
    webhook, address = exposed_webhook(cluster, tmp_path, webhooks)
    route_webhook_service(cluster, namespace, address, webhook.api_port)
    reader = account_token(cluster, namespace, "reader", READ_DOCUMENTS + REACH_THE_WEBHOOK, cluster_roles)
    run = f"run-{namespace}"
    sealed = seal_move(run_placement(namespace, "move-x-1", run, "x"), room_key(cluster), datetime.now(UTC))
    apply(cluster, sealed, run_placement(namespace, "forged-y-1", run, "y"))
    proc = defrag_history(token_kubeconfig(cluster, tmp_path, reader), run)
    assert proc.returncode == 0 and "warning" not in proc.stderr, proc.stderr
    through_server = json.loads(proc.stdout)
    assert through_server["sealsChecked"] is True
    assert [(m["placement"], m["pod"]) for m in through_server["moves"]] == [("move-x-1", f"{namespace}/x")]

    # The admin's client certificate forwards no token: the plugin reads the placements itself, checking no seal.
    admin = defrag_history(cluster.kubeconfig, run)
    assert admin.returncode == 0, admin.stderr
    assert json.loads(admin.stdout)["sealsChecked"] is False
    assert sorted(m["placement"] for m in json.loads(admin.stdout)["moves"]) == ["forged-y-1", "move-x-1"]
    said = " ".join(admin.stderr.split())
    assert said.startswith("warning: moves read from the API server ("), said
    assert f"webhook {namespace}/hami-place:8083 refused the read: no bearer token" in said, said
    assert said.endswith("with no seal checked: a placement labelled with a run by hand is listed as a move too"), said


def test_status_says_the_webhook_port_is_open_when_nothing_restricts_who_posts_reviews(
    cluster: Sandbox, namespace: str, tmp_path: Path, webhooks: list[Webhook], cluster_roles: list[str]
) -> None:
    webhook, address = exposed_webhook(cluster, tmp_path, webhooks)  # neither a client CA nor a NetworkPolicy
    route_webhook_service(cluster, namespace, address, webhook.api_port)
    reader = account_token(cluster, namespace, "reader", READ_DOCUMENTS + REACH_THE_WEBHOOK, cluster_roles)
    proc = subprocess.run(
        [str(PLUGIN), "status", "--kubeconfig", str(token_kubeconfig(cluster, tmp_path, reader))],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert f"Source: webhook {namespace}/hami-place:8083" in proc.stdout
    said = " ".join(proc.stderr.split())  # the console may wrap the line
    assert f"warning: the webhook port {webhook.port} takes an AdmissionReview from anyone who can reach it" in said


def status_json(kubeconfig: Path) -> dict[str, Any]:
    """`kubectl hami-place status -o json` with that kubeconfig."""
    proc = subprocess.run(
        [str(PLUGIN), "status", "-o", "json", "--kubeconfig", str(kubeconfig)],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


def token_kubeconfig(cluster: Sandbox, tmp_path: Path, token: str) -> Path:
    """The sandbox's kubeconfig with a bearer token for its user instead of the admin's client certificate."""
    return cluster.token_kubeconfig(token, tmp_path / f"token-{uuid.uuid4().hex[:6]}.kubeconfig")


SLOW_CLIENTS = 2000
# The webhook's default --max-connections: the slow clients are more than it holds.
CONNECTION_CAP = 1024


class SlowClients:
    """`count` TLS clients of the webhook port, each sending a request header a line a second (never finishing it),
    and connecting again a second after the server closes it: an event loop in a thread of its own."""

    def __init__(self, port: int, ca: Path, count: int) -> None:
        self.port, self.count = port, count
        self.context = ssl.create_default_context(cafile=str(ca))
        self.handshakes = 0
        self.closed = 0
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_until_complete, args=(self._run(),), daemon=True)
        self.stopping: asyncio.Event | None = None

    async def _run(self) -> None:
        self.stopping = asyncio.Event()
        clients = [asyncio.create_task(self._client()) for _ in range(self.count)]
        await self.stopping.wait()
        for task in clients:
            task.cancel()
        await asyncio.gather(*clients, return_exceptions=True)

    async def _client(self) -> None:
        while True:
            try:
                _reader, writer = await asyncio.open_connection(
                    "127.0.0.1", self.port, ssl=self.context, server_hostname="127.0.0.1"
                )
            except (OSError, ssl.SSLError):
                await asyncio.sleep(1)
                continue
            self.handshakes += 1
            try:
                writer.write(b"POST /mutate HTTP/1.1\r\n")
                while not writer.is_closing():
                    await writer.drain()
                    await asyncio.sleep(1)
                    writer.write(b"X-Slow: 1\r\n")
                    if writer.transport.is_closing() or _reader.at_eof():
                        break
            except (OSError, ssl.SSLError):
                pass
            finally:
                writer.close()
            self.closed += 1
            await asyncio.sleep(1)

    def __enter__(self) -> SlowClients:
        self.thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        if self.stopping is not None:
            self.loop.call_soon_threadsafe(self.stopping.set)
        self.thread.join(60)


def rss_mib(webhook: Webhook) -> float:
    """The webhook process's resident memory, for the record (not asserted)."""
    status = Path(f"/proc/{webhook.process.pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:"))) / 1024


def test_the_webhook_pins_pods_while_2000_slow_clients_hang_on_within_its_connection_cap(
    cluster: Sandbox, namespace: str, placing: Webhook
) -> None:
    webhook = placing
    cards = [("gpu-a100-0", "gpu-0"), ("gpu-a100-0", "gpu-1"), ("gpu-a100-1", "gpu-0")]
    names = [f"target-{index}" for index in range(len(cards))]
    for name, (node, card) in zip(names, cards, strict=True):
        create_placement(cluster, namespace, name, {"app": "target"}, [card], node=node)
    wait_for(lambda: all(sees_placement(webhook, namespace, name) for name in names), "the webhook to see them")
    core = client.CoreV1Api(cluster.api_client())
    gauge = "hami_place_webhook_connections"
    over_cap = 'hami_place_webhook_connections_refused_total{reason="over-cap"}'

    before = rss_mib(webhook)
    with SlowClients(webhook.port, webhook.certs / "ca.crt", SLOW_CLIENTS) as flood:
        wait_for(lambda: flood.handshakes >= SLOW_CLIENTS, "every slow client to connect once", timeout=120)
        wait_for(lambda: webhook.metric(gauge) >= CONNECTION_CAP - 50, "the webhook to hold about its cap")
        pinned = [core.create_namespaced_pod(namespace, gpu_pod("t-", {"app": "target"})) for _ in names]
        held = webhook.metric(gauge)
        with urllib.request.urlopen(f"http://127.0.0.1:{webhook.probe_port}/livez", timeout=10) as reply:
            assert reply.status == 200, "the HTTPS listener still completes a handshake and answers"
        # The clients look once a second; those the server closed to make room see it.
        wait_for(lambda: flood.closed >= SLOW_CLIENTS - CONNECTION_CAP, "the excess clients to be closed")
        # Some are closed by the header deadline instead (a loaded box connects them over more than its 10 s); those
        # connect again, so the cap's own count reaches the excess too.
        wait_for(
            lambda: webhook.metric(over_cap) >= SLOW_CLIENTS - CONNECTION_CAP,
            "the cap to close as many as the excess",
            timeout=120,
        )
        refused = webhook.metric(over_cap)
        print(
            f"slow clients: {flood.handshakes} handshakes, {flood.closed} closed; held {held}, over-cap {refused}; "
            f"webhook RSS {before:.0f} MiB before, {rss_mib(webhook):.0f} MiB during"
        )
    assert sorted((pod.metadata.annotations or {}).get(PLACEMENT) for pod in pinned) == names, "pods still pinned"
    assert held <= CONNECTION_CAP, "the webhook holds no more than its cap"
    assert refused >= SLOW_CLIENTS - CONNECTION_CAP, "the excess was closed to make room"
