"""Fuzz target: POST /mutate through the ASGI app with any body, content type and size: never a 5xx or a traceback.

The cache holds a GPU node and an open placement, so well-shaped reviews reach the decision; the Kubernetes client
points nowhere, so a claim write fails fast and the pod is admitted unchanged.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import assume, given
from hypothesis import strategies as st

from tests.fuzz.strategies import FUZZ, either, json_values
from tests.unit.test_admission import pod as admission_pod
from tests.unit.test_admission import review as admission_review
from tests.unit.test_webhook_api import NS, admitter, filled_cache, gpu_node, placement
from tests.webhook_listener import call
from webhook.metrics import Metrics
from webhook.mutate import MAX_REVIEW_BYTES, MutateApp

METRICS = Metrics()
APP = MutateApp(admitter(filled_cache([placement()], []), METRICS), METRICS)
# The placement's node labelled and tainted, in a cache that keeps its labels (the controller plans): a review that
# reaches the pin is read against its node selection and tolerations too.
MARKED = gpu_node()
MARKED["metadata"]["labels"] = {"pool": "train", "kubernetes.io/hostname": MARKED["metadata"]["name"]}
MARKED["spec"] = {"taints": [{"key": "team", "value": "b", "effect": "NoSchedule"}]}
MARKED_APP = MutateApp(admitter(filled_cache([placement()], [], node=MARKED, planning=True), METRICS), METRICS)
CONTENT_TYPES = [
    "application/json",
    "application/json; charset=utf-8",
    "text/plain",
    "",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x",
    "application/merge-patch+json",
]
OUR_ANNOTATIONS = [
    "scheduling.hami.placement.com/claim",
    "scheduling.hami.placement.com/placement",
    "scheduling.hami.placement.com/req-id",
    "nvidia.com/use-gpuuuid",
    "hami.io/vgpu-devices-allocated",
]

# A header value as it can arrive on the wire: printable ASCII (a newline would end the header).
header_text = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=40)
containers = st.lists(
    st.fixed_dictionaries(
        {
            "name": either("main"),
            "image": either("busybox"),
            "resources": either({"limits": {"nvidia.com/gpu": "1"}})
            | st.fixed_dictionaries(
                {
                    "limits": st.dictionaries(
                        st.sampled_from(
                            [
                                "nvidia.com/gpu",
                                "nvidia.com/gpumem",
                                "nvidia.com/gpumem-percentage",
                                "nvidia.com/gpucores",
                                "cpu",
                            ]
                        ),
                        json_values,
                        max_size=3,
                    )
                }
            ),
        }
    ),
    max_size=3,
)
# A truthy value that is no list, where a list belongs: what a review sent to the server straight may hold.
not_a_list = st.integers(min_value=1) | st.just(True) | st.floats(min_value=1, max_value=9) | json_values


def mostly(shaped: st.SearchStrategy[Any], instead: st.SearchStrategy[Any] = json_values) -> st.SearchStrategy[Any]:
    """Mostly the shaped value (so that the levels below are reached), otherwise `instead` in its place."""
    return st.one_of(shaped, shaped, shaped, instead)


requirements = mostly(
    st.lists(
        mostly(
            st.fixed_dictionaries(
                {
                    "key": either("pool"),
                    "operator": mostly(st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"])),
                    "values": st.lists(st.sampled_from(["train", "serve", "1"]), max_size=2) | not_a_list,
                }
            )
        ),
        min_size=1,
        max_size=2,
    ),
    not_a_list,
)
node_affinity = st.fixed_dictionaries(
    {
        "nodeAffinity": mostly(
            st.fixed_dictionaries(
                {
                    "requiredDuringSchedulingIgnoredDuringExecution": mostly(
                        st.fixed_dictionaries(
                            {
                                "nodeSelectorTerms": mostly(
                                    st.lists(
                                        mostly(
                                            st.fixed_dictionaries(
                                                {"matchExpressions": requirements, "matchFields": requirements}
                                            )
                                        ),
                                        min_size=1,
                                        max_size=2,
                                    ),
                                    not_a_list,
                                )
                            }
                        )
                    )
                }
            )
        )
    }
)
tolerations = (
    st.lists(
        st.fixed_dictionaries(
            {
                "key": either("team"),
                "operator": st.sampled_from(["Equal", "Exists"]) | json_values,
                "value": either("b"),
                "effect": st.sampled_from(["NoSchedule", "NoExecute", ""]) | json_values,
            }
        )
        | json_values,
        max_size=2,
    )
    | json_values
)
pods = st.fixed_dictionaries(
    {
        "apiVersion": either("v1"),
        "kind": either("Pod"),
        "metadata": st.fixed_dictionaries(
            {
                "name": either("trainer"),
                "namespace": either(NS),
                "labels": either({"app": "train"}),
                "annotations": st.dictionaries(st.sampled_from(OUR_ANNOTATIONS), json_values, max_size=3) | json_values,
            }
        ),
        "spec": st.fixed_dictionaries(
            {
                "schedulerName": either("hami-scheduler"),
                "containers": containers | json_values,
                "initContainers": containers | json_values,
                "affinity": node_affinity | json_values,
                "nodeSelector": st.dictionaries(
                    st.sampled_from(["pool", "zone"]) | st.text(max_size=5), either("train")
                )
                | json_values,
                "tolerations": tolerations,
            }
        ),
    }
)
reviews = st.fixed_dictionaries(
    {
        "apiVersion": either("admission.k8s.io/v1"),
        "kind": either("AdmissionReview"),
        "request": st.fixed_dictionaries(
            {
                "uid": either("fuzz-uid"),
                "kind": either({"group": "", "version": "v1", "kind": "Pod"}),
                "operation": either("CREATE"),
                "namespace": either(NS),
                "object": pods | json_values,
                "dryRun": either(True),
            }
        ),
    }
)


def post(body: bytes, content_type: str, app: MutateApp = APP) -> Any:
    status, _headers, reply = call(app, "POST", "/mutate", body, content_type=content_type or None)
    text = reply.decode()
    assert status < 500, (status, text[:500])
    assert "Traceback" not in text
    answer = json.loads(text)
    if status == 200:
        assert answer["response"]["allowed"] is True, "a pod is never refused"
    else:
        assert isinstance(answer["error"], str) and "\n" not in answer["error"]
    return answer


@FUZZ
@given(reviews)
def test_review_shaped_bodies(review: dict[str, Any]) -> None:
    post(json.dumps(review).encode(), "application/json")


def taken_pod(scheduling: dict[str, Any]) -> dict[str, Any]:
    """A pod the placement takes, with this node selection and these tolerations."""
    pod = admission_pod()
    pod["spec"].update(scheduling)
    return pod


# A pod the placement takes but for where it may go: only its node selection and tolerations vary.
placed_pods = st.fixed_dictionaries(
    {
        "affinity": node_affinity | json_values,
        "nodeSelector": mostly(
            st.just({}), st.dictionaries(st.sampled_from(["pool", "zone"]) | st.text(max_size=5), either("train"))
        ),
        "tolerations": tolerations,
    }
).map(taken_pod)


@FUZZ
@given(placed_pods)
def test_a_pod_the_placement_takes_whatever_its_node_selection_and_tolerations(pod: dict[str, Any]) -> None:
    review = admission_review(pod, dry_run=True, uid="fuzz-uid")
    body = json.dumps(review)
    assume("Infinity" not in body)  # not JSON: refused whole before any decision (the other targets cover that)
    answer = post(body.encode(), "application/json", MARKED_APP)
    warnings = answer["response"].get("warnings", [])
    assert not any("internal error" in warning for warning in warnings), warnings
    assert "patch" in answer["response"] or any("skipped for this pod" in warning for warning in warnings), answer


@FUZZ
@given(json_values, st.sampled_from(CONTENT_TYPES))
def test_any_json_body(body: Any, content_type: str) -> None:
    post(json.dumps(body).encode(), content_type)


@FUZZ
@given(st.binary(max_size=4096), st.sampled_from(CONTENT_TYPES) | header_text)
def test_any_bytes_and_content_type(body: bytes, content_type: str) -> None:
    post(body, content_type)


@FUZZ
@given(
    st.sampled_from([0, 1, 4096, MAX_REVIEW_BYTES, MAX_REVIEW_BYTES + 1, 2 * MAX_REVIEW_BYTES]),
    st.sampled_from(["{", "[", '"', "1"]),
)
def test_any_size(size: int, first: str) -> None:
    post((first + " " * size).encode(), "application/json")
