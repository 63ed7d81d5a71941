"""What the cluster tests' fixtures set up and tear down, as context managers: a scenario that runs in the background
of a module's tests (test_defrag's churn) enters the same ones that a test's fixtures do."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kubectl_hami_place.core.names import GROUP, PLURAL, VERSION
from sandbox.cluster import Sandbox, wait_for
from sandbox.webhook import Webhook
from tests.cluster.hami_harness import GpuNode, card_entries, delete_nodes, fresh_node

# How long a test's teardown waits for its pods to be gone (kwok deletes them at once; a finalizer would hold one).
PODS_GONE_SECONDS = 10
# Lines of a webhook's log shown with a failed test.
LOG_TAIL = 80


@contextlib.contextmanager
def fresh_namespace(cluster: Sandbox, *, clear_pods: bool = True) -> Iterator[str]:
    """A fresh namespace, labelled for webhook namespaceSelectors, with its default service account ready; its pods
    deleted and waited for at the end (`clear_namespace`) unless `clear_pods` is False, when the namespace's deletion
    takes them in the background."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(cluster.api_client())
    core.create_namespace({"metadata": {"name": name, "labels": {"hami-place-test": name}}})
    try:
        make_default_service_account(core, name)
        yield name
    finally:
        if clear_pods:
            clear_namespace(core, name)
        else:
            with contextlib.suppress(ApiException, urllib3.exceptions.HTTPError):
                core.delete_namespace(name)


def clear_namespace(core: client.CoreV1Api, name: str) -> None:
    """The namespace's pods go first, and are waited for: they hold cards of the shared nodes, and a next test's pod
    that HAMi refused while a terminating namespace still held them waits for kube-scheduler's five-minute flush; then
    its placements. The namespace then goes in the background. Cleanup, not a check: a failed delete fails no test."""
    with contextlib.suppress(ApiException, urllib3.exceptions.HTTPError, TimeoutError):
        # Their controllers first, or a ReplicaSet makes new ones as fast as they go.
        apps, batch = client.AppsV1Api(core.api_client), client.BatchV1Api(core.api_client)
        for delete in (
            apps.delete_collection_namespaced_deployment,
            apps.delete_collection_namespaced_replica_set,
            apps.delete_collection_namespaced_stateful_set,
            batch.delete_collection_namespaced_job,
        ):
            delete(name)
        core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
        wait_for(lambda: not core.list_namespaced_pod(name).items, f"the pods of {name} to be gone", PODS_GONE_SECONDS)
        # The placements too, at once: a later test's defragmentation leader reads every namespace's moves (budgets,
        # refused cards) while this namespace is still being deleted.
        client.CustomObjectsApi(core.api_client).delete_collection_namespaced_custom_object(
            GROUP, VERSION, name, PLURAL
        )
    with contextlib.suppress(ApiException, urllib3.exceptions.HTTPError):
        core.delete_namespace(name)


def make_default_service_account(core: client.CoreV1Api, namespace: str) -> None:
    """The namespace's default service account, made here rather than waited for: the controller-manager makes it
    some tenths of a second later on a busy machine, which each test waited for."""
    try:
        core.create_namespaced_service_account(namespace, {"metadata": {"name": "default"}})
    except ApiException as error:
        if error.status != 409:  # the controller-manager was first
            raise


@contextlib.contextmanager
def server_namespace(cluster: Sandbox) -> Iterator[str]:
    """The namespace the controller's server runs in: its policy ConfigMap and its leader Lease live there."""
    name = f"ctl-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(cluster.api_client())
    core.create_namespace({"metadata": {"name": name}})
    try:
        yield name
    finally:
        with contextlib.suppress(ApiException, urllib3.exceptions.HTTPError):
            core.delete_namespace(name)


@contextlib.contextmanager
def running_webhooks() -> Iterator[list[Webhook]]:
    """Webhook processes started meanwhile (appended to the list); all stopped at the end.

    The end of each one's log is printed then, which pytest shows only when the test failed. All are told to stop
    before any is waited for: replicas drain together.
    """
    started: list[Webhook] = []
    try:
        yield started
    finally:
        for webhook in started:
            webhook.terminate()
        for webhook in started:
            webhook.stop()
            print(f"--- the last {LOG_TAIL} lines of {webhook.log} ---", log_tail(webhook), sep="\n")


def log_tail(webhook: Webhook) -> str:
    """The last LOG_TAIL lines of the webhook's log."""
    lines = webhook.log.read_text(errors="replace").splitlines() if webhook.log.is_file() else []
    return "\n".join(lines[-LOG_TAIL:])


@contextlib.contextmanager
def webhook_configurations(cluster: Sandbox) -> Iterator[list[str]]:
    """Names of the MutatingWebhookConfigurations registered meanwhile (appended to the list), deleted at the end."""
    names: list[str] = []
    try:
        yield names
    finally:
        api = client.AdmissionregistrationV1Api(cluster.api_client())
        for name in names:
            try:
                api.delete_mutating_webhook_configuration(name)
            except ApiException as error:
                if error.status != 404:
                    raise


@contextlib.contextmanager
def gpu_node(cluster: Sandbox) -> Iterator[GpuNode]:
    """A fresh node of two 40 GiB A100 cards that only the user's pods go to, deleted at the end."""
    node = fresh_node(cluster, card_entries(2))
    try:
        yield node
    finally:
        delete_nodes(cluster, [node])
