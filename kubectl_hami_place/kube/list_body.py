"""A list response's body decoded as it streams in: its items a batch at a time, never the whole list at once.

The API server's encoder writes a list as `{..."items":[{"metadata":{...}},{"metadata":{...}}]}`; the decoder cuts
the bytes where one item ends and the next begins, so a list of 100,000 pods is never held decoded whole.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import orjson

from kubectl_hami_place.kube.errors import KubeServerError

# A list's body is decoded this many bytes of items at a time as it streams in (~350 pods), read 64 KiB a time.
LIST_BATCH_BYTES = 1 << 20
READ_BYTES = 1 << 16
# How a list body's items begin, and where the API server's encoder ends one item and begins the next.
_ITEMS_KEY = b'"items":['
_NEXT_ITEM = b'},{"metadata":{'


def item_batches(
    chunks: Iterable[bytes], what: str, decode: Callable[[bytes], list[dict[str, Any]]] | None = None
) -> Iterator[list[dict[str, Any]]]:
    """A list body's `items` (dicts only), decoded a batch at a time from the chunks it arrives in.

    A batch ends where the API server's encoder ends an item (`},{"metadata":{`) and is decoded as a JSON array by
    `decode` (default `whole_items`; ValueError when the bytes are not one whole array): a split anywhere but between
    two items of the list leaves a bracket open and fails to decode, so the bytes wait for the next batch. The last
    batch, and a body of another shape, are decoded whole at its end, as `request` decodes it."""
    decode = decode or whole_items
    head: bytes | None = None  # the body up to its items, once it reads as the start of a list
    whole = False  # the body is not read by batches
    rest = b""
    pending: list[bytes] = []
    size = 0
    for chunk in chunks:
        pending.append(chunk)
        size += len(chunk)
        if size < LIST_BATCH_BYTES or whole:
            continue
        rest += b"".join(pending)
        pending.clear()
        size = 0
        if head is None:
            head, rest, whole = _list_head(rest)
        if head is not None:
            batch, rest = _leading_items(rest, decode)
            if batch:
                yield batch
    rest += b"".join(pending)
    if head is None:
        if not rest:
            return
        body = decoded_body(rest, what)
        yield list_items(body if isinstance(body, dict) else {"items": body})
        return
    yield list_items(decoded_body(head + _ITEMS_KEY + rest, what))  # a dict: `head` opened one (`_list_head`)


def _list_head(body: bytes) -> tuple[bytes | None, bytes, bool]:
    """(the body up to its top-level `items`, the bytes after `"items":[`, False), else (None, the body, whether to
    stop looking: its `items` is not the list's own, or a list's would have begun)."""
    at = body.find(_ITEMS_KEY)
    if at < 0:
        return None, body, len(body) > READ_BYTES
    try:
        opened = isinstance(orjson.loads(body[:at] + b'"items":[]}'), dict)
    except orjson.JSONDecodeError:
        opened = False
    return (body[:at], body[at + len(_ITEMS_KEY) :], False) if opened else (None, body, True)


def _leading_items(items: bytes, decode: Callable[[bytes], list[dict[str, Any]]]) -> tuple[list[dict[str, Any]], bytes]:
    """(the whole items at the start of the bytes after a list's `[`, the bytes after them)."""
    end = items.rfind(_NEXT_ITEM)
    if end < 0:
        return [], items
    try:
        batch = decode(b"[" + items[: end + 1] + b"]")
    except ValueError:
        return [], items
    return batch, items[end + 2 :]


def whole_items(data: bytes) -> list[dict[str, Any]]:
    """The objects of a JSON array, decoded whole (ValueError when the bytes are not JSON)."""
    return _dicts(orjson.loads(data))


def decoded_body(data: bytes, what: str) -> Any:
    """The JSON value of a body, or `request`'s error when it is not JSON."""
    try:
        return orjson.loads(data)
    except ValueError as exc:
        raise KubeServerError(f"the API server sent a response that is not JSON to {what}", action=what) from exc


def list_items(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The `items` of a list response, dicts only."""
    return _dicts(body.get("items"))


def _dicts(items: object) -> list[dict[str, Any]]:
    """The dicts of a JSON array (none when it is not one)."""
    return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []
