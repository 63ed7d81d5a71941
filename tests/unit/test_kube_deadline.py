"""The admission deadline: set for each /mutate request, and bounding the API server calls made while answering it."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import urllib3
from kubernetes import client

from kubectl_hami_place.kube import deadline
from kubectl_hami_place.kube.deadline import Deadline, DeadlineApiClient, admitting, bounded
from tests.unit.test_webhook_api import review
from tests.webhook_listener import call
from webhook.metrics import Metrics
from webhook.mutate import MutateApp


def test_without_a_deadline_timeouts_are_left_alone() -> None:
    assert deadline.current() is None
    assert bounded((5.0, 30.0)) == (5.0, 30.0)
    assert bounded(None) is None


def test_a_deadline_cuts_every_shape_of_timeout_to_what_is_left() -> None:
    with admitting(Deadline.after(2.0)) as current:
        assert deadline.current() is current
        connect, read = bounded((5.0, 30.0))
        assert 0 < connect <= 2.0 and 0 < read <= 2.0
        assert max(bounded(None)) <= 2.0
        assert max(bounded(60)) <= 2.0
        assert bounded((0.5, 1.0)) == (0.5, 1.0), "shorter timeouts are kept"
    assert deadline.current() is None


def test_an_expired_deadline_still_gives_a_call_a_nonzero_timeout() -> None:
    with admitting(Deadline.after(-1.0)) as current:
        assert current.expired() and current.remaining() == 0.0
        assert bounded((5.0, 30.0)) == (deadline.MIN_CALL_SECONDS, deadline.MIN_CALL_SECONDS)


def test_the_webhook_deadline_keeps_a_margin_under_the_api_servers_timeout() -> None:
    assert 0 < Deadline.for_webhook_timeout(10).remaining() <= 10 - deadline.MARGIN_SECONDS
    assert 0 < Deadline.for_webhook_timeout(1).remaining() <= 0.5


@pytest.mark.parametrize(("timeout", "given"), [(10, 9.0), (1.5, 0.75), (1, 0.5)])
def test_the_admission_gets_the_webhook_timeout_less_the_margin_or_half_a_short_one(
    timeout: float, given: float
) -> None:
    """The answer needs the margin to travel back, but a short webhook timeout less a whole second would leave an
    admission nothing: it gets half of it instead."""
    before = time.monotonic()
    current = Deadline.for_webhook_timeout(timeout)
    after = time.monotonic()
    assert before + given <= current.expires <= after + given


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A TCP port that accepts connections and never answers: an API server that hangs."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    listener.close()
    for sock in held:
        sock.close()


def silent_api(port: int) -> client.CoreV1Api:
    """The core API on the deadline's client, at a server that never answers, without retries."""
    configuration = client.Configuration()
    configuration.host = f"http://127.0.0.1:{port}"
    configuration.retries = 0
    return client.CoreV1Api(DeadlineApiClient(configuration))


def test_an_api_call_during_an_admission_gives_up_at_the_deadline(silent_server: int) -> None:
    api = silent_api(silent_server)
    with admitting(Deadline.after(0.3)), pytest.raises(urllib3.exceptions.HTTPError) as raised:
        api.list_node(_request_timeout=(5, 30))
    read_timeout = float(re.search(r"read timeout=([0-9.]+)", str(raised.value)).group(1))  # type: ignore[union-attr]
    assert read_timeout <= 0.3, "the call's own 30 s read timeout was cut to the admission's deadline"


def test_a_calls_own_shorter_timeout_is_kept_during_an_admission(silent_server: int) -> None:
    """The deadline only ever cuts a call's timeout: a call that meant to give up sooner (a Lease read, a probe) must
    still give up at its own timeout, not wait out the whole admission."""
    api = silent_api(silent_server)
    with admitting(Deadline.after(10.0)), pytest.raises(urllib3.exceptions.HTTPError) as raised:
        api.list_node(_request_timeout=(5, 0.2))
    assert re.search(r"read timeout=([0-9.]+)", str(raised.value)).group(1) == "0.2"  # type: ignore[union-attr]


class RecordingAdmitter:
    """Stands in for the Admitter: every review needs the API server; records the deadline current in the thread."""

    def __init__(self) -> None:
        self.seen: list[Deadline | None] = []

    def admit_review(self, review: Any, started: float, *, cache_only: bool = False) -> dict[str, Any] | None:
        if cache_only:
            return None
        self.seen.append(deadline.current())
        return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {"uid": review.uid}}


def test_a_mutate_request_that_needs_the_api_server_answers_under_its_own_deadline() -> None:
    recorder = RecordingAdmitter()
    app = MutateApp(recorder, Metrics(), admission_timeout=5)  # type: ignore[arg-type]
    status, _headers, _body = call(app, "POST", "/mutate", json.dumps(review(dry_run=False)).encode())
    assert status == 200
    (seen,) = recorder.seen
    assert seen is not None and 0 < seen.remaining() <= 5 - deadline.MARGIN_SECONDS
    assert deadline.current() is None
