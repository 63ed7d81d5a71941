"""The Kubernetes side of the webhook's certificates: the TLS Secret and the MutatingWebhookConfiguration's caBundle."""

from __future__ import annotations

import base64
import copy
from dataclasses import dataclass
from typing import Any

import jsonpatch
from kubernetes.client import AdmissionregistrationV1Api

from kubectl_hami_place.core.names import NAME_LABEL, WEBHOOK_APP
from kubectl_hami_place.kube.client import Kube, request
from kubectl_hami_place.kube.errors import KubeNotFound

TLS_SECRET_KEYS = ("tls.crt", "tls.key", "ca.crt")


@dataclass(frozen=True)
class StoredSecret:
    """A Secret's data (decoded), annotations and resourceVersion, as read."""

    data: dict[str, bytes]
    annotations: dict[str, str]
    resource_version: str


@dataclass(frozen=True)
class CaBundles:
    """A MutatingWebhookConfiguration's resourceVersion and the caBundle of each of its webhooks (b"" when unset)."""

    resource_version: str
    bundles: tuple[bytes, ...]


def read_secret(kube: Kube, namespace: str, name: str) -> StoredSecret | None:
    """The Secret as read from the API server (a quorum read); None when it does not exist."""
    try:
        what = f"get secrets {name} in namespace {namespace}"
        secret = request(kube, kube.core().read_namespaced_secret, name, namespace, what=what)
    except KubeNotFound:
        return None
    metadata = secret.get("metadata") or {}
    return StoredSecret(
        data={key: base64.b64decode(value) for key, value in (secret.get("data") or {}).items()},
        annotations=dict(metadata.get("annotations") or {}),
        resource_version=str(metadata.get("resourceVersion", "")),
    )


def replace_secret(
    kube: Kube, namespace: str, name: str, read: StoredSecret, data: dict[str, bytes], *, annotations: dict[str, str]
) -> None:
    """Replace the Secret's data and annotations, on condition that it is still the version read (KubeConflict
    otherwise: another replica wrote first)."""
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/name": "gpu-descheduler-webhook"},
            "annotations": annotations,
            "resourceVersion": read.resource_version,
        },
        "data": {key: base64.b64encode(value).decode() for key, value in data.items()},
    }
    what = f"update secrets {name} in namespace {namespace}"
    request(kube, kube.core().replace_namespaced_secret, name, namespace, body, what=what)


def read_ca_bundles(kube: Kube, name: str) -> CaBundles | None:
    """The configuration's version and caBundles; None when it does not exist."""
    api = AdmissionregistrationV1Api(kube.api)
    try:
        current = request(
            kube, api.read_mutating_webhook_configuration, name, what=f"get mutatingwebhookconfigurations {name}"
        )
    except KubeNotFound:
        return None
    hooks = current.get("webhooks") or []
    bundles = tuple(base64.b64decode((hook.get("clientConfig") or {}).get("caBundle") or "") for hook in hooks)
    return CaBundles(str((current.get("metadata") or {}).get("resourceVersion", "")), bundles)


def store_tls_secret(kube: Kube, namespace: str, name: str, files: dict[str, bytes]) -> None:
    """Create the `kubernetes.io/tls` Secret with tls.crt, tls.key and ca.crt, or replace its data."""
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {NAME_LABEL: WEBHOOK_APP},
        },
        "data": {key: base64.b64encode(files[key]).decode() for key in TLS_SECRET_KEYS},
    }
    what = f"create or update secrets in namespace {namespace}"
    try:
        current = request(kube, kube.core().read_namespaced_secret, name, namespace, what=what)
    except KubeNotFound:
        request(kube, kube.core().create_namespaced_secret, namespace, body, what=what)
        return
    body["metadata"]["resourceVersion"] = (current.get("metadata") or {}).get("resourceVersion", "")
    request(kube, kube.core().replace_namespaced_secret, name, namespace, body, what=what)


def patch_ca_bundle(kube: Kube, name: str, ca_pem: bytes) -> int | None:
    """Put the CA into every webhook of that MutatingWebhookConfiguration; returns how many, None if it is absent."""
    api = AdmissionregistrationV1Api(kube.api)
    what = f"get and patch mutatingwebhookconfigurations {name}"
    try:
        current = request(kube, api.read_mutating_webhook_configuration, name, what=what)
    except KubeNotFound:
        return None
    wanted = copy.deepcopy(current)
    bundle = base64.b64encode(ca_pem).decode()
    for hook in wanted.get("webhooks") or []:
        hook.setdefault("clientConfig", {})["caBundle"] = bundle
    patch = jsonpatch.JsonPatch.from_diff(current, wanted).patch
    if patch:
        request(
            kube,
            api.patch_mutating_webhook_configuration,
            name,
            patch,
            what=what,
            _content_type="application/json-patch+json",
        )
    return len(wanted.get("webhooks") or [])
