"""One default, one place: every `serve` flag's default is webhook/settings.py's, and the chart, the server's parts and
docs/architecture.md say the same numbers."""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubectl_hami_place.core.admission import Settings
from kubectl_hami_place.kube.leader import LeaseTimes
from webhook.defrag import DefragOptions
from webhook.listener import MutateListener
from webhook.main import _parser
from webhook.mutate import MutateApp
from webhook.reconcile import Reconciler
from webhook.server import ServeOptions
from webhook.settings import DEFAULTS

ROOT = Path(__file__).resolve().parents[2]
FIELDS = {field.name for field in dataclasses.fields(DEFAULTS)}
# Settings of the defragmentation controller: its DefragOptions take them, not ServeOptions.
DEFRAG_FIELDS = {"defrag_interval", "defrag_move_timeout", "defrag_lease_duration"}
# Flags the chart sets from a value: the value documents the flag's default (see chart_value_of below).
CHART_FLAGS = {
    "webhook_port",
    "api_port",
    "probe_port",
    "scheduler_name",
    "placement_ttl",
    "claim_grace",
    "finished_ttl",
    "admission_timeout",
    "shutdown_grace",
}


@pytest.fixture
def serve_flags(monkeypatch: pytest.MonkeyPatch) -> dict[str, argparse.Action]:
    """The `serve` subcommand's flags by dest, built with none of the env vars that would stand in for a default."""
    for name in [name for name in os.environ if name.startswith("HAMI_PLACE_")] + ["KUBECONFIG", "POD_NAMESPACE"]:
        monkeypatch.delenv(name, raising=False)
    commands = next(action for action in _parser()._actions if isinstance(action, argparse._SubParsersAction))
    return {action.dest: action for action in commands.choices["serve"]._actions if action.dest != "help"}


def shown(value: Any) -> str:
    """A default as the help text and the docs write it (10.0 as 10)."""
    return format(value, "g") if isinstance(value, float) else str(value)


def test_every_serve_default_comes_from_the_settings_module(serve_flags: dict[str, argparse.Action]) -> None:
    assert serve_flags.keys() >= FIELDS
    for dest, action in serve_flags.items():
        if dest in FIELDS:
            assert action.default == getattr(DEFAULTS, dest), dest
            assert f"(default {shown(action.default)})" in (action.help or ""), dest
        else:
            # A flag off by default: nothing to keep in the settings module.
            assert action.default in (None, "", []), f"--{dest} has a default outside webhook/settings.py"


def test_the_flags_and_serve_options_name_the_settings_rather_than_repeat_a_value() -> None:
    """Equal values could still be written twice: the flags' and ServeOptions' defaults must read DEFAULTS."""
    written: dict[str, str] = {}
    for call in ast.walk(ast.parse((ROOT / "webhook" / "main.py").read_text())):
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "add_argument":
            flag = call.args[0]
            dest = flag.value[2:].replace("-", "_") if isinstance(flag, ast.Constant) else ""
            default = next((keyword.value for keyword in call.keywords if keyword.arg == "default"), None)
            if dest in FIELDS and default is not None:
                written[f"--{dest.replace('_', '-')}"] = ast.unparse(default)
    server = ast.parse((ROOT / "webhook" / "server.py").read_text())
    options = next(node for node in server.body if isinstance(node, ast.ClassDef) and node.name == "ServeOptions")
    for line in options.body:
        if isinstance(line, ast.AnnAssign) and isinstance(line.target, ast.Name) and line.target.id in FIELDS:
            written[f"ServeOptions.{line.target.id}"] = ast.unparse(line.value) if line.value else ""
    assert len(written) == len(FIELDS) + len(FIELDS - DEFRAG_FIELDS)
    assert {where: code for where, code in written.items() if "DEFAULTS." not in code} == {}


@pytest.mark.usefixtures("serve_flags")
def test_a_port_from_the_environment_stands_in_for_the_default_and_a_bad_one_is_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The chart may set the ports by env; an empty one is unset, and a typo stops the server naming the variable."""
    monkeypatch.setenv("HAMI_PLACE_WEBHOOK_PORT", "9443")
    monkeypatch.setenv("HAMI_PLACE_API_PORT", "")
    args = _parser().parse_args(["serve"])
    assert (args.webhook_port, args.api_port, args.probe_port) == (9443, DEFAULTS.api_port, DEFAULTS.probe_port)
    monkeypatch.setenv("HAMI_PLACE_PROBE_PORT", "84a")
    with pytest.raises(SystemExit) as stopped:
        _parser()
    assert str(stopped.value) == (
        "hami-place-webhook: HAMI_PLACE_PROBE_PORT='84a' is not a port number; unset it or fix it"
    )


def test_the_servers_parts_default_to_the_same_settings() -> None:
    options = {field.name: field.default for field in dataclasses.fields(ServeOptions)}
    assert {name: options[name] for name in FIELDS if name in options} == {
        name: getattr(DEFAULTS, name) for name in FIELDS if name in options
    }
    assert FIELDS - options.keys() == DEFRAG_FIELDS
    assert DefragOptions("ns", "policy", "ns", "me").interval == DEFAULTS.defrag_interval
    assert DefragOptions("ns", "policy", "ns", "me").move_timeout == DEFAULTS.defrag_move_timeout
    assert DefragOptions("ns", "policy", "ns", "me").lease == LeaseTimes()
    assert LeaseTimes().lease_duration == DEFAULTS.defrag_lease_duration
    assert DefragOptions("ns", "policy", "ns", "me").scheduler_name == DEFAULTS.scheduler_name
    assert Settings().scheduler_name == DEFAULTS.scheduler_name
    assert inspect.signature(MutateApp).parameters["admission_timeout"].default == DEFAULTS.admission_timeout
    assert inspect.signature(Reconciler).parameters["claim_grace"].default == DEFAULTS.claim_grace
    listener = inspect.signature(MutateListener).parameters
    assert listener["idle_seconds"].default == DEFAULTS.idle_timeout
    assert listener["max_connections"].default == DEFAULTS.max_connections


def chart_flags() -> dict[str, str]:
    """The deployment's `--flag={{ .Values.path }}` args (`| int64` for whole numbers): flag dest to the value's
    dotted path."""
    template = (ROOT / "chart" / "templates" / "deployment.yaml").read_text()
    found = re.findall(r"- --([a-z-]+)=\{\{ \.Values\.([A-Za-z.]+)(?: \| int64)? \}\}", template)
    return {flag.replace("-", "_"): path for flag, path in found}


def chart_value_of(path: str) -> Any:
    value: Any = yaml.safe_load((ROOT / "chart" / "values.yaml").read_text())
    for key in path.split("."):
        value = value[key]
    return value


def test_the_charts_values_document_the_same_defaults() -> None:
    mapped = {dest: path for dest, path in chart_flags().items() if dest in FIELDS}
    assert mapped.keys() == CHART_FLAGS
    differ = {dest for dest, path in mapped.items() if chart_value_of(path) != getattr(DEFAULTS, dest)}
    # The one exception, kept as it was: the chart asks the API server to wait less (webhook.timeoutSeconds) than
    # Kubernetes' default timeoutSeconds the flag defaults to for a server installed without the chart; it passes its
    # own value as --admission-timeout, so the server and its webhook configuration agree in every install.
    assert differ <= {"admission_timeout"}


def test_the_architecture_doc_names_the_same_defaults() -> None:
    doc = " ".join((ROOT / "docs" / "architecture.md").read_text().split())
    for name in sorted(FIELDS):
        flag = "--" + name.replace("_", "-")
        assert f"`{flag}` {shown(getattr(DEFAULTS, name))}" in doc, flag


@pytest.mark.parametrize("doc", ["docs/architecture.md", "README.md"])
def test_the_docs_name_every_serve_flag(doc: str, serve_flags: dict[str, argparse.Action]) -> None:
    """The architecture doc's flag list and the README's name every flag `serve --help` has: the test above holds
    only the defaults the settings module keeps, and a flag without one went missing from both unnoticed."""
    text = (ROOT / doc).read_text()
    flags = [flag for action in serve_flags.values() for flag in action.option_strings if flag.startswith("--")]
    missing = [flag for flag in flags if not re.search(f"`{re.escape(flag)}[` ]", text)]
    assert len(flags) > 30 and not missing, missing


@pytest.mark.parametrize("seconds", [3, 5, 15, 3600])
def test_a_lease_of_any_allowed_duration_keeps_the_defaults_proportions(seconds: int) -> None:
    """`--defrag-lease-duration` scales the renew deadline and the tries: the default is the elector's own times,
    and a short lease still stops its holder acting before another replica may start, with time for a second try."""
    times = LeaseTimes.lasting(seconds)
    assert (times.lease_duration, times.renew_deadline, times.retry) == pytest.approx(
        (seconds, seconds * 2 / 3, seconds * 2 / 15)
    )
    assert times.request <= times.renew_deadline / 2
    assert LeaseTimes.lasting(DEFAULTS.defrag_lease_duration) == LeaseTimes()
