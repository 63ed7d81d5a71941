"""Packaging without a cluster: the image's entrypoint (run outside a container: there is no Docker engine here),
build-image.sh's argument handling, the krew archive format and the manifest generator."""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import tomllib
from importlib import metadata
from pathlib import Path
from types import ModuleType

import pytest

from kubectl_hami_place import __version__

ROOT = Path(__file__).resolve().parents[2]


def load(name: str) -> ModuleType:
    """packaging/ holds scripts, not a package (the name would shadow the PyPI `packaging`): load one by path."""
    spec = importlib.util.spec_from_file_location(f"hami_place_{name}", ROOT / "packaging" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def final_stage(dockerfile: str) -> list[str]:
    """The instructions after the last FROM, continuation lines joined."""
    lines = dockerfile.replace("\\\n", " ").splitlines()
    start = max(i for i, line in enumerate(lines) if line.startswith("FROM "))
    return [line for line in lines[start:] if line.strip() and not line.lstrip().startswith("#")]


def exec_form(stage: list[str], instruction: str) -> list[str]:
    import json

    (line,) = [line for line in stage if line.startswith(f"{instruction} ")]
    return list(json.loads(line.removeprefix(f"{instruction} ")))


def test_image_final_stage_is_slim_non_root_without_build_tools() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    (arg,) = [line for line in dockerfile.splitlines() if line.startswith("ARG PYTHON_IMAGE=")]
    image = arg.removeprefix("ARG PYTHON_IMAGE=")
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    assert image.startswith(f"python:{requires.removeprefix('>=')}-slim"), "the oldest Python the package supports"
    assert [line for line in dockerfile.splitlines() if line.startswith("FROM ")] == [
        "FROM ${PYTHON_IMAGE} AS build",
        "FROM ${PYTHON_IMAGE}",
    ], "multi-stage, both on the same Python"
    stage = final_stage(dockerfile)
    (user,) = [line for line in stage if line.startswith("USER ")]
    uid = user.split()[1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0, "numeric non-root USER, so runAsNonRoot can verify it"
    body = "\n".join(stage)
    for tool in ("apt-get install", "gcc", "build-essential", "pip install"):
        assert tool not in body


def entrypoint_argv() -> list[str]:
    """The image's ENTRYPOINT as an argv run with this interpreter: the console script's `module:function`."""
    stage = final_stage((ROOT / "Dockerfile").read_text())
    (script,) = exec_form(stage, "ENTRYPOINT")
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert script in scripts, "the ENTRYPOINT is one of the package's console scripts"
    module, function = scripts[script].split(":")
    code = f"import sys; sys.argv[0] = {script!r}; from {module} import {function}; sys.exit({function}())"
    return [sys.executable, "-c", code]


@pytest.mark.parametrize("args", [[], ["--help"], ["serve", "--help"], ["certs", "--help"]])
def test_image_entrypoint_command_runs(args: list[str]) -> None:
    """ENTRYPOINT [+ CMD] as the container would run it (CMD when no arguments are given), without PATH."""
    stage = final_stage((ROOT / "Dockerfile").read_text())
    given = args or [*exec_form(stage, "CMD"), "--help"]
    result = subprocess.run([*entrypoint_argv(), *given], capture_output=True, text=True, check=False, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    if given[0] == "serve":
        for flag in ("--webhook-port", "--api-port", "--tls-cert-file", "--tls-key-file", "--exclude-namespace"):
            assert flag in result.stdout
    if given[0] == "certs":
        for flag in ("--secret", "--dns", "--patch-webhook"):
            assert flag in result.stdout


def test_dockerignore_sends_only_what_the_image_copies() -> None:
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    assert "*" in ignore, "everything is excluded unless listed"
    copies = [line.split()[1:-1] for line in final_stage_all(ROOT / "Dockerfile") if line.startswith("COPY ")]
    sources = {source for words in copies if not words[0].startswith("--from") for source in words}
    wanted = {f"{source}/" if (ROOT / source).is_dir() else source for source in sources}
    assert {line.removeprefix("!") for line in ignore if line.startswith("!")} == wanted


def final_stage_all(path: Path) -> list[str]:
    """Every instruction of every stage, continuation lines joined."""
    return [line for line in path.read_text().replace("\\\n", " ").splitlines() if line.strip()]


def build_image(*args: str, path: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if path is not None:
        env["PATH"] = path
    return subprocess.run(
        [str(ROOT / "build-image.sh"), *args], capture_output=True, text=True, check=False, env=env, timeout=30
    )


def test_build_image_prints_the_buildx_command() -> None:
    result = build_image(
        "--print", "--tag", "1.2.3", "--image", "example.org/hp", "--platform", "linux/amd64,linux/arm64", "--push"
    )
    assert result.returncode == 0, result.stderr
    assert shlex.split(result.stdout) == [
        "docker",
        "buildx",
        "build",
        "--platform",
        "linux/amd64,linux/arm64",
        "--tag",
        "example.org/hp:1.2.3",
        "--file",
        "Dockerfile",
        "--push",
        ".",
    ]
    default = build_image("--print")
    assert f"ghcr.io/hami-place/hami-place-webhook:{__version__}" in default.stdout
    assert "--load" in default.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--platform", "linux/amd64,linux/arm64"], "can only be pushed"),
        (["--bogus"], "unknown argument '--bogus'"),
        (["--tag"], "--tag needs a value"),
    ],
)
def test_build_image_refuses_bad_arguments(args: list[str], message: str) -> None:
    result = build_image(*args)
    assert result.returncode == 2
    assert message in result.stderr


def test_build_image_without_docker_says_what_to_install(tmp_path: Path) -> None:
    tools = tmp_path / "bin"
    tools.mkdir()
    for tool in ("bash", "sed", "head", "dirname"):
        found = shutil.which(tool)
        assert found
        (tools / tool).symlink_to(found)
    result = build_image(path=str(tools))
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "error: docker is not installed or not on PATH; install Docker with the buildx "
        "plugin (or run with --print to see the command)"
    )


def test_archives_are_reproducible_and_hold_the_plugin_and_license(tmp_path: Path) -> None:
    build = load("build")
    members = [("kubectl-hami_place", b"\x7fELF fake", 0o755), ("LICENSE", b"Apache", 0o644)]
    first, second = tmp_path / "a" / "x.tar.gz", tmp_path / "b" / "x.tar.gz"
    build.write_archive(first, members)
    build.write_archive(second, members)
    assert first.read_bytes() == second.read_bytes(), "same executable, same sha256 in the manifest"
    with tarfile.open(first) as archive:
        infos = {m.name: m for m in archive.getmembers()}
        assert set(infos) == {"kubectl-hami_place", "LICENSE"}
        assert infos["kubectl-hami_place"].mode == 0o755
        assert infos["kubectl-hami_place"].uid == 0
    assert gzip.decompress(first.read_bytes())  # a plain gzip stream, as krew expects
    windows = tmp_path / "w.zip"
    build.write_archive(windows, [("kubectl-hami_place.exe", b"MZ", 0o755), ("LICENSE", b"Apache", 0o644)])
    import zipfile

    with zipfile.ZipFile(windows) as archive:
        assert archive.namelist() == ["kubectl-hami_place.exe", "LICENSE"]


def test_the_archive_holds_the_pyinstaller_directory_as_krew_unpacks_it(tmp_path: Path) -> None:
    """Regular files under kubectl-hami_place/ (krew's untar refuses links: one is stored as its target), the
    executable and what PyInstaller marked executable 0755, the rest 0644."""
    build = load("build")
    bundle = tmp_path / "kubectl-hami_place"
    (bundle / "_internal" / "yaml").mkdir(parents=True)
    (bundle / "kubectl-hami_place").write_bytes(b"\x7fELF bootloader")
    (bundle / "kubectl-hami_place").chmod(0o700)
    (bundle / "_internal" / "libpython3.11.so.1.0").write_bytes(b"\x7fELF libpython")
    (bundle / "_internal" / "libpython3.11.so.1.0").chmod(0o755)
    (bundle / "_internal" / "base_library.zip").write_bytes(b"PK")
    (bundle / "_internal" / "base_library.zip").chmod(0o600)
    (bundle / "_internal" / "yaml" / "_yaml.so").symlink_to(bundle / "_internal" / "libpython3.11.so.1.0")
    members = build.bundle_members(bundle, "kubectl-hami_place")
    assert [(name, mode) for name, _, mode in members] == [
        ("kubectl-hami_place/_internal/base_library.zip", 0o644),
        ("kubectl-hami_place/_internal/libpython3.11.so.1.0", 0o755),
        ("kubectl-hami_place/_internal/yaml/_yaml.so", 0o755),
        ("kubectl-hami_place/kubectl-hami_place", 0o755),
    ]
    archive = tmp_path / "x.tar.gz"
    build.write_archive(archive, [*members, ("LICENSE", b"Apache", 0o644)])
    with tarfile.open(archive) as opened:
        infos = {m.name: m for m in opened.getmembers()}
        assert all(info.isreg() for info in infos.values())
        linked = opened.extractfile("kubectl-hami_place/_internal/yaml/_yaml.so")
        assert linked is not None and linked.read() == b"\x7fELF libpython"
    assert "LICENSE" in infos


def test_a_bundle_krew_cannot_unpack_or_without_the_executable_is_refused(tmp_path: Path) -> None:
    build = load("build")
    bundle = tmp_path / "kubectl-hami_place"
    bundle.mkdir()
    (bundle / "other").write_bytes(b"")
    with pytest.raises(SystemExit, match="no kubectl-hami_place in the PyInstaller build"):
        build.bundle_members(bundle, "kubectl-hami_place")
    (bundle / "kubectl-hami_place").write_bytes(b"")
    (bundle / "odd..name").write_bytes(b"")
    with pytest.raises(SystemExit, match=r"refuses an archive member whose name holds '\.\.'"):
        build.bundle_members(bundle, "kubectl-hami_place")


def test_archive_names_round_trip_through_the_manifest_generator() -> None:
    build, generator = load("build"), load("krew_manifest")
    for os_name, arch in (("linux", "amd64"), ("linux", "arm64"), ("darwin", "arm64"), ("windows", "amd64")):
        name = build.archive_name("1.2.3", os_name, arch)
        match = generator.ARCHIVE.match(name)
        assert match and (match["version"], match["os"], match["arch"]) == ("1.2.3", os_name, arch)
    assert build.archive_name("1.2.3", "windows", "amd64").endswith(".zip")


def fake_archive(dist: Path, name: str) -> Path:
    dist.mkdir(parents=True, exist_ok=True)
    path = dist / name
    path.write_bytes(name.encode())
    return path


def test_manifest_has_one_platform_per_archive_with_its_sha256(tmp_path: Path) -> None:
    generator = load("krew_manifest")
    dist = tmp_path / "dist"
    linux = fake_archive(dist, "kubectl-hami_place_v1.2.3_linux_amd64.tar.gz")
    windows = fake_archive(dist, "kubectl-hami_place_v1.2.3_windows_amd64.zip")
    fake_archive(dist, "kubectl-hami_place_v1.2.2_darwin_arm64.tar.gz")  # another version: ignored
    fake_archive(dist, "notes.txt")
    plugin = generator.manifest(dist, "1.2.3", "https://example.org/rel/")
    assert plugin["spec"]["version"] == "v1.2.3"
    platforms = plugin["spec"]["platforms"]
    assert [p["selector"]["matchLabels"] for p in platforms] == [
        {"os": "linux", "arch": "amd64"},
        {"os": "windows", "arch": "amd64"},
    ]
    assert platforms[0]["uri"] == f"https://example.org/rel/{linux.name}"
    assert platforms[0]["sha256"] == hashlib.sha256(linux.read_bytes()).hexdigest()
    assert platforms[1]["sha256"] == hashlib.sha256(windows.read_bytes()).hexdigest()
    # The executable inside the PyInstaller directory the archive holds (bundle_members below).
    assert platforms[0]["bin"] == "kubectl-hami_place/kubectl-hami_place"
    assert platforms[1]["bin"] == "kubectl-hami_place/kubectl-hami_place.exe"
    assert platforms[1]["files"] == [{"from": "kubectl-hami_place", "to": "."}, {"from": "LICENSE", "to": "."}]
    # The chart is where the release publishes it, beside the archives: no ./chart, no placeholder.
    caveats = plugin["spec"]["caveats"]
    assert "helm install gpu-descheduler https://example.org/rel/hami-place-1.2.3.tgz" in caveats
    assert "./chart" not in caveats and "<" not in caveats


def test_manifest_generator_refuses_missing_and_duplicate_archives(tmp_path: Path) -> None:
    generator = load("krew_manifest")
    with pytest.raises(SystemExit, match="run `make dist` first"):
        generator.manifest(tmp_path, "1.2.3", "https://example.org")
    fake_archive(tmp_path, "kubectl-hami_place_v1.2.3_linux_amd64.tar.gz")
    fake_archive(tmp_path, "kubectl-hami_place_v1.2.3_linux_amd64.zip")
    with pytest.raises(SystemExit, match="two archives for linux/amd64"):
        generator.manifest(tmp_path, "1.2.3", "https://example.org")


def test_build_cache_key_follows_the_plugin_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A warm `make dist` reuses the executable only while nothing that goes into it changed."""
    build = load("build")
    (tmp_path / "kubectl_hami_place").mkdir()
    (tmp_path / "packaging").mkdir()
    source = tmp_path / "kubectl_hami_place" / "verb.py"
    source.write_text("A = 1\n")
    for name in ("packaging/entry.py", "packaging/kubectl-hami_place.spec", "pyproject.toml", "LICENSE"):
        (tmp_path / name).write_text(name)
    monkeypatch.setattr(build, "ROOT", tmp_path)
    monkeypatch.setattr(build, "SPEC", tmp_path / "packaging" / "kubectl-hami_place.spec")
    before = build.source_digest()
    assert build.source_digest() == before
    source.write_text("A = 2\n")
    assert build.source_digest() != before
    after = build.source_digest()
    (tmp_path / "LICENSE").write_text("another licence")
    assert build.source_digest() != after, "the cached archive holds LICENSE"
    monkeypatch.setenv("HAMI_PLACE_CACHE", str(tmp_path / "cache"))
    assert build.cache_root() == tmp_path / "cache" / "pyinstaller"


def test_a_warm_build_reuses_its_archive_and_a_new_build_archives_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The archive is cached beside the build it holds: a warm `make dist` copies it instead of compressing again."""
    build = load("build")
    monkeypatch.setattr(build, "ROOT", tmp_path)
    (tmp_path / "LICENSE").write_text("Apache")
    bundle = tmp_path / "cache" / "digest" / "kubectl-hami_place"
    bundle.mkdir(parents=True)
    (bundle / "kubectl-hami_place").write_bytes(b"ELF")
    name = build.archive_name("1.2.3", "linux", "amd64")
    archive = build.cached_archive(bundle, name, "kubectl-hami_place")
    assert archive == bundle.parent / name
    with tarfile.open(archive) as tar:
        assert sorted(tar.getnames()) == ["LICENSE", "kubectl-hami_place/kubectl-hami_place"]
    archive.write_bytes(b"kept")
    assert build.cached_archive(bundle, name, "kubectl-hami_place").read_bytes() == b"kept"


def test_build_cache_keeps_only_the_recent_builds(tmp_path: Path) -> None:
    build = load("build")
    for age in range(5):
        build_dir = tmp_path / f"digest{age}"
        build_dir.mkdir()
        os.utime(build_dir, (1_000_000 - age, 1_000_000 - age))
    build.prune(tmp_path, keep=3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["digest0", "digest1", "digest2"]


def test_the_version_is_written_once_and_every_reader_takes_it_from_there() -> None:
    """kubectl_hami_place.__version__ is the version: pyproject.toml, the installed metadata, the archive name, the
    krew manifest and the image tag all read it."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in pyproject["project"] and "version" in pyproject["project"]["dynamic"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "kubectl_hami_place.__version__"}
    assert metadata.version("hami-place") == __version__, "setuptools took it from the attribute (make venv)"
    assert load("build").project_version() == __version__
    assert load("krew_manifest").project_version() == __version__
    # The install lines name this version's release assets.
    chart = f"releases/download/v{__version__}/hami-place-{__version__}.tgz"
    for doc in ("chart/values.yaml", "README.md", "krew-manifest.yaml"):
        assert chart in (ROOT / doc).read_text(), doc
    assert f"hami-place-webhook:{__version__} " in build_image("--print").stdout
