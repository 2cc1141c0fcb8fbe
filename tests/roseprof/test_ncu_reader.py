"""The ncu reader against Nsight Compute's own exports: every value equals the raw page's, converted from the unit
its units row names; the details page agrees to the digits it prints; missing metrics stay missing."""

import csv
import json
import math
import re
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest

from roseprof.drivers import pick_reader
from roseprof.drivers.ncu.reader import MAP
from roseprof.drivers.ncu.units import convert
from roseprof.model_check import check
from roseprof.run import tables
from tests.helpers import assert_one_line_error, roseprof

DATA = Path(__file__).parent.parent / "data" / "ncu"
RAW, DETAILS = DATA / "tn-raw.csv", DATA / "tn-details.csv"
# The engine's paged-attention kernel on an H100 (ncu 2025.3, base units, a three-level NVTX stack).
ENGINE_RAW = DATA / "h100-ncu2025.3-roseinfer-attn-raw.csv"
PUBLIC = DATA / "brycelelbach__nsightful__copy_blocked.csv"
# The units this test expects in the fixtures, and what one of each is in the canonical unit (written out here,
# apart from units.py, so a wrong factor there cannot pass).
EXPECTED_FACTORS = {
    "us": Decimal(1000),
    "ns": Decimal(1),
    "Mbyte": Decimal(10**6),
    "Gbyte/s": Decimal(10**9),
    "Tbyte/s": Decimal(10**12),
    "Ghz": Decimal(10**9),
    "hz": Decimal(1),
    "%": Decimal(1),
    "": Decimal(1),
    "cycle": Decimal(1),
    "register/thread": Decimal(1),
    "byte/s": Decimal(1),
    "byte": Decimal(1),
    "byte/cycle": Decimal(1),
    "inst/cycle": Decimal(1),
}


def read(path):
    return pick_reader(path).read(path, path.parent, str(path))


def raw_page(path=RAW):
    rows = list(csv.reader(open(path, encoding="utf-8")))
    header, units = rows[0], rows[1]
    return [{h: (v, u) for h, v, u in zip(header, row, units)} for row in rows[2:]]


@pytest.mark.parametrize("path, launches_expected", [(RAW, 4), (ENGINE_RAW, 24)], ids=["tn", "engine-attn"])
def test_raw_page_values_equal_ncus_for_every_launch(path, launches_expected):
    trace = read(path)
    assert check(trace) == []
    km = trace.kernel_metrics
    launches = raw_page(path)
    assert len(km) == len(launches) == launches_expected
    checked = 0
    for i, row in enumerate(launches):
        assert int(row["ID"][0]) == km.launch_id[i]
        assert trace.names[trace.ops.name[i]] == row["Kernel Name"][0]
        for key, (metric, _, _) in MAP.items():
            if metric not in row or not row[metric][0]:
                assert np.isnan(km.value(key)[i]), key  # missing stays missing, never zero
                continue
            value, unit = row[metric]
            want = float(Decimal(value.replace(",", "")) * EXPECTED_FACTORS[unit])
            assert km.value(key)[i] == want, (key, value, unit)
            checked += 1
        # The op's duration is ncu's gpu__time_duration, in ns, exactly.
        value, unit = row["gpu__time_duration.sum"]
        assert trace.ops.end[i] - trace.ops.start[i] == int(
            Decimal(value.replace(",", "")) * EXPECTED_FACTORS[unit]
        )
    assert checked >= len(launches) * (len(MAP) - 4)
    # ncu serialises kernels: the synthetic starts put the launches end to end in launch order.
    assert trace.ops.start[0] == 0 and (trace.ops.start[1:] == trace.ops.end[:-1]).all()


def test_flop_rates_and_peaks_follow_ncus_roofline_metrics():
    trace = read(RAW)
    km, row = trace.kernel_metrics, raw_page()[1]

    def num(name):
        v, u = row[name]
        return float(Decimal(v.replace(",", "")) * {"inst/cycle": 1, "thread": 1, "Ghz": 10**9, "": 1}[u])

    op = "smsp__sass_thread_inst_executed_op_{}_pred_on.sum.per_cycle_elapsed"
    clock = num("smsp__cycles_elapsed.avg.per_second")
    fp32 = (num(op.format("fadd")) + num(op.format("fmul")) + 2 * num(op.format("ffma"))) * clock
    assert km.value("fp32_flop_per_s")[1] == pytest.approx(fp32, rel=1e-12)
    # ncu's own derived metric for half precision counts 4 per hfma: the raw page has it.
    hfma_x4 = num("derived__smsp__sass_thread_inst_executed_op_hfma_pred_on_x4")
    assert km.value("fp16_flop_per_s")[1] == pytest.approx(hfma_x4 * clock, rel=1e-6)
    assert math.isnan(
        km.value("tensor_flop_per_s")[1]
    )  # the full set's raw page has no tensor instruction count
    dev = km.devices[0]
    assert dev["name"] == "NVIDIA H100 80GB HBM3" and dev["sm_count"] == 132
    # 1.28 Kbyte/cycle x 2,619,000 kHz and 16,896 FFMA/cycle x 2 x 1,980,000 kHz: H100 SXM's 3.35 TB/s and 67 TF.
    assert dev["peak_dram_bytes_per_s"] == pytest.approx(1280 * 2_619_000e3)
    assert dev["peak_fp32_flop_per_s"] == pytest.approx(16896 * 2 * 1_980_000e3)


def test_details_page_agrees_with_the_raw_page_to_its_printed_digits():
    raw, details = read(RAW).kernel_metrics, read(DETAILS).kernel_metrics
    compared = 0
    for key, (_, _, where) in MAP.items():
        if where is None:
            assert np.isnan(details.value(key)).all(), key  # not on the details page: missing, never 0
            continue
        a, b = raw.value(key), details.value(key)
        assert np.allclose(a, b, rtol=6e-3, atol=0.006), (key, a, b)
        compared += 1
    assert compared >= 11
    assert len(details.rules) == 52 and not raw.rules
    assert all(n == [["", "roseinfer.kv.append_token"]] for n in details.nvtx)


def test_public_export_rules_speedups_and_base_units():
    trace = read(PUBLIC)
    km = trace.kernel_metrics
    assert km.value("duration_ns")[0] == 21_058_944
    assert km.value("dram_frequency_hz")[0] == 4_963_609_951.19
    assert km.value("achieved_occupancy_pct")[0] == 96.26
    assert km.grid[0].tolist() == [1024, 1, 1] and km.block[0].tolist() == [256, 1, 1]
    speedups = {r["rule"]: r["speedup_pct"] for r in km.rules if r["speedup_pct"] is not None}
    assert speedups["UncoalescedGlobalAccess"] == 74.14 and speedups["HighPipeUtilization"] == 98.86
    info = [r for r in km.rules if r["type"] == "INF"]
    assert info and all(r["speedup_pct"] is None for r in info)
    assert km.nvtx == [[]]


@pytest.mark.parametrize(
    "text,unit,want",
    [
        ("11.008000", "us", (11008.0, "ns")),
        ("1.28", "Kbyte/cycle", (1280.0, "byte/cycle")),  # ncu's prefixes are decimal
        ("1,980,000", "", (1980000.0, "")),
        ("2.5", "usecond", (2500.0, "ns")),  # older ncu spells the unit out
        ("1.5", "cycle/nsecond", (1.5e9, "hz")),
        ("3", "sector/us", (3e6, "sector/s")),
    ],
)
def test_units(text, unit, want):
    assert convert(text, unit) == want


def test_missing_values_are_none_in_the_summary(tmp_path):
    proc = roseprof("import", DETAILS, "--traces-dir", tmp_path / "t", "--dashboards-dir", tmp_path / "d")
    assert proc.returncode == 0, proc.stderr
    (run,) = (tmp_path / "t").iterdir()
    summary = json.loads((run / "summary.json").read_text())
    launch = summary["ncu"]["launches"][0]
    assert launch["dram_read_bytes"] is None and launch["fp32_flop_per_s"] is None
    assert launch["duration_ns"] == 11010.0  # the details page's 11.01 us
    assert summary["ncu"]["rules"] and summary["ncu"]["rules"][0]["speedup_pct"] is not None


def test_summary_kernels_keep_the_contract_and_ncus_totals(tmp_path):
    proc = roseprof("import", RAW, "--traces-dir", tmp_path / "t", "--dashboards-dir", tmp_path / "d")
    assert proc.returncode == 0, proc.stderr
    (run,) = (tmp_path / "t").iterdir()
    summary = json.loads((run / "summary.json").read_text())
    totals: dict[str, int] = {}
    for row in raw_page():
        name = row["Kernel Name"][0]
        totals[name] = totals.get(name, 0) + int(Decimal(row["gpu__time_duration.sum"][0]) * 1000)
    assert {k["name"]: k["total_ns"] for k in summary["kernels"]} == totals
    for k in summary["kernels"]:
        assert set(k) == {"name", "count", "total_ns", "p50_ns", "region"}
        assert k["count"] == 2 and k["region"] == "roseinfer.kv.append_token"
    dev = summary["ncu"]["devices"][0]
    assert dev["peak_sources"]["peak_dram_bytes_per_s"] == "report"
    assert dev["peak_sources"]["peak_tensor_flop_per_s"].startswith("table (H100 SXM")
    attention = summary["ncu"]["launches"][0]
    assert attention["dram_bandwidth_pct_of_peak"] == pytest.approx(100 * 1.668302e12 / (1280 * 2_619_000e3))
    # The stored per-launch metrics read back as written.
    trace = tables.read_trace(run)
    again = read(RAW).kernel_metrics
    for key, v in again.values.items():
        assert np.array_equal(trace.kernel_metrics.value(key), v, equal_nan=True), key
    assert trace.kernel_metrics.nvtx == again.nvtx and check(trace) == []


def test_a_csv_that_is_not_ncus_gets_one_line(tmp_path):
    odd = tmp_path / "numbers.csv"
    odd.write_text("a,b\n1,2\n")
    proc = roseprof("import", odd, "--traces-dir", tmp_path / "t", "--dashboards-dir", tmp_path / "d")
    assert_one_line_error(proc, 2, f"{odd}: not an Nsight Compute CSV export")
    assert not (tmp_path / "t").exists() or not any((tmp_path / "t").iterdir())


def unpack(name: str, tmp_path) -> Path:
    """One of the xz-compressed exports of tests/data/ncu (ncu 2025.3's names of the engine at batch 64)."""
    import lzma

    out = tmp_path / name.removesuffix(".xz")
    out.write_bytes(lzma.open(DATA / name).read())
    return out


def test_a_details_page_of_a_report_collected_with_metrics_gives_its_durations(tmp_path):
    # `ncu --metrics gpu__time_duration.sum`: the details page has it under "Command line profiler metrics" only
    raw = read(unpack("h200-ncu2025.3-roseinfer-names-raw.csv.xz", tmp_path))
    details = read(unpack("h200-ncu2025.3-roseinfer-names-details.csv.xz", tmp_path))
    a, b = raw.kernel_metrics.value("duration_ns"), details.kernel_metrics.value("duration_ns")
    assert len(a) == 600 and not np.isnan(b).any()
    assert np.allclose(a, b, rtol=6e-4, atol=6)  # the details page prints 4 digits (us): 25.54


def test_kernels_sharing_a_base_name_stay_apart_in_the_ncu_table_and_figures(tmp_path):
    from roseprof.render.ncu_views import _labels

    path = unpack("h200-ncu2025.3-roseinfer-names-raw.csv.xz", tmp_path)
    proc = roseprof(
        "import",
        path,
        "--traces-dir",
        tmp_path / "t",
        "--dashboards-dir",
        tmp_path / "d",
        env={"COLUMNS": "80"},
    )
    assert proc.returncode == 0, proc.stderr
    table = proc.stdout[proc.stdout.index("ncu: per kernel") : proc.stdout.index("note:")]
    tagged = re.findall(r"cutlass::device_kernel #([0-9a-f]{4})", table)
    assert len(tagged) == len(set(tagged)) == 3  # the engine's three CUTLASS GEMMs, one row each
    names = [
        k["name"]
        for k in json.loads(next((tmp_path / "t").glob("*/summary.json")).read_text())["ncu"]["kernels"]
    ]
    gemms = [n for n in names if "cutlass::device_kernel" in n]
    # their first 80 characters agree: cut there, the speed-of-light bars would draw the three as one
    assert len({n[:80] for n in gemms}) == 1
    assert len({_labels(names, 80)[n] for n in gemms}) == 3
