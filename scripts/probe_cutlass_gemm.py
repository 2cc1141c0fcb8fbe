"""Issue 50's probe: GPT-2 small's linears at 33 to 512 rows as CUTLASS Hopper GEMMs under programmatic dependent
launch (scripts/probe_cutlass_gemm.cu) against cuBLAS (what the engine ran there before its CUTLASS GEMM), on one GPU:
- every kind against a float32 reference at --rows (and 40 and 33 where 64 is among them), each linear (c_fc with
  its tanh GELU), beside cuBLAS's own error; one call with x a slice of a wider buffer (the attention's output is
  not, but the probe's layer chain feeds attn_proj from c_attn's); the prefetch kinds' K-split parts add up to the
  product;
- per linear, at each of --rows: `--copies` calls one after the other in one CUDA graph, each on its own weights
  (together past L2), each reading the same x and writing its own output; median us a call over interleaved
  rounds. A variant `KIND_pdl_pS` (attn_proj and mlp_proj) writes S float32 parts split along K instead, as the
  engine's `cutlass_gemm_parts` does (the add + LayerNorm that sums them in the engine is not timed here);
- a layer chain: 12 layers of c_attn -> attn_proj -> c_fc + GELU -> mlp_proj, each reading the one before
  (attn_proj the first 768 columns of c_attn's output), fresh weights a layer (85 MB); us a layer. `cublas` is the
  engine's choice of kernels (c_fc with cuBLASLt's GELU epilogue); `K` runs kind K for the three linears whose K
  is 768 and cuBLAS for mlp_proj; `K+K2` kind K2 for mlp_proj as well.

Kinds (tile M x N x K, M along the weights' rows, N along the tokens): 0-2 CUTLASS's own warp-specialised kernel
(ws) at 64x64x64, 64x64x128, 128x64x64; 3-8 example 63's kernel (pf: its weights' producer loads before the
wait) at the same tiles and 64x128x64, 64x256x64, 128x128x64; 9-10 CUTLASS's persistent cooperative kernel (coop,
two consumer warp groups a tile) at 128x128x64 and 128x256x64; 11-12 its ping-pong kernel (pp) at 64x128x64 and
64x256x64; 13-14 pf with narrower token tiles, 64x32x64 and 64x16x64 (more blocks at 64 rows). `_pdl` launches with the programmatic-serialisation attribute,
`_plain` without.

The kernels are built with nvcc from the `nvidia-cutlass` wheel's headers (4.2.0.0; --cutlass: its unpacked
`cutlass_library/source`, or the installed package's), into --lib where it is missing:
    python scripts/probe_cutlass_gemm.py [--cutlass DIR] [--lib .gpu/cutlass_probe/probe_cutlass_gemm.so] [--rebuild]
        [--rows 64] [--rounds 5] [--replays 50] [--variants ...] [--chains ...] [--json OUT]
Outside the engine on purpose: it measures whether CUTLASS's Hopper GEMMs with their weights loaded before the
wait beat cuBLAS at these rows before anything is built around them (docs/BENCHMARKS.md, sessions 44 and 47).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from roseinfer.bench.timing import captured, replays_us

CUTLASS_VERSION = "4.2.0.0"
C, H, LAYERS = 768, 3072, 12
# name: (N, K, gelu)
LINEARS = {
    "c_attn": (3 * C, C, False),
    "attn_proj": (C, C, False),
    "c_fc": (H, C, True),
    "mlp_proj": (C, H, False),
}
KINDS = {
    0: "ws64x64x64",
    1: "ws64x64x128",
    2: "ws128x64x64",
    3: "pf64x64x64",
    4: "pf64x64x128",
    5: "pf128x64x64",
    6: "pf64x128x64",
    7: "pf64x256x64",
    8: "pf128x128x64",
    9: "coop128x128x64",
    10: "coop128x256x64",
    11: "pp64x128x64",
    12: "pp64x256x64",
    13: "pf64x32x64",
    14: "pf64x16x64",
}
PREFETCH_KINDS = {k for k, v in KINDS.items() if v.startswith("pf")}  # the kinds with a K-split parts form


def cutlass_source(given: Path | None) -> Path:
    if given:
        return given
    import cutlass_library  # the nvidia-cutlass wheel

    return Path(cutlass_library.__file__).parent / "source"


def build(src: Path | None, lib: Path, rebuild: bool) -> ctypes.CDLL:
    """The kernels' library: built into `lib` where it is missing or `rebuild` asks (nvcc, about 5 minutes on two
    cores; a copy built elsewhere with the same nvcc can travel to the GPU machine)."""
    cu = Path(__file__).with_name("probe_cutlass_gemm.cu")
    if rebuild or not lib.exists():
        src = cutlass_source(src)
        lib.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        cmd = ["nvcc", "-std=c++17", "-O3", "-gencode=arch=compute_90a,code=sm_90a", "--expt-relaxed-constexpr",
               "-DCUTLASS_ENABLE_GDC_FOR_SM90", "-DNDEBUG", f"-I{src}/include", f"-I{src}/tools/util/include",
               f"-I{src}/examples/63_hopper_gemm_with_weight_prefetch", "-Xcompiler", "-fPIC", "-shared",
               "-cudart", "shared", "-o", str(lib), str(cu)]  # fmt: skip
        subprocess.run(cmd, check=True)
        print(f"built {lib} in {time.perf_counter() - t0:.1f} s", flush=True)
    torch.cuda.init()  # libcudart.so.13 is torch's, already loaded by soname
    so = ctypes.CDLL(str(lib))
    so.probe_gemm.restype = ctypes.c_int
    so.probe_gemm.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p,
                              ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_int,
                              ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_float, ctypes.c_float,
                              ctypes.c_void_p]  # fmt: skip
    so.probe_stages.restype = ctypes.c_int
    so.probe_stages.argtypes = [ctypes.c_int]
    return so


class Gemm:
    def __init__(
        self, so, kind: int, pdl: bool, overlap: float = 0.5, prefetch: float = -1.0, parts: int = 1
    ):
        self.so, self.kind, self.pdl, self.overlap, self.prefetch = so, kind, pdl, overlap, prefetch
        self.parts = parts

    def __call__(self, x, w, b, y, gelu: bool):
        """y [T, N] = act(x [T, K] @ w [N, K]^T + b): x and y may be row slices of wider buffers. With parts > 1,
        y is float32 [parts, T, N], part s the product over K's slice s (no bias)."""
        assert x.stride(1) == 1 and y.stride(-1) == 1 and w.is_contiguous()
        mode = 2 if self.parts > 1 else int(gelu)
        assert w.shape[1] % (64 * self.parts) == 0, "K a multiple of 64 * parts (whole K tiles a part)"
        assert self.parts == 1 or (y.dtype == torch.float32 and y.is_contiguous() and not gelu)
        ldy = y.shape[-1] if self.parts > 1 else y.stride(0)
        rc = self.so.probe_gemm(
            self.kind, mode, x.data_ptr(), x.stride(0), w.data_ptr(), b.data_ptr(), y.data_ptr(), ldy,
            x.shape[0], w.shape[0], w.shape[1], self.parts, int(self.pdl), self.overlap, self.prefetch,
            torch.cuda.current_stream().cuda_stream,
        )  # fmt: skip
        if rc != 0:
            raise RuntimeError(f"kind {self.kind}: CUTLASS status {rc}")
        return y


def cublas(x, w, b, y, gelu: bool):
    """The engine's linears at these rows (roseinfer.linears.linear on cuBLAS), into y."""
    out = torch._addmm_activation(b, x, w.t(), use_gelu=True) if gelu else F.linear(x, w, b)
    y.copy_(out)  # in the timed chains the output is returned, not copied (below)
    return y


def rnd(*shape, scale=0.02, device="cuda"):
    return (torch.randn(*shape, device=device) * scale).half()


def check(so, row_counts: list[int]) -> list[dict]:
    torch.manual_seed(0)
    rows = []
    counts = sorted(set(row_counts) | ({40, 33} if 64 in row_counts else set()), reverse=True)
    for name, (n, k, gelu) in LINEARS.items():
        w, b = rnd(n, k), rnd(n, scale=0.1)
        for t in counts:
            wide = rnd(t, k + 64, scale=1.0)
            for strided in (False, True) if t == max(counts) else (False,):
                x = wide[:, 32 : 32 + k] if strided else wide[:, :k].contiguous()
                ref = x.float() @ w.float().t() + b.float()
                ref = F.gelu(ref, approximate="tanh") if gelu else ref
                base = cublas(x, w, b, torch.empty(t, n, device="cuda", dtype=torch.half), gelu).float() - ref
                for kind in KINDS:
                    y = torch.full((t, n), float("nan"), device="cuda", dtype=torch.half)
                    Gemm(so, kind, pdl=False)(x, w, b, y, gelu)
                    torch.cuda.synchronize()
                    err = (y.float() - ref).abs().max().item()
                    ok = err <= max(4 * base.abs().max().item(), 2e-3)
                    rows.append(dict(linear=name, rows=t, strided=strided, kind=KINDS[kind], err=err,
                                     cublas_err=base.abs().max().item(), ok=ok))  # fmt: skip
                if gelu or strided:
                    continue
                nogelu = x.float() @ w.float().t()
                for kind in sorted(PREFETCH_KINDS):  # the K-split parts add up to the product
                    parts = torch.full((4, t, n), float("nan"), device="cuda")
                    Gemm(so, kind, pdl=False, parts=4)(x, w, b, parts, False)
                    torch.cuda.synchronize()
                    err = (parts.sum(0) - nogelu).abs().max().item()
                    rows.append(dict(linear=name, rows=t, strided=False, kind=f"{KINDS[kind]}_p4", err=err,
                                     cublas_err=base.abs().max().item(), ok=err <= 2e-3))  # fmt: skip
    return rows


def fn_of(so, variant: str):
    """A variant's GEMM: 'cublas' (None), or KIND_MODE[_pS] (MODE: pdl, plain or pdlnorelease; S parts)."""
    if variant == "cublas":
        return None
    m = re.fullmatch(r"([a-z]+\d+x\d+x\d+)_(pdl|plain|pdlnorelease)(?:_p(\d+))?", variant)
    if m is None or m[1] not in KINDS.values():
        raise SystemExit(
            f"probe_cutlass_gemm: {variant!r} is not KIND_MODE[_pS] (KIND one of {list(KINDS.values())})"
        )
    kind = next(k for k, v in KINDS.items() if v == m[1])
    parts = int(m[3] or 1)
    if parts > 1 and kind not in PREFETCH_KINDS:
        raise SystemExit(f"probe_cutlass_gemm: {variant!r}: only the pf kinds have a K-split form")
    return Gemm(so, kind, pdl=m[2].startswith("pdl"), overlap=-1.0 if m[2] == "pdlnorelease" else 0.5,
                parts=parts)  # fmt: skip


def per_linear(so, name: str, variant: str, copies: int, t: int):
    n, k, gelu = LINEARS[name]
    torch.manual_seed(1)
    x = rnd(t, k, scale=1.0)
    ws = [(rnd(n, k), rnd(n, scale=0.1)) for _ in range(copies)]
    g = fn_of(so, variant)
    shape, dtype = ((g.parts, t, n), torch.float32) if g is not None and g.parts > 1 else ((t, n), torch.half)
    ys = [torch.empty(*shape, device="cuda", dtype=dtype) for _ in range(copies)]

    def step():
        if g is None:
            return [
                torch._addmm_activation(b, x, w.t(), use_gelu=True) if gelu else F.linear(x, w, b)
                for w, b in ws
            ]
        return [g(x, w, b, y, gelu) for (w, b), y in zip(ws, ys)]

    graph, _ = captured(step, warmups=2)
    # the graph's tensors live as long as it: freed, their memory could go back to the driver when the next
    # variant's capture empties the cache, and a replay would then write into unmapped memory
    return graph, (x, ws, ys)


def layer_chain(so, variant: str, t: int):
    """12 layers of the four linears at t rows, each reading the one before; variant 'cublas', 'K' or 'K+K2'
    (kinds)."""
    torch.manual_seed(2)
    layers = []
    for _ in range(LAYERS):
        layers.append({name: (rnd(n, k), rnd(n, scale=0.1)) for name, (n, k, _) in LINEARS.items()})
    x0 = rnd(t, C, scale=1.0)
    bufs = {name: torch.empty(t, n, device="cuda", dtype=torch.half) for name, (n, _, _) in LINEARS.items()}
    if variant == "cublas":
        main = proj = None
    else:
        parts = [int(p) for p in variant.split("+")]
        main = Gemm(so, parts[0], pdl=True)
        proj = Gemm(so, parts[1], pdl=True) if len(parts) > 1 else None

    def lin(g, name, x, layer):
        w, b = layer[name]
        gelu = LINEARS[name][2]
        if g is None:
            return torch._addmm_activation(b, x, w.t(), use_gelu=True) if gelu else F.linear(x, w, b)
        return g(x, w, b, bufs[name], gelu)

    def step():
        x = x0
        for layer in layers:
            qkv = lin(main, "c_attn", x, layer)
            a = lin(main, "attn_proj", qkv[:, :C], layer)
            h = lin(main, "c_fc", a, layer)
            x = lin(proj, "mlp_proj", h, layer)
        return x

    graph, _ = captured(step, warmups=2)
    return graph, (layers, x0, bufs)  # its tensors with it (per_linear says why)


def rounds_us(graphs: dict, rounds: int, replays: int, per: int) -> dict:
    """graphs: variant -> (graph, its tensors)."""
    times = {v: [] for v in graphs}
    for r in range(rounds):
        order = list(graphs)
        order = order[r % len(order) :] + order[: r % len(order)]  # each round starts one variant later
        for v in order:
            times[v].append(replays_us(graphs[v][0], replays) / per)
    return {v: dict(median=statistics.median(t), rounds=[round(u, 3) for u in t]) for v, t in times.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--cutlass", help="the nvidia-cutlass wheel's cutlass_library/source (default: the installed one)"
    )
    ap.add_argument("--lib", default=".gpu/cutlass_probe/probe_cutlass_gemm.so")
    ap.add_argument("--rebuild", action="store_true", help="build --lib even where it exists")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--replays", type=int, default=50)
    ap.add_argument("--copies", type=int, default=24)
    ap.add_argument(
        "--rows", default="64", help="token rows, comma-separated (each linear and chain at each)"
    )
    ap.add_argument("--variants", default="cublas,ws64x64x64_pdl,ws64x64x128_pdl,ws128x64x64_pdl,pf64x64x64_pdl,"
                    "pf64x64x128_pdl,pf128x64x64_pdl,pf64x64x64_plain,pf64x64x128_pdlnorelease")  # fmt: skip
    ap.add_argument("--chains", default="cublas,0,1,3,4,4+4,3+3")
    ap.add_argument("--json")
    ap.add_argument(
        "--skip-check", action="store_true", help="no check against the reference (run it once first)"
    )
    a = ap.parse_args()
    so = build(Path(a.cutlass) if a.cutlass else None, Path(a.lib), a.rebuild)
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "stages": {KINDS[k]: so.probe_stages(k) for k in KINDS}}  # fmt: skip
    print("pipeline stages:", out["stages"], flush=True)
    row_counts = [int(r) for r in a.rows.split(",")]
    out["check"] = [] if a.skip_check else check(so, row_counts)
    bad = [r for r in out["check"] if not r["ok"]]
    for r in out["check"]:
        if r["rows"] == max(row_counts) and not r["strided"] or not r["ok"]:
            print(f"check {r['linear']:9} {r['rows']:2} strided={r['strided']!s:5} {r['kind']:12} "
                  f"err {r['err']:.2e} (cuBLAS {r['cublas_err']:.2e}) {'ok' if r['ok'] else 'FAILED'}")  # fmt: skip
    print(f"checks: {len(out['check']) - len(bad)} passed, {len(bad)} failed", flush=True)
    if bad:
        return 1
    variants = a.variants.split(",")
    out["per_linear"], out["layer_chain"] = {}, {}
    for t in row_counts:
        for name in LINEARS:
            # a K-split variant (`_pS`) for the linears whose reader could add parts: attn_proj and mlp_proj
            # (the add + LayerNorm), c_attn (the attention, were it to read them)
            takes = [v for v in variants if not re.search(r"_p\d+$", v) or name != "c_fc"]
            graphs = {v: per_linear(so, name, v, a.copies, t) for v in takes}
            res = rounds_us(graphs, a.rounds, a.replays, a.copies)
            out["per_linear"][f"{name}@{t}"] = res
            print(
                f"{t:3} rows {name:9} " + "  ".join(f"{v} {r['median']:.2f}" for v, r in res.items()),
                flush=True,
            )
            del graphs
        if a.chains:
            graphs = {v: layer_chain(so, v, t) for v in a.chains.split(",")}
            out["layer_chain"][t] = rounds_us(graphs, a.rounds, a.replays, LAYERS)
            print(
                f"{t:3} rows layer chain, us a layer: "
                + "  ".join(f"{v} {r['median']:.2f}" for v, r in out["layer_chain"][t].items()),
                flush=True,
            )
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
