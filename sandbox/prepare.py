"""What every sandbox gets once its control plane is up: the placement CRD and the fake GPU nodes."""

from __future__ import annotations

from pathlib import Path

from sandbox import gpu_nodes
from sandbox.cluster import Sandbox, wait_for

CRD = Path(__file__).resolve().parent.parent / "chart" / "templates" / "crd" / "hamipodplacement.yaml"
CRD_NAME = "hamipodplacements.scheduling.hami.placement.com"


def install_crd(sandbox: Sandbox, timeout: float = 30) -> None:
    """Applies the chart's CRD file as a user would, then waits until the API serves it."""
    sandbox.kubectl("apply", "-f", str(CRD))
    sandbox.kubectl("wait", "--for=condition=Established", f"--timeout={int(timeout)}s", f"crd/{CRD_NAME}")
    wait_for(
        lambda: sandbox.kubectl("get", "hamipodplacements", "-A", check=False).returncode == 0,
        f"{CRD_NAME} to be served",
        timeout,
    )


def prepare(sandbox: Sandbox) -> list[str]:
    """Installs the CRD and creates the GPU nodes; returns the node names."""
    install_crd(sandbox)
    return gpu_nodes.create(sandbox)
