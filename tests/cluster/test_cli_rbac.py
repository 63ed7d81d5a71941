"""RBAC as the API server enforces it: the plugin run `--as` a user without the permission exits 1 with the hint."""

from __future__ import annotations

from sandbox.cluster import Sandbox, wait_for
from tests.cluster.cli_harness import grant, placements, plugin


def test_a_user_without_rbac_gets_exit_1_and_the_permission_to_ask_for(cluster: Sandbox, namespace: str) -> None:
    user = f"viewer-{namespace}"
    listed = plugin(cluster, "list", "-n", namespace, "--as", user)
    assert listed.code == 1
    assert listed.error_lines[0].startswith("error: forbidden: ")
    assert listed.err.rstrip().endswith(
        f"ask your cluster admin for RBAC permission to list hamipodplacements in namespace {namespace}"
    )

    pinned = plugin(
        cluster,
        "pin",
        "-n",
        namespace,
        "-l",
        "app=x",
        "--node",
        "gpu-a100-0",
        "--gpu",
        "gpu-0",
        "--request-memory",
        "1000",
        "--as",
        user,
    )
    assert pinned.code == 1
    assert "forbidden" in pinned.error_lines[0] and "ask your cluster admin for RBAC permission to" in pinned.err
    assert placements(cluster, namespace) == []

    grant(cluster, namespace, user, "read-placements", {"verbs": ["list"]})
    # RBAC reaches the authorizer through its own watch: the same call succeeds once it has the binding.
    wait_for(lambda: plugin(cluster, "list", "-n", namespace, "--as", user).code == 0, "the RoleBinding to apply")
