"""How often does the group comparison call same-code groups significant? Simulated groups of 3 runs a side whose
runs drift by TAU between runs (and scatter 5% step to step), with and without the small-sample expansion.

    python scripts/gate_calibration.py [--trials 300]
"""

import argparse

import numpy as np

from roseprof.analysis.diff import Sample
from roseprof.analysis.stats import expansion, interval


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--trials", type=int, default=300)
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args()
    rng = np.random.default_rng(1)
    print("tau   effect  plain: significant / and >10%   expanded: significant / and >10%")
    for tau, effect in ((0.03, 1), (0.05, 1), (0.10, 1), (0.15, 1), (0.05, 1.2), (0.10, 2.0)):
        counts = np.zeros(4)
        for t in range(args.trials):

            def group(scale, tau=tau):
                return Sample(
                    [
                        scale * (1 + rng.normal(0, tau)) * (1 + rng.normal(0, 0.05, 128))
                        for _ in range(args.runs)
                    ]
                )

            a, b = group(1.0), group(effect)
            delta = 100 * (b.value(np.mean) / a.value(np.mean) - 1)
            for j, widen in enumerate((1.0, expansion(args.runs))):
                r = np.random.default_rng(t)
                ra = _raw(a, r)
                rb = _raw(b, r)
                ca, cb = a.value(np.mean), b.value(np.mean)
                lo, hi = interval(ca + (ra - ca) * widen, cb + (rb - cb) * widen)
                sig = lo > 0 or hi < 0
                counts[2 * j] += sig
                counts[2 * j + 1] += sig and abs(delta) > 10
        c = counts / args.trials
        print(
            f"{tau:.2f}  {effect:.1f}     {c[0]:.3f} / {c[1]:.3f}                   {c[2]:.3f} / {c[3]:.3f}"
        )


def _raw(sample: Sample, rng) -> np.ndarray:
    """The plain hierarchical bootstrap (no expansion)."""
    from roseprof.analysis.stats import hierarchical

    return hierarchical(sample.values, np.mean, rng)


if __name__ == "__main__":
    main()
