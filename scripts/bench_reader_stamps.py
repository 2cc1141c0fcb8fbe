"""What the fused all-reduce readers' stamps add to a profiled step (issue 50; docs/BENCHMARKS.md, session 40), on
one GPU: the stamp recorder's copy of a step's stamps (gpt2-xl at TP=2: [4, 22,938] int64, 734 KB) into pinned
memory, against reducing them per slot on the device first (two scatter_reduce kernels) and copying [4, 96]. GPU
time by CUDA events over 500 steps each, twice; checks that the device reduction gives `launch_bounds`' bounds.

    PYTHONPATH=. python3 scripts/bench_reader_stamps.py
"""

import sys

import torch

if not torch.cuda.is_available():
    sys.exit("bench_reader_stamps.py: needs a CUDA GPU")
from roseinfer.fused_allreduce import ReaderStamps
from roseinfer.kernels.norm_gemv import pick_norm_config

cols = [3200, 2400] * 47 + [3200, 50304]  # gpt2-xl at TP=2: c_fc's shard, c_attn's shard, the lm_head
programs = [-(-n // pick_norm_config(n, 1600, fused_rows=True).block_n) for n in cols]
stamps = ReaderStamps(programs, "cuda")
stamps.stamp_rows.copy_(torch.randint(1, 1 << 40, stamps.stamp_rows.shape, device="cuda").sort(dim=0).values)
print("programs", sum(programs), "bytes", stamps.stamp_rows.numel() * 8)
host = torch.empty(stamps.stamp_rows.shape, dtype=torch.int64, pin_memory=True)
slot = torch.repeat_interleave(
    torch.arange(len(programs), device="cuda"), torch.tensor(programs, device="cuda")
)
small = torch.empty(4, len(programs), dtype=torch.int64, device="cuda")
small_host = torch.empty(4, len(programs), dtype=torch.int64, pin_memory=True)


def full():
    host.copy_(stamps.stamp_rows, non_blocking=True)


def reduced():
    small[:3].fill_(1 << 62)
    small[:3].scatter_reduce_(1, slot.expand(3, -1), stamps.stamp_rows[:3], "amin", include_self=True)
    small[3].zero_()
    small[3].scatter_reduce_(0, slot, stamps.stamp_rows[3], "amax", include_self=True)
    small_host.copy_(small, non_blocking=True)


for name, fn in (
    ("full copy", full),
    ("reduce, then copy", reduced),
    ("full copy", full),
    ("reduce, then copy", reduced),
):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(500):
        fn()
    b.record()
    torch.cuda.synchronize()
    print(f"{name}: {a.elapsed_time(b) / 500 * 1000:.1f} us a step (GPU)")
reduced()
torch.cuda.synchronize()
ref = stamps.launch_bounds(stamps.stamp_rows.cpu().numpy())
print("reduced equals launch_bounds:", (small_host.numpy().T == ref).all())
