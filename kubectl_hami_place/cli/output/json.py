"""`-o json`: the result's data, indented, keys in the order the result built them."""

from __future__ import annotations

import orjson

from kubectl_hami_place.cli.output.base import Formatter, Result

# Two-space indent, keys as given (non-string keys written as strings, as the json module does).
_OPTIONS = orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS | orjson.OPT_APPEND_NEWLINE


class JsonFormatter(Formatter):
    """Machine-readable output for scripts and `jq`."""

    def render(self, result: Result) -> str:
        """Two-space indented JSON (orjson: the json module's encoder is pure Python once indenting, and was as
        slow as building the whole status view)."""
        return orjson.dumps(result.to_data(), option=_OPTIONS).decode()
