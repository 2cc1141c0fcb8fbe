"""How many intra-op threads torch uses when the engine runs on the CPU.

torch's default is one OpenMP thread per core. A decode step of a small model is a few hundred small GEMMs, each
split across those threads and ended by a barrier at which a thread spins until its partners arrive. On a machine
that other processes share (CI boxes, laptops, a 2-core VM running a test suite) a partner is often descheduled,
and the spinning thread burns its slice waiting for it: the CPU demo's step p50 went from 17 ms on a quiet 2-core
machine to 84-158 ms with other work running, 1.24 s inside a busy test suite (docs/BENCHMARKS.md, issue 21).
One thread has no barrier to wait at, so it slows down only by the share of the core it loses.

The choice, in order:
1. the engine option `cpu_threads` (benchmark flag `--cpu-threads`), when given;
2. `OMP_NUM_THREADS`, when the user set it (they chose for their machine);
3. otherwise 1 thread for models up to GPT-2 small's width (their GEMMs are too small for a split to pay for
   its barriers once anything else runs), and half of this process' usable cores for wider models, leaving
   the other half to whatever shares the machine.

torch's thread count is per process, so the engine sets it for the whole process it runs in.
"""

from __future__ import annotations

import os

import torch

# Models at or below this width run single-threaded by default (gpt2-tiny 128, gpt2 768).
SMALL_MODEL_MAX_WIDTH = 768


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask, which containers and taskset narrow)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def choose(n_embd: int, requested: int | None) -> tuple[int, str]:
    """The intra-op thread count for a model of width `n_embd`, and where the number came from."""
    if requested is not None:
        return requested, "cpu_threads option"
    env = os.environ.get("OMP_NUM_THREADS", "").strip()
    if env.isdigit() and int(env) >= 1:
        return int(env), "OMP_NUM_THREADS"
    if n_embd <= SMALL_MODEL_MAX_WIDTH:
        return 1, f"default: 1 for models up to {SMALL_MODEL_MAX_WIDTH} wide"
    return max(1, usable_cores() // 2), "default: half the usable cores for wider models"


def apply(n_embd: int, requested: int | None) -> tuple[int, str]:
    """Set torch's intra-op threads for this process; returns the count and its reason."""
    threads, reason = choose(n_embd, requested)
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    return threads, reason
