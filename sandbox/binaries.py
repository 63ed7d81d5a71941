"""Builds the sandbox's Go binaries from the wrapper modules under hack/ and caches them by version."""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import yaml

HACK = Path(__file__).resolve().parent.parent / "hack"

KUBERNETES_VERSION = "v1.37.2"
# The oldest release the chart supports (Chart.yaml kubeVersion); its API server is what the compatibility tests
# install and run against.
OLDEST_KUBERNETES_VERSION = "v1.24.17"
ETCD_VERSION = "v3.6.16"
KWOK_VERSION = "v0.8.0"
HELM_VERSION = "v3.22.0"
KREW_VERSION = "v0.4.4"
VEGETA_VERSION = "v12.13.0"
# Prometheus 3.16.0 (its Go module numbers releases v0.<major><minor>.<patch>): promtool tests the chart's alerts.
PROMETHEUS_MODULE_VERSION = "v0.316.0"
PROMETHEUS_VERSION = "3.16.0"
# HAMi is refused by the Go module proxy; its source comes as an archive in the steering repo's shared/third_party.
HAMI_VERSION = "v2.10.0"
HAMI_ARCHIVE_NAME = "HAMi-v2.10.0-4707fb02.tar.gz"


def _k8s_ldflags(version: str) -> list[str]:
    """Stamps the release into component-base and client-go so that --version and /version tell the truth."""
    major, minor = version.lstrip("v").split(".")[:2]
    flags = []
    for pkg in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [f"-X {pkg}.gitVersion={version}", f"-X {pkg}.gitMajor={major}", f"-X {pkg}.gitMinor={minor}"]
        flags += [f"-X {pkg}.gitTreeState=clean"]
    return flags


@dataclass(frozen=True)
class Component:
    """One binary: the wrapper module it is built from, its main package and the release it is pinned to."""

    name: str
    module_dir: str
    package: str
    version: str
    ldflags: tuple[str, ...] = ()
    cgo: bool = False
    archive: str = ""
    sources: tuple[str, ...] = ()
    """Go files of the module directory itself, when the binary is built from them (not only from a pinned module)."""

    def source_digest(self) -> str:
        """Ties the cache entry to the wrapper module's exact dependency set (or the source archive's bytes)."""
        h = hashlib.sha256()
        if self.archive:
            h.update(archive_digest(hami_archive()).encode())
        for f in ("go.mod", "go.sum", *self.sources):
            path = HACK / self.module_dir / f
            if path.exists():
                h.update(path.read_bytes())
        h.update(" ".join(self.ldflags).encode())
        return h.hexdigest()[:12]


COMPONENTS: dict[str, Component] = {
    c.name: c
    for c in (
        Component(
            "etcd",
            "etcd",
            "go.etcd.io/etcd/server/v3",
            ETCD_VERSION,
            (f"-X go.etcd.io/etcd/api/v3/version.GitSHA={ETCD_VERSION}",),
        ),
        *(
            Component(
                name,
                "k8s",
                f"k8s.io/kubernetes/cmd/{name}",
                KUBERNETES_VERSION,
                tuple(_k8s_ldflags(KUBERNETES_VERSION)),
            )
            for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
        ),
        *(
            Component(
                f"{name}-oldest",
                "k8s-oldest",
                f"k8s.io/kubernetes/cmd/{name}",
                OLDEST_KUBERNETES_VERSION,
                tuple(_k8s_ldflags(OLDEST_KUBERNETES_VERSION)),
            )
            for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
        ),
        Component("kwok", "kwok", "sigs.k8s.io/kwok/cmd/kwok", KWOK_VERSION),
        Component(
            "helm",
            "helm",
            "helm.sh/helm/v3/cmd/helm",
            HELM_VERSION,
            (
                f"-X helm.sh/helm/v3/internal/version.version={HELM_VERSION}",
                "-X helm.sh/helm/v3/internal/version.gitTreeState=clean",
                # As helm's Makefile does: without these, template and lint assume Kubernetes 1.20.
                *(
                    f"-X helm.sh/helm/v3/pkg/{pkg}.k8sVersion{part}={value}"
                    for pkg in ("chartutil", "lint/rules")
                    for part, value in (("Major", "1"), ("Minor", KUBERNETES_VERSION.split(".")[1]))
                ),
            ),
        ),
        Component(
            "hami-scheduler",
            "",
            "./cmd/scheduler",
            HAMI_VERSION,
            ("-X github.com/Project-HAMi/HAMi/pkg/version.version=" + HAMI_VERSION,),
            cgo=True,
            archive=HAMI_ARCHIVE_NAME,
        ),
        Component(
            "krew",
            "krew",
            "sigs.k8s.io/krew/cmd/krew",
            KREW_VERSION,
            (
                f"-X sigs.k8s.io/krew/internal/version.gitTag={KREW_VERSION}",
                f"-X sigs.k8s.io/krew/internal/version.gitCommit={KREW_VERSION}",
            ),
        ),
        Component("vegeta", "vegeta", "github.com/tsenart/vegeta/v12", VEGETA_VERSION),
        Component(
            "promtool",
            "promtool",
            "github.com/prometheus/prometheus/cmd/promtool",
            PROMETHEUS_MODULE_VERSION,
            (f"-X github.com/prometheus/common/version.Version={PROMETHEUS_VERSION}",),
        ),
        Component("admission-floor", "admission-floor", ".", "v1", sources=("main.go",)),
    )
}

CONTROL_PLANE = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
    "kwok",
    "hami-scheduler",
)


def hami_archive() -> Path:
    """HAMi's source archive: $HAMI_PLACE_HAMI_ARCHIVE, else shared/third_party beside the checkout (as CI lays it)."""
    given = os.environ.get("HAMI_PLACE_HAMI_ARCHIVE")
    if given:
        return Path(given)
    repo = HACK.parent
    for root in (repo.parent / "shared", repo / "shared"):
        candidate = root / "third_party" / HAMI_ARCHIVE_NAME
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(
        f"{HAMI_ARCHIVE_NAME} not found in ../shared/third_party; set HAMI_PLACE_HAMI_ARCHIVE to its path"
    )


def archive_digest(path: Path) -> str:
    """The archive's sha256, so a cached build is reused only for exactly the same source."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def cache_root() -> Path:
    """Outside the repo so that a fresh clone reuses binaries built by an earlier run on the same machine."""
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "hami-place"
    return Path(os.environ.get("HAMI_PLACE_CACHE", default))


def cached_path(component: Component) -> Path:
    return cache_root() / "bin" / f"{component.name}-{component.version}-{component.source_digest()}" / component.name


def _envtest_asset(name: str) -> Path | None:
    """Honours envtest's KUBEBUILDER_ASSETS for the binaries envtest ships (kube-apiserver, etcd, kubectl)."""
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    if not assets:
        return None
    path = Path(assets) / name
    return path if path.is_file() and os.access(path, os.X_OK) else None


def build(component: Component, log: TextIO | None = None) -> Path:
    """Returns the cached binary, building it first when this version is not cached yet; a cold build says so on
    `log`, the stderr of the moment by default (not of the import: a test's captured stream is closed after it)."""
    target = cached_path(component)
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    # One builder per binary: other processes (parallel test sessions, make demo beside make test) wait for it.
    with (target.parent / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not target.is_file():
            _build(component, target, log or sys.stderr)
    return target


def _build(component: Component, target: Path, log: TextIO) -> None:
    print(f"building {component.name} {component.version} (cold cache; this takes a while)", file=log, flush=True)
    env = dict(os.environ, GOTOOLCHAIN="local", GOFLAGS="-mod=mod", CGO_ENABLED="1" if component.cgo else "0")
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        out = Path(tmp) / component.name
        cwd = HACK / component.module_dir
        if component.archive:
            cwd = _unpack(hami_archive(), Path(tmp) / "src")
        cmd = [
            "go",
            "build",
            "-trimpath",
            "-ldflags",
            " ".join(("-s", "-w", *component.ldflags)),
            "-o",
            str(out),
            component.package,
        ]
        subprocess.run(cmd, cwd=cwd, env=env, check=True)
        os.replace(out, target)


def _unpack(archive: Path, into: Path) -> Path:
    """Unpacks a source archive and returns its single top directory (the module root)."""
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    (top,) = [p for p in into.iterdir() if p.is_dir()]
    return top


def resolve(name: str) -> Path:
    """The path of a sandbox binary: envtest's asset if one is given, else the cached build."""
    return _envtest_asset(name) or build(COMPONENTS[name])


KWOK_STAGES = ("node/fast", "node/heartbeat-with-lease", "pod/general")
# Bumped when the stages written from them change, so a cached file from before is written again.
STAGES_REVISION = 2


def kwok_stages() -> Path:
    """kwok's own published stage sets (Ready nodes with leases, pods that run and get deleted) as one config file,
    without the pod stages' delays.

    They ship inside kwok's module, so they come from the module kwok was built from and are cached beside it. Each pod
    stage of `pod/general` waits 1 s plus up to 5 s of jitter (a delete: up to the pod's grace period) before it
    applies: a latency made up for simulation that every test then waited out, with nothing checked meanwhile. The
    sandbox keeps the stages and their order (a pod is created, runs, is ready, completes, is deleted once its
    finalizers are gone) and applies each at once. The nodes' heartbeat keeps its period.
    """
    target = cached_path(COMPONENTS["kwok"]).parent / f"stages-{STAGES_REVISION}.yaml"
    if target.is_file():
        return target
    env = dict(os.environ, GOTOOLCHAIN="local")
    info = subprocess.run(
        ["go", "mod", "download", "-json", f"sigs.k8s.io/kwok@{KWOK_VERSION}"],
        env=env,
        cwd=HACK / "kwok",
        capture_output=True,
        text=True,
        check=True,
    )
    stage_root = Path(json.loads(info.stdout)["Dir"]) / "kustomize" / "stage"
    stages = [
        without_pod_delays(stage)
        for name in KWOK_STAGES
        for f in sorted((stage_root / name).glob("*.yaml"))
        if f.name != "kustomization.yaml"
        for stage in yaml.safe_load_all(f.read_text())
        if stage
    ]
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(yaml.safe_dump_all(stages, sort_keys=False))
    return target


def without_pod_delays(stage: dict[str, Any]) -> dict[str, Any]:
    """The stage as published, applied at once when it is a pod's (see kwok_stages)."""
    spec = stage.get("spec", {})
    if spec.get("resourceRef", {}).get("kind") != "Pod":
        return stage
    return {**stage, "spec": {key: value for key, value in spec.items() if key != "delay"}}


LIBFAKETIME_PACKAGE = "libfaketime"


def libfaketime() -> Path:
    """libfaketime (the test of replicas with skewed wall clocks preloads it): the system's, else its Debian package's.

    The package is downloaded with apt and unpacked into the cache, keyed by its version, so no root install is
    needed once the package index is there (`apt-get update` is run first when it is not, as root).
    """
    installed = sorted(Path("/usr/lib").glob("*/faketime/libfaketime.so.1"))
    if installed:
        return installed[0]
    cached = sorted((cache_root() / "lib").glob("libfaketime-*/usr/lib/*/faketime/libfaketime.so.1"))
    if cached:
        return cached[-1]
    (cache_root() / "lib").mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_root() / "lib") as tmp:
        download = ["apt-get", "download", LIBFAKETIME_PACKAGE]
        if subprocess.run(download, cwd=tmp, capture_output=True, check=False).returncode != 0 and os.geteuid() == 0:
            subprocess.run(["apt-get", "update", "-qq"], capture_output=True, check=False)
        subprocess.run(download, cwd=tmp, capture_output=True, check=True)
        (deb,) = Path(tmp).glob("*.deb")
        version = deb.stem.split("_")[1]
        unpacked = Path(tmp) / "unpacked"
        subprocess.run(["dpkg-deb", "-x", str(deb), str(unpacked)], check=True)
        target = cache_root() / "lib" / f"libfaketime-{version}"
        if not target.exists():
            os.replace(unpacked, target)
    return sorted((cache_root() / "lib").glob("libfaketime-*/usr/lib/*/faketime/libfaketime.so.1"))[-1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("names", nargs="*", default=list(CONTROL_PLANE), help="components (default: control plane)")
    parser.add_argument("--print", action="store_true", help="print each binary's path")
    args = parser.parse_args(argv)
    for name in args.names:
        if name not in COMPONENTS:
            print(f"unknown component {name!r}; choose from {', '.join(COMPONENTS)}", file=sys.stderr)
            return 2
    if shutil.which("go") is None:
        print("go is not on PATH; install Go 1.26+ to build the sandbox binaries", file=sys.stderr)
        return 1
    for name in args.names:
        path = resolve(name)
        if args.print:
            print(f"{name}\t{path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
