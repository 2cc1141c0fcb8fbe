"""The small-batch GEMV kernel against cuBLAS on the decode linears' shapes, and a sweep of its tile choices.

    python scripts/bench_gemv.py --model gpt2 --rows 1,2,4,8,16 [--sweep] [--linears c_attn,...,lm_head]
    python scripts/bench_gemv.py --skinny --rows 8,16,32,64 [--sweep --sweep-rows 64]

For each linear of a GPT-2 block (c_attn, attn_proj, c_fc with GELU, mlp_proj) and each row count: the time of
one call inside a CUDA graph of back-to-back calls (what a captured decode step pays, launch gaps included), on
as many copies of the weights as exceed the L2 cache twice (as in a decode step, where the 12 layers' weights
do not stay in L2), median of 20 replays. "with PDL": the same graph with programmatic dependent launches (each
call's weight loads issued while the call before still runs; roseinfer/kernels/pdl.py). cuBLAS is torch's F.linear (and `_addmm_activation` for c_fc: the
engine's GELU epilogue). GB/s counts the weight bytes (x and the output are KBs); % is against the measured
device-to-device copy bandwidth. --sweep also times every tile in the grid below and prints the best;
--sweep-pdl the one-shot tiles (output columns per program, warps) at one row under PDL, the engine's batch-1 path.
--skinny times the skinny GEMM (roseinfer/kernels/skinny_gemm.py, tensor cores) instead, plain and under PDL, and
with --sweep its tiles (output columns per program, slice of K, warps) under PDL.
"""

import argparse
import itertools

import torch
import torch.nn.functional as F

from roseinfer.bench.roofline import copy_bandwidth
from roseinfer.bench.timing import graph_copies_us
from roseinfer.config import BUILTIN_MODELS
from roseinfer.kernels.gemv import GemvConfig, gemv_triton, pick_config, triton_next_pow2
from roseinfer.kernels.pdl import pdl_supported
from roseinfer.kernels.skinny_gemm import SkinnyConfig, pick_skinny_config, skinny_gemm_triton

L2_BYTES = 50 * 2**20


def shapes(model: str) -> list[tuple[str, int, int, bool]]:
    """The block's four linears, and the lm_head (the vocabulary padded to 64 rows, as `GPT2.pad_lm_head`)."""
    cfg = BUILTIN_MODELS[model]
    c = cfg.n_embd
    return [("c_attn", 3 * c, c, False), ("attn_proj", c, c, False), ("c_fc+gelu", 4 * c, c, True),
            ("mlp_proj", c, 4 * c, False), ("lm_head", -(-cfg.vocab_size // 64) * 64, c, False)]  # fmt: skip


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


def weight_copies(n: int, k: int):
    """(bytes of one weight, copies, weights [N, K] each, biases [N] each): as many fp16 copies as exceed the L2
    cache twice, so that each call reads its weights from HBM as in a decode step."""
    nbytes = n * k * 2
    copies = max(4, -(-2 * L2_BYTES // nbytes))
    ws = [torch.randn(n, k, device="cuda", dtype=torch.float16) * k**-0.5 for _ in range(copies)]
    bs = [torch.randn(n, device="cuda", dtype=torch.float16) for _ in range(copies)]
    return nbytes, copies, ws, bs


def cublas_linear(x, ws, bs, gelu: bool):
    """The engine's cuBLAS call on weight copy i: F.linear, or for c_fc the GEMM with cuBLASLt's GELU epilogue."""

    def call(i):
        if gelu:
            return torch._addmm_activation(bs[i], x, ws[i].t(), use_gelu=True)
        return F.linear(x, ws[i], bs[i])

    return call


def time_three_ways(kernel, cfg, x, ws, bs, gelu, copies) -> tuple[float, float, float]:
    """(cuBLAS, `kernel` with tile `cfg`, the same as dependent launches) µs a call on x, in graphs of `copies`
    back-to-back calls (NaN with PDL where it is not supported)."""
    t_cublas = graph_copies_us(cublas_linear(x, ws, bs, gelu), copies)
    t_plain = graph_copies_us(lambda i: kernel(x, ws[i], bs[i], gelu, cfg, pdl=False), copies)
    t_pdl = float("nan")
    if pdl_supported():
        t_pdl = graph_copies_us(lambda i: kernel(x, ws[i], bs[i], gelu, cfg, pdl=True), copies)
    return t_cublas, t_plain, t_pdl


def sweep_tiles(call, tiles, copies) -> list:
    """[(µs, tile)] fastest first, of `call(tile)` (a function of the weight copy) over `tiles`."""
    results = []
    for c in tiles:
        try:
            results.append((graph_copies_us(call(c), copies), c))
        except Exception as e:  # a tile Triton cannot build (shared memory, registers): skip it
            print(f"  skip {c}: {type(e).__name__}")
    return sorted(results, key=lambda r: r[0])


def bench_shape(name, n, k, gelu, rows, bw, a):
    nbytes, copies, ws, bs = weight_copies(n, k)
    best = []
    for m in rows:
        x = torch.randn(m, k, device="cuda", dtype=torch.float16)  # [M, K]

        def ours(cfg, x=x, pdl=False):
            return lambda i: gemv_triton(x, ws[i], bs[i], gelu, cfg, pdl=pdl)

        cfg = pick_config(m, n, k)
        t_cublas, t_gemv, t_pdl = time_three_ways(gemv_triton, cfg, x, ws, bs, gelu, copies)
        floor = nbytes / bw * 1e6
        print(f"| {name} | {m} | {n} x {k} | {nbytes / 1e6:.2f} | {floor:.2f} | {t_cublas:.2f} | {t_gemv:.2f} "
              f"| {nbytes / t_gemv / 1e3:.0f} | {floor / t_gemv:.0%} | {t_pdl:.2f} | {floor / t_pdl:.0%} | {cfg.block_n}/{cfg.block_k}/{cfg.num_warps}w/{cfg.num_stages}s |")  # fmt: skip
        if a.sweep and not gelu and str(m) in a.sweep_rows.split(","):  # GELU: same tiles, one more compile
            best.append((name, m, t_gemv, sweep_tiles(ours, sweep_grid(m), copies)[:3]))
        # the one-shot tiles the engine takes at one row under PDL
        if a.sweep_pdl and m == 1 and pdl_supported():
            tiles = one_shot_tiles(k, (1, 2, 4, 8, 16), (1, 2, 4, 8))
            results = sweep_tiles(lambda c: ours(c, pdl=True), tiles, copies)
            best.append((f"{name} (one-shot, PDL)", m, t_pdl, results[:3]))
        if a.sweep_pdl and m == 1 and pdl_supported() and name == "lm_head":
            best.append(sweep_norm_lm_head(n, k, ws, copies))
    return best


def sweep_norm_lm_head(n, k, ws, copies):
    """At one row under PDL, the lm_head with ln_f in the GEMV's prologue (`norm_gemv_triton`, as the engine runs
    it) over its one-shot tiles, against ln_f's add + LayerNorm kernel then cuBLAS (the path it replaces)."""
    from roseinfer.kernels.add_layernorm import add_layer_norm_triton
    from roseinfer.kernels.norm_gemv import norm_gemv_triton, pick_norm_config
    from roseinfer.kernels.pdl import pdl_scope

    dev, dt = torch.device("cuda"), torch.float16
    x, d = torch.randn(1, k, device=dev, dtype=dt), torch.randn(1, k, device=dev, dtype=dt)
    ln_w, ln_b = torch.ones(k, device=dev, dtype=dt), torch.zeros(k, device=dev, dtype=dt)
    with pdl_scope(True, early_release=True):
        t_before = graph_copies_us(
            lambda i: F.linear(add_layer_norm_triton(x, d, ln_w, ln_b, 1e-5)[1], ws[i]), copies
        )
        picked = pick_norm_config(n, k)
        t_picked = graph_copies_us(
            lambda i: norm_gemv_triton(x, d, ln_w, ln_b, 1e-5, ws[i], config=picked), copies
        )
        results = []
        for c in one_shot_tiles(k, (2, 4, 8, 16, 32), (2, 4, 8)):
            t = graph_copies_us(
                lambda i, c=c: norm_gemv_triton(x, d, ln_w, ln_b, 1e-5, ws[i], config=c), copies
            )
            results.append((t, c))
    results.sort(key=lambda r: r[0])
    print(f"lm_head with ln_f, one row, PDL: add + LayerNorm kernel then cuBLAS {t_before:.2f} us; norm GEMV "
          f"picked {picked.block_n}/{picked.block_k}/{picked.num_warps}w {t_picked:.2f} us")  # fmt: skip
    return ("lm_head with ln_f (norm GEMV, PDL)", 1, t_picked, results[:3])


def skinny_tiles(m: int, n: int, k: int):
    """The skinny GEMM's tiles for the sweep: column tiles of 16 to 128, slices of K that divide it, 4 or 8
    warps, from 36 to 1,200 programs."""
    for bn, sk, warps in itertools.product((16, 32, 64, 128), (64, 128, 256, 512), (4, 8)):
        programs = -(-n // bn) * (k // sk)
        if k % sk == 0 and 36 <= programs <= 1200 and (warps == 4 or bn * sk >= 64 * 256):
            yield SkinnyConfig(bn, sk, warps)


def bench_skinny_shape(name, n, k, gelu, rows, bw, a):
    """The skinny GEMM against cuBLAS at `rows`, plain and under PDL; with --sweep, its tiles at --sweep-rows."""
    nbytes, copies, ws, bs = weight_copies(n, k)
    for m in rows:
        x = torch.randn(m, k, device="cuda", dtype=torch.float16)  # [M, K]
        cfg = pick_skinny_config(m, n, k)
        t_cublas, t_plain, t_pdl = time_three_ways(skinny_gemm_triton, cfg, x, ws, bs, gelu, copies)
        floor = nbytes / bw * 1e6
        print(f"| {name} | {m} | {n} x {k} | {nbytes / 1e6:.2f} | {floor:.2f} | {t_cublas:.2f} | {t_plain:.2f} "
              f"| {t_pdl:.2f} | {floor / t_pdl:.0%} | {cfg.block_n}/{cfg.slice_k}/{cfg.num_warps}w |")  # fmt: skip
        if a.sweep and str(m) in a.sweep_rows.split(",") and pdl_supported():

            def call(c, x=x):
                return lambda i: skinny_gemm_triton(x, ws[i], bs[i], gelu, c, pdl=True)

            results = sweep_tiles(call, skinny_tiles(m, n, k), copies)
            tops = ", ".join(f"{c.block_n}/{c.slice_k}/{c.num_warps}w {t:.2f}" for t, c in results[:4])
            print(f"  sweep {name} rows {m} (PDL): picked {t_pdl:.2f} us; best {tops}")


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
    p.add_argument(
        "--skinny", action="store_true", help="time the skinny GEMM (tensor cores) instead of the GEMV"
    )
    a = p.parse_args()
    torch.manual_seed(0)
    bw = copy_bandwidth(torch.device("cuda"))
    print(f"{torch.cuda.get_device_name()}: copy bandwidth {bw / 1e9:.0f} GB/s")
    if a.skinny:
        print("| linear | rows | N x K | weights MB | floor us | cuBLAS us | skinny us | skinny with PDL us "
              "| with PDL % of floor | picked (block_n/slice_k/warps) |")  # fmt: skip
        print("|---|---|---|---|---|---|---|---|---|---|")
        for name, n, k, gelu in (s for s in shapes(a.model) if s[0] in a.linears.split(",")):
            bench_skinny_shape(name, n, k, gelu, [int(r) for r in a.rows.split(",")], bw, a)
            torch.cuda.empty_cache()
        return
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
