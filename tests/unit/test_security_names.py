"""Names from pods, reviews and Leases never become API paths: the core's name rules, the adapter's refusals, and
the kind check of a placement read.

The kind check needs an API server that answers a placement's path with another object, which a real one does
only through the traversal the other checks prevent: a local HTTP server plays it (the only fake here).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes.client import Configuration, CustomObjectsApi

from kubectl_hami_place.core.k8s_names import is_generate_name, is_namespace, is_namespaced_name, is_object_name
from kubectl_hami_place.core.reviews import ReviewError, parse_review
from kubectl_hami_place.kube.client import CheckedApiClient, Kube, PathError, by_path, request
from kubectl_hami_place.kube.errors import KubeInvalid, KubeServerError
from kubectl_hami_place.kube.placements import get_placement
from tests.http_stand_in import answering_gets

TRAVERSALS = ["../../../../../../api/v1/pods", "..", ".", "p/status", "a/../../b", ""]


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("train-0", True),
        ("a.b-c.d", True),
        ("x" * 253, True),
        ("x" * 254, False),
        ("Train", False),
        ("a_b", False),
        ("-a", False),
        ("a.", False),
        *((t, False) for t in TRAVERSALS),
    ],
)
def test_object_names_follow_dns_1123_subdomains(name: str, ok: bool) -> None:
    assert is_object_name(name) is ok


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("team-a", True),
        ("x" * 63, True),
        ("x" * 64, False),
        ("a.b", False),
        (None, False),
        *((t, False) for t in TRAVERSALS),
    ],
)
def test_namespaces_follow_dns_1123_labels(name: object, ok: bool) -> None:
    assert is_namespace(name) is ok


@pytest.mark.parametrize(
    ("prefix", "ok"),
    [
        ("train-", True),
        ("a.b-", True),
        ("train", True),
        ("web.", False),
        ("pod_", False),
        ("pod_-", False),
        ("a/b-", False),
        ("", False),
        (None, False),
        *((t, False) for t in TRAVERSALS),
    ],
)
def test_a_generate_name_is_a_subdomain_once_its_trailing_dash_is_read_as_a_letter(prefix: object, ok: bool) -> None:
    assert is_generate_name(prefix) is ok


@pytest.mark.parametrize(
    ("namespace", "name", "ok"),
    [
        ("team-a", "train-0", True),
        ("x" * 63, "x" * 253, True),
        ("x" * 64, "train-0", False),
        ("team-a", "x" * 254, False),
        ("0team", "0.train.1", True),
        ("Team-a", "train-0", False),
        ("team-a", "Train-0", False),
        ("-team", "train-0", False),
        ("team-a", "-train", False),
        ("team-", "train-0", False),
        ("team-a", "train.", False),
        ("team.a", "train-0", False),
        ("team-a", "a..b", False),
        ("", "train-0", False),
        ("team-a", "", False),
        (None, "train-0", False),
        ("team-a", None, False),
        ("kube-system", "pods/x", False),
    ],
)
def test_a_namespaced_name_is_a_namespace_label_and_a_subdomain_name(namespace: object, name: object, ok: bool) -> None:
    assert is_namespaced_name(namespace, name) is ok


def review(namespace: str) -> dict[str, Any]:
    request = {"uid": "u", "kind": {"kind": "Pod"}, "operation": "CREATE", "namespace": namespace, "object": {}}
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


@pytest.mark.parametrize("namespace", ["../../api/v1", "kube-system/pods", "Team-A"])
def test_a_review_whose_namespace_is_no_namespace_name_is_refused(namespace: str) -> None:
    with pytest.raises(ReviewError, match="is not a namespace name"):
        parse_review(review(namespace))
    assert parse_review(review("team-a")).namespace == "team-a"


def nowhere() -> Kube:
    """A connection to a closed port: a call that reached the network would fail with another error."""
    configuration = Configuration()
    configuration.host = "http://127.0.0.1:9"
    configuration.retries = 0
    return Kube(api=CheckedApiClient(configuration), namespace="default", server=configuration.host, context=None)


@pytest.mark.parametrize("name", ["../../../../../../api/v1/pods", "..", "a/b"])
def test_a_generated_api_call_refuses_a_path_parameter_that_is_not_one_segment(name: str) -> None:
    kube = nowhere()
    api = CustomObjectsApi(kube.api)
    with pytest.raises(PathError, match="not a Kubernetes name"):
        request(kube, api.get_namespaced_custom_object, "g", "v1", "ns", "things", name, what="get things")


@pytest.mark.parametrize("path", ["/api/v1/namespaces/a/../../pods", "/api/v1/./pods", "/api/v1/namespaces/a%2F..%2F"])
def test_a_path_call_refuses_a_path_that_steps_anywhere(path: str) -> None:
    with pytest.raises(PathError, match="not a plain path"):
        by_path(nowhere().api, "GET", path)


@pytest.mark.parametrize(("namespace", "name"), [("team-a", "../../../../api/v1/pods"), ("../..", "p"), ("a", "P")])
def test_a_placement_read_refuses_a_name_no_placement_can_have(namespace: str, name: str) -> None:
    with pytest.raises(KubeInvalid, match="cannot name a placement"):
        get_placement(nowhere(), namespace, name)


@pytest.fixture
def answers_with_a_pod() -> Iterator[Kube]:
    """An API server stand-in that answers every GET with a Pod named like the placement asked for."""

    def answer(path: str) -> tuple[int, bytes]:
        name = path.rsplit("/", 1)[-1]
        return 200, json.dumps(
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "team-a"}}
        ).encode()

    with answering_gets(answer) as url:
        configuration = Configuration()
        configuration.host = url
        yield Kube(api=CheckedApiClient(configuration), namespace="team-a", server=url, context=None)


def test_a_placement_read_that_returns_another_kind_is_refused(answers_with_a_pod: Kube) -> None:
    with pytest.raises(KubeServerError, match="returned Pod team-a/p, not that placement"):
        get_placement(answers_with_a_pod, "team-a", "p")
