"""The HBM-bandwidth floor of a decode run: the time it would take if every decode step only streamed the
weights and the KV cache it must read once, at the device's measured copy bandwidth.

With tensor parallelism the floor is one GPU's: its shard of the weights (the replicated embedding included) and
its heads' keys and values.

Per decode step the model reads every weight once (the tied embedding counted once, as the lm_head; the
position table is indexed, not streamed) and, per sequence, the keys and values of its past tokens in every
layer. Writes of the new token's K/V and the activations are left out: they are a few hundred KB per step.
"""

from __future__ import annotations

import torch

from roseinfer.model import GPT2


def weight_bytes(model: GPT2) -> int:
    return sum(p.numel() * p.element_size() for name, p in model.named_parameters() if name != "wpe.weight")


def kv_bytes_per_token(model: GPT2) -> int:
    """Keys and values of one past token over every layer, this rank's heads only (all of them on one device)."""
    p = next(model.parameters())
    return model.cfg.n_layer * 2 * model.h[0].n_head * model.cfg.head_dim * p.element_size()


def copy_bandwidth(device: torch.device, nbytes: int = 1 << 30, reps: int = 10) -> float:
    """Bytes per second moved by a device-to-device copy (read plus write), median of `reps` copies."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    del src, dst
    return 2 * nbytes / sorted(times)[len(times) // 2]


def decode_floor_seconds(model: GPT2, decode_steps: int, kv_tokens_read: int, bandwidth: float) -> float:
    """Floor of a run's decode time: `decode_steps` weight reads plus `kv_tokens_read` past tokens' K/V."""
    return (decode_steps * weight_bytes(model) + kv_tokens_read * kv_bytes_per_token(model)) / bandwidth


def hbm_floor(engine) -> dict:
    """What `roseinfer.bench.roofline` needs to put each run against the HBM-bandwidth floor of its decode steps."""
    bandwidth = copy_bandwidth(engine.device)
    return {
        "bandwidth": bandwidth,
        "weight_bytes": weight_bytes(engine.model),
        "kv_bytes_per_token": kv_bytes_per_token(engine.model),
        "seconds": lambda run: decode_floor_seconds(
            engine.model, run["decode_steps"], run["decode_kv_tokens"], bandwidth
        ),
    }
