"""Reads HAMi's device config (the `hami-scheduler-device` ConfigMap) as the cluster configures it.

Resource names and request defaults are settings of each HAMi installation; `pin` and the webhook must count a pod
as that installation does. When the ConfigMap cannot be read or used, HAMi's chart defaults apply, with a notice
saying why, so that a cluster with the defaults works even where the reader may not see kube-system's ConfigMaps.
"""

from __future__ import annotations

from dataclasses import dataclass

from kubectl_hami_place.core.hami_config import (
    DEVICE_CONFIG_KEY,
    DEVICE_CONFIGMAP,
    HAMI_DEFAULTS,
    HamiConfig,
    HamiConfigError,
    parse_device_config,
)
from kubectl_hami_place.kube.client import Kube, by_path, path_segment, request
from kubectl_hami_place.kube.errors import KubeError, KubeNotFound


@dataclass(frozen=True)
class HamiConfigInForce:
    """The config in force, where it came from (`namespace/name`, empty for the defaults), and why, if defaulted."""

    config: HamiConfig
    source: str
    notice: str = ""
    unreadable: bool = False
    """The API server could not be asked (unreachable, forbidden): the defaults stand in for a config not seen."""


def read_hami_config(kube: Kube, where: str = "", gpu_scheduler_policy: str = "") -> HamiConfigInForce:
    """The ConfigMap `where` (`namespace/name`), else the one named `hami-scheduler-device` in any namespace."""
    policy = gpu_scheduler_policy or HAMI_DEFAULTS.gpu_scheduler_policy
    defaults = HAMI_DEFAULTS.with_policy(policy)
    try:
        found = _configmap(kube, where)
    except KubeError as error:
        notice = f"cannot read HAMi's device config ({error.cause}); using HAMi's defaults"
        return HamiConfigInForce(defaults, "", notice, unreadable=not isinstance(error, KubeNotFound))
    if found is None:
        notice = f"no ConfigMap {DEVICE_CONFIGMAP} found; using HAMi's defaults (give it with --hami-config NS/NAME)"
        return HamiConfigInForce(defaults, "", notice)
    source, text = found
    try:
        return HamiConfigInForce(parse_device_config(text, policy), source)
    except HamiConfigError as error:
        return HamiConfigInForce(defaults, "", f"{source}: {error}; using HAMi's defaults")


def _configmap(kube: Kube, where: str) -> tuple[str, object] | None:
    """(namespace/name, its device-config.yaml) of the ConfigMap, None when there is none."""
    if where:
        namespace, _, name = where.rpartition("/")
        namespace = namespace or kube.namespace
        path = f"/api/v1/namespaces/{path_segment(namespace)}/configmaps/{path_segment(name)}"
        body = request(kube, by_path(kube.api, "GET", path), what=f"get configmap {name} in namespace {namespace}")
        return f"{namespace}/{name}", (body.get("data") or {}).get(DEVICE_CONFIG_KEY)
    listed = request(
        kube,
        by_path(kube.api, "GET", "/api/v1/configmaps"),
        field_selector=f"metadata.name={DEVICE_CONFIGMAP}",
        what=f"list configmaps named {DEVICE_CONFIGMAP} in all namespaces",
    )
    items = sorted(listed.get("items") or [], key=lambda item: item["metadata"]["namespace"])
    for item in items:
        text = (item.get("data") or {}).get(DEVICE_CONFIG_KEY)
        if text is not None:
            return f"{item['metadata']['namespace']}/{DEVICE_CONFIGMAP}", text
    return None
