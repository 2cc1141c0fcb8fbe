"""A capture window's nsys stream (the .qdstrm a server under `roseprof nsys --capture-range-end repeat` serves for
each window, windows.py says why) made into a report and read: the importer of the nsys that wrote it, then
`nsys export --type sqlite`, then the nsys reader."""

from __future__ import annotations

import subprocess
from pathlib import Path

from roseprof.drivers.nsys.capture import export_sqlite, find_importer, find_nsys, importer_problem
from roseprof.errors import RoseprofError, one_line
from roseprof.model import Trace


def nsys_here(label: str) -> str:
    """The nsys that reads a window's stream here; one line naming `label` where there is none."""
    nsys = find_nsys()
    if nsys is None:
        raise RoseprofError(f"{label}: an nsys window needs nsys here to read it: set NSYS or put it on PATH")
    return nsys


def report_of_stream(nsys: str, stream: Path, label: str) -> Path:
    """The .nsys-rep beside a window's stream (.qdstrm), made by the importer of `nsys`; one line naming `label`
    (where the stream came from) when it cannot."""
    importer = find_importer(nsys)
    if importer is None:
        raise RoseprofError(f"{label}: cannot import the window's nsys stream: {importer_problem(nsys)}")
    rep = stream.with_suffix(".nsys-rep")
    try:
        proc = subprocess.run([str(importer), "-i", str(stream)], capture_output=True, text=True,
                              errors="replace", timeout=3600)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as e:
        raise RoseprofError(f"{label}: the nsys importer failed ({one_line(str(e), 160)})") from None
    if proc.returncode != 0 or not rep.is_file():
        lines = [line for line in (proc.stderr + proc.stdout).splitlines() if line.strip()]
        said = one_line(lines[-1] if lines else f"exit code {proc.returncode}", 200)
        raise RoseprofError(
            f"{label}: the importer of nsys {nsys} cannot read the window's stream ({said}); it must be the nsys "
            "the server runs under"
        )
    return rep


def read_stream(stream: Path, label: str) -> tuple[Trace, Path]:
    """A window's stream read into the model: imported, exported to SQLite beside it, read; and its report."""
    from roseprof.drivers.nsys.reader import read_nsys_sqlite

    nsys = nsys_here(label)
    rep = report_of_stream(nsys, stream, label)
    sqlite_path = export_sqlite(nsys, rep, stream.with_suffix(".sqlite"), label)
    return read_nsys_sqlite(str(sqlite_path), label), rep
