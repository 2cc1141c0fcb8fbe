"""scripts/variant_summary.py, run as the variants stage runs it, on that stage's real files (tests/data/variants/:
a short batch-1 run of the fused kernels on an H200 and its kernel stamps)."""

import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "variants"


def summary(folder):
    return subprocess.run(
        [sys.executable, str(REPO / "scripts" / "variant_summary.py"), str(folder)],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "80"},
        timeout=60,
    )


def test_a_rounds_tpot_and_each_kernels_phases_from_the_stages_files():
    done = summary(DATA)
    assert done.returncode == 0, done.stderr
    out = done.stdout.splitlines()

    runs = json.loads((DATA / "b1-main-1.json").read_text())["runs"]
    tpots = [r["tpot_ms"]["50"] for r in runs]
    assert len(tpots) == 2
    assert f"main         round 1: TPOT p50 {statistics.median(tpots):.4f} ms" in out[0]
    assert f"(runs {min(tpots):.4f}-{max(tpots):.4f})" in out[0]
    assert out[1] == f"main         median of rounds {statistics.median(tpots):.4f} ms"

    by_kernel = {}
    for line in (DATA / "stamps-main.jsonl").read_text().splitlines():
        rec = json.loads(line)
        by_kernel.setdefault(rec["kernel"], []).append(rec["bounds_ns"])
    assert set(by_kernel) == {"fused_attn_kernel", "fused_mlp_kernel"}
    for kernel, bounds in by_kernel.items():
        p50s = [statistics.median(b[k + 1] - b[k] for b in bounds) / 1e3 for k in range(len(bounds[0]) - 1)]
        after = statistics.median(b[-1] - b[1] for b in bounds) / 1e3
        line = next(i for i, text in enumerate(out) if text.startswith(f"  {kernel}, "))
        assert f"{len(bounds)} launches" in out[line]
        assert out[line].endswith(" = " + " / ".join(f"{v:.2f}" for v in p50s))
        assert out[line + 1] == f"    after the wait {after:.2f}"
    assert "wait / norm / qkv / attend / proj" in done.stdout  # the engine's region names, last part
    assert "wait / norm / up / down / sum" in done.stdout


def test_variants_print_in_the_order_they_ran(tmp_path):
    for name, mtime in (("zz", 1_000), ("aa", 2_000)):  # zz ran first
        shutil.copy(DATA / "b1-main-1.json", tmp_path / f"b1-{name}-1.json")
        os.utime(tmp_path / f"b1-{name}-1.json", (mtime, mtime))
    done = summary(tmp_path)
    assert done.returncode == 0, done.stderr
    firsts = [line.split()[0] for line in done.stdout.splitlines()]
    assert firsts.index("zz") < firsts.index("aa")


def test_a_file_that_does_not_parse_is_named_and_exits_1(tmp_path):
    text = (DATA / "b1-main-1.json").read_text()
    (tmp_path / "b1-main-1.json").write_text(text[: len(text) // 2])  # a run killed while writing
    done = summary(tmp_path)
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert str(tmp_path / "b1-main-1.json") in done.stderr and "Traceback" not in done.stderr

    (tmp_path / "b1-main-1.json").unlink()
    lines = (DATA / "stamps-main.jsonl").read_text().splitlines()
    (tmp_path / "stamps-main.jsonl").write_text("\n".join(lines[:3] + [lines[3][:40]]) + "\n")
    done = summary(tmp_path)
    assert done.returncode == 1
    assert f"{tmp_path / 'stamps-main.jsonl'}:4:" in done.stderr and "Traceback" not in done.stderr


def test_a_folder_without_the_stages_files_says_so(tmp_path):
    done = summary(tmp_path)
    assert done.returncode == 1
    assert str(tmp_path) in done.stderr and "no b1-NAME-ROUND.json" in done.stderr
