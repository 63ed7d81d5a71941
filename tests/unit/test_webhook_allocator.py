"""A large block freed goes back to the kernel once the allocator's thresholds are fixed (a fresh interpreter each)."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from webhook.allocator import ARENAS, FREEZE_WAIT_SECONDS, freeze_when_synced

# A 20 MiB block freed (which raises glibc's default thresholds), then 16 MiB blocks freed under a small one.
CHURN = """
import sys
from webhook.allocator import return_freed_memory

def anon_mib():
    return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("RssAnon")) // 1024

if not return_freed_memory():
    sys.exit(3)
before = anon_mib()
block = bytes(20 << 20)
del block
kept = []
for _ in range(5):
    block = bytearray(16 << 20)
    kept.append(bytearray(4096))
    del block
print(anon_mib() - before)
"""


def test_a_freed_large_block_leaves_the_process() -> None:
    run = subprocess.run([sys.executable, "-c", CHURN], capture_output=True, text=True, check=False)
    if run.returncode == 3:
        pytest.skip("this C library has no mallopt (not glibc)")
    assert run.returncode == 0, run.stderr
    assert int(run.stdout) < 8, f"{run.stdout.strip()} MiB stayed with the process after the blocks were freed"


# Eight threads alive at once, each allocating from glibc (blocks past pymalloc's 512 B); glibc's malloc_stats()
# then prints one "Arena N:" heading per arena to stderr.
THREADS = """
import ctypes
import sys
import threading
from webhook.allocator import return_freed_memory

if not return_freed_memory():
    sys.exit(3)
barrier = threading.Barrier(8)

def work():
    blocks = [bytearray(4096) for _ in range(64)]
    barrier.wait()
    del blocks

threads = [threading.Thread(target=work) for _ in range(8)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
ctypes.CDLL(None).malloc_stats()
"""


def test_the_threads_share_the_arenas_there_are() -> None:
    run = subprocess.run([sys.executable, "-c", THREADS], capture_output=True, text=True, check=False)
    if run.returncode == 3:
        pytest.skip("this C library has no mallopt (not glibc)")
    assert run.returncode == 0, run.stderr
    arenas = [line for line in run.stderr.splitlines() if line.startswith("Arena ")]
    assert 1 <= len(arenas) <= ARENAS, run.stderr


class NeverSynced:
    """A cache whose first sync never comes; each wait for it records its timeout and, the first time, stops."""

    def __init__(self, stop: threading.Event) -> None:
        self.stop = stop
        self.waits: list[float | None] = []

    def wait_ready(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout)
        self.stop.set()
        return False


def test_the_wait_for_the_first_sync_looks_whether_the_server_is_stopping() -> None:
    """A server stopped before its first sync (an API server away) lets this thread end at its next look."""
    stop = threading.Event()
    cache = NeverSynced(stop)
    freeze_when_synced(cache, stop)  # type: ignore[arg-type]  # the one method it calls
    assert cache.waits == [FREEZE_WAIT_SECONDS]
