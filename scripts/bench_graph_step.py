"""GPU time of one captured decode step, with the fast path's kernel changes added one at a time.

    python scripts/bench_graph_step.py --batch 64 --past 128,256,512

Builds GPT-2 small (or --model; fp16, --paged-attn) with every row of the batch at the same past length and times a replay
of the batch's CUDA graph with events (median of --reps replays; the inputs are not advanced between replays).
Variants (scripts/graph_step_variants.py) each add one change to the one before; `--variants 52,55` times two
of them side by side.
Each variant is built and timed in a process of its own. --kernels adds each variant's kernels (one past: the
first): a kernel's own GPU time per replay (its duration less what the kernel before it on the stream still
covered, so a PDL launch is not charged for its wait) and launches per replay, from torch.profiler over
--profile-reps replays.
--probe-attention-no-wait builds the CUDA paged attention's probe (`paged_attn.load(probe_skip_wait=True)`) and
times each variant's graph with it twice: as the engine runs it, then with the attention not waiting for c_attn, a
bound on what that dependency costs a step. Only where the attention is a dependent launch (the CUTLASS GEMM's
buckets) does the second row differ: elsewhere its wait returns at once anyway.
--probe-no-add-layer-norm times each variant a second time, built with every residual add + LayerNorm kernel left
out (the Triton `add_layer_norm_kernel`: the step's next linear reads the residual itself, a K split's parts are
read by nobody): a bound on what folding those kernels into the GEMMs around them could give a step. Its tokens
mean nothing. Where the step has no such kernel (buckets of up to 8 rows, whose LayerNorms run inside the GEMVs,
and variants without `fused_add_layernorm`) its row leaves nothing out.
The earlier variants are rebuilt through the runner's measurement hook (`GraphKernels`, the captured step's
kernel choices), not options of the engine.
"""

import argparse
import json
import statistics
import subprocess
import sys

import torch
from graph_step_variants import NAMES, VARIANTS

from roseinfer import LLM, tracing
from roseinfer.bench.timing import LEAD_CYCLES


def freeze(engine, rows: int, past: int) -> None:
    """The first `rows` rows of the static inputs at `past`, each with blocks of its own, and live flags 0: the
    replays do not advance the past lengths."""
    runner = engine.runner
    m, n_layer = runner.max_blocks_per_seq, engine.model_cfg.n_layer
    # Row b, layer l: blocks b*M .. b*M + M-1 (distinct, inside the pool).
    tables = torch.arange(rows * m).view(rows, 1, m).expand(rows, n_layer, m)  # [rows, L, M]
    runner.freeze_static_inputs(rows, past=past, tables=tables)


def replay_us(engine, batch: int, past: int, reps: int, probe: bool = False) -> float:
    """probe: token ids restored before every replay (a probed step's greedy tokens may be the argmax's sentinel:
    `probe_build`, `leave_out_add_layer_norm`)."""
    graphs, runner = engine.graphs, engine.runner
    bucket = graphs.bucket_for(batch)
    freeze(engine, bucket, past)
    for _ in range(10):
        if probe:
            runner.reset_token_ids(bucket)
        graphs.replay(bucket)
    runner.reset_token_ids(bucket)  # the replays wrote their greedy tokens there
    times = []
    for _ in range(reps):
        if probe:
            runner.reset_token_ids(bucket)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        # The GPU busy for a while first, so that the replay is queued when the start event fires: the time the
        # CPU takes to launch the graph (7 to 20 us on the H100's host; 60 to 100 once a profiler ran) is not
        # the step's GPU time.
        torch.cuda._sleep(LEAD_CYCLES)
        start.record()
        graphs.replay(bucket)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def kernel_table(engine, batch: int, reps: int) -> list[tuple[str, float, float, float]]:
    """(kernel, launches, own us, duration us) per replay, the most own time first: the inputs as `replay_us` left
    them. A kernel's own time is roseprof's (`stream_time.own_stream_ns`): its duration less what the kernels
    before it on its stream still covered."""
    from torch.profiler import ProfilerActivity, profile

    bucket = engine.graphs.bucket_for(batch)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            engine.graphs.replay(bucket)
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA and e.name]
    return kernel_rows(kernels, reps)


# The engine's CUTLASS GEMMs by their epilogue, which tells the linears apart (the profiler's names are mangled and
# the same for their first 90 characters): c_fc (bias + GELU), c_attn and the unsplit others (bias), the K split's
# float32 parts (attn_proj and mlp_proj where they split). The GELU's first: its epilogue's name holds the bias's.
CUTLASS_EPILOGUES = (
    ("GELU", "CUTLASS GEMM, bias + GELU"),
    ("LinCombPerRowBias", "CUTLASS GEMM, bias"),
    ("LinearCombination", "CUTLASS GEMM, float32 parts"),
)


def kernel_label(name: str) -> str:
    """A kernel's row in `kernel_rows`: its name, or for the CUTLASS GEMM which of its epilogues it runs."""
    if "cutlass" in name and "GemmUniversal" in name:
        for key, label in CUTLASS_EPILOGUES:
            if key in name:
                return label
    return name


def kernel_rows(kernels, reps: int) -> list[tuple[str, float, float, float]]:
    """`kernel_table`'s rows from the profiler's kernel events (`time_range` in us)."""
    from types import SimpleNamespace

    import numpy as np

    from roseprof.analysis.stream_time import own_stream_ns
    from roseprof.model import KERNEL

    start = np.array([round(e.time_range.start * 1e3) for e in kernels], dtype=np.int64)  # [K] ns
    end = np.array([round(e.time_range.end * 1e3) for e in kernels], dtype=np.int64)  # [K] ns
    ops = SimpleNamespace(
        start=start,
        end=end,
        kind=np.full(len(kernels), KERNEL),
        stream=np.array([getattr(e, "device_resource_id", 0) for e in kernels]),
        device=np.array([e.device_index for e in kernels]),
    )
    own = own_stream_ns(ops)  # [K] ns
    rows: dict[str, list[float]] = {}
    for e, own_ns, dur_ns in zip(kernels, own.tolist(), (end - start).tolist()):
        row = rows.setdefault(kernel_label(e.name), [0, 0.0, 0.0])
        row[0] += 1
        row[1] += own_ns / 1e3
        row[2] += dur_ns / 1e3
    out = [(name, n / reps, own_us / reps, dur / reps) for name, (n, own_us, dur) in rows.items()]
    return sorted(out, key=lambda r: -r[2])


def probe_build():
    """The CUDA paged attention's probe build (`paged_attn.load(probe_skip_wait=True)`), which the engine built
    after this call launches: with `set_probe_skip_wait(True)` its kernel runs beside c_attn rather than after it,
    reading q, k and v before c_attn writes them (an earlier replay's values, or another tensor's of the graph's
    pool), so a replay's time bounds what that wait costs and its tokens mean nothing: `replay_us(probe=True)`
    restores the token ids before every replay, so that no step reads an embedding row out of range (session 53's
    attempt stopped on that). Exits where it is not built."""
    from roseinfer import cuda_ext
    from roseinfer.cuda_ext import paged_attn

    probe = paged_attn.load(probe_skip_wait=True)
    if probe is None:
        sys.exit(f"--probe-attention-no-wait: {cuda_ext.why_not_built(paged_attn.NAME)}")
    paged_attn.load = lambda probe_skip_wait=False: probe  # every launch of this process: the probe build
    return probe


def leave_out_add_layer_norm() -> None:
    """--probe-no-add-layer-norm: every residual add + LayerNorm of the engines this process builds returns the
    residual as both the sum and the normalised rows, and launches nothing (`roseinfer.model.residual_layer_norm`
    imports the kernel's function as it calls it)."""
    from roseinfer.kernels import add_layernorm

    add_layernorm.add_layer_norm_triton = lambda x, delta, weight, bias, eps: (x, x)


def build(model: str, batch: int, variant: int):
    llm = LLM(model, device="cuda", dtype="float16", max_batch_size=batch, paged_attn=True)
    engine = llm.engine
    engine.use_static_decode(capture=True, kernels=VARIANTS[variant])
    return engine


def main() -> None:
    p = argparse.ArgumentParser(allow_abbrev=False)  # the children's options are matched by their names
    p.add_argument("--model", default="gpt2")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--past", default="128,256,512")
    p.add_argument("--reps", type=int, default=200)
    p.add_argument("--variants", default="1,2,3,4,5,6,7,8,9,10,11,12,13,16")
    p.add_argument("--kernels", action="store_true", help="each variant's kernels at the first past")
    p.add_argument("--profile-reps", type=int, default=20)
    p.add_argument(
        "--probe-attention-no-wait",
        action="store_true",
        help="each variant also timed with its CUDA paged attention not waiting for c_attn (a bound; only where the"
        " attention is a dependent launch, in the CUTLASS GEMM's buckets)",
    )
    p.add_argument(
        "--probe-no-add-layer-norm",
        action="store_true",
        help="each variant also timed with its residual add + LayerNorm kernels left out (a bound)",
    )
    p.add_argument("--one", type=int, help=argparse.SUPPRESS)  # internal: one variant, in this process
    a = p.parse_args()
    tracing.configure(nvtx=False, record_function=False)
    pasts = [int(x) for x in a.past.split(",")]
    tables = []
    if a.one is not None:  # a child of the loop below: one build, its figures as JSON
        probe = probe_build() if a.probe_attention_no_wait else None
        if a.probe_no_add_layer_norm:
            leave_out_add_layer_norm()
        engine = build(a.model, a.batch, a.one)
        # the first past last, so that --kernels profiles the inputs it left
        row = [
            replay_us(engine, a.batch, past, a.reps, probe=a.probe_no_add_layer_norm)
            for past in reversed(pasts)
        ][::-1]
        probe_row = []
        if probe is not None:  # the same graphs once their replays have written q, k and v: the wait skipped
            probe.set_probe_skip_wait(True)
            probe_row = [replay_us(engine, a.batch, past, a.reps, probe=True) for past in reversed(pasts)][
                ::-1
            ]
            probe.set_probe_skip_wait(False)
            engine.runner.reset_token_ids(engine.graphs.bucket_for(a.batch))  # for --kernels' replays
        table = kernel_table(engine, a.batch, a.profile_reps) if a.kernels else []
        print(json.dumps({"row": row, "probe_row": probe_row, "table": table}))
        return
    print(f"{a.model} fp16, --paged-attn, batch {a.batch}: GPU us per graph replay (median of {a.reps})")
    print("| variant | " + " | ".join(f"past {x}" for x in pasts) + " |")
    print("|---|" + "---|" * len(pasts))
    for variant in (int(v) for v in a.variants.split(",")):
        # Each build in a process of its own: in one process a later build's replays ran up to 40 us slower at
        # batches 32 and 64 on the H100, with the same kernel time (idle between kernels; docs/BENCHMARKS.md,
        # session 13).
        args = [x for x in sys.argv[1:] if x != "--probe-no-add-layer-norm"]
        out = child(args, variant)
        row = out["row"]
        print(f"| {NAMES[variant]} | " + " | ".join(f"{x:.1f}" for x in row) + " |", flush=True)
        if out["probe_row"]:
            cells = " | ".join(f"{x:.1f}" for x in out["probe_row"])
            print(f"| {variant}, the attention not waiting for c_attn (a bound) | {cells} |", flush=True)
        if a.probe_no_add_layer_norm:  # its own build: no other probe, no kernel table
            probe_args = [x for x in args if x not in ("--probe-attention-no-wait", "--kernels")]
            cells = " | ".join(
                f"{x:.1f}" for x in child([*probe_args, "--probe-no-add-layer-norm"], variant)["row"]
            )
            print(f"| {variant}, no add + LayerNorm kernels (a bound) | {cells} |", flush=True)
        if a.kernels:
            tables.append((variant, row[0], out["table"]))
    for variant, replay, table in tables:
        print(
            f"\nvariant {variant} ({replay:.1f} us a replay), past {pasts[0]}: kernels per replay (own us: its"
        )
        print("duration less what the kernel before it covered)")
        print("| kernel | launches | own us | duration us |\n|---|---|---|---|")
        for name, n, own, dur in table:
            print(f"| {name[:90]} | {n:.0f} | {own:.1f} | {dur:.1f} |")
        print(
            f"| **all** | {sum(r[1] for r in table):.0f} | {sum(r[2] for r in table):.1f} | "
            f"{sum(r[3] for r in table):.1f} |"
        )


def child(args: list[str], variant: int) -> dict:
    """One variant's figures from a process of its own (`--one`)."""
    cmd = [sys.executable, __file__, *args, "--one", str(variant)]
    return json.loads(
        subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout.splitlines()[-1]
    )


if __name__ == "__main__":
    main()
