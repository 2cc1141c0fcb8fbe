"""Hugging Face GPT-2 with a static KV cache and torch.compile: the baseline issue 27 puts beside the engine.

    python scripts/bench_hf_compiled.py --device cuda --batch 1 --new-tokens 256 --repeat 3

Same weights as the engine's (`roseinfer.bench.hf_reference.to_hf` of an `LLM` built with `--hf-model-id`'s
model; random GPT-2 small weights where there is no network), fp16 on CUDA, greedy, every sequence producing
exactly --new-tokens tokens. `generate(cache_implementation="static")` compiles the decode forward itself
(transformers' compile config; "reduce-overhead": CUDA graphs). Decode tokens/s = batch x (new tokens - 1) /
(time of a full generate - time of a one-token generate), medians over --repeat runs after one warm-up of each
length (the compile happens there). Prints one line per figure and the floor at the device's copy bandwidth.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from roseinfer import LLM
from roseinfer.bench.hf_reference import to_hf
from roseinfer.bench.roofline import copy_bandwidth, weight_bytes


def timed_generate(hf, ids: torch.Tensor, new_tokens: int) -> float:
    if ids.is_cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = hf.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        do_sample=False,
        cache_implementation="static",
        pad_token_id=0,
    )
    if ids.is_cuda:
        torch.cuda.synchronize()
    assert out.shape[1] == ids.shape[1] + new_tokens
    return time.perf_counter() - t0


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--hf-model-id", default="gpt2")
    p.add_argument("--device", default="cuda")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--prompt-len", type=int, default=8)
    p.add_argument("--new-tokens", type=int, default=256)
    p.add_argument("--repeat", type=int, default=3)
    a = p.parse_args()
    dtype = "float16" if a.device == "cuda" else "float32"
    llm = LLM(a.hf_model_id, device=a.device, dtype=dtype, max_batch_size=a.batch)
    model = llm.engine.model
    hf = to_hf(model)
    del llm
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.cfg.vocab_size, (a.batch, a.prompt_len), generator=g).to(a.device)
    with torch.inference_mode():
        timed_generate(hf, ids, 1)  # warm-up: compile
        timed_generate(hf, ids, a.new_tokens)
        full = statistics.median(timed_generate(hf, ids, a.new_tokens) for _ in range(a.repeat))
        first = statistics.median(timed_generate(hf, ids, 1) for _ in range(a.repeat))
    decode_s = full - first
    steps = a.new_tokens - 1
    tok_s = a.batch * steps / decode_s
    print(f"HF static cache + torch.compile, batch {a.batch}, {a.new_tokens} new tokens, {dtype}")
    print(f"decode: {tok_s:,.0f} tok/s, {decode_s / steps * 1e6:.1f} us per step")
    if a.device == "cuda":
        bw = copy_bandwidth(torch.device(a.device))
        floor_us = weight_bytes(model) / bw * 1e6
        print(
            f"HBM floor (weights at {bw / 1e9:,.0f} GB/s): {floor_us:.1f} us per step; HF at "
            f"{100 * floor_us / (decode_s / steps * 1e6):.1f}% of it"
        )


if __name__ == "__main__":
    main()
