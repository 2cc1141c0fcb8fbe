"""Capture windows, the engine core's side (`roseinfer serve --enable-profiling`; the HTTP side is profiling.py).

A window covers exactly N decode steps: it opens between two steps and closes after the step that makes N
(`Engine.step` runs at most one decode step), or earlier on a stop. One window at a time. What it records:

- steps: the flight recorder's records of the window's steps (no profiler; the recorder is always on), with each
  region's own host time per step: every window turns the engine's region clocks on for its steps only
  (tracing.set_region_clocks; no NVTX, no profiler), so a plain server's window names the region of a slow step.
- torch: the same, and a torch.profiler (Kineto) recording of those steps, the engine's regions on as
  record_function spans for them only (tracing.set_record_function).
- nsys: the same, and an Nsight Systems recording range around those steps, on a server started under
  `roseprof nsys --capture-range nvtx --capture-range-end repeat` (nsys_window.py), the regions on as NVTX ranges
  for them only.

The files are written OFF the engine loop: SGLang users saw a trace export freeze a server for 25 s. On the loop
stay only what must be on the thread that profiled (torch.profiler's start and stop: its callbacks are the
thread's own, and Kineto finalises the recorded events inside the stop, the largest cost measured: ~0.3 s for 20
steps of gpt2-tiny on a busy CPU, docs/BENCHMARKS.md) and the flight recorder's dump (the records are the
engine's, read between steps); a thread of its own writes steps.jsonl and trace.json.gz. Kineto's save holds the
GIL while it writes, so the loop still waits for part of the export. The window says what each part cost (its
`pause`: start_ms, stop_ms, dump_ms on the loop; export_ms off it; the loop's steps during the export).

Only the last window's folder is kept (window-<id>/ under the server's profile folder): a new window deletes the
one before, so a long-running server's disk does not fill.
"""

from __future__ import annotations

import itertools
import shutil
import threading
from pathlib import Path

import msgspec

from roseinfer import torch_profile, tracing
from roseinfer.names import WINDOW_STEPS_FILE as STEPS_FILE
from roseinfer.names import WINDOW_TRACE_FILE as TRACE_FILE

RECORDING, EXPORTING, DONE, FAILED = "recording", "exporting", "done", "failed"

_encode = msgspec.json.Encoder().encode


class Window:
    def __init__(self, wid: int, tool: str, steps: int, folder: Path, first_step: int) -> None:
        self.id, self.tool, self.steps, self.folder, self.first_step = wid, tool, steps, folder, first_step
        self.state = RECORDING
        self.steps_done = 0
        self.stopped_early = False
        self.error: str | None = None
        self.files: list[str] = []
        self.step_ns: list[int] = []  # the loop's steps while recording (wall ns each)
        self.export_step_ns: list[int] = []  # the loop's steps while the export runs
        self.loop_ms: dict[str, float] = {}  # on the loop itself: start_ms, stop_ms, dump_ms
        self.export_ms: float | None = None

    def describe(self) -> dict:
        during = self.export_step_ns
        median = sorted(self.step_ns)[len(self.step_ns) // 2] / 1e6 if self.step_ns else None
        pause = {
            **self.loop_ms,
            "export_ms": self.export_ms,
            "median_step_ms": median,
            "steps_during_export": len(during),
            "longest_step_during_export_ms": max(during) / 1e6 if during else None,
        }
        return {
            "id": self.id,
            "tool": self.tool,
            "steps": self.steps,
            "steps_done": self.steps_done,
            "first_step": self.first_step,
            "state": self.state,
            "stopped_early": self.stopped_early,
            "error": self.error,
            "files": list(self.files),
            "folder": str(self.folder),
            "pause": pause,
        }


class Windows:
    """The core's capture windows. `answer` takes the HTTP side's queries (between two steps); `after_step` is
    called by the core's loop after each engine step (an attribute check while no window is open)."""

    every_rank = False  # a window on every tensor-parallel rank (rank_windows.EveryRankWindows)

    def __init__(self, folder: str) -> None:
        self.folder = Path(folder)
        self.current: Window | None = None
        self._ids = itertools.count(1)
        self._prof = None
        self._record_function_before = False
        self._nsys = None  # nsys_window.NsysRange while an nsys window records
        # the region clocks before the recording window turned them on (None: no window has)
        self._clocks_before: bool | None = None

    def answer(self, core, what: tuple) -> dict:
        """{"code": HTTP status, "window": the window's state} or {"code", "message"}. A profiler that fails is
        the window's failure, never the engine's: the server serves on."""
        try:
            return self._answer(core, what)
        except Exception as e:  # noqa: BLE001 - said in one line (500)
            self._fail(e)
            return {"code": 500, "message": _one_line(e)}

    def _answer(self, core, what: tuple) -> dict:
        op = what[1]
        if op == "start":
            return self.start(core, what[2], what[3])
        if op == "stop":
            return self.stop(core)
        w = self.current
        return {"code": 200, "window": w.describe() if w is not None else None}

    def start(self, core, tool: str, steps: int) -> dict:
        w = self.current
        if w is not None and w.state in (RECORDING, EXPORTING):
            return {"code": 409, "message": f"window {w.id} ({w.tool}, {w.steps_done} of {w.steps} steps) is "
                    f"{w.state}: one window at a time (POST /profile/stop ends it)"}  # fmt: skip
        # Under tensor parallelism rank 0's profiler alone would be half a window: refused, not misleading, unless
        # these are every rank's windows (rank_windows.EveryRankWindows).
        if core.workers is not None and not self.every_rank:
            return {"code": 400, "message": "capture windows under tensor parallelism are not supported yet"}
        flight = core.engine.flight
        if flight is None:
            return {"code": 400, "message": "capture windows need the flight recorder: start the server "
                    "without --flight-recorder-steps 0"}  # fmt: skip
        if steps > flight.capacity:
            return {"code": 400, "message": f"steps {steps} is more than the flight recorder keeps "
                    f"(--flight-recorder-steps {flight.capacity})"}  # fmt: skip
        if tool == "torch" and torch_profile.running():
            return {
                "code": 409,
                "message": "a torch profiler is already on in this server (ROSEINFER_TORCH_PROFILE)",
            }
        if tool == "nsys" and core.workers is not None:  # the range is opened on rank 0's loop alone
            return {"code": 400, "message": "nsys windows under tensor parallelism are not supported yet "
                    "(tool torch or steps takes every rank)"}  # fmt: skip
        if tool == "nsys":
            from roseinfer.serve import nsys_window

            problem = nsys_window.problem()
            if problem:
                return {"code": 400, "message": problem}
        if w is not None:
            shutil.rmtree(w.folder, ignore_errors=True)  # only the last window's files are kept
        wid = next(self._ids)
        folder = self.folder / f"window-{wid}"
        folder.mkdir(parents=True, exist_ok=True)
        t0 = tracing.now_ns()
        self._clocks_before = tracing.set_region_clocks(True)  # from the window's first step (the next one)
        if tool == "torch":
            self._prof = _start_torch_profiler()
            self._record_function_before = tracing.set_record_function(True)
        if tool == "nsys":
            self._nsys = _open_nsys_range()
        self.current = Window(wid, tool, steps, folder, core.engine.decode_steps)
        self.current.loop_ms["start_ms"] = (tracing.now_ns() - t0) / 1e6
        return {"code": 200, "window": self.current.describe()}

    def stop(self, core) -> dict:
        w = self.current
        if w is None or w.state != RECORDING:
            return {"code": 400, "message": "no window is open (POST /profile/start opens one)"}
        self._close(core, early=w.steps_done < w.steps)
        return {"code": 200, "window": w.describe()}

    def after_step(self, core, start_ns: int) -> None:
        w = self.current
        if w is None:
            return
        took = tracing.now_ns() - start_ns
        if w.state == RECORDING:
            w.step_ns.append(took)
            w.steps_done = core.engine.decode_steps - w.first_step
            if w.steps_done >= w.steps:
                try:
                    self._close(core, early=False)
                except Exception as e:  # noqa: BLE001 - the window's failure, not the engine's
                    self._fail(e)
        elif w.state == EXPORTING:
            w.export_step_ns.append(took)

    def _fail(self, e: Exception) -> None:
        """The window (if one records) failed: the profiler off, regions and their clocks as they were."""
        self._restore_clocks()
        prof, self._prof = self._prof, None
        if prof is not None:
            _drop_torch_profiler(prof, self._record_function_before)
        nsys, self._nsys = self._nsys, None
        if nsys is not None:
            nsys.end()
        w = self.current
        if w is not None and w.state in (RECORDING, EXPORTING):
            w.error, w.state = _one_line(e), FAILED

    def _close(self, core, early: bool) -> None:
        """On the loop: the profiler stopped (its thread) and the window's records taken; the rest off it."""
        w = self.current
        w.state, w.stopped_early = EXPORTING, early
        t0 = tracing.now_ns()
        self._restore_clocks()  # after the window's last step: the next one is the server's own again
        prof, self._prof = self._prof, None
        if prof is not None:
            prof.stop()
            tracing.set_record_function(self._record_function_before)
        nsys, self._nsys = self._nsys, None
        if nsys is not None:
            nsys.end()  # nsys writes the range's stream inside: part of stop_ms
        t1 = tracing.now_ns()
        records = core.engine.flight.dump(w.steps_done, core.running()) if core.engine.flight else []
        t2 = tracing.now_ns()
        w.loop_ms.update(stop_ms=(t1 - t0) / 1e6, dump_ms=(t2 - t1) / 1e6)
        threading.Thread(
            target=_export, args=(w, prof, records, nsys), name="roseinfer-window-export", daemon=True
        ).start()

    def _restore_clocks(self) -> None:
        before, self._clocks_before = self._clocks_before, None
        if before is not None:
            tracing.set_region_clocks(before)


def _one_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}".splitlines()[0]


def _start_torch_profiler():
    import torch
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    prof = profile(activities=activities)
    prof.start()
    prof.add_metadata("torch_version", torch.__version__)  # read back as the run's tool version
    return prof


def _drop_torch_profiler(prof, record_function_before: bool) -> None:
    """A failing window's profiler stopped and dropped (its events are not wanted), regions as they were."""
    tracing.set_record_function(record_function_before)
    try:
        prof.stop()
    except Exception:  # noqa: BLE001 - already failing; the profiler is dropped
        pass


def _open_nsys_range():
    from roseinfer.serve.nsys_window import NsysRange

    return NsysRange()


def _export(w: Window, prof, records: list[dict], nsys=None) -> None:
    """The export thread: the window's files, each written under a temporary name and renamed whole."""
    t0 = tracing.now_ns()
    try:
        tmp = w.folder / (STEPS_FILE + ".tmp")
        tmp.write_bytes(b"".join(_encode(r) + b"\n" for r in records))
        tmp.rename(w.folder / STEPS_FILE)
        files = [STEPS_FILE]
        if prof is not None:
            _write_trace(prof, w.folder)
            files.append(TRACE_FILE)
        if nsys is not None:
            files.append(nsys.collect(w.folder))
        w.files = files
        state = DONE
    except Exception as e:  # noqa: BLE001 - the status says it in one line; the server serves on
        w.error = "the window's export failed: " + _one_line(e)
        state = FAILED
    w.export_ms = (tracing.now_ns() - t0) / 1e6
    w.state = state  # last: a reader that sees the window closed sees all of it


def _write_trace(prof, folder: Path) -> None:
    """Kineto's JSON (its own writer, C++), then gzip in 1 MiB pieces (zlib lets go of the GIL while it works)."""
    import gzip

    plain = folder / "trace.json.tmp"
    packed = folder / (TRACE_FILE + ".tmp")
    prof.export_chrome_trace(str(plain))
    with open(plain, "rb") as src, gzip.open(packed, "wb", compresslevel=1) as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    plain.unlink()
    packed.rename(folder / TRACE_FILE)
