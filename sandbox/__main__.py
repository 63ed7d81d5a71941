"""`python -m sandbox up|down|demo`: the sandbox behind `make sandbox-up`, `make sandbox-down` and `make demo`."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from sandbox import binaries, demo, webhook
from sandbox.cluster import Sandbox, SandboxError, alive, stop_on_signals
from sandbox.prepare import prepare

STATE = Path(".sandbox")
SERVER_NAMESPACE = demo.SERVER_NAMESPACE
# Not the chart's name (gpu-descheduler-webhook): the README's helm install on this sandbox must not meet it. Sorts
# before HAMi's hami-webhook, so a pod goes through ours first, as with the chart.
WEBHOOK_CONFIGURATION = "hami-place-sandbox"


def _say(message: str) -> None:
    print(f"sandbox: {message}", file=sys.stderr, flush=True)


def _pid(state: Path) -> int | None:
    try:
        pid = int((state / "pid").read_text())
    except (OSError, ValueError):
        return None
    return pid if alive(pid) else None


def serve(state: Path) -> int:
    """Runs the sandbox in the foreground until SIGTERM/SIGINT, then stops it and removes what it wrote."""
    stop_on_signals()
    state.mkdir(exist_ok=True)
    kubeconfig = state / "kubeconfig"
    sandbox = None
    server = None
    try:
        sandbox = Sandbox.start(kubeconfig=kubeconfig, log=_say)
        prepare(sandbox)
        # The hami-place webhook too, as the demo runs it: without it a pin is stored and no pod is ever pinned. Its
        # controller's policy is in dry-run, as the chart installs it, for every namespace but the cluster tests'
        # (t-*, on a reused sandbox), whose webhooks and controllers are their own.
        sandbox.kubectl("create", "namespace", SERVER_NAMESPACE)
        policy = demo.defrag_policy("dry-run", include=("*",), exclude=("t-*",))
        sandbox.kubectl("apply", "-f", "-", input=json.dumps(policy))
        server = webhook.start_for_exploring(
            sandbox, sandbox.workdir, SERVER_NAMESPACE, WEBHOOK_CONFIGURATION, *demo.DEFRAG_FLAGS
        )
        _say(f"hami-place webhook at {server.url} (API {server.api}); log: {server.log}")
        pids = [*sandbox.pids(), server.process.pid]
        (state / "components").write_text("".join(f"{pid}\n" for pid in pids))
        (state / "workdir").write_text(str(sandbox.workdir))
        (state / "ready").write_text(sandbox.server)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        return 0
    except SandboxError as exc:
        _say(str(exc))
        return 1
    finally:
        if server is not None:
            server.stop()
        if sandbox is not None:
            sandbox.stop()
        for name in ("ready", "kubeconfig", "pid", "components", "workdir"):
            (state / name).unlink(missing_ok=True)


def up(state: Path, timeout: float = 180) -> int:
    """Starts `serve` detached from this shell and returns once the sandbox is ready."""
    if (pid := _pid(state)) is not None:
        _say(f"already running (pid {pid}); kubeconfig: {state / 'kubeconfig'}")
        return 0
    state.mkdir(exist_ok=True)
    (state / "ready").unlink(missing_ok=True)
    for name in binaries.CONTROL_PLANE:
        binaries.resolve(name)
    log = (state / "sandbox.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "sandbox", "serve", "--dir", str(state)],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    (state / "pid").write_text(str(proc.pid))
    deadline = time.monotonic() + timeout
    while not (state / "ready").exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            _say(f"failed to start; see {state / 'sandbox.log'}:")
            print((state / "sandbox.log").read_text(errors="replace")[-3000:], file=sys.stderr)
            return 1
        time.sleep(0.3)
    _say(f"ready; kubeconfig: {state / 'kubeconfig'}")
    _say(f"try: kubectl --kubeconfig {state / 'kubeconfig'} get nodes")
    return 0


def down(state: Path, timeout: float = 60) -> int:
    """Stops a sandbox started by `up` and waits until its processes are gone."""
    pid = _pid(state)
    if pid is None:
        _say("not running")
        (state / "pid").unlink(missing_ok=True)
        return 0
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while alive(pid):
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            _say(f"pid {pid} did not stop in {timeout:.0f}s; killed it (its components die with it)")
            break
        time.sleep(0.2)
    _say("stopped")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandbox", description=__doc__)
    parser.add_argument("command", choices=("up", "down", "serve", "demo"))
    parser.add_argument("--dir", type=Path, default=STATE, help="state directory (default: .sandbox)")
    args = parser.parse_args(argv)
    try:
        if args.command == "up":
            return up(args.dir)
        if args.command == "down":
            return down(args.dir)
        if args.command == "serve":
            return serve(args.dir)
        return demo.run(args.dir)
    except subprocess.CalledProcessError as exc:
        _say(f"{' '.join(map(str, exc.cmd[:3]))} failed: {(exc.stderr or '').strip()}")
        return 1
    except SandboxError as exc:
        _say(str(exc))
        return 1


if __name__ == "__main__":
    sys.exit(main())
