"""The one-row fused MLP (roseinfer/cuda_ext/fused_mlp.cu, split over K) against the Triton path, side by side in
one process, on one GPU (issue 50):
- the first build's time (stderr), and the kernel against the torch reference;
- a chain of 12 MLPs (GPT-2 small's layers, random weights) captured in one CUDA graph under PDL with early
  release, as the engine's step runs them: Triton (norm GEMV + GEMV), the CUDA kernel with stamps off, with
  stamps on (and --bare: a build without the stamp code); replayed in interleaved rounds, median µs per MLP;
- %globaltimer's tick as seen in the stamps, and each phase's median time from the stamps;
- --fixture PATH: one launch's stamps as JSON (tests/data/fused_mlp.stamps.json comes from here);
- --persistent: also the same chain as one persistent launch (roseinfer/cuda_ext/persistent_mlp.cu, a measurement:
  one block an SM, each layer's weights copied into shared memory two layers ahead, a counter in global memory
  between layers), checked against the CUDA chain, timed beside it, and its phases from its stamps.

Every variant's graph zeroes two buffers of the same sizes first (the persistent launch's outputs and counters, which
must be zero on entry), so that the per-MLP times compare like for like.

python scripts/bench_cuda_mlp.py [--rounds 7] [--replays 200] [--json OUT] [--fixture PATH] [--bare] [--persistent]
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


class Persistent:
    """The chain as one persistent launch (persistent_mlp.cu): its layer table, outputs and counters."""

    def __init__(self, module, bs, x, a, stamps: bool = False) -> None:
        self.module, self.x, self.a = module, x, a
        ptrs = [
            [t.data_ptr() for t in (b.ln_2.weight, b.ln_2.bias, b.c_fc.weight, b.c_fc.bias, fm.transposed_proj(b),
                                    b.mlp_proj.bias)]
            for b in bs
        ]  # fmt: skip
        self.layers = torch.tensor(ptrs, dtype=torch.int64, device=x.device)  # [L, 6]
        self.eps = bs[0].ln_2.eps
        self.s = torch.empty(LAYERS, 768, dtype=x.dtype, device=x.device)  # [L, C]
        self.outs = torch.zeros(LAYERS, 768, dtype=torch.float32, device=x.device)  # [L, C]
        self.done = torch.zeros(LAYERS, dtype=torch.int32, device=x.device)  # [L]
        n = module.NSTAMP * module.BLOCKS if stamps else 0
        self.stamp_rows = torch.zeros(LAYERS, n, dtype=torch.int64, device=x.device)  # [L, NSTAMP * BLOCKS]

    def __call__(self):
        self.outs.zero_()
        self.done.zero_()
        self.module.persistent_mlp(self.x, self.a, self.layers, self.eps, self.s, self.outs, self.done,
                                   self.stamp_rows.view(-1))  # fmt: skip
        return self.s[-1:], self.outs[-1:]

    def stamps(self):
        """[L, BLOCKS, NSTAMP] on the host"""
        return self.stamp_rows.view(LAYERS, self.module.NSTAMP, self.module.BLOCKS).transpose(1, 2).cpu()


def stamped_phases(graph, layer_stamps) -> tuple[dict[str, list[int]], set[int]]:
    """20 replays of a stamped chain's graph: each phase's durations over the layers' launches (ns, fm.PHASES), and
    the steps between distinct stamps seen. layer_stamps(): the last replay's stamps [L, blocks, NSTAMP], host."""
    per_phase = {k: [] for k, _ in fm.PHASES}
    ticks = set()
    for _ in range(20):
        graph.replay()
        torch.cuda.synchronize()
        for st in layer_stamps():
            for phase, _region, s, e in fm.phase_ranges(st):
                per_phase[phase].append(e - s)
            vals = sorted(set(st.flatten().tolist()))
            ticks.update(v2 - v1 for v1, v2 in zip(vals, vals[1:]))
    return per_phase, ticks


def agrees(what: str, out, chain_out, chain_err) -> bool:
    """Whether `out` (residual, last output) matches the CUDA chain's as closely as that chain matches Triton's
    (the same math in another order: up to 4x its max |diff|, or 1% of the values' size), printing both."""
    torch.cuda.synchronize()
    ok = True
    for name, got, want, ref_err in zip(("residual", "last output"), out, chain_out, reversed(chain_err)):
        diff = (got.float() - want.float()).abs().max().item()
        size = want.float().abs().max().item()
        ok &= diff <= max(4 * ref_err, 0.01 * size)
        print(f"{what} against the CUDA chain: {name} max |diff| {diff:.2e} (values up to {size:.2e})")
    if not ok:
        print(f"{what}: does not match the CUDA chain", file=sys.stderr)
    return ok


ZEROS: list = []  # every variant's graph zeroes these first ([L, C] float32 and [L] int32, as the persistent one)


def capture(bs, x, a, fused: bool, module=None, persistent=None):
    def run():
        if persistent is not None:
            return persistent()  # zeroes its own outputs and counters: the same two memsets
        for t in ZEROS:
            t.zero_()
        return chain(bs, x, a, fused, module)

    with small_batch_gemv(1, norm_prologue=True), pdl_scope(True, early_release=True):
        run()  # warm-up: Triton compiles
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = run()
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
    p.add_argument("--persistent", action="store_true", help="also time the chain as one persistent launch")
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
    persistent = {}
    if args.persistent:
        from roseinfer import cuda_ext

        ZEROS[:] = [
            torch.zeros(LAYERS, 768, device=x.device),
            torch.zeros(LAYERS, dtype=torch.int32, device=x.device),
        ]

        pm = cuda_ext.load("persistent_mlp", (), fm.MIN_ARCH)
        if pm is None:
            print(cuda_ext.why_not_built("persistent_mlp"), file=sys.stderr)
            return 1
        persistent = {
            "persistent": Persistent(pm, bs, x, a),
            "persistent+stamps": Persistent(pm, bs, x, a, True),
        }
        if not agrees("persistent", persistent["persistent"](), got, (err, err_x)):
            return 1

    # "cuda, no stamp code": a build whose stamp() compiles to nothing, to price the branch of stamps off
    bare = fm.load(defines=(fm.NO_STAMPS_DEFINE,)) if args.bare else None
    plan = [("triton", False, False, None), ("cuda", True, False, None), ("cuda+stamps", True, True, None)]
    if bare is not None:
        plan.append(("cuda, no stamp code", True, False, bare))
    variants = {}
    for name, fused, stamps, module in plan:
        scratch = fm.MlpScratch(LAYERS, x.device, stamps=stamps)
        use(scratch)
        variants[name] = (*capture(bs, x, a, fused, module), scratch)
    for name, launch in persistent.items():
        variants[name] = (*capture(bs, x, a, False, persistent=launch), launch)
    times = {name: [] for name in variants}
    for _ in range(args.rounds):
        for name, (graph, _, _) in variants.items():
            times[name].append(time_graph(graph, args.replays) / LAYERS)
    if persistent and not agrees(
        "persistent, after the timed replays", variants["persistent"][1], got, (err, err_x)
    ):
        return 1
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
    if persistent:
        result["persistent_over_cuda"] = result["per_mlp_us"]["persistent"] / result["per_mlp_us"]["cuda"]
        print(f"persistent / cuda {result['persistent_over_cuda']:.3f}")
    print(
        f"cuda / triton {result['cuda_over_triton']:.3f}; stamps on / off {result['stamps_on_over_off']:.3f}"
    )

    # the stamps of the last replays' 12 launches (the chain with stamps on)
    graph, _, scratch = variants["cuda+stamps"]
    per_phase, ticks = stamped_phases(graph, lambda: scratch.stamps.cpu())
    result["globaltimer_min_step_ns"] = min(ticks) if ticks else None
    if persistent:  # the persistent launch's phases, layer by layer, as the kernel's
        graph, _, launch = variants["persistent+stamps"]
        per_phase_p, _ = stamped_phases(graph, launch.stamps)
        result["persistent_phase_median_ns"] = {k: statistics.median(v) for k, v in per_phase_p.items()}
        for k, v in result["persistent_phase_median_ns"].items():
            print(f"  persistent phase {k:17s} {v / 1e3:6.2f} us")
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
