"""Where a slow prefill spends its time (issue 49's GPU truth: prefills of 30-112 short tokens that sometimes take
50-160 ms where the same size takes 5-10 ms; docs/BENCHMARKS.md, session 21).

Wraps `ModelRunner.prefill` and its parts (the prompt's blocks, the KV plan, the forward's host time, the sampling
that waits for the GPU) with host clocks, the stepping thread's CPU time and CUDA events, and arms faulthandler's
watchdog for each prefill: one that runs past --stall-ms has every thread's Python stack written, by a C thread that
needs no GIL, so a prefill stuck in C code or waiting for the GIL shows where.

    python scripts/probe_prefill.py --out DIR [--requests 192 --concurrency 8 --prompt-len 16 --output-len 96]
        drives an Engine directly (no server), as `roseprof load` drives the server: a closed loop of
        `--concurrency` requests;
    PREFILL_PROBE=DIR python -m roseinfer.serve ...   with scripts/ on PYTHONPATH and a sitecustomize.py that calls
        `install_from_env()`: the same records from the server's engine process.

Each process writes DIR/prefill-PID.jsonl (one record a prefill) and DIR/stacks-PID.txt; `--summarize DIR` prints
the slowest prefills with their parts and stacks.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import gc
import json
import os
import random
import sys
import threading
import time
from pathlib import Path

_now, _cpu = time.perf_counter_ns, time.thread_time_ns


class _Probe:
    def __init__(self, out: Path, stall_ms: float) -> None:
        out.mkdir(parents=True, exist_ok=True)
        pid = os.getpid()
        self.records = open(out / f"prefill-{pid}.jsonl", "a", buffering=1)  # noqa: SIM115 - open for the process
        self.stacks = open(out / f"stacks-{pid}.txt", "a", buffering=1)  # noqa: SIM115
        self.stall_s = stall_ms / 1e3
        self.parts: dict[str, int] = {}
        self.gc_ns = 0
        self._gc_t0 = 0
        self.index = 0
        gc.callbacks.append(self._on_gc)

    def _on_gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._gc_t0 = _now()
        else:
            self.gc_ns += _now() - self._gc_t0

    def timed(self, label: str, fn):
        def wrapper(*args, **kwargs):
            t0 = _now()
            try:
                return fn(*args, **kwargs)
            finally:
                self.parts[label] = self.parts.get(label, 0) + _now() - t0

        return wrapper


def install(out: Path, stall_ms: float = 25.0) -> None:
    """Wrap ModelRunner.prefill (and, at its first call, the runner's parts) in this process."""
    import torch

    from roseinfer import model_runner

    probe = _Probe(Path(out), stall_ms)
    prefill = model_runner.ModelRunner.prefill
    model_runner.PrefillKV = probe.timed("kv_plan", model_runner.PrefillKV)
    wrapped: set[int] = set()

    def probed(self, seqs):
        if id(self) not in wrapped:  # instance attributes shadow the class's: only this runner pays
            wrapped.add(id(self))
            self.mgr.allocate_prompt = probe.timed("allocate", self.mgr.allocate_prompt)
            self.model.forward = probe.timed("forward_host", self.model.forward)
            self._sample = probe.timed("sample", self._sample)
        probe.parts, probe.gc_ns = {}, 0
        probe.index += 1
        tokens = sum(s.num_tokens for s in seqs)
        probe.stacks.write(
            f"== prefill {probe.index} pid {os.getpid()} at {time.monotonic_ns()} ({tokens} tokens)\n"
        )
        cuda = self.device.type == "cuda"
        start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2)) if cuda else (None, None)
        t0, c0 = _now(), _cpu()
        if cuda:
            start.record()  # the stream reaches it once the step in flight before it is done
        # once a prefill: with repeat=True and an 8 ms limit the server's engine process crashed (session 22)
        faulthandler.dump_traceback_later(probe.stall_s, file=probe.stacks)
        try:
            out = prefill(self, seqs)
        finally:
            faulthandler.cancel_dump_traceback_later()
        if cuda:
            end.record()
        wall, cpu = _now() - t0, _cpu() - c0
        if cuda:
            end.synchronize()
        probe.records.write(
            json.dumps(
                {
                    "index": probe.index,
                    "at_ns": time.monotonic_ns(),
                    "seqs": len(seqs),
                    "tokens": tokens,
                    "computed": out.tokens,
                    "wall_ms": wall / 1e6,
                    "cpu_ms": cpu / 1e6,
                    "gpu_ms": start.elapsed_time(end)
                    if cuda
                    else 0.0,  # from the stream reaching the prefill to its end
                    "gc_ms": probe.gc_ns / 1e6,
                    **{f"{k}_ms": v / 1e6 for k, v in probe.parts.items()},
                    "threads": threading.active_count(),
                }
            )
            + "\n"
        )
        return out

    model_runner.ModelRunner.prefill = probed


def install_from_env() -> None:
    """For a sitecustomize.py: install in every Python process where PREFILL_PROBE names the folder."""
    out = os.environ.get("PREFILL_PROBE")
    if out:
        install(Path(out), float(os.environ.get("PREFILL_PROBE_STALL_MS", "25")))


def drive(args) -> None:
    """A closed loop of `concurrency` requests through an Engine, as `roseprof load` drives the server."""
    import torch

    from roseinfer.config import EngineConfig
    from roseinfer.engine import Engine
    from roseinfer.sequence import SamplingParams

    if args.no_cudnn_sdp:
        torch.backends.cuda.enable_cudnn_sdp(False)
    from roseinfer import kv_context, model_runner

    if args.grouped:  # one attention call per distinct prompt length (before session 22)
        kv_context.pad_buckets = lambda lens: [
            [i for i, m in enumerate(lens) if m == n] for n in dict.fromkeys(lens)
        ]
    if args.cudnn:  # torch's own choice of attention backend (before session 22: cuDNN's on Hopper)
        model_runner.prefill_attention_backends = lambda device: contextlib.nullcontext()
    install(Path(args.out), args.stall_ms)
    gpu = dict(device="cuda", dtype="float16", paged_attn=True, cuda_graph=True)
    cfg = EngineConfig(
        **(gpu if args.device == "cuda" else {}), max_batch_size=64, flight_recorder_steps=4096
    )
    engine = Engine("gpt2", cfg)
    rng = random.Random(0)
    params = SamplingParams(max_new_tokens=args.output_len, ignore_eos=True)
    for phase, n in (("warm", args.requests), ("measured", args.requests)):
        t0, sent, done = time.monotonic(), 0, set()
        while len(done) < n:
            while sent < n and sent - len(done) < args.concurrency:
                m = rng.randint(3, 2 * args.prompt_len) if args.mixed else args.prompt_len
                engine.add_request([rng.randrange(50000) for _ in range(m)], params)
                sent += 1
            done.update(seq.id for seq in engine.step())
        print(f"{phase}: {n} requests in {time.monotonic() - t0:.2f} s", flush=True)
    if args.device != "cuda":
        return
    q = torch.backends.cuda
    print(f"sdp backends: flash {q.flash_sdp_enabled()}, mem_efficient {q.mem_efficient_sdp_enabled()}, "
          f"cudnn {q.cudnn_sdp_enabled()}, math {q.math_sdp_enabled()}")  # fmt: skip
    for g, n in ((1, 16), (4, 16), (8, 30)):
        qkv = torch.randn(g, 12, n, 64, device="cuda", dtype=torch.float16)
        choice = torch._fused_sdp_choice(qkv, qkv, qkv, is_causal=True)
        print(f"sdp choice for [{g}, 12, {n}, 64] causal: {choice}")


def summarize(folder: Path, top: int) -> None:
    for path in sorted(folder.glob("prefill-*.jsonl")):
        recs = [json.loads(line) for line in path.read_text().splitlines() if line]
        if not recs:
            continue
        walls = sorted(r["wall_ms"] for r in recs)
        p50, p90, p99 = (walls[min(len(walls) - 1, int(q * len(walls)))] for q in (0.5, 0.9, 0.99))
        print(f"{path.name}: {len(recs)} prefills, wall p50 {p50:.2f} ms, p90 {p90:.2f}, p99 {p99:.2f}, "
              f"max {walls[-1]:.2f}; over 25 ms: {sum(w > 25 for w in walls)}")  # fmt: skip
        keys = [k for k in recs[0] if k.endswith("_ms")]
        print("  slowest: " + " ".join(["index", "seqs", "tokens", *keys]))
        for r in sorted(recs, key=lambda r: -r["wall_ms"])[:top]:
            print("   ", r["index"], r["seqs"], r["tokens"], " ".join(f"{r.get(k, 0):.2f}" for k in keys))
        typical = sorted(recs, key=lambda r: r["wall_ms"])[len(recs) // 2]
        print("  median:", typical["index"], typical["seqs"], typical["tokens"],
              " ".join(f"{typical.get(k, 0):.2f}" for k in keys))  # fmt: skip
        stacks = path.with_name(path.name.replace("prefill-", "stacks-").replace(".jsonl", ".txt"))
        text = stacks.read_text() if stacks.exists() else ""
        dumps = text.count("Timeout (")
        print(f"  {stacks.name}: {dumps} watchdog dumps")
        # where the stepping thread was at each dump: its innermost frames, counted over every dump
        where: dict[str, int] = {}
        for dump in text.split("Timeout (")[1:]:
            for thread in dump.split("\nThread ")[1:] + dump.split("\nCurrent thread ")[1:]:
                frames = [ln.strip() for ln in thread.splitlines()[1:] if ln.strip().startswith("File ")]
                if any("roseinfer/engine.py" in f for f in frames):
                    key = " <- ".join(f.split("/")[-1] for f in frames[:4])
                    where[key] = where.get(key, 0) + 1
        for key, n in sorted(where.items(), key=lambda kv: -kv[1])[: top * 2]:
            print(f"    {n:4d}  {key}")
        other = [t for t in text.split("\nThread ") if "roseinfer/engine.py" not in t and "File " in t]
        print(f"  threads other than the stepping one seen in dumps: {len(other)}")
        for t in other[:3]:
            print("    " + " | ".join(ln.strip() for ln in t.splitlines()[:4]))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path)
    p.add_argument("--summarize", type=Path)
    p.add_argument("--top", type=int, default=6)
    p.add_argument("--requests", type=int, default=192)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--prompt-len", type=int, default=16)
    p.add_argument("--output-len", type=int, default=96)
    p.add_argument("--stall-ms", type=float, default=25.0)
    p.add_argument("--no-cudnn-sdp", action="store_true")
    p.add_argument("--grouped", action="store_true", help="one attention call per group of equal length")
    p.add_argument("--cudnn", action="store_true", help="leave the attention backend to torch (cuDNN's)")
    p.add_argument("--mixed", action="store_true", help="prompt lengths uniform in [3, 2 x --prompt-len]")
    p.add_argument("--device", default="cuda", help="cuda, or cpu for a smoke run of the probe itself")
    args = p.parse_args()
    if args.summarize:
        summarize(args.summarize, args.top)
        return 0
    if args.out is None:
        p.error("--out or --summarize")
    drive(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
