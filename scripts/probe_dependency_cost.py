"""Issue 50's probe: what one dependency between blocks costs on the GPU, by each means a decode step could use
(scripts/probe_dependency_cost.cu says what each variant does):
- a check of every variant at each grid size, after one run from zeroed buffers and again after its timed replays:
  every slot of the last phase must hold the phase count (LL: its run's epoch plus it), so that a read that ran
  before its producer's write, or took an earlier replay's word, shows as a short slot; and no spin gave up. A
  failed check exits 1; a launch or capture the GPU refuses is said and skipped;
- the timing: each variant's P phases captured in one CUDA graph, replayed back to back, in interleaved rounds;
  µs a phase (median of rounds), and that minus the `none` variant's (the dependency alone).

python scripts/probe_dependency_cost.py [--blocks 64,96,128] [--phases 200] [--rounds 5] [--replays 20] [--json OUT]
Outside the engine on purpose: it bounds what a persistent step or a cluster-reduced K split could save per
dependency before either is built (docs/BENCHMARKS.md, session 58).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch
from probe_build import build_on_gpu

from roseinfer.bench.timing import captured, replays_us

THREADS = 256
# variant -> how it runs: ("kernels", pdl) or ("persistent", mode of the .cu's enum)
VARIANTS = {
    "kernels": ("kernels", False),
    "kernels_pdl": ("kernels", True),
    "counter": ("persistent", 1),
    "flag": ("persistent", 2),
    "cluster": ("persistent", 3),
    "grid_sync": ("persistent", 4),
    "counter_no_fence": ("persistent", 5),
    "flag_no_fence": ("persistent", 6),
    "ll": ("persistent", 7),
    "ll_fanin8": ("persistent", 8),
    "ll_backoff": ("persistent", 9),
    "ll_fanin8_backoff": ("persistent", 10),
    "none": ("persistent", 0),
}


class Case:
    """One variant at one grid size: its buffers (kept alive while a graph replays them) and a run of it."""

    def __init__(self, mod, variant: str, blocks: int, phases: int):
        self.mod, self.variant, self.blocks, self.phases = mod, variant, blocks, phases
        self.buf = torch.zeros(phases, blocks, THREADS, device="cuda")  # [P, G, 256]
        self.flags = torch.zeros(blocks, dtype=torch.int32, device="cuda")
        # the give-up flag, unused, each block's LL epoch (its runs so far)
        self.stuck = torch.zeros(2 + blocks, dtype=torch.int32, device="cuda")
        self.ll = variant.startswith("ll")
        self.lines = torch.zeros(
            (phases, blocks, THREADS) if self.ll else (0,), dtype=torch.int64, device="cuda"
        )

    def run(self):
        how, arg = VARIANTS[self.variant]
        if how == "kernels":
            self.mod.kernels(self.buf, self.phases, self.blocks, arg)
        else:
            self.mod.persistent(self.buf, self.phases, self.blocks, arg, self.flags, self.stuck, self.lines)

    def first_run(self) -> None:
        """One run from zeroed buffers (a launch this GPU refuses raises RuntimeError)."""
        self.buf.zero_()
        self.stuck.zero_()
        self.lines.zero_()
        self.run()
        torch.cuda.synchronize()

    def verify(self) -> str | None:
        """None when the last run left every last slot at P (LL: its epoch + P) and no spin gave up; else what went
        wrong. A read that ran before its producer's write (or took an earlier replay's word) leaves a slot short."""
        torch.cuda.synchronize()
        if int(self.stuck[0].item()):
            return "a spin gave up after 2 s"
        want = self.phases
        if self.ll:
            epochs = self.stuck[2:]
            if not bool((epochs == epochs[0]).all()):
                return "the blocks' epochs disagree"
            want += int(epochs[0].item()) - 1
        last = self.buf[-1]
        if not bool((last == want).all()):
            return f"last phase holds {last.min().item():.0f} to {last.max().item():.0f}, not {want}"
        return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--blocks", default="64,96,128", help="grid sizes (multiples of 8)")
    ap.add_argument("--phases", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--replays", type=int, default=20)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    built = build_on_gpu("probe_dependency_cost")
    if built is None:
        return 2
    mod, seconds = built
    print(f"built in {seconds:.1f} s", flush=True)
    resident = mod.resident_blocks()
    variants = args.variants.split(",")
    result = {"device": torch.cuda.get_device_name(), "resident_blocks": resident, "checks": {}, "us": {}}
    ok = True
    for blocks in (int(b) for b in args.blocks.split(",")):
        if blocks > resident:
            print(f"{blocks} blocks: only {resident} fit at once; skipped", flush=True)
            continue
        cases, graphs = {}, {}
        for v in variants:
            case = Case(mod, v, blocks, args.phases)
            try:
                case.first_run()
                refused = None
            # a launch this GPU refuses
            except RuntimeError as e:
                refused = f"not run: {str(e).splitlines()[0]}"
            why = refused or case.verify()
            if why is None:
                try:
                    graphs[v] = captured(case.run)[0]
                except RuntimeError as e:  # a capture refused (a cooperative launch in a graph)
                    why = refused = f"not run: {str(e).splitlines()[0]}"
            result["checks"][f"{v}@{blocks}"] = why or "ok"
            if why:
                print(f"{v} at {blocks} blocks: {why}", flush=True)
                ok = ok and refused is not None
                continue
            cases[v] = case
        times = {v: [] for v in graphs}
        order = list(graphs)
        if not order:
            continue
        for r in range(args.rounds):
            for v in order[r % len(order) :] + order[: r % len(order)]:
                times[v].append(replays_us(graphs[v], args.replays) / args.phases)
        for v in order:  # the replays checked too: a give-up would have timed waits that did not wait
            why = cases[v].verify()
            result["checks"][f"{v}@{blocks} after the replays"] = why or "ok"
            if why:
                print(f"{v} at {blocks} blocks, after the replays: {why}", flush=True)
                ok = False
        floor = statistics.median(times["none"]) if "none" in times else 0.0
        print(
            f"{blocks} blocks of {THREADS} threads, {args.phases} phases: µs a phase (median of {args.rounds} rounds)"
        )
        for v in order:
            med = statistics.median(times[v])
            print(
                f"  {v:12s} {med:7.3f}   minus none {med - floor:7.3f}   rounds {' '.join(f'{t:.3f}' for t in times[v])}"
            )
        result["us"][str(blocks)] = times
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
