"""Megatron-style tensor-parallel sharding of our GPT-2: a rank keeps its heads and its MLP columns.

Per layer, with rank r holding heads [h0, h1) and MLP columns [f0, f1) (`distributed.shard_range`; an uneven
split gives the first ranks one more):
- attention: c_attn is column-parallel (its Q, K and V rows of those heads: [3 * Hr * D, C]), so each rank
  attends over its own heads and its KV cache holds only them; attn_proj is row-parallel (the input columns of
  those heads: [C, Hr * D]), each rank's output a partial sum, then one all-reduce;
- MLP: c_fc column-parallel ([F_r, C], its bias shard), the GELU local, mlp_proj row-parallel ([C, F_r]), then
  one all-reduce.
A row-parallel projection's bias is added once, by rank 0 before the sum (inside its GEMM: no extra kernel).
LayerNorms, the embeddings and the tied lm_head are replicated: every rank then computes the same logits and
picks the same token with no further collective (a vocab-parallel lm_head would need a distributed argmax and
sampling; what it would save is measured in docs/PARALLELISM.md).

The full weights are built (or loaded) on the host, then cut, so each device receives only its shard.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from roseinfer import distributed
from roseinfer.config import resolve_model_config
from roseinfer.distributed import TPGroup, shard_range
from roseinfer.model import GPT2


def check_ranks(model: str, world_size: int, device: str) -> None:
    """What fails alike on every rank, said once before any rank starts: too many ranks for the heads, too few
    GPUs, no NCCL (or gloo)."""
    check_shardable(resolve_model_config(model).n_head, world_size, model)
    distributed.check_devices(world_size, distributed.torch_device_type(device))


def check_shardable(n_head: int, world_size: int, model: str) -> None:
    if world_size > n_head:
        raise ValueError(
            f"tensor_parallel_size {world_size} is more than {model}'s {n_head} attention heads: every rank needs "
            "at least one head"
        )


def _keep(lin: nn.Linear, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
    lin.weight = nn.Parameter(weight.contiguous(), requires_grad=False)
    lin.bias = None if bias is None else nn.Parameter(bias.contiguous(), requires_grad=False)


@torch.no_grad()
def shard_gpt2(net: GPT2, tp: TPGroup) -> None:
    """Cut `net`'s blocks to rank tp.rank's share, in place, and give each block the group for its all-reduces."""
    cfg = net.cfg
    d, c = cfg.head_dim, cfg.n_embd
    h0, h1 = shard_range(cfg.n_head, tp.world_size, tp.rank)
    f0, f1 = shard_range(4 * c, tp.world_size, tp.rank)
    first = tp.rank == 0
    for block in net.h:
        # [3C, C] viewed [3, H, D, C]: the rank's heads of each of Q, K, V
        w = block.c_attn.weight.view(3, cfg.n_head, d, c)[:, h0:h1].reshape(-1, c)  # [3 * Hr * D, C]
        b = block.c_attn.bias.view(3, cfg.n_head, d)[:, h0:h1].reshape(-1)  # [3 * Hr * D]
        _keep(block.c_attn, w, b)
        _keep(
            block.attn_proj,
            block.attn_proj.weight[:, h0 * d : h1 * d],
            block.attn_proj.bias if first else None,
        )
        _keep(block.c_fc, block.c_fc.weight[f0:f1], block.c_fc.bias[f0:f1])  # [F_r, C], [F_r]
        _keep(
            block.mlp_proj, block.mlp_proj.weight[:, f0:f1], block.mlp_proj.bias if first else None
        )  # [C, F_r]
        block.n_head = h1 - h0
        block.tp = tp
