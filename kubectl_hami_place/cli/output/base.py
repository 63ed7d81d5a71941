"""The formatter interface and the neutral building blocks a result describes itself with.

A result gives its data (for json/yaml) and its blocks (for table/wide); no formatter knows any command.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class Table:
    """Rows under column headers; `wide` columns appear only with `-o wide`; `styles` maps a column to a rich style."""

    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    title: str = ""
    wide: frozenset[str] = frozenset()
    styles: dict[str, str] = field(default_factory=dict)
    empty: str = ""


@dataclass(frozen=True)
class Text:
    """Free lines of text; `style` is a rich style applied to all of them."""

    lines: tuple[str, ...]
    style: str = ""


Block = Table | Text


class Result(Protocol):
    """What a command hands to a formatter."""

    def to_data(self) -> Any:
        """Plain JSON-compatible data: what `-o json` and `-o yaml` print."""
        ...

    def to_blocks(self) -> list[Block]:
        """Tables and text: what `-o table` and `-o wide` print."""
        ...


class Formatter(ABC):
    """Renders one result to the text printed on stdout."""

    @abstractmethod
    def render(self, result: Result) -> str:
        """The full output, ending with a newline unless empty."""
