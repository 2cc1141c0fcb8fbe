"""Regions: one row per (domain, range name), like `nsys stats`' NVTX summary."""

from __future__ import annotations

import numpy as np

from roseprof.analysis.gpu_regions import gpu_ns_by_key
from roseprof.analysis.sections.base import Context, Section, SectionResult
from roseprof.analysis.stats import group_percentiles
from roseprof.run.checks import NUM, OPT_NUM


def compute(ctx: Context) -> SectionResult:
    trace, tree, gpu = ctx.trace, ctx.tree, ctx.gpu
    start, end = trace.ranges.start, trace.ranges.end
    dur = end - start
    has_gpu = trace.has_gpu
    regions = []
    if len(start):
        key = trace.ranges.domain * (len(trace.names) + 1) + trace.ranges.name
        pct = group_percentiles(key, dur)
        uniq, inverse = np.unique(key, return_inverse=True)
        count = np.bincount(inverse)
        total = np.bincount(inverse, weights=dur)
        self_total = np.bincount(inverse, weights=tree.self_ns)
        has_ops = gpu.op_count > 0
        proj = np.where(has_ops, gpu.proj_end - gpu.proj_start, 0)
        proj_total = np.bincount(inverse, weights=proj)
        kern_total = np.bincount(inverse, weights=gpu.kernel_ns)
        graph_total = np.bincount(inverse, weights=ctx.graph_ns)
        # Kernel time with graph replays counted where captured (gpu_regions.py): what the views show.
        present, by_capture = gpu_ns_by_key(trace, tree, gpu.op_range, ctx.capture, inverse.ravel())
        gpu_total = np.zeros(len(uniq), dtype=np.int64)
        gpu_total[present] = by_capture[0]
        for j, k in enumerate(uniq):
            name_id, dom_id = int(k % (len(trace.names) + 1)), int(k // (len(trace.names) + 1))
            p50, p99 = pct[int(k)]
            regions.append(
                {
                    "name": trace.names[name_id],
                    "domain": trace.domains[dom_id],
                    "count": int(count[j]),
                    "total_ns": int(total[j]),
                    "self_ns": int(self_total[j]),
                    "gpu_proj_ns": int(proj_total[j]) if has_gpu else None,
                    "gpu_kernel_ns": int(kern_total[j]) if has_gpu else None,
                    "gpu_graph_ns": int(graph_total[j]) if has_gpu else None,
                    "gpu_ns": int(gpu_total[j]) if has_gpu else None,
                    "p50_ns": p50,
                    "p99_ns": p99,
                }
            )
        regions.sort(key=lambda r: -r["total_ns"])
    return SectionResult({"regions": regions})


# What a stored summary.json must hold here (run/checks.py's spec language).
CHECKS = {
    "regions": (
        [
            {
                "name": str,
                "domain": str,
                "count": int,
                "total_ns": NUM,
                "self_ns": NUM,
                "gpu_proj_ns": OPT_NUM,
                "gpu_kernel_ns": OPT_NUM,
                "p50_ns": OPT_NUM,
                "p99_ns": OPT_NUM,
            }
        ],
        None,
    ),
}

SECTION = Section("regions", compute, checks=CHECKS)
