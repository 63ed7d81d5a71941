"""The dependency sets: `pip install hami-place` carries what the plugin's package imports and nothing of the server's,
the `server` extra the rest of what the server imports, and every install (make, the image, the release jobs) takes
its versions from constraints.txt, which must satisfy pyproject.toml."""

from __future__ import annotations

import importlib.util
import re
import tomllib
from importlib import metadata
from pathlib import Path
from types import ModuleType

import grimp
import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
SERVER_ONLY = {"flask", "werkzeug", "waitress", "uvicorn", "uvloop", "httptools", "prometheus-client", "cryptography"}


def requirements(extra: str | None = None) -> dict[str, Requirement]:
    """The direct requirements of the base set or of one extra, by canonical name."""
    lines = PROJECT["dependencies"] if extra is None else PROJECT["optional-dependencies"][extra]
    return {canonicalize_name(req.name): req for req in map(Requirement, lines)}


def pins(path: Path) -> dict[str, str]:
    """`name==version` lines of a constraints file (markers and comments aside), by canonical name."""
    found = {}
    for line in path.read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9._-]+)==([^\s;\\]+)", line)
        if match:
            found[canonicalize_name(match[1])] = match[2]
    return found


def imported_distributions(package: str) -> set[str]:
    """The distributions whose modules `package` imports, directly or through its own modules."""
    graph = grimp.build_graph(package, "kubectl_hami_place", include_external_packages=True)
    top_level = {name.split(".")[0] for name in graph.modules if not name.startswith(("kubectl_hami_place", "webhook"))}
    reached = set()
    for module in graph.find_descendants(package) | {package}:
        reached |= {m.split(".")[0] for m in graph.find_upstream_modules(module)} & top_level
    by_module = metadata.packages_distributions()
    return {canonicalize_name(dist) for module in reached for dist in by_module.get(module, [])}


def test_the_plugin_set_is_what_its_package_imports_and_nothing_of_the_server() -> None:
    base = set(requirements())
    assert imported_distributions("kubectl_hami_place") <= base, "an import of the plugin's package is undeclared"
    assert not base & SERVER_ONLY, "a server library would be installed with the plugin"


def test_the_server_extra_covers_what_the_server_imports() -> None:
    declared = set(requirements()) | set(requirements("server"))
    assert imported_distributions("webhook") <= declared
    assert set(requirements("server")) == SERVER_ONLY


def test_uvloop_is_left_out_on_windows_where_it_has_no_wheel() -> None:
    uvloop = requirements("server")["uvloop"]
    assert uvloop.marker is not None
    assert not uvloop.marker.evaluate({"sys_platform": "win32"})
    assert uvloop.marker.evaluate({"sys_platform": "linux"})


@pytest.mark.parametrize("extra", [None, "server", "test", "dist", "bench", "mutation"])
def test_constraints_pin_every_direct_dependency_within_pyproject(extra: str | None) -> None:
    """A changed range in pyproject.toml without `make constraints` fails here."""
    locked = pins(ROOT / "constraints.txt")
    for name, req in requirements(extra).items():
        assert name in locked, f"{name} is not in constraints.txt: run `make constraints`"
        assert req.specifier.contains(locked[name], prereleases=True), (
            f"constraints.txt pins {name}=={locked[name]} outside {req.specifier}: run `make constraints`"
        )


def test_every_install_takes_its_versions_from_constraints() -> None:
    makefile = (ROOT / "Makefile").read_text()
    venv = "pip install --python $(PY) --compile-bytecode --quiet $(CONSTRAINTS) -e '.[test,server,dist]'"
    assert venv in makefile, "make venv: the tests, the server and the plugin's build, in one install"
    # make test runs `make lint` and `make dist` beside the cluster tests: an install there would reinstall the
    # editable package while tests start hami-place-webhook (a fresh-clone run once failed on the missing script)
    for target in ("lint", "dist"):
        recipe = re.search(rf"^{target}:.*\n((?:\t.*\n)*)", makefile, re.MULTILINE)
        assert recipe and "pip install" not in recipe.group(1), f"make {target} installs nothing"
    assert "CONSTRAINTS := -c constraints.txt" in makefile
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "pip install -c constraints.txt '.[server]'" in dockerfile, "the image: the server's set only"
    assert "!constraints.txt" in (ROOT / ".dockerignore").read_text()
    release = (ROOT / ".github" / "workflows" / "release.yml").read_text()
    installs = [line.strip() for line in release.splitlines() if "pip install" in line]
    assert installs and all("-c constraints.txt" in line for line in installs)
    assert any("'.[dist]'" in line for line in installs), "the plugin jobs: the plugin's set and PyInstaller"


def load_wheels() -> ModuleType:
    """packaging/wheels.py by path (packaging/ is not a package: the name would shadow the PyPI `packaging`)."""
    spec = importlib.util.spec_from_file_location("hami_place_wheels", ROOT / "packaging" / "wheels.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_ci_resolves_the_wheels_of_every_platform_the_release_builds_the_plugin_for() -> None:
    workflows = ROOT / ".github" / "workflows"
    release = yaml.safe_load((workflows / "release.yml").read_text())["jobs"]["plugin"]["strategy"]["matrix"]
    checked = yaml.safe_load((workflows / "ci.yml").read_text())["jobs"]["wheels"]["strategy"]["matrix"]
    built = {(entry["os"], entry["arch"]) for entry in release["include"]}
    assert built == {(entry["os"], entry["arch"]) for entry in checked["include"] if entry["extras"] == "dist"}
    assert {(entry["os"], entry["arch"]) for entry in checked["include"] if entry["extras"] == "server"} == {
        ("linux", "amd64"),
        ("linux", "arm64"),
    }, "the image's platforms"
    assert built <= set(load_wheels().MACHINE)


@pytest.mark.parametrize(
    ("os_name", "arch", "accepted", "refused"),
    [
        ("linux", "amd64", ["manylinux_2_35_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"], []),
        ("linux", "arm64", ["manylinux_2_28_aarch64", "manylinux2014_aarch64"], ["manylinux_2_36_aarch64"]),
        ("darwin", "arm64", ["macosx_14_0_arm64"], []),
        ("windows", "amd64", ["win_amd64"], []),
    ],
)
def test_a_platform_accepts_the_wheels_its_oldest_build_machine_runs(
    os_name: str, arch: str, accepted: list[str], refused: list[str]
) -> None:
    """pip does not expand a glibc version to the older ones: every manylinux tag down to 2.17 is listed."""
    tags = load_wheels().platform_tags(os_name, arch, "dist")
    assert set(accepted) <= set(tags)
    assert not set(refused) & set(tags)


@pytest.mark.parametrize("extra", [None, "server"])
def test_the_floors_ci_installs_are_pyproject_floors(extra: str | None) -> None:
    """constraints-floors.txt holds each runtime dependency at its `>=` bound, so CI's floors job tests the floors."""
    floors = pins(ROOT / "constraints-floors.txt")
    for name, req in requirements(extra).items():
        (lower,) = [spec.version for spec in req.specifier if spec.operator == ">="]
        assert name in floors, f"{name} has no floor in constraints-floors.txt"
        assert Version(floors[name]) == Version(lower), f"{name}: the floor tested is {floors[name]}, pyproject {lower}"
