"""nsys recording ranges that repeat (`roseprof nsys --capture-range nvtx --capture-range-end repeat`), and the
capture windows of a server run under it (roseinfer serve --enable-profiling, POST /profile/start {"tool": "nsys"}).

nsys 2022.4 writes each range's stream into its TMPDIR when the range ends (nsys-report-XXXX.qdstrm) and makes
<output>.<k>.nsys-rep of them, k = 1, 2, ..., only when the program exits. A server cannot wait for its exit, so
roseprof gives nsys a TMPDIR of its own and names it to the program (ROSEINFER_NSYS_WINDOWS): the server copies each
window's stream from there and serves it (roseinfer/serve/nsys_window.py); `roseprof live` imports the stream here
(window_stream.py: QdstrmImporter, the step nsys itself runs at exit) and exports the report to SQLite. When the program exits, the
capture's own run is its last range's report; every range's report stays in the run's raw/.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from roseprof.drivers.nsys.agents import stop_left_agents
from roseprof.errors import CaptureFailed
from roseprof.workload.roseinfer import NSYS_WINDOWS_ENV, WINDOW_RANGE

REPEAT = re.compile(r"repeat(?::[1-9]\d*)?")  # --capture-range-end's values that record range after range


def repeats(capture_range_end: str | None) -> bool:
    return bool(capture_range_end) and bool(REPEAT.fullmatch(capture_range_end))


def serves_windows(capture_range: str, capture_range_end: str | None, nvtx_capture: str | None) -> bool:
    """Does this capture record a roseinfer server's windows: NVTX ranges, repeating, on the windows' range?"""
    return capture_range == "nvtx" and repeats(capture_range_end) and nvtx_capture in (None, WINDOW_RANGE)


@contextmanager
def streams_folder(env: dict[str, str]) -> Iterator[dict[str, str]]:
    """`env` with nsys' TMPDIR a folder of its own (a plain path: nsys mangles quotes and spaces), named to the
    program too; the folder is removed afterwards (nsys has turned the streams into reports by then)."""
    folder = tempfile.mkdtemp(prefix="roseprof-nsys-windows-")
    try:
        yield {**env, "TMPDIR": folder, NSYS_WINDOWS_ENV: folder}
    finally:
        # nsys 2022.4 leaves its agent running after every repeating capture of a server seen here, its session
        # lock in the folder (agents.py)
        stop_left_agents(NSYS_WINDOWS_ENV, folder)
        shutil.rmtree(folder, ignore_errors=True)


def range_reports(out_base: Path) -> list[Path]:
    """<out_base>.<k>.nsys-rep, in k's order."""
    found = []
    for p in out_base.parent.glob(out_base.name + ".*.nsys-rep"):
        k = p.name[len(out_base.name) + 1 : -len(".nsys-rep")]
        if k.isdigit():
            found.append((int(k), p))
    return [p for _, p in sorted(found)]


def last_report(out_base: Path) -> Path:
    """The last range's report: <out_base>.<k>.nsys-rep, or <out_base>.nsys-rep where nsys recorded one range only
    (nsys 2022.4 numbers the reports only when there are several)."""
    reports = range_reports(out_base)
    single = out_base.with_suffix(".nsys-rep")
    if not reports and single.is_file():
        return single
    if not reports:
        raise CaptureFailed(
            'nsys recorded no range: no capture window was opened (POST /profile/start {"tool": "nsys", '
            '"steps": N}, or roseprof live --tool nsys), or the program never opened its --nvtx-capture range'
        )
    return reports[-1]
