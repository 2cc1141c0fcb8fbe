"""Which runs may be pooled into one side of a diff: runs of one tool, one command (arguments included) and one
machine. A group's hierarchical bootstrap treats its runs as draws of one thing; an nsys run and a torch run of
the same program, or two commands, are not, and pooling them makes an interval of nonsense (seen: +2,739,619%)."""

from __future__ import annotations

from roseprof import command_line
from roseprof.errors import RoseprofError, one_line
from roseprof.run.store import Run


def tool(run: Run) -> str:
    return str((run.manifest.get("tool") or {}).get("name") or "?")


def command(run: Run) -> str:
    cmd = run.manifest.get("command")
    return " ".join(map(str, cmd)) if cmd else "(imported: no command)"


def machine(run: Run) -> str:
    host = (run.manifest.get("environment") or {}).get("host") or "?"
    gpus = [g.get("name", "?") for g in run.manifest.get("gpus") or [] if isinstance(g, dict)]
    return f"{host} ({', '.join(gpus)})" if gpus else host


KEYS = (("tools", tool), ("commands", command), ("machines", machine))


def _arguments(runs: list[Run]) -> str:
    """The arguments that differ between the runs' commands, each with the runs that have it: an option with its
    value (`--output-len 64` against `--output-len 64-256`, not `64` against `64-256`), the program where the
    programs differ; word by word where the options agree (a launcher's `taskset -c 0` against `-c 1`, an
    interpreter's path)."""
    words = {r.id: [str(a) for a in r.manifest.get("command") or []] for r in runs}
    parsed = {rid: command_line.command_items(ws) for rid, ws in words.items()}
    common = set.intersection(*(set(items) for _, items in parsed.values()))
    programs = {prog for prog, _ in parsed.values()}
    extra = {
        rid: ([prog] if len(programs) > 1 else []) + [x for x in items if x not in common]
        for rid, (prog, items) in parsed.items()
    }
    if not any(extra.values()):
        common_words = set.intersection(*(set(w) for w in words.values()))
        extra = {rid: [w for w in ws if w not in common_words] for rid, ws in words.items()}
    return "; ".join(f"{rid}: {one_line(' '.join(x), 80) if x else '(none)'}" for rid, x in extra.items())


def mixes(runs: list[Run]) -> str | None:
    """What the runs mix, in words (`tools nsys (2 runs), torch (1 run)`), or None when they are alike."""
    for label, key in KEYS:
        values: dict[str, list[str]] = {}
        for r in runs:
            values.setdefault(key(r), []).append(r.id)
        if len(values) > 1:
            if label == "commands" and all(r.manifest.get("command") for r in runs):
                return f"commands (arguments only some runs have: {_arguments(runs)})"
            listed = ", ".join(f"{v} ({', '.join(ids)})" for v, ids in values.items())
            return f"{label} {listed}"
    return None


def check_side(label: str, refs: list[str], runs: list[Run], pool_mixed: bool) -> str | None:
    """Refuse, in one line, a side whose runs are not alike, unless pool_mixed; returns what a pooled side mixes
    (for the header to show)."""
    mixed = mixes(runs) if len(runs) > 1 else None
    if mixed and not pool_mixed:
        raise RoseprofError(
            f"{label} ({' '.join(refs) or 'the baseline'}) would pool runs of different {mixed}: give run ids, "
            "name runs apart (--name), or pass --pool-mixed to pool them anyway"
        )
    return mixed


def check_not_self(runs_a: list[Run], runs_b: list[Run]) -> None:
    """A run on both sides compares it with itself: nothing can move, so say so (exit 2) instead of a verdict."""
    a, b = [r.id for r in runs_a], [r.id for r in runs_b]
    both = [rid for rid in a if rid in b]
    if not both:
        return
    if set(a) == set(b):
        raise RoseprofError(
            f"before and after are the same run{'s' if len(a) > 1 else ''} ({', '.join(a)}): a run diffed against "
            "itself shows no change by construction; to see the noise, capture the same code again"
        )
    raise RoseprofError(
        f"run{'s' if len(both) > 1 else ''} {', '.join(both)} on both sides: each run belongs to before or after"
    )


def program(run: Run) -> str | None:
    """The program a run ran (`benchmark_streaming`, `matmul.py`), or None for an import (no command)."""
    argv = run.manifest.get("command")
    return command_line.command_items([str(a) for a in argv])[0] if argv else None


def options_apart(runs_a: list[Run], runs_b: list[Run]) -> tuple[list[str], list[str]]:
    """The option items (`--no-batched-kv-append`, `--tp 2`) only one side's latest command has: (before's,
    after's); empty where a side has no command."""
    items = []
    for runs in (runs_a, runs_b):
        argv = runs[-1].manifest.get("command")
        items.append(command_line.command_items([str(a) for a in argv])[1] if argv else [])
    a, b = items
    if not a or not b:
        return [], []
    return [x for x in a if x not in b], [x for x in b if x not in a]


def check_same_program(runs_a: list[Run], runs_b: list[Run], engine_a: bool, engine_b: bool) -> None:
    """Refuse, in one line, a diff of different programs (an engine run against a run with no decode steps, or
    two scripts): its figures mean different things (seen: an engine run against a torch program accepted, three
    starred `step mean +155%` rows). `--force` compares them anyway."""
    a, b = runs_a[-1], runs_b[-1]
    if engine_a != engine_b:
        engine, other = (a, b) if engine_a else (b, a)
        raise RoseprofError(
            f"different programs: {engine.id} is an engine run (decode steps) and {other.id} is not "
            f"({program(other) or 'an import'}): compare runs of one program, or pass --force"
        )
    pa, pb = program(a), program(b)
    if pa is not None and pb is not None and pa != pb:
        raise RoseprofError(
            f"different programs: before ran {pa} ({a.id}) and after ran {pb} ({b.id}): compare runs of one "
            "program, or pass --force"
        )
