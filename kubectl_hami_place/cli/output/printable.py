"""Text from the cluster made safe for a terminal: a pod name, an annotation or an Event message may carry escape
sequences (which clear the screen, retitle the window or fake output) and newlines (which fake lines)."""

from __future__ import annotations

import re

# C0 controls, DEL and C1 controls: rich passes ESC, CSI and OSC through, so a table would carry them to the terminal.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """`text` with every control character written as its escape (`\\x1b`, `\\n`), so it prints as one inert line."""
    return _CONTROL.sub(lambda found: repr(found.group())[1:-1], text)
