"""Holistic Trace Analysis' kernel breakdown of one trace folder, timed, with its totals (run in HTA's venv).

Usage: /tmp/hta-venv/bin/python scripts/bench_hta_kernels.py TRACE_DIR
Prints one JSON line: seconds (load + breakdown) and HTA's total GPU time per kernel type, in us.
"""

import json
import sys
import time

t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis  # noqa: E402

analyzer = TraceAnalysis(trace_dir=sys.argv[1])
kernel_type_df, kernel_df = analyzer.get_gpu_kernel_breakdown(visualize=False, include_memory_kernels=True)
seconds = time.perf_counter() - t0
by_type = dict(zip(kernel_type_df["kernel_type"], kernel_type_df["sum"]))
print(json.dumps({"seconds": round(seconds, 2), "sum_us_by_type": {k: float(v) for k, v in by_type.items()}}))
