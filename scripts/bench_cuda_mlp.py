"""The one-row fused MLP (roseinfer/cuda_ext/fused_mlp.cu, split over K) against the Triton path, side by side in
one process, on one GPU (issue 50):
- the first build's time (stderr), and the kernel against the torch reference;
- a chain of 12 MLPs (GPT-2 small's layers, random weights) captured in one CUDA graph under PDL with early
  release, as the engine's step runs them: Triton (norm GEMV + GEMV), the CUDA kernel with stamps off, with
  stamps on, with its output one row instead of a split sum of 8 (roseinfer/kernels/split_sum.py), and (--bare) a
  build without the stamp code; replayed in interleaved rounds, median µs per MLP;
- %globaltimer's tick as seen in the stamps, and each phase's median time from the stamps;
- --fixture PATH: one launch's stamps as JSON (tests/data/fused_mlp.stamps.json comes from here).

python scripts/bench_cuda_mlp.py [--rounds 7] [--replays 200] [--json OUT] [--fixture PATH] [--bare]
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import sys
import time

import torch

from roseinfer.config import ModelConfig
from roseinfer.cuda_ext import fused_mlp as fm
from roseinfer.kernels.pdl import pdl_scope
from roseinfer.linears import linear, norm_linear, small_batch_gemv
from roseinfer.model import Block

LAYERS = 12


def blocks(dtype):
    torch.manual_seed(0)
    cfg = ModelConfig(n_layer=LAYERS, n_head=12, n_embd=768, vocab_size=100, n_positions=16)
    out = []
    for _ in range(LAYERS):
        b = Block(cfg)
        with torch.no_grad():
            for p in b.parameters():
                p.copy_(torch.randn_like(p) * 0.05)
            b.ln_2.weight.add_(1.0)
        out.append(b.to("cuda", dtype))
    return out


def chain(bs, x, a, fused: bool, module=None):
    """The MLPs of 12 layers back to back (each one's output the next one's delta), as the step would run them:
    the Triton path (norm GEMV, GEMV) or the CUDA kernel (`module`: a build of it; None: the default build), whose
    float32 outputs go through the layers' buffers (`b.scratch`)."""
    for layer, b in enumerate(bs):
        if fused:
            x, a = fm.block_mlp(x, a, b, layer, b.scratch, pdl=True, module=module)
        else:
            x, g = norm_linear(x, a, b.ln_2, b.c_fc, gelu=True)
            a = linear(g, b.mlp_proj)
    return x, a


def capture(bs, x, a, fused: bool, module=None):
    with small_batch_gemv(1, norm_prologue=True), pdl_scope(True, early_release=True):
        chain(bs, x, a, fused, module)  # warm-up: Triton compiles
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = chain(bs, x, a, fused, module)
    return graph, out


def time_graph(graph, replays: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(400_000)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / replays  # µs per replay


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--replays", type=int, default=200)
    p.add_argument("--json", default=None)
    p.add_argument("--fixture", default=None)
    p.add_argument("--bare", action="store_true", help="also time a build without the stamp code")
    args = p.parse_args(argv)
    dtype = torch.float16
    t0 = time.perf_counter()
    module = fm.load()  # the default build: its time on stderr
    if module is None:
        from roseinfer import cuda_ext

        print(cuda_ext.why_not_built(fm.NAME), file=sys.stderr)
        return 1
    print(f"load: {time.perf_counter() - t0:.1f} s")
    bs = blocks(dtype)
    x = torch.randn(1, 768, device="cuda", dtype=dtype)
    a = torch.randn(1, 768, device="cuda", dtype=dtype) * 0.5

    def use(scratch):
        for b in bs:
            b.scratch = scratch

    use(fm.MlpScratch(LAYERS, x.device))
    ref = chain(bs, x, a, False)
    got = chain(bs, x, a, True)
    err = (got[1].float() - ref[1].float()).abs().max().item()
    err_x = (got[0].float() - ref[0].float()).abs().max().item()
    print(f"12-layer chain, CUDA against Triton: max |diff| last output {err:.2e}, residual {err_x:.2e}")

    # "cuda, no stamp code": a build whose stamp() compiles to nothing, to price the branch of stamps off
    bare = fm.load(defines=(fm.NO_STAMPS_DEFINE,)) if args.bare else None
    rows = fm.SPLIT_ROWS
    plan = [
        ("triton", False, False, None, rows),
        ("cuda", True, False, None, rows),
        ("cuda+stamps", True, True, None, rows),
        ("cuda, one row", True, False, None, 1),  # each output one row: 128 atomic adds an address
    ]
    if bare is not None:
        plan.append(("cuda, no stamp code", True, False, bare, rows))
    variants = {}
    for name, fused, stamps, module, split_rows in plan:
        scratch = fm.MlpScratch(LAYERS, x.device, stamps=stamps, split_rows=split_rows)
        use(scratch)
        variants[name] = (*capture(bs, x, a, fused, module), scratch)
    times = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, (graph, _, _) in variants.items():
            times[name].append(time_graph(graph, args.replays) / LAYERS)
    weight_bytes = 2 * 768 * 3072 * 2 + (3072 + 768) * 2
    result = {
        "device": torch.cuda.get_device_name(),
        "date": datetime.date.today().isoformat(),
        "per_mlp_us": {},
    }
    for name, ts in times.items():
        med = statistics.median(ts)
        result["per_mlp_us"][name] = med
        print(f"{name:20s} {med:6.2f} us per MLP (rounds {min(ts):.2f}..{max(ts):.2f}), "
              f"{weight_bytes / med / 1e3:,.0f} GB/s of weights")  # fmt: skip
    result["cuda_over_triton"] = result["per_mlp_us"]["cuda"] / result["per_mlp_us"]["triton"]
    result["stamps_on_over_off"] = result["per_mlp_us"]["cuda+stamps"] / result["per_mlp_us"]["cuda"]
    result["split_over_one_row"] = result["per_mlp_us"]["cuda"] / result["per_mlp_us"]["cuda, one row"]
    print(
        f"cuda / triton {result['cuda_over_triton']:.3f}; stamps on / off {result['stamps_on_over_off']:.3f}; "
        f"split sum / one row {result['split_over_one_row']:.3f}"
    )

    # the stamps of the last replays' 12 launches (the chain with stamps on)
    graph, _, scratch = variants["cuda+stamps"]
    per_phase = {k: [] for k, _ in fm.PHASES}
    ticks = set()
    for _ in range(20):
        graph.replay()
        torch.cuda.synchronize()
        for st in scratch.stamps.cpu():
            for phase, _region, s, e in fm.phase_ranges(st):
                per_phase[phase].append(e - s)
            vals = sorted(set(st.flatten().tolist()))
            ticks.update(v2 - v1 for v1, v2 in zip(vals, vals[1:]))
    result["globaltimer_min_step_ns"] = min(ticks) if ticks else None
    print(f"%globaltimer: smallest step between distinct stamps {result['globaltimer_min_step_ns']} ns")
    result["phase_median_ns"] = {k: statistics.median(v) for k, v in per_phase.items()}
    for k, v in result["phase_median_ns"].items():
        print(f"  phase {k:28s} {v / 1e3:6.2f} us")
    # one plain launch under torch.profiler: CUPTI's duration of the kernel against its stamps' span
    from torch.profiler import ProfilerActivity, profile

    scratch = fm.MlpScratch(2, x.device, stamps=True)
    gaps = []
    for launch in range(10):
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fm.block_mlp(x, a, bs[0], launch % 2, scratch)
            torch.cuda.synchronize()
        k = [e for e in prof.events() if fm.KERNEL in e.name][0]
        kernel_ns = (k.time_range.end - k.time_range.start) * 1000
        ranges = fm.phase_ranges(scratch.stamps[launch % 2].cpu())
        gaps.append((kernel_ns, ranges[-1][3] - ranges[0][2]))
    gaps.sort()
    kernel_ns, span_ns = gaps[len(gaps) // 2]
    result["plain_launch"] = {"kernel_ns": kernel_ns, "stamps_span_ns": span_ns}
    print(f"a plain launch: CUPTI {kernel_ns:.0f} ns, stamps' span {span_ns} ns ({span_ns / kernel_ns:.3f})")
    stamps_of_layer_5 = variants["cuda+stamps"][2].stamps[5].cpu().tolist()
    if args.fixture:
        st = stamps_of_layer_5
        ranges = fm.phase_ranges(st)
        doc = {
            "what": "one fused_mlp launch's %globaltimer stamps [blocks, 6] (split-K kernel), layer 5 of a 12-layer "
            "captured chain",
            "command": "python scripts/bench_cuda_mlp.py --fixture tests/data/fused_mlp.stamps.json",
            "device": result["device"], "date": result["date"], "blocks": len(st),
            "span_ns": ranges[-1][3] - ranges[0][2], "stamps": st,
        }  # fmt: skip
        with open(args.fixture, "w") as f:
            json.dump(doc, f)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
