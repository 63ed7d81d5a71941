"""HAMi's NVIDIA settings from the hami-scheduler-device ConfigMap's device-config.yaml, read as HAMi reads them."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kubectl_hami_place.core.hami_config import (
    HAMI_DEFAULTS,
    HamiConfig,
    HamiConfigError,
    gpu_policy_of_installation,
    gpu_policy_of_scheduler,
    parse_device_config,
)

CHART = """\
nvidia:
  resourceCountName: nvidia.com/gpu
  resourceMemoryName: nvidia.com/gpumem
  resourceMemoryPercentageName: nvidia.com/gpumem-percentage
  resourceCoreName: nvidia.com/gpucores
  resourcePriorityName: nvidia.com/priority
  overwriteEnv: false
  defaultMemory: 0
  defaultCores: 0
  defaultGPUNum: 1
  memoryFactor: 1
  deviceSplitCount: 10
  migProfileAllowlist:
  - models: [ "A30" ]
    profiles: [ "1g.6gb" ]
cambricon:
  resourceCountName: cambricon.com/vmlu
"""


def test_the_charts_default_text_gives_the_defaults() -> None:
    assert parse_device_config(CHART) == HAMI_DEFAULTS
    assert HAMI_DEFAULTS.gpu_scheduler_policy == "spread"


def test_renamed_resources_and_defaults_are_read_and_the_policy_is_given_apart() -> None:
    text = CHART.replace("nvidia.com/gpumem\n", "example.com/vmem\n").replace("defaultMemory: 0", "defaultMemory: 512")
    config = parse_device_config(text, gpu_scheduler_policy="binpack")
    assert config.resource_memory_name == "example.com/vmem"
    assert config.default_memory == 512
    assert config.gpu_scheduler_policy == "binpack"
    assert config.with_policy("spread") == HamiConfig(resource_memory_name="example.com/vmem", default_memory=512)


def test_a_key_left_out_takes_gos_zero_value_as_in_hamis_yaml_decoding() -> None:
    config = parse_device_config("nvidia:\n  resourceCountName: nvidia.com/gpu\n")
    assert config.resource_count_name == "nvidia.com/gpu"
    assert (config.resource_memory_name, config.default_gpu_num) == ("", 0)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("nvidia: [", "not valid YAML at line"),
        ("- 1\n", "must be a mapping"),
        ("cambricon: {}\n", "no nvidia: section"),
        ("nvidia: 3\n", "nvidia: must be a mapping"),
        ("nvidia:\n  defaultMemory: lots\n", "nvidia.defaultMemory must be an integer"),
        ("nvidia:\n  defaultCores: 4294967296\n", "out of range"),
        ("nvidia:\n  resourceCountName: [a]\n", "must be a name"),
    ],
)
def test_bad_text_raises_a_one_line_config_error(text: str, fragment: str) -> None:
    with pytest.raises(HamiConfigError) as caught:
        parse_device_config(text)
    assert fragment in str(caught.value)
    assert "\n" not in str(caught.value)


@given(st.text(max_size=200))
def test_any_text_gives_a_config_or_a_config_error(text: str) -> None:
    with contextlib.suppress(HamiConfigError):
        assert isinstance(parse_device_config(text), HamiConfig)


def scheduler(namespace: str, name: str, *argv: str, args: tuple[str, ...] = ()) -> dict:
    """A Deployment as HAMi's chart renders its scheduler: a kube-scheduler container, then the extender's."""
    containers = [
        {"name": "kube-scheduler", "command": ["kube-scheduler", "--config=/config/config.yaml"]},
        {"name": "vgpu-scheduler-extender", "command": list(argv), "args": list(args)},
    ]
    return {
        "metadata": {"namespace": namespace, "name": name},
        "spec": {"template": {"spec": {"containers": containers}}},
    }


@pytest.mark.parametrize(
    ("argv", "args", "policy"),
    [
        (("scheduler", "--gpu-scheduler-policy=binpack"), (), "binpack"),
        (("scheduler",), ("--gpu-scheduler-policy", "mutex"), "mutex"),
        (("/usr/bin/scheduler", "--gpu-scheduler-policy=binpack", "--gpu-scheduler-policy=spread"), (), "spread"),
        (("scheduler", "--leader-elect=false"), (), "spread"),
        (("scheduler", "--", "--gpu-scheduler-policy=binpack"), (), "spread"),
        (("sleep", "3600"), (), None),
    ],
    ids=["equals", "in-args", "last-wins", "flag-absent-hami-default", "after-double-dash", "not-hami"],
)
def test_the_gpu_policy_is_read_from_the_extenders_argv_as_pflag_reads_it(
    argv: tuple[str, ...], args: tuple[str, ...], policy: str | None
) -> None:
    assert gpu_policy_of_scheduler(scheduler("kube-system", "hami-scheduler", *argv, args=args)) == policy


def test_the_scheduler_of_the_device_config_wins_over_others() -> None:
    deployments = [
        scheduler("a-first", "hami-scheduler", "scheduler", "--gpu-scheduler-policy=spread"),
        scheduler("hami", "a-other", "scheduler", "--gpu-scheduler-policy=binpack"),
        scheduler("hami", "hami-renamed", "scheduler", "--gpu-scheduler-policy=mutex"),
    ]
    assert gpu_policy_of_installation(deployments, "hami/hami-renamed-device") == "mutex"
    assert gpu_policy_of_installation(deployments[:2], "hami/elsewhere-device") == "binpack", "then its namespace"
    assert gpu_policy_of_installation(deployments, "") == "spread", "then by namespace"
    assert gpu_policy_of_installation([scheduler("x", "y", "sleep")], "x/y-device") is None


def test_a_date_like_value_is_text_as_hamis_go_reader_takes_it() -> None:
    """PyYAML makes `2024-02-30` a date and refuses it; yaml.v2 keeps it a string, and HAMi runs on the config."""
    config = parse_device_config("nvidia:\n  resourceCountName: nvidia.com/gpu\nreleased: 2024-02-30\n")
    assert config.resource_count_name == "nvidia.com/gpu"


@pytest.mark.parametrize(
    "text",
    [
        "nvidia:\n  defaultMemory: " + "1" * 5000 + "\n",  # past int() of Python's 4,300 digits
        "nvidia:\n  defaultMemory: 0\nother: " + "[" * 5000 + "]" * 5000 + "\n",  # past the reader's recursion
    ],
)
def test_a_config_python_cannot_read_is_a_hami_config_error(text: str) -> None:
    with pytest.raises(HamiConfigError, match="than can be read"):
        parse_device_config(text)


def test_a_lone_surrogate_escape_in_a_name_is_read_as_go_reads_it() -> None:
    """Python keeps the surrogate, which no UTF-8 encoder of an admission's answer takes; Go reads U+FFFD."""
    config = parse_device_config('nvidia:\n  resourceCountName: "nvidia.com/\\ud800"\n')
    assert config.resource_count_name == "nvidia.com/\ufffd"
    config.resource_count_name.encode()
