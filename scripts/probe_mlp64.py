"""Issue 50's probe: GPT-2 small's MLP at 64 rows as one CUDA kernel (scripts/probe_mlp64.cu) against what the engine
runs there (cuBLAS: c_fc with cuBLASLt's GELU epilogue, then mlp_proj with its split-K reduce), on one GPU:
- the kernel against a float32 reference at 64, 40, 33 and 1 rows, its output one copy and a split sum of 4;
- a chain of 12 MLPs (fresh random weights a layer, 113 MB: past L2) captured in one CUDA graph, replayed in
  interleaved rounds: median us per MLP for cuBLAS, the kernel plainly launched, under PDL, and under PDL with a
  split sum of 4;
- the kernel's phases from %globaltimer stamps (median over blocks, us).

python scripts/probe_mlp64.py [--rounds 5] [--replays 100] [--json OUT]
Outside the engine on purpose: it measures whether one kernel for a layer's two MLP linears beats two cuBLAS
launches at 64 rows before anything is built around it (docs/BENCHMARKS.md, session 43).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

LAYERS, C, H, M = 12, 768, 3072, 64
PHASES = [
    "start -> past the wait",
    "-> c_fc done",
    "-> g stored",
    "-> cluster met",
    "-> g pulled (v1); mma done (v2-v5)",
    "-> mlp_proj added",
]


def build():
    from torch.utils.cpp_extension import load

    src = Path(__file__).with_name("probe_mlp64.cu")
    t0 = time.perf_counter()
    flags = ["-O3", "--use_fast_math", "-gencode=arch=compute_90a,code=sm_90a", "--expt-relaxed-constexpr"]
    mod = load(name="probe_mlp64", sources=[str(src)], extra_cuda_cflags=flags, verbose=False)
    print(
        f"built in {time.perf_counter() - t0:.1f} s; shared memory a block: v1 {mod.shared_bytes(1)} B, "
        f"v2-v4 {mod.shared_bytes(2)} B",
        flush=True,
    )
    return mod


def weights(seed: int):
    g = torch.Generator(device="cuda").manual_seed(seed)

    def rnd(*shape, scale):
        return (torch.randn(*shape, generator=g, device="cuda") * scale).half()

    return rnd(H, C, scale=0.02), rnd(H, scale=0.02), rnd(C, H, scale=0.02), rnd(C, scale=0.02)


def reference(x, w_fc, b_fc, w_proj, b_proj):
    g = F.gelu(x.float() @ w_fc.float().t() + b_fc.float(), approximate="tanh").half()  # stored as fp16
    return g.float() @ w_proj.float().t() + b_proj.float()


def check(mod) -> list[dict]:
    out = []
    w = weights(1)
    for version, rows in [(v, r) for v in (1, 2, 3, 4, 5) for r in (64, 40, 33, 1)]:
        x = torch.randn(rows, C, device="cuda").half()
        ref = reference(x, *w)
        for split in (16,) if version == 5 else (1, 4):
            o = torch.zeros(split, M, C, device="cuda")
            mod.mlp64(
                x,
                *w,
                o,
                torch.empty(0, device="cuda"),
                torch.empty(0, dtype=torch.int64, device="cuda"),
                False,
                version,
            )
            torch.cuda.synchronize()
            got = o.sum(0)[:rows]
            err = (got - ref).abs().max().item()
            tail = o.sum(0)[rows:].abs().max().item() if rows < M else 0.0
            cublas = F.linear(torch._addmm_activation(w[1], x, w[0].t(), use_gelu=True), w[2], w[3]).float()
            cerr = (cublas - ref).abs().max().item()
            ok = err <= max(4 * cerr, 2e-3) and tail == 0.0
            out.append(
                {
                    "rows": rows,
                    "split": split,
                    "max_err": err,
                    "cublas_err": cerr,
                    "rows_past": tail,
                    "ok": ok,
                }
            )
            print(
                f"v{version} rows {rows:2d} split {split}: max |err| {err:.2e} (cuBLAS {cerr:.2e}), past rows {tail} "
                f"{'ok' if ok else 'WRONG'}",
                flush=True,
            )
    return out


def chain(mod, variant: str, x, layers, stamps=None):
    """A callable that runs the 12 MLPs once in `variant`'s way (for capture)."""
    no_stamps = torch.empty(0, dtype=torch.int64, device="cuda")
    split = 16 if variant.endswith("split16") else 4 if variant.endswith("split4") else 1
    version = int(variant[1]) if variant.startswith("v") else 1
    outs = [torch.zeros(split, M, C, device="cuda") for _ in layers]
    # v5 stores (overwrites) its partials: no buffer to clear for the next launch
    clears = [torch.empty(0, device="cuda")] * len(layers) if version == 5 else outs[1:] + outs[:1]

    def run():
        if variant == "cublas":
            for w_fc, b_fc, w_proj, b_proj in layers:
                F.linear(torch._addmm_activation(b_fc, x, w_fc.t(), use_gelu=True), w_proj, b_proj)
            return
        for i, w in enumerate(layers):
            st = stamps[i] if stamps is not None else no_stamps
            mod.mlp64(x, *w, outs[i], clears[i], st, "pdl" in variant, version)

    return run


def capture(fn):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()  # warm (cuBLAS picks its kernels, workspace)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g


def time_graph(g, replays: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    g.replay()
    torch.cuda.synchronize()
    start.record()
    for _ in range(replays):
        g.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1000 / replays / LAYERS  # us a layer


def phases(mod, variant, x, layers) -> dict:
    """One stamped chain: each stamp's time after the grid's first block passed the wait (median and last block)."""
    stamps = [torch.zeros(mod.NSTAMP * 128, dtype=torch.int64, device="cuda") for _ in layers]
    run = chain(mod, variant, x, layers, stamps)  # kept alive while the graph replays: it holds the buffers
    g = capture(run)
    for _ in range(20):
        g.replay()
    torch.cuda.synchronize()
    per = []
    for st in stamps[1:]:  # layer 0 waits for the graph's start, not an MLP
        t = st.view(mod.NSTAMP, 128).double()
        t = (t - t[1].min()) / 1000  # us after the first block's wait
        per.append([(t[k].median().item(), t[k].max().item()) for k in range(mod.NSTAMP)])
    names = ["start", *(p.split("-> ")[-1] for p in PHASES)]
    out = {}
    print(
        f"{variant}: each stamp after the grid's first wait, us (median block / last block; median of layers)"
    )
    for k, name in enumerate(names):
        med = statistics.median(p[k][0] for p in per)
        last = statistics.median(p[k][1] for p in per)
        out[name] = [med, last]
        print(f"  {name:18s} {med:7.2f} {last:7.2f}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--replays", type=int, default=100)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("probe_mlp64: needs a CUDA GPU", file=sys.stderr)
        return 2
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    mod = build()
    result = {"device": torch.cuda.get_device_name(), "checks": check(mod)}
    x = torch.randn(M, C, device="cuda").half()
    layers = [weights(100 + i) for i in range(LAYERS)]
    variants = ["cublas", "v1_pdl", "v2_pdl", "v3_pdl", "v5_pdl_split16"]
    runs = {v: chain(mod, v, x, layers) for v in variants}  # kept: a graph does not hold its buffers alive
    graphs = {v: capture(runs[v]) for v in variants}
    times = {v: [] for v in variants}
    for r in range(args.rounds):
        for v in variants[r % len(variants) :] + variants[: r % len(variants)]:
            times[v].append(time_graph(graphs[v], args.replays))
    print("us a layer (12 MLPs a replay, median of rounds):")
    for v in variants:
        print(
            f"  {v:11s} {statistics.median(times[v]):7.2f}   rounds {' '.join(f'{t:.2f}' for t in times[v])}"
        )
    result["us_per_layer"] = {v: times[v] for v in variants}
    result["phases_us"] = {v: phases(mod, v, x, layers) for v in ("v3_pdl", "v5_pdl_split16")}
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0 if all(c["ok"] for c in result["checks"]) else 1


if __name__ == "__main__":
    sys.exit(main())
