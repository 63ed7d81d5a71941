"""`-o table` (the default): kubectl-style columns without borders, upper-case headers."""

from __future__ import annotations

import io
import sys

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table as RichTable
from rich.text import Text as RichText

from kubectl_hami_place.cli.output.base import Formatter, Result, Table, Text
from kubectl_hami_place.cli.output.printable import printable

# The least width a table renders at; a table whose rows are wider renders at their width: columns never wrap or
# shrink, the output is read by people and by `grep`/`awk`.
_RENDER_WIDTH = 400


class TableFormatter(Formatter):
    """Renders tables and text blocks; subclasses decide whether the wide columns show."""

    show_wide = False

    def __init__(self, color: bool) -> None:
        self.color = color

    def render(self, result: Result) -> str:
        """Blocks separated by one blank line."""
        buffer = io.StringIO()
        console = Console(
            file=buffer,
            width=_RENDER_WIDTH,
            force_terminal=self.color,
            no_color=not self.color,
            color_system="standard" if self.color else None,
            highlight=False,
            emoji=False,
            soft_wrap=True,
        )
        first = True
        for block in result.to_blocks():
            if isinstance(block, Table) and not block.rows and not block.empty:
                continue
            if not first:
                console.print()
            first = False
            if isinstance(block, Text):
                for line in block.lines:
                    console.print(RichText(printable(line), style=block.style or ""))
            else:
                self._table(console, block)
        return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines()) + ("\n" if buffer.getvalue() else "")

    def _table(self, console: Console, block: Table) -> None:
        """One table: title line, headers, rows; or the `empty` line when there are no rows."""
        if block.title:
            console.print(RichText(printable(block.title), style="bold"))
        if not block.rows:
            console.print(RichText(printable(block.empty)))
            return
        shown = [i for i, name in enumerate(block.columns) if self.show_wide or name not in block.wide]
        table = RichTable(box=None, show_edge=False, pad_edge=False, padding=(0, 3, 0, 0), header_style="")
        for i in shown:
            table.add_column(block.columns[i].upper(), no_wrap=True, overflow="ignore")
        for row in block.rows:
            cells = []
            for i in shown:
                style = block.styles.get(block.columns[i], "")
                cell = printable(row[i])
                cells.append(RichText.from_markup(cell) if style == "markup" else RichText(cell, style=style))
            table.add_row(*cells)
        unbounded = console.options.update_width(sys.maxsize)
        console.width = max(_RENDER_WIDTH, Measurement.get(console, unbounded, table).maximum)
        console.print(table)
