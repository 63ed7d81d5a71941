"""`make demo`: the main job on the HAMi sandbox: see the cards, pin a pod to one, watch HAMi allocate it, move it;
then make room for a Pending pod: `plan --for` it, `apply` the plan, and the pod runs on the card the plan freed;
last, the server's defragmentation controller rescues a Pending pod on its own once its policy says `mode: on`.

Everything goes through HAMi v2.10's own scheduler extender and webhook: the pods already on the cards are created
as users create them (each steered to its card with `nvidia.com/use-gpuuuid`, so the cluster starts fragmented),
and what each pod got is read back from `hami.io/vgpu-devices-allocated`, which HAMi's scheduler writes.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console

from sandbox import webhook
from sandbox.cluster import Sandbox, stop_on_signals, wait_for
from sandbox.gpu_nodes import load
from sandbox.prepare import prepare

NAMESPACE = "demo"
# The server's own namespace, as the chart's: the controller's policy ConfigMap and leader Lease live there.
SERVER_NAMESPACE = "hami-place-system"
POLICY = "gpu-descheduler-defrag-policy"
# The server's controller, reading that policy, as `make demo` and `make sandbox-up` run it.
DEFRAG_FLAGS = (
    "--defrag-policy",
    f"{SERVER_NAMESPACE}/{POLICY}",
    "--defrag-namespace",
    SERVER_NAMESPACE,
    "--defrag-interval",
    "2",
)
ALLOCATED = "hami.io/vgpu-devices-allocated"
# Pods already on the cards: (pod, node, card index, MiB). HAMi's webhook and scheduler place each on its card.
RUNNING = (
    ("inference-a", "gpu-a100-0", 0, 10240),
    ("inference-b", "gpu-a100-0", 0, 10240),
    ("inference-c", "gpu-a100-0", 1, 20480),
    ("notebook-d", "gpu-a100-1", 0, 8192),
    ("finetune-e", "gpu-h100-0", 0, 40960),
)


def _card_uuid(node: str, index: int) -> str:
    entry = next(e for e in load() if e["name"] == node)
    return str(next(c["id"] for c in entry["cards"] if c["index"] == index))


def running_pod(name: str, node: str, index: int, mib: int) -> dict[str, Any]:
    """A GPU pod as a user writes it, steered to one card; HAMi's webhook and scheduler do the rest."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {"app": name.split("-", maxsplit=1)[0]},
            "annotations": {"nvidia.com/use-gpuuuid": _card_uuid(node, index)},
        },
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(mib)}},
                }
            ],
        },
    }


def trainer_deployment() -> dict[str, Any]:
    """The workload the admin wants on an exact card: a Deployment whose pods HAMi schedules, not yet scaled up."""
    labels = {"app": "trainer"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "trainer", "namespace": NAMESPACE},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {"name": "train", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
                    ],
                },
            },
        },
    }


def serving_deployment() -> dict[str, Any]:
    """A one-replica Deployment on gpu-a100-1; HAMi's spread policy puts its pod on the card notebook-d leaves empty."""
    labels = {"app": "serving"}
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "12000"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "serving", "namespace": NAMESPACE},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": "gpu-a100-1"},
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "serve", "image": "busybox", "resources": {"limits": limits}}],
                },
            },
        },
    }


def big_pod() -> dict[str, Any]:
    """A pod asking 36,000 MiB of one A100: more than any A100 card has free while the cluster is fragmented."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "big-train",
            "namespace": NAMESPACE,
            "labels": {"app": "big-train"},
            "annotations": {"nvidia.com/use-gputype": "A100"},
        },
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "train",
                    "image": "busybox",
                    "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "36000"}},
                }
            ],
        },
    }


def defrag_policy(mode: str, include: tuple[str, ...] = (NAMESPACE,), exclude: tuple[str, ...] = ()) -> dict[str, Any]:
    """The controller's policy as the chart renders it: rescue pods Pending for 5 s in the namespaces `include` names
    (the demo's by default) and `exclude` does not."""
    policy = {
        "apiVersion": "scheduling.hami.placement.com/v1alpha1",
        "kind": "DefragPolicy",
        "mode": mode,
        "namespaces": {"include": list(include), "exclude": list(exclude)},
        "rescue": {"enabled": True, "pendingFor": "5s"},
        "budgets": {"movesPerRun": 2, "movesPerHour": 6, "movesPerNode": 2, "movesPerNamespace": 4, "cooldown": "1h"},
    }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": POLICY,
            "namespace": SERVER_NAMESPACE,
            "labels": {"app.kubernetes.io/component": "defrag-policy"},
        },
        "data": {"policy.yaml": yaml.safe_dump(policy, sort_keys=False)},
    }


def batch_deployment() -> dict[str, Any]:
    """Two 8,000 MiB pods on gpu-a100-0; HAMi's spread policy puts one on each of its cards."""
    labels = {"app": "batch"}
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "8000"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "batch", "namespace": NAMESPACE},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": "gpu-a100-0"},
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "work", "image": "busybox", "resources": {"limits": limits}}],
                },
            },
        },
    }


def eval_pod() -> dict[str, Any]:
    """A pod asking 18,000 MiB of a card of gpu-a100-0, where each card has 12,000 MiB left beside the batch pods."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "eval", "namespace": NAMESPACE, "labels": {"app": "eval"}},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": "gpu-a100-0"},
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "eval",
                    "image": "busybox",
                    "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "18000"}},
                }
            ],
        },
    }


def _unschedulable(pod: dict[str, Any]) -> bool:
    """The scheduler tried the pod and found no place for it."""
    conditions = pod.get("status", {}).get("conditions") or []
    return any(c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable" for c in conditions)


def _allocated_and_running(pod: dict[str, Any]) -> bool:
    """HAMi allocated the pod its cards, the bind completed, and kwok runs it."""
    annotations = pod["metadata"].get("annotations") or {}
    done = annotations.get("hami.io/bind-phase") == "success" and ALLOCATED in annotations
    return done and pod.get("status", {}).get("phase") == "Running"


class Demo:
    """The steps, each shown as the command a user types and what it printed."""

    def __init__(self, sandbox: Sandbox, console: Console) -> None:
        self.sandbox = sandbox
        self.console = console
        self.env = dict(
            os.environ,
            KUBECONFIG=str(sandbox.kubeconfig),
            COLUMNS=str(console.width),
            PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        )

    def kubectl(self, *args: str, show: bool = True, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        """Runs the sandbox's kubectl (and through it the plugin, found on PATH) as a user would."""
        if show:
            self.console.print(f"\n[bold]$ kubectl {shlex.join(args)}[/]")
        done = subprocess.run(
            [str(self.sandbox.bin("kubectl")), *args],
            env=self.env,
            capture_output=True,
            text=True,
            input=stdin,
            check=False,
        )
        if show:
            self.console.print((done.stdout + done.stderr).rstrip(), markup=False, highlight=False)
            if done.returncode:
                self.console.print(f"[dim](exit code {done.returncode})[/]")
        return done

    def wait(self, what: str, check: Callable[[], Any], timeout: float = 90) -> Any:
        with self.console.status(f"waiting for {what}"):
            return wait_for(check, what, timeout)

    def pods(self, selector: str) -> list[dict[str, Any]]:
        listed = self.kubectl("get", "pods", "-n", NAMESPACE, "-l", selector, "-o", "json", show=False)
        return [p for p in json.loads(listed.stdout)["items"] if not p["metadata"].get("deletionTimestamp")]

    def running_trainer(self, exclude: str = "") -> dict[str, Any] | None:
        return next(
            (p for p in self.pods("app=trainer") if p["metadata"]["name"] != exclude and _allocated_and_running(p)),
            None,
        )

    def pod(self, name: str) -> dict[str, Any]:
        got = self.kubectl("get", "pod", name, "-n", NAMESPACE, "-o", "json", show=False)
        return dict(json.loads(got.stdout)) if got.returncode == 0 else {}

    def placement_phase(self, name: str) -> str:
        got = self.kubectl("get", "hamipodplacement", name, "-n", NAMESPACE, "-o", "json", show=False)
        return str(json.loads(got.stdout).get("status", {}).get("phase", "")) if got.returncode == 0 else ""

    def show_pod(self, pod: dict[str, Any]) -> None:
        meta, affinity = pod["metadata"], pod["spec"].get("affinity") or {}
        annotations = meta.get("annotations") or {}
        terms = affinity.get("nodeAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution", {})
        self.console.print(f"  pod {meta['name']} runs on [bold]{pod['spec']['nodeName']}[/]")
        self.console.print(f"  node affinity (ours): {json.dumps(terms.get('nodeSelectorTerms'))}")
        self.console.print(f"  nvidia.com/use-gpuuuid (ours): {annotations.get('nvidia.com/use-gpuuuid')}")
        limits = pod["spec"]["containers"][0]["resources"].get("limits", {})
        self.console.print(f"  limits (after both webhooks): {json.dumps(limits)}")
        self.console.print(f"  [bold]{ALLOCATED}[/] (HAMi's scheduler): {annotations.get(ALLOCATED)}")

    def sign_in_with_a_token(self) -> None:
        """Run the demo's commands as a ServiceAccount bound to cluster-admin, holding a bearer token: `status`
        forwards it, and the webhook serves its view to a reader the API server vouches for. The sandbox's admin holds
        a client certificate, which goes no further than the API server, so its `status` would compute the view."""
        account = "hami-place-demo"
        self.kubectl("create", "serviceaccount", account, "-n", "default", show=False)
        binding = ["create", "clusterrolebinding", account, "--clusterrole=cluster-admin"]
        self.kubectl(*binding, f"--serviceaccount=default:{account}", show=False)
        token = self.kubectl("create", "token", account, "-n", "default", show=False).stdout.strip()
        path = self.sandbox.token_kubeconfig(token, self.sandbox.kubeconfig.with_name("demo.kubeconfig"))
        self.env["KUBECONFIG"] = str(path)

    def run(self) -> None:
        self.sign_in_with_a_token()
        self.console.rule("1. The cards and what already runs on them")
        self.kubectl("create", "namespace", NAMESPACE, show=False)
        for entry in RUNNING:
            self.kubectl("apply", "-f", "-", stdin=json.dumps(running_pod(*entry)), show=False)
        names = [entry[0] for entry in RUNNING]
        self.wait(
            "HAMi to allocate the running pods their cards",
            lambda: sum(map(_allocated_and_running, self.pods("app"))) >= len(names),
        )
        self.kubectl("hami-place", "status")

        self.console.rule("2. Pin the trainer to gpu-0 of gpu-a100-0")
        self.console.print("The trainer Deployment exists with 0 replicas; pin reads its pods' GPU request.")
        self.kubectl("apply", "-f", "-", stdin=json.dumps(trainer_deployment()))
        self.console.print("A whole card there is refused, with HAMi's reason: two pods already share it.")
        self.kubectl(
            "hami-place", "pin", "-n", NAMESPACE, "-l", "app=trainer", "--node", "gpu-a100-0", "--gpu", "gpu-0"
        )
        self.console.print("40% of its memory fits beside them:")
        self.kubectl(
            "hami-place",
            "pin",
            "-n",
            NAMESPACE,
            "-l",
            "app=trainer",
            "--node",
            "gpu-a100-0",
            "--gpu",
            "gpu-0/40",
            "--name",
            "trainer-on-a100",
            "--req-id",
            "demo-trainer-1",
        )
        self.kubectl("scale", "deployment/trainer", "-n", NAMESPACE, "--replicas=1")
        trainer = self.wait("the trainer pod to run", self.running_trainer)
        self.show_pod(trainer)
        self.wait("the placement to be Consumed", lambda: self.placement_phase("trainer-on-a100") == "Consumed")
        self.kubectl("hami-place", "list", "-n", NAMESPACE)
        self.console.print("The card now holds three pods, as HAMi counts them:")
        self.kubectl("hami-place", "status", "gpu-a100-0")

        self.console.rule("3. Move it to an H100: pin the replacement, then evict")
        old = trainer["metadata"]["name"]
        self.kubectl(
            "hami-place",
            "evict",
            old,
            "-n",
            NAMESPACE,
            "--to-node",
            "gpu-h100-0",
            "--gpu",
            "gpu-3",
            "--name",
            "trainer-on-h100",
            "--req-id",
            "demo-trainer-2",
            "--yes",
        )
        moved = self.wait("the replacement pod to run", lambda: self.running_trainer(exclude=old))
        self.show_pod(moved)
        self.wait("the second placement to be Consumed", lambda: self.placement_phase("trainer-on-h100") == "Consumed")
        self.kubectl("hami-place", "list", "-n", NAMESPACE)
        self.defragment()
        self.rescue()

    def defragment(self) -> None:
        """A Pending pod no A100 card has room for; plan the moves that make room, apply them, and it runs."""
        self.console.rule("4. Make room for a Pending pod: plan --for, then apply")
        self.kubectl("apply", "-f", "-", stdin=json.dumps(serving_deployment()))
        self.wait("the serving pod to run", lambda: any(map(_allocated_and_running, self.pods("app=serving"))))
        self.console.print("big-train asks 36,000 MiB of one A100. Enough A100 memory is free, but scattered:")
        self.kubectl("apply", "-f", "-", stdin=json.dumps(big_pod()))
        self.wait("HAMi to leave big-train Pending", lambda: _unschedulable(self.pod("big-train")))
        self.kubectl("hami-place", "plan", "--for", "big-train", "-n", NAMESPACE)
        plan_file = self.sandbox.workdir / "plan.json"
        self.console.print(f"\n[bold]$ kubectl hami-place plan --for big-train -n {NAMESPACE} -o json > plan.json[/]")
        printed = self.kubectl("hami-place", "plan", "--for", "big-train", "-n", NAMESPACE, "-o", "json", show=False)
        if printed.returncode:
            raise RuntimeError(f"plan --for big-train failed: {printed.stderr.strip()}")
        plan_file.write_text(printed.stdout)
        applied = self.kubectl("hami-place", "apply", "-f", str(plan_file), "--yes", "--wait-for-pod")
        if applied.returncode:
            raise RuntimeError("apply failed")
        self.wait("big-train to run", lambda: _allocated_and_running(self.pod("big-train")))
        big = self.pod("big-train")
        annotations = big["metadata"].get("annotations") or {}
        self.console.print(f"  pod big-train runs on [bold]{big['spec']['nodeName']}[/]")
        self.console.print(f"  [bold]{ALLOCATED}[/] (HAMi's scheduler): {annotations.get(ALLOCATED)}")
        self.kubectl("hami-place", "status", "gpu-a100-1")

    def events(self, pod: str) -> list[str]:
        """The controller's Events on the pod, oldest first, as `reason: message`."""
        printed = self.kubectl(
            "get", "events", "-n", NAMESPACE, "--field-selector", f"involvedObject.name={pod}", "-o", "json", show=False
        )
        items = json.loads(printed.stdout or "{}").get("items") or []
        ours = [e for e in items if (e.get("source") or {}).get("component") == "hami-place-defrag"]
        ours.sort(key=lambda e: e["metadata"]["creationTimestamp"])
        return [f"{e['reason']}: {e['message']}" for e in ours]

    def last_decisions(self) -> list[Any]:
        """The leader's last decisions, as `defrag status` reads them from its Lease."""
        printed = self.kubectl("hami-place", "defrag", "status", "-o", "json", show=False)
        return list(json.loads(printed.stdout or "{}").get("leader", {}).get("lastDecisions") or [])

    def rescue(self) -> None:
        """The server's controller, switched on in its policy, rescues a Pending pod with no command run."""
        self.console.rule("5. The controller rescues a Pending pod on its own")
        self.kubectl("apply", "-f", "-", stdin=json.dumps(batch_deployment()))
        self.wait("the batch pods to run", lambda: sum(map(_allocated_and_running, self.pods("app=batch"))) == 2)
        self.console.print(
            "The policy is in dry-run, as the chart installs it: the controller only says what it would do."
        )
        self.console.print(
            "eval asks 18,000 MiB of a gpu-a100-0 card; each card has 12,000 MiB left beside a batch pod:"
        )
        self.kubectl("apply", "-f", "-", stdin=json.dumps(eval_pod()))
        self.wait("HAMi to leave eval Pending", lambda: _unschedulable(self.pod("eval")))
        would = self.wait(
            "the controller's dry-run Event on eval", lambda: [e for e in self.events("eval") if "dry-run" in e]
        )
        self.console.print(f"  [bold]Event on eval[/]: {would[-1]}")
        self.wait("the leader's Lease to say it", self.last_decisions)
        self.kubectl("hami-place", "defrag", "status")
        self.console.print(
            "Switch the policy to [bold]mode: on[/] (the operator's one change) and wait; no command moves a pod:"
        )
        self.kubectl("apply", "-f", "-", stdin=json.dumps(defrag_policy("on")))
        self.wait("eval to run", lambda: _allocated_and_running(self.pod("eval")), timeout=240)
        for line in self.wait(
            "the controller's rescue Event",
            lambda: [e for e in self.events("eval") if "rescued" in e] and self.events("eval"),
        ):
            self.console.print(f"  [bold]Event on eval[/]: {line}")
        annotations = self.pod("eval")["metadata"].get("annotations") or {}
        self.console.print(f"  [bold]{ALLOCATED}[/] (HAMi's scheduler): {annotations.get(ALLOCATED)}")
        self.kubectl("hami-place", "defrag", "history")
        self.kubectl("hami-place", "status", "gpu-a100-0")


def run(state: Path) -> int:
    """Brings the sandbox up in the foreground; stops it on Ctrl-C (or at once when not on a terminal)."""
    console = Console(width=None if sys.stdout.isatty() else 160)
    stop_on_signals()
    state.mkdir(exist_ok=True)
    kubeconfig = state / "kubeconfig"
    sandbox = None
    server = None
    try:
        with console.status("starting etcd, kube-apiserver, controller-manager, scheduler, kwok and HAMi"):
            sandbox = Sandbox.start(kubeconfig=kubeconfig, log=console.log)
            nodes = prepare(sandbox)
            sandbox.kubectl("create", "namespace", SERVER_NAMESPACE)
            sandbox.kubectl("apply", "-f", "-", input=json.dumps(defrag_policy("dry-run")))
            # Registered for admission and behind a Service, so that `status` reads its view and `version` its version.
            server = webhook.start_for_exploring(
                sandbox, sandbox.workdir, SERVER_NAMESPACE, "gpu-descheduler-webhook", *DEFRAG_FLAGS
            )
        console.print(
            f"[green]Sandbox ready[/] at {sandbox.server}: {len(nodes)} fake GPU nodes Ready through kwok, "
            f"HAMi's scheduler and webhook at {sandbox.hami_url}, the hami-place webhook at {server.url} "
            f"(API {server.api})."
        )
        Demo(sandbox, console).run()
        console.rule("Your turn")
        console.print("Point kubectl at the sandbox (the plugin is on the venv's PATH):")
        console.print(f"  export KUBECONFIG={kubeconfig.resolve()}")
        console.print(f"  export PATH={Path(sys.executable).parent}:$PATH")
        console.print(f"  {sandbox.bin('kubectl')} hami-place status")
        console.print(f"  curl {server.api}/api/v1/cluster-info")
        if sys.stdin.isatty():
            console.print("Press Ctrl-C to stop the sandbox.")
            while True:
                time.sleep(3600)
        return 0
    except KeyboardInterrupt:
        return 0
    except (OSError, TimeoutError, RuntimeError, subprocess.CalledProcessError) as exc:
        console.print(f"[red]demo failed:[/] {exc}")
        return 1
    finally:
        if server is not None:
            server.stop()
        if sandbox is not None:
            console.print("stopping the sandbox")
            sandbox.stop()
        kubeconfig.unlink(missing_ok=True)
