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
    SeveralFound,
    device_config_of,
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
    assert gpu_policy_of_installation(deployments[:1], "hami/hami-scheduler-device") == "spread", "then the only one"
    assert gpu_policy_of_installation(deployments[1:], "") == "binpack", "then the first of the one namespace"
    assert gpu_policy_of_installation([scheduler("x", "y", "sleep")], "x/y-device") is None


@pytest.mark.parametrize("config", ["", "kube-system/hami-scheduler-device"])
def test_schedulers_in_several_namespaces_none_beside_the_config_are_none_taken(config: str) -> None:
    """A tenant may label a Deployment of theirs as HAMi's scheduler: found by label in several namespaces, none of
    them the device config's, none is taken (it was the first by namespace name), and the notice says which."""
    deployments = [
        scheduler("team-a", "hami-scheduler", "scheduler", "--gpu-scheduler-policy=binpack"),
        scheduler("hami", "hami-scheduler", "scheduler", "--gpu-scheduler-policy=spread"),
    ]
    several = gpu_policy_of_installation(deployments, config)
    assert several == SeveralFound(
        "HAMi scheduler Deployments labelled app.kubernetes.io/component=hami-scheduler",
        ("hami", "team-a"),
        "--hami-scheduler NS/NAME",
    )
    assert isinstance(several, SeveralFound) and several.notice() == (
        "HAMi scheduler Deployments labelled app.kubernetes.io/component=hami-scheduler found in 2 namespaces "
        "(hami, team-a), any of them may be a tenant's; none is taken (give HAMi's with --hami-scheduler NS/NAME)"
    )


def configmap(namespace: str, data: dict[str, str]) -> dict:
    return {"metadata": {"namespace": namespace, "name": "hami-scheduler-device"}, "data": data}


def test_the_device_config_found_by_name_is_taken_only_when_one_namespace_holds_one() -> None:
    """A tenant may create a ConfigMap named hami-scheduler-device in a namespace of theirs: of several, none is taken
    (the first by namespace name was, `a` before `kube-system`); one without the key is no device config."""
    real = configmap("kube-system", {"device-config.yaml": CHART})
    assert device_config_of([real]) == ("kube-system/hami-scheduler-device", CHART)
    assert device_config_of([configmap("a", {"other": "x"}), real]) == ("kube-system/hami-scheduler-device", CHART)
    assert device_config_of([configmap("a", {})]) is None
    assert device_config_of([real, configmap("a", {"device-config.yaml": "nvidia: {}"})]) == SeveralFound(
        "ConfigMaps hami-scheduler-device", ("a", "kube-system"), "--hami-config NS/NAME"
    )


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


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (3, "device-config.yaml must be text, got int"),
        (
            "nvidia:\n  defaultMemory: 1\n\tdefaultCores: 2\n",
            "device-config.yaml is not valid YAML at line 3: fix the ConfigMap's text",
        ),
        ("nvidia: \x07\n", "device-config.yaml is not valid YAML: fix the ConfigMap's text"),
        (
            "nvidia:\n  resourceCountName: [a]\n",
            "device-config.yaml: nvidia.resourceCountName must be a name, got a list",
        ),
    ],
    ids=["not-text", "tab-on-line-3", "unprintable-no-line", "list-for-a-name"],
)
def test_a_config_error_names_the_line_or_the_setting_to_fix(text: object, message: str) -> None:
    """The operator fixes the ConfigMap from this one line: the line it names must be the one at fault (counted
    from 1, none for an error the reader cannot place), and the kind it names must be what the ConfigMap holds."""
    with pytest.raises(HamiConfigError) as caught:
        parse_device_config(text)
    assert str(caught.value) == message


def test_a_boolean_name_is_its_text_as_yaml_v2_sets_a_string_field() -> None:
    """yaml.v2 sets a string field to a `true` or `false` scalar's text, so HAMi counts that resource name."""
    config = parse_device_config("nvidia:\n  resourceCountName: true\n  resourceCoreName: false\n")
    assert (config.resource_count_name, config.resource_core_name) == ("true", "false")


def test_a_name_yaml_1_1_would_type_is_its_text_as_written() -> None:
    """yaml.v2 sets a string field to the scalar as written, so `yes`, `1.50` or `0x1F` is the resource name HAMi
    counts, not PyYAML's `True`, `1.5` or `31`."""
    config = parse_device_config(
        "nvidia:\n  resourceCountName: yes\n  resourceMemoryName: 1.50\n  resourceCoreName: 0x1F\n"
        "  resourcePriorityName: Off\n  resourceMemoryPercentageName: 1_000\n"
    )
    assert (
        config.resource_count_name,
        config.resource_memory_name,
        config.resource_core_name,
        config.resource_priority_name,
        config.resource_memory_percentage_name,
    ) == ("yes", "1.50", "0x1F", "Off", "1_000")


def test_a_name_merged_in_from_an_anchor_is_its_text_too() -> None:
    """yaml.v2 merges `<<: *anchor` keys; a name written there is read as written, like one in the section."""
    config = parse_device_config("base: &b\n  resourceCountName: yes\nnvidia:\n  <<: *b\n  defaultMemory: 5\n")
    assert (config.resource_count_name, config.default_memory) == ("yes", 5)


def test_an_int32_setting_takes_both_ends_of_its_range() -> None:
    """HAMi's NvidiaConfig fields are int32: their ends are values HAMi runs with, one past them it cannot decode."""
    config = parse_device_config("nvidia:\n  defaultMemory: 2147483647\n  defaultCores: -2147483648\n")
    assert (config.default_memory, config.default_cores) == (2**31 - 1, -(2**31))
    with pytest.raises(HamiConfigError) as caught:
        parse_device_config("nvidia:\n  defaultCores: -2147483649\n")
    assert str(caught.value) == "device-config.yaml: nvidia.defaultCores -2147483649 is out of range"


@pytest.mark.parametrize(
    ("argv", "policy"),
    [
        (("/usr/local/bin/scheduler", "--leader-elect=false"), "spread"),
        (("scheduler", "--gpu-scheduler-policy=binpack", "--", "--gpu-scheduler-policy=mutex"), "binpack"),
        (("scheduler", "--gpu-scheduler-policy=binpack", "--gpu-scheduler-policy"), "binpack"),
    ],
    ids=["by-path-flag-absent", "flag-before-double-dash", "dangling-flag"],
)
def test_the_extender_is_known_by_its_path_and_a_flag_before_a_double_dash_counts(
    argv: tuple[str, ...], policy: str
) -> None:
    """HAMi's image runs the extender by its full path; the flags pflag read before `--` stay in force; a flag left
    without its value (pflag would not start) is no reason to fail the whole read."""
    assert gpu_policy_of_scheduler(scheduler("kube-system", "hami-scheduler", *argv)) == policy


def test_containers_of_another_shape_are_passed_over() -> None:
    """A Deployment written by another tool may hold odd values: they name no scheduler and break no read."""
    extender = scheduler("hami", "hami-scheduler", "scheduler", "--gpu-scheduler-policy=binpack")
    containers = ["sidecar", *extender["spec"]["template"]["spec"]["containers"]]
    odd = {"spec": {"template": {"spec": {"containers": containers}}}}
    assert gpu_policy_of_scheduler(odd) == "binpack"
    assert gpu_policy_of_scheduler({"spec": {"template": {"spec": {"containers": 5}}}}) is None
