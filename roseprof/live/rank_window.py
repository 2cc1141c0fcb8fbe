"""A capture window of a tensor-parallel server (roseinfer/serve/rank_windows.py: one window on every rank, over
the same decode steps), from roseprof's side: which of the window's files are which rank's, each rank's trace
read as one run of several ranks (the torch driver's read_many: one Kineto file per rank, merged), and whether the
ranks recorded the same steps.

The server names rank r's files `steps.rank<r>.jsonl` and `trace.rank<r>.json.gz` beside rank 0's
(workload/roseinfer.window_rank_file), so a rank's step log lies beside rank 0's where the analyses look for it
(workload/steplog.rank_log_paths) once the files are saved in one folder."""

from __future__ import annotations

from pathlib import Path

from roseprof.model import Trace
from roseprof.workload.roseinfer import WINDOW_STEPS_FILE, WINDOW_TRACE_FILE, window_rank_file
from roseprof.workload.steplog import read_steplog

RANK_PARTS = (
    "ranks",
    "rank_clock",
    "collectives",
    "gpu_time",
)  # what a window of several ranks adds to a live run's summary


def world_size(window: dict) -> int:
    """How many ranks the window was on (1: a server without tensor parallelism, or one from before windows
    under it)."""
    size = window.get("world_size")
    return size if isinstance(size, int) and size > 1 else 1


def rank_files(files: dict[str, Path], name: str, size: int) -> list[Path]:
    """Each rank's copy of the window file `name`, rank 0's first; a rank whose file is missing is left out."""
    return [files[n] for n in (window_rank_file(name, r) for r in range(size)) if n in files]


def read_traces(files: dict[str, Path], size: int, raw: Path, address) -> Trace | None:
    """The window's Kineto trace(s) as one trace: one rank's read alone, several merged (one process per rank);
    None where the window has no trace (tool `steps`). `address(name)`: the URL a file came from (its label)."""
    paths = rank_files(files, WINDOW_TRACE_FILE, size)
    if not paths:
        return None
    if len(paths) == 1:
        from roseprof.drivers.torch.reader import read_kineto

        return read_kineto(paths[0], raw, address(paths[0].name))
    from roseprof.drivers.torch import read_many

    return read_many(paths, raw, [address(p.name) for p in paths])


def rank_steps(files: dict[str, Path], size: int) -> list[dict]:
    """Per rank: its step log's decode steps in the window (count, first and last engine step number, and the
    drains among them: steps of the overlapped decode that only read the tokens of the step before and launch no
    kernel, so no collective either), read from the files themselves, not from what the server says of them."""
    out = []
    for rank in range(size):
        path = files.get(window_rank_file(WINDOW_STEPS_FILE, rank))
        log = read_steplog(str(path)) if path is not None else None
        first = log.first_step if log is not None else None
        count = len(log.steps) if log is not None else 0
        out.append(
            {
                "rank": rank,
                "steps": count,
                "first_step": first if count else None,
                "last_step": first + count - 1 if count else None,
                "drains": sum(not step["launched"] for step in log.steps) if log is not None else 0,
            }
        )
    return out


def disagreement(ranks: list[dict]) -> str | None:
    """One line when the ranks' window logs do not cover the same decode steps (they run in lockstep, so they
    must), else None."""
    zero = ranks[0]
    for entry in ranks[1:]:
        if (entry["steps"], entry["first_step"]) != (zero["steps"], zero["first_step"]):
            return (
                f"the window's ranks recorded different decode steps: rank {entry['rank']} {entry['steps']} from "
                f"step {entry['first_step']}, rank 0 {zero['steps']} from step {zero['first_step']}"
            )
    return None
