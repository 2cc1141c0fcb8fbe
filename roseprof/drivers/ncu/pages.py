"""Nsight Compute's CSV exports (`ncu --import R --csv --page raw|details`), parsed into one record per launch.

The raw page is one row per kernel launch and one column per metric (its full name, e.g.
`gpu__time_duration.sum`), with a units row under the header. The details page is one row per (launch,
section, metric) with the metric's display name, unit and value, plus rows for the rule findings (rule name,
type, description, estimated speedup). Both start with the same launch columns (ID, process, kernel name, context,
stream, block and grid size, device, compute capability) and, with `--nvtx`, one column per NVTX range kind.
Columns are found by name, not position: versions add and move them.

Files are read as text in UTF-8, or in the encoding a byte-order mark names (UTF-8 with a BOM and UTF-16, as
Windows tools re-save CSVs; CRLF line ends either way), and streamed a row at a time, keeping only the metrics
the caller asks for: a million-row details page or a raw page of thousands of columns costs what is kept, not
the file. A row cut short (a metric row without its value, a raw row with fewer cells than the header) is refused
in one line: read on, it would change a mean without a word.
"""

from __future__ import annotations

import csv
import itertools
import re
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from roseprof.errors import RoseprofError

HEADER_START = '"ID","Process ID"'
LAUNCH_COLUMNS = {
    "ID",
    "Process ID",
    "Process Name",
    "Host Name",
    "Kernel Name",
    "Context",
    "Stream",
    "Block Size",
    "Grid Size",
    "Device",
    "CC",
}
DETAILS_COLUMNS = {"Section Name", "Metric Name", "Metric Unit", "Metric Value"}
RULE_COLUMNS = ("Rule Name", "Rule Type", "Rule Description", "Estimated Speedup Type", "Estimated Speedup")
DEFAULT_DOMAIN = "<default domain>"


@dataclass
class Launch:
    id: int
    kernel: str
    device: int
    stream: int
    context: int
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    cc: str
    nvtx: list[list[str]]  # push/pop ranges enclosing the launch, outermost first: [domain, name]
    metrics: dict = field(default_factory=dict)  # raw: name -> (value, unit); details: (section, name) -> ...
    rules: list[dict] = field(default_factory=list)


@dataclass
class Page:
    kind: str  # "raw" or "details"
    launches: list[Launch]


def encoding_of(head: bytes) -> str:
    """The text encoding of a CSV from its first bytes: a byte-order mark's, UTF-16 without one (a NUL beside the
    header's first quote), else UTF-8."""
    if head.startswith(b"\xef\xbb\xbf"):
        return "utf-8-sig"
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return "utf-16"
    if head.startswith(b'"\x00'):
        return "utf-16-le"
    if head.startswith(b'\x00"'):
        return "utf-16-be"
    return "utf-8"


def sniff(head: bytes) -> bool:
    """An ncu CSV export: its header, possibly after ncu's own ==PROF== / ==WARNING== lines."""
    text = head.decode(encoding_of(head), errors="replace").lstrip("\ufeff")
    for line in text.splitlines():
        if line.startswith("=="):
            continue
        return line.startswith(HEADER_START)
    return False


def _dims(text: str) -> tuple[int, int, int]:
    """'(128, 1, 1)' -> (128, 1, 1); -1 where ncu left it blank."""
    parts = [p for p in re.split(r"[^0-9]+", text) if p]
    return tuple(int(p) for p in parts[:3]) if len(parts) >= 3 else (-1, -1, -1)


def _int(text: str) -> int:
    text = text.strip().replace(",", "")
    return int(text) if text.lstrip("-").isdigit() else -1


def parse_nvtx(cell: str) -> list[list[str]]:
    """The NVTX push/pop column: `<tid>  "<domain>:<range>:<payload type>:<payload>:<colour type>:<colour>:<message
    type>:<message>" ...`, one quoted entry per open range, outermost first -> [[domain, name], ...]."""
    out = []
    for entry in re.findall(r'"([^"]*)"', cell):
        head = entry.rsplit(":", 6)[0] if entry.count(":") >= 7 else entry
        domain, _, name = head.partition(":")
        out.append(["" if domain == DEFAULT_DOMAIN else domain, name])
    return out


Keep = Callable[[object], bool]  # which metric keys to keep (raw: a name; details: (section, name))


def _every(key) -> bool:
    return True


def read_page(path: Path, label: str, keep: Keep | None = None) -> Page:
    """One CSV export, streamed; `keep` (default: every metric) says which metrics the caller will use."""
    try:
        with open(path, "rb") as fh:
            encoding = encoding_of(fh.read(4))
        # newline="": the csv module sees CRLF and quoted line breaks as they are.
        with open(path, encoding=encoding, errors="replace", newline="") as fh:
            return _parse(fh, label, keep or _every)
    except OSError as e:
        raise RoseprofError(f"{label}: cannot read ({e.strerror})") from None


def _parse(lines, label: str, keep: Keep) -> Page:
    skipped = 0  # ncu's own ==PROF== lines before the header
    for line in lines:
        line = line.lstrip("\ufeff")
        if line.startswith(HEADER_START):
            break
        skipped += 1
    else:
        raise RoseprofError(f'{label}: not an Nsight Compute CSV export (no "ID","Process ID" header)')
    csv.field_size_limit(min(sys.maxsize, 1 << 31))  # a kernel name of templates can be long
    rows = csv.reader(itertools.chain([line], lines), strict=True)
    numbered = ((skipped + rows.line_num, row) for row in rows)
    try:
        _, header = next(numbered)
        if DETAILS_COLUMNS <= set(header):
            return Page("details", _details(header, numbered, label, keep))
        return Page("raw", _raw(header, numbered, label, keep))
    except csv.Error as e:
        raise RoseprofError(f"{label}: line {skipped + rows.line_num} is not well-formed CSV ({e})") from None


def _launch(row: dict[str, str], nvtx_col: str | None) -> Launch:
    return Launch(
        id=_int(row.get("ID", "")),
        kernel=row.get("Kernel Name", ""),
        device=_int(row.get("Device", "")),
        stream=_int(row.get("Stream", "")),
        context=_int(row.get("Context", "")),
        grid=_dims(row.get("Grid Size", "")),
        block=_dims(row.get("Block Size", "")),
        cc=row.get("CC", ""),
        nvtx=parse_nvtx(row[nvtx_col]) if nvtx_col else [],
    )


def _nvtx_column(header: list[str]) -> str | None:
    return next((h for h in header if "Push/Pop_Range" in h), None)


def _check_launch_columns(header: list[str], label: str) -> None:
    missing = {"ID", "Kernel Name"} - set(header)
    if missing:
        raise RoseprofError(f"{label}: ncu CSV export without its {', '.join(sorted(missing))} column")


def _raw(header: list[str], rows: Iterator, label: str, keep: Keep) -> list[Launch]:
    _check_launch_columns(header, label)
    units = [""] * len(header)
    nvtx_col = _nvtx_column(header)
    metric_cols = [
        (i, h)
        for i, h in enumerate(header)
        if h not in LAUNCH_COLUMNS and "_Range:" not in h and h and keep(h)
    ]
    out = []
    for n, (line, row) in enumerate(rows):
        if not row or not any(row):
            continue
        if n == 0 and row[0] == "":  # the units row under the header
            units = row + [""] * (len(header) - len(row))
            continue
        if len(row) != len(header):
            raise RoseprofError(
                f"{label}: line {line} has {len(row)} cells where the header names {len(header)} (cut short?)"
            )
        launch = _launch(dict(zip(header, row)), nvtx_col)
        launch.metrics = {h: (row[i], units[i]) for i, h in metric_cols}
        out.append(launch)
    return out


def _details(header: list[str], rows: Iterator, label: str, keep: Keep) -> list[Launch]:
    _check_launch_columns(header, label)
    nvtx_col = _nvtx_column(header)
    value_at = header.index("Metric Value")
    by_id: dict[int, Launch] = {}
    names: dict[tuple[str, str], tuple[str, str]] = {}  # one key tuple per metric, shared by every launch
    for line, row in rows:
        if not row or not any(row):
            continue
        # Metric rows end with the value and a trailing comma (not empty rule cells); rule rows fill every
        # column. Any other length is a cut row: read on, it would drop that launch's value without a word.
        if len(row) not in (value_at + 2, len(header)):
            raise RoseprofError(
                f"{label}: line {line} has {len(row)} cells where ncu writes {value_at + 2} (a metric) or "
                f"{len(header)} (a rule finding): cut short?"
            )
        cells = dict(zip(header, row + [""] * (len(header) - len(row))))
        launch_id = _int(cells["ID"])
        launch = by_id.get(launch_id)
        if launch is None:
            launch = by_id[launch_id] = _launch(cells, nvtx_col)
        if cells.get("Rule Name"):
            speedup = cells.get("Estimated Speedup", "").replace(",", "").strip()
            launch.rules.append(
                {
                    "section": cells["Section Name"],
                    "rule": cells["Rule Name"],
                    "type": cells.get("Rule Type", ""),
                    "description": cells.get("Rule Description", ""),
                    "speedup_type": cells.get("Estimated Speedup Type") or None,
                    "speedup_pct": float(speedup) if _is_number(speedup) else None,
                }
            )
        elif cells.get("Metric Name"):
            key = (cells["Section Name"], cells["Metric Name"])
            key = names.setdefault(key, key)
            if keep(key):
                launch.metrics.setdefault(key, (cells["Metric Value"], cells["Metric Unit"]))
    return [by_id[k] for k in sorted(by_id)]


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
