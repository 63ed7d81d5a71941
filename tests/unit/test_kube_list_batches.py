"""A list body decoded a batch at a time as it streams in: the same items as the whole body decoded at once."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from kubectl_hami_place.kube import list_body
from kubectl_hami_place.kube.errors import KubeServerError


def pod(i: int, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": f"p-{i}", "annotations": {"a": '},{"metadata":{'}}, "spec": spec}


def batches(body: bytes, chunk: int, batch_bytes: int, monkeypatch: pytest.MonkeyPatch) -> list[list[dict[str, Any]]]:
    monkeypatch.setattr(list_body, "LIST_BATCH_BYTES", batch_bytes)
    chunks = (body[at : at + chunk] for at in range(0, len(body), chunk))
    return list(list_body.item_batches(chunks, "list pods in all namespaces"))


def items_of(found: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return [item for batch in found for item in batch]


LIST = {
    "kind": "PodList",
    "apiVersion": "v1",
    "metadata": {"resourceVersion": "7"},
    "items": [pod(i) for i in range(40)],
}


@pytest.mark.parametrize("chunk", [1, 7, 100, 1 << 20])
@pytest.mark.parametrize("batch_bytes", [1, 300, 1 << 20])
def test_the_items_come_whole_and_in_order_however_the_body_is_cut(
    chunk: int, batch_bytes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = orjson.dumps(LIST)
    found = batches(body, chunk, batch_bytes, monkeypatch)
    assert items_of(found) == LIST["items"]
    if batch_bytes < len(body) and chunk < len(body):
        assert len(found) > 2


def test_a_batch_takes_every_item_that_has_arrived_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """What is read is decoded at once, so the bytes held undecoded stay one item: a body that arrives in one read
    comes as every item but the last, then the last at the end (the one whose end is not yet known to be an end)."""
    body = orjson.dumps(LIST)
    assert batches(body, len(body), 1, monkeypatch) == [LIST["items"][:-1], LIST["items"][-1:]]


def test_a_list_smaller_than_a_batch_is_decoded_once_at_its_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing is decoded before a batch's worth of bytes has arrived: a small list costs one decode, as `request`'s
    would, not one try per read."""
    body = orjson.dumps(LIST)
    assert batches(body, 100, len(body) + 1, monkeypatch) == [LIST["items"]]


def test_pods_whose_volumes_list_items_are_still_read_by_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """A configMap or projected volume lists its keys as `items`: the list's own `items` is the first one in the
    body, and a later one inside a pod must not make the whole list wait to be decoded at its end."""
    volume = {"name": "config", "configMap": {"name": "app", "items": [{"key": "a", "path": "a"}]}}
    pods = [pod(i, volumes=[volume]) for i in range(40)]
    found = batches(orjson.dumps({**LIST, "items": pods}), 1 << 20, 300, monkeypatch)
    assert found == [pods[:-1], pods[-1:]]


def test_an_item_boundary_inside_an_item_is_not_where_a_batch_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    # A nested list of objects each beginning with "metadata": the separator the splitter looks for, inside an item.
    nested = [pod(i, claims=[{"metadata": {"name": "x"}}, {"metadata": {"name": "y"}}]) for i in range(5)]
    document = {**LIST, "items": nested}
    for chunk in range(1, 60, 3):
        assert items_of(batches(orjson.dumps(document), chunk, 1, monkeypatch)) == nested


def test_an_items_key_nested_before_the_list_is_not_taken_for_it(monkeypatch: pytest.MonkeyPatch) -> None:
    nested = [{"metadata": {"name": "not-a-pod"}}, {"metadata": {"name": "nor-this"}}]
    document = {"metadata": {"x": {"items": nested}}, "items": [pod(1), pod(2)]}
    assert items_of(batches(orjson.dumps(document), 5, 1, monkeypatch)) == [pod(1), pod(2)]


@pytest.mark.parametrize(
    "body",
    [
        # Items spaced out, kind first, or fields after the items: decoded whole at the end.
        b'{"items": [ {"metadata": {"name": "a"}} , {"metadata": {"name": "b"}} ]}',
        b'{"items":[{"kind":"Pod","metadata":{"name":"a"}},{"kind":"Pod","metadata":{"name":"b"}}]}',
        b'{"items":[{"metadata":{"name":"a"}},{"metadata":{"name":"b"}}],"metadata":{"resourceVersion":"1"}}',
        b'[{"metadata":{"name":"a"}},{"metadata":{"name":"b"}}]',
    ],
)
def test_a_body_of_another_shape_gives_the_items_request_would(body: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    decoded = orjson.loads(body)
    expected = decoded["items"] if isinstance(decoded, dict) else decoded
    for chunk in (1, 4, len(body)):
        assert items_of(batches(body, chunk, 1, monkeypatch)) == expected


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"", []),
        (b'{"kind":"PodList","items":[]}', []),
        (b'{"kind":"PodList","items":null}', []),
        (
            b'{"items":[1,"x",{"metadata":{"name":"a"}},null,{"metadata":{"name":"b"}}]}',
            [{"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}],
        ),
    ],
)
def test_only_the_objects_of_the_items_are_kept(
    body: bytes, expected: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert items_of(batches(body, 3, 1, monkeypatch)) == expected


@pytest.mark.parametrize("cut", [10, 200, -3, -1])
def test_a_body_cut_short_or_not_json_is_the_servers_fault(cut: int, monkeypatch: pytest.MonkeyPatch) -> None:
    body = orjson.dumps(LIST)[:cut]
    with pytest.raises(KubeServerError) as raised:
        batches(body, 64, 1, monkeypatch)
    error = raised.value
    assert (str(error), error.status, error.reason, error.action) == (
        "the API server sent a response that is not JSON to list pods in all namespaces",
        0,
        "",
        "list pods in all namespaces",
    )
    with pytest.raises(KubeServerError, match="not JSON"):
        batches(b"<html>proxy error</html>", 64, 1, monkeypatch)
