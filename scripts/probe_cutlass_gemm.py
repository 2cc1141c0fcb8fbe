"""Issue 50's probe: GPT-2 small's linears at 33 to 64 rows as CUTLASS Hopper GEMMs under programmatic dependent
launch (scripts/probe_cutlass_gemm.cu) against what the engine runs there (cuBLAS), on one GPU:
- every kind against a float32 reference at 64, 40 and 33 rows, each linear (c_fc with its tanh GELU), beside
  cuBLAS's own error; one call with x a slice of a wider buffer (the attention's output is not, but the probe's
  layer chain feeds attn_proj from c_attn's);
- per linear: `--copies` calls one after the other in one CUDA graph, each on its own weights (together past L2),
  each reading the same x and writing its own output; median us a call over interleaved rounds;
- a layer chain: 12 layers of c_attn -> attn_proj -> c_fc + GELU -> mlp_proj, each reading the one before
  (attn_proj the first 768 columns of c_attn's output), fresh weights a layer (85 MB); us a layer. `cublas` is the
  engine's choice of kernels (c_fc with cuBLASLt's GELU epilogue); `K` runs kind K for the three linears whose K
  is 768 and cuBLAS for mlp_proj; `K+K2` kind K2 for mlp_proj as well.

Kinds (tile M x N x K, M along the weights' rows, N along the tokens): 0-2 CUTLASS's own warp-specialised kernel
(ws) at 64x64x64, 64x64x128, 128x64x64; 3-5 example 63's kernel (pf: its weights' producer loads before the
wait) at the same tiles. `_pdl` launches with the programmatic-serialisation attribute, `_plain` without.

The kernels are built with nvcc from the `nvidia-cutlass` wheel's headers (4.2.0.0; --cutlass: its unpacked
`cutlass_library/source`, or the installed package's), into --lib where it is missing:
    python scripts/probe_cutlass_gemm.py [--cutlass DIR] [--lib .gpu/cutlass_probe/probe_cutlass_gemm.so] [--rebuild]
        [--rounds 5] [--replays 50] [--json OUT]
Outside the engine on purpose: it measures whether CUTLASS's Hopper GEMMs with their weights loaded before the
wait beat cuBLAS at these rows before anything is built around them (docs/BENCHMARKS.md, session 44).
"""

from __future__ import annotations

import argparse
import ctypes
import json
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
}


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
                              ctypes.c_int, ctypes.c_int, ctypes.c_float, ctypes.c_float, ctypes.c_void_p]  # fmt: skip
    so.probe_stages.restype = ctypes.c_int
    so.probe_stages.argtypes = [ctypes.c_int]
    return so


class Gemm:
    def __init__(self, so, kind: int, pdl: bool, overlap: float = 0.5, prefetch: float = -1.0):
        self.so, self.kind, self.pdl, self.overlap, self.prefetch = so, kind, pdl, overlap, prefetch

    def __call__(self, x, w, b, y, gelu: bool):
        """y [T, N] = act(x [T, K] @ w [N, K]^T + b): x and y may be row slices of wider buffers."""
        assert x.stride(1) == 1 and y.stride(1) == 1 and w.is_contiguous()
        rc = self.so.probe_gemm(
            self.kind, int(gelu), x.data_ptr(), x.stride(0), w.data_ptr(), b.data_ptr(), y.data_ptr(), y.stride(0),
            x.shape[0], w.shape[0], w.shape[1], int(self.pdl), self.overlap, self.prefetch,
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


def check(so) -> list[dict]:
    torch.manual_seed(0)
    rows = []
    for name, (n, k, gelu) in LINEARS.items():
        w, b = rnd(n, k), rnd(n, scale=0.1)
        for t in (64, 40, 33):
            wide = rnd(t, k + 64, scale=1.0)
            for strided in (False, True) if t == 64 else (False,):
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
    return rows


def fn_of(so, variant: str):
    if variant == "cublas":
        return None
    kind, mode = variant.split("_")
    kind = next(k for k, v in KINDS.items() if v == kind)
    return Gemm(so, kind, pdl=mode.startswith("pdl"), overlap=-1.0 if mode == "pdlnorelease" else 0.5)


def per_linear(so, name: str, variant: str, copies: int):
    n, k, gelu = LINEARS[name]
    torch.manual_seed(1)
    x = rnd(64, k, scale=1.0)
    ws = [(rnd(n, k), rnd(n, scale=0.1)) for _ in range(copies)]
    ys = [torch.empty(64, n, device="cuda", dtype=torch.half) for _ in range(copies)]
    g = fn_of(so, variant)

    def step():
        if g is None:
            return [
                torch._addmm_activation(b, x, w.t(), use_gelu=True) if gelu else F.linear(x, w, b)
                for w, b in ws
            ]
        return [g(x, w, b, y, gelu) for (w, b), y in zip(ws, ys)]

    graph, _ = captured(step, warmups=2)
    return graph


def layer_chain(so, variant: str):
    """12 layers of the four linears, each reading the one before; variant 'cublas', 'K' or 'K+K2' (kinds)."""
    torch.manual_seed(2)
    layers = []
    for _ in range(LAYERS):
        layers.append({name: (rnd(n, k), rnd(n, scale=0.1)) for name, (n, k, _) in LINEARS.items()})
    x0 = rnd(64, C, scale=1.0)
    bufs = {name: torch.empty(64, n, device="cuda", dtype=torch.half) for name, (n, _, _) in LINEARS.items()}
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
    return graph


def rounds_us(graphs: dict, rounds: int, replays: int, per: int) -> dict:
    times = {v: [] for v in graphs}
    for r in range(rounds):
        order = list(graphs)
        order = order[r % len(order) :] + order[: r % len(order)]  # each round starts one variant later
        for v in order:
            times[v].append(replays_us(graphs[v], replays) / per)
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
    ap.add_argument("--variants", default="cublas,ws64x64x64_pdl,ws64x64x128_pdl,ws128x64x64_pdl,pf64x64x64_pdl,"
                    "pf64x64x128_pdl,pf128x64x64_pdl,pf64x64x64_plain,pf64x64x128_pdlnorelease")  # fmt: skip
    ap.add_argument("--chains", default="cublas,0,1,3,4,4+4,3+3")
    ap.add_argument("--json")
    a = ap.parse_args()
    so = build(Path(a.cutlass) if a.cutlass else None, Path(a.lib), a.rebuild)
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "stages": {KINDS[k]: so.probe_stages(k) for k in KINDS}}  # fmt: skip
    print("pipeline stages:", out["stages"], flush=True)
    out["check"] = check(so)
    bad = [r for r in out["check"] if not r["ok"]]
    for r in out["check"]:
        if r["rows"] == 64 and not r["strided"] or not r["ok"]:
            print(f"check {r['linear']:9} {r['rows']:2} strided={r['strided']!s:5} {r['kind']:12} "
                  f"err {r['err']:.2e} (cuBLAS {r['cublas_err']:.2e}) {'ok' if r['ok'] else 'FAILED'}")  # fmt: skip
    print(f"checks: {len(out['check']) - len(bad)} passed, {len(bad)} failed", flush=True)
    if bad:
        return 1
    variants = a.variants.split(",")
    out["per_linear"] = {}
    for name in LINEARS:
        graphs = {v: per_linear(so, name, v, a.copies) for v in variants}
        res = rounds_us(graphs, a.rounds, a.replays, a.copies)
        out["per_linear"][name] = res
        print(f"{name:9} " + "  ".join(f"{v} {r['median']:.2f}" for v, r in res.items()), flush=True)
        del graphs
    graphs = {v: layer_chain(so, v) for v in a.chains.split(",")}
    out["layer_chain"] = rounds_us(graphs, a.rounds, a.replays, LAYERS)
    print(
        "layer chain, us a layer: "
        + "  ".join(f"{v} {r['median']:.2f}" for v, r in out["layer_chain"].items())
    )
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
