"""HAMi's NVIDIA settings as a cluster configures them: resource names, request defaults, default GPU policy.

HAMi's scheduler reads them from the `hami-scheduler-device` ConfigMap's `device-config.yaml` (its `nvidia:`
section, `NvidiaConfig` in `pkg/device/nvidia/device.go`, decoded by gopkg.in/yaml.v2) and the GPU policy from its
`--gpu-scheduler-policy` flag. `HamiConfig()` holds what HAMi's chart renders by default. Parsing follows HAMi:
unknown keys are ignored and a key the section leaves out takes Go's zero value (an empty name, 0), not the chart's
default.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import yaml

from kubectl_hami_place.core.errors import ModelError, clip
from kubectl_hami_place.core.fields import go_text
from kubectl_hami_place.core.yaml_doc import load_yaml

DEVICE_CONFIG_KEY = "device-config.yaml"
DEVICE_CONFIGMAP = "hami-scheduler-device"
# HAMi's chart labels its scheduler Deployment so (charts/hami/templates/scheduler/deployment.yaml).
SCHEDULER_COMPONENT_LABEL = "app.kubernetes.io/component=hami-scheduler"
GPU_POLICY_FLAG = "--gpu-scheduler-policy"
# HAMi's scheduler binary is `scheduler` (cmd/scheduler); without the flag it applies this (cmd/scheduler/main.go).
SCHEDULER_COMMAND = "scheduler"

_INT32_MIN = -(2**31)
_INT32_MAX = 2**31 - 1


class HamiConfigError(ModelError):
    """HAMi's device config (`device-config.yaml`) is not YAML or holds a value of the wrong kind."""


@dataclass(frozen=True)
class HamiConfig:
    """The NVIDIA settings HAMi's scheduler and webhook apply to every pod (defaults: HAMi's chart)."""

    resource_count_name: str = "nvidia.com/gpu"
    resource_memory_name: str = "nvidia.com/gpumem"
    resource_memory_percentage_name: str = "nvidia.com/gpumem-percentage"
    resource_core_name: str = "nvidia.com/gpucores"
    resource_priority_name: str = "nvidia.com/priority"
    default_memory: int = 0
    default_cores: int = 0
    default_gpu_num: int = 1
    memory_factor: int = 1
    gpu_scheduler_policy: str = "spread"

    @property
    def resource_names(self) -> frozenset[str]:
        """HAMi's own resources, which its chart has kube-scheduler ignore (its extender's ignoredByScheduler)."""
        return frozenset(
            {
                self.resource_count_name,
                self.resource_memory_name,
                self.resource_memory_percentage_name,
                self.resource_core_name,
                self.resource_priority_name,
            }
        )

    def with_policy(self, gpu_scheduler_policy: str) -> HamiConfig:
        """The same settings with another default GPU policy (HAMi's `--gpu-scheduler-policy`)."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values["gpu_scheduler_policy"] = gpu_scheduler_policy
        return HamiConfig(**values)


HAMI_DEFAULTS = HamiConfig()

# device-config.yaml key -> (HamiConfig field, kind)
_KEYS: dict[str, tuple[str, type]] = {
    "resourceCountName": ("resource_count_name", str),
    "resourceMemoryName": ("resource_memory_name", str),
    "resourceMemoryPercentageName": ("resource_memory_percentage_name", str),
    "resourceCoreName": ("resource_core_name", str),
    "resourcePriorityName": ("resource_priority_name", str),
    "defaultMemory": ("default_memory", int),
    "defaultCores": ("default_cores", int),
    "defaultGPUNum": ("default_gpu_num", int),
    "memoryFactor": ("memory_factor", int),
}


class _GoYaml(yaml.SafeLoader):
    """YAML as HAMi's Go reader takes its config: a date-like scalar stays text (PyYAML would make it a date, and
    refuse one that is no date)."""


_GoYaml.yaml_implicit_resolvers = {
    first: [(tag, pattern) for tag, pattern in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


class _GoText(yaml.SafeLoader):
    """The same YAML with every plain scalar kept as its text: yaml.v2 sets a string field to the scalar as written
    (`yes`, `1.50`, `0x1F`), where PyYAML's types would give `True`, `1.5`, `31`."""


_GoText.yaml_implicit_resolvers = {
    first: [(tag, pattern) for tag, pattern in resolvers if tag == "tag:yaml.org,2002:merge"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def parse_device_config(text: object, gpu_scheduler_policy: str = HAMI_DEFAULTS.gpu_scheduler_policy) -> HamiConfig:
    """The NVIDIA settings of a `device-config.yaml` text; HamiConfigError when HAMi could not use it either."""
    if not isinstance(text, str):
        raise HamiConfigError(f"{DEVICE_CONFIG_KEY} must be text, got {type(text).__name__}")
    try:
        document = load_yaml(text, _GoYaml)  # a SafeLoader without dates
        written = load_yaml(text, _GoText)
    except yaml.YAMLError as err:
        where = getattr(err, "problem_mark", None)
        line = f" at line {where.line + 1}" if where is not None else ""
        raise HamiConfigError(f"{DEVICE_CONFIG_KEY} is not valid YAML{line}: fix the ConfigMap's text") from None
    except (ValueError, RecursionError):
        raise HamiConfigError(
            f"{DEVICE_CONFIG_KEY} holds a number of more digits, or nesting deeper, than can be read: fix the ConfigMap"
        ) from None
    if not isinstance(document, Mapping):
        raise HamiConfigError(f"{DEVICE_CONFIG_KEY} must be a mapping with an nvidia: section")
    section = document.get("nvidia")
    if section is None:
        raise HamiConfigError(f"{DEVICE_CONFIG_KEY} has no nvidia: section, so HAMi schedules no NVIDIA cards")
    if not isinstance(section, Mapping):
        raise HamiConfigError(f"{DEVICE_CONFIG_KEY}: nvidia: must be a mapping of settings")
    values: dict[str, Any] = {name: ("" if kind is str else 0) for name, kind in _KEYS.values()}
    texts = written["nvidia"]
    for key, (name, kind) in _KEYS.items():
        if key in section and section[key] is not None:
            values[name] = _value(section[key], texts[key], key, kind)
    return HamiConfig(**values, gpu_scheduler_policy=gpu_scheduler_policy)


def _value(value: object, text: object, key: str, kind: type) -> object:
    """One setting as yaml.v2 decodes it into NvidiaConfig: a string field takes a scalar as written (`text`), an
    int32 only integers."""
    if kind is str:
        if isinstance(value, Mapping | list):
            raise HamiConfigError(f"{DEVICE_CONFIG_KEY}: nvidia.{key} must be a name, got a {type(value).__name__}")
        return go_text(str(text))
    if isinstance(value, bool) or not isinstance(value, int):
        raise HamiConfigError(f"{DEVICE_CONFIG_KEY}: nvidia.{key} must be an integer, got {value!r}")
    if not _INT32_MIN <= value <= _INT32_MAX:
        raise HamiConfigError(f"{DEVICE_CONFIG_KEY}: nvidia.{key} {value} is out of range")
    return value


def gpu_policy_of_scheduler(deployment: Mapping[str, Any]) -> str | None:
    """The `--gpu-scheduler-policy` HAMi's scheduler Deployment runs with, as pflag reads its argv (the last one
    given wins, `--flag=value` or `--flag value`); HAMi's own default when the extender runs without it; None when
    no container of the Deployment is HAMi's scheduler, so that nothing is guessed from another program's flags."""
    template = (deployment.get("spec") or {}).get("template") or {}
    containers = (template.get("spec") or {}).get("containers") or []
    for container in containers if isinstance(containers, list) else []:
        if not isinstance(container, Mapping):
            continue
        argv = [str(word) for word in [*(container.get("command") or []), *(container.get("args") or [])]]
        given = _last_flag(argv, GPU_POLICY_FLAG)
        if given is not None:
            return given
        if argv and argv[0].rsplit("/", 1)[-1] == SCHEDULER_COMMAND:
            return HAMI_DEFAULTS.gpu_scheduler_policy
    return None


@dataclass(frozen=True)
class SeveralFound:
    """HAMi's device config or scheduler, looked for by name or label in every namespace, found in several: any of
    them may be a tenant's (who may create a ConfigMap or a Deployment in a namespace of theirs), so none is taken."""

    what: str
    namespaces: tuple[str, ...]
    flag: str

    def notice(self) -> str:
        """One line: what was found where, and the flag that names the one HAMi reads."""
        return (
            f"{self.what} found in {len(self.namespaces)} namespaces ({clip(', '.join(self.namespaces))}), any of them "
            f"may be a tenant's; none is taken (give HAMi's with {self.flag})"
        )


def device_config_of(configmaps: Sequence[Mapping[str, Any]]) -> tuple[str, object] | SeveralFound | None:
    """(namespace/name, its device-config.yaml) of the one `hami-scheduler-device` ConfigMap holding one, listed in
    every namespace; `SeveralFound` when more than one does; None when none."""
    found = [
        (str((item.get("metadata") or {}).get("namespace", "")), (item.get("data") or {}).get(DEVICE_CONFIG_KEY))
        for item in configmaps
    ]
    found = [(namespace, text) for namespace, text in found if text is not None]
    if len(found) > 1:
        namespaces = tuple(sorted(namespace for namespace, _ in found))
        return SeveralFound(f"ConfigMaps {DEVICE_CONFIGMAP}", namespaces, "--hami-config NS/NAME")
    return (f"{found[0][0]}/{DEVICE_CONFIGMAP}", found[0][1]) if found else None


def gpu_policy_of_installation(deployments: Sequence[Mapping[str, Any]], config: str) -> str | SeveralFound | None:
    """The default GPU policy of the HAMi whose device config is `config` (`namespace/name`, "" when unknown), of
    every scheduler Deployment found by label: HAMi's chart names its ConfigMap `<scheduler>-device` beside the
    Deployment `<scheduler>`, so that one comes first, then one of the same namespace, then the only other one;
    `SeveralFound` when none is beside the config and they are in several namespaces; None when none is HAMi's
    scheduler."""
    namespace, _, name = config.rpartition("/")
    pair = (namespace, name.removesuffix("-device"))

    def where(deployment: Mapping[str, Any]) -> tuple[str, str]:
        metadata = deployment.get("metadata") or {}
        return str(metadata.get("namespace", "")), str(metadata.get("name", ""))

    def rank(deployment: Mapping[str, Any]) -> tuple[bool, bool, str, str]:
        """Sort key: the config's own scheduler, then its namespace's, then by namespace and name."""
        at = where(deployment)
        return (at != pair, at[0] != namespace, *at)

    ranked = ((d, gpu_policy_of_scheduler(d)) for d in sorted(deployments, key=rank))
    schedulers = [(d, policy) for d, policy in ranked if policy is not None]
    if not schedulers:
        return None
    first, policy = schedulers[0]
    namespaces = tuple(sorted({where(d)[0] for d, _ in schedulers}))
    if where(first)[0] != namespace and len(namespaces) > 1:
        return SeveralFound(
            f"HAMi scheduler Deployments labelled {SCHEDULER_COMPONENT_LABEL}", namespaces, "--hami-scheduler NS/NAME"
        )
    return policy


def _last_flag(argv: list[str], flag: str) -> str | None:
    """The value of the last `flag` in argv; pflag stops reading flags at a bare `--`."""
    found = None
    words = iter(argv)
    for word in words:
        if word == "--":
            break
        if word.startswith(flag + "="):
            found = word[len(flag) + 1 :]
        elif word == flag:
            found = next(words, found)
    return found
