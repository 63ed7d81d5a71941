"""`version`: the plugin's version and the server's, read from the cluster; a warning when they differ by a minor.

The server is asked first (`GET /api/v1/version` of the webhook's Service through the API server's service proxy:
what runs); a server too old to answer, or not reachable, is read from its Deployment (the image tag, else the
chart's version label).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kubectl_hami_place import __version__
from kubectl_hami_place.cli._common import (
    AsOption,
    ContextOption,
    KubeconfigOption,
    OutputFormat,
    OutputOption,
    emit,
    target,
    warn,
)
from kubectl_hami_place.cli._present import examples
from kubectl_hami_place.cli.output import Block, Text
from kubectl_hami_place.core.versions import ServerVersion, deployment_version, skewed
from kubectl_hami_place.kube.errors import KubeError, KubeForbidden

if TYPE_CHECKING:
    from kubectl_hami_place.kube.client import Kube

HELP = (
    "Print the plugin's version and the hami-place server's, read from the cluster; warn when they differ by a "
    "minor version." + examples("kubectl hami-place version", "kubectl hami-place version -o json")
)
NOT_FOUND = "not found (no hami-place webhook Service or Deployment labelled app.kubernetes.io/name=" + (
    "gpu-descheduler-webhook)"
)


@dataclass(frozen=True)
class Versions:
    """Both versions; `server` None with `problem` saying why it is unknown. `asked` is False when the cluster did
    not answer: the table then holds the plugin's line alone, as `kubectl version` prints it, and the error goes to
    stderr."""

    plugin: str
    server: ServerVersion | None
    problem: str
    asked: bool = True

    def to_data(self) -> Any:
        """`{plugin, server: {version, source} | null, problem?}`."""
        data: dict[str, Any] = {
            "plugin": self.plugin,
            "server": None if self.server is None else {"version": self.server.version, "source": self.server.source},
        }
        if self.problem:
            data["problem"] = self.problem
        return data

    def to_blocks(self) -> list[Block]:
        """Two lines, as `kubectl version` prints them."""
        if not self.asked:
            return [Text((f"Plugin version: {self.plugin}",))]
        server = f"{self.server.version} ({self.server.source})" if self.server else self.problem
        return [Text((f"Plugin version: {self.plugin}", f"Server version: {server}"))]


def version(
    *,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    as_user: AsOption = None,
    output: OutputOption = OutputFormat.table,
) -> int:
    """Print the plugin's and the server's versions."""
    where = target(kubeconfig, context, None, as_user=as_user)
    try:
        server = server_version(where.kube)
    except KubeError as exc:
        emit(Versions(__version__, None, f"unknown: {exc}", asked=False), output)
        raise
    if server is not None and skewed(__version__, server.version):
        warn(
            f"the plugin is {__version__} and the server {server.version}: they differ by a minor version; "
            "install the plugin of the server's version (or upgrade the chart)"
        )
    emit(Versions(__version__, server, "" if server else NOT_FOUND), output)
    return 0


def server_version(kube: Kube) -> ServerVersion | None:
    """The first webhook Service that answers its version, else the first Deployment that says one, else None."""
    from kubectl_hami_place.kube import cluster_reads

    try:
        services = cluster_reads.find_webhook_services(kube)
    except KubeForbidden:
        services = []
    for service in services:
        try:
            found = cluster_reads.read_webhook_version(kube, service)
        except KubeError:
            continue
        return ServerVersion(found, f"webhook {service.describe()}")
    for deployment in cluster_reads.list_server_deployments(kube):
        said = deployment_version(deployment)
        if said is not None:
            return said
    return None
