"""Issue 50's probe: GPT-2 small's MLP at 64 rows as one CUDA kernel (scripts/probe_mlp64.cu, builds v1 to v5)
against what the engine runs there (cuBLAS: c_fc with cuBLASLt's GELU epilogue, then mlp_proj with its split-K
reduce), on one GPU:
- each build against a float32 reference at 64, 40, 33 and 1 rows (its output one copy and a split sum of 4; v5
  one copy a cluster), beside cuBLAS's own error;
- 12 MLPs a replay (fresh random weights a layer, 113 MB: past L2; each reads the same x, hot in L2, and writes its
  own output), one after the other in one CUDA graph, replayed in interleaved rounds: median us a layer for each
  of --variants (`cublas`, or `vN_plain` / `vN_pdl`, `_split4`: a split sum of 4 copies, `_split16`: v5's copy a
  cluster);
- the phases of each of --stamped from %globaltimer stamps (us after the grid's first block passed its wait,
  median and last block).

python scripts/probe_mlp64.py [--variants ...] [--stamped ...] [--rounds 5] [--replays 100] [--json OUT]
python scripts/probe_mlp64.py --calls-only 3,5   # one launch of each build, no timing: for Nsight Compute, e.g.
    ncu --kernel-name regex:mlp64 --launch-count 2 --set full --clock-control none --page details \\
        python3 scripts/probe_mlp64.py --calls-only 3,5
Outside the engine on purpose: it measures whether one kernel for a layer's two MLP linears beats two cuBLAS
launches at 64 rows before anything is built around it (docs/BENCHMARKS.md, session 43).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from probe_build import build_on_gpu

from roseinfer.bench.timing import captured, replays_us

LAYERS, C, H, M = 12, 768, 3072, 64
PHASES = [
    "start -> past the wait",
    "-> c_fc done",
    "-> g stored",
    "-> cluster met",
    "-> g pulled (v1); mma done (v2-v5)",
    "-> mlp_proj added",
]


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


def phases(mod, variant, x, layers) -> dict:
    """One stamped chain: each stamp's time after the grid's first block passed the wait (median and last block)."""
    stamps = [torch.zeros(mod.NSTAMP * 128, dtype=torch.int64, device="cuda") for _ in layers]
    run = chain(mod, variant, x, layers, stamps)  # kept alive while the graph replays: it holds the buffers
    g = captured(run)[0]
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


VARIANTS = [
    "cublas", "v1_plain", "v1_pdl", "v1_pdl_split4", "v2_plain", "v2_pdl", "v2_pdl_split4", "v3_pdl",
    "v3_pdl_split4", "v4_pdl", "v5_pdl_split16",
]  # fmt: skip


def calls_only(mod, versions: list[int]) -> int:
    """One plain launch of each build at 64 rows (for Nsight Compute, which replays each alone)."""
    w = weights(1)
    x = torch.randn(M, C, device="cuda").half()
    for v in versions:
        out = torch.zeros(16 if v == 5 else 1, M, C, device="cuda")
        mod.mlp64(x, *w, out, torch.empty(0, device="cuda"), torch.empty(0, dtype=torch.int64, device="cuda"),
                  False, v)  # fmt: skip
    torch.cuda.synchronize()
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--replays", type=int, default=100)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--stamped", default="v1_pdl,v3_pdl,v5_pdl_split16")
    ap.add_argument("--calls-only", help="builds (e.g. 3,5): one launch each at 64 rows, nothing timed")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    built = build_on_gpu(
        "probe_mlp64",
        ("-O3", "--use_fast_math", "-gencode=arch=compute_90a,code=sm_90a", "--expt-relaxed-constexpr"),
    )
    if built is None:
        return 2
    mod, seconds = built
    print(
        f"built in {seconds:.1f} s; shared memory a block: v1 {mod.shared_bytes(1)} B, "
        f"v2-v4 {mod.shared_bytes(2)} B",
        flush=True,
    )
    if args.calls_only:
        return calls_only(mod, [int(v) for v in args.calls_only.split(",")])
    result = {"device": torch.cuda.get_device_name(), "checks": check(mod)}
    x = torch.randn(M, C, device="cuda").half()
    layers = [weights(100 + i) for i in range(LAYERS)]
    variants = args.variants.split(",")
    runs = {v: chain(mod, v, x, layers) for v in variants}  # kept: a graph does not hold its buffers alive
    graphs = {v: captured(runs[v])[0] for v in variants}
    times = {v: [] for v in variants}
    for r in range(args.rounds):
        for v in variants[r % len(variants) :] + variants[: r % len(variants)]:
            times[v].append(replays_us(graphs[v], args.replays) / LAYERS)
    print("us a layer (12 MLPs a replay, median of rounds):")
    for v in variants:
        print(
            f"  {v:11s} {statistics.median(times[v]):7.2f}   rounds {' '.join(f'{t:.2f}' for t in times[v])}"
        )
    result["us_per_layer"] = {v: times[v] for v in variants}
    result["phases_us"] = {v: phases(mod, v, x, layers) for v in args.stamped.split(",") if v}
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0 if all(c["ok"] for c in result["checks"]) else 1


if __name__ == "__main__":
    sys.exit(main())
