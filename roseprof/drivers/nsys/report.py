"""What an .nsys-rep (or 2020-era .qdrep) says about the Nsight Systems that wrote it, without nsys.

The file begins with a text header, "NVIDIA Tegra Profiler Report <N>.\\n", then protobuf messages. N is the
report format: 1 in nsys 2020.5's .qdrep; a build number in later ones (36398880 in a 2025.3.1 report). Near
the end, the session record names the product version right before that same number: a protobuf string field
"2025.3.1.0" followed by field 7, the string "36398880". Reading both lets one line say which nsys wrote the
file when the installed one cannot open it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

REPORT_MAGIC = b"NVIDIA Tegra Profiler Report"
TAIL_BYTES = 1 << 20  # the session record sits in the last few hundred bytes; read generously


@dataclass(frozen=True)
class ReportHeader:
    format: str  # N of the header ("1", "36398880")
    product_version: str | None  # "2025.3.1.0" where the file says it


def read_header(path: Path) -> ReportHeader | None:
    """The report's format number and product version, or None when the file does not start like a report."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(64)
            if not head.startswith(REPORT_MAGIC):
                return None
            m = re.match(rb"NVIDIA Tegra Profiler Report (\d{1,12})", head)
            if m is None:
                return ReportHeader("?", None)
            number = m.group(1)
            size = os.fstat(fh.fileno()).st_size
            fh.seek(max(0, size - TAIL_BYTES))
            tail = fh.read(TAIL_BYTES)
    except OSError:
        return None
    # <version string> then field 7 (tag 0x3a, length-delimited) holding the header's number.
    pat = rb"(\d{4}\.\d{1,3}(?:\.\d{1,6}){0,3}):" + bytes([len(number)]) + re.escape(number)
    found = re.findall(pat, tail)
    return ReportHeader(number.decode(), found[-1].decode() if found else None)


def version_key(version: str) -> tuple[int, ...]:
    """ "2025.3.1.0" -> (2025, 3, 1, 0) for comparing versions; non-numbers count as 0."""
    return tuple(int(p) if p.isdigit() else 0 for p in re.split(r"[.\-]", version)[:4])
