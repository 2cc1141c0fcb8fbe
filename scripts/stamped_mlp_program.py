"""A program that runs the one-row fused MLP kernel with its region stamps on, under torch.profiler: what
`roseprof torch -- python scripts/stamped_mlp_program.py` captures, with the kernel's regions inside it (issue 50).

It writes its Kineto trace into $ROSEPROF_TORCH_TRACE_DIR (roseprof torch sets it; --trace FILE otherwise) and
each launch's stamps into $ROSEINFER_KERNEL_STAMPS (roseprof sets it to the run folder's kernel_stamps.jsonl;
--stamps FILE otherwise): one synchronised launch at a time, so each launch's stamps are read before the next
overwrites them. With no trace to write (under `roseprof nsys`, which records every launch) it runs no
torch.profiler and stamps its warm-up launches too, so every launch in the trace has its line. --delay-phase/--delay-us plant a spin in one phase (the test build, -DFUSED_KERNEL_STAMP_DELAY):
1 ln_2 (roseinfer.layer.mlp.norm), 2 c_fc (.up), 3 mlp_proj (.down), 4 the split-K sum (.sum).

    roseprof torch --name mlp -- python scripts/stamped_mlp_program.py --launches 40
    roseprof torch --name mlp-slow -- python scripts/stamped_mlp_program.py --launches 40 --delay-phase 2 --delay-us 20
    roseprof diff mlp mlp-slow
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch

from roseinfer import cuda_ext
from roseinfer.config import ModelConfig
from roseinfer.cuda_ext import fused_mlp as fm
from roseinfer.cuda_ext.stamps import StampLog, stamps_path
from roseinfer.model import Block


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--launches", type=int, default=40)
    p.add_argument("--warmup", type=int, default=5, help="launches before the profiler starts (not stamped)")
    p.add_argument("--delay-phase", type=int, default=0, choices=(0, 1, 2, 3, 4))
    p.add_argument("--delay-us", type=float, default=0.0)
    p.add_argument(
        "--trace", help="the Kineto trace to write (default: $ROSEPROF_TORCH_TRACE_DIR/trace.json)"
    )
    p.add_argument("--stamps", help="the stamps file (default: $ROSEINFER_KERNEL_STAMPS)")
    args = p.parse_args()
    trace = args.trace or (
        os.path.join(os.environ["ROSEPROF_TORCH_TRACE_DIR"], "trace.json")
        if os.environ.get("ROSEPROF_TORCH_TRACE_DIR")
        else None
    )
    stamps = Path(args.stamps) if args.stamps else stamps_path()
    if stamps is None:
        print("stamped_mlp_program: give --stamps, or run it under roseprof", file=sys.stderr)
        return 2
    module = fm.load(test_build=True)
    if module is None:
        print(f"stamped_mlp_program: {cuda_ext.why_not_built(fm.NAME)}", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    block = Block(ModelConfig(n_layer=1, n_head=12, n_embd=fm.WIDTH, vocab_size=100, n_positions=16))
    with torch.no_grad():
        for w in block.parameters():
            w.copy_(torch.randn_like(w) * 0.05)
    block = block.to("cuda", torch.float16)
    x = torch.randn(1, fm.WIDTH, device="cuda", dtype=torch.float16)  # [1, C]
    a = torch.randn(1, fm.WIDTH, device="cuda", dtype=torch.float16)  # [1, C]
    scratch = fm.MlpScratch(2, x.device, stamps=True)  # two layers' buffers: launches alternate between them
    delay = (args.delay_phase, int(args.delay_us * 1000))
    launches = 0

    def launch():  # one launch, run to its end: returns its stamps [BLOCKS, NSTAMP]
        nonlocal launches
        layer = launches % 2
        fm.block_mlp(x, a, block, layer, scratch, module=module, delay=delay)
        torch.cuda.synchronize()
        launches += 1
        return scratch.stamps[layer]

    with StampLog(stamps) as log:
        for _ in range(args.warmup):
            stamps = launch()
            if trace is None:  # every launch is in an nsys trace: each needs its line
                fm.record_stamps(log, stamps)
        if trace is None:
            for _ in range(args.launches):
                fm.record_stamps(log, launch())
            return 0
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(args.launches):
                fm.record_stamps(log, launch())
    prof.export_chrome_trace(trace)
    return 0


if __name__ == "__main__":
    sys.exit(main())
