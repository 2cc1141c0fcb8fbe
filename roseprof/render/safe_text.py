"""Text from a trace or a run folder (range, kernel and run names, commands, messages) made safe to print.

Names are arbitrary bytes someone else chose. Printed through rich they must never be read as markup (a range
named "[/][bold]x" would raise or restyle the output), and sent to a terminal they must never act as control
sequences (an ESC in a kernel name could move the cursor, retitle the window or hide text). So every such
string goes out as a rich Text (never parsed as markup) with control characters and bidirectional overrides
written out visibly as \\x1b, \\n, \\u202e.
"""

from __future__ import annotations

import re

# C0 controls (tab included: it would misalign tables), DEL, C1 controls, and the bidi embedding/override/
# isolate characters that reorder what follows them on screen.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def plain(value) -> str:
    """`value` as text with every control character written out (\\x1b, \\n, \\u202e)."""
    text = value if isinstance(value, str) else str(value)
    return _CONTROL.sub(_visible, text)


def _visible(m: re.Match) -> str:
    c = m.group(0)
    return {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(c) or (
        f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}"
    )


def text(value, style: str | None = None):
    """A rich Text of `value` that is printed as it is: no markup, no control characters."""
    from rich.text import Text

    return Text(plain(value), style=style or "")
