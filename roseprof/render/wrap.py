"""Lines wrapped at spaces for a terminal: a path (which may hold spaces) or a figure and its unit never parted."""

from __future__ import annotations

import re
import textwrap

# A figure and its unit are one word when a line wraps: `41.61 ms` never ends a line at `41.61`.
_UNIT = re.compile(r"(?<=\d) (?=(?:ns|µs|us|ms|s|tok/s|req/s|tokens|tok|MB|GB|KB|B|%|x)(?:[\s),;:|]|$))")
_LABEL = re.compile(r"(?<=\bp\d\d) (?=[-\d])")  # `p50 41.61 ms` is one figure too
_GLUE = (
    "\x00"  # a space that does not part words while a line is wrapped (textwrap breaks at whitespace only)
)


def wrap_words(
    line: str,
    width: int,
    first: str = "",
    indent: str = "  ",
    keep: tuple[str, ...] = (),
    figures: bool = False,
) -> list[str]:
    """`line` wrapped at spaces to `width`, its first line indented by `first` and the others by `indent`. A word
    longer than that is never cut, nor broken at its hyphens, and neither is any of `keep` (paths, which may hold
    spaces) at its own spaces: each is one word, on a line of its own where it does not fit beside the others.
    `figures`: a number and its unit (`41.61 ms`), and a percentile and its number (`p50 41.61`), are one word."""
    for phrase in sorted((p for p in keep if " " in p), key=len, reverse=True):
        line = line.replace(phrase, phrase.replace(" ", _GLUE))
    if figures:
        line = _LABEL.sub(_GLUE, _UNIT.sub(_GLUE, line))
    lines = textwrap.wrap(
        line, width, initial_indent=first, subsequent_indent=indent, break_long_words=False,
        break_on_hyphens=False,
    ) or [first + line]  # fmt: skip
    return [shown.replace(_GLUE, " ") for shown in lines]


def wrap_figures(line: str, width: int, indent: str = "  ") -> str:
    """`line` wrapped at `width` between words, never between a number and its unit; continuation lines indented
    by `indent` beyond the line's own leading spaces."""
    if len(line) <= width:
        return line
    lead = indent + " " * (len(line) - len(line.lstrip(" ")))
    return "\n".join(wrap_words(line, width, "", lead, figures=True))
