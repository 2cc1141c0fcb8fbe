"""scripts/variant_summary.py, run as the variants stage runs it, on real files of the kind that stage writes
(tests/data/bench/variants/: a short batch-1 run of the fused kernels on an H200 and its kernel stamps;
tests/data/bench/variants-rounds/: three rounds of one variant from session 37's call 6)."""

import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "bench" / "variants"
ROUNDS = REPO / "tests" / "data" / "bench" / "variants-rounds"


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
        assert out[line + 1] == f"    after the wait {after:.2f} (p50 of each launch's sum)"
    # the same figures as read off the run by hand (ns kept as integers: as floats they step by 256 ns)
    attn = "  fused_attn_kernel, 144 launches, p50 µs: wait / norm / qkv / attend / proj"
    mlp = "  fused_mlp_kernel, 144 launches, p50 µs: wait / norm / up / down / sum"
    assert f"{attn} = 3.39 / 1.31 / 0.74 / 1.18 / 1.63" in out
    assert f"{mlp} = 3.68 / 1.38 / 0.67 / 0.29 / 0.70" in out


def test_the_handoffs_between_the_chains_kernels_that_no_phase_covers():
    # Every launch of the file in the order it started on the GPU; a pair counts where the next started before
    # this one ended (the captured step's PDL chain): the next one's last block past its wait less this end. The
    # run's prefill and its first steps launch plainly, so some pairs do not count, and no pair is dropped twice.
    done = summary(DATA)
    assert done.returncode == 0, done.stderr
    launches = sorted(
        (json.loads(line) for line in (DATA / "stamps-main.jsonl").read_text().splitlines()),
        key=lambda rec: rec["bounds_ns"][0],
    )
    gaps, plain = {}, 0
    for rec, nxt in zip(launches, launches[1:]):
        end, (start, past_wait) = rec["bounds_ns"][-1], nxt["bounds_ns"][:2]
        if start < end:
            gaps.setdefault((rec["kernel"], nxt["kernel"]), []).append(past_wait - end)
        else:
            plain += 1
    assert sum(len(g) for g in gaps.values()) + plain == len(launches) - 1 and plain > 0
    expected = [
        f"  handoff {a} -> {b}: p50 {statistics.median(g) / 1e3:.2f} µs ({len(g)} PDL pairs)"
        for (a, b), g in gaps.items()
    ]
    assert [line for line in done.stdout.splitlines() if line.startswith("  handoff ")] == expected
    # as read off the run by hand: about half a microsecond each way
    assert "  handoff fused_attn_kernel -> fused_mlp_kernel: p50 0.58 µs (120 PDL pairs)" in expected
    assert "  handoff fused_mlp_kernel -> fused_attn_kernel: p50 0.45 µs (110 PDL pairs)" in expected


def test_rounds_in_order_and_their_median():
    done = summary(ROUNDS)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "mA           round 0: TPOT p50 0.1391 ms (runs 0.1391-0.1393), floor 45.8%",
        "mA           round 1: TPOT p50 0.1395 ms (runs 0.1392-0.1397), floor 45.5%",
        "mA           round 2: TPOT p50 0.1390 ms (runs 0.1390-0.1396), floor 46.0%",
        "mA           median of rounds 0.1391 ms",
    ]


def test_variants_print_in_the_order_the_stage_was_given(tmp_path):
    for name in ("zz", "aa", "mm"):
        shutil.copy(DATA / "b1-main-1.json", tmp_path / f"b1-{name}-1.json")
        shutil.copy(DATA / "stamps-main.jsonl", tmp_path / f"stamps-{name}.jsonl")
    (tmp_path / "variants.txt").write_text("zz\naa\n")  # mm not listed: after them
    done = summary(tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[0] for line in lines if "median of rounds" in line] == ["zz", "aa", "mm"]
    assert [line.split()[0] for line in lines if "(stamped run)" in line] == ["zz", "aa", "mm"]


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


def other(line, **changes):
    return json.dumps({**json.loads(line), **changes})


@pytest.mark.parametrize(
    "bad, says",
    [
        (lambda first: other(first, v=2), "version 2"),  # a later schema
        (lambda first: other(first, kernel=["fused_attn_kernel"]), "disagree"),
        (lambda first: other(first, bounds_ns=[1.5, 2.5, 3.5, 4.5, 5.5, 6.5]), "integer ns"),
        (
            lambda first: other(first, regions=json.loads(first)["regions"][::-1]),
            "differ from its first line",
        ),
        (lambda _first: "", "no launches"),  # a stamped run killed before its first step
    ],
)
def test_a_stamps_file_of_another_kind_is_named_with_its_line(tmp_path, bad, says):
    lines = (DATA / "stamps-main.jsonl").read_text().splitlines()
    text = bad(lines[0])
    (tmp_path / "stamps-main.jsonl").write_text(text if not text else "\n".join([lines[0], text]) + "\n")
    done = summary(tmp_path)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and says in done.stderr and "Traceback" not in done.stderr
    assert str(tmp_path / "stamps-main.jsonl") in done.stderr


def test_a_folder_without_the_stages_files_says_so(tmp_path):
    done = summary(tmp_path)
    assert done.returncode == 1
    assert str(tmp_path) in done.stderr and "no b1-NAME-ROUND.json" in done.stderr
