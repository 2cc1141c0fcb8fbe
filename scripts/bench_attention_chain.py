"""How the split attention is launched, in the chain of a captured batch-1 step's attention half.

    python scripts/bench_attention_chain.py --past 0,128,512

One CUDA graph of 12 "layers" (GPT-2 small's shapes, fp16, distinct weights per layer so that they do not stay in
L2), each: add + LayerNorm + c_attn, the attention over `past` tokens with the KV append, then attn_proj, whose
output is the next layer's residual delta. c_attn and attn_proj are PDL GEMVs, as in the engine
(`roseinfer.cuda_graphs`); the split attention (one block a slice) is launched:
- "plain": plainly, releasing attn_proj early (session 7's engine);
- "dependent": as a dependent launch that waits first;
- "dependent, prefetch": as a dependent launch whose slices load their past block before the wait (the engine now).
Prints the median GPU time of one replay over --reps, per layer, for --rounds rounds. (Issue 27's round 3 also
timed c_attn's GEMV and the attention as one launch here, commit 74670ea: no faster; reverted.)
"""

import argparse

import torch

from roseinfer.bench.timing import captured, time_us
from roseinfer.kernels.gemv import gemv_triton, norm_gemv_triton
from roseinfer.kernels.pdl import pdl_scope
from roseinfer.kernels.split_attention import split_decode_attention_triton

LAYERS, C, HEADS, D, BLOCK, WIDTH = 12, 768, 12, 64, 64, 16
VARIANTS = ("plain", "dependent", "dependent, prefetch")


def build(g):
    def rnd(*shape, std=0.02):
        return (torch.randn(*shape, generator=g, device="cuda") * std).half()

    layers = [
        dict(
            ln_w=torch.ones(C, device="cuda", dtype=torch.half),
            ln_b=torch.zeros(C, device="cuda", dtype=torch.half),
            w=rnd(3 * C, C),
            b=rnd(3 * C),
            pw=rnd(C, C),
            pb=rnd(C),
            kc=rnd(WIDTH + 1, HEADS, BLOCK, D, std=1.0),
            vc=rnd(WIDTH + 1, HEADS, BLOCK, D, std=1.0),
        )
        for _ in range(LAYERS)
    ]
    table = torch.arange(WIDTH, device="cuda", dtype=torch.int32).view(1, WIDTH)
    return layers, table


def step(layers, table, lens, x0, delta0, variant: str):
    x, delta = x0, delta0
    scale = D**-0.5
    with pdl_scope(True, attention=variant == "dependent", attention_release=True):
        for p in layers:
            x, qkv = norm_gemv_triton(x, delta, p["ln_w"], p["ln_b"], 1e-5, p["w"], p["b"])
            q, k, v = qkv.view(1, 3, HEADS, D).unbind(1)  # each [1, H, D]
            o = split_decode_attention_triton(
                q, k, v, p["kc"], p["vc"], table, lens, scale, splits=WIDTH, append=True,
                prefetch=variant == "dependent, prefetch",
            ).reshape(1, -1)  # fmt: skip
            delta = gemv_triton(o, p["pw"], p["pb"])
    return x, delta


def layer_us(variant: str, past: int, reps: int) -> float:
    g = torch.Generator(device="cuda").manual_seed(0)
    layers, table = build(g)
    lens = torch.tensor([past], device="cuda", dtype=torch.int32)
    x0 = torch.randn(1, C, generator=g, device="cuda").half()
    delta0 = torch.randn(1, C, generator=g, device="cuda").half()
    graph, _ = captured(lambda: step(layers, table, lens, x0, delta0, variant), warmups=2)
    return time_us(graph.replay, reps) / LAYERS  # median replay (after 10 warm-up replays), per layer


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--past", default="0,128,512")
    p.add_argument("--reps", type=int, default=100)
    p.add_argument("--rounds", type=int, default=2)
    a = p.parse_args()
    pasts = [int(x) for x in a.past.split(",")]
    print(
        f"GPT-2 small shapes, fp16, batch 1, {LAYERS} layers a graph: GPU us per layer (median of {a.reps})"
    )
    print("| split attention launched | round | " + " | ".join(f"past {x}" for x in pasts) + " |")
    print("|---|---|" + "---|" * len(pasts))
    for r in range(a.rounds):
        for v in VARIANTS:
            print(f"| {v} | {r + 1} | " + " | ".join(f"{layer_us(v, x, a.reps):.2f}" for x in pasts) + " |")


if __name__ == "__main__":
    main()
