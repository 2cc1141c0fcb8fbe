"""An nsys capture window, the engine core's side (windows.py opens one for `{"tool": "nsys"}`).

The server runs under `roseprof nsys --capture-range nvtx --capture-range-end repeat -- roseinfer serve ...`: nsys
records nothing until the engine's loop thread pushes the NVTX range `roseinfer.capture_window` (names.WINDOW_RANGE,
the range roseprof names to nsys as --nvtx-capture), and stops when the thread pops it; `repeat` makes every window
one recording range of its own. Between windows the engine's regions emit no NVTX either (tracing.set_nvtx), so the
server pays nothing for nsys outside windows but its injection library being loaded.

Where the window's report is. nsys 2022.4 writes each range's stream as $TMPDIR/nsys-report-XXXX.qdstrm while the
range's pop runs (the pop returns once it is written: ~0.8 s on the loop on the 2-core CPU box, nsys' own stop), and
turns the streams into <output>.<k>.nsys-rep only when the program exits, too late for a live server. So roseprof
nsys makes nsys' TMPDIR a folder of its own and names it to the server (ROSEINFER_NSYS_WINDOWS); the window's export
thread finds the stream that appeared there since the window opened and copies it into the window's folder as
trace.qdstrm (a copy: nsys still converts its own at exit, and the importer rewrites the file it reads). roseprof
live fetches it over HTTP, runs the importer of the nsys that wrote it and exports the report to SQLite
(roseprof/drivers/nsys/windows.py): the engine runs no nsys tool inside the process nsys profiles.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from roseinfer import env, tracing
from roseinfer.names import ROSEINFER_NSYS_WINDOWS, WINDOW_NSYS_FILE, WINDOW_RANGE

STREAMS = "nsys-report-*.qdstrm"  # what nsys 2022.4 names a recording range's stream in its TMPDIR
WAIT_S = 120.0  # how long the export waits for nsys' stream (a GPU window's may be hundreds of MB)
SETTLE_S = 0.1  # a stream's size unchanged this long: nsys is done writing it

NOT_UNDER_NSYS = (
    "tool nsys needs the server started under Nsight Systems by roseprof: roseprof nsys --capture-range nvtx "
    "--capture-range-end repeat -- roseinfer serve MODEL --enable-profiling"
)


def problem() -> str | None:
    """Why an nsys window cannot open in this server (one line), or None."""
    folder = env.reload().nsys_windows
    if folder is None or not tracing.nvtx_tool_attached():
        return NOT_UNDER_NSYS
    if not Path(folder).is_dir():
        return f"{ROSEINFER_NSYS_WINDOWS}={folder} is no folder (nsys' streams are written there): {NOT_UNDER_NSYS}"
    return None


def _streams(folder: Path) -> set[Path]:
    return set(
        folder.rglob(STREAMS)
    )  # in any subfolder too: where a later nsys may put them (2022.4: the top)


class NsysRange:
    """One window's recording range: opened (on the loop's thread) when made, ended by `end` (same thread)."""

    def __init__(self) -> None:
        self.folder = Path(env.ENV.nsys_windows or "")
        self.before = _streams(self.folder)  # the earlier windows' streams, still there until nsys exits
        self._nvtx_before = tracing.set_nvtx(True)
        tracing.push_nvtx(WINDOW_RANGE)  # nsys starts recording inside this call
        self.open = True

    def end(self) -> None:
        if self.open:
            self.open = False
            tracing.set_nvtx(self._nvtx_before)
            tracing.pop_nvtx()  # nsys stops recording and writes the range's stream inside this call

    def collect(self, into: Path, wait_s: float = WAIT_S) -> str:
        """Off the loop: the range's stream copied into `into` (written under a .tmp name, renamed whole); its
        name there. RuntimeError in one line when nsys wrote none in time."""
        deadline = time.monotonic() + wait_s
        seen: dict[Path, int] = {}
        while True:
            new = sorted(_streams(self.folder) - self.before)
            sizes = {p: _size(p) for p in new}
            if len(new) == 1 and sizes[new[0]] > 0 and seen == sizes:
                break
            if len(new) > 1:
                raise RuntimeError(f"nsys wrote {len(new)} streams in {self.folder} during one window")
            if time.monotonic() > deadline:
                raise RuntimeError(f"nsys wrote no stream for the window in {self.folder} within {wait_s:.0f} s "
                                   f"(nsys' --nvtx-capture must be {WINDOW_RANGE}, and a --capture-range-end "
                                   "repeat:N records N windows only)")  # fmt: skip
            seen = sizes
            time.sleep(SETTLE_S)
        tmp = into / (WINDOW_NSYS_FILE + ".tmp")
        shutil.copyfile(new[0], tmp)
        tmp.rename(into / WINDOW_NSYS_FILE)
        return WINDOW_NSYS_FILE


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return -1
