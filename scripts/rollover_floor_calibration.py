"""Calibrate the floor of a region's CPU time in the rollover steps (issue 44, docs/BENCHMARKS.md session 21).

    python scripts/rollover_floor_calibration.py OUT [OUT ...]

Every OUT is a folder of scripts/ab_pairs.sh with one pair (ab1-base, ab1-flag, ab1-same, 3 runs each). For base
against same (the same code) and base against flag, as groups and as matched run pairs one run a side (the latest
against the latest, ...), each region's CPU time in the rollover steps by three statistics, every interval judged
against 0 (noise_floor_calibration.clearance: how far beyond 0 it reached):

    med      its median, each run's at that run's own pace of the region in its normal steps (what the diff uses:
             analysis/sections/steps.rollover_cpu)
    mean     the same with the mean
    medraw   the median, not paced

It prints kv.append_token's change and interval and the region that reached furthest, per pair and statistic."""

import sys
from pathlib import Path

import numpy as np

from roseprof import api
from roseprof.analysis.diff_metric import Sides, common, sample
from roseprof.run.store import RunStore

sys.path.insert(0, str(Path(__file__).parent))
from noise_floor_calibration import clearance  # noqa: E402

KV = "roseinfer.kv.append_token"
STATS = (("med", np.median, True), ("mean", np.mean, True), ("medraw", np.median, False))


def metrics(a, b, stat, paced: bool) -> list[dict]:
    sides = Sides(a, b, np.random.default_rng(0))
    runs, out = a + b, []
    for name in common([r.step_cpu for r in runs]):
        pace = np.array([np.median(r.step_cpu[name][~r.step_roll]) for r in runs])
        if not np.all(pace > 0):
            continue
        ref = float(np.exp(np.log(pace[: len(a)]).mean()))
        roll = [r.step_cpu[name][r.step_roll] * (ref / p if paced else 1.0) for r, p in zip(runs, pace)]
        out.append(sides.metric(name, sample(roll[: len(a)]), sample(roll[len(a) :]), stat))
    sides.intervals()
    return out


def main(folders: list[str]) -> None:
    for root in folders:
        store = RunStore(Path(root) / "traces")
        side = {
            n: [api.load_run(r) for r in api.resolve_side(store, [f"ab1-{n}"], latest=False)]
            for n in ("base", "flag", "same")
        }
        for other in ("same", "flag"):
            pairs = [("group", side["base"], side[other])] + [
                (f"run{i}", [x], [y])
                for i, (x, y) in enumerate(zip(reversed(side["base"]), reversed(side[other])))
            ]
            for kind, a, b in pairs:
                for label, stat, paced in STATS:
                    ms = metrics(a, b, stat, paced)
                    worst = max(ms, key=clearance)
                    kv = next(m for m in ms if m["name"] == KV)
                    change = f"{kv['delta_pct']:+.1f}% [{kv['ci_low_pct']:+.1f}, {kv['ci_high_pct']:+.1f}]"
                    print(
                        f"{root} {other} {kind} {label}: kv.append_token {change}; furthest "
                        f"{worst['name']} {clearance(worst):.1f}%",
                        flush=True,
                    )


if __name__ == "__main__":
    main(sys.argv[1:])
