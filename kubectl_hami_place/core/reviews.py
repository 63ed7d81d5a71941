"""AdmissionReview (admission.k8s.io/v1) structures: the request parsed once, the response built by a pure function.

The server parses a body with `parse_review` (a ReviewError is its 400) and hands the `Review` to the decision;
whatever the decision, `build_response` writes the answer, which never denies a pod.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubectl_hami_place.core.errors import ModelError, clip
from kubectl_hami_place.core.k8s_names import is_namespace

ADMISSION_API_VERSION = "admission.k8s.io/v1"
# How deep an AdmissionReview may nest: a Pod's review is about 15 levels deep; a deeper body would only reach
# Python's recursion limit in the decision (str(), the patch diff) and be a 500 instead of a 400.
MAX_NESTING = 100
# The API server's review UIDs are 36-character UUIDs; a longer one is no review of its, and is echoed and logged.
MAX_UID = 128
# A username longer than this is cut where it is logged.
MAX_USERNAME = 512


class ReviewError(ModelError):
    """The request body is not an AdmissionReview the webhook can answer (the server replies 400)."""


@dataclass(frozen=True)
class Review:
    """The parts of an AdmissionReview request the decision reads."""

    uid: str
    operation: str
    kind: str
    group: str
    sub_resource: str
    namespace: str
    name: str
    dry_run: bool
    pod: Mapping[str, Any]
    # userInfo.username: who asked the API server for this pod (for the log of claims).
    user: str = ""

    @property
    def annotations(self) -> Mapping[str, Any]:
        """The object's annotations ({} when it has none)."""
        metadata = self.pod.get("metadata")
        annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
        return annotations if isinstance(annotations, Mapping) else {}


def parse_review(body: object) -> Review:
    """Check that the body is an admission.k8s.io/v1 AdmissionReview request, and extract what the decision needs."""
    if not isinstance(body, dict):
        raise ReviewError("the body must be a JSON object (an AdmissionReview)")
    if nests_deeper(body, MAX_NESTING):
        raise ReviewError(f"the body nests deeper than {MAX_NESTING} levels; an AdmissionReview of a Pod never does")
    if body.get("apiVersion") != ADMISSION_API_VERSION or body.get("kind") != "AdmissionReview":
        raise ReviewError(
            f"expected apiVersion {ADMISSION_API_VERSION} kind AdmissionReview, "
            f"got {_shown(body.get('apiVersion'))} {_shown(body.get('kind'))}"
        )
    request = body.get("request")
    if not isinstance(request, dict):
        raise ReviewError("the AdmissionReview has no request object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise ReviewError("the AdmissionReview request has no uid")
    if len(uid) > MAX_UID:
        raise ReviewError(f"the AdmissionReview request's uid is {len(uid)} characters; the API server's are 36")
    kind = request.get("kind")
    if not isinstance(kind, dict):
        kind = {}
    operation = request.get("operation")
    if not isinstance(operation, str) or not operation:
        raise ReviewError("the AdmissionReview request has no operation")
    pod = request.get("object")
    if operation == "CREATE" and not isinstance(pod, dict):
        raise ReviewError("a CREATE AdmissionReview request must carry the object")
    for field in ("namespace", "name", "subResource"):
        if not isinstance(request.get(field, ""), str | None):
            raise ReviewError(f"the AdmissionReview request's {field} must be a string")
    namespace = str(request.get("namespace") or "")
    if namespace and not is_namespace(namespace):
        # The API server only sends namespaces that exist; this one could only reach an API path as a path.
        raise ReviewError(f"the AdmissionReview request's namespace {clip(repr(namespace))} is not a namespace name")
    metadata = pod.get("metadata") if isinstance(pod, dict) else None
    named = metadata.get("namespace") if isinstance(metadata, dict) else None
    if operation == "CREATE" and kind.get("kind") == "Pod" and (not namespace or named not in (None, "", namespace)):
        # The API server sends a pod's namespace and sets its metadata's to it: one namespace decides, checked.
        raise ReviewError("a Pod's CREATE AdmissionReview request must name the namespace its object's metadata names")
    return Review(
        uid=uid,
        operation=operation,
        kind=_text(kind.get("kind")),
        group=_text(kind.get("group")),
        sub_resource=str(request.get("subResource") or ""),
        namespace=namespace,
        name=str(request.get("name") or ""),
        dry_run=request.get("dryRun") is True,
        pod=pod if isinstance(pod, dict) else {},
        user=_username(request.get("userInfo")),
    )


def nests_deeper(value: object, limit: int) -> bool:
    """Whether a parsed JSON value holds lists or objects more than `limit` levels deep: walked a level at a time,
    without recursion, each level one comprehension (a node at a time held the loop 0.8 s on a 4 MB review)."""
    level = [value] if isinstance(value, dict | list) else []
    depth = 1
    while level:
        level = [
            child
            for item in level
            for child in (item.values() if isinstance(item, dict) else item)
            if isinstance(child, dict | list)
        ]
        depth += 1
        if level and depth > limit:
            return True
    return False


def _shown(value: object) -> str:
    """A value the body gave where a string belongs, for a message: the string cut short, else its JSON type."""
    return clip(repr(value), 64) if isinstance(value, str) else type(value).__name__


def _text(value: object) -> str:
    """A string field of the request ('' when absent or not a string)."""
    return value if isinstance(value, str) else ""


def _username(user_info: object) -> str:
    """userInfo.username, '' when absent or not a string."""
    name = user_info.get("username") if isinstance(user_info, dict) else None
    return name[:MAX_USERNAME] if isinstance(name, str) else ""


def build_response(uid: str, patch: Sequence[Mapping[str, Any]] = (), warnings: Sequence[str] = ()) -> dict[str, Any]:
    """The AdmissionReview to send back: allowed, with the JSON patch and the warnings when there are any."""
    body: dict[str, Any] = {"uid": uid, "allowed": True}
    if patch:
        body["patchType"] = "JSONPatch"
        body["patch"] = base64.b64encode(json.dumps(list(patch)).encode()).decode()
    if warnings:
        body["warnings"] = list(warnings)
    return {"apiVersion": ADMISSION_API_VERSION, "kind": "AdmissionReview", "response": body}
