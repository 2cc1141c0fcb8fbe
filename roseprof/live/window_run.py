"""A closed capture window of a live run (api/live.py): its files into the run's raw/window/ (whatever the load's
steps: the files are the window's record), the capture part, and, where the window holds decode steps, the
trace's analysis with the window's steps and each step's top kernels and regions (live/step_detail.py)."""

from __future__ import annotations

import re
from pathlib import Path

from roseprof.live.step_detail import words
from roseprof.model import Trace
from roseprof.workload.roseinfer import WINDOW_NSYS_FILE, WINDOW_STEPS_FILE
from roseprof.workload.steplog import read_steplog

WINDOW_DIR = "window"  # in the run's raw/: a capture window's files as the server sent them
WINDOW_PARTS = (
    "regions",
    "kernels",
    "operators",
)  # what a window's trace adds to the run's summary (operators: torch)


def fetch_window(summary: dict, folder: Path, opener, window: dict) -> tuple[dict[str, Path], dict]:
    """The closed window's files into raw/window/ (its warnings into the summary); returns the files by name and
    the `live` part's `capture` (what the window was). `opener`: api/live.SteadyOpener."""
    files = opener.client.fetch(window, folder / "raw" / WINDOW_DIR)
    capture = {
        "tool": window["tool"], "asked": window["steps"], "steps": window["steps_done"],
        "first_step": window["first_step"], "stopped_early": window["stopped_early"], "pause": window["pause"],
    }  # fmt: skip
    add_window_ranks(summary, capture, window, files)
    # A steps window opened at once is meant to cover the load (--steps: at most that many): its end with the load
    # is no surprise (the capture panel says it); a window opened on a steady load that ends first is.
    if window["stopped_early"] and not opener.at_once:
        summary["warnings"].append(
            f"the {window['tool']} window closed early: the load ended after {window['steps_done']} of its "
            f"{window['steps']} steps"
        )
    return files, capture


def add_window(summary: dict, folder: Path, opener, window: dict, files: dict[str, Path]) -> None:
    """The window's trace analysed with its steps, and each step's detail, into the run's summary (its `live`
    part: join's); nothing where the window holds no decode step."""
    from roseprof.live.step_detail import step_detail

    part = summary["live"]
    size = world_size(window)
    steps_path = files.get(WINDOW_STEPS_FILE)
    if steps_path is None or not window["steps_done"]:
        return
    from roseprof.api.sections import analyse_trace
    from roseprof.live.rank_window import RANK_PARTS

    if WINDOW_NSYS_FILE in files:  # nsys: the report made from the window's recording range (rank 0's)
        trace = nsys_window_trace(files, opener.client)
    else:  # torch: every rank's, one process each; each rank's steps joined to its log beside rank 0's (raw/window/)
        from roseprof.live.rank_window import read_traces

        trace = read_traces(
            files, size, folder / "raw", lambda name: opener.client.address(f"/profile/files/{name}")
        )
    if trace is None:
        return
    analysed, tables_of = analyse_trace(trace, steps_path)
    parts = WINDOW_PARTS + (RANK_PARTS if size > 1 else ())
    summary.update({k: analysed[k] for k in parts if analysed.get(k) is not None})
    log = read_steplog(str(steps_path))
    first = int(log.meta.get("first_step", window["first_step"])) if log is not None else window["first_step"]
    rank0 = next((r["pids"] for r in analysed.get("ranks") or [] if r["rank"] == 0), None)
    detail = step_detail(trace, tables_of.get("steps.rows"), first, rank0)  # rank 0's, as the steps are
    part["step_detail"] = detail
    said_where(summary.get("spikes"), detail)
    for entry in part["slowest"]:
        said = words(detail.get(str(entry["step"])))
        if said and entry["cause"] != "profiler":  # a gap the profiler made: not the step's kernels
            entry["detail"] = said
            entry["line"] += f" [{said}]"


def world_size(window: dict) -> int:
    from roseprof.live.rank_window import world_size as size_of

    return size_of(window)


def add_window_ranks(summary: dict, capture: dict, window: dict, files: dict[str, Path]) -> int:
    """A window of several ranks (a tensor-parallel server): each rank's steps, from its own window log, into the
    capture part (`ranks`), a warning where they disagree; returns the world size (1: one rank)."""
    from roseprof.live.rank_window import disagreement, rank_steps, world_size

    size = world_size(window)
    if size > 1:
        capture["ranks"] = ranks = rank_steps(files, size)
        said_by = {r.get("rank"): r for r in window.get("ranks") or [] if isinstance(r, dict)}
        for entry in ranks:  # what each rank's window cost its own loop (the server's word)
            pause = said_by.get(entry["rank"], {}).get("pause") or {}
            entry["stop_ms"] = pause.get("stop_ms")
        said = disagreement(ranks)
        if said:
            summary["warnings"].append(said)
    return size


def nsys_window_trace(files: dict[str, Path], client) -> Trace:
    """An nsys window's trace: the report made from its recording range's stream, read into the model."""
    from roseprof.drivers.nsys.window_stream import read_stream

    trace, _ = read_stream(files[WINDOW_NSYS_FILE], client.address(f"/profile/files/{WINDOW_NSYS_FILE}"))
    return trace


NO_TRACE = re.compile(r"decode step (\d+) \(no trace to say where\)")


def said_where(spikes: dict | None, detail: dict) -> None:
    """A listed spike whose evidence step is one of the window's: its top kernels and regions (the flight
    recorder's figures were made with no trace, so they said none); a step outside the window's trace keeps
    `(no trace to say where)`."""
    for entry in (spikes or {}).get("listed") or []:
        main = entry.get("main") or {}
        found = NO_TRACE.search(main.get("where") or "")
        said = words(detail.get(found.group(1))) if found else ""
        if said:
            main["where"] = NO_TRACE.sub(f"decode step {found.group(1)}: {said}", main["where"])
