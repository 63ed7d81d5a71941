"""The API server's answers on a reader of the server's API: a TokenReview of a bearer token and a
SubjectAccessReview of a right (bodies and their reading in `core/access.py`)."""

from __future__ import annotations

from typing import Any

from kubectl_hami_place.kube.client import Kube, by_path, request

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
SUBJECT_ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


def review_token(kube: Kube, review: dict[str, Any]) -> dict[str, Any]:
    """The answered TokenReview; a KubeError when the API server cannot be asked."""
    return request(kube, by_path(kube.api, "POST", TOKEN_REVIEWS, review), what="create tokenreviews")


def review_access(kube: Kube, review: dict[str, Any]) -> dict[str, Any]:
    """The answered SubjectAccessReview; a KubeError when the API server cannot be asked."""
    return request(kube, by_path(kube.api, "POST", SUBJECT_ACCESS_REVIEWS, review), what="create subjectaccessreviews")
