"""scripts/bench_graph_step.py's kernel table on a real capture's kernels: the engine's CUTLASS GEMMs, whose names
agree for far more than the table shows, each get the row of its epilogue, under the mangled names torch.profiler
gives them and the demangled ones nsys does (tests/data/nsys/h200-nsys2025.3-roseinfer-halves.sqlite: the engine
on an H200, its CUTLASS GEMM in buckets of 112 rows)."""

import sqlite3
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest

REPO = Path(__file__).resolve().parents[2]
HALVES = REPO / "tests" / "data" / "nsys" / "h200-nsys2025.3-roseinfer-halves.sqlite"


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "scripts"))
    import bench_graph_step

    return bench_graph_step


def _cutlass_launches():
    """(mangled name, demangled name, the label its grid says, start, end, stream, device) of each launch of the
    CUTLASS GEMM in the capture. The grid tells the epilogues apart without their names: a K split's parts are the
    GEMM's batch (grid z > 1), c_fc's GELU the only one of 3,072 columns (48 tiles of 64 weight rows)."""
    con = sqlite3.connect(f"file:{HALVES}?mode=ro", uri=True)
    rows = con.execute(
        "SELECT m.value, d.value, gridX, gridZ, start, end, streamId, deviceId FROM CUPTI_ACTIVITY_KIND_KERNEL k"
        " JOIN StringIds m ON m.id = k.mangledName JOIN StringIds d ON d.id = k.demangledName"
        " WHERE d.value LIKE '%cutlass::device_kernel%'"
    ).fetchall()
    con.close()
    out = []
    for mangled, demangled, grid_x, grid_z, start, end, stream, device in rows:
        if grid_z > 1:
            label = "CUTLASS GEMM, float32 parts"
        elif grid_x == 3072 // 64:
            label = "CUTLASS GEMM, bias + GELU"
        else:
            label = "CUTLASS GEMM, bias"
        out.append((mangled, demangled, label, start, end, stream, device))
    return out


def test_each_cutlass_gemm_is_named_by_its_epilogue_mangled_or_not(bench):
    launches = _cutlass_launches()
    assert {label for _, _, label, *_ in launches} == {
        "CUTLASS GEMM, float32 parts",
        "CUTLASS GEMM, bias + GELU",
        "CUTLASS GEMM, bias",
    }
    for mangled, demangled, label, *_ in launches:
        assert mangled.startswith("_ZN7cutlass") and bench.kernel_label(mangled) == label
        assert bench.kernel_label(demangled) == label
    # other kernels keep their names
    assert bench.kernel_label("add_layer_norm_kernel") == "add_layer_norm_kernel"
    assert bench.kernel_label("nvjet_sm90_hsh_64x112_64x9_4x2_h_bz_gelubias_TNT") == (
        "nvjet_sm90_hsh_64x112_64x9_4x2_h_bz_gelubias_TNT"
    )


def test_the_kernel_table_has_a_row_an_epilogue_with_its_launches(bench):
    # the profiler's events as kernel_rows takes them (times in us), under torch's mangled names
    launches = _cutlass_launches()
    events = [
        SimpleNamespace(
            name=mangled,
            time_range=SimpleNamespace(start=start / 1e3, end=end / 1e3),
            device_resource_id=stream,
            device_index=device,
        )
        for mangled, _, _, start, end, stream, device in launches
    ]
    rows = {name: launches_per for name, launches_per, _, _ in bench.kernel_rows(events, reps=1)}
    assert rows == dict(Counter(label for _, _, label, *_ in launches))
