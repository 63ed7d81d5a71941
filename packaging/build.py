"""Builds the plugin with PyInstaller as one directory and archives it for krew (`make dist`).

The directory, kubectl-hami_place/ (the executable and its _internal/), and its archive are cached outside the repo
under a digest of everything that goes into them (the plugin's sources, the spec, LICENSE, the installed
distributions, Python and PyInstaller), so a warm run only copies them. The archive holds that directory and LICENSE;
the krew manifest's `bin` is the executable inside it.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import hashlib
import importlib.util
import io
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "packaging" / "kubectl-hami_place.spec"
BINARY = "kubectl-hami_place"
# Fixed timestamp inside the archives: the same executable gives the same sha256 in the krew manifest.
EPOCH = 1_700_000_000
# Builds kept in the cache: the current one and a few to switch branches back to.
KEEP_BUILDS = 3
MACHINES = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


def project_version() -> str:
    """The release version, `kubectl_hami_place.__version__`, read from the source without importing the package."""
    text = (ROOT / "kubectl_hami_place" / "__init__.py").read_text()
    match = re.search(r'^__version__ = "([^"]+)"$', text, re.MULTILINE)
    if not match:
        raise SystemExit("no __version__ in kubectl_hami_place/__init__.py")
    return match[1]


def host_platform() -> tuple[str, str]:
    """krew's os/arch names for this machine."""
    system = platform.system().lower()
    machine = platform.machine().lower()
    if machine not in MACHINES:
        raise SystemExit(f"unsupported machine {machine!r}; build on amd64 or arm64")
    return system, MACHINES[machine]


def source_digest() -> str:
    """Everything that changes the executable: a different digest means a rebuild."""
    h = hashlib.sha256()
    files = sorted((ROOT / "kubectl_hami_place").rglob("*.py"))
    files += [SPEC, ROOT / "packaging" / "entry.py", ROOT / "pyproject.toml", ROOT / "LICENSE"]
    for path in files:
        h.update(str(path.relative_to(ROOT)).encode())
        h.update(path.read_bytes())
    installed = sorted(f"{d.metadata['Name']}=={d.version}" for d in metadata.distributions())
    h.update("\n".join(installed).encode())
    h.update(f"{sys.version} {platform.platform()}".encode())
    return h.hexdigest()[:16]


def cache_root() -> Path:
    """Shared with the sandbox binaries' cache (sandbox/binaries.py), outside the repo."""
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "hami-place"
    return Path(os.environ.get("HAMI_PLACE_CACHE", default)) / "pyinstaller"


def build_bundle(log=sys.stderr) -> Path:
    """The cached one-directory build, built first when the sources changed since the last build."""
    target = cache_root() / source_digest() / BINARY
    if target.is_dir():
        os.utime(target.parent)
        print(f"{BINARY}: cached ({target.parent.name})", file=log)
        return target
    if importlib.util.find_spec("PyInstaller") is None:
        raise SystemExit("PyInstaller is not installed; run: make dist (or pip install -e '.[dist]')")
    print(f"{BINARY}: building with PyInstaller (cold cache; this takes a few minutes)", file=log, flush=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        cmd = [
            sys.executable,
            "-m",
            "PyInstaller",
            "--noconfirm",
            "--clean",
            "--log-level",
            "WARN",
            "--distpath",
            str(Path(tmp) / "dist"),
            "--workpath",
            str(Path(tmp) / "work"),
            str(SPEC),
        ]
        subprocess.run(cmd, cwd=ROOT, check=True)
        os.replace(Path(tmp) / "dist" / BINARY, target)
    prune(target.parent.parent, keep=KEEP_BUILDS)
    return target


def prune(root: Path, keep: int) -> None:
    """Drops all but the `keep` most recently used builds: each is tens of MB, and sources change often."""
    builds = sorted((d for d in root.iterdir() if d.is_dir()), key=lambda d: d.stat().st_mtime, reverse=True)
    for old in builds[keep:]:
        shutil.rmtree(old, ignore_errors=True)


def _tar_member(name: str, data: bytes, mode: int) -> tuple[tarfile.TarInfo, io.BytesIO]:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, EPOCH
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info, io.BytesIO(data)


def write_archive(path: Path, members: list[tuple[str, bytes, int]]) -> None:
    """A reproducible tar.gz (zip for Windows): fixed order, owner and timestamps."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.tmp")
    if path.name.endswith(".zip"):
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
            for name, data, mode in members:
                info = zipfile.ZipInfo(name, date_time=(2023, 11, 14, 22, 13, 20))
                info.external_attr = mode << 16
                info.compress_type = zipfile.ZIP_DEFLATED
                archive.writestr(info, data)
    else:
        with (
            partial.open("wb") as raw,
            gzip.GzipFile(fileobj=raw, mode="wb", mtime=EPOCH, filename="") as gz,
            tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as archive,
        ):
            for name, data, mode in members:
                archive.addfile(*_tar_member(name, data, mode))
    partial.replace(path)


def bundle_members(bundle: Path, exe_name: str) -> list[tuple[str, bytes, int]]:
    """The build's files under `kubectl-hami_place/`, sorted, as krew unpacks them: regular files only (its untar
    refuses links, so a link is stored as what it points to), 0755 for the executable and what PyInstaller marked
    executable, else 0644."""
    members = []
    for directory, _, names in os.walk(bundle, followlinks=True):
        for name in names:
            path = Path(directory) / name
            relative = path.relative_to(bundle).as_posix()
            if ".." in relative:
                raise SystemExit(f"{path}: krew refuses an archive member whose name holds '..'; rename it")
            executable = relative == exe_name or os.access(path, os.X_OK)
            members.append((f"{BINARY}/{relative}", path.read_bytes(), 0o755 if executable else 0o644))
    if not any(name == f"{BINARY}/{exe_name}" for name, _, _ in members):
        raise SystemExit(f"{bundle}: no {exe_name} in the PyInstaller build")
    return sorted(members)


def archive_name(version: str, os_name: str, arch: str) -> str:
    """kubectl-hami_place_v<version>_<os>_<arch>.tar.gz; the manifest generator parses this name back."""
    return f"{BINARY}_v{version}_{os_name}_{arch}.{'zip' if os_name == 'windows' else 'tar.gz'}"


def cached_archive(bundle: Path, name: str, exe_name: str) -> Path:
    """The build's archive, kept beside it in the cache: compressing 80 MB is most of a warm `make dist`."""
    path = bundle.parent / name
    if not path.is_file():
        members = bundle_members(bundle, exe_name)
        write_archive(path, [*members, ("LICENSE", (ROOT / "LICENSE").read_bytes(), 0o644)])
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dist", type=Path, default=ROOT / "dist", help="output directory (default: dist/)")
    args = parser.parse_args(argv)
    os_name, arch = host_platform()
    exe_name = f"{BINARY}.exe" if os_name == "windows" else BINARY
    with one_build_at_a_time():
        bundle = build_bundle()
        args.dist.mkdir(parents=True, exist_ok=True)
        copy = args.dist / BINARY
        if copy.is_dir():
            shutil.rmtree(copy)
        else:
            copy.unlink(missing_ok=True)  # a one-file build of before this layout
        shutil.copytree(bundle, copy)
        archive = args.dist / archive_name(project_version(), os_name, arch)
        shutil.copyfile(cached_archive(bundle, archive.name, exe_name), archive)
    sys.stdout.write(f"{archive}\n")
    return 0


@contextlib.contextmanager
def one_build_at_a_time() -> Iterator[None]:
    """`make test` builds in the background while the krew tests may ask for the same build: the later `make dist`
    waits for the first, then copies what it cached. POSIX only: the release jobs build one at a time."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    cache_root().mkdir(parents=True, exist_ok=True)
    with (cache_root() / ".build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


if __name__ == "__main__":
    sys.exit(main())
