"""Nsight Systems files that other projects published (tests/data/nsys/public, origins beside each file), read in
agreement with `nsys stats` 2022.4 on the same files.

Oracles: `nsys stats --report nvtxsum,cudaapisum,gpukernsum --format csv --output <stem>.stats <file>` (nsys
2022.4.2.1, run once, 2026-11-22). An empty CSV is what the tool wrote when the file has none of that data.
"""

import csv
import re
import shutil
import sqlite3
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from roseprof.analysis.summary import analyse
from roseprof.drivers import pick_reader
from roseprof.drivers.nsys.reader import read_nsys_sqlite
from roseprof.errors import NothingRecorded as EmptyTrace
from tests.helpers import DATA, assert_one_line_error, roseprof

PUBLIC = DATA / "nsys" / "public"
FUSER = "NVIDIA__Fuser__report2"  # nsys 2024.6, schema 3.16
CLOVERLEAF = "hpcgroup__pipit__perlmutter-cloverleaf-cuda"  # nsys 2024.5: CUDA kernels, no NVTX at all
SAXPY = "hpcgroup__pipit__saxpy-mpi-cuda_nsys_perlmutter0"  # nsys 2022.2, schema 2.9.1
JACC = "D-W-Chiang__JACC.jl__cg_trace"  # nsys 2026.2, schema 3.25: no range, mark or GPU op
JACOBI = "openhackathons-org__gpubootcamp__jacobi_report"  # a .qdrep of nsys 2020.5
SQLITES = (FUSER, CLOVERLEAF, SAXPY)


def rows(base: str, report: str) -> list[dict]:
    with open(PUBLIC / f"{base}.stats_{report}.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def close(a, b, rel=1e-3):
    return abs(a - b) <= rel * max(abs(b), 1)


def read(base: str, tmp_path: Path):
    if base == JACOBI:
        path = PUBLIC / f"{base}.qdrep"
        return pick_reader(path).read(path, tmp_path, str(path))
    return read_nsys_sqlite(str(PUBLIC / f"{base}.sqlite"))


def check_against_nsys_stats(base: str, trace) -> None:
    summary, _ = analyse(trace, None)
    # NVTX ranges: 2022.4 names a range "domain:name" outside the default domain.
    ours = {(f"{r['domain']}:{r['name']}" if r["domain"] else r["name"]): r for r in summary["regions"]}
    expected = rows(base, "nvtxsum")
    assert len(ours) == len(expected)
    for row in expected:
        r = ours[row["Range"]]
        assert r["count"] == int(row["Instances"])
        assert close(r["total_ns"], int(row["Total Time (ns)"]))
        assert close(r["p50_ns"], float(row["Med (ns)"]))
    # Kernels: the tool splits a name over launch configurations; sum them per name.
    kernels = defaultdict(lambda: [0, 0])
    for k in summary["kernels"]:
        kernels[k["name"]][0] += k["count"]
        kernels[k["name"]][1] += k["total_ns"]
    expected_k = defaultdict(lambda: [0, 0])
    for row in rows(base, "gpukernsum"):
        expected_k[row["Name"]][0] += int(row["Instances"])
        expected_k[row["Name"]][1] += int(row["Total Time (ns)"])
    assert kernels.keys() == expected_k.keys()
    for name, (count, total) in expected_k.items():
        assert kernels[name][0] == count and close(kernels[name][1], total)
    # Launching API calls (the ones that launched GPU work): counts and totals per name, as the API summary
    # names them (without the _v7000-style suffix).
    ops = trace.ops
    calls = defaultdict(set)
    for n, tid, s, e in zip(ops.api_name, ops.api_tid, ops.api_start, ops.api_end):
        if n >= 0:
            calls[re.sub(r"_v\d+$", "", trace.names[n])].add((int(tid), int(s), int(e)))
    api = defaultdict(list)
    for row in rows(base, "cudaapisum"):
        api[row["Name"]].append((int(row["Num Calls"]), int(row["Total Time (ns)"])))
    # Schema 2.9.1 (nsys 2022.2) records every runtime call twice under one correlation id (eventClass 67
    # "cudaMemcpy" and eventClass 0 "cudaMemcpy_v3020"): the tool's summary lists both as two rows; the
    # join uses the first, so ours equals one of them.
    assert calls or not len(ops)
    for name, found in calls.items():
        total = sum(e - s for _, s, e in found)
        assert any(count == len(found) and close(total, t) for count, t in api[name]), (name, api[name])
    assert (ops.api_start >= 0).all()  # every GPU op found the call that launched it


@pytest.mark.parametrize("base", SQLITES)
def test_public_exports_agree_with_nsys_stats(base, tmp_path):
    check_against_nsys_stats(base, read(base, tmp_path))


@pytest.mark.nsys
def test_public_qdrep_of_nsys_2020_agrees_with_nsys_stats(tmp_path):
    check_against_nsys_stats(JACOBI, read(JACOBI, tmp_path))


def test_kernels_without_any_range_are_summarised(tmp_path):
    summary, _ = analyse(read(CLOVERLEAF, tmp_path), None)
    assert (
        summary["regions"] == []
        and summary["kernels_outside_ranges"] == summary["gpu_ops"]["kernels"] == 1312
    )
    assert all(k["region"] is None for k in summary["kernels"])


def test_capture_with_nothing_in_it_is_refused_in_one_line(tmp_path):
    assert all(
        not rows(JACC, r) for r in ("nvtxsum", "cudaapisum", "gpukernsum")
    )  # the tool finds nothing too
    with pytest.raises(EmptyTrace):
        read(JACC, tmp_path)
    src = PUBLIC / f"{JACC}.sqlite"
    proc = roseprof("import", src, "--traces-dir", tmp_path / "t", "--dashboards-dir", tmp_path / "d")
    assert_one_line_error(proc, 2, f"{src}: holds no NVTX range or mark and no GPU op: nothing to analyse")
    assert not (tmp_path / "t").exists() or not list((tmp_path / "t").iterdir())


def test_export_without_a_metadata_table_reads_the_same(tmp_path):
    """nsys 2020 exports have no metadata table: the same tables without it read the same, with a warning."""
    copy = tmp_path / "old.sqlite"
    shutil.copyfile(PUBLIC / f"{FUSER}.sqlite", copy)
    with sqlite3.connect(copy) as conn:
        conn.execute("DROP TABLE META_DATA_EXPORT")
    old, new = read_nsys_sqlite(str(copy)), read(FUSER, tmp_path)
    assert old.tool.version == "?" and "no metadata table" in old.warnings[0]
    assert np.array_equal(old.ranges.start, new.ranges.start) and np.array_equal(old.ops.end, new.ops.end)
    check_against_nsys_stats(FUSER, old)


def test_sqlite_that_is_not_an_nsys_export_is_refused(tmp_path):
    other = tmp_path / "notes.sqlite"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE notes (t TEXT)")
    proc = roseprof("import", other, "--traces-dir", tmp_path / "t", "--dashboards-dir", tmp_path / "d")
    assert_one_line_error(proc, 2, f"{other}: is an SQLite database but not an nsys export")


def test_report_header_says_which_nsys_wrote_it():
    from roseprof.drivers.nsys.report import read_header, version_key

    new = read_header(DATA / "nsys" / "h100-nsys2025.3-matmul-nvtx.nsys-rep")
    old = read_header(PUBLIC / f"{JACOBI}.qdrep")
    assert (new.format, new.product_version) == ("36398880", "2025.3.1.0")
    assert old.format == "1"  # nsys 2020.5 wrote no product version where 2025.3 does
    assert read_header(PUBLIC / f"{FUSER}.sqlite") is None
    assert version_key("2025.3.1.0") > version_key("2022.4.2.1-df9881f")
