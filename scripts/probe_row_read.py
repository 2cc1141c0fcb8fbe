"""Issue 50's probe: what the fused kernels' first reads after their PDL wait cost (the residual row and the split
sum every block of the kernel in front wrote), whether a cluster that brings the row in once is cheaper, and what
the LayerNorm costs once the row is there (scripts/probe_row_read.cu says what each variant does):
- a check of every variant after one run from zeroed rows and again after its timed replays (the rows zeroed
  before one more replay): every row x[p] must hold what p launches give (p; p / 4 for global1; 1 for none, none_cl8
  and no_norm, which read row 0 only) and every row of d 0.25, so that a read before its producer's write, or of the
  wrong bytes, shows. A failed check exits 1; a launch the GPU refuses is said and skipped;
- the timing: each variant's P launches captured in one CUDA graph, replayed back to back, in interleaved rounds;
  µs a launch (median of rounds), and that minus the `none` variant's (the read alone); then one stamped run of
  each, whose per-block stamps say how a launch's time splits (work after the wait, the handoff, the lead).

python scripts/probe_row_read.py [--phases 200] [--rounds 7] [--replays 20] [--variants ...] [--spin-cycles N]
    [--json OUT]
Outside the engine on purpose: it bounds what a multicast row, or a cheaper LayerNorm, could save per kernel before
the engine's kernels are rebuilt on it (docs/BENCHMARKS.md, session 63).
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

C, ROWS = 768, 4
BLOCKS = C // 6  # every block writes 6 columns of the split sum
# variant -> the .cu's `chain` variant number
VARIANTS = {
    "none": 0,
    "global": 1,
    "global1": 2,
    "bulk": 3,
    "mc2": 4,
    "mc4": 5,
    "mc8": 6,
    "dsmem4": 7,
    "no_norm": 8,
    "global_cl8": 9,
    "none_cl8": 10,
}


class Case:
    """One variant: its rows (kept alive while a graph replays them) and a run of its chain."""

    def __init__(self, mod, variant: str, phases: int, spin: int):
        self.mod, self.variant, self.phases, self.spin = mod, variant, phases, spin
        self.x = torch.zeros(phases + 1, C, dtype=torch.float16, device="cuda")  # [P + 1, C]
        self.d = torch.zeros(phases + 1, ROWS, C, device="cuda")  # [P + 1, 4, C]
        self.d[0] = 0.25  # the input: s = x[0] + the 4 rows = 1
        self.ln_w = torch.ones(C, dtype=torch.float16, device="cuda")
        self.ln_b = torch.zeros(C, dtype=torch.float16, device="cuda")
        self.no_stamps = torch.empty(0, dtype=torch.int64, device="cuda")

    def run(self, stamps: torch.Tensor | None = None):
        st = self.no_stamps if stamps is None else stamps
        self.mod.chain(
            self.x, self.d, self.ln_w, self.ln_b, self.phases, VARIANTS[self.variant], self.spin, st
        )

    def stamped(self) -> dict[str, float]:
        """One run with every block's stamps (start, past the wait, end), launched eagerly (not from the graph the
        timing replays, so its handoff and lead may differ from the replays'): the mean over launches 2 .. P of the
        chain's parts in µs (a mean: %globaltimer ticks in 0.256 µs steps on the H200, so medians land on ticks).
        work: a block's wait to its end (median over blocks); handoff: the last block's end of the launch before to
        the last block past this launch's wait; period: last end to last end; lead: how long before the launch in
        front ended this launch's last block started (negative: after it)."""
        stamps = torch.zeros(self.phases + 1, 3, BLOCKS, dtype=torch.int64, device="cuda")
        self.run(stamps)
        torch.cuda.synchronize()
        t = stamps[1:].double().cpu()  # [P, 3, G] ns
        start, wait, end = t[:, 0], t[:, 1], t[:, 2]
        last_end = end.max(dim=1).values  # [P]
        parts = {
            "work": (end - wait).median(dim=1).values[1:],
            "handoff": wait.max(dim=1).values[1:] - last_end[:-1],
            "period": last_end[1:] - last_end[:-1],
            "lead": last_end[:-1] - start.max(dim=1).values[1:],
        }
        return {k: float(v.mean()) / 1e3 for k, v in parts.items()}

    def clear(self) -> None:
        """Every row but the input zeroed: a read that ran early would find zeros."""
        self.x[1:] = 0
        self.d[1:] = 0

    def verify(self) -> str | None:
        """None when every row holds what the chain's launches give it; else what went wrong."""
        torch.cuda.synchronize()
        p = torch.arange(1, self.phases + 1, device="cuda", dtype=torch.float32)
        one = torch.ones_like(p)  # none and no_norm read row 0 only
        want = {"none": one, "no_norm": one, "none_cl8": one, "global1": p / 4}.get(self.variant, p)
        x = self.x[1:].float()  # [P, C]
        bad = (x != want[:, None]).any(dim=1).nonzero()
        if bad.numel():
            first = int(bad[0].item())
            return f"x[{first + 1}] holds {x[first].min().item()} to {x[first].max().item()}, not {want[first].item()}"
        d = self.d[1:]
        if not bool((d == 0.25).all()):
            first = int((d != 0.25).flatten(1).any(dim=1).nonzero()[0].item())
            return f"d[{first + 1}] holds {d[first].min().item()} to {d[first].max().item()}, not 0.25"
        return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--phases", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--replays", type=int, default=20)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument(
        "--spin-cycles",
        type=int,
        default=7000,
        help="clock cycles of work after the LayerNorm (7,000: about the attention's 3.6 us after it at 1.98 GHz)",
    )
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    built = build_on_gpu("probe_row_read")
    if built is None:
        return 2
    mod, seconds = built
    print(f"built in {seconds:.1f} s", flush=True)
    result = {"device": torch.cuda.get_device_name(), "spin_cycles": args.spin_cycles, "checks": {}, "us": {}}
    ok = True
    cases, graphs = {}, {}
    for v in args.variants.split(","):
        case = Case(mod, v, args.phases, args.spin_cycles)
        try:
            case.run()
            torch.cuda.synchronize()
        except RuntimeError as e:  # a launch this GPU refuses
            why = f"not run: {str(e).splitlines()[0]}"
            result["checks"][v] = why
            print(f"{v}: {why}", flush=True)
            continue
        why = case.verify()
        result["checks"][v] = why or "ok"
        if why:
            print(f"{v}: {why}", flush=True)
            ok = False
            continue
        cases[v], graphs[v] = case, captured(case.run)[0]
    order = list(graphs)
    times = {v: [] for v in order}
    for r in range(args.rounds if order else 0):
        for v in order[r % len(order) :] + order[: r % len(order)]:
            times[v].append(replays_us(graphs[v], args.replays) / args.phases)
    for v in order:  # the replays checked too, from zeroed rows
        cases[v].clear()
        graphs[v].replay()
        why = cases[v].verify()
        result["checks"][f"{v} after the replays"] = why or "ok"
        if why:
            print(f"{v} after the replays: {why}", flush=True)
            ok = False
    result["stamped"] = {v: cases[v].stamped() for v in order}
    floor = statistics.median(times["none"]) if times.get("none") else 0.0
    print(
        f"128 blocks of 256 threads, {args.phases} launches, {args.spin_cycles} cycles after the LayerNorm: "
        f"µs a launch (median of {args.rounds} rounds)"
    )
    for v in order:
        med = statistics.median(times[v])
        rounds = " ".join(f"{t:.3f}" for t in times[v])
        print(f"  {v:8s} {med:7.3f}   minus none {med - floor:7.3f}   rounds {rounds}")
    print("one stamped run, mean over launches (µs): work after the wait / handoff / period / lead")
    for v in order:
        st = result["stamped"][v]
        print(f"  {v:8s} {st['work']:6.3f} {st['handoff']:6.3f} {st['period']:6.3f} {st['lead']:6.3f}")
    result["us"] = times
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
