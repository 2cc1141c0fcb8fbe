"""How often does the group comparison call same-code groups significant? Simulated groups of RUNS runs a side whose
runs drift by TAU between runs (and scatter 5% step to step): the plain percentile interval over the hierarchical
bootstrap, the expanded one (session 5: each side widened by sqrt(n/(n-1)) t(n-1)/z), and the one `roseprof diff`
uses since session 6 (bootstrap.group_interval: within- and between-run variance, Welch's t), alone and with a 10%
noise floor (noise_floor.clears).

    python scripts/gate_calibration.py [--trials 300] [--runs 3]
"""

import argparse

import numpy as np

from roseprof.analysis.bootstrap import expansion, group_interval, interval
from roseprof.analysis.diff import Sample
from roseprof.analysis.noise_floor import clears

METHODS = ("plain", "expanded", "welch", "welch, 10% floor")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--trials", type=int, default=300)
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args()
    rng = np.random.default_rng(1)
    print(f"{args.runs} runs a side; share of pairs called significant")
    print("| tau (drift between runs) | true change | " + " | ".join(METHODS) + " |")
    print("|---" * (2 + len(METHODS)) + "|")
    for tau, effect in ((0.03, 1), (0.05, 1), (0.10, 1), (0.15, 1), (0.05, 1.2), (0.10, 1.5), (0.10, 2.0)):
        counts = np.zeros(len(METHODS))
        for t in range(args.trials):

            def group(scale, tau=tau):
                return Sample(
                    [
                        scale * (1 + rng.normal(0, tau)) * (1 + rng.normal(0, 0.05, 128))
                        for _ in range(args.runs)
                    ]
                )

            a, b = group(1.0), group(effect)
            r = np.random.default_rng(t)
            sa, sb = a.spread(np.mean, r), b.spread(np.mean, r)
            (ca, ra, _, _), (cb, rb, _, _) = sa, sb
            cis = [interval(ra, rb)]
            e = expansion(args.runs)
            cis.append(interval(ca + (ra - ca) * e, cb + (rb - cb) * e))
            cis.append(group_interval(sa, sb))
            for j, (lo, hi) in enumerate(cis):
                counts[j] += lo > 0 or hi < 0
            counts[3] += clears(*cis[2], 10.0)
        shares = " | ".join(f"{c / args.trials:.3f}" for c in counts)
        change = "none" if effect == 1 else f"x{effect:g}"
        print(f"| {tau:.0%} | {change} | {shares} |")


if __name__ == "__main__":
    main()
