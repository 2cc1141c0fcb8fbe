"""Nsight Systems: capture.py runs `nsys profile` and exports SQLite; reader.py reads the export into the model."""

from __future__ import annotations

from pathlib import Path

from roseprof.drivers.base import Reader
from roseprof.drivers.nsys.report import REPORT_MAGIC
from roseprof.drivers.nsys.sqlite import SQLITE_MAGIC
from roseprof.errors import RoseprofError
from roseprof.model import Trace


def split_thread_id(tid):
    """(pid, tid) of the model's thread ids, which are nsys' globalTid: the pid in bits 24..47."""
    return (tid >> 24) & 0xFFFFFF, tid & 0xFFFFFF


def read_export(path: Path, raw: Path, label: str, limits=None) -> Trace:
    from roseprof.drivers.nsys.reader import read_nsys_sqlite

    return read_nsys_sqlite(str(path), label=label)


def read_report(path: Path, raw: Path, label: str, limits=None) -> Trace:
    """An .nsys-rep (or 2020-era .qdrep) needs nsys itself to export it to SQLite first."""
    from roseprof.drivers.nsys.capture import export_sqlite, find_nsys

    nsys = find_nsys()
    if nsys is None:
        raise RoseprofError(
            f"{label}: importing an .nsys-rep needs nsys to export it: set NSYS or put nsys on PATH "
            "(or export it with `nsys export --type sqlite` and import the .sqlite)"
        )
    sqlite_path = export_sqlite(nsys, path, raw / (path.stem + ".sqlite"), label=label)
    return read_export(sqlite_path, raw, label)


READERS = (
    Reader(
        "nsys", "nsys .sqlite exports", (".sqlite", ".db"), lambda h: h.startswith(SQLITE_MAGIC), read_export
    ),
    Reader(
        "nsys",
        "nsys .nsys-rep/.qdrep reports",
        (".nsys-rep", ".qdrep"),
        lambda h: h.startswith(REPORT_MAGIC),
        read_report,
    ),
)
