"""Issue 50's probe: does a decode step at 64 rows run faster as two micro-batches of 32 on two streams, so that one
half's latency-bound linears run beside the other half's bandwidth-bound attention? (Decode rows are independent
until the logits: the two halves need no join inside the step.)

A stand-in for GPT-2 small's step with torch ops (each layer: LayerNorm, c_attn, attention over a past of --past
tokens by scaled_dot_product_attention, attn_proj, residual, LayerNorm, c_fc with cuBLASLt's GELU epilogue,
mlp_proj, residual; 12 layers, fresh weights and K/V a layer), captured in one CUDA graph:
- `one`: 64 rows on one stream (what the engine runs);
- `halves`: two 32-row halves, one after the other on one stream (what splitting costs alone);
- `two`: the two halves on two streams, forked at the start and joined at the end (one branch each);
- `four`: four 16-row quarters on four streams.
Replayed in interleaved rounds; median us a step. Outside the engine on purpose (docs/BENCHMARKS.md, session 43).

python scripts/probe_two_streams.py [--rows 64] [--past 256] [--rounds 5] [--replays 50] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from roseinfer.bench.timing import captured, replays_us

LAYERS, C, HEADS = 12, 768, 12


def layers(past: int, rows: int):
    torch.manual_seed(0)
    out = []
    for _ in range(LAYERS):

        def w(*shape):
            return (torch.randn(*shape, device="cuda") * 0.02).half()

        out.append(
            {
                "ln1": (torch.ones(C, device="cuda").half(), w(C)),
                "c_attn": (w(3 * C, C), w(3 * C)),
                "attn_proj": (w(C, C), w(C)),
                "ln2": (torch.ones(C, device="cuda").half(), w(C)),
                "c_fc": (w(4 * C, C), w(4 * C)),
                "mlp_proj": (w(C, 4 * C), w(C)),
                "k": torch.randn(rows, HEADS, past, C // HEADS, device="cuda").half(),
                "v": torch.randn(rows, HEADS, past, C // HEADS, device="cuda").half(),
            }
        )
    return out


def step(x, out, weights, lo: int, hi: int):
    """The stand-in step for rows lo..hi of x ([rows, C]) into the same rows of out."""
    h = x[lo:hi]
    b = hi - lo
    for L in weights:
        a = F.layer_norm(h, (C,), *L["ln1"])
        qkv = F.linear(a, *L["c_attn"])  # [b, 3C]
        q = qkv[:, :C].view(b, HEADS, 1, C // HEADS)
        o = F.scaled_dot_product_attention(q, L["k"][lo:hi], L["v"][lo:hi])  # [b, H, 1, D]
        h = h + F.linear(o.reshape(b, C), *L["attn_proj"])
        m = F.layer_norm(h, (C,), *L["ln2"])
        g = torch._addmm_activation(L["c_fc"][1], m, L["c_fc"][0].t(), use_gelu=True)
        h = h + F.linear(g, *L["mlp_proj"])
    out[lo:hi].copy_(h)


def program(variant: str, x, out, weights):
    rows = x.shape[0]
    parts = {"one": 1, "halves": 2, "two": 2, "four": 4}[variant]
    bounds = [(i * rows // parts, (i + 1) * rows // parts) for i in range(parts)]
    streams = [torch.cuda.Stream() for _ in bounds] if variant in ("two", "four") else None

    def run():
        if streams is None:
            for lo, hi in bounds:
                step(x, out, weights, lo, hi)
            return
        here = torch.cuda.current_stream()
        for s, (lo, hi) in zip(streams, bounds):
            s.wait_stream(here)
            with torch.cuda.stream(s):
                step(x, out, weights, lo, hi)
        for s in streams:
            here.wait_stream(s)

    return run


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--past", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--replays", type=int, default=50)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("probe_two_streams: needs a CUDA GPU", file=sys.stderr)
        return 2
    weights = layers(args.past, args.rows)
    x0 = (torch.randn(args.rows, C, device="cuda") * 0.1).half()
    # the variants compute the same rows: checked once, outside the graphs
    ref = torch.empty_like(x0)
    step(x0, ref, weights, 0, args.rows)
    variants = ["one", "halves", "two", "four"]
    outs = {v: torch.empty_like(x0) for v in variants}
    for v in variants:
        program(v, x0, outs[v], weights)()
        torch.cuda.synchronize()
        err = (outs[v].float() - ref.float()).abs().max().item()
        print(f"{v:6s}: max |difference| from one stream {err:.3g}", flush=True)
    runs = {v: program(v, x0, outs[v], weights) for v in variants}  # kept alive while their graphs replay
    graphs = {v: captured(runs[v])[0] for v in variants}
    times: dict[str, list[float]] = {v: [] for v in variants}
    for r in range(args.rounds):
        for v in variants[r % len(variants) :] + variants[: r % len(variants)]:
            times[v].append(replays_us(graphs[v], args.replays))
    print(f"{torch.cuda.get_device_name()}, {args.rows} rows, past {args.past}: us a step (median of rounds)")
    base = statistics.median(times["one"])
    for v in variants:
        med = statistics.median(times[v])
        print(
            f"  {v:6s} {med:8.1f}  {100 * (med / base - 1):+6.1f}%   rounds {' '.join(f'{t:.1f}' for t in times[v])}"
        )
    if args.json:
        args.json.write_text(
            json.dumps({"rows": args.rows, "past": args.past, "us_per_step": times}, indent=1)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
