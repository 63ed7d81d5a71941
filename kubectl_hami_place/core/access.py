"""Who may read the server's API, decided as kube-rbac-proxy decides it: the caller's bearer token goes to a
TokenReview, the identity it names to a SubjectAccessReview of the right the document needs.

Pure: the review bodies, the reading of their answers, and which right each path asks (the server keeps the answers
a while, `webhook/access.py`, and calls the API through `kube/access.py`).
"""

from __future__ import annotations

import hashlib
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubectl_hami_place.core.names import GROUP, PLURAL

CLUSTER_INFO_PATH = "/api/v1/cluster-info"
PLACEMENTS_PATH = "/api/v1/placements"
DEFRAG_MOVES_PATH = "/api/v1/defrag/moves"
VERSION_PATH = "/api/v1/version"


@dataclass(frozen=True)
class Identity:
    """A caller as the API server's TokenReview named it."""

    user: str
    uid: str
    groups: tuple[str, ...]
    extra: tuple[tuple[str, tuple[str, ...]], ...]


@dataclass(frozen=True)
class Access:
    """The right a reader must hold: a verb on a resource, in one namespace or (namespace "") in all."""

    verb: str
    group: str
    resource: str
    namespace: str

    def describe(self) -> str:
        """As `kubectl auth can-i` takes it, e.g. `list pods -A`."""
        resource = f"{self.resource}.{self.group}" if self.group else self.resource
        where = f"-n {self.namespace}" if self.namespace else "-A"
        return f"{self.verb} {resource} {where}"


def required_access(path: str, namespace: str | None) -> Access | None:
    """The right the document at `path` needs (None: a path that serves no object, such as a probe or /metrics).

    cluster-info names every GPU pod of every namespace: listing pods cluster-wide; placements: listing them where
    the request reads them (`namespace`, else every namespace); the controller's moves are placements of every
    namespace."""
    if path == CLUSTER_INFO_PATH:
        return Access("list", "", "pods", "")
    if path == PLACEMENTS_PATH:
        return Access("list", GROUP, PLURAL, namespace or "")
    if path == DEFRAG_MOVES_PATH:
        return Access("list", GROUP, PLURAL, "")
    return None


def bearer_token(header: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` value; None when there is none or the scheme is another."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or any(c.isspace() for c in token):
        return None
    return token


def token_digest(token: str) -> str:
    """The SHA-256 of a token: what the memo keys by, so no token is kept or logged."""
    return hashlib.sha256(token.encode()).hexdigest()


def is_loopback(address: str | None) -> bool:
    """Whether a peer address is loopback (IPv4, IPv6 or IPv4-mapped): a process of the server's own pod."""
    if not address:
        return False
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
    return ip.is_loopback or (mapped is not None and mapped.is_loopback)


def token_review(token: str) -> dict[str, Any]:
    """The TokenReview asking the API server who holds `token` (its own audiences: a token for another is refused)."""
    return {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}


def reviewed_identity(body: Mapping[str, Any]) -> Identity | None:
    """The identity of an answered TokenReview; None when the token did not authenticate."""
    status = body.get("status") or {}
    user = status.get("user") or {}
    name = user.get("username")
    if status.get("authenticated") is not True or not isinstance(name, str) or not name:
        return None
    extra = user.get("extra") or {}
    return Identity(
        user=name,
        uid=str(user.get("uid") or ""),
        groups=tuple(str(g) for g in user.get("groups") or ()),
        extra=tuple(sorted((str(k), tuple(str(v) for v in vs or ())) for k, vs in extra.items())),
    )


def access_review(identity: Identity, access: Access) -> dict[str, Any]:
    """The SubjectAccessReview asking whether `identity` holds `access`."""
    attributes: dict[str, Any] = {"verb": access.verb, "group": access.group, "resource": access.resource}
    if access.namespace:
        attributes["namespace"] = access.namespace
    spec: dict[str, Any] = {"user": identity.user, "groups": list(identity.groups), "resourceAttributes": attributes}
    if identity.uid:
        spec["uid"] = identity.uid
    if identity.extra:
        spec["extra"] = {key: list(values) for key, values in identity.extra}
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}


def review_allows(body: Mapping[str, Any]) -> bool:
    """Whether an answered SubjectAccessReview allows (a denial, no opinion or an evaluation error do not)."""
    status = body.get("status") or {}
    return status.get("allowed") is True and status.get("denied") is not True
