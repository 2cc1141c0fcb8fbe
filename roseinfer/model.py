"""Our own GPT-2 forward. Attention reads and writes the paged KV cache through a context object.

The model knows nothing of blocks: per layer it hands the new keys/values to `kv.append(layer, k, v)` and asks
`kv.attend(layer, q, k, v)` for the attention output. `roseinfer.kv_context` implements both for prefill
(packed variable-length sequences) and decode (one token per sequence).

The forward opens a region around each of its parts (`roseinfer.tracing`: embedding, per layer attention,
LayerNorms and MLP, then lm_head). Eagerly they split a step's host and GPU time; while a decode step is captured
in a CUDA graph they are open on the capturing thread as each kernel's graph node is made, which is what lets a
profiler put every replayed kernel back in its part (roseprof/analysis/graphs.py). With tracing off each costs
one attribute check and a no-op context manager.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Protocol

import torch
import torch.nn as nn
import torch.nn.functional as F

from roseinfer.config import ModelConfig
from roseinfer.kernels.split_sum import SplitK, joined
from roseinfer.linears import (
    cuda_attn,
    cuda_attn_applies,
    cuda_mlp,
    cuda_mlp_applies,
    embedding_gather_applies,
    linear,
    linear_to_residual,
    lm_head_gemv_applies,
    norm_gemv_applies,
    norm_linear,
    norm_lm_head,
)
from roseinfer.tracing import ATTENTION, EMBEDDING, KV_APPEND, LAYERNORM, LM_HEAD, MLP, region


class KVContext(Protocol):
    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None: ...

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor: ...


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        c = cfg.n_embd
        self.n_head = cfg.n_head
        self.n_positions = cfg.n_positions
        self.head_dim = cfg.head_dim
        self.ln_1 = nn.LayerNorm(c, eps=cfg.layer_norm_epsilon)
        self.c_attn = nn.Linear(c, 3 * c)
        self.attn_proj = nn.Linear(c, c)
        self.ln_2 = nn.LayerNorm(c, eps=cfg.layer_norm_epsilon)
        self.c_fc = nn.Linear(c, 4 * c)
        self.mlp_proj = nn.Linear(4 * c, c)
        # Tensor parallelism (`roseinfer.sharding`): this rank's heads and MLP columns only, and the group whose
        # all-reduce sums the row-parallel projections. None on one device: no collective, nothing else changes.
        self.tp = None

    def forward(
        self,
        x: torch.Tensor,
        delta: torch.Tensor,
        layer: int,
        kv: KVContext,
        fused: bool,
        gelu_epilogue: bool = True,
        index: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """x: residual stream [T, C] before the previous branch's output delta [T, C] is added (T = tokens in
        the batch: one per sequence in decode, all new prompt tokens in prefill; for the first block the token
        and position embeddings). The block adds them and applies ln_1 (`residual_layer_norm`, or at one row the
        c_attn GEMV's prologue: `roseinfer.linears.norm_linear`), likewise before the MLP. Returns the residual
        stream after attention and the MLP branch's output, not yet added (after the one-row CUDA MLP a float32
        split sum [SPLIT_ROWS, C] whose rows add up to it: `roseinfer.kernels.split_sum`). With tensor parallelism H
        is this rank's heads and each projection's output is summed over the ranks (at one row with the fused
        all-reduce: the ranks' partial sums as words [W, C / 2], which the next norm GEMV waits for and adds,
        `roseinfer.fused_allreduce`). index: (token ids, positions) [1] each, for the first block at one token where
        `embedding_gather_applies`: x and delta are then the embedding tables, and the c_attn GEMV's prologue
        gathers the rows. In the CUTLASS GEMM's buckets, attn_proj's and mlp_proj's outputs may be their K
        parts (`roseinfer.kernels.split_sum.SplitK`, `roseinfer.linears.linear_to_residual`), which the add +
        LayerNorm after them sums."""
        t = x.shape[0] if index is None else 1
        in_gemv = index is not None or (fused and norm_gemv_applies(x, delta, self.c_attn))
        if in_gemv and cuda_attn_applies(x, delta, self, kv, self.n_positions, index):
            with region(ATTENTION):  # ln_1, c_attn, the KV append, attention and attn_proj in one CUDA kernel
                x, a = cuda_attn(x, delta, self, layer, kv, index)  # [1, C], [1, C] float32
        else:
            x, a = self._attention(x, delta, layer, kv, fused, in_gemv, t, index)
        return self._mlp(x, a, layer, fused, gelu_epilogue)

    def _attention(self, x, delta, layer: int, kv: KVContext, fused: bool, in_gemv: bool, t: int, index):
        """The attention half as separate kernels: (residual [T, C], attn_proj's output [T, C] or its K parts
        (`SplitK`), or with the fused all-reduce the ranks' partial sums of it as words [W, C / 2])."""
        wait = wait_for_pushed(self.tp, delta, in_gemv)
        if not in_gemv:
            with region(LAYERNORM):
                x, h = residual_layer_norm(x, delta, self.ln_1, fused)
        with region(ATTENTION):
            if in_gemv:
                x, qkv = norm_linear(
                    x, delta, self.ln_1, self.c_attn, index=index, wait=wait
                )  # [T, C], [T, 3C]
            else:
                qkv = linear(h, self.c_attn)  # [T, 3C]
            qkv = qkv.view(t, 3, self.n_head, self.head_dim)  # [T, 3, H, D]
            q, k, v = qkv.unbind(1)  # each [T, H, D]
            with region(KV_APPEND):
                kv.append(layer, k, v)
            o = kv.attend(layer, q, k, v).reshape(t, -1)  # [T, H * D]
            a = (
                linear_to_residual(o, self.attn_proj)
                if self.tp is None
                else self.tp.row_parallel(o, self.attn_proj, 2 * layer if fused else None)
            )  # [T, C]
        return x, a

    def _mlp(self, x, a, layer: int, fused: bool, gelu_epilogue: bool):
        """The MLP half: (residual [T, C], the MLP's output [T, C] or mlp_proj's K parts (`SplitK`), or the CUDA
        kernel's split sum [SPLIT_ROWS, C])."""
        in_gemv = fused and norm_gemv_applies(x, a, self.c_fc)
        if in_gemv and self.tp is None and cuda_mlp_applies(x, a, self.ln_2, self.c_fc, self.mlp_proj):
            with region(MLP):  # ln_2, c_fc, GELU and mlp_proj in one CUDA kernel; its output in float32
                return cuda_mlp(x, a, self, layer)
        wait = wait_for_pushed(self.tp, a, in_gemv)
        if not in_gemv:
            with region(LAYERNORM):
                x, h = residual_layer_norm(x, a, self.ln_2, fused)
        with region(MLP):
            if in_gemv:
                x, g = norm_linear(x, a, self.ln_2, self.c_fc, gelu=True, wait=wait)  # [T, C], [T, 4C]
            else:
                g = linear_gelu(h, self.c_fc, gelu_epilogue)  # [T, 4C] (this rank's columns with TP)
            if self.tp is None:
                return x, linear_to_residual(g, self.mlp_proj)
            # the fused all-reduce only where its reader is the next norm GEMV (`fused`: at one row the model's
            # LayerNorms run inside the GEMVs)
            return x, self.tp.row_parallel(g, self.mlp_proj, 2 * layer + 1 if fused else None)


def wait_for_pushed(tp, delta: torch.Tensor, reader_waits: bool):
    """What the norm GEMV reading `delta` waits on, where delta is a fused all-reduce's words (None: nothing to wait
    for). Only that GEMV waits (`reader_waits`): a projection pushes only where its reader is one
    (`fused_allreduce_applies`, and the model's `fused`), which this holds it to."""
    wait = tp.wait_for(delta) if tp is not None else None
    if wait is not None and not reader_waits:
        raise RuntimeError("a fused all-reduce's rows reached a reader that does not wait for them")
    return wait


def residual_layer_norm(
    x: torch.Tensor, delta: torch.Tensor | SplitK, ln: nn.LayerNorm, fused: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """(x + delta, ln(x + delta)), both [T, C]. fused: one Triton kernel instead of torch's add and LayerNorm,
    for where a launch costs nothing (inside CUDA graphs; from Python a Triton launch costs more than two torch
    ones). A split sum delta (the CUDA MLP's output, `roseinfer.kernels.split_sum`) is joined first: this add
    would broadcast its rows. A K split's parts (`SplitK`: attn_proj's or mlp_proj's on the CUTLASS GEMM) the
    Triton kernel adds as it reads them; the unfused path joins them too."""
    if not (fused and isinstance(delta, SplitK)):
        delta = joined(x, delta)
    if fused:
        from roseinfer.kernels.add_layernorm import add_layer_norm_triton

        return add_layer_norm_triton(x, delta, ln.weight, ln.bias, ln.eps)
    x = x + delta
    return x, ln(x)


def linear_gelu(x: torch.Tensor, lin: nn.Linear, epilogue: bool = True) -> torch.Tensor:
    """gelu_tanh(lin(x)) [T, N] (GPT-2's gelu_new) as one kernel where one exists: the small-batch GEMV's
    epilogue or cuBLASLt's GELU epilogue in half precision on CUDA; elsewhere (or with epilogue=False) a GEMM and
    torch's GELU (on CPU `_addmm_activation` uses the exact erf form, which GPT-2 does not). `roseinfer.linears`
    chooses."""
    return linear(x, lin, gelu=True, gelu_epilogue=epilogue)


class GPT2(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.n_positions, cfg.n_embd)
        self.h = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd, eps=cfg.layer_norm_epsilon)
        self.lm_head_weight: torch.Tensor | None = None  # [V_PAD, C] once pad_lm_head() ran

    def pad_lm_head(self, multiple: int = 64) -> None:
        """Keep the tied embedding inside a [V_PAD, C] buffer (V rounded up to `multiple`, extra rows zero) and
        let the lm_head GEMM use all of it, slicing the padding's logits off.

        GPT-2's 50,257 rows make the logits' row length odd; cuBLAS then falls back to a slow sm75 kernel, which
        took 106 us of a 1.5 ms decode step on an H100 (docs/BENCHMARKS.md). The embedding stays a view of the
        buffer, so no weight is stored twice.
        """
        v, c = self.wte.weight.shape
        padded_v = -(-v // multiple) * multiple
        if padded_v == v:
            return
        w = self.wte.weight
        padded = torch.zeros(padded_v, c, dtype=w.dtype, device=w.device)
        padded[:v] = w.detach()
        self.wte.weight = nn.Parameter(padded[:v], requires_grad=False)
        self.lm_head_weight = padded

    @property
    def head_weight(self) -> torch.Tensor:
        """The lm_head's weight: the tied embedding [V, C], or its padded buffer [V_PAD, C] once pad_lm_head() ran."""
        return self.wte.weight if self.lm_head_weight is None else self.lm_head_weight

    def fused_reader_columns(self) -> list[int]:
        """The output columns of each fused all-reduce slot's reader (`roseinfer.fused_allreduce`), in slot order:
        per layer the attention's slot, which its c_fc reads, then the MLP's, which the next layer's c_attn reads
        (the last layer's: the lm_head)."""
        nexts = [block.c_attn.weight.shape[0] for block in self.h[1:]] + [self.head_weight.shape[0]]
        return [n for block, nxt in zip(self.h, nexts) for n in (block.c_fc.weight.shape[0], nxt)]

    def init_random(self, seed: int) -> None:
        """GPT-2's initialisation (normal 0.02, residual projections scaled), reproducible from `seed`."""
        g = torch.Generator().manual_seed(seed)
        resid_std = 0.02 / math.sqrt(2 * self.cfg.n_layer)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("bias"):
                    p.zero_()
                elif "ln_" in name:
                    p.fill_(1.0)
                else:
                    std = resid_std if name.endswith(("attn_proj.weight", "mlp_proj.weight")) else 0.02
                    p.copy_(torch.randn(p.shape, generator=g) * std)

    def forward(
        self,
        ids: torch.Tensor,
        positions: torch.Tensor,
        kv: KVContext,
        last: torch.Tensor | None = None,
        fused: bool = False,
        gelu_epilogue: bool = True,
        logits_out: torch.Tensor | None = None,
    ):
        """ids, positions: [T]. Returns logits [T, V], or [S, V] for the rows in `last` (one per sequence).
        fused: residual adds and LayerNorms as one Triton kernel each (`residual_layer_norm`; CUDA graphs), or
        at one row inside the c_attn / c_fc GEMV where `norm_gemv_applies` (and the embedding lookups inside the
        first block's where `embedding_gather_applies`, ln_f inside the lm_head's where `lm_head_gemv_applies`).
        gelu_epilogue: False runs the GELU as its own kernel (`linear_gelu`; for before/after measurements).
        logits_out: [T, V_PAD] the lm_head GEMM writes into (the logits returned are a view of it)."""
        *_, logits = self.steps(ids, positions, kv, last, fused, gelu_epilogue, logits_out)
        return logits

    def steps(
        self,
        ids: torch.Tensor,
        positions: torch.Tensor,
        kv: KVContext,
        last: torch.Tensor | None = None,
        fused: bool = False,
        gelu_epilogue: bool = True,
        logits_out: torch.Tensor | None = None,
    ) -> Iterator[torch.Tensor | None]:
        """`forward` one block at a time: yields None after each block's launches, then the logits. Two halves of
        a batch interleave their launches on two streams this way (`roseinfer.cuda_graphs`)."""
        blocks = self.h
        index = None
        if fused and embedding_gather_applies(ids, self.wte.weight, self.wpe.weight, blocks[0].c_attn):
            # one token: the first block's c_attn kernel gathers its two rows from the tables (no embedding kernels)
            x, delta, index = self.wte.weight, self.wpe.weight, (ids, positions)
        else:
            with region(EMBEDDING):
                x, delta = self.wte(ids), self.wpe(positions)  # [T, C] each: the first block adds them
        for layer, block in enumerate(blocks):
            x, delta = block(x, delta, layer, kv, fused, gelu_epilogue, index if layer == 0 else None)
            yield None
        if last is not None:  # (never a fused all-reduce's words: indexing them would pick a rank's row)
            wait_for_pushed(blocks[-1].tp, delta, reader_waits=False)
            x = x[last]  # [S, C]: only the tokens whose next token we sample
            delta = delta.rows(last) if isinstance(delta, SplitK) else delta[last]
        head = self.head_weight  # tied: [V or V_PAD, C]
        in_gemv = fused and lm_head_gemv_applies(x, delta, head)
        wait = wait_for_pushed(blocks[-1].tp, delta, in_gemv)
        if in_gemv:  # one row: ln_f in the lm_head GEMV's prologue
            assert logits_out is None, "the one-row lm_head GEMV writes a buffer of its own"
            with region(LM_HEAD):
                logits = norm_lm_head(x, delta, self.ln_f, head, self.cfg.vocab_size, wait=wait)  # [1, V_PAD]
        else:
            with region(LAYERNORM):
                _, h = residual_layer_norm(x, delta, self.ln_f, fused)
            with region(LM_HEAD):
                logits = F.linear(h, head) if logits_out is None else torch.mm(h, head.t(), out=logits_out)
        yield logits[:, : self.cfg.vocab_size]  # [*, V] (of [*, V_PAD])
