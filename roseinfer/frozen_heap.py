"""Python's cyclic garbage collector kept off the objects of a process's start-up.

A process that holds an engine tracks about 286,000 container objects once the model is loaded (GPT-2 small on the
CPU machine: torch's modules and parameters, transformers', the tokenizer's). A full collection walks all of them:
134-228 ms on the busy 2-core CPU machine (docs/BENCHMARKS.md, session 60), which in a decode loop is one token's
latency spike of that size, and a collection of the middle generation walks the start-up's objects that one
collection has not yet promoted (on an H200 at batch 1, one of 1.3-1.4 ms in a 256-token run, the GPU idle behind
it). `freeze_startup_heap` runs one full collection, then moves every object alive into the permanent generation
that no collection walks: later collections walk only what the process allocates afterwards.

For processes whose engine lives as long as they do, after the engine is built: the server's engine core, a
tensor-parallel worker, a benchmark run as `python -m` (and each rank it starts). Never in a library call (`LLM`,
a benchmark's `main` called by a test): its caller owns the process, and a cycle among frozen objects that turns to
garbage (an engine dropped by a process that builds several: the model runner, the model and the KV cache hold one
another through bound methods) is never collected.
"""

from __future__ import annotations

import gc

from roseinfer.exit_hooks import sigint_held


def freeze_startup_heap() -> None:
    """One full collection, then every object alive frozen (for the process's life). A Ctrl-C during the collection
    (100-200 ms) would run its handler inside a callback or finalizer that the collector calls (the step log's
    `gc.callbacks` hook, say), where the KeyboardInterrupt is printed and dropped and the run goes on to its end
    (tests/roseinfer/test_bad_input.py caught it): it is held, and raised once the collection is over."""
    with sigint_held(raise_after=True):
        gc.collect()
    gc.freeze()
