"""Nsight Compute CSV exports the robustness run found refused, misread or too costly (issue 23), each derived at
test time from a real export: a byte-order mark or UTF-16 (as Windows tools re-save CSVs), a row cut before its
value, a million-row details page and a page of thousands of columns; and .ncu-rep files ncu cannot load."""

import csv
import io
import json
import struct

import numpy as np
import pytest

from roseprof.drivers.ncu import read_csv
from tests.helpers import DATA, assert_one_line_error, one_line_error, roseprof, run_cli
from tests.roseprof.peak_memory import import_peak_rss
from tests.roseprof.test_ncu_capture import dirs, env

CSVS = [DATA / "ncu" / "tn-details.csv", DATA / "ncu" / "tn-raw.csv",
        DATA / "ncu" / "brycelelbach__nsightful__copy_blocked.csv"]  # fmt: skip
ENCODINGS = {
    "utf-8 BOM": ("utf-8-sig", "\n"),
    "utf-8 BOM CRLF": ("utf-8-sig", "\r\n"),
    "utf-16": ("utf-16", "\n"),
    "utf-16 CRLF": ("utf-16", "\r\n"),
    "utf-16-le without BOM": ("utf-16-le", "\r\n"),
}


def import_(tmp_path, path):
    return run_cli("import", path, "--traces-dir", tmp_path / "t", "--dashboards-dir", tmp_path / "d")


def same_trace(a, b) -> None:
    assert a.names.values == b.names.values
    assert np.array_equal(a.ops.end - a.ops.start, b.ops.end - b.ops.start)
    for key, values in a.kernel_metrics.values.items():
        assert np.array_equal(values, b.kernel_metrics.values[key], equal_nan=True), key


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("src", CSVS, ids=lambda p: p.stem[:24])
def test_a_csv_saved_with_a_bom_or_in_utf16_reads_as_the_original(tmp_path, src, encoding):
    codec, newline = ENCODINGS[encoding]
    path = tmp_path / src.name
    text = src.read_text(encoding="utf-8")
    path.write_bytes(text.replace("\n", newline).encode(codec))
    same_trace(read_csv(src, tmp_path, str(src)), read_csv(path, tmp_path, str(path)))
    code, out, err = import_(tmp_path, path)
    assert code == 0, err


DETAILS = DATA / "ncu" / "brycelelbach__nsightful__copy_blocked.csv"
DRAM_ROW = '"DRAM Throughput","%",'  # the details row the robustness run cut (mean DRAM throughput changed)


@pytest.mark.parametrize(
    "cut",
    [
        lambda line: line[: line.index(DRAM_ROW) + len(DRAM_ROW)],  # before its value
        lambda line: line[: line.index(DRAM_ROW) + len(DRAM_ROW) - 1],  # before the comma ahead of the value
        lambda line: line[: line.index(DRAM_ROW) + len(DRAM_ROW) + 2],  # inside the value
        lambda line: line.rstrip(",\n") + "\n",  # before the trailing comma ncu writes
    ],
    ids=["before the value", "before its comma", "inside the value", "no trailing comma"],
)
def test_a_details_row_cut_short_is_refused_not_read_as_missing(tmp_path, cut):
    lines = DETAILS.read_text().splitlines(keepends=True)
    i = next(n for n, line in enumerate(lines) if DRAM_ROW in line)
    lines[i] = cut(lines[i]).rstrip("\n") + "\n"
    path = tmp_path / "cut.csv"
    path.write_text("".join(lines))
    line = one_line_error(*import_(tmp_path, path), naming=path)
    assert f"line {i + 1}" in line or "well-formed" in line, line
    assert not (tmp_path / "t").exists() or list((tmp_path / "t").iterdir()) == []


def grown_details(path, launches: int):
    """The real details export with its launches repeated (IDs renumbered): the rows a long ncu session writes."""
    rows = list(csv.reader(io.StringIO(DETAILS.read_text())))
    header, body = rows[0], rows[1:]
    ids = sorted({int(r[0]) for r in body})
    with open(path, "w", newline="") as fh:
        out = csv.writer(fh, quoting=csv.QUOTE_ALL, lineterminator="\n")
        out.writerow(header)
        for k in range(launches // len(ids)):
            for r in body:
                out.writerow([str(int(r[0]) + k * len(ids)), *r[1:]])
    return len(body) * (launches // len(ids))


def grown_raw(path, launches: int, columns: int) -> None:
    """The real raw export widened to `columns` metric columns (copies of its own, renamed) and lengthened."""
    rows = list(csv.reader(io.StringIO((DATA / "ncu" / "tn-raw.csv").read_text())))
    header, units, body = rows[0], rows[1], rows[2:]
    extra = columns - len(header)
    last = len(header) - 1
    with open(path, "w", newline="") as fh:
        out = csv.writer(fh, quoting=csv.QUOTE_ALL, lineterminator="\n")
        out.writerow(header + [f"{header[last]}.copy{j}" for j in range(extra)])
        out.writerow(units + [units[last]] * extra)
        for k in range(launches):
            r = body[k % len(body)]
            out.writerow([str(k), *r[1:], *[r[last]] * extra])


def test_a_long_details_page_streams_in_less_memory_than_its_size(tmp_path):
    """1,000,000 rows (442 MB) peaked at 3.96 GB; scaled down here to about 40 MB, as a ratio to the file."""
    path = tmp_path / "long.csv"
    rows = grown_details(path, 8000)
    small, small_peak = import_peak_rss(tmp_path / "small", DETAILS)
    proc, peak = import_peak_rss(tmp_path, path)
    assert proc.returncode == 0 and small.returncode == 0, proc.stderr
    assert peak - small_peak < path.stat().st_size, (peak - small_peak, path.stat().st_size)
    (run,) = (tmp_path / "t").iterdir()
    assert json.loads((run / "summary.json").read_text())["gpu_ops"]["kernels"] == 8000 and rows > 50_000


def test_a_wide_raw_page_streams_in_less_memory_than_its_size(tmp_path):
    """5,000 rows x 2,240 columns peaked at 1.58 GB; 1,000 rows of the same width here."""
    path = tmp_path / "wide.csv"
    grown_raw(path, 1000, 2240)
    small, small_peak = import_peak_rss(tmp_path / "small", DATA / "ncu" / "tn-raw.csv")
    proc, peak = import_peak_rss(tmp_path, path)
    assert proc.returncode == 0 and small.returncode == 0, proc.stderr
    assert peak - small_peak < path.stat().st_size, (peak - small_peak, path.stat().st_size)


def ncu_rep(path, writer: str) -> None:
    """An .ncu-rep's header as ncu writes it (report_file.py): format 9, Nsight Compute `writer` in its session."""

    def field(num: int, payload: bytes) -> bytes:
        return bytes([num << 3 | 2, len(payload)]) + payload

    header = bytes([1 << 3 | 0, 9])
    info = field(1, b"NVIDIA Nsight Compute") + field(2, writer.encode())
    block = field(3, field(8, info))
    path.write_bytes(
        b"NVR\x00" + struct.pack("<I", len(header)) + header + struct.pack("<I", len(block)) + block
    )


@pytest.mark.parametrize("writer, says", [("2026.1.0.0", "written by Nsight Compute 2026.1.0.0"),
                                          ("2019.5.0", "written by Nsight Compute 2019.5.0")])  # fmt: skip
def test_a_report_ncu_cannot_load_is_named_with_its_writer_never_a_temporary_path(tmp_path, writer, says):
    rep = tmp_path / "theirs.ncu-rep"
    ncu_rep(rep, writer)
    proc = roseprof("import", rep, *dirs(tmp_path), env=env(tmp_path, "badreport"))
    assert_one_line_error(proc, 2, str(rep))
    assert says in proc.stderr and ".tmp-" not in proc.stderr, proc.stderr


def test_a_findings_kernel_name_is_shown_safely_and_cut_visibly(tmp_path):
    """`show` of an ncu run names the kernel of each finding: a name from the file, so a control character in it is
    written out (never sent to the terminal), and a long name is cut with an ellipsis, as in the table above it."""
    text = DETAILS.read_text(encoding="utf-8").replace("copy_blocked", "copy\x1b]0;pwned\x07blocked")
    path = tmp_path / "hostile.csv"
    path.write_text(text, encoding="utf-8")
    code, out, err = import_(tmp_path, path)
    assert code == 0, err
    findings = [line for line in out.splitlines() if line.startswith("ncu finding: ")]
    assert findings and "\x1b" not in out and "\x07" not in out
    # the name is ~90 characters: cut, and the cut shows (the table's shortening), before the finding's rule
    assert all("…" in line for line in findings), findings
    assert "HighPipeUtilization (est. speedup 98.9%)" in " ".join(out.split())
