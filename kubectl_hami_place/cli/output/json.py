"""`-o json`: the result's data, indented, keys in the order the result built them."""

from __future__ import annotations

import json

from kubectl_hami_place.cli.output.base import Formatter, Result


class JsonFormatter(Formatter):
    """Machine-readable output for scripts and `jq`."""

    def render(self, result: Result) -> str:
        """Two-space indented JSON."""
        return json.dumps(result.to_data(), indent=2, ensure_ascii=False) + "\n"
