"""A command line as its program and its items, shared by the store (run/alike.py: which runs may be compared)
and the renderers (render/text.py: what tells runs apart in `ls`)."""

from __future__ import annotations

import os
import re

# Launchers that run the program after their own arguments: `taskset -c 0 python -m roseinfer...` runs
# benchmark_streaming, pinned, the same program as without them (a crowded-core capture against a plain one was
# refused as `before ran taskset`).
LAUNCHERS = frozenset("taskset nice env numactl chrt timeout stdbuf ionice setsid nohup time".split())
# A launcher's own argument: an option, a VAR=value, or a figure (a CPU list `0-3,5`, a mask `0x3`, a priority,
# a duration `60s`)
LAUNCHER_ARG = re.compile(r"-.*|[A-Za-z_][A-Za-z0-9_]*=.*|0x[0-9a-fA-F]+|[0-9][0-9,.:-]*[smhd]?")


def launched(words: list[str]) -> list[str]:
    """The command a chain of LAUNCHERS runs (`taskset -c 0 nice -n 5 python x.py` -> `python x.py`), or the
    words as they are where there is none."""
    i = 0
    while i < len(words) - 1 and os.path.basename(words[i]) in LAUNCHERS:
        j = i + 1
        while j < len(words) - 1 and LAUNCHER_ARG.fullmatch(words[j]):
            j += 1
        i = j
    return words[i:]


def command_items(argv: list[str]) -> tuple[str, list[str]]:
    """A command as (its program, its items): the program is a script's or module's name (`python -m
    roseinfer.benchmark_streaming` -> `benchmark_streaming`), an item each option with its value, or a word; a
    launcher in front (LAUNCHERS: `taskset -c 0`) is looked through."""
    words = launched([str(w) for w in argv])
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
