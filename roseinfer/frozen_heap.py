"""Python's cyclic garbage collector kept off the objects that exist before a decode loop starts.

The collector runs inside the host loop that feeds the GPU. A collection of an older generation walks every object
in it, and after a model load that is most of the process: on an H200 at batch 1 one generation-1 collection per
256-token run took 1.3-1.4 ms of host time while the GPU, whose step is 0.13 ms, waited (docs/BENCHMARKS.md,
session 60). `gc.freeze()` moves every object alive now into a permanent generation that collections skip, so
during the loop they walk only what the loop itself allocates; `gc.unfreeze()` at its end hands them back, so
that a cycle among them that became garbage meanwhile is still collected later (nothing is frozen for good: a
process that builds and drops engines, as tests and variant sweeps do, leaks nothing). Both are O(1) (the
generation lists are spliced, no object is visited).

Loops may overlap (generate called from two threads): the heap is frozen while any loop runs and given back when
the last one ends. A server's engine loop runs for its process's life: the objects of its start-up stay frozen
while it serves, the requests it allocates are collected as ever.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_loops = 0  # decode loops running now


@contextmanager
def frozen_heap() -> Iterator[None]:
    """Freeze the heap for the loop inside (the first of nested loops freezes, the last one out unfreezes)."""
    global _loops
    with _lock:
        if _loops == 0:
            gc.freeze()
        _loops += 1
    try:
        yield
    finally:
        with _lock:
            _loops -= 1
            if _loops == 0:
                gc.unfreeze()
