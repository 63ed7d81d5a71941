"""`make demo`: a sandbox with fake HAMi GPU nodes, their cards in a table, and how to point kubectl at it."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from kubectl_hami_place.core.cards import parse_register
from sandbox.cluster import Sandbox, stop_on_signals
from sandbox.gpu_nodes import REGISTER_ANNOTATION
from sandbox.prepare import prepare


def cards_table(sandbox: Sandbox) -> Table:
    """Every card of every GPU node, read back from the API and decoded as HAMi decodes it."""
    table = Table(title="HAMi GPU cards in the sandbox")
    for column in ("node", "card", "uuid", "model", "numa", "memory", "cores", "split", "health"):
        table.add_column(column)
    for node in sandbox.get("/api/v1/nodes?labelSelector=gpu%3Don")["items"]:
        name = node["metadata"]["name"]
        for card in parse_register(node["metadata"]["annotations"][REGISTER_ANNOTATION]):
            table.add_row(name, f"gpu-{card.index}", card.uuid, card.type, str(card.numa),
                          f"{card.devmem} MiB", str(card.devcore), str(card.count),
                          "healthy" if card.health else "unhealthy")
    return table


def run(state: Path) -> int:
    """Brings the sandbox up in the foreground; stops it on Ctrl-C (or at once when not on a terminal)."""
    console = Console(stderr=False)
    stop_on_signals()
    state.mkdir(exist_ok=True)
    kubeconfig = state / "kubeconfig"
    sandbox = None
    try:
        with console.status("starting etcd, kube-apiserver, controller-manager, scheduler and kwok"):
            sandbox = Sandbox.start(kubeconfig=kubeconfig, log=console.log)
            nodes = prepare(sandbox)
        console.print(f"[green]Sandbox ready[/] at {sandbox.server}: {len(nodes)} fake GPU nodes Ready through kwok.")
        console.print(cards_table(sandbox))
        console.print("Point kubectl at it (the plugin is on the venv's PATH):")
        console.print(f"  export KUBECONFIG={kubeconfig.resolve()}")
        console.print(f"  export PATH={Path(sys.executable).parent}:$PATH")
        console.print(f"  {sandbox.bin('kubectl')} get nodes -L gpu")
        if sys.stdin.isatty():
            console.print("Press Ctrl-C to stop the sandbox.")
            while True:
                time.sleep(3600)
        return 0
    except KeyboardInterrupt:
        return 0
    finally:
        if sandbox is not None:
            console.print("stopping the sandbox")
            sandbox.stop()
        kubeconfig.unlink(missing_ok=True)
