"""With the defragmentation controller on, the cache keeps what its planner reads: a plan from the cache's pods and
nodes is the plan from the whole objects, the rest of each object left out."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import pytest

from kubectl_hami_place.core.attach_limits import Attachment, attach_limits_of, parsed_attach_limits
from kubectl_hami_place.core.defrag.policy import DefragPolicy
from kubectl_hami_place.core.defrag.triggers import rescue_candidates
from kubectl_hami_place.core.node_resources import CountedPod, Resources, node_remainders
from kubectl_hami_place.core.node_selection import node_marks
from kubectl_hami_place.core.planner import PlanPod
from kubectl_hami_place.core.planner.objects import pod_for_plan, snapshot_from_objects
from kubectl_hami_place.core.volumes import (
    BETA_CLASS,
    Claim,
    StorageClass,
    claim_of,
    new_claims,
    parsed_volumes,
    storage_capacity_of,
    volume_of,
    volumes_of,
)
from tests.unit.test_core_planner import runs_on
from webhook.cache import (
    ATTACH_LIMITS,
    ATTACHMENT,
    CAPACITY_DRIVER,
    CLAIM,
    COUNTED,
    LAST_APPLIED,
    STORAGE_CAPACITY,
    STORAGE_CLASS,
    VOLUME,
    project_counted_pod,
    project_csi_driver,
    project_csi_node,
    project_node,
    project_node_for_planning,
    project_pod_for_planning,
    project_storage_capacity,
    project_storage_class,
    project_volume,
    project_volume_attachment,
    project_volume_claim,
)

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
REGISTER = (
    '[{"id":"GPU-a","index":0,"count":10,"devmem":40960,"devcore":100,"type":"NVIDIA-A100","health":true},'
    '{"id":"GPU-b","index":1,"count":10,"devmem":40960,"devcore":100,"type":"NVIDIA-A100","health":true}]'
)
ALLOCATED = "GPU-a,NVIDIA,10000,0:;"
# The GPU nodes are kept for ML pods, which tolerate that; a node being drained keeps every pod off.
DEDICATED = {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}
DRAINING = {"key": "draining", "effect": "NoExecute", "timeAdded": "2026-12-01T11:00:00Z"}
# What the pods' sidecar and main container ask of their node (kube-scheduler's count, which plans read too).
PROXY = {"cpu": "500m", "memory": "128Mi"}
CPU = {"cpu": "2", "memory": "1Gi"}
REFUSED = {
    "type": "PodScheduled",
    "status": "False",
    "reason": "Unschedulable",
    "message": "0/2 nodes are available: 2 2/2 CardInsufficientMemory.",
}


def whole_node(name: str, zone: str, *taints: dict[str, Any]) -> dict[str, Any]:
    """A GPU node as the API server sends it, kept for ML pods (DEDICATED) and with these taints besides."""
    return {
        "metadata": {
            "name": name,
            "resourceVersion": "7",
            "labels": {"kubernetes.io/hostname": name, "zone": zone},
            "annotations": {"hami.io/node-nvidia-register": REGISTER, "node.alpha.kubernetes.io/ttl": "0"},
            "managedFields": [{"manager": "kubelet"}],
        },
        "spec": {"podCIDR": "10.0.0.0/24", "taints": [DEDICATED, *taints]},
        "status": {
            "allocatable": {
                "nvidia.com/gpu": "20",
                "cpu": "8",
                "memory": "32Gi",
                "pods": "110",
                "ephemeral-storage": "1T",
            },
            "conditions": [{"type": "Ready", "status": "True", "message": "kubelet is posting ready status"}],
            "nodeInfo": {"kernelVersion": "6.1"},
        },
    }


def whole_pod(name: str, *, node: str = "", priority: int = 0) -> dict[str, Any]:
    """A GPU pod of a Deployment as the API server sends it: running on `node` with HAMi's allocation, else Pending
    and refused since five minutes."""
    since = (NOW - timedelta(minutes=5)).isoformat()
    annotations = {LAST_APPLIED: '{"kind":"Pod"}', "hami.io/gpu-scheduler-policy": "binpack"}
    if node:
        annotations |= {"hami.io/vgpu-node": node, "hami.io/vgpu-devices-allocated": ALLOCATED}
    gpu = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "10000"}
    return {
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "uid": f"uid-{name}",
            "resourceVersion": "11",
            "creationTimestamp": since,
            "labels": {"app": name},
            "annotations": annotations,
            "ownerReferences": [{"kind": "ReplicaSet", "name": f"{name}-rs", "controller": True}],
            "managedFields": [{"manager": "kube-scheduler"}],
        },
        "spec": {
            "schedulerName": "hami-scheduler",
            "priority": priority,
            "priorityClassName": "team" if priority else "",
            "nodeSelector": {"zone": "a"},
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["gpu-2"]}
                                ]
                            }
                        ]
                    }
                }
            },
            "initContainers": [
                {"name": "init", "image": "busybox", "resources": {"limits": gpu}},
                {"name": "proxy", "image": "envoy", "restartPolicy": "Always", "resources": {"requests": PROXY}},
            ],
            "containers": [
                {
                    "name": "main",
                    "image": "pause",
                    "env": [{"name": "A"}],
                    "resources": {"limits": gpu, "requests": CPU},
                }
            ],
            "overhead": {"cpu": "100m", "memory": "10Mi"},
            "resources": {"requests": {"memory": "3Gi"}},
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}],
            "volumes": [{"name": "token"}],
            **({"nodeName": node} if node else {}),
        },
        "status": {
            "phase": "Running" if node else "Pending",
            "conditions": [
                {"type": "Ready", "status": "False", "message": "not yet"},
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": since}
                if node
                else {**REFUSED, "lastTransitionTime": since},
            ],
            "containerStatuses": [{"name": "main", "image": "pause"}],
        },
    }


def unapplied(pod: PlanPod) -> PlanPod:
    """The planned pod without kubectl's last applied configuration, the one annotation the cache does not keep."""
    return replace(pod, annotations={k: v for k, v in pod.annotations.items() if k != LAST_APPLIED})


@pytest.mark.parametrize("node", ["", "gpu-0"])
def test_the_planner_reads_the_planning_projections_as_the_whole_objects(node: str) -> None:
    nodes = [whole_node("gpu-0", "a"), whole_node("gpu-1", "b", DRAINING), whole_node("gpu-2", "a")]
    pods = [whole_pod("big", node=node, priority=100), whole_pod("small", node="gpu-0")]
    kept_nodes = [project_node_for_planning(n) for n in nodes]
    kept_pods = [project_pod_for_planning(p) for p in pods]
    marks = node_marks(nodes)
    assert node_marks(kept_nodes) == marks and marks.taints["gpu-1"] == (DEDICATED, DRAINING)
    for kept, whole in zip(kept_pods, pods, strict=True):
        planned = pod_for_plan(kept, marks)
        assert planned == unapplied(pod_for_plan(whole, marks))
        assert (planned.nodes, planned.untolerated) == ({"gpu-0"}, {"gpu-1": "draining:NoExecute"})
    planned, warned = snapshot_from_objects(kept_nodes, kept_pods, [], NOW)
    snapshot, warnings = snapshot_from_objects(nodes, pods, [], NOW)
    assert (planned, warned) == (replace(snapshot, pods=tuple(unapplied(p) for p in snapshot.pods)), warnings)
    event = {
        "reason": "FailedScheduling",
        "involvedObject": {"kind": "Pod", "namespace": "team-a", "name": "big", "uid": "uid-big"},
        "message": REFUSED["message"],
        "lastTimestamp": NOW.isoformat(),
    }
    found = rescue_candidates(kept_pods, [event], NOW, DefragPolicy())
    whole = rescue_candidates(pods, [event], NOW, DefragPolicy())
    assert [(c.key, c.reason, c.pending_since) for c in found] == [(c.key, c.reason, c.pending_since) for c in whole]
    assert len(found) == (0 if node else 1)


def test_the_planning_projection_leaves_out_what_no_plan_reads() -> None:
    kept = project_pod_for_planning(whole_pod("big"))
    assert LAST_APPLIED not in kept["metadata"]["annotations"] and "managedFields" not in kept["metadata"]
    assert "volumes" not in kept["spec"]

    def anywhere() -> dict[str, Any]:
        """The placed pod without its node selection: any node would do but for what is added below."""
        pod = whole_pod("big", node="gpu-0")
        del pod["spec"]["nodeSelector"], pod["spec"]["affinity"]
        return pod

    labels = node_marks([whole_node("gpu-0", "a"), whole_node("gpu-2", "a")])
    assert pod_for_plan(project_pod_for_planning(anywhere()), labels).nodes is None
    claimed = anywhere()
    claimed["spec"]["volumes"].append({"name": "data", "persistentVolumeClaim": {"claimName": "d", "readOnly": True}})
    projected = project_pod_for_planning(claimed)
    assert projected["spec"]["volumes"] == [{"name": "data", "persistentVolumeClaim": {"claimName": "d"}}]
    assert pod_for_plan(projected, labels).nodes == pod_for_plan(claimed, labels).nodes == {"gpu-0"}
    local = {"metadata": {"name": "pv"}, "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [{}]}}}}
    zonal = volumes_of([{"metadata": {"namespace": "team-a", "name": "d"}, "spec": {"volumeName": "pv"}}], [local])
    both = [runs_on(pod_for_plan(pod, labels, volumes=zonal), ("gpu-0", "gpu-2")) for pod in (projected, claimed)]
    assert both == [frozenset(), frozenset()], "the claim's name is kept: its volume's affinity is read"
    scratch = anywhere()
    asks = {
        "storageClassName": "local",
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "1Gi"}},
    }
    template = {
        "metadata": {"labels": {"x": "y"}, "annotations": {"x": "y"}},
        "spec": {**asks, "resources": {**asks["resources"], "limits": {"storage": "2Gi"}}, "dataSource": {}},
    }
    ephemeral = {"volumeClaimTemplate": template}
    scratch["spec"]["volumes"] += [{"name": "scratch", "ephemeral": ephemeral}, {"name": "cm", "configMap": {}}]
    kept_scratch = project_pod_for_planning(scratch)
    assert kept_scratch["spec"]["volumes"] == [
        {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": asks}}}
    ], "what its replacement's new claim asks of a volume, nothing else"
    assert new_claims(kept_scratch["spec"], "") == new_claims(scratch["spec"], "")
    template["metadata"]["annotations"][BETA_CLASS] = "slow"
    [kept_template] = project_pod_for_planning(scratch)["spec"]["volumes"]
    assert kept_template["ephemeral"]["volumeClaimTemplate"]["metadata"] == {"annotations": {BETA_CLASS: "slow"}}
    assert new_claims(project_pod_for_planning(scratch)["spec"], "") == new_claims(scratch["spec"], "")
    spread = anywhere()
    spread["spec"]["topologySpreadConstraints"] = [{"maxSkew": 1, "topologyKey": "zone"}]
    kept_spread = project_pod_for_planning(spread)
    assert pod_for_plan(kept_spread, labels).nodes == pod_for_plan(spread, labels).nodes == {"gpu-0"}
    listening = anywhere()
    listening["spec"]["containers"][0]["ports"] = [{"containerPort": 80}, {"containerPort": 9100, "hostPort": 9100}]
    kept_ports = project_pod_for_planning(listening)
    assert kept_ports["spec"]["containers"][0]["ports"] == [{"containerPort": 9100, "hostPort": 9100}], "host's only"
    assert pod_for_plan(kept_ports, labels).nodes == pod_for_plan(listening, labels).nodes == {"gpu-0"}
    claiming = anywhere()
    claiming["spec"]["resourceClaims"] = [{"name": "nic", "resourceClaimTemplateName": "rdma"}]
    kept_claims = project_pod_for_planning(claiming)
    assert pod_for_plan(kept_claims, labels).nodes == pod_for_plan(claiming, labels).nodes == {"gpu-0"}
    served = anywhere()
    served["spec"]["containers"][0]["ports"] = [{"containerPort": 80}]
    assert "ports" not in project_pod_for_planning(served)["spec"]["containers"][0]
    assert kept["spec"]["containers"] == [
        {
            "name": "main",
            "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "10000"}, "requests": CPU},
        }
    ]
    assert kept["spec"]["initContainers"][1] == {
        "name": "proxy",
        "resources": {"requests": PROXY},
        "restartPolicy": "Always",
    }
    assert (kept["spec"]["overhead"], kept["spec"]["resources"]) == (
        {"cpu": "100m", "memory": "10Mi"},
        {"requests": {"memory": "3Gi"}},
    )
    assert [c["type"] for c in kept["status"]["conditions"]] == ["PodScheduled"]
    assert "containerStatuses" not in kept["status"]
    node = project_node_for_planning(whole_node("gpu-0", "a"))
    assert "nodeInfo" not in node["status"]
    room = {"cpu": "8", "memory": "32Gi", "pods": "110", "ephemeral-storage": "1T"}
    assert node["status"]["allocatable"] == {"nvidia.com/gpu": "20", **room}, "the scalars too"


def test_the_planning_projection_keeps_the_volumes_the_policy_holds_pods_by() -> None:
    """evictLocalStoragePods and ignorePvcPods read a pod's emptyDir, hostPath and claimed volumes: the cache keeps
    their names and kinds (not a path, a medium or a size), so the server's plan holds the pods a whole pod's would."""
    pod = whole_pod("big", node="gpu-0")
    pod["spec"]["volumes"] += [
        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}},
        {"name": "models", "hostPath": {"path": "/models", "type": "Directory"}},
        {"name": "ckpt", "persistentVolumeClaim": {"claimName": "ckpt-0"}},
    ]
    kept = project_pod_for_planning(pod)
    assert kept["spec"]["volumes"] == [
        {"name": "shm", "emptyDir": {}},
        {"name": "models", "hostPath": {}},
        {"name": "ckpt", "persistentVolumeClaim": {"claimName": "ckpt-0"}},
    ]
    marks = node_marks([whole_node("gpu-0", "a")])
    planned = pod_for_plan(kept, marks)
    assert (planned.local_storage, planned.mounts_claim) == ("emptyDir", True)
    assert planned == unapplied(pod_for_plan(pod, marks))
    pod["spec"]["volumes"] = ["emptyDir", None, {"name": "cm", "configMap": {}}]
    assert "volumes" not in project_pod_for_planning(pod)["spec"], "nothing a plan reads"


def test_pods_of_one_template_share_their_planned_parts() -> None:
    one, other = (project_pod_for_planning(whole_pod(name, node="gpu-0")) for name in ("a-1", "a-2"))
    for part in ("containers", "initContainers", "affinity", "nodeSelector"):
        assert one["spec"][part] is other["spec"][part], part
    assert one["metadata"]["ownerReferences"] is not other["metadata"]["ownerReferences"], "another ReplicaSet"
    same = project_pod_for_planning(whole_pod("a-1", node="gpu-0"))
    assert same["metadata"]["ownerReferences"] is one["metadata"]["ownerReferences"]
    assert one["spec"]["containers"] == [
        {
            "name": "main",
            "resources": {"limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "10000"}, "requests": CPU},
        }
    ]


def plain_pod(name: str, node: str, phase: str = "Running") -> dict[str, Any]:
    """A web server of the default scheduler as the API server sends it: no card, CPU and memory asked."""
    return {
        "metadata": {
            "name": name,
            "namespace": "web",
            "uid": f"uid-{name}",
            "resourceVersion": "12",
            "labels": {"app": "web"},
            "annotations": {LAST_APPLIED: "{}"},
            "managedFields": [{"manager": "kubectl"}],
        },
        "spec": {
            "schedulerName": "default-scheduler",
            "nodeName": node,
            "initContainers": [
                {"name": "proxy", "image": "envoy", "restartPolicy": "Always", "resources": {"requests": PROXY}},
                {"name": "setup", "image": "busybox", "resources": {"requests": {"cpu": "3", "memory": "1Gi"}}},
            ],
            "containers": [{"name": "web", "image": "nginx", "resources": {"requests": {"cpu": "4", "memory": "2Gi"}}}],
            "overhead": {"cpu": "100m", "memory": "10Mi"},
            "volumes": [{"name": "token"}],
        },
        "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True"}], "podIP": "10.0.0.9"},
    }


def test_another_schedulers_pod_is_kept_as_what_it_asks_of_its_node_and_nothing_else() -> None:
    whole = plain_pod("web-1", "gpu-0")
    kept = project_counted_pod(whole)
    # The sidecar runs beside the app (4.5 CPU) and beside the setup container (3.5): the larger, plus overhead.
    asked = Resources(4600, (2048 + 128 + 10) * 2**20, 1)
    assert kept == {
        "metadata": {"name": "web-1", "namespace": "web", "resourceVersion": "12"},
        COUNTED: CountedPod("web", "web-1", "gpu-0", asked, labels={"app": "web"}),
    }
    nodes = [whole_node("gpu-0", "a")]
    assert node_remainders(nodes, [], [kept[COUNTED]]) == node_remainders(nodes, [whole])
    twin = project_counted_pod(plain_pod("web-2", "gpu-0"))[COUNTED]
    assert kept[COUNTED].needs is twin.needs, "shared"
    assert kept[COUNTED].labels is twin.labels, "shared"


def test_a_snapshot_from_the_caches_and_other_schedulers_pods_is_the_one_from_every_pod() -> None:
    nodes = [whole_node("gpu-0", "a"), whole_node("gpu-1", "b")]
    pods = [whole_pod("small", node="gpu-0"), plain_pod("web-1", "gpu-0"), plain_pod("web-2", "gpu-1")]
    others = [project_counted_pod(p)[COUNTED] for p in pods[1:]]
    kept_nodes = [project_node_for_planning(n) for n in nodes]
    planned, _ = snapshot_from_objects(kept_nodes, [project_pod_for_planning(pods[0])], [], NOW, others=others)
    snapshot, _ = snapshot_from_objects(nodes, pods, [], NOW)
    assert [n.room for n in planned.nodes] == [n.room for n in snapshot.nodes]
    [gpu_0, _] = planned.nodes
    # 8 CPU less the web pod's 4.6 and the GPU pod's 2 + 0.5 sidecar + 0.1 overhead.
    assert gpu_0.room is not None and gpu_0.room.cpu == 800


def test_a_node_without_gpus_keeps_the_room_a_plan_counts() -> None:
    """A CPU-only node still runs the pods a plan counts against: its projection must keep its CPU, memory and pods."""
    node = whole_node("cpu-0", "a")
    del node["status"]["allocatable"]["nvidia.com/gpu"]
    room = {"cpu": "8", "memory": "32Gi", "pods": "110", "ephemeral-storage": "1T"}
    assert project_node_for_planning(node)["status"]["allocatable"] == room


def test_another_schedulers_pod_whose_ask_is_malformed_is_kept_with_the_reason() -> None:
    """Any tenant may write a pod whose resources do not parse: keeping it must not stop the watch."""
    whole = plain_pod("web-1", "gpu-0")
    whole["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    assert project_counted_pod(whole)[COUNTED] == CountedPod(
        "web", "web-1", "gpu-0", "cpu request 'lots' is not a quantity such as 1, 3k or 1Gi", labels={"app": "web"}
    )


def test_other_schedulers_pods_decoded_apart_share_their_namespace_and_node_strings() -> None:
    """Tens of thousands of such pods on a few nodes and namespaces must hold those strings once."""
    one, other = (
        project_counted_pod(orjson.loads(orjson.dumps(plain_pod(name, "gpu-0"))))[COUNTED] for name in ("a", "b")
    )
    assert (one.namespace is other.namespace, one.node is other.node) == (True, True)


def test_nodes_decoded_apart_share_their_label_values() -> None:
    """Thousands of nodes carry the same zone, instance type and GPU feature labels: one string of each for all (the
    watch's orjson already shares the keys)."""
    one, other = (
        project_node(orjson.loads(orjson.dumps(whole_node(name, "z1"))))["metadata"]["labels"]
        for name in ("gpu-0", "gpu-1")
    )
    assert one["zone"] is other["zone"]
    assert one == {"kubernetes.io/hostname": "gpu-0", "zone": "z1"}


def test_the_controller_keeps_claims_and_volumes_read_once_and_nothing_else_of_them() -> None:
    """A claim and a volume are read when their watch brings them (`claim_of`, `volume_of`), not at each snapshot;
    of the objects only their keys and versions are kept beside (the reflector's key and order)."""
    affinity = {"required": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "k", "operator": "Exists"}]}]}}
    volume = {
        "metadata": {
            "name": "pv",
            "resourceVersion": "7",
            "labels": {"topology.kubernetes.io/zone": "z1", "x": "y"},
            "annotations": {BETA_CLASS: "local", "other": "dropped"},
        },
        "spec": {
            "nodeAffinity": affinity,
            "claimRef": {"namespace": "ns", "name": "data", "uid": "u"},
            "storageClassName": "local",
            "accessModes": ["ReadWriteOnce"],
            "volumeMode": "Block",
            "capacity": {"storage": "1Gi", "other": "2"},
            "mountOptions": ["ro"],
        },
        "status": {"phase": "Available", "message": "dropped"},
    }
    meta = {"namespace": "ns", "name": "data", "resourceVersion": "3"}
    claim = {
        "metadata": {**meta, "uid": "u", "labels": {"a": "b"}, "deletionTimestamp": "2026-12-05T00:00:00Z"},
        "spec": {"volumeName": "pv", "resources": {}},
    }
    kept_volume, kept_claim = project_volume(volume), project_volume_claim(claim)
    assert kept_volume == {"metadata": {"name": "pv", "resourceVersion": "7"}, VOLUME: volume_of(volume)}
    assert kept_claim == {"metadata": meta, CLAIM: claim_of(claim)}
    read = parsed_volumes([kept_claim[CLAIM]], [kept_volume[VOLUME]])
    assert read == volumes_of([claim], [volume])
    assert read.claims[("ns", "data")] == Claim("pv", deleting=True)
    assert read.volumes["pv"].offer.available and read.volumes["pv"].zones == (("topology.kubernetes.io/zone", {"z1"}),)


def test_the_controller_keeps_storage_classes_csi_drivers_and_capacities_read_once_and_nothing_else_of_them() -> None:
    """A class, a driver and a capacity are read when their watch brings them (`storage_class_of`,
    `capacity_driver_of`, `storage_capacity_of`), not at each snapshot; of the objects only their keys and versions
    are kept beside."""
    topologies = [{"matchLabelExpressions": [{"key": "zone", "values": ["z1"]}]}]
    default = {"storageclass.kubernetes.io/is-default-class": "true"}
    storage_class = {
        "metadata": {
            "name": "local",
            "resourceVersion": "4",
            "creationTimestamp": "2026-12-01T00:00:00Z",
            "annotations": {"x": "y", **default},
        },
        "provisioner": "csi.example.com",
        "volumeBindingMode": "WaitForFirstConsumer",
        "allowedTopologies": topologies,
        "parameters": {"type": "nvme"},
        "reclaimPolicy": "Delete",
    }
    driver = {
        "metadata": {"name": "csi.example.com", "resourceVersion": "5", "labels": {"x": "y"}},
        "spec": {"storageCapacity": True, "attachRequired": False},
    }
    plain = {"metadata": {"name": "nfs.example.com", "resourceVersion": "7"}, "spec": {"attachRequired": False}}
    kept_class, kept_driver = project_storage_class(storage_class), project_csi_driver(driver)
    assert kept_class == {
        "metadata": {"name": "local", "resourceVersion": "4"},
        STORAGE_CLASS: StorageClass("local", True, "csi.example.com", tuple(topologies), True, "2026-12-01T00:00:00Z"),
    }
    assert kept_driver == {
        "metadata": {"name": "csi.example.com", "resourceVersion": "5"},
        CAPACITY_DRIVER: "csi.example.com",
    }
    assert project_csi_driver(plain)[CAPACITY_DRIVER] == ""
    read = parsed_volumes([], [], [kept_class[STORAGE_CLASS]], [kept_driver[CAPACITY_DRIVER], ""])
    assert read == volumes_of([], [], [storage_class], [driver, plain])
    assert read.capacity_drivers == {"csi.example.com"}
    capacity = {
        "metadata": {"namespace": "topolvm", "name": "c", "resourceVersion": "6", "ownerReferences": [{}]},
        "storageClassName": "local",
        "capacity": "100Gi",
        "maximumVolumeSize": "50Gi",
        "nodeTopology": {"matchLabels": {"topology.topolvm.io/node": "a"}},
    }
    kept_capacity = project_storage_capacity(capacity)
    assert kept_capacity == {
        "metadata": {"namespace": "topolvm", "name": "c", "resourceVersion": "6"},
        STORAGE_CAPACITY: storage_capacity_of(capacity),
    }
    assert kept_capacity[STORAGE_CAPACITY].limit == 50 * 2**30
    assert parsed_volumes([], [], [], [], [kept_capacity[STORAGE_CAPACITY]]) == volumes_of([], [], [], [], [capacity])


def test_the_controller_keeps_csi_nodes_and_volume_attachments_read_once_and_nothing_else_of_them() -> None:
    """A CSINode's attach limits and a VolumeAttachment's node, volume and driver are read when their watch brings
    them (`csi_node_limits`, `attachment_of`), not at each snapshot; of the objects only their keys and versions are
    kept beside."""
    csi_node = {
        "metadata": {"name": "gpu-0", "resourceVersion": "8", "ownerReferences": [{}]},
        "spec": {
            "drivers": [
                {"name": "ebs.csi.aws.com", "nodeID": "i-0", "allocatable": {"count": 25}, "topologyKeys": ["zone"]},
                {"name": "nfs.example.com", "nodeID": "gpu-0"},
            ]
        },
    }
    attachment = {
        "metadata": {"name": "csi-0a1b", "resourceVersion": "9", "annotations": {"x": "y"}},
        "spec": {"attacher": "ebs.csi.aws.com", "nodeName": "gpu-0", "source": {"persistentVolumeName": "pv"}},
        "status": {"attached": True, "attachmentMetadata": {"devicePath": "/dev/xvdba"}},
    }
    kept_node, kept_attachment = project_csi_node(csi_node), project_volume_attachment(attachment)
    assert kept_node == {
        "metadata": {"name": "gpu-0", "resourceVersion": "8"},
        ATTACH_LIMITS: ("gpu-0", {"ebs.csi.aws.com": 25}),
    }
    assert kept_attachment == {
        "metadata": {"name": "csi-0a1b", "resourceVersion": "9"},
        ATTACHMENT: Attachment("gpu-0", "pv", "ebs.csi.aws.com"),
    }
    inline = {"metadata": {"name": "csi-2c3d", "resourceVersion": "10"}, "spec": {"attacher": "ebs.csi.aws.com"}}
    assert project_volume_attachment(inline)[ATTACHMENT] is None, "no PersistentVolume: kube-scheduler skips it"
    read = parsed_attach_limits([kept_node[ATTACH_LIMITS]], [kept_attachment[ATTACHMENT], None])
    assert read == attach_limits_of([csi_node], [attachment, inline])
    assert read.limits == {"gpu-0": {"ebs.csi.aws.com": 25}}
