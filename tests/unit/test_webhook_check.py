"""`hami-place-webhook check` pointed at a URL where another service answers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kubectl_hami_place import __version__
from tests.http_stand_in import answering_gets
from webhook import check

ANSWERS = {
    "text": b"ok",  # kube-apiserver's own /readyz
    "array": b'["ready"]',
    "string": b'"ready"',
    "object": b'{"status": "ready"}',
}


@pytest.fixture
def another_service() -> Iterator[str]:
    """A service that is not hami-place's server, answering 200 to every GET: /<kind>/readyz with the body of that
    kind, the version as this check's. hami-place's own server answers only its JSON objects, so it cannot stand in."""

    def answer(path: str) -> tuple[int, bytes]:
        kind, _, rest = path.strip("/").partition("/")
        return 200, ANSWERS[kind] if rest == "readyz" else b'{"version": "%s"}' % __version__.encode()

    with answering_gets(answer) as url:
        yield url


@pytest.mark.parametrize(
    ("kind", "quoted"),
    [("text", "'ok'"), ("array", """'["ready"]'"""), ("string", """'"ready"'""")],
)
def test_an_answer_that_is_no_json_object_fails_the_check_in_one_line(
    another_service: str, kind: str, quoted: str
) -> None:
    """kube-apiserver's /readyz answers `ok`, and any JSON that is not an object raised AttributeError: a traceback
    from `helm test`, or "did not answer" for an answer."""
    said: list[str] = []
    url = f"{another_service}/{kind}"
    assert check.run(None, url, None, None, said.append) == 1
    assert said == [f"api {url}: FAILED: answered {quoted}, not the JSON object this server sends: check the URL"]


def test_the_same_service_answering_as_the_server_does_passes(another_service: str) -> None:
    said: list[str] = []
    assert check.run(None, f"{another_service}/object", None, None, said.append) == 0
    assert said == [f"api {another_service}/object: ok"]
