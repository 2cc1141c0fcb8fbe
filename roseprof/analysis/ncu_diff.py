"""Two Nsight Compute runs compared kernel by kernel, metric by metric.

Each kernel's launches are its sample: for every kernel profiled in both runs and every metric below that both
have, the mean over launches is compared with diff_metric.py's bootstrap interval (resampling launches). Kernels that
appeared or vanished are named by diff.kernel_changes, as for any run. Run totals of kernel time are left out for
ncu runs: they count how many launches the filters chose, not how fast the kernel is.
"""

from __future__ import annotations

import numpy as np

from roseprof.analysis.bootstrap import CONFIDENCE, MIN_SAMPLES, RESAMPLES
from roseprof.analysis.diff_metric import metric as bootstrap_metric
from roseprof.analysis.ncu import kernel_names
from roseprof.model import Trace

METHOD = (
    f"bootstrap: {RESAMPLES} resamples of each kernel's profiled launches, {int(CONFIDENCE * 100)}% percentile "
    "interval of the relative change of the mean per launch; a change when it clears the noise floor; no interval under "
    f"{MIN_SAMPLES} launches; kernels matched by name"
)
# (metric, lower is better): time and DRAM traffic should fall; throughput and occupancy rise for the same work.
METRICS = (
    ("duration_ns", True),
    ("sm_throughput_pct", False),
    ("memory_throughput_pct", False),
    ("dram_throughput_pct", False),
    ("achieved_occupancy_pct", False),
    ("dram_read_bytes", True),
    ("dram_write_bytes", True),
)


def samples(trace: Trace) -> dict[str, dict[str, np.ndarray]]:
    """kernel name -> metric -> [n] values over its launches (launches without the metric left out)."""
    km = trace.kernel_metrics
    if km is None:
        return {}
    names = np.array(kernel_names(trace), dtype=object)
    out: dict[str, dict[str, np.ndarray]] = {}
    for name in sorted(set(names.tolist())):
        sel = names == name
        per = {}
        for metric, _ in METRICS:
            v = km.value(metric)[sel]
            v = v[~np.isnan(v)]
            if len(v):
                per[metric] = v
        out[name] = per
    return out


def compare(a: Trace, b: Trace, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    sa, sb = samples(a), samples(b)
    out = []
    for kernel in sorted(set(sa) & set(sb)):
        for metric, lower in METRICS:
            if metric in sa[kernel] and metric in sb[kernel]:
                m = bootstrap_metric(
                    f"ncu.{kernel}.{metric}",
                    sa[kernel][metric],
                    sb[kernel][metric],
                    np.mean,
                    rng=rng,
                    lower_is_better=lower,
                )
                m.pop("n_a"), m.pop("n_b")
                m["per_step"] = False
                out.append(m)
    return out
