"""Nsight Compute: capture.py runs `ncu` and exports its report's pages; pages.py parses the CSV exports;
reader.py turns them into the model (kernel launches and their per-launch metrics); report_file.py reads an
.ncu-rep's own header (format and writer versions) without ncu."""

from __future__ import annotations

from pathlib import Path

from roseprof.drivers.base import Reader
from roseprof.drivers.ncu.pages import sniff as sniff_csv
from roseprof.drivers.ncu.report_file import MAGIC
from roseprof.model import Trace


def read_csv(path: Path, raw: Path, label: str, limits=None) -> Trace:
    """One CSV export: the raw page (with its units row) or the details page."""
    from roseprof.drivers.ncu.pages import read_page
    from roseprof.drivers.ncu.reader import build_trace, used

    page = read_page(path, label, keep=used)
    return build_trace(page if page.kind == "raw" else None, page if page.kind == "details" else None, label)


def read_report(path: Path, raw: Path, label: str, limits=None) -> Trace:
    from roseprof.drivers.ncu.capture import read_report as read

    return read(path, raw, label)


READERS = (
    Reader("ncu", "ncu CSV exports (raw or details page)", (".csv",), sniff_csv, read_csv),
    Reader("ncu", "ncu .ncu-rep reports", (".ncu-rep",), lambda h: h.startswith(MAGIC), read_report),
)
