"""Writes krew-manifest.yaml from the plugin archives in dist/ (`make krew-manifest`): one platform per archive.

Each platform gets the archive's download URI and its sha256, so the manifest only ever describes archives that
were actually built. The release workflow collects every runner's archive into dist/ and runs this once.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
PLUGIN = "hami-place"
BINARY = "kubectl-hami_place"
REPOSITORY = "https://github.com/hami-place/hami-place"
ARCHIVE = re.compile(
    rf"^{BINARY}_v(?P<version>[^_]+)_(?P<os>linux|darwin|windows)_(?P<arch>amd64|arm64)"
    r"\.(?:tar\.gz|zip)$"
)

DESCRIPTION = """\
Pin a pod of a HAMi GPU cluster to an exact node and card, evict a pod to make room for it,
and see every card's memory, cores, slots and pods at a glance.

  kubectl hami-place status                       # every node and card, and fragmentation
  kubectl hami-place pin -l app=train --node gpu-0 --gpu gpu-1/50
  kubectl hami-place evict POD --to-node NODE --gpu gpu-0

Placements are honoured by the hami-place admission webhook (its Helm chart is published with each release).
"""


def caveats(version: str, base_url: str) -> str:
    """What to do after installing: the server's chart from the same release as the archives, and completion."""
    chart = f"{base_url.rstrip('/')}/hami-place-{version}.tgz"
    return f"""\
Placements take effect only where the hami-place webhook runs; install its chart from this release:
  helm install gpu-descheduler {chart} \\
    -n kube-system --create-namespace
Check that the plugin and the server match: kubectl hami-place version

For kubectl's shell completion of this plugin (kubectl 1.26+), put the completion helper on PATH:
  ln -s "$(command -v kubectl-hami_place)" "$HOME/.local/bin/kubectl_complete-hami_place"
"""


def project_version() -> str:
    """The release version, `kubectl_hami_place.__version__`, read from the source without importing the package."""
    text = (ROOT / "kubectl_hami_place" / "__init__.py").read_text()
    match = re.search(r'^__version__ = "([^"]+)"$', text, re.MULTILINE)
    if not match:
        raise SystemExit("no __version__ in kubectl_hami_place/__init__.py")
    return match[1]


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def platform_entry(archive: Path, os_name: str, arch: str, base_url: str) -> dict[str, Any]:
    """One krew platform: what selects it, where its archive is, and which file is the plugin: the executable in
    the PyInstaller directory the archive holds (packaging/build.py), which finds its _internal/ beside it through
    the link krew makes."""
    exe = f"{BINARY}.exe" if os_name == "windows" else BINARY
    return {
        "selector": {"matchLabels": {"os": os_name, "arch": arch}},
        "uri": f"{base_url.rstrip('/')}/{archive.name}",
        "sha256": sha256(archive),
        "files": [{"from": BINARY, "to": "."}, {"from": "LICENSE", "to": "."}],
        "bin": f"{BINARY}/{exe}",
    }


def manifest(dist: Path, version: str, base_url: str) -> dict[str, Any]:
    """The krew Plugin object for every archive of this version in dist."""
    platforms: dict[tuple[str, str], dict[str, Any]] = {}
    for archive in sorted(dist.iterdir()):
        match = ARCHIVE.match(archive.name)
        if not match or match["version"] != version:
            continue
        key = (match["os"], match["arch"])
        if key in platforms:
            raise SystemExit(f"two archives for {key[0]}/{key[1]} in {dist}; keep one")
        platforms[key] = platform_entry(archive, *key, base_url)
    if not platforms:
        raise SystemExit(f"no {BINARY}_v{version}_<os>_<arch> archive in {dist}; run `make dist` first")
    return {
        "apiVersion": "krew.googlecontainertools.github.com/v1alpha2",
        "kind": "Plugin",
        "metadata": {"name": PLUGIN},
        "spec": {
            "version": f"v{version}",
            "homepage": REPOSITORY,
            "shortDescription": "Pin HAMi GPU pods to exact nodes and cards",
            "description": DESCRIPTION,
            "caveats": caveats(version, base_url),
            "platforms": [platforms[key] for key in sorted(platforms)],
        },
    }


class _Dumper(yaml.SafeDumper):
    """Multi-line strings as literal blocks, so the manifest reads like a hand-written one."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def main(argv: list[str] | None = None) -> int:
    version = project_version()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dist", type=Path, default=ROOT / "dist", help="directory of the archives (default: dist/)")
    parser.add_argument("--out", type=Path, default=ROOT / "krew-manifest.yaml", help="manifest to write")
    parser.add_argument(
        "--base-url",
        default=f"{REPOSITORY}/releases/download/v{version}",
        help="where the archives are published (default: the GitHub release of this version)",
    )
    args = parser.parse_args(argv)
    text = yaml.dump(manifest(args.dist, version, args.base_url), Dumper=_Dumper, sort_keys=False, width=120)
    args.out.write_text(text)
    sys.stdout.write(f"{args.out}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
