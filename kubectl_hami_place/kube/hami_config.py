"""Reads HAMi's device config (the `hami-scheduler-device` ConfigMap, and its scheduler Deployment's
`--gpu-scheduler-policy`) as the cluster configures it.

Resource names, request defaults and the default GPU policy are settings of each HAMi installation; `pin` and the
webhook must count a pod as that installation does. When the ConfigMap cannot be read or used, HAMi's chart defaults
apply, with a notice saying why, so that a cluster with the defaults works even where the reader may not see
kube-system's ConfigMaps.
"""

from __future__ import annotations

from dataclasses import dataclass

from kubectl_hami_place.core.hami_config import (
    DEVICE_CONFIG_KEY,
    DEVICE_CONFIGMAP,
    HAMI_DEFAULTS,
    SCHEDULER_COMPONENT_LABEL,
    HamiConfig,
    HamiConfigError,
    SeveralFound,
    device_config_of,
    gpu_policy_of_installation,
    parse_device_config,
)
from kubectl_hami_place.kube.client import Kube, by_path, path_segment, request
from kubectl_hami_place.kube.errors import KubeError, KubeNotFound, KubeUnauthorized, KubeUnreachable


@dataclass(frozen=True)
class HamiConfigInForce:
    """The config in force, where it came from (`namespace/name`, empty for the defaults), and why, if defaulted."""

    config: HamiConfig
    source: str
    notice: str = ""
    unreadable: bool = False
    """The API server could not be asked (unreachable, forbidden): the defaults stand in for a config not seen."""
    unanswered: KubeError | None = None
    """Why, when the API server did not answer or took no credentials: a command's next call would fail the same."""


def read_hami_config(
    kube: Kube, where: str = "", gpu_scheduler_policy: str = "", scheduler: str = ""
) -> HamiConfigInForce:
    """The ConfigMap `where` (`namespace/name`), else the one named `hami-scheduler-device` in any namespace; the
    default GPU policy given, else read from HAMi's scheduler Deployment (`scheduler`, else found by its label)."""
    try:
        found = _configmap(kube, where)
    except KubeError as error:
        notice = f"cannot read HAMi's device config ({error.cause}); using HAMi's defaults"
        if isinstance(error, KubeUnreachable | KubeUnauthorized):
            # The Deployment's read would fail so too, after another timeout.
            policy = gpu_scheduler_policy or HAMI_DEFAULTS.gpu_scheduler_policy
            return HamiConfigInForce(HAMI_DEFAULTS.with_policy(policy), "", notice, unreadable=True, unanswered=error)
        policy, policy_notice = _policy(kube, gpu_scheduler_policy, scheduler, where)
        return HamiConfigInForce(
            HAMI_DEFAULTS.with_policy(policy),
            "",
            _join(notice, policy_notice),
            unreadable=not isinstance(error, KubeNotFound),
        )
    if isinstance(found, SeveralFound):
        policy, policy_notice = _policy(kube, gpu_scheduler_policy, scheduler, "")
        notice = f"{found.notice()}; using HAMi's defaults"
        return HamiConfigInForce(HAMI_DEFAULTS.with_policy(policy), "", _join(notice, policy_notice))
    policy, policy_notice = _policy(kube, gpu_scheduler_policy, scheduler, found[0] if found else "")
    defaults = HAMI_DEFAULTS.with_policy(policy)
    if found is None:
        notice = f"no ConfigMap {DEVICE_CONFIGMAP} found; using HAMi's defaults (give it with --hami-config NS/NAME)"
        return HamiConfigInForce(defaults, "", _join(notice, policy_notice))
    source, text = found
    try:
        return HamiConfigInForce(parse_device_config(text, policy), source, policy_notice)
    except HamiConfigError as error:
        return HamiConfigInForce(defaults, "", _join(f"{source}: {error}; using HAMi's defaults", policy_notice))


def _join(*notices: str) -> str:
    """One notice line of several, the empty ones left out."""
    return "; ".join(notice for notice in notices if notice)


def _policy(kube: Kube, given: str, scheduler: str, config: str) -> tuple[str, str]:
    """HAMi's default GPU policy: given, else that of the scheduler Deployment of the device config `config`; a
    notice when HAMi's default stands in."""
    if given:
        return given, ""
    assumed = HAMI_DEFAULTS.gpu_scheduler_policy
    unknown = f"assuming HAMi's default GPU policy {assumed!r} (give --gpu-scheduler-policy)"
    try:
        deployments = _scheduler_deployments(kube, scheduler)
    except KubeError as error:
        return assumed, f"cannot read HAMi's scheduler Deployment ({error.cause}); {unknown}"
    policy = gpu_policy_of_installation(deployments, config)
    if isinstance(policy, SeveralFound):
        return assumed, f"{policy.notice()}; {unknown}"
    if policy is not None:
        return policy, ""
    where = scheduler or f"labelled {SCHEDULER_COMPONENT_LABEL}"
    return assumed, f"no HAMi scheduler Deployment {where} found; {unknown}"


def _scheduler_deployments(kube: Kube, scheduler: str) -> list[dict]:
    """The Deployment `scheduler` (`namespace/name`), else every Deployment labelled as HAMi's scheduler."""
    if scheduler:
        namespace, _, name = scheduler.rpartition("/")
        namespace = namespace or kube.namespace
        path = f"/apis/apps/v1/namespaces/{path_segment(namespace)}/deployments/{path_segment(name)}"
        try:
            return [request(kube, by_path(kube.api, "GET", path), what=f"get deployment {name} in {namespace}")]
        except KubeNotFound:
            return []
    listed = request(
        kube,
        by_path(kube.api, "GET", "/apis/apps/v1/deployments"),
        label_selector=SCHEDULER_COMPONENT_LABEL,
        what=f"list deployments labelled {SCHEDULER_COMPONENT_LABEL} in all namespaces",
    )
    return list(listed.get("items") or [])


def _configmap(kube: Kube, where: str) -> tuple[str, object] | SeveralFound | None:
    """(namespace/name, its device-config.yaml) of the ConfigMap `where`, else of the one of its name in any
    namespace (`SeveralFound` when several are); None when there is none."""
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
    return device_config_of(list(listed.get("items") or []))
