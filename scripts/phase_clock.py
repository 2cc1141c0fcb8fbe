"""The CPU and wall time between marks, for the phase scripts (import_phases.py, diff_phases.py): imported first,
before anything it times, so it imports nothing heavy itself."""

import time

_cpu, _wall = time.process_time(), time.perf_counter()
_marks: list[tuple[str, float, float]] = []


def mark(what: str) -> None:
    """What ran since the last mark (or this module's import) was `what`."""
    global _cpu, _wall
    cpu, wall = time.process_time(), time.perf_counter()
    _marks.append((what, cpu - _cpu, wall - _wall))
    _cpu, _wall = cpu, wall


def lines(width: int, digits: int) -> list[str]:
    """One line a phase (repeated marks of one name summed, in first-seen order), then the total."""
    rows: dict[str, tuple[float, float]] = {}
    for what, cpu, wall in _marks:
        c, w = rows.get(what, (0.0, 0.0))
        rows[what] = (c + cpu, w + wall)
    rows["total"] = (sum(m[1] for m in _marks), sum(m[2] for m in _marks))
    return [
        f"{what:{width}s} {cpu:6.{digits}f} s CPU {wall:6.{digits}f} s wall"
        for what, (cpu, wall) in rows.items()
    ]
