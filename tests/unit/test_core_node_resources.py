"""kube-scheduler's count of a node's CPU, memory and pods (`node_resources`) on plain objects."""

from __future__ import annotations

import pytest

from kubectl_hami_place.core.errors import RequestError
from kubectl_hami_place.core.node_resources import (
    CountedPod,
    Resources,
    counted_pod,
    counted_scalars,
    is_scalar,
    node_allocatable,
    node_remainders,
    pod_resources,
    shortfall,
)

GI = 2**30


def container(cpu: str | None = None, memory: str | None = None, **extra: object) -> dict:
    """A container requesting `cpu` and `memory` (absent when None)."""
    requests = {key: value for key, value in (("cpu", cpu), ("memory", memory)) if value is not None}
    return {"name": "c", "resources": {"requests": requests}, **extra}


def test_app_containers_are_summed_and_each_pod_counts_one() -> None:
    spec = {"containers": [container("500m", "1Gi"), container("1", "512Mi"), container()]}
    assert pod_resources(spec) == Resources(1500, GI + GI // 2, 1)


def test_an_init_container_larger_than_the_app_sets_the_request() -> None:
    spec = {"containers": [container("500m", "1Gi")], "initContainers": [container("2", "256Mi")]}
    assert pod_resources(spec) == Resources(2000, GI, 1)


def test_sidecars_add_to_the_app_and_to_the_init_containers_after_them() -> None:
    sidecar = container("1", "1Gi", restartPolicy="Always")
    spec = {
        "containers": [container("1", "1Gi")],
        "initContainers": [sidecar, container("2500m", "1Gi")],
    }
    # app 1 + sidecar 1 = 2 CPU; the init container runs beside the sidecar: 2.5 + 1 = 3.5 CPU, 2 GiB.
    assert pod_resources(spec) == Resources(3500, 2 * GI, 1)


def test_overhead_is_added_after_pod_level_requests_replace_the_containers() -> None:
    spec = {
        "containers": [container("4", "8Gi")],
        "resources": {"requests": {"cpu": "2"}},
        "overhead": {"cpu": "250m", "memory": "128Mi"},
    }
    assert pod_resources(spec) == Resources(2250, 8 * GI + 128 * 2**20, 1)


def test_cpu_rounds_up_to_a_millicore() -> None:
    assert pod_resources({"containers": [container("0.0001")]}).cpu == 1


def test_a_malformed_quantity_is_refused() -> None:
    with pytest.raises(RequestError):
        pod_resources({"containers": [container("lots")]})


def test_allocatable_without_cpu_or_memory_is_not_counted() -> None:
    assert node_allocatable({"status": {"allocatable": {"cpu": "8"}}}) is None
    assert node_allocatable({"status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "20"}}}) == Resources(
        8000, 32 * GI, 20
    )


def node(name: str, cpu: str = "8", memory: str = "32Gi") -> dict:
    return {"metadata": {"name": name}, "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": "110"}}}


def pod(node_name: str | None, cpu: str, phase: str = "Running", name: str = "p") -> dict:
    spec: dict = {"containers": [container(cpu, "1Gi")]}
    if node_name is not None:
        spec["nodeName"] = node_name
    return {"metadata": {"namespace": "ns", "name": name}, "spec": spec, "status": {"phase": phase}}


def test_a_node_keeps_its_allocatable_less_its_bound_unfinished_pods() -> None:
    pods = [
        pod("n1", "3"),
        pod("n1", "1", phase="Pending"),
        pod("n1", "2", phase="Succeeded"),
        pod("n1", "2", phase="Failed"),
        pod(None, "4"),
        pod("n2", "1"),
        pod("gone", "1"),
    ]
    remainders, warnings = node_remainders([node("n1"), node("n2"), {"metadata": {"name": "bare"}}], pods)
    assert remainders == {"n1": Resources(4000, 30 * GI, 108), "n2": Resources(7000, 31 * GI, 109)}
    assert warnings == ()


def test_a_pod_whose_request_cannot_be_read_leaves_its_node_full_and_says_so() -> None:
    remainders, warnings = node_remainders([node("n1")], [pod("n1", "lots", name="odd")])
    assert remainders["n1"] == Resources()
    assert len(warnings) == 1
    assert "ns/odd" in warnings[0]
    assert "n1" in warnings[0]


def test_short_names_what_a_remainder_lacks() -> None:
    assert Resources(1000, GI, 1).short(Resources(2000, GI, 2)) == ("cpu", "pods")
    assert Resources(1000, GI, 1).holds(Resources(1000, GI, 1))


def test_pods_read_apart_count_on_their_nodes_as_the_pods_themselves_would() -> None:
    pods = [pod("n1", "3", name="a"), pod("n2", "1", name="b"), pod("gone", "1", name="c")]
    counted = [counted_pod(p) for p in pods]
    assert counted[0] == CountedPod("ns", "a", "n1", Resources(3000, GI, 1))
    nodes = [node("n1"), node("n2")]
    assert node_remainders(nodes, [], counted) == node_remainders(nodes, pods)
    assert node_remainders(nodes, pods[:1], counted[1:]) == node_remainders(nodes, pods)
    remainders, warnings = node_remainders(nodes, [], [counted_pod(pod("n1", "lots", name="odd"))])
    assert remainders["n1"] == Resources() and len(warnings) == 1 and "ns/odd" in warnings[0]


def test_a_pod_whose_request_cannot_be_read_is_kept_with_the_reason() -> None:
    """The warning quotes this reason: it must say which request and what value could not be read."""
    bad_cpu = {
        "metadata": {"namespace": "ns", "name": "odd"},
        "spec": {"nodeName": "n1", "containers": [container("lots")]},
    }
    assert counted_pod(bad_cpu) == CountedPod(
        "ns", "odd", "n1", "cpu request 'lots' is not a quantity such as 1, 3k or 1Gi"
    )
    bad_memory = {**bad_cpu, "spec": {"nodeName": "n1", "containers": [container("1", "lots")]}}
    assert counted_pod(bad_memory) == CountedPod(
        "ns", "odd", "n1", "memory 'lots' is not a quantity such as 1, 3k or 1Gi"
    )


def test_every_sidecar_started_before_an_init_container_runs_beside_it() -> None:
    """computePodResourceRequest adds all the sidecars started so far to each later init container, not the last."""
    sidecar = container("1", "1Gi", restartPolicy="Always")
    spec = {"containers": [container("100m", "1Gi")], "initContainers": [sidecar, sidecar, container("2", "1Gi")]}
    # app 0.1 + sidecars 2 = 2.1 CPU, 3 GiB; the init container beside both sidecars: 2 + 2 = 4 CPU, 3 GiB.
    assert pod_resources(spec) == Resources(4000, 3 * GI, 1)


def test_pod_level_memory_replaces_the_containers_memory() -> None:
    """Pod-level requests replace the containers' own, memory as much as CPU."""
    spec = {"containers": [container("4", "8Gi")], "resources": {"requests": {"memory": "2Gi"}}}
    assert pod_resources(spec) == Resources(4000, 2 * GI, 1)


def test_allocatable_without_a_pod_count_holds_kubelets_default_110() -> None:
    """The kubelet's default maxPods: a node object that omits it still takes 110 pods."""
    assert node_allocatable({"status": {"allocatable": {"cpu": "8", "memory": "32Gi"}}}) == Resources(
        8000, 32 * GI, 110
    )


def test_a_pod_on_a_node_not_modelled_does_not_stop_the_count() -> None:
    """Pods are listed in any order: one bound to a node without allocatable must not hide the pods after it."""
    remainders, warnings = node_remainders([node("n1")], [pod("gone", "1"), pod("n1", "3")])
    assert (remainders, warnings) == ({"n1": Resources(5000, 31 * GI, 109)}, ())


@pytest.mark.parametrize(
    ("name", "scalar"),
    [
        ("rdma/hca_shared_devices_a", True),
        ("example.com/fpga", True),
        ("hugepages-2Mi", True),
        ("ephemeral-storage", True),
        ("cpu", False),
        ("pods", False),
        ("kubernetes.io/batch-cpu", False),
        ("node.kubernetes.io/thing", False),
        ("attachable-volumes-csi-ebs", False),
    ],
)
def test_kube_scheduler_counts_extended_resources_hugepages_and_ephemeral_storage_by_name(
    name: str, scalar: bool
) -> None:
    """Extended resources are domain-prefixed names outside kubernetes.io (IsExtendedResourceName)."""
    assert is_scalar(name) is scalar


def test_scalars_are_summed_over_app_containers_and_peak_over_init_containers() -> None:
    rdma = {"rdma/hca": "1", "hugepages-2Mi": "1Gi"}
    spec = {
        "containers": [container("1"), container("1")],
        "initContainers": [{"name": "i", "resources": {"requests": {"rdma/hca": "3"}}}],
    }
    spec["containers"][0]["resources"]["requests"] |= rdma
    spec["containers"][1]["resources"]["requests"] |= {"rdma/hca": "1"}
    assert pod_resources(spec) == Resources(2000, 0, 1, (("hugepages-2Mi", GI), ("rdma/hca", 3)))
    del spec["initContainers"]
    assert pod_resources(spec).scalars == (("hugepages-2Mi", GI), ("rdma/hca", 2))


def scalar_node(name: str, scalars: dict[str, str] | None = None) -> dict:
    """A node advertising these scalar resources besides CPU and memory."""
    found = node(name)
    found["status"]["allocatable"] |= scalars or {}
    return found


def test_a_scalar_some_node_advertises_is_counted_on_every_node_and_hamis_own_are_not() -> None:
    """A node that does not advertise it has none; HAMi's resources, which its chart has kube-scheduler ignore,
    are the planner's own count; a pod's other scalars are not taken from the room."""
    nodes = [scalar_node("n1", {"rdma/hca": "4", "nvidia.com/gpu": "10"}), scalar_node("n2")]
    counted = counted_scalars(nodes, {"nvidia.com/gpu"})
    assert counted == {"rdma/hca"}
    asks = {"rdma/hca": "1", "nvidia.com/gpu": "1", "example.com/fpga": "1"}
    placed = pod("n1", "1")
    placed["spec"]["containers"][0]["resources"]["requests"] |= asks
    remainders, _ = node_remainders(nodes, [placed], (), counted)
    assert remainders["n1"] == Resources(7000, 31 * GI, 109, (("rdma/hca", 3),))
    assert remainders["n2"] == Resources(8000, 32 * GI, 110, (("rdma/hca", 0),))


def test_a_remainder_short_of_a_scalar_does_not_hold_the_pod_and_names_it() -> None:
    room = Resources(1000, GI, 1, (("rdma/hca", 1),))
    assert room.holds(Resources(1000, GI, 1, (("rdma/hca", 1),)))
    assert not room.holds(Resources(0, 0, 0, (("rdma/hca", 2),)))
    assert room.short(Resources(0, 0, 0, (("example.com/fpga", 1), ("rdma/hca", 2)))) == (
        "example.com/fpga",
        "rdma/hca",
    )
    assert (room - Resources(0, 0, 1, (("rdma/hca", 1),)) + Resources(0, 0, 0, (("rdma/hca", 2),))).scalars == (
        ("rdma/hca", 2),
    )


def test_a_remainder_that_holds_a_scalar_is_not_short_of_it_and_the_words_give_its_figures() -> None:
    room = Resources(1000, GI, 1, (("rdma/hca", 1),))
    assert room.short(Resources(0, 0, 0, (("rdma/hca", 1),))) == ()
    assert shortfall(room, Resources(0, 0, 1, (("rdma/hca", 3),))) == (
        "Insufficient rdma/hca (the node has 1000m CPU, 1024 MiB memory and 1 pod(s) left; the pod asks 0m, 0 MiB; "
        "rdma/hca: 1 left, 3 asked)"
    )


def test_init_containers_ask_the_most_any_one_of_them_asks_of_a_scalar() -> None:
    """Init containers run one after another: the pod asks the largest, not the last."""
    init = [{"resources": {"requests": {"example.com/fpga": n}}} for n in ("2", "1")]
    assert pod_resources({"initContainers": init, "containers": [{}]}).scalars == (("example.com/fpga", 2),)
