"""`-o yaml`: the result's data as block-style YAML, keys in the order the result built them."""

from __future__ import annotations

import yaml

from kubectl_hami_place.cli.output.base import Formatter, Result


class YamlFormatter(Formatter):
    """Human- and kubectl-friendly structured output."""

    def render(self, result: Result) -> str:
        """Block-style YAML, as `kubectl get -o yaml` prints it."""
        return yaml.safe_dump(result.to_data(), sort_keys=False, default_flow_style=False, allow_unicode=True)
