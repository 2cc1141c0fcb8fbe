"""Hugging Face `GPT2LMHeadModel` with our model's weights, for side-by-side benchmarks and checks."""

from __future__ import annotations

import time

import torch

from roseinfer.model import GPT2
from roseinfer.weights import hf_key_map


def to_hf(model: GPT2):
    """A GPT2LMHeadModel holding exactly `model`'s weights (Conv1D wants [in, out], our Linear has [out, in])."""
    from transformers import GPT2Config, GPT2LMHeadModel

    c = model.cfg
    cfg = GPT2Config(
        vocab_size=c.vocab_size,
        n_positions=c.n_positions,
        n_embd=c.n_embd,
        n_layer=c.n_layer,
        n_head=c.n_head,
        layer_norm_epsilon=c.layer_norm_epsilon,
        eos_token_id=c.eos_token_id,
        bos_token_id=c.eos_token_id,
    )
    ours = {k: v.detach().float().cpu() for k, v in model.state_dict().items()}
    state = {theirs: ours[o].t().contiguous() if t else ours[o] for theirs, o, t in hf_key_map(c.n_layer)}
    state["lm_head.weight"] = ours["wte.weight"]  # tied
    hf = GPT2LMHeadModel(cfg)
    hf.load_state_dict(state, strict=False)  # strict=False: attention bias buffers are not in our state
    param = next(model.parameters())
    return hf.to(device=param.device, dtype=param.dtype).eval()


def hf_generate(hf, prompts: list[list[int]], max_new_tokens: int, batch_size: int) -> dict:
    """Greedy `generate` over the prompts in batches of `batch_size` (left-padded); returns wall time and tokens."""
    device = next(hf.parameters()).device
    tokens = 0
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    sync()
    t0 = time.perf_counter()
    for i in range(0, len(prompts), batch_size):
        chunk = prompts[i : i + batch_size]
        width = max(len(p) for p in chunk)
        ids = torch.zeros(len(chunk), width, dtype=torch.long)
        mask = torch.zeros(len(chunk), width, dtype=torch.long)
        for row, p in enumerate(chunk):
            ids[row, width - len(p) :] = torch.tensor(p)
            mask[row, width - len(p) :] = 1
        with torch.inference_mode():
            out = hf.generate(
                ids.to(device),
                attention_mask=mask.to(device),
                max_new_tokens=max_new_tokens,
                min_new_tokens=max_new_tokens,
                do_sample=False,
                pad_token_id=0,
            )
        tokens += (out.shape[1] - width) * len(chunk)
    sync()
    return {"seconds": time.perf_counter() - t0, "completion_tokens": tokens}
