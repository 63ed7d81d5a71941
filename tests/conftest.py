"""Session fixtures: one sandbox control plane for every cluster test, a fresh namespace per test."""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest
import urllib3
from hypothesis import HealthCheck, settings
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from sandbox.cluster import CURRENT, OLDEST, Sandbox, alive, stop_on_signals
from sandbox.prepare import prepare
from tests.cluster.scopes import fresh_namespace

ATTACH_ENV = "HAMI_PLACE_SANDBOX_KUBECONFIG"
# `oldest`: the session's sandbox runs the oldest Kubernetes the chart supports (a developer's look at what else
# differs there; tests of what only newer releases have fail, and CI runs the 1.24 module instead).
RELEASE_ENV = "HAMI_PLACE_SANDBOX_RELEASE"
# How many of a failed test's namespace's Warning Events its report shows.
WARNING_EVENTS = 30

# Longest test files first (see tests/file_order.py).
pytest_plugins = ["tests.file_order"]

# Tests never assert on timings: Hypothesis's per-example deadline and its "generation is slow" check are both
# timings, and both failed examples that pass when the two cores are busy with the sandboxes of the same run.
settings.register_profile("untimed", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("untimed")


def pytest_configure(config: pytest.Config) -> None:
    """SIGTERM becomes KeyboardInterrupt, so pytest still runs the teardown that stops the sandbox."""
    stop_on_signals()


@pytest.fixture(scope="session")
def cluster() -> Iterator[Sandbox]:
    """The sandbox; set HAMI_PLACE_SANDBOX_KUBECONFIG=.sandbox/kubeconfig to reuse one from make sandbox-up."""
    attach = os.environ.get(ATTACH_ENV)
    if attach:
        sandbox = Sandbox.attach(Path(attach))
        prepare(sandbox)
        yield sandbox
        return
    release = os.environ.get(RELEASE_ENV, "current")
    if release not in {"current", "oldest"}:
        raise pytest.UsageError(f"{RELEASE_ENV}={release}: write current or oldest")
    sandbox = Sandbox.start(release=OLDEST if release == "oldest" else CURRENT)
    pids, workdir = sandbox.pids(), sandbox.workdir
    try:
        prepare(sandbox)
        yield sandbox
    finally:
        sandbox.stop()
    left = [pid for pid in pids if alive(pid)]
    assert not left, f"sandbox processes still running after stop: {left}"
    assert not workdir.exists(), f"sandbox work dir left behind: {workdir}"


@pytest.fixture
def namespace(cluster: Sandbox) -> Iterator[str]:
    """A fresh namespace for the test (see fresh_namespace), its pods and then itself deleted afterwards."""
    with fresh_namespace(cluster) as name:
        yield name


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failed cluster test's report carries its namespace's Warning Events (HAMi's FailedScheduling reasons among
    them): the sandbox and its logs go with the run, and a pod that never ran says why only there."""
    report = yield
    funcargs = getattr(item, "funcargs", {})
    sandbox, namespace = funcargs.get("cluster"), funcargs.get("namespace")
    if report.failed and call.when == "call" and isinstance(sandbox, Sandbox) and isinstance(namespace, str):
        report.sections.append((f"Warning Events in {namespace}", namespace_warnings(sandbox, namespace)))
    return report


def namespace_warnings(sandbox: Sandbox, namespace: str) -> str:
    """The namespace's last WARNING_EVENTS Warning Events, a line each, or why they could not be read."""
    try:
        events = client.CoreV1Api(sandbox.api_client()).list_namespaced_event(namespace, field_selector="type=Warning")
    except (ApiException, urllib3.exceptions.HTTPError) as error:
        return f"could not list them: {error}"
    lines = [
        f"{event.last_timestamp or event.event_time} {event.involved_object.kind}/{event.involved_object.name} "
        f"{event.reason} x{event.count or 1}: {event.message}"
        for event in events.items[-WARNING_EVENTS:]
    ]
    return "\n".join(lines) or "none"
