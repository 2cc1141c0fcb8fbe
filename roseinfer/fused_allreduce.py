"""The decode step's all-reduce fused into its GEMVs (`EngineConfig.tp_allreduce="fused"`, CUDA, one node).

At batch 1 a row-parallel projection's all-reduce sums a few KB ([1, C]), so its cost is latency: NCCL's kernel
(~6 us a collective inside a graph, 96 a gpt2-xl step at TP=2) and the break it makes in the chain of programmatic
dependent launches (docs/BENCHMARKS.md, "Session 8"). Here there is no collective kernel:
- the row-parallel GEMV (attn_proj, mlp_proj) writes its partial sum, rounded to the activation dtype, into its
  rank's row of the layer's slot in every rank's buffer (the others' over NVLink: symmetric memory maps them),
  two values to an 8-byte word whose other half is the step's epoch (`gemv_triton(.., push=)`). A word is one
  store, so a reader that sees the epoch sees the values: no fence, flag or counter (NCCL's LL protocol does the
  same with 4-byte flags);
- the GEMV after it, the next LayerNorm's (c_fc, the next layer's c_attn, or the lm_head with ln_f), reads every
  rank's row in its prologue until all its words carry the epoch its own rank wrote, then adds the rows in rank
  order as its delta (`norm_gemv_triton(.., wait=)`): every rank adds the same values in the same order and gets
  the same bits, which the ranks' shared schedule needs (docs/PARALLELISM.md).

A slot is (layer, attention or MLP): 2 x n_layer, each [W, C / 2] words. A word's epoch is the count of its
slot's pushes: the producer reads it from its own row and adds one, so nothing is reset between steps. A slot is
written again only in the next step, after every rank has read it: a rank reaches slot s of step k+1 only after
the others pushed their rows for every slot before it, which each did after reading slot s of step k.

It applies where the readers are those GEMVs: one row, inside the captured step's `small_batch_gemv(..,
norm_prologue=True, lm_head=True)` (`roseinfer.linears.fused_allreduce_applies`); everywhere else (prefill, decode
batches above one) the projection's all-reduce is NCCL's, as without it. A wait that outlasts `tp_timeout_s` (a
rank died) ends the kernel with a trap, which the host sees as a CUDA error.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import torch


def enable_symm_mem(group_name: str) -> None:
    """Symmetric memory for the group (needed before torch 2.9, a no-op warning after)."""
    import warnings

    import torch.distributed._symmetric_memory as symm_mem

    if hasattr(symm_mem, "enable_symm_mem_for_group"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            symm_mem.enable_symm_mem_for_group(group_name)


class PushTarget(NamedTuple):
    """Where a producer GEMV pushes (`roseinfer.kernels.gemv.gemv_triton(.., push=)`)."""

    rows: torch.Tensor  # [W, C / 2] int64: the slot's words in this GPU's buffer (what the reader reads)
    row_addrs: torch.Tensor  # [W] int64: every rank's buffer, its address on this GPU
    row_offset: int  # words from a buffer's start to this rank's row of the slot
    rank: int


class PushedRows(NamedTuple):
    """What a reader GEMV waits on (`roseinfer.kernels.norm_gemv.norm_gemv_triton(.., wait=)`): the epoch in its own
    rank's row, in every rank's. stamps: where the reader records its regions ([NSTAMP, programs] int64, a view of
    `ReaderStamps.stamp_rows`), or None."""

    rank: int
    timeout_ns: int
    stamps: torch.Tensor | None = None


class ReaderStamps:
    """The readers' regions (issue 50): with a profiler on, each program of the GEMV that reads slot s writes
    NSTAMP %globaltimer stamps (`roseinfer.kernels.gemv.NSTAMP`) into its columns of `stamp_rows`, a step's
    every reader side by side: [NSTAMP, sum of their programs], slot s's columns from offsets[s]. Stamp-major, so
    that a step's copy is one and each stamp reduces over a slot's programs in one numpy call (`launch_bounds`).
    `programs`: each slot's reader's grid. `launched`: whether a reader has used them (the recorder writes no
    step that ran none, `roseinfer.cuda_ext.recorder`)."""

    def __init__(self, programs: list[int], device) -> None:
        from roseinfer.kernels.gemv import NSTAMP

        if not programs or min(programs) < 1:
            raise ValueError(f"every slot's reader has programs: {programs}")
        self.programs = list(programs)
        self.offsets = [sum(self.programs[:s]) for s in range(len(self.programs))]
        self.stamp_rows = torch.zeros(NSTAMP, sum(self.programs), dtype=torch.int64, device=device)
        self.launched = False

    def for_slot(self, slot: int) -> torch.Tensor:
        """[NSTAMP, programs] the stamps of slot `slot`'s reader (rows stamp_rows' width apart)."""
        start = self.offsets[slot]
        return self.stamp_rows[:, start : start + self.programs[slot]]

    def launch_bounds(self, by_stamp: np.ndarray) -> np.ndarray:
        """A step's stamps [NSTAMP, sum of programs] (on the host) -> each slot's reader's phase bounds
        [slots, NSTAMP]: its earliest program's start; the end of its wait and of its peers, each an event every
        program waits for (the kernel in front completing, the last row arriving), where its first program got past
        it; its last program's end. A grid of more programs than fit at once (the lm_head's, 6,288 at gpt2-xl's
        vocabulary) has programs that start after both events, and pass them at once: the last program past
        them would put the GEMV's later waves into the wait (`stamps.phase_bounds` takes the last, for kernels
        whose blocks are all resident)."""
        bounds = np.minimum.reduceat(by_stamp, self.offsets, axis=1)  # [NSTAMP, S]
        bounds[-1] = np.maximum.reduceat(by_stamp[-1], self.offsets)
        return np.ascontiguousarray(bounds.T)  # [S, NSTAMP]


class FusedAllReduce:
    """The buffers of a TP group's fused all-reduces: `slots` of [W, width / 2] words, in one symmetric-memory
    buffer per rank that every other rank has mapped."""

    def __init__(self, tp, slots: int, width: int, device: torch.device, timeout_s: float):
        import torch.distributed as dist
        import torch.distributed._symmetric_memory as symm_mem

        if width % 2:
            raise ValueError(f"the fused all-reduce packs two values a word: width {width} is odd")
        self.rank, self.world_size, self.slots, self.words = tp.rank, tp.world_size, slots, width // 2
        self.timeout_ns = int(timeout_s * 1e9)
        buffer = symm_mem.empty(slots * tp.world_size * self.words, dtype=torch.int64, device=device)
        enable_symm_mem(tp.group.group_name)
        handle = symm_mem.rendezvous(buffer, tp.group.group_name)  # collective: every rank maps every other's
        self.rows = buffer.view(slots, tp.world_size, self.words)  # [S, W, C / 2]
        self.rows.zero_()  # epoch 0: the first push writes 1
        self.row_addrs = torch.tensor(handle.buffer_ptrs, dtype=torch.int64, device=device)  # [W]
        self.stamps: ReaderStamps | None = None  # `record_readers`
        # every rank's buffer is zero before any rank pushes
        torch.cuda.synchronize(device)
        dist.barrier(group=tp.cpu_group)

    def project(self, x: torch.Tensor, lin, slot: int) -> torch.Tensor:
        """lin(x)'s partial sum pushed into `slot` (x [1, K_r], lin's weight [C, K_r]) -> the slot's words
        [W, C / 2] on this GPU, which only a reader given `wait_for(words)` may read."""
        from roseinfer.kernels.gemv import gemv_triton

        offset = (slot * self.world_size + self.rank) * self.words
        target = PushTarget(self.rows[slot], self.row_addrs, offset, self.rank)
        return gemv_triton(x, lin.weight, lin.bias, push=target)

    def wait_for(self, delta: torch.Tensor) -> PushedRows | None:
        """What a reader of `delta` waits on, where delta is a slot's words from `project`; None otherwise."""
        rows = self.rows
        if delta.dtype != rows.dtype or delta.shape != rows.shape[1:] or delta.device != rows.device:
            return None
        offset = delta.data_ptr() - rows.data_ptr()
        size = rows[0].numel() * rows.element_size()
        if offset < 0 or offset % size or offset // size >= self.slots:
            return None
        if self.stamps is None:
            return PushedRows(self.rank, self.timeout_ns)
        self.stamps.launched = True
        return PushedRows(self.rank, self.timeout_ns, self.stamps.for_slot(offset // size))

    def record_readers(self, columns: list[int]) -> ReaderStamps:
        """The readers record their regions from now on (a profiled engine: `roseinfer.cuda_graphs`). columns: the
        output columns of each slot's reader, in slot order (`GPT2.fused_reader_columns`)."""
        from roseinfer.kernels.norm_gemv import pick_norm_config

        if len(columns) != self.slots:
            raise ValueError(f"{self.slots} slots need as many readers, not {len(columns)}")
        width = 2 * self.words
        programs = [-(-n // pick_norm_config(n, width, fused_rows=True).block_n) for n in columns]
        self.stamps = ReaderStamps(programs, self.rows.device)
        return self.stamps

    def epochs(self) -> torch.Tensor:
        """[S, W, C / 2] the epoch of every word in this GPU's buffer: how many times each rank pushed each
        slot (what the tests check)."""
        return self.rows >> 32
