"""Commands and tools in words, shared by the terminal and the dashboards: a command line cut at a word to fit a
column, a command to paste laid out in lines, what tells runs' commands apart (`roseprof ls`), a tool with its
version."""

from __future__ import annotations

import os

from roseprof import command_line
from roseprof.render.text import ELLIPSIS


def tool_label(tool: dict) -> str:
    """`nsys 2025.3.2.0`, `torch 2.11.0`; a version neither the file nor the tool gave is said so, not `?`."""
    name, version = tool.get("name") or "?", tool.get("version")
    if not version or version == "?":
        return f"{name} (version not recorded)"
    return f"{name} {version}"


def command(argv: list[str] | str | None, width: int) -> str:
    """A command line that fits `width`: the program by its file name (the path is in `roseprof show`), cut at the
    end on a word boundary with an ellipsis."""
    if not argv:
        return ""
    words = [argv] if isinstance(argv, str) else list(argv)
    if os.sep in words[0] and len(words) > 1:
        words[0] = os.path.basename(words[0])
    text = " ".join(words)
    if len(text) <= width:
        return text
    if width <= 1:
        return ELLIPSIS[:width]
    cut = text[: width - 1]
    space = cut.rfind(" ")
    if space >= width // 2:  # at a word, unless that would throw away most of the room
        cut = cut[:space]
    return cut.rstrip() + ELLIPSIS


def pasteable(words: list[str], width: int, lead: str = "") -> list[str]:
    """A command to paste (`words`, each as a shell reads it) after `lead`, in lines of at most `width` columns: one
    line where it fits, else lines cut between words, each but the last ending in ` \\`, the shell's line
    continuation, so that the lines pasted together run as one command. A word is never cut: one longer than a
    line (a long path) has a line of its own."""
    one_line = lead + " ".join(words)
    if len(one_line) <= width or len(words) < 2:
        return [one_line]
    indent = " " * len(lead) + "  "  # the continued lines under the command, two further in
    lines, line = [], lead + words[0]
    for word in words[1:]:
        if len(line) + len(f" {word} \\") <= width:
            line += f" {word}"
        else:
            lines.append(f"{line} \\")
            line = indent + word
    return [*lines, line]


command_items = command_line.command_items  # (the store's refusals word commands the same way)


def commands_apart(commands: list[tuple[list[str] | None, dict]]) -> list[str | None]:
    """What tells each run's command apart from the others' (`ls`): per (argv, switches) -- switches being the
    engine's environment switches the run recorded -- the switches and option items that not every run of the
    same program has, then the program where several programs are listed; the program alone where nothing
    differs. None for a run without a command (an import)."""
    parsed = [
        (command_items(argv), [f"{k}={v}" for k, v in sorted(env.items())]) if argv else None
        for argv, env in commands
    ]
    by_prog: dict[str, list[set[str]]] = {}
    for p in parsed:
        if p is not None:
            (prog, items), switches = p
            by_prog.setdefault(prog, []).append(set(items) | set(switches))
    common = {prog: set.intersection(*sets) if len(sets) > 1 else set() for prog, sets in by_prog.items()}
    out: list[str | None] = []
    for p in parsed:
        if p is None:
            out.append(None)
            continue
        (prog, items), switches = p
        apart = [x for x in switches + items if x not in common[prog]]
        if not apart:
            out.append(prog)
        else:
            out.append(" ".join(apart) + (f" ({prog})" if len(by_prog) > 1 else ""))
    return out
