"""How long the plugin takes to answer at the prompt, side by side with kubectl itself.

Runs, interleaved so that a busy box slows each alike, `kubectl version --client` (the sandbox's kubectl),
`kubectl-hami_place --help` and `evict --help` (a verb's help: it parses the root's options first), and TAB
completions of a verb (`kubectl_complete-hami_place st`) and of an option (`evict --to`), from the installed package
(the console scripts beside this interpreter), N times each, and prints the median and p95 wall time of each, and the
median CPU time (user + system: what a busy box inflates least). A help is printed on a pseudo-terminal, as at the
prompt; a completion into a pipe, as kubectl reads it. No cluster is needed: none of them reaches one.

`--floor` adds what no CLI of ours can go under on this interpreter: `python -c pass`, and a bare typer app (two
commands, no options, our Typer settings and command classes) asked for --help and completing `st` as our completer
does. `--frozen PATH` (repeatable) adds a PyInstaller build of the plugin: its --help, and its completion through a
link named `kubectl_complete-hami_place` (the name kubectl runs; packaging/entry.py picks the completer by it).
"""

from __future__ import annotations

import argparse
import compileall
import os
import pty
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sandbox import binaries

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = Path(sys.executable).parent


# A typer app with none of our verbs, built and asked as app.py and _completion.complete_words do.
BARE_TYPER = """
import sys
from typer._click.shell_completion import ShellComplete
from typer.main import get_command
from kubectl_hami_place.cli._typer_app import Command, typer_app

app = typer_app("bare", "A bare app.")
app.command("status", cls=Command, help="Show the cards.")(lambda: None)
app.command("version", cls=Command, help="Print the versions.")(lambda: None)
if sys.argv[1] == "--help":
    app(args=["--help"], prog_name="bare", standalone_mode=False)
else:
    class Words(ShellComplete):
        name, source_template = "kubectl", ""
        def source_vars(self):
            return {}
        def get_completion_args(self):
            return sys.argv[1:-1], sys.argv[-1]
        def format_completion(self, item):
            return item.value
    sys.stdout.write(Words(get_command(app), {}, "bare", "").complete() + "\\n")
"""


def commands(floor: bool, frozen: list[Path], links: Path) -> dict[str, list[str]]:
    """The command lines timed, by the label printed; a frozen build's completer is a link to it in `links`. A
    label with --help is run on a pseudo-terminal."""
    plugin, completer = str(SCRIPTS / "kubectl-hami_place"), str(SCRIPTS / "kubectl_complete-hami_place")
    timed = {
        "kubectl version --client": [str(binaries.resolve("kubectl")), "version", "--client"],
        "kubectl-hami_place --help": [plugin, "--help"],
        "kubectl-hami_place evict --help": [plugin, "evict", "--help"],
        "kubectl_complete-hami_place st": [completer, "st"],
        "kubectl_complete-hami_place evict --to": [completer, "evict", "--to"],
    }
    if floor:
        timed["floor: python -c pass"] = [sys.executable, "-c", "pass"]
        timed["floor: bare typer app --help"] = [sys.executable, "-c", BARE_TYPER, "--help"]
        timed["floor: bare typer app, complete st"] = [sys.executable, "-c", BARE_TYPER, "st"]
    for number, binary in enumerate(frozen, start=1):
        link = links / str(number) / "kubectl_complete-hami_place"
        link.parent.mkdir()
        link.symlink_to(binary.resolve())
        timed[f"frozen {number}: --help"] = [str(binary), "--help"]
        timed[f"frozen {number}: complete st"] = [str(link), "st"]
    return timed


def wall_time(argv: list[str], tty: bool) -> tuple[float, float]:
    """Seconds from start to exit of one run, and its CPU seconds; a failing run stops the bench (it would time an
    error path). With `tty`, its output goes to a pseudo-terminal, read until it closes."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    if tty:
        _on_a_terminal(argv)
    else:
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def _on_a_terminal(argv: list[str]) -> None:
    """Runs `argv` with its stdout on a pseudo-terminal, draining it (a full terminal would block the writer)."""
    reader, writer = pty.openpty()
    try:
        process = subprocess.Popen(argv, stdout=writer, stderr=subprocess.PIPE)
    finally:
        os.close(writer)
    try:
        while True:
            try:
                if not os.read(reader, 65536):
                    break
            except OSError:  # EIO: the child closed the terminal
                break
    finally:
        os.close(reader)
    _, stderr = process.communicate()
    if process.returncode:
        raise subprocess.CalledProcessError(process.returncode, argv, stderr=stderr)


def p95(samples: list[float]) -> float:
    """The 95th percentile (inclusive method, so it stays within what was measured)."""
    return statistics.quantiles(samples, n=20, method="inclusive")[-1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--runs", type=int, default=30, help="runs of each command (default 30)")
    parser.add_argument("--floor", action="store_true", help="also time python alone and a bare typer app")
    parser.add_argument(
        "--frozen", type=Path, action="append", default=[], metavar="PATH", help="also time this PyInstaller build"
    )
    parser.add_argument(
        "--demo-status",
        action="store_true",
        help="instead: start the demo's sandbox (its GPU nodes, pods and hami-place webhook behind its Service) and "
        "time `kubectl hami-place status` beside `kubectl get nodes` on it",
    )
    args = parser.parse_args(argv)
    if args.runs < 2:
        parser.error("--runs needs at least 2 (for the p95)")
    # As installed: pip and the krew build ship the modules compiled. This machine sets PYTHONDONTWRITEBYTECODE, so
    # a checkout's runs would compile every module of ours at each start, warm-up or not (~0.2 s of CPU).
    compileall.compile_dir(ROOT / "kubectl_hami_place", quiet=1)
    if args.demo_status:
        return _demo_status(args.runs)
    for number, binary in enumerate(args.frozen, start=1):
        print(f"frozen {number}: {binary}")
    with tempfile.TemporaryDirectory() as links:
        return _run(commands(args.floor, args.frozen, Path(links)), args.runs)


def _demo_status(runs: int) -> int:
    """`status` on the demo's cluster as `make demo` starts it (its GPU nodes and webhook, before its story's pods),
    beside kubectl's own read."""
    from sandbox import demo, webhook
    from sandbox.cluster import Sandbox
    from sandbox.prepare import prepare

    with tempfile.TemporaryDirectory(prefix="hami-place-status-") as tmp:
        sandbox = Sandbox.start(Path(tmp) / "sandbox")
        server = None
        try:
            prepare(sandbox)
            sandbox.kubectl("create", "namespace", demo.SERVER_NAMESPACE)
            server = webhook.start_for_exploring(
                sandbox, sandbox.workdir, demo.SERVER_NAMESPACE, "gpu-descheduler-webhook"
            )
            kubectl = sandbox.bin("kubectl")
            config = ["--kubeconfig", str(sandbox.kubeconfig)]
            plugin = str(Path(sys.executable).with_name("kubectl-hami_place"))
            return _run(
                {
                    "kubectl get nodes": [kubectl, *config, "get", "nodes"],
                    "kubectl hami-place status": [plugin, "status", *config],
                    "kubectl hami-place status -o json": [plugin, "status", *config, "-o", "json"],
                },
                runs,
            )
        finally:
            if server is not None:
                server.stop()
            sandbox.stop()


def _run(timed: dict[str, list[str]], runs: int) -> int:
    """Times each command `runs` times, interleaved, and prints the table."""
    for label, command in timed.items():
        wall_time(command, "--help" in label)  # warm the page cache and the bytecode cache before timing
    samples: dict[str, list[tuple[float, float]]] = {label: [] for label in timed}
    print(f"load average at the start: {' '.join(f'{load:.2f}' for load in os.getloadavg())}")
    for _ in range(runs):
        for label, command in timed.items():
            samples[label].append(wall_time(command, "--help" in label))
    print(f"load average at the end: {' '.join(f'{load:.2f}' for load in os.getloadavg())}")
    print(f"{'command':<40} {'median':>8} {'p95':>8} {'CPU':>8}   ({runs} runs each, interleaved)")
    for label, runs_of in samples.items():
        walls = [wall for wall, _ in runs_of]
        cpu = statistics.median(cpu for _, cpu in runs_of)
        print(f"{label:<40} {statistics.median(walls):>7.3f}s {p95(walls):>7.3f}s {cpu:>7.3f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
