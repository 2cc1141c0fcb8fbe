"""Every rank's GPU work reaches the run (issue 41): a `roseprof nsys` capture of the engine at tensor_parallel_size
2 (or 4 where four GPUs are visible) on NCCL, with the ranks spawned by --tensor-parallel-size, holds each rank's
kernels, not rank 0's alone. A spawned rank that left through os._exit skipped the exit hooks through which Nsight
Systems and CUPTI flush a process' activity buffers, and the run gave ranks 1..N-1 zero kernels.
Needs two GPUs and Nsight Systems (scripts/gpu_check.sh runs it on the device, with shared/gpu's nsys)."""

from __future__ import annotations

import json
import sys

import pytest
import torch

from tests.helpers import roseprof

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.nsys,
    pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs 2 GPUs"),
]


def _command(ranks: int, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "roseinfer.benchmark_streaming", "--device", "cuda", "--dtype", "bfloat16",
        "--hf-model-id", "gpt2", "--no-stop-on-eos", "--prompt", "x", "--num-requests", "2", "--max-batch-size", "2",
        "--prefill-max-batch-size", "2", "--max-new-tokens", "24", "--warmup-runs", "0", "--repeat-runs", "1",
        "--tensor-parallel-size", str(ranks), *extra,
    ]  # fmt: skip


@pytest.mark.parametrize("path", ["graphs", "eager"])
def test_every_rank_has_rank_zeros_kernels(tmp_path, path):
    ranks = 4 if torch.cuda.device_count() >= 4 else 2
    extra = ("--paged-attn", "--cuda-graph") if path == "graphs" else ()
    traces = tmp_path / "traces"
    proc = roseprof(
        "nsys", "--name", f"tp{ranks}", "--traces-dir", traces, "--dashboards-dir", tmp_path / "dash",
        "--", *_command(ranks, *extra),
        env={"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run,) = [p for p in traces.iterdir() if not p.name.startswith(".")]
    summary = json.loads((run / "summary.json").read_text())
    by_rank = {r["rank"]: r for r in summary["ranks"]}
    assert sorted(by_rank) == list(range(ranks))
    zero = by_rank[0]["kernel_count"]
    assert zero > 0
    for rank, entry in by_rank.items():
        assert abs(entry["kernel_count"] - zero) <= 0.01 * zero, (rank, entry["kernel_count"], zero)
