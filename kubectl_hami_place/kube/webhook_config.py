"""The Kubernetes side of the webhook's certificates: the TLS Secret and the MutatingWebhookConfiguration's caBundle."""

from __future__ import annotations

import base64
import copy
from typing import Any

import jsonpatch
from kubernetes.client import AdmissionregistrationV1Api

from kubectl_hami_place.core.names import NAME_LABEL, WEBHOOK_APP
from kubectl_hami_place.kube.client import Kube, request
from kubectl_hami_place.kube.errors import KubeNotFound

TLS_SECRET_KEYS = ("tls.crt", "tls.key", "ca.crt")


def read_tls_secret(kube: Kube, namespace: str, name: str) -> dict[str, bytes] | None:
    """The Secret's tls.crt, tls.key and ca.crt as bytes; None when the Secret or one of the keys is missing."""
    try:
        secret = request(
            kube, kube.core().read_namespaced_secret, name, namespace, what=f"get secrets in namespace {namespace}"
        )
    except KubeNotFound:
        return None
    data = secret.get("data") or {}
    if not all(data.get(key) for key in TLS_SECRET_KEYS):
        return None
    return {key: base64.b64decode(data[key]) for key in TLS_SECRET_KEYS}


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
