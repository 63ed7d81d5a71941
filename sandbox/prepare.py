"""What every sandbox gets once its control plane is up: the placement CRD and the fake GPU nodes."""

from __future__ import annotations

from pathlib import Path

from sandbox import gpu_nodes
from sandbox.cluster import Sandbox, wait_for

CRD = Path(__file__).resolve().parent.parent / "chart" / "templates" / "crd" / "hamipodplacement.yaml"
CRD_NAME = "hamipodplacements.scheduling.hami.placement.com"
# The README installs the chart as this release; the CRD the sandbox applies carries Helm's ownership metadata for
# it, so that `helm install gpu-descheduler ./chart -n kube-system` adopts the CRD instead of refusing it.
README_RELEASE, README_NAMESPACE = "gpu-descheduler", "kube-system"


def install_crd(sandbox: Sandbox, timeout: float = 30) -> None:
    """Applies the chart's CRD file as a user would, then waits until the API serves it."""
    sandbox.kubectl("apply", "-f", str(CRD))
    sandbox.kubectl(
        "annotate",
        "--overwrite",
        f"crd/{CRD_NAME}",
        f"meta.helm.sh/release-name={README_RELEASE}",
        f"meta.helm.sh/release-namespace={README_NAMESPACE}",
    )
    sandbox.kubectl("label", "--overwrite", f"crd/{CRD_NAME}", "app.kubernetes.io/managed-by=Helm")
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
