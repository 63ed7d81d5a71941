"""The webhook's HTTP rules, written once (`mutate.screen`) for the connection's fast path and the ASGI app."""

from __future__ import annotations

import pytest

from webhook.mutate import MAX_REVIEW_BYTES, screen

JSON = {b"content-type": b"application/json", b"content-length": b"120"}


@pytest.mark.parametrize(
    ("path", "method", "headers", "status"),
    [
        ("/mutate", "POST", JSON, None),
        ("/mutate", "POST", {b"content-type": b"application/apply-patch+json; charset=utf-8"}, None),
        ("/mutate", "POST", {**JSON, b"content-length": str(MAX_REVIEW_BYTES).encode()}, None),
        ("/other", "POST", JSON, 404),
        ("/mutate", "GET", JSON, 405),
        ("/mutate", "POST", {**JSON, b"content-type": b"text/plain"}, 415),
        ("/mutate", "POST", {b"content-length": b"120"}, 415),
        ("/mutate", "POST", {**JSON, b"content-length": str(MAX_REVIEW_BYTES + 1).encode()}, 413),
    ],
    ids=["review", "json-suffix", "at-the-limit", "path", "method", "content-type", "no-content-type", "too-large"],
)
def test_a_request_is_screened_once_by_the_webhooks_rules(
    path: str, method: str, headers: dict[bytes, bytes], status: int | None
) -> None:
    mistake = screen(path, method, headers)
    assert (mistake.status if mistake is not None else None) == status
    if mistake is not None:
        assert str(mistake) and "\n" not in str(mistake), "a one-line reason"


def test_a_length_of_thousands_of_digits_is_screened_without_reading_them_all() -> None:
    """The HTTP parser lets any run of digits through; int() refuses more than 4,300 (a 500 on the ASGI path)."""
    padded = {**JSON, b"content-length": b"0" * 5000 + b"120"}
    assert screen("/mutate", "POST", padded) is None, "leading zeros are no digits: 120 bytes"
    huge = screen("/mutate", "POST", {**JSON, b"content-length": b"9" * 5000})
    assert huge is not None and huge.status == 413
