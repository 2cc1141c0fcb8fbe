"""Capture windows under tensor parallelism: one window on every rank, over the same decode steps.

Every rank runs the same steps in lockstep (workers.py: rank 0 sends each step's adds and aborts, the collectives
keep the ranks together), so a window is decided by rank 0 alone and applied by every rank at the same step:

- rank 0 (EveryRankWindows, the engine core's windows when the server has ranks) opens its own window between two
  steps (windows.py) and sends ("window", ("start", ...)) down each worker's pipe before the next step's command;
  after the step that makes N (or on a stop, or when a rank failed) it sends ("window", ("close", id)) right after
  that step's command. A pipe is read in order, so each worker starts before the same step and closes after the
  same step as rank 0: no answer is awaited, no step waits.
- a worker (WorkerWindows, on its loop's thread, as rank 0's profiler is) records the window's steps in a flight
  recorder of its own, on only while the window is open (rank 0's always-on recorder is the server's only one:
  GET /debug/steps is rank 0's), the engine's region clocks on for the window's steps as on rank 0 (every rank's
  steps carry their regions' host times), and for `torch` a torch.profiler, then writes its files into the window's folder
  beside rank 0's, named by rank (steps.rank<r>.jsonl, trace.rank<r>.json.gz: roseprof finds a rank's step log
  beside rank 0's by that name), and last its status (status.rank<r>.json), each under a temporary name and
  renamed whole.
- the window's status (GET /profile/status) is rank 0's merged with every rank's: `done` only when every rank is
  done and their step counts agree, `failed` (one line naming the rank) when any rank failed; then rank 0 ends its
  own window early if it still records. A rank's window that fails is the window's failure, never the engine's:
  the server serves on.

The ranks share the server's host (workers.py starts them there), so they share the window's folder, which the
HTTP side serves (GET /profile/files/NAME) as it serves rank 0's files.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path

from roseinfer import env, steplog, tracing
from roseinfer.flight_recorder import FlightRecorder, running_request
from roseinfer.names import WINDOW_STEPS_FILE, WINDOW_TRACE_FILE
from roseinfer.names import window_rank_file as rank_file
from roseinfer.serve.windows import (
    DONE,
    EXPORTING,
    FAILED,
    RECORDING,
    Windows,
    _drop_torch_profiler,
    _one_line,
    _start_torch_profiler,
    _write_trace,
)

_encode = json.JSONEncoder(separators=(",", ":")).encode


def status_file(rank: int) -> str:
    """Where rank r (>= 1) says its window is done or failed, written last (roseinfer serve reads it, no client)."""
    return f"status.rank{rank}.json"


# -- rank 0 ------------------------------------------------------------------------------------------------------
class EveryRankWindows(Windows):
    """Rank 0's windows when the server has ranks 1..N-1 (`workers`: workers.Workers)."""

    every_rank = True

    def __init__(self, folder: str, workers, world_size: int) -> None:
        super().__init__(folder)
        self.workers, self.world_size = workers, world_size

    def answer(self, core, what: tuple) -> dict:
        if what[1] == "start" and self.current is not None:
            last = self.merged(self.current.describe())
            if last["state"] == EXPORTING:  # a rank still writes into the last window's folder
                return {"code": 409, "message": f"window {last['id']} is still exporting on a rank: one window "
                        "at a time (GET /profile/status says when it is done)"}  # fmt: skip
        answer = super().answer(core, what)
        window = answer.get("window")
        if window is not None:
            answer["window"] = window = self.merged(window)
            w = self.current
            if window["state"] == FAILED and w is not None and w.state == RECORDING:
                self._close(core, early=True)  # a rank failed: every rank's window ends now
                answer["window"] = self.merged(w.describe())
        return answer

    def start(self, core, tool: str, steps: int) -> dict:
        answer = super().start(core, tool, steps)
        if answer["code"] == 200:
            w, meta = self.current, core.engine.flight.meta
            said = {
                "model": meta.get("model"),
                "block_size": meta.get("block_size"),
            }  # the ranks' logs say it too
            self.workers.send_window(("start", w.id, tool, steps, str(w.folder), w.first_step, said))
            answer["window"] = self.merged(w.describe())
        return answer

    def _close(self, core, early: bool) -> None:
        self.workers.send_window(("close", self.current.id))  # after this step's command: the same step
        super()._close(core, early)

    def _fail(self, e: Exception) -> None:
        if self.current is not None and self.current.state == RECORDING:
            try:
                self.workers.send_window(("close", self.current.id))
            except OSError:  # a worker gone: the engine fails on its own
                pass
        super()._fail(e)

    def merged(self, window: dict) -> dict:
        """Rank 0's window dict with every rank's status: `ranks` (one entry a rank), the state of all of them,
        every rank's files once all are done."""
        folder = Path(window["folder"])
        mine = {k: window[k] for k in ("state", "steps_done", "first_step", "error", "files", "pause")}
        ranks = [{"rank": 0, **mine}]
        for rank in range(1, self.world_size):
            got = _read_status(folder / status_file(rank))
            ranks.append({"rank": rank, **got} if got else {"rank": rank, "state": _waiting(window["state"])})
        out = {**window, "world_size": self.world_size, "ranks": ranks}
        failed = next((r for r in ranks[1:] if r["state"] == FAILED), None)
        if window["state"] == FAILED:
            return out
        if failed is not None:
            out["state"], out["error"] = FAILED, f"rank {failed['rank']}: {failed.get('error')}"
            return out
        if window["state"] != DONE:
            return out
        if any(r["state"] != DONE for r in ranks[1:]):
            out["state"] = EXPORTING
            return out
        odd = next((r for r in ranks[1:] if _span(r) != _span(mine)), None)
        if odd is not None:
            out["state"] = FAILED
            out["error"] = (
                f"rank {odd['rank']} recorded decode steps {odd['first_step']}.. ({odd['steps_done']}), rank 0 "
                f"{mine['first_step']}.. ({mine['steps_done']}): the ranks left lockstep"
            )
            return out
        out["files"] = [*window["files"], *(f for r in ranks[1:] for f in r["files"])]
        return out


def _span(rank: dict) -> tuple:
    """The decode steps a rank's window covered: (first step, how many)."""
    return rank["first_step"], rank["steps_done"]


def _waiting(rank0_state: str) -> str:
    """A rank that has not written its status yet: recording while rank 0 records, else still exporting."""
    return RECORDING if rank0_state == RECORDING else EXPORTING


def _read_status(path: Path) -> dict | None:
    try:
        got = json.loads(path.read_text())
    except (OSError, ValueError):
        return None  # not written yet (it is renamed into place whole)
    return got if isinstance(got, dict) and got.get("state") in (DONE, FAILED) else None


# -- ranks 1..N-1 ------------------------------------------------------------------------------------------------
class WorkerWindow:
    def __init__(self, wid: int, tool: str, steps: int, folder: Path, first_step: int) -> None:
        self.id, self.tool, self.steps, self.folder, self.first_step = wid, tool, steps, folder, first_step
        self.recorder: FlightRecorder | None = None
        self.sinks_before = None  # the engine's step-log sinks before the window's recorder joined them
        self.prof = None
        self.record_function_before = False
        self.clocks_before: bool | None = None  # the region clocks before this window turned them on
        self.loop_ms: dict[str, float] = {}


class WorkerWindows:
    """A worker's share of the windows: what rank 0 says, applied between two of the worker's steps."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self.current: WorkerWindow | None = None

    def apply(self, op: tuple, served: dict) -> None:
        if op[0] == "start":
            _, wid, tool, steps, folder, first_step, meta = op
            w = WorkerWindow(wid, tool, steps, Path(folder), first_step)
            try:
                self._start(w, meta)
            except Exception as e:  # noqa: BLE001 - the window's failure: said in the status, the rank steps on
                self._undo(w)
                _write_status(w, self.engine.rank, FAILED, _one_line(e), [], 0)
        elif op[0] == "close" and self.current is not None and self.current.id == op[1]:
            w, self.current = self.current, None
            try:
                self._close(w, served)
            except Exception as e:  # noqa: BLE001 - as above
                self._undo(w)
                _write_status(w, self.engine.rank, FAILED, _one_line(e), [], 0)

    def _start(self, w: WorkerWindow, meta: dict) -> None:
        engine = self.engine
        t0 = tracing.now_ns()
        if engine.decode_steps != w.first_step:
            raise RuntimeError(
                f"rank {engine.rank} is at decode step {engine.decode_steps}, rank 0 at {w.first_step}"
            )
        w.recorder = FlightRecorder(
            w.steps, {**meta, "rank": engine.rank, "world_size": engine.world_size, "window_recorder": True}
        )
        w.recorder.step_index = (
            engine.decode_steps
        )  # the engine's step numbers, as rank 0's recorder has them
        w.sinks_before = engine.steplog
        engine.steplog = steplog.tee(engine.steplog, w.recorder)
        w.clocks_before = tracing.set_region_clocks(True)
        if w.tool == "torch":
            w.prof = _start_torch_profiler()
            w.record_function_before = tracing.set_record_function(True)
        self.current = w
        w.loop_ms["start_ms"] = (tracing.now_ns() - t0) / 1e6

    def _undo(self, w: WorkerWindow) -> None:
        """The window's recorder and profiler off, the engine's sinks, regions and clocks as they were."""
        engine = self.engine
        _restore_clocks(w)
        if w.recorder is not None:
            engine.steplog = w.sinks_before
            w.recorder.close()
        prof, w.prof = w.prof, None
        if prof is not None:
            _drop_torch_profiler(prof, w.record_function_before)
        self.current = None

    def _close(self, w: WorkerWindow, served: dict) -> None:
        """On the worker's loop: the profiler stopped and the recorder's records taken; the files off the loop."""
        engine = self.engine
        t0 = tracing.now_ns()
        _restore_clocks(w)
        prof, w.prof = w.prof, None
        if prof is not None:
            prof.stop()
            tracing.set_record_function(w.record_function_before)
        t1 = tracing.now_ns()
        engine.steplog = w.sinks_before
        steps_done = engine.decode_steps - w.first_step
        records = w.recorder.dump(steps_done, ())
        records += [running_request(seq) for seq in served.values()]  # finished ones leave `served`
        w.recorder.close()
        w.loop_ms.update(stop_ms=(t1 - t0) / 1e6, dump_ms=(tracing.now_ns() - t1) / 1e6)
        threading.Thread(
            target=_export, args=(w, engine.rank, prof, records, steps_done), name="roseinfer-window-export",
            daemon=True,
        ).start()  # fmt: skip


def _restore_clocks(w: WorkerWindow) -> None:
    before, w.clocks_before = w.clocks_before, None
    if before is not None:
        tracing.set_region_clocks(before)


def _export(w: WorkerWindow, rank: int, prof, records: list[dict], steps_done: int) -> None:
    """A worker's export thread: its files beside rank 0's, renamed whole, then its status (last)."""
    t0 = tracing.now_ns()
    try:
        if env.ENV.test_fail_window_rank == rank:
            raise RuntimeError(f"injected window failure on rank {rank} (ROSEINFER_TEST_FAIL_WINDOW_RANK)")
        steps_name = rank_file(WINDOW_STEPS_FILE, rank)
        tmp = w.folder / (steps_name + ".tmp")
        tmp.write_text("".join(_encode(r) + "\n" for r in records))
        os.replace(tmp, w.folder / steps_name)
        files = [steps_name]
        if prof is not None:
            own = w.folder / f".rank{rank}"  # windows._write_trace's own temporary names, apart from rank 0's
            own.mkdir(exist_ok=True)
            _write_trace(prof, own)
            os.replace(own / WINDOW_TRACE_FILE, w.folder / rank_file(WINDOW_TRACE_FILE, rank))
            shutil.rmtree(own, ignore_errors=True)
            files.append(rank_file(WINDOW_TRACE_FILE, rank))
    except Exception as e:  # noqa: BLE001 - the status says it in one line; the rank steps on
        w.loop_ms["export_ms"] = (tracing.now_ns() - t0) / 1e6
        _write_status(w, rank, FAILED, "the window's export failed: " + _one_line(e), [], steps_done)
        return
    w.loop_ms["export_ms"] = (tracing.now_ns() - t0) / 1e6
    _write_status(w, rank, DONE, None, files, steps_done)


def _write_status(
    w: WorkerWindow, rank: int, state: str, error: str | None, files: list, steps_done: int
) -> None:
    status = {
        "state": state, "error": error, "files": files, "steps_done": steps_done, "first_step": w.first_step,
        "pause": dict(w.loop_ms),
    }  # fmt: skip
    try:
        tmp = w.folder / (status_file(rank) + ".tmp")
        tmp.write_text(json.dumps(status))
        os.replace(tmp, w.folder / status_file(rank))
    except OSError:  # the folder is gone (a new window removed it): nobody asks for this window any more
        pass
