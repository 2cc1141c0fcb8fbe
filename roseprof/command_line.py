"""A command line as its program and its items, shared by the store (run/alike.py: which runs may be compared)
and the renderers (render/text.py: what tells runs apart in `ls`)."""

from __future__ import annotations

import os


def command_items(argv: list[str]) -> tuple[str, list[str]]:
    """A command as (its program, its items): the program is a script's or module's name (`python -m
    roseinfer.benchmark_streaming` -> `benchmark_streaming`), an item each option with its value, or a word."""
    words = [str(w) for w in argv]
    prog, i = os.path.basename(words[0]) if words else "", 1
    if prog.startswith("python") and len(words) > 1:
        if words[1] == "-m" and len(words) > 2:
            prog, i = words[2].rsplit(".", 1)[-1], 3
        elif not words[1].startswith("-"):
            prog, i = os.path.basename(words[1]), 2
    items = []
    while i < len(words):
        if words[i].startswith("-") and i + 1 < len(words) and not words[i + 1].startswith("-"):
            items.append(f"{words[i]} {words[i + 1]}")
            i += 2
        else:
            items.append(words[i])
            i += 1
    return prog, items
