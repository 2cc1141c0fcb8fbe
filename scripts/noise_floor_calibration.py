"""Calibrate the diff's noise floors from runs of the same code (roseprof/analysis/noise_floor.py).

    python scripts/noise_floor_calibration.py TRACES NAME NAME [NAME...] [--gate 10] [--json OUT]

Every NAME is a group of complete runs of one command (e.g. scripts/diff_acceptance.sh's same-a, same-b, same-c:
the same code, captured interleaved). With no floor (every interval judged against 0):
  - each pair of groups (all their runs a side, the hierarchical bootstrap) and
  - each pair of single runs (one run a side, the within-run bootstrap)
are compared, and for every metric family the script prints how far beyond zero the intervals of same-code pairs
reached (the clearance: ci_low for a rise; for a fall the floor f it would clear, -100 ci_high / (100 + ci_high)).
A floor above the groups' largest clearance calls no same-code group pair a change. Then, with the floors now in
noise_floor.py (the one-run floors for single runs), how many pairs still fire the default gate at --gate percent
and how many print a faster/slower word anywhere. Last, what `roseprof diff` itself says of every pair, groups and
single runs (its one decision, analysis/decision.py: the machine's figures apart from the code's): how often its gate
fails, its first line has a faster/slower word for the code, and it names a slower machine.
"""

import argparse
import itertools
import json
import sys
from pathlib import Path

import numpy as np

from roseprof.analysis import decision, noise_floor
from roseprof.analysis.diff import compare, floor_for, gate
from roseprof.analysis.noise_floor import NoiseFloor, family
from roseprof.analysis.verdict import verdict
from roseprof.api import diff_runs, load_run, open_store, resolve_side


def clearance(m: dict) -> float:
    lo, hi = m.get("ci_low_pct"), m.get("ci_high_pct")
    if lo is None or hi is None or hi - lo <= noise_floor.ZERO_WIDTH:
        return 0.0
    if lo > 0:
        return lo
    if hi < 0:
        return -100.0 * hi / (100.0 + hi)
    return 0.0


def per_family(metrics: list[dict], out: dict) -> None:
    """out[family] gets (clearance, metric name) of every metric with an interval."""
    for m in metrics:
        if m.get("ci_low_pct") is not None:
            out.setdefault(family(m["name"]), []).append((clearance(m), m["name"]))


def said_by_diff(store, pairs: list[tuple[list[str], list[str]]], threshold: float) -> dict:
    """What `roseprof diff A B --fail-on-regression threshold` says of each pair (refs: a group's name or a run's
    id): the counts of pairs whose gate failed, whose decision has a faster/slower word for the code (the machine's
    figures are not the code's) and which named a slower machine."""
    out = {"pairs": 0, "gate_failed": 0, "code_worded": 0, "machine_named": 0}
    for refs_a, refs_b in pairs:
        result = diff_runs(store, refs_a, refs_b, threshold, None, allow_incomplete=False).result
        decided = result["verdict"]["decision"]
        out["pairs"] += 1
        out["gate_failed"] += bool(result["regressions"])
        out["code_worded"] += decided["overall"] in (*decision.DIRECTIONS, "mixed")  # "mixed": both words
        out["machine_named"] += decided["slower_machine"] is not None
    return out


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("traces")
    p.add_argument("names", nargs="+")
    p.add_argument("--gate", type=float, default=10.0)
    p.add_argument("--json", dest="json_out")
    args = p.parse_args()
    store = open_store(args.traces)
    groups = {n: resolve_side(store, [n], latest=False) for n in args.names}
    data = {r.id: load_run(r) for runs in groups.values() for r in runs}
    some = list(data.values())
    floor = floor_for(some[:2], some[2:])  # the groups' floors
    one_run = floor_for(some[0], some[1])
    zero = NoiseFloor(floor.device, min_effect_pct=0)
    print(f"device: {floor.device}; groups: " + ", ".join(f"{n} ({len(r)} runs)" for n, r in groups.items()))
    group_cl: dict[str, list] = {}
    for a, b in itertools.combinations(args.names, 2):
        ga, gb = [data[r.id] for r in groups[a]], [data[r.id] for r in groups[b]]
        metrics = compare(ga, gb, floor=zero)
        per_family(metrics, group_cl)
        fired = [m["name"] for m in gate(compare(ga, gb, floor=floor), args.gate, None)]
        changed = [m["name"] for m in compare(ga, gb, floor=floor) if m["significant"]]
        print(f"groups {a} vs {b}: gate {'fired: ' + ', '.join(fired) if fired else 'quiet'}; "
              f"changes beyond the floors: {len(changed)} {changed[:4]}")  # fmt: skip
    single_cl: dict[str, list] = {}
    fired_zero = fired_floor = worded = pairs = 0
    for ra, rb in itertools.combinations(list(data), 2):
        metrics = compare(data[ra], data[rb], floor=zero)
        per_family(metrics, single_cl)
        fired_zero += bool(gate(metrics, args.gate, None))
        floored = compare(data[ra], data[rb], floor=one_run)
        fired_floor += bool(gate(floored, args.gate, None))
        v = verdict(floored, {"id": ra}, {"id": rb})
        words = {r["word"] for r in v["headline"]} & {"faster", "slower"}
        worded += bool(words or v["regions"] or v["kernels"])
        pairs += 1
    print(f"\none run a side: {pairs} same-code pairs; default gate at {args.gate:g}% fired in {fired_zero} "
          f"with no floor, {fired_floor} with the one-run floors in noise_floor.py; a faster/slower word in "
          f"{worded}")  # fmt: skip
    product = {kind: said_by_diff(store, pairs_of, args.gate) for kind, pairs_of in (
        ("groups", [([a], [b]) for a, b in itertools.combinations(args.names, 2)]),
        ("one run a side", [([a], [b]) for a, b in itertools.combinations(list(data), 2)]))}  # fmt: skip
    for kind, said in product.items():
        print(f"roseprof diff, {kind}: {said['pairs']} same-code pairs; its gate at {args.gate:g}% failed in "
              f"{said['gate_failed']}, a faster/slower word for the code in {said['code_worded']}, a slower machine "
              f"named in {said['machine_named']}")  # fmt: skip
    print(
        "\n| family | groups: largest clearance (metric) | one run a side: p95 / largest clearance | floor now "
        "(groups / one run) |"
    )
    print("|---|---|---|---|")
    summary = {}
    for fam in sorted(set(group_cl) | set(single_cl)):
        g = max(group_cl.get(fam, [(0.0, "-")]))
        s = np.array([c for c, _ in single_cl.get(fam, [])] or [0.0])
        now = floor.floors.get(fam, floor.floors[noise_floor.OTHER])
        now_one = one_run.floors.get(fam, one_run.floors[noise_floor.OTHER])
        print(f"| {fam} | {g[0]:.1f}% ({g[1]}) | {np.percentile(s, 95):.1f}% / {s.max():.1f}% | {now:g}% / "
              f"{now_one:g}% |")  # fmt: skip
        summary[fam] = {"groups_max": g[0], "groups_max_metric": g[1], "single_p95": float(np.percentile(s, 95)),
                        "single_max": float(s.max()), "floor": now, "one_run_floor": now_one}  # fmt: skip
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"device": floor.device, "families": summary,
            "one_run": {"pairs": pairs, "fired_no_floor": fired_zero, "fired_floor": fired_floor,
                    "worded": worded}, "roseprof_diff": product}, indent=1))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
