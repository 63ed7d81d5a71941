"""Who may read the server's API: the right each path asks, the bearer token, loopback, the review bodies and
answers (issue 23 item 3); the expiring memo of answers on a clock of the test's own."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from kubectl_hami_place.core.access import (
    Access,
    Identity,
    access_review,
    bearer_token,
    is_loopback,
    required_access,
    review_allows,
    reviewed_identity,
    token_digest,
    token_review,
)
from kubectl_hami_place.kube.errors import KubeError
from tests.unit.test_webhook_api import filled_cache
from webhook.access import ExpiringMemo, ReaderGate, Refusal
from webhook.api import api_app
from webhook.metrics import Metrics

PLACEMENTS = "scheduling.hami.placement.com"


def test_each_document_asks_the_right_to_list_what_it_names() -> None:
    assert required_access("/api/v1/cluster-info", None) == Access("list", "", "pods", "")
    assert required_access("/api/v1/cluster-info", "team-a") == Access("list", "", "pods", "")
    assert required_access("/api/v1/placements", None) == Access("list", PLACEMENTS, "hamipodplacements", "")
    assert required_access("/api/v1/placements", "team-a") == Access("list", PLACEMENTS, "hamipodplacements", "team-a")
    # The controller's moves are placements of every namespace, whatever namespace the request names.
    assert required_access("/api/v1/defrag/moves", "team-a") == Access("list", PLACEMENTS, "hamipodplacements", "")
    for path in ("/healthz", "/readyz", "/metrics", "/api/v1/other"):
        assert required_access(path, None) is None, path
    assert Access("list", "", "pods", "").describe() == "list pods -A"
    assert (
        Access("list", PLACEMENTS, "hamipodplacements", "a").describe() == f"list hamipodplacements.{PLACEMENTS} -n a"
    )


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ("Bearer abc.def", "abc.def"),
        ("bearer abc", "abc"),
        ("  Bearer   abc  ", "abc"),
        (None, None),
        ("", None),
        ("Bearer", None),
        ("Bearer ", None),
        ("Basic dXNlcjpwYXNz", None),
        ("Bearer a b", None),
    ],
)
def test_the_bearer_token_of_an_authorization_value(header: str | None, token: str | None) -> None:
    assert bearer_token(header) == token


@pytest.mark.parametrize(
    ("address", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.3.2.1", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),
        ("10.0.0.7", False),
        ("::ffff:10.0.0.7", False),
        ("fe80::1%eth0", False),
        ("::1%lo", True),
        ("127.0.0.1%lo", True),
        ("127.0.0.1 10.0.0.7", False),
        ("", False),
        (None, False),
        ("localhost", False),
    ],
)
def test_only_a_loopback_peer_is_the_pod_itself(address: str | None, loopback: bool) -> None:
    assert is_loopback(address) is loopback


def test_a_token_review_names_the_identity_only_when_authenticated() -> None:
    assert token_review("t0k") == {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": "t0k"},
    }
    answered = {
        "status": {
            "authenticated": True,
            "user": {
                "username": "system:serviceaccount:team-a:viewer",
                "uid": "u-1",
                "groups": ["system:serviceaccounts", "system:authenticated"],
                "extra": {"authentication.kubernetes.io/pod-name": ["p"]},
            },
        }
    }
    identity = reviewed_identity(answered)
    assert identity == Identity(
        user="system:serviceaccount:team-a:viewer",
        uid="u-1",
        groups=("system:serviceaccounts", "system:authenticated"),
        extra=(("authentication.kubernetes.io/pod-name", ("p",)),),
    )
    assert reviewed_identity({"status": {"authenticated": False, "error": "invalid bearer token"}}) is None
    assert reviewed_identity({"status": {"authenticated": True, "user": {}}}) is None
    assert reviewed_identity({}) is None


@pytest.mark.parametrize(
    "status",
    [
        {"authenticated": False, "user": {"username": "alice"}},
        {"authenticated": "true", "user": {"username": "alice"}},
        {"authenticated": True, "user": {"username": ""}},
        {"authenticated": True, "user": {"username": 7}},
    ],
)
def test_a_review_not_authenticated_or_naming_no_user_names_no_identity(status: dict[str, object]) -> None:
    """A user named in an unauthenticated answer, or a blank or non-string name, is nobody to ask access for."""
    assert reviewed_identity({"status": status}) is None


def test_an_identity_without_uid_groups_or_extra_has_them_empty() -> None:
    """No made-up UID reaches the access review: the API server would check it."""
    answered = {"status": {"authenticated": True, "user": {"username": "alice"}}}
    assert reviewed_identity(answered) == Identity(user="alice", uid="", groups=(), extra=())


def test_an_access_review_carries_the_whole_identity_and_the_namespace_only_when_there_is_one() -> None:
    identity = Identity("jane", "u-2", ("devs",), (("scopes", ("a", "b")),))
    cluster_wide = access_review(identity, Access("list", "", "pods", ""))
    assert cluster_wide == {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": "jane",
            "uid": "u-2",
            "groups": ["devs"],
            "extra": {"scopes": ["a", "b"]},
            "resourceAttributes": {"verb": "list", "group": "", "resource": "pods"},
        },
    }
    spec: dict[str, Any] = access_review(
        Identity("bob", "", (), ()), Access("list", PLACEMENTS, "hamipodplacements", "team-a")
    )["spec"]
    assert spec == {
        "user": "bob",
        "groups": [],
        "resourceAttributes": {
            "verb": "list",
            "group": PLACEMENTS,
            "resource": "hamipodplacements",
            "namespace": "team-a",
        },
    }


def test_only_an_explicit_allow_allows() -> None:
    assert review_allows({"status": {"allowed": True}})
    assert not review_allows({"status": {"allowed": False, "reason": "no RBAC policy matched"}})
    assert not review_allows({"status": {"allowed": False, "denied": True}})
    assert not review_allows({"status": {"allowed": True, "denied": True}})
    assert not review_allows({"status": {"evaluationError": "webhook unreachable"}})
    assert not review_allows({})


def test_the_memo_keeps_an_answer_for_its_time_and_its_size_only() -> None:
    now = [100.0]
    memo: ExpiringMemo[str, bool] = ExpiringMemo(ttl=30, size=2, clock=lambda: now[0])
    memo.put("a", True)
    now[0] = 129.9
    assert memo.get("a") == (True, True)
    now[0] = 130.0
    assert memo.get("a") == (False, None), "kept no longer than its time"
    memo.put("a", False)
    memo.put("b", True)
    memo.put("c", True)
    assert len(memo) == 2
    assert memo.get("a") == (False, None), "the oldest answer goes first"
    assert memo.get("b") == (True, True) and memo.get("c") == (True, True)


def test_the_memo_is_keyed_by_the_tokens_sha256() -> None:
    assert token_digest("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"


def never_asked(review: dict[str, Any]) -> dict[str, Any]:
    raise AssertionError(f"the API server was asked a {review['kind']}")


def test_a_caller_off_loopback_without_a_token_gets_401_and_a_bad_namespace_400_before_any_review() -> None:
    app = api_app(filled_cache([], []), Metrics(), readers=ReaderGate(never_asked, never_asked))
    remote = app.test_client()
    remote.environ_base["REMOTE_ADDR"] = "10.1.2.3"
    for path in ("/api/v1/cluster-info", "/api/v1/placements", "/api/v1/placements?namespace=team-a"):
        reply = remote.get(path)
        assert reply.status_code == 401, path
        assert reply.headers["WWW-Authenticate"] == 'Bearer realm="hami-place"'
        assert reply.get_json()["error"].startswith("no bearer token: send Authorization: Bearer <token>")
    assert remote.get("/api/v1/cluster-info", headers={"Authorization": "Basic dXNlcjpwYXNz"}).status_code == 401
    reply = remote.get("/api/v1/placements?namespace=../../api")
    assert reply.status_code == 400 and "DNS-1123 label" in reply.get_json()["error"]
    for path in ("/healthz", "/readyz", "/metrics"):
        assert remote.get(path).status_code == 200, path


class FakeApiServer:
    """TokenReview and SubjectAccessReview answers from plain tables, each review asked recorded."""

    def __init__(self) -> None:
        self.users = {"alice-token": "alice", "bob-token": "bob"}
        self.rights = {("alice", "pods")}
        self.down = False
        self.asked: list[str] = []

    def review_token(self, review: dict[str, Any]) -> dict[str, Any]:
        if self.down:
            raise KubeError("timed out")
        token = review["spec"]["token"]
        self.asked.append(f"token {token}")
        user = self.users.get(token)
        return {"status": {"authenticated": True, "user": {"username": user}} if user else {"authenticated": False}}

    def review_access(self, review: dict[str, Any]) -> dict[str, Any]:
        user, resource = review["spec"]["user"], review["spec"]["resourceAttributes"]["resource"]
        self.asked.append(f"access {user} {resource}")
        return {"status": {"allowed": (user, resource) in self.rights}}


def test_a_token_is_served_only_for_its_own_user_and_right_and_each_answer_is_kept_its_time(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """One caller's answer must never serve another token, and a revoked right must end within the memo's time."""
    server, now = FakeApiServer(), [100.0]
    gate = ReaderGate(server.review_token, server.review_access, ttl=30, size=8, clock=lambda: now[0])
    pods = Access("list", "", "pods", "")
    placements = Access("list", PLACEMENTS, "hamipodplacements", "a")
    assert gate.refusal("10.0.0.7", "Bearer alice-token", pods) is None
    assert gate.refusal("10.0.0.7", "Bearer alice-token", pods) is None
    assert server.asked == ["token alice-token", "access alice pods"], "answers are kept"
    with caplog.at_level(logging.INFO, logger="webhook.access"):
        for _ in range(2):
            assert gate.refusal("10.0.0.7", "Bearer bob-token", pods) == Refusal(403, "user 'bob' may not list pods -A")
    assert [record.getMessage() for record in caplog.records] == ["API read refused: user 'bob' may not list pods -A"]
    assert gate.refusal("10.0.0.7", "Bearer alice-token", placements) == Refusal(
        403, f"user 'alice' may not list hamipodplacements.{PLACEMENTS} -n a"
    )
    assert gate.refusal("10.0.0.7", "Bearer mallory-token", pods) == Refusal(
        401, "the API server does not authenticate this bearer token"
    )
    server.asked.clear()
    server.rights.clear()
    now[0] = 130.0
    assert gate.refusal("10.0.0.7", "Bearer alice-token", pods) == Refusal(403, "user 'alice' may not list pods -A")
    assert server.asked == ["token alice-token", "access alice pods"], "asked again once the answers expired"
    server.down = True
    assert gate.refusal("10.0.0.7", "Bearer carol-token", pods) == Refusal(
        503, "cannot ask the API server who the caller is: timed out; retry"
    )


def test_an_answer_put_again_is_the_newest_and_outlives_older_ones() -> None:
    """A client asking again keeps its answer; the memo's size must drop the answers not asked for longest."""
    memo: ExpiringMemo[str, bool] = ExpiringMemo(ttl=30, size=2, clock=lambda: 100.0)
    memo.put("a", True)
    memo.put("b", True)
    memo.put("a", False)
    memo.put("c", True)
    assert [memo.get(key) for key in ("a", "b", "c")] == [(True, False), (False, None), (True, True)]
