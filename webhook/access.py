"""Who may read the HTTP API (`/api/v1/cluster-info`, `/api/v1/placements`): a caller from the pod's own loopback,
or one whose bearer token the API server authenticates (TokenReview) and authorizes for the right the document
needs (SubjectAccessReview), as kube-rbac-proxy does. Answers are kept briefly, keyed by the token's digest."""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from kubectl_hami_place.core.access import (
    Access,
    Identity,
    access_review,
    bearer_token,
    is_loopback,
    review_allows,
    reviewed_identity,
    token_digest,
    token_review,
)
from kubectl_hami_place.kube.errors import KubeError

log = logging.getLogger(__name__)

K = TypeVar("K")
V = TypeVar("V")
# How long an answer is kept: a revoked right or an expired token is honoured within this.
ANSWER_SECONDS = 30.0
# How many answers are kept, of each kind: a client with a fresh token each time costs one entry, never more memory.
ANSWERS_KEPT = 1024

Review = Callable[[dict[str, Any]], dict[str, Any]]


class ExpiringMemo(Generic[K, V]):
    """Answers kept `ttl` seconds on `clock`, at most `size` of them (the oldest go first), safe across threads."""

    def __init__(self, ttl: float, size: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._ttl = ttl
        self._size = size
        self._clock = clock
        self._lock = threading.Lock()
        self._answers: OrderedDict[K, tuple[float, V]] = OrderedDict()

    def get(self, key: K) -> tuple[bool, V | None]:
        """(True, the answer) while it is kept, else (False, None)."""
        with self._lock:
            kept = self._answers.get(key)
            if kept is None:
                return False, None
            if kept[0] <= self._clock():
                del self._answers[key]
                return False, None
            return True, kept[1]

    def put(self, key: K, answer: V) -> None:
        """Keep `answer` for `ttl` seconds from now, dropping the oldest answers beyond `size`."""
        with self._lock:
            self._answers.pop(key, None)
            self._answers[key] = (self._clock() + self._ttl, answer)
            while len(self._answers) > self._size:
                self._answers.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._answers)


@dataclass(frozen=True)
class Refusal:
    """Why a read is not served: 401 (no identity), 403 (no right), 503 (the API server could not be asked)."""

    status: int
    reason: str


class ReaderGate:
    """Decides whether a request may read a document; the reviews are the API server's (kube/access.py)."""

    def __init__(
        self,
        review_token: Review,
        review_access: Review,
        *,
        ttl: float = ANSWER_SECONDS,
        size: int = ANSWERS_KEPT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._review_token = review_token
        self._review_access = review_access
        self._identities: ExpiringMemo[str, Identity | None] = ExpiringMemo(ttl, size, clock)
        self._rights: ExpiringMemo[tuple[str, Access], bool] = ExpiringMemo(ttl, size, clock)

    def refusal(self, peer: str | None, authorization: str | None, access: Access) -> Refusal | None:
        """None when the read is served: the peer is the pod's own loopback (the container itself, or a
        `kubectl port-forward`, which needs `create pods/portforward` on the server's pod), or the bearer token in
        `authorization` names an identity holding `access`."""
        if is_loopback(peer):
            return None
        token = bearer_token(authorization)
        if token is None:
            return Refusal(
                401, "no bearer token: send Authorization: Bearer <token> of a user who may " + access.describe()
            )
        digest = token_digest(token)
        try:
            identity = self._identity(token, digest)
            if identity is None:
                return Refusal(401, "the API server does not authenticate this bearer token")
            if not self._allowed(identity, digest, access):
                return Refusal(403, f"user {identity.user!r} may not {access.describe()}")
        except KubeError as error:
            return Refusal(503, f"cannot ask the API server who the caller is: {error.cause}; retry")
        return None

    def _identity(self, token: str, digest: str) -> Identity | None:
        kept, identity = self._identities.get(digest)
        if not kept:
            identity = reviewed_identity(self._review_token(token_review(token)))
            self._identities.put(digest, identity)
        return identity

    def _allowed(self, identity: Identity, digest: str, access: Access) -> bool:
        kept, allowed = self._rights.get((digest, access))
        if not kept or allowed is None:
            allowed = review_allows(self._review_access(access_review(identity, access)))
            self._rights.put((digest, access), allowed)
            if not allowed:
                # Once per answer asked, not per request: a refused client repeating itself does not fill the log.
                log.info("API read refused: user %r may not %s", identity.user, access.describe())
        return allowed
