"""The server's connection inside a pod (`kube.client`'s in-cluster path): its service account's token and CA as the
kubelet mounts them, and its namespace, on the sandbox's API server. The client library reads the mount from fixed
paths, so they are pointed at files written here; everything else is what a pod has."""

from __future__ import annotations

import shutil
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from kubernetes.config import incluster_config

from kubectl_hami_place.kube import client as kube_client
from kubectl_hami_place.kube.client import connect, request
from kubectl_hami_place.kube.errors import KubeConfigError, KubeForbidden
from sandbox.cluster import Sandbox

pytestmark = pytest.mark.cluster


def test_a_pod_connects_as_its_service_account_in_its_namespace(
    cluster: Sandbox, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No kubeconfig and KUBERNETES_SERVICE_HOST set: the connection is the mounted token's, verified with the mounted
    CA, and its default namespace the mounted one's (`default` when the file is missing); a mount without a token is
    one line saying the in-cluster config cannot be used."""
    account = "in-cluster"
    cluster.kubectl("create", "serviceaccount", account, "-n", namespace)
    mount = tmp_path / "serviceaccount"
    mount.mkdir()
    (mount / "token").write_text(cluster.kubectl("create", "token", account, "-n", namespace).stdout.strip())
    assert cluster.authority is not None
    shutil.copyfile(cluster.authority.cert_path, mount / "ca.crt")
    (mount / "namespace").write_text(f"{namespace}\n")
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(mount / "token"))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(mount / "ca.crt"))
    monkeypatch.setattr(kube_client, "SERVICE_ACCOUNT_NAMESPACE", mount / "namespace")
    server = urlsplit(cluster.server)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", str(server.hostname))
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", str(server.port))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config

    kube = connect()
    assert (kube.namespace, kube.server, kube.context) == (namespace, f"https://{server.netloc}", None)
    with pytest.raises(KubeForbidden) as refused:
        request(kube, kube.core().list_namespaced_pod, namespace, what=f"list pods in namespace {namespace}")
    user = f"system:serviceaccount:{namespace}:{account}"
    assert f'User "{user}" cannot list resource "pods" in API group "" in the namespace' in str(refused.value)

    (mount / "namespace").unlink()
    assert connect().namespace == "default"
    (mount / "token").unlink()
    with pytest.raises(KubeConfigError) as unusable:
        connect()
    assert str(unusable.value) == "cannot use the in-cluster config: Service token file does not exist."
