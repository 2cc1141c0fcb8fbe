"""What the engine's region clocks cost while a steps window has them on (tracing.set_region_clocks), and that off
they cost nothing: decode steps with the clocks on and off alternating step by step inside one generate() (the
clocks switched between two steps, as a window does), so a drift of the shared machine's load, or of the step's
own length as the context grows, falls on both; beside it, blocks with the clocks off throughout, whose even and odd
steps compared the same way give the noise floor.

    python scripts/bench_region_clocks.py [--model gpt2-tiny] [--batch 8] [--tokens 64] [--blocks 8] [--wall-only]

--wall-only: the clocks as a GPU engine runs them (each region's wall time; no thread CPU time, whose clock read is
a system call), on this CPU engine.

Each block is one generate() of `batch` requests of `tokens` new tokens; its steps' wall times come from the
engine's own step records (a sink in place of the step log). Prints each block's ratio of step p50 (on / off; odd /
even for the floor) and their median with its range; docs/BENCHMARKS.md (session 23) has the figures.
"""

from __future__ import annotations

import argparse
import os
import statistics

from roseinfer import LLM, SamplingParams, tracing
from roseinfer.steplog import StepRecords


class AlternatingSink(StepRecords):
    """A step-log sink that keeps each decode step's wall time (ns) and whether it carried region times, and (when
    `alternate`) switches the clocks after every step, so the next step runs with the other setting."""

    def __init__(self, alternate: bool) -> None:
        self.alternate = alternate
        self.steps: list[tuple[int, bool]] = []

    def write(self, record: dict) -> None:
        if record["type"] == "step":
            self.steps.append((record["end_ns"] - record["start_ns"], "host_own_ns" in record))
            if self.alternate:
                tracing.set_region_clocks(not tracing.STATE.clocks_window)


def block(llm: LLM, alternate: bool, args) -> tuple[float, float, float]:
    """(p50 ms of one half of the steps, of the other, their ratio): with `alternate` the steps with the clocks on
    and those with them off; without, the odd steps and the even ones (all off)."""
    sink = AlternatingSink(alternate)
    llm.engine.steplog = sink
    try:
        llm.generate([[1] * 16] * args.batch, SamplingParams(max_new_tokens=args.tokens, ignore_eos=True))
    finally:
        tracing.set_region_clocks(False)
    steps = sink.steps[1:]  # the first step after the prefill: its own shape
    if alternate:
        on = [ns for ns, timed in steps if timed]
        off = [ns for ns, timed in steps if not timed]
        assert on and off and len(on) + len(off) == len(steps)
    else:
        assert not any(timed for _, timed in steps), "the clocks were on in an off block"
        on, off = [ns for ns, _ in steps[1::2]], [ns for ns, _ in steps[0::2]]
    a, b = statistics.median(on) / 1e6, statistics.median(off) / 1e6
    return a, b, a / b


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="gpt2-tiny")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--blocks", type=int, default=8)
    p.add_argument("--wall-only", action="store_true", help="no thread CPU times (a GPU engine's clocks)")
    args = p.parse_args()
    tracing.configure(nvtx=False, record_function=False)
    assert not tracing.STATE.enabled, (
        "a region switch is on in the environment: the off case would not be off"
    )
    llm = LLM(args.model, max_batch_size=args.batch)
    if args.wall_only:
        tracing.STATE.step_cpu = False  # the engine set it for a CPU engine on one thread
    block(llm, False, args)  # warm-up: allocator, KV pool
    ratios: dict[bool, list[float]] = {True: [], False: []}
    for i in range(args.blocks):
        for alternate in (True, False) if i % 2 == 0 else (False, True):
            a, b, r = block(llm, alternate, args)
            ratios[alternate].append(r)
            what = "on {:.3f} ms  off {:.3f} ms" if alternate else "off (odd) {:.3f} ms  off (even) {:.3f} ms"
            print(f"block {i}: " + what.format(a, b) + f"  ratio {r:.3f}")
    print(f"{args.model}, batch {args.batch}, {args.tokens} tokens a request, {args.blocks} blocks of each, "
          f"step_cpu {tracing.STATE.step_cpu}, load {os.getloadavg()[0]:.1f}")  # fmt: skip
    for label, alternate in (("clocks on / off", True), ("off / off (floor)", False)):
        r = ratios[alternate]
        print(f"{label}: median {statistics.median(r):.3f}  range [{min(r):.3f}, {max(r):.3f}]")


if __name__ == "__main__":
    main()
