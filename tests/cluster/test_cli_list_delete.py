"""`list` and `delete` against the sandbox."""

from __future__ import annotations

import pytest

from sandbox.cluster import Sandbox, wait_for
from tests.cluster.cli_harness import declining, grant, placements, plugin

pytestmark = pytest.mark.cluster
H100 = "gpu-h100-0"


def make(cluster: Sandbox, namespace: str, name: str, app: str) -> None:
    """A placement by `pin`, which waits for no acknowledgement: no webhook runs in these tests (5 s each else)."""
    run = plugin(
        cluster,
        "pin",
        "-n",
        namespace,
        "-l",
        f"app={app}",
        "--node",
        H100,
        "--gpu",
        "gpu-5",
        "--request-memory",
        "512",
        "--name",
        name,
        "--ack-timeout",
        "0",
    )
    assert run.code == 0, run.err


def test_list_shows_the_placements(cluster: Sandbox, namespace: str) -> None:
    empty = plugin(cluster, "list", "-n", namespace)
    assert empty.code == 0 and empty.out == f"No placements in namespace {namespace}.\n"
    make(cluster, namespace, "alpha", "a")
    make(cluster, namespace, "beta", "b")
    table = plugin(cluster, "list", "-n", namespace)
    assert table.code == 0, table.err
    header, *rows = table.out.splitlines()
    assert header.split() == ["NAME", "REQID", "NODE", "GPUS", "PHASE", "POD", "EVICT", "AGE"]
    assert [row.split()[0] for row in rows] == ["alpha", "beta"]
    assert rows[0].split()[2:7] == [H100, "gpu-5", "Pending", "-", "-"]
    wide = plugin(cluster, "list", "-n", namespace, "-o", "wide")
    assert "SELECTOR" in wide.out and "app=a" in wide.out
    every = plugin(cluster, "list", "-A", "-o", "json")
    names = {(i["metadata"]["namespace"], i["metadata"]["name"]) for i in every.json()["items"]}
    assert {(namespace, "alpha"), (namespace, "beta")} <= names
    assert every.json()["kind"] == "List"
    cluster.kubectl("label", "hamipodplacement", "alpha", "team=x", "-n", namespace)
    labelled = plugin(cluster, "list", "-n", namespace, "-l", "team=x", "-o", "json")
    assert [i["metadata"]["name"] for i in labelled.json()["items"]] == ["alpha"]
    none = plugin(cluster, "list", "-n", namespace, "-l", "team=y")
    assert none.out == f"No placements in namespace {namespace} with labels team=y.\n"


def test_delete_by_name_all_and_missing(cluster: Sandbox, namespace: str) -> None:
    make(cluster, namespace, "alpha", "a")
    make(cluster, namespace, "beta", "b")
    make(cluster, namespace, "gamma", "c")
    refused = plugin(cluster, "delete", "alpha", "-n", namespace)
    assert refused.code == 2
    assert refused.error_lines == [
        f"error: refusing to delete alpha in namespace {namespace} without confirmation; pass --yes to confirm"
    ]
    declined = declining(cluster, "delete", "alpha", "-n", namespace)
    assert (declined.code, declined.err) == (
        1,
        f"Delete alpha in namespace {namespace}? [y/N]: n\nerror: not confirmed; nothing was deleted\n",
    )
    dry = plugin(cluster, "delete", "alpha", "-n", namespace, "--yes", "--dry-run=server")
    assert dry.code == 0 and "(server dry run)" in dry.out
    # A client dry run asks nothing and deletes nothing, but reads each name, as the deletion would find it.
    local = plugin(cluster, "delete", "alpha", "ghost", "-n", namespace, "--dry-run=client")
    assert (local.code, local.out, local.error_lines) == (
        1,
        f'hamipodplacement "alpha" deleted from namespace {namespace} (client dry run)\n',
        [
            f"error: placement ghost not found in namespace {namespace}; check the names (kubectl hami-place list) "
            "and -n"
        ],
    )
    assert len(placements(cluster, namespace)) == 3
    none = plugin(cluster, "delete", "-l", "team=nobody", "-n", namespace, "--yes")
    assert (none.code, none.out) == (0, f"No placements to delete in namespace {namespace}.\n"), none.err
    run = plugin(cluster, "delete", "alpha", "-n", namespace, "--yes")
    assert run.code == 0, run.err
    assert run.out == f'hamipodplacement "alpha" deleted from namespace {namespace}\n'
    missing = plugin(cluster, "delete", "alpha", "beta", "-n", namespace, "--yes", "-o", "json")
    assert missing.code == 1
    assert missing.json()["deleted"] == ["beta"] and missing.json()["notFound"] == ["alpha"]
    assert missing.error_lines == [
        f"error: placement alpha not found in namespace {namespace}; check the names (kubectl hami-place list) and -n"
    ]
    make(cluster, namespace, "delta", "d")
    cluster.kubectl("label", "hamipodplacement", "gamma", "team=x", "-n", namespace)
    selected = plugin(cluster, "delete", "-l", "team=x", "--phase", "Pending", "-n", namespace, "--yes", "-o", "json")
    assert selected.code == 0 and selected.json()["deleted"] == ["gamma"], selected.err
    everything = plugin(cluster, "delete", "--all", "--phase", "Pending", "-n", namespace, "--yes")
    assert everything.code == 0, everything.err
    assert placements(cluster, namespace) == []


def test_a_delete_refused_part_way_says_what_it_deleted_before_and_what_it_did_not_try(
    cluster: Sandbox, namespace: str
) -> None:
    """A user may delete alpha only: `delete alpha beta gamma` deletes alpha, is refused beta, and says both (it said
    neither, exit 1 with no word of alpha gone); gamma is not tried, as every name would be refused again."""
    for name in ("alpha", "beta", "gamma"):
        make(cluster, namespace, name, name)
    user = f"deleter-{namespace}"
    grant(cluster, namespace, user, "delete-alpha", {"resourceNames": ["alpha"], "verbs": ["delete"]})
    allowed = f"--as={user}"
    wait_for(
        lambda: (
            cluster.kubectl(
                "auth", "can-i", "delete", "hamipodplacements/alpha", "-n", namespace, allowed, check=False
            ).stdout.strip()
            == "yes"
        ),
        "the RoleBinding to apply",
    )
    run = plugin(cluster, "delete", "alpha", "beta", "gamma", "-n", namespace, "--yes", "-o", "json", "--as", user)
    assert run.code == 1
    assert (run.json()["deleted"], run.json()["notDeleted"]) == (["alpha"], ["beta", "gamma"])
    assert run.warning_lines == ["warning: 1 placement(s) after beta not tried: gamma"]
    [refused] = run.error_lines
    assert refused.startswith("error: forbidden: ") and '"beta" is forbidden' in refused
    assert sorted(p["metadata"]["name"] for p in placements(cluster, namespace)) == ["beta", "gamma"]
    # refused at the first name: nothing deleted, and it does not say there was nothing to delete
    first = plugin(cluster, "delete", "beta", "gamma", "-n", namespace, "--yes", "--as", user)
    assert (first.code, first.out) == (1, ""), first.out
    assert first.error_lines[0].startswith("error: forbidden: ")
