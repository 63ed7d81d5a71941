"""The krew package: the PyInstaller executable, the generated manifest checked by krew's own validator, and a real
offline `kubectl krew install` whose plugin then runs against the sandbox.

The executable comes from `make dist` (PyInstaller one-directory: the archive holds kubectl-hami_place/; both are
cached under a digest of their sources, so a warm run only copies them); krew and validate-krew-manifest are built
from their Go module like the sandbox binaries.
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubectl_hami_place import __version__
from sandbox import binaries
from sandbox.cluster import Sandbox

# Every test here needs the PyInstaller executable: cold, `make dist` builds it (about 1.5 minutes).
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = "hami-place"
BINARY = "kubectl-hami_place"


@pytest.fixture(scope="module")
def archive() -> Path:
    """This machine's plugin archive, from `make dist` (PyInstaller comes with the venv)."""
    result = subprocess.run(
        ["make", "--no-print-directory", "dist"], cwd=ROOT, capture_output=True, text=True, check=False, timeout=1200
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    path = Path(result.stdout.strip().splitlines()[-1])
    assert path.is_file(), result.stdout
    return path


@pytest.fixture(scope="module")
def manifest(archive: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The manifest the make target generates, named <plugin>.yaml as krew's validator wants it."""
    out = tmp_path_factory.mktemp("krew") / f"{PLUGIN}.yaml"
    subprocess.run(
        [
            str(ROOT / ".venv" / "bin" / "python"),
            str(ROOT / "packaging" / "krew_manifest.py"),
            "--dist",
            str(archive.parent),
            "--out",
            str(out),
        ],
        check=True,
        capture_output=True,
    )
    return out


@pytest.fixture(scope="module")
def validator() -> Path:
    """krew's validate-krew-manifest, from the same wrapper module and release as krew."""
    component = binaries.Component(
        "validate-krew-manifest", "krew", "sigs.k8s.io/krew/cmd/validate-krew-manifest", binaries.KREW_VERSION
    )
    return binaries.build(component)


def validate(validator: Path, manifest: Path) -> subprocess.CompletedProcess[str]:
    """krew's structural checks (ValidatePlugin, supported platforms, no overlapping selectors), without the
    per-platform install that would download every archive."""
    return subprocess.run(
        [str(validator), "-manifest", str(manifest), "-skip-install"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def load(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())


def test_manifest_describes_the_built_archive(archive: Path, manifest: Path) -> None:
    plugin = load(manifest)
    assert plugin["metadata"]["name"] == PLUGIN
    assert plugin["spec"]["version"] == f"v{__version__}"
    (platform,) = plugin["spec"]["platforms"]
    assert platform["selector"] == {"matchLabels": {"os": "linux", "arch": "amd64"}}
    assert platform["uri"].endswith(f"/v{__version__}/{archive.name}")
    assert platform["sha256"] == hashlib.sha256(archive.read_bytes()).hexdigest()
    assert platform["bin"] == f"{BINARY}/{BINARY}"


def test_krew_validator_accepts_the_manifest(validator: Path, manifest: Path) -> None:
    result = validate(validator, manifest)
    assert result.returncode == 0, result.stderr
    assert "structural validation OK" in result.stderr
    assert "no overlapping spec.platform[].selector" in result.stderr


def test_krew_validator_accepts_the_committed_manifest(validator: Path, tmp_path: Path) -> None:
    committed = tmp_path / f"{PLUGIN}.yaml"
    committed.write_text((ROOT / "krew-manifest.yaml").read_text())
    result = validate(validator, committed)
    assert result.returncode == 0, result.stderr


def test_krew_validator_rejects_overlapping_platforms(validator: Path, manifest: Path, tmp_path: Path) -> None:
    """The check validate-krew-manifest makes: no os/arch may be selected by two platform entries."""
    plugin = load(manifest)
    overlapping = dict(plugin["spec"]["platforms"][0], selector={"matchLabels": {"os": "linux"}})
    plugin["spec"]["platforms"].append(overlapping)
    broken = tmp_path / f"{PLUGIN}.yaml"
    broken.write_text(yaml.safe_dump(plugin))
    result = validate(validator, broken)
    assert result.returncode != 0
    assert "overlapping selectors that select linux/amd64" in result.stderr


def test_krew_validator_rejects_a_wrong_name(validator: Path, manifest: Path, tmp_path: Path) -> None:
    misnamed = tmp_path / "other-plugin.yaml"
    misnamed.write_text(manifest.read_text())
    result = validate(validator, misnamed)
    assert result.returncode != 0
    assert "plugin validation error" in result.stderr


@pytest.fixture
def krew_env(cluster: Sandbox, tmp_path: Path) -> dict[str, str]:
    """PATH with kubectl and krew (as the kubectl-krew plugin) and KREW_ROOT in a temp dir: nothing shared."""
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "kubectl").symlink_to(cluster.bin("kubectl"))
    (tools / "kubectl-krew").symlink_to(binaries.resolve("krew"))
    krew_root = tmp_path / "krew"
    return {
        "PATH": f"{krew_root / 'bin'}:{tools}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "KREW_ROOT": str(krew_root),
        "KREW_NO_UPGRADE_CHECK": "1",
        "KUBECONFIG": str(cluster.kubeconfig),
    }


def run(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, check=False, env=env, timeout=180)


@pytest.mark.cluster
def test_offline_krew_install_then_plugin_works(krew_env: dict[str, str], manifest: Path, archive: Path) -> None:
    installed = run(krew_env, "kubectl", "krew", "install", f"--manifest={manifest}", f"--archive={archive}")
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert f"Installed plugin: {PLUGIN}" in installed.stderr + installed.stdout

    # `krew list` needs the index, which an offline install never fetched; its receipt is what it would read.
    receipt = yaml.safe_load((Path(krew_env["KREW_ROOT"]) / "receipts" / f"{PLUGIN}.yaml").read_text())
    assert receipt["metadata"]["name"] == PLUGIN
    assert receipt["spec"]["version"] == f"v{__version__}"
    store = Path(krew_env["KREW_ROOT"]) / "store" / PLUGIN / f"v{__version__}"
    assert (store / "LICENSE").read_text().startswith("\n                                 Apache License")
    link = Path(krew_env["KREW_ROOT"]) / "bin" / BINARY
    # The executable inside the PyInstaller directory, which finds its _internal/ through krew's link.
    assert link.is_symlink() and link.resolve() == (store / BINARY / BINARY).resolve()
    assert (store / BINARY / "_internal").is_dir()

    helped = run(krew_env, "kubectl", "hami-place", "--help")
    assert helped.returncode == 0, helped.stderr
    for verb in ("pin", "evict", "status", "list", "delete", "completion"):
        assert verb in helped.stdout

    status = run(krew_env, "kubectl", "hami-place", "status", "-o", "json")
    assert status.returncode == 0, status.stderr
    assert "gpu-a100-0" in status.stdout and "gpu-h100-0" in status.stdout
    assert "Traceback" not in status.stderr

    table = run(krew_env, "kubectl", "hami-place", "status")
    assert table.returncode == 0, table.stderr
    assert "NVIDIA-A100-SXM4-40GB" in table.stdout

    refused = run(krew_env, "kubectl", "hami-place", "status", "no-such-node")
    assert refused.returncode != 0
    assert "Traceback" not in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr


@pytest.mark.cluster
def test_completion_helper_is_the_same_binary(
    krew_env: dict[str, str], manifest: Path, archive: Path, tmp_path: Path
) -> None:
    """The caveat in the manifest: a link named kubectl_complete-hami_place to the plugin completes its verbs."""
    installed = run(krew_env, "kubectl", "krew", "install", f"--manifest={manifest}", f"--archive={archive}")
    assert installed.returncode == 0, installed.stderr
    helper = tmp_path / "tools" / "kubectl_complete-hami_place"
    helper.symlink_to(Path(krew_env["KREW_ROOT"]) / "bin" / BINARY)
    # kubectl 1.26+ completes a plugin's arguments by running kubectl_complete-<plugin> from PATH.
    completed = run(krew_env, "kubectl", "__complete", "hami-place", "st")
    assert completed.returncode == 0, completed.stderr
    assert f"About to call: {helper} st" in completed.stderr
    assert [line.split("\t")[0] for line in completed.stdout.splitlines()] == ["status", ":4"]
    verbs = run(krew_env, "kubectl", "__complete", "hami-place", "")
    assert {"pin", "evict", "status", "list", "delete", "completion"} <= {
        line.split("\t")[0] for line in verbs.stdout.splitlines()
    }

    script = run(krew_env, "kubectl", "hami-place", "completion", "bash")
    assert script.returncode == 0, script.stderr
    assert "complete" in script.stdout
