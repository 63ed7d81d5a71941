"""Where the sandbox finds its binaries: envtest's KUBEBUILDER_ASSETS first, else a cache keyed by version."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from sandbox import binaries


def test_envtest_assets_are_used_when_they_hold_an_executable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    apiserver = tmp_path / "kube-apiserver"
    apiserver.write_text("#!/bin/sh\n")
    apiserver.chmod(0o755)
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path))
    assert binaries.resolve("kube-apiserver") == apiserver


def test_a_non_executable_asset_is_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "etcd").write_text("not a program")
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path))
    assert binaries._envtest_asset("etcd") is None


def test_the_cache_is_outside_the_repo_and_keyed_by_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HAMI_PLACE_CACHE", str(tmp_path))
    path = binaries.cached_path(binaries.COMPONENTS["kube-apiserver"])
    assert path.is_relative_to(tmp_path / "bin")
    assert path.parent.name.startswith(f"kube-apiserver-{binaries.KUBERNETES_VERSION}-")
    assert path.name == "kube-apiserver"
    etcd = binaries.cached_path(binaries.COMPONENTS["etcd"])
    assert etcd.parent.name.startswith(f"etcd-{binaries.ETCD_VERSION}-")


def test_a_cached_binary_is_returned_without_building(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HAMI_PLACE_CACHE", str(tmp_path))
    monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    monkeypatch.setenv("PATH", "")  # no go: a build would fail, so success proves nothing was built
    cached = binaries.cached_path(binaries.COMPONENTS["kwok"])
    cached.parent.mkdir(parents=True)
    cached.write_text("#!/bin/sh\n")
    assert binaries.resolve("kwok") == cached


def test_hamis_scheduler_is_cached_by_the_digest_of_its_source_archive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HAMI_PLACE_CACHE", str(tmp_path / "cache"))
    archive = tmp_path / "HAMi.tar.gz"
    archive.write_bytes(b"one source")
    monkeypatch.setenv("HAMI_PLACE_HAMI_ARCHIVE", str(archive))
    component = binaries.COMPONENTS["hami-scheduler"]
    first = binaries.cached_path(component)
    assert first.parent.name.startswith(f"hami-scheduler-{binaries.HAMI_VERSION}-")
    assert binaries.cached_path(component) == first
    archive.write_bytes(b"another source")
    assert binaries.cached_path(component) != first, "a changed archive must not reuse the old build"


def test_a_missing_hami_archive_says_where_it_was_looked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(binaries, "HACK", Path("/nonexistent/repo/hack"))
    monkeypatch.delenv("HAMI_PLACE_HAMI_ARCHIVE", raising=False)
    with pytest.raises(FileNotFoundError, match="HAMI_PLACE_HAMI_ARCHIVE"):
        binaries.hami_archive()


def test_concurrent_builds_of_one_binary_run_go_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fake `go` on PATH counts its runs; two sessions resolving the same binary at once build it once."""
    fake_bin = tmp_path / "fakebin"
    fake_bin.mkdir()
    runs = tmp_path / "runs"
    go = fake_bin / "go"
    go.write_text(
        '#!/bin/sh\necho run >> "$RUNS"\nsleep 1\n'
        'while [ "$1" != "-o" ]; do shift; done\nprintf "#!/bin/sh\\n" > "$2"\nchmod +x "$2"\n'
    )
    go.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake_bin}:{os.environ['PATH']}")
    monkeypatch.setenv("RUNS", str(runs))
    monkeypatch.setenv("HAMI_PLACE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    with ThreadPoolExecutor(2) as pool:
        built = list(pool.map(lambda _: binaries.resolve("kwok"), range(2)))
    assert built[0] == built[1] and built[0].is_file()
    assert runs.read_text().splitlines() == ["run"]
