"""Resolve one release platform's dependency set from constraints.txt to wheels only, from any machine:
`python packaging/wheels.py linux arm64 dist` fails when a dependency has no wheel for linux/arm64 (as uvloop has none
for Windows), so CI catches it before a tagged release needs every platform."""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTHON_VERSION = "3.11"

# The oldest system each artifact runs on: the plugin is built on ubuntu-22.04 (glibc 2.35), macOS 13 (Intel) and
# macOS 14 (Apple silicon) runners; the image's base is Debian bookworm (glibc 2.36).
GLIBC_MINOR = {"dist": 35, "server": 36}
MACHINE = {
    ("linux", "amd64"): "x86_64",
    ("linux", "arm64"): "aarch64",
    ("darwin", "amd64"): "x86_64",
    ("darwin", "arm64"): "arm64",
    ("windows", "amd64"): "amd64",
}
MACOS = {"x86_64": "13_0", "arm64": "14_0"}


def platform_tags(os_name: str, arch: str, extras: str) -> list[str]:
    """Every wheel platform tag that system accepts (pip expands macOS versions itself, not glibc ones)."""
    machine = MACHINE[(os_name, arch)]
    if os_name == "linux":
        newest = GLIBC_MINOR.get(extras, min(GLIBC_MINOR.values()))
        legacy = [f"manylinux2014_{machine}"] + ([f"manylinux2010_{machine}"] if machine == "x86_64" else [])
        return [f"manylinux_2_{minor}_{machine}" for minor in range(newest, 16, -1)] + legacy
    if os_name == "darwin":
        return [f"macosx_{MACOS[machine]}_{machine}"]
    return [f"win_{machine}"]


def download_command(os_name: str, arch: str, extras: str, dest: Path) -> list[str]:
    """pip download of `.[extras]` at the constraints' versions, wheels only, for that platform's CPython."""
    platforms = [arg for tag in platform_tags(os_name, arch, extras) for arg in ("--platform", tag)]
    return [
        sys.executable, "-m", "pip", "download", "--quiet", "--dest", str(dest), "--only-binary", ":all:",
        *platforms, "--python-version", PYTHON_VERSION, "--implementation", "cp",
        "-c", str(ROOT / "constraints.txt"), f"{ROOT}[{extras}]",
    ]  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("os", choices=sorted({os_name for os_name, _ in MACHINE}))
    parser.add_argument("arch", choices=sorted({arch for _, arch in MACHINE}))
    parser.add_argument("extras", help="the set: dist (the plugin's release build) or server (the image)")
    args = parser.parse_args()
    if (args.os, args.arch) not in MACHINE:
        parser.error(f"{args.os}/{args.arch} is not a release platform")
    with tempfile.TemporaryDirectory() as dest:
        done = subprocess.run(download_command(args.os, args.arch, args.extras, Path(dest)), check=False)
        wheels = len(list(Path(dest).glob("*.whl")))
    if done.returncode != 0:
        sys.stderr.write(f"error: {args.os}/{args.arch} [{args.extras}] does not resolve to wheels; see pip above\n")
        return 1
    sys.stdout.write(f"{args.os}/{args.arch} [{args.extras}]: {wheels} wheels\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
