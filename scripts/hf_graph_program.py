"""A program that is not the engine: Hugging Face GPT-2 with NVTX ranges from forward hooks, its forward captured
once in a CUDA graph and replayed.

It is the shape of many users' own scripts: a `transformers` model (GPT-2 small's shape, random weights, no
download), ranges pushed and popped by forward pre/post hooks (`hf.forward`, `hf.block.N`, `hf.block.N.attn`,
`hf.block.N.mlp`, `hf.block.N.ln_1`/`ln_2`, `hf.ln_f`, `hf.lm_head`), a few eager forwards (the warm-up that CUDA
graph capture needs, on a side stream), then one capture of the forward (`hf.capture`) and N replays. Each eager
forward and each replay is one step, an NVTX range `hf.step`, ending with the next token read back to the host
(as a decode loop would). With the hooks the eager forwards and the capture have every module's range; the
replays have only `hf.step` around `cudaGraphLaunch`: roseprof puts each replayed kernel back in the region that
was open when its graph node was captured.

Under `roseprof torch` (ROSEPROF_TORCH_TRACE_DIR set) the hooks also open `record_function` spans, each step
ends with `prof.step()` (a `ProfilerStep#N` range) and the trace is written into that folder as trace.json.gz.

    roseprof nsys --name hf-graph --trace cuda,nvtx -- python3 scripts/hf_graph_program.py
    roseprof torch --name hf-graph -- python3 scripts/hf_graph_program.py

On a machine without CUDA it runs the eager forwards alone (no graph), for a quick check of the hooks.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel

TRACE_DIR_ENV = "ROSEPROF_TORCH_TRACE_DIR"


class Ranges:
    """NVTX ranges (and, under torch.profiler, record_function spans) pushed and popped by name."""

    def __init__(self, nvtx: bool, record_function: bool) -> None:
        self.nvtx = nvtx
        self.record_function = record_function
        self.spans: list = []

    def push(self, name: str) -> None:
        if self.nvtx:
            torch.cuda.nvtx.range_push(name)
        if self.record_function:
            span = torch.autograd.profiler.record_function(name)
            span.__enter__()
            self.spans.append(span)

    def pop(self) -> None:
        if self.record_function:
            self.spans.pop().__exit__(None, None, None)
        if self.nvtx:
            torch.cuda.nvtx.range_pop()

    @contextlib.contextmanager
    def range(self, name: str):
        self.push(name)
        try:
            yield
        finally:
            self.pop()


def hook_ranges(model: GPT2LMHeadModel, ranges: Ranges) -> None:
    """A range around each named module's forward, from a forward pre-hook (push) and a forward hook (pop)."""
    named = {model: "hf.forward", model.transformer.ln_f: "hf.ln_f", model.lm_head: "hf.lm_head"}
    named[model.transformer.wte] = "hf.wte"
    named[model.transformer.wpe] = "hf.wpe"
    for i, block in enumerate(model.transformer.h):
        named[block] = f"hf.block.{i}"
        for part in ("ln_1", "attn", "ln_2", "mlp"):
            named[getattr(block, part)] = f"hf.block.{i}.{part}"
    for module, name in named.items():
        module.register_forward_pre_hook(lambda _m, _a, name=name: ranges.push(name))
        module.register_forward_hook(lambda _m, _a, _o: ranges.pop())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--eager", type=int, default=3, help="eager forwards before the capture (the warm-up)")
    p.add_argument("--replays", type=int, default=60)
    p.add_argument("--layers", type=int, default=12)
    args = p.parse_args()

    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    torch.manual_seed(0)
    config = GPT2Config(n_layer=args.layers, n_embd=768, n_head=12, n_positions=1024, vocab_size=50257)
    model = GPT2LMHeadModel(config).to(device=device, dtype=torch.float16 if cuda else torch.float32).eval()
    trace_dir = os.environ.get(TRACE_DIR_ENV)
    ranges = Ranges(nvtx=cuda, record_function=trace_dir is not None)
    hook_ranges(model, ranges)

    input_ids = torch.randint(0, config.vocab_size, (args.batch, args.seq), device=device)  # [B, T], static
    # [1, T], static: no arange inside the graph
    position_ids = torch.arange(args.seq, device=device).unsqueeze(0)

    def forward() -> torch.Tensor:
        return model(input_ids=input_ids, position_ids=position_ids, use_cache=False).logits  # [B, T, V]

    profiler = contextlib.nullcontext()
    if trace_dir is not None:
        kinds = torch.profiler.ProfilerActivity
        steps = args.eager + (args.replays if cuda else 0)
        # A schedule, so that prof.step() records ProfilerStep#N spans: every step is active.
        profiler = torch.profiler.profile(
            activities=[kinds.CPU] + ([kinds.CUDA] if cuda else []),
            schedule=torch.profiler.schedule(wait=0, warmup=0, active=steps, repeat=1),
            on_trace_ready=lambda p: p.export_chrome_trace(os.path.join(trace_dir, "trace.json.gz")),
        )

    tokens: list[list[int]] = []
    t0 = time.perf_counter()
    with torch.inference_mode(), profiler as prof:

        def step(run) -> None:
            with ranges.range("hf.step"):
                logits = run()
                tokens.append(logits[:, -1].argmax(-1).tolist())  # the host reads the next tokens back
            if prof is not None:
                prof.step()

        side = torch.cuda.Stream() if cuda else None
        with torch.cuda.stream(side) if cuda else contextlib.nullcontext():
            # warm-up on a side stream, as torch.cuda.graphs asks before a capture
            for _ in range(args.eager):
                step(forward)
        if cuda:
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with ranges.range("hf.capture"), torch.cuda.graph(graph):
                static_logits = forward()
            for _ in range(args.replays):
                step(lambda: (graph.replay(), static_logits)[1])
            torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    replays = args.replays if cuda else 0
    print(f"{len(tokens)} steps ({args.eager} eager, {replays} graph replays) in {dt:.2f} s")


if __name__ == "__main__":
    main()
