"""scripts/make_big_kineto.py, the benchmarks' large Kineto traces: copies of a real trace that roseprof reads as
one trace of that many times the kernels, and with --rank/--world-size as that rank of that world (the 8-rank
side by side with HTA in docs/BENCHMARKS.md, session 32)."""

import subprocess
import sys
from pathlib import Path

import numpy as np

from roseprof.drivers.torch.reader import DISTRIBUTED_INFO, read_kineto
from roseprof.model import KERNEL

ROOT = Path(__file__).parents[2]
SRC = (
    ROOT
    / "tests/data/torch/facebookresearch__HolisticTraceAnalysis__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
)


def _make(out: Path, *args: str) -> None:
    cmd = [sys.executable, str(ROOT / "scripts/make_big_kineto.py"), str(SRC), str(out), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr


def test_two_copies_as_rank_3_of_8_read_as_that_rank_with_twice_the_kernels(tmp_path):
    _make(tmp_path / "two.json", "--copies", "2", "--rank", "3", "--world-size", "8")
    one, two = read_kineto(SRC), read_kineto(tmp_path / "two.json")
    kernels_one = np.count_nonzero(one.ops.kind == KERNEL)
    assert kernels_one > 0
    assert np.count_nonzero(two.ops.kind == KERNEL) == 2 * kernels_one
    # every launch still joined to its kernel: the copy's correlation ids were shifted, not repeated
    assert np.count_nonzero(two.ops.api_start >= 0) == 2 * np.count_nonzero(one.ops.api_start >= 0)
    assert {(p.rank, p.rank_from) for p in two.processes.values()} == {(3, DISTRIBUTED_INFO)}
    assert {p.rank for p in one.processes.values()} == {0}
