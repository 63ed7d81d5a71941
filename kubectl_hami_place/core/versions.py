"""The plugin's and the server's versions side by side: which server version a Deployment says, and whether two
versions are far enough apart to warn (a different major or minor)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubectl_hami_place.core.fields import as_mapping

# What the chart's labels and image tags carry: 0.1.0, v0.2.3, 1.0.0-rc.1.
_VERSION = re.compile(r"v?([0-9]+)\.([0-9]+)(?:\.([0-9]+))?(?:[-+][0-9A-Za-z.-]+)?")
VERSION_LABEL = "app.kubernetes.io/version"
SERVER_CONTAINER = "webhook"


@dataclass(frozen=True)
class ServerVersion:
    """A version and where it was read (shown to the user)."""

    version: str
    source: str


def minor_of(version: str) -> tuple[int, int] | None:
    """(major, minor) of a version, None when it does not read as one."""
    match = _VERSION.fullmatch(version.strip())
    return (int(match.group(1)), int(match.group(2))) if match else None


def skewed(plugin: str, server: str) -> bool:
    """True when both read as versions and differ in major or minor (a patch apart is fine)."""
    ours, theirs = minor_of(plugin), minor_of(server)
    return ours is not None and theirs is not None and ours != theirs


def deployment_version(deployment: Mapping[str, Any]) -> ServerVersion | None:
    """The server's version as its Deployment says: the webhook container's image tag when it reads as a version
    (what runs, even when the chart's `image.tag` overrides its appVersion), else the chart's version label."""
    metadata = as_mapping(deployment.get("metadata"))
    where = f"deployment {metadata.get('namespace', '')}/{metadata.get('name', '')}"
    spec = deployment.get("spec")
    template = spec.get("template") if isinstance(spec, Mapping) else None
    pod_spec = template.get("spec") if isinstance(template, Mapping) else None
    containers = pod_spec.get("containers") if isinstance(pod_spec, Mapping) else None
    for container in containers if isinstance(containers, list) else []:
        if not isinstance(container, Mapping) or container.get("name") != SERVER_CONTAINER:
            continue
        image = container.get("image")
        name = image.split("@", 1)[0] if isinstance(image, str) else ""
        tag = name.rsplit(":", 1)[1] if ":" in name.rsplit("/", 1)[-1] else ""
        if tag and minor_of(tag) is not None:
            return ServerVersion(tag.removeprefix("v"), f"{where} image {image}")
    label = as_mapping(metadata.get("labels")).get(VERSION_LABEL)
    if isinstance(label, str) and label:
        return ServerVersion(label, f"{where} label {VERSION_LABEL}")
    return None
