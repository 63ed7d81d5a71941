"""`-o wide`: the table with every column, like `kubectl get -o wide`."""

from __future__ import annotations

from kubectl_hami_place.cli.output.table import TableFormatter


class WideFormatter(TableFormatter):
    """The table formatter with the wide columns shown."""

    show_wide = True
