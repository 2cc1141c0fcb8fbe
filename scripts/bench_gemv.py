"""The small-batch GEMV kernel against cuBLAS on the decode linears' shapes, and a sweep of its tile choices.

    python scripts/bench_gemv.py --model gpt2 --rows 1,2,4,8,16 [--sweep] [--linears c_attn,...,lm_head]

For each linear of a GPT-2 block (c_attn, attn_proj, c_fc with GELU, mlp_proj) and each row count: the time of
one call inside a CUDA graph of back-to-back calls (what a captured decode step pays, launch gaps included), on
as many copies of the weights as exceed the L2 cache twice (as in a decode step, where the 12 layers' weights
do not stay in L2), median of 20 replays. "with PDL": the same graph with programmatic dependent launches (each
call's weight loads issued while the call before still runs; roseinfer/kernels/pdl.py). cuBLAS is torch's F.linear (and `_addmm_activation` for c_fc: the
engine's GELU epilogue). GB/s counts the weight bytes (x and the output are KBs); % is against the measured
device-to-device copy bandwidth. --sweep also times every tile in the grid below and prints the best;
--sweep-pdl the one-shot tiles (output columns per program, warps) at one row under PDL, the engine's batch-1 path.
"""

import argparse
import itertools
import statistics

import torch
import torch.nn.functional as F

from roseinfer.bench.roofline import copy_bandwidth
from roseinfer.bench.timing import captured
from roseinfer.config import BUILTIN_MODELS
from roseinfer.kernels.gemv import GemvConfig, gemv_triton, pick_config, triton_next_pow2
from roseinfer.kernels.pdl import pdl_supported

L2_BYTES = 50 * 2**20


def shapes(model: str) -> list[tuple[str, int, int, bool]]:
    """The block's four linears, and the lm_head (the vocabulary padded to 64 rows, as `GPT2.pad_lm_head`)."""
    cfg = BUILTIN_MODELS[model]
    c = cfg.n_embd
    return [("c_attn", 3 * c, c, False), ("attn_proj", c, c, False), ("c_fc+gelu", 4 * c, c, True),
            ("mlp_proj", c, 4 * c, False), ("lm_head", -(-cfg.vocab_size // 64) * 64, c, False)]  # fmt: skip


def graph_time_us(fn, copies: int, reps: int = 20) -> float:
    """Median time of one call, from a graph of `copies` back-to-back calls (fn(i) uses weight copy i)."""
    g, _ = captured(lambda: [fn(i) for i in range(copies)])
    g.replay()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        g.replay()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) * 1e3 / copies)
    return statistics.median(times)


def sweep_grid(m: int):
    # kept small: every tile is a compile (~1 s); accumulators up to 64 registers a thread
    bm = triton_next_pow2(m)
    for bn, bk, warps, stages in itertools.product((2, 4, 8, 16), (128, 256, 512), (2, 4), (1, 3)):
        if bm * bn * bk <= 64 * 32 * warps and bn * bk >= 32 * warps * 8 and (bk >= 256 or bm > 1):
            yield GemvConfig(bn, bk, warps, stages)


def one_shot_tiles(k: int, block_ns, warps):
    """The one-shot tiles (one row, BLOCK_K covering K) of these widths and warps that give each thread at least one
    16-byte load of weights and at most 256 weights."""
    block_k = triton_next_pow2(k)
    for bn, w in itertools.product(block_ns, warps):
        if 32 * w * 8 <= bn * block_k <= 32 * w * 256:
            yield GemvConfig(bn, block_k, w, 1, one_shot=True)


def bench_shape(name, n, k, gelu, rows, bw, a):
    dev, dt = torch.device("cuda"), torch.float16
    nbytes = n * k * 2
    copies = max(4, -(-2 * L2_BYTES // nbytes))
    ws = [torch.randn(n, k, device=dev, dtype=dt) * k**-0.5 for _ in range(copies)]  # [N, K] each
    bs = [torch.randn(n, device=dev, dtype=dt) for _ in range(copies)]  # [N] each
    best = []
    for m in rows:
        x = torch.randn(m, k, device=dev, dtype=dt)  # [M, K]

        def cublas(i, x=x):
            if gelu:
                return torch._addmm_activation(bs[i], x, ws[i].t(), use_gelu=True)
            return F.linear(x, ws[i], bs[i])

        def ours(cfg, x=x, pdl=False):
            return lambda i: gemv_triton(x, ws[i], bs[i], gelu, cfg, pdl=pdl)

        t_cublas = graph_time_us(cublas, copies)
        cfg = pick_config(m, n, k)
        t_gemv = graph_time_us(ours(cfg), copies)
        t_pdl = graph_time_us(ours(cfg, pdl=True), copies) if pdl_supported() else float("nan")
        floor = nbytes / bw * 1e6
        print(f"| {name} | {m} | {n} x {k} | {nbytes / 1e6:.2f} | {floor:.2f} | {t_cublas:.2f} | {t_gemv:.2f} "
              f"| {nbytes / t_gemv / 1e3:.0f} | {floor / t_gemv:.0%} | {t_pdl:.2f} | {floor / t_pdl:.0%} | {cfg.block_n}/{cfg.block_k}/{cfg.num_warps}w/{cfg.num_stages}s |")  # fmt: skip
        if a.sweep and not gelu and str(m) in a.sweep_rows.split(","):  # GELU: same tiles, one more compile
            results = []
            for c in sweep_grid(m):
                try:
                    results.append((graph_time_us(ours(c), copies), c))
                except Exception as e:  # a tile Triton cannot build (shared memory): skip it
                    print(f"  skip {c}: {type(e).__name__}")
            results.sort(key=lambda r: r[0])
            best.append((name, m, t_gemv, results[:3]))
        # the one-shot tiles the engine takes at one row under PDL
        if a.sweep_pdl and m == 1 and pdl_supported():
            results = []
            for c in one_shot_tiles(k, (1, 2, 4, 8, 16), (1, 2, 4, 8)):
                try:
                    results.append((graph_time_us(ours(c, pdl=True), copies), c))
                except Exception as e:  # a tile Triton cannot build (registers): skip it
                    print(f"  skip {c}: {type(e).__name__}")
            results.sort(key=lambda r: r[0])
            best.append((f"{name} (one-shot, PDL)", m, t_pdl, results[:3]))
        if a.sweep_pdl and m == 1 and pdl_supported() and name == "lm_head":
            best.append(sweep_norm_lm_head(n, k, ws, copies))
    return best


def sweep_norm_lm_head(n, k, ws, copies):
    """At one row under PDL, the lm_head with ln_f in the GEMV's prologue (`norm_gemv_triton`, as the engine runs
    it) over its one-shot tiles, against ln_f's add + LayerNorm kernel then cuBLAS (the path it replaces)."""
    from roseinfer.kernels.add_layernorm import add_layer_norm_triton
    from roseinfer.kernels.gemv import norm_gemv_triton, pick_norm_config
    from roseinfer.kernels.pdl import pdl_scope

    dev, dt = torch.device("cuda"), torch.float16
    x, d = torch.randn(1, k, device=dev, dtype=dt), torch.randn(1, k, device=dev, dtype=dt)
    ln_w, ln_b = torch.ones(k, device=dev, dtype=dt), torch.zeros(k, device=dev, dtype=dt)
    with pdl_scope(True, early_release=True):
        t_before = graph_time_us(
            lambda i: F.linear(add_layer_norm_triton(x, d, ln_w, ln_b, 1e-5)[1], ws[i]), copies
        )
        picked = pick_norm_config(n, k)
        t_picked = graph_time_us(
            lambda i: norm_gemv_triton(x, d, ln_w, ln_b, 1e-5, ws[i], config=picked), copies
        )
        results = []
        for c in one_shot_tiles(k, (2, 4, 8, 16, 32), (2, 4, 8)):
            t = graph_time_us(
                lambda i, c=c: norm_gemv_triton(x, d, ln_w, ln_b, 1e-5, ws[i], config=c), copies
            )
            results.append((t, c))
    results.sort(key=lambda r: r[0])
    print(f"lm_head with ln_f, one row, PDL: add + LayerNorm kernel then cuBLAS {t_before:.2f} us; norm GEMV "
          f"picked {picked.block_n}/{picked.block_k}/{picked.num_warps}w {t_picked:.2f} us")  # fmt: skip
    return ("lm_head with ln_f (norm GEMV, PDL)", 1, t_picked, results[:3])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="gpt2")
    p.add_argument("--rows", default="1,2,4,8,16")
    p.add_argument("--sweep", action="store_true")
    p.add_argument("--sweep-rows", default="1,8")
    p.add_argument("--linears", default="c_attn,attn_proj,c_fc+gelu,mlp_proj", help="which of " + "c_attn, "
                   "attn_proj, c_fc+gelu, mlp_proj, lm_head to time")  # fmt: skip
    p.add_argument(
        "--sweep-pdl", action="store_true", help="also sweep the one-shot tiles at one row under PDL"
    )
    a = p.parse_args()
    torch.manual_seed(0)
    bw = copy_bandwidth(torch.device("cuda"))
    print(f"{torch.cuda.get_device_name()}: copy bandwidth {bw / 1e9:.0f} GB/s")
    print(
        "| linear | rows | N x K | weights MB | floor us | cuBLAS us | GEMV us | GEMV GB/s | GEMV % of copy bw "
        "| GEMV with PDL us | with PDL % of copy bw | picked |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    best_rows = []
    for name, n, k, gelu in (s for s in shapes(a.model) if s[0] in a.linears.split(",")):
        best_rows += bench_shape(name, n, k, gelu, [int(r) for r in a.rows.split(",")], bw, a)
        torch.cuda.empty_cache()
    if best_rows:
        print("\nsweep: best three tiles (block_n/block_k/warps/stages) against the picked one")
        for name, m, t_pick, top in best_rows:
            tops = ", ".join(
                f"{c.block_n}/{c.block_k}/{c.num_warps}w/{c.num_stages}s {t:.2f} us" for t, c in top
            )
            print(f"{name} rows {m}: picked {t_pick:.2f} us; best {tops}")


if __name__ == "__main__":
    main()
