"""Our parse of real nsys exports agrees with `nsys stats` on the same files (reports made by the tool itself).

Oracles in tests/data/nsys: *.stats-nvtxsum.csv (nsys 2022.4), *.stats_*.csv (nsys 2025.3 on an H100:
nvtx_sum, cuda_gpu_kern_sum, nvtx_gpu_proj_sum, nvtx_kern_sum).
"""

import csv
from collections import defaultdict
from pathlib import Path

import pytest

from roseprof.analysis.summary import analyse
from roseprof.drivers.nsys.reader import read_nsys_sqlite
from roseprof.workload.steplog import read_steplog

DATA = Path(__file__).parent.parent / "data" / "nsys"
CPU = "cpu-nsys2022.4-nvtx"
MATMUL = "h100-nsys2025.3-matmul-nvtx"
DECODE = "h100-nsys2025.3-roseinfer-decode"
HF = "h100-nsys2025.3-hf-graph"  # a program that is not the engine, its forward replayed by a CUDA graph


def close(a, b, rel=1e-3):
    return abs(a - b) <= rel * max(abs(b), 1)


def rows(name):
    with open(DATA / name, newline="") as fh:
        return list(csv.DictReader(fh))


def bare(range_name):
    # nsys 2025 prefixes the domain (":name" for the default domain); 2022.4 does not.
    return (
        range_name.split(":", 1)[1]
        if ":" in range_name and not range_name.startswith("roseinfer")
        else range_name
    )


@pytest.fixture(scope="module")
def summaries():
    out = {}
    for base in (CPU, MATMUL, DECODE, HF):
        log = DATA / f"{base}.steplog.jsonl"
        out[base] = analyse(
            read_nsys_sqlite(str(DATA / f"{base}.sqlite")), read_steplog(str(log)) if log.exists() else None
        )[0]
    return out


@pytest.mark.parametrize(
    "base, oracle",
    [
        (CPU, f"{CPU}.stats-nvtxsum.csv"),
        (MATMUL, f"{MATMUL}.stats-nvtx_sum.csv"),
        (MATMUL, f"{MATMUL}.stats_nvtx_sum.csv"),
        (DECODE, f"{DECODE}.stats_nvtx_sum.csv"),
        (HF, f"{HF}.stats_nvtx_sum.csv"),
    ],
)
def test_region_counts_and_totals_match_nvtx_sum(summaries, base, oracle):
    ours = {r["name"]: r for r in summaries[base]["regions"]}
    expected = rows(oracle)
    assert expected and len(ours) == len(expected)
    for row in expected:
        r = ours[bare(row["Range"])]
        assert r["count"] == int(row["Instances"])
        assert close(r["total_ns"], int(row["Total Time (ns)"]))
        assert close(r["p50_ns"], float(row["Med (ns)"]))


@pytest.mark.parametrize("base", [MATMUL, DECODE, HF])
def test_kernel_counts_and_totals_match_kernel_sum(summaries, base):
    per_name = defaultdict(lambda: [0, 0])
    for k in summaries[base]["kernels"]:
        per_name[k["name"]][0] += k["count"]
        per_name[k["name"]][1] += k["total_ns"]
    # The kernel summary may split one name over launch configurations (grid/block): sum them per name.
    expected = defaultdict(lambda: [0, 0])
    for row in rows(f"{base}.stats_cuda_gpu_kern_sum.csv"):
        expected[row["Name"]][0] += int(row["Instances"])
        expected[row["Name"]][1] += int(row["Total Time (ns)"])
    assert len(expected) == len(per_name)
    for name, (count, total) in expected.items():
        assert per_name[name][0] == count
        assert close(per_name[name][1], total)


@pytest.mark.parametrize("base", [MATMUL, DECODE, HF])
def test_gpu_projection_matches_nvtx_gpu_proj_sum(summaries, base):
    ours = {r["name"]: r for r in summaries[base]["regions"]}
    expected = rows(f"{base}.stats_nvtx_gpu_proj_sum.csv")
    assert expected
    for row in expected:
        r = ours[bare(row["Range"])]
        # The tool counts the instances that launched GPU work: a range open during a CUDA-graph capture
        # launches nothing (the capture records), so the graph program's capture-time instances are not in it.
        if base == HF:
            assert r["count"] >= int(row["Range Instances"])
        else:
            assert r["count"] == int(row["Range Instances"])
        assert close(r["gpu_proj_ns"], int(row["Total Proj Time (ns)"]))
    # Ranges that launched nothing have no projection row in the tool's report and 0 here.
    listed = {bare(row["Range"]) for row in expected}
    assert all(r["gpu_proj_ns"] == 0 for name, r in ours.items() if name not in listed)


@pytest.mark.parametrize("base", [MATMUL, DECODE, HF])
def test_kernel_time_per_range_matches_nvtx_kern_sum(summaries, base):
    expected = defaultdict(int)
    for row in rows(f"{base}.stats_nvtx_kern_sum.csv"):
        if row["NVTX Range"]:
            expected[bare(row["NVTX Range"])] += int(row["Total Time (ns)"])
    ours = {r["name"]: r for r in summaries[base]["regions"]}
    assert expected
    for name, total in expected.items():
        assert close(ours[name]["gpu_kernel_ns"], total)


def test_kernels_outside_any_range_are_counted(summaries):
    outside = sum(
        int(r["Kern Inst"]) for r in rows(f"{MATMUL}.stats_nvtx_kern_sum.csv") if not r["NVTX Range"]
    )
    assert summaries[MATMUL]["kernels_outside_ranges"] == outside == 2


def test_decode_steps_join_the_step_log(summaries):
    s = summaries[DECODE]
    log = read_steplog(str(DATA / f"{DECODE}.steplog.jsonl"))
    assert s["warnings"] == []
    assert s["steps"]["count"] == len(log.steps) == 71
    assert s["steps"]["rollover"]["count"] == sum(1 for st in log.steps if st["rollovers"] > 0)
    assert s["steps"]["rollover"]["count"] >= 1
    itl = s["itl"]
    assert itl["count"] == sum(len(r["token_ns"]) - 1 for r in log.requests)
    assert itl["at_rollover"]["count"] + itl["elsewhere"]["count"] == itl["count"]
    assert s["requests"]["completion_tokens"] == 8 * 72
    # Breakdown regions under the step are named and the excess of rollover steps is attributed to one of them.
    assert "roseinfer.model.forward" in s["steps"]["normal"]["regions"]
    assert s["steps"]["rollover_excess"]["region"]


def test_cpu_fixture_rollover_steps_from_marks(summaries):
    s = summaries[CPU]["steps"]
    # The program marks a rollover after every 16th of its 200 steps, and those steps are the slow ones.
    assert s["rollover"]["count"] == 13
    assert s["rollover"]["p50_ns"] > 2 * s["normal"]["p50_ns"]
    assert s["rollover_excess"]["region"] == "roseinfer.kv.append_token"
