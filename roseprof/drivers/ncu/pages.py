"""Nsight Compute's CSV exports (`ncu --import R --csv --page raw|details`), parsed into one record per launch.

The raw page is one row per kernel launch and one column per metric (its full name, e.g.
`gpu__time_duration.sum`), with a units row under the header. The details page is one row per (launch,
section, metric) with the metric's display name, unit and value, plus rows for the rule findings (rule name,
type, description, estimated speedup). Both start with the same launch columns (ID, process, kernel name, context,
stream, block and grid size, device, compute capability) and, with `--nvtx`, one column per NVTX range kind.
Columns are found by name, not position: versions add and move them.
"""

from __future__ import annotations

import csv
import io
import re
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


def sniff(head: bytes) -> bool:
    """An ncu CSV export: its header, possibly after ncu's own ==PROF== / ==WARNING== lines."""
    for line in head.splitlines():
        if line.startswith(b"=="):
            continue
        return line.startswith(HEADER_START.encode())
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


def read_page(path: Path, label: str) -> Page:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise RoseprofError(f"{label}: cannot read ({e.strerror})") from None
    lines = text.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.startswith(HEADER_START)), None)
    if start is None:
        raise RoseprofError(f'{label}: not an Nsight Compute CSV export (no "ID","Process ID" header)')
    rows = list(csv.reader(io.StringIO("".join(lines[start:]))))
    header = rows[0]
    if DETAILS_COLUMNS <= set(header):
        return Page("details", _details(header, rows[1:], label))
    return Page("raw", _raw(header, rows[1:], label))


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


def _raw(header: list[str], rows: list[list[str]], label: str) -> list[Launch]:
    _check_launch_columns(header, label)
    units = [""] * len(header)
    if rows and rows[0] and rows[0][0] == "":  # the units row under the header
        units, rows = rows[0] + [""] * (len(header) - len(rows[0])), rows[1:]
    nvtx_col = _nvtx_column(header)
    metric_cols = [
        (i, h) for i, h in enumerate(header) if h not in LAUNCH_COLUMNS and "_Range:" not in h and h
    ]
    out = []
    for n, row in enumerate(rows, start=2):
        if not row or not any(row):
            continue
        if len(row) != len(header):
            raise RoseprofError(
                f"{label}: row {n + 1} has {len(row)} cells where the header names {len(header)}"
            )
        launch = _launch(dict(zip(header, row)), nvtx_col)
        launch.metrics = {h: (row[i], units[i]) for i, h in metric_cols}
        out.append(launch)
    return out


def _details(header: list[str], rows: list[list[str]], label: str) -> list[Launch]:
    _check_launch_columns(header, label)
    nvtx_col = _nvtx_column(header)
    by_id: dict[int, Launch] = {}
    for row in rows:
        if not row or not any(row):
            continue
        # Metric rows end before the rule columns (ncu writes a trailing comma, not empty rule cells).
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
            launch.metrics.setdefault(key, (cells["Metric Value"], cells["Metric Unit"]))
    return [by_id[k] for k in sorted(by_id)]


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
